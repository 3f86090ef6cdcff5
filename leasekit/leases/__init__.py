"""KV snapshot leases: the lease store in ZooKeeper (``acquire`` with its planner ``plan``,
``pins``, ``upkeep``: release, drop, expire) and the ``KvSnapshotLease`` handle (``lease``) with
keepalive and pinned Spark reads."""
