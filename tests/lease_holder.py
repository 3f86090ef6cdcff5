"""A lease held by a keepalive in a process of its own, for the inventory's orphan test (M4):
it acquires snapshot 1 of every bucket of TABLE under LEASE_ID with ``keepalive=True``, prints
``READY`` and sleeps until it is killed.

    python tests/lease_holder.py ZOOKEEPER WAREHOUSE NAMESPACE TABLE LEASE_ID [--duration D]
"""

from __future__ import annotations

import argparse
import sys
import time

import leasekit as lk


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    for name in ("zookeeper", "warehouse", "namespace", "table", "lease_id"):
        parser.add_argument(name)
    parser.add_argument("--duration", default="1h")
    args = parser.parse_args(argv)
    # a short session: the holder znode goes soon after the process dies
    with lk.connect(args.zookeeper, args.warehouse, namespace=args.namespace, timeout="2s") as conn:
        table = conn.table(args.table)
        with conn.lease(args.lease_id, args.duration, keepalive=True) as lease:
            lease.acquire({tb: 1 for tb in table.buckets})
            print("READY", flush=True)
            time.sleep(3600)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
