"""KV snapshots: the catalog (list, look up, delete) and taking new ones (Spark compaction,
then registration once the files are complete)."""
