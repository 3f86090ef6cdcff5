"""Spark I/O the library uses: the session, frames over a table's files, snapshot compaction,
and reads and log writes through Spark. It stands below consumers and leases, above the log and
snapshots; ``leasekit.spark`` is the public face over it."""
