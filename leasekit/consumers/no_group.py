"""The coordinator of a consumer without a ``group_id``: every bucket of the tables it
subscribes to is its own at once, and commits and committed offsets are refused (§6.5)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..errors import IllegalOperationError
from ..structs import OffsetAndMetadata, TableBucket
from .subscription import SUBSCRIBED, SubscriptionState

if TYPE_CHECKING:
    from .offsets import OffsetRecord

__all__ = ["NoGroupCoordinator"]


class NoGroupCoordinator:
    """A consumer without a group: it is assigned every bucket of the tables it subscribes to
    at once; it has no member id, no generation and no committed offsets."""

    member_id: str | None = None
    generation: int | None = None
    group_id: str | None = None
    has_work = suspended = False

    def __init__(self, subscription: SubscriptionState) -> None:
        self._sub = subscription

    def subscription_changed(self, *, in_poll: bool = False) -> None:
        """Assign every bucket of the subscribed tables. A change made inside ``poll`` (a pattern
        subscription following tables created or dropped, C17) is told to the listener: the
        buckets that left, then the ones that came."""
        if self._sub.mode != SUBSCRIBED:
            return
        before = set(self._sub.assignment())
        wanted = self._sub.subscribed_buckets()
        listener = self._sub.listener if in_poll else None
        revoked = before - set(wanted)
        if listener is not None and revoked:
            listener.on_buckets_revoked(revoked)
        self._sub.set_assignment(wanted)
        if listener is not None and set(wanted) - before:
            listener.on_buckets_assigned(set(wanted) - before)

    def unsubscribe(self) -> None:
        pass

    def poll(self) -> None:
        pass

    def polling(self) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()

    def require_group(self) -> str:
        raise _no_group()

    def starting_offsets(self, buckets: list[TableBucket]) -> dict[TableBucket, OffsetRecord]:
        return {}

    def fetch_committed(self, buckets: list[TableBucket]) -> dict[TableBucket, OffsetRecord]:
        raise _no_group()

    def commit(
        self, offsets: Mapping[TableBucket, OffsetAndMetadata], *, skip_dropped: bool = False
    ) -> None:
        raise _no_group()

    def close(self) -> None:
        pass


def _no_group() -> IllegalOperationError:
    return IllegalOperationError(
        "this consumer has no group_id: offsets cannot be committed or read"
    )
