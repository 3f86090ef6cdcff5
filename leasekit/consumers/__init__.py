"""Consumers of the offset log: the consumer that reads buckets by offset with positions,
seeks and commits, the committed offsets of groups, their administration and lag health."""
