"""Kafka's client-side session timer for a group member (C16): after a gap between polls long
enough for its ZooKeeper session to have ended unnoticed (the process was stopped, or starved),
the member asks ZooKeeper whether it is still a member before it hands out anything it had
buffered; kazoo may not have heard of the expiry yet, and until it does the member would hand
out records the buckets' new owner reads too."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from ..errors import ZooKeeperUnavailableError

if TYPE_CHECKING:
    from collections.abc import Collection

    from ..structs import TableBucket
    from .group import GroupMember

__all__ = ["SessionCheck"]

log = logging.getLogger("leasekit.consumers")


class SessionCheck:
    """When a member last knew its session live, and the check after a gap: longer than a
    third of ``session_timeout`` (kazoo pings every third of it, so a shorter gap cannot have
    cost the session)."""

    def __init__(self, session_timeout: float, group_id: str) -> None:
        self.gap, self.group_id = session_timeout / 3, group_id
        self._live_at = time.monotonic()
        self.unconfirmed = False
        """ZooKeeper could not be asked: hand out nothing until a later check answers."""

    def gone(self, member: GroupMember | None, owned: Collection[TableBucket]) -> bool:
        """Whether the member's znode is gone (its session ended, or it was removed), asked of
        ZooKeeper through the member's own session only while it ``owned`` buckets, after a
        gap since the last call; False when it is there or when no check is due.

        Raises:
            CorruptMetadataError, PermissionDeniedError: as any read of the member's session.
        """
        now = time.monotonic()
        idle, self._live_at = now - self._live_at, now
        path = None if member is None else member.member_path
        if not owned or member is None or path is None or idle <= self.gap:
            return False
        try:
            stat = member.store.exists(path)  # makes kazoo hear of an expiry it missed
        except ZooKeeperUnavailableError:
            self.unconfirmed, self._live_at = True, 0.0  # asked again at the next poll
            return False
        self.unconfirmed, self._live_at = False, time.monotonic()
        if stat is None:
            log.warning(
                "consumer %s of group %s is no longer a member after %.1fs without polling "
                "(its session ended meanwhile): its buffered records are dropped, its buckets "
                "revoked, and it rejoins",
                member.member_id,
                self.group_id,
                idle,
            )
        return stat is None
