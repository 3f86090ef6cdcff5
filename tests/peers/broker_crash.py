"""Starts a Kafka broker and exits without stopping it, as a crashed test run would; prints
the broker's pid first. Used by test_broker.py."""

import os
import sys

from peers.kafka_broker import KafkaBroker

broker = KafkaBroker(sys.argv[1])
broker.start()
print(broker.pid, flush=True)
os._exit(0)
