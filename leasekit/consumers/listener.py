"""The rebalance listener users subclass (C10, C15): told which buckets a consumer gains and loses,
inside its ``poll``."""

from __future__ import annotations

from ..structs import TableBucket

__all__ = ["BucketRebalanceListener"]


class BucketRebalanceListener:
    """Subclass it and pass it to ``conn.consumer(listener=...)`` or ``subscribe``. Both
    methods run inside ``poll`` (and ``unsubscribe``/``close``), revocation first (C10)."""

    def on_buckets_revoked(self, revoked: set[TableBucket]) -> None:
        """The consumer no longer owns ``revoked``; commit here what it has processed: the
        commit is accepted, and the next owner starts from it."""

    def on_buckets_assigned(self, assigned: set[TableBucket]) -> None:
        """The consumer now owns ``assigned`` too (empty when a rebalance gave it nothing new)."""
