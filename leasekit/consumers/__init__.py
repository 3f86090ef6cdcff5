"""Consumers of the offset log: committed offsets of groups (``offsets.py``), and the consumer
that reads buckets by offset with positions, seeks and commits."""
