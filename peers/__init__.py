"""What leasekit is measured and checked against: real peers run beside it.

``peers.maven`` copies a peer's jars from Maven Central into a cache outside the repository
(once; a second run downloads nothing), and ``peers.kafka_broker`` runs an Apache Kafka broker
(KRaft, one combined broker and controller on loopback) from them. The parity tests
(tests/peers/) and the side-by-side benchmarks (bench/, B14-B18 and B12-peer) use them.
``peers.seaweedfs`` runs a SeaweedFS S3 server on loopback, which an S3 warehouse's tests and
B1-S3 read through Spark's ``s3a`` file system, whose jars are the ``hadoop-aws`` project here.
"""
