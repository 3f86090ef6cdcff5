"""KV snapshot leases: the lease store in ZooKeeper (acquire, renew, release, drop, expire)
and the ``KvSnapshotLease`` handle with keepalive and pinned Spark reads."""
