"""The per-bucket offset log: appends (files first, offsets second), segment listing and
deletion, and the write-in-progress markers that keep orphan cleanup off live writes."""
