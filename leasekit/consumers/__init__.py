"""Consumers of the offset log: the consumer that reads buckets by offset with positions,
seeks and commits, the group protocol, committed offsets; group administration in ``admin``."""
