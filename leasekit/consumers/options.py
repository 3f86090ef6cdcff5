"""A consumer's settings, checked before any I/O (docs/consumers.md, docs/security.md): the
reset policy, auto-commit, durations (huge ones typed errors or, for waits, "until records
come") and record limits."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, NamedTuple

from ..durations import parse_duration, parse_wait
from ..errors import InvalidArgumentError
from ..validate import check_bool, check_positive_int
from ..zk import MAX_SESSION_TIMEOUT as _ZK_SESSION_LIMIT

__all__ = [
    "RESET_POLICIES",
    "MAX_SESSION_TIMEOUT",
    "ConsumerSettings",
    "DEFAULT_SETTINGS",
    "ConsumerOptions",
    "consumer_options",
    "seconds",
    "timeout",
]

RESET_POLICIES = ("earliest", "latest", "none")
MAX_SESSION_TIMEOUT = timedelta(seconds=_ZK_SESSION_LIMIT)
"""ZooKeeper takes a session timeout in int32 milliseconds (about 24.8 days)."""


class ConsumerSettings(NamedTuple):
    """What a consumer is asked for, unchecked: the keywords of ``Connection.consumer``
    (docs/consumers.md), with their defaults written only here."""

    group_id: str | None = None
    """The consumer group; None: no group."""
    auto_offset_reset: str = "latest"
    """Where a bucket without a committed offset starts: "earliest", "latest" or "none"."""
    enable_auto_commit: bool = True
    """Commit the positions every ``auto_commit_interval``."""
    auto_commit_interval: Any = "5s"
    """A duration."""
    session_timeout: Any = "10s"
    """How long a silent member stays in the group (a duration)."""
    assignor: str = "sticky"
    """How buckets are spread over members: "sticky", "range" or "roundrobin"."""
    listener: Any = None
    """A ``BucketRebalanceListener``, or None."""
    max_poll_records: int = 10_000
    """The most records one ``poll`` returns."""
    max_poll_interval: Any = "5m"
    """The longest time between polls before the member leaves (a duration)."""
    parent_first: bool = True
    """K5: a new bucket is read only once its parents are drained (False: at once)."""


DEFAULT_SETTINGS = ConsumerSettings()


class ConsumerOptions(NamedTuple):
    """The checked settings of a consumer."""

    reset: str
    """auto_offset_reset (C5)."""
    auto_commit: bool
    auto_commit_interval: float
    """Seconds."""
    session_timeout: float
    """Seconds, at most MAX_SESSION_TIMEOUT."""
    max_poll_interval: float
    """Seconds; a huge one never fires."""
    max_poll_records: int
    parent_first: bool = True
    """K5: a new bucket is read only once its parents are drained (False: at once)."""
    exclusive_prefix: str | None = None
    """The member id prefix of an exclusive member (the data source's stream, D3): it joins
    only an empty group and keeps every other consumer out (``exclusive``); None: ordinary."""


def consumer_options(
    settings: ConsumerSettings, exclusive_prefix: str | None = None
) -> ConsumerOptions:
    """The settings checked (all but the group, assignor and listener, which their parts
    check); ``InvalidArgumentError`` (or ``InvalidTypeError``) for a bad one."""
    reset = settings.auto_offset_reset
    if reset not in RESET_POLICIES:  # C5: refused, never a silent fallback
        raise InvalidArgumentError(
            f"auto_offset_reset must be one of {', '.join(RESET_POLICIES)}, not {reset!r}"
        )
    check_bool(settings.enable_auto_commit, "enable_auto_commit")
    check_bool(settings.parent_first, "parent_first")
    session = seconds(settings.session_timeout, "session_timeout")
    idle = seconds(settings.max_poll_interval, "max_poll_interval")
    for name, value in (("session_timeout", session), ("max_poll_interval", idle)):
        if value <= 0:
            raise InvalidArgumentError(f"{name} must be greater than 0")
    if session > MAX_SESSION_TIMEOUT.total_seconds():
        raise InvalidArgumentError(
            f"session_timeout must be at most {MAX_SESSION_TIMEOUT.days}d "
            f"(ZooKeeper's limit), got {settings.session_timeout!r}"
        )
    return ConsumerOptions(
        reset,
        settings.enable_auto_commit,
        seconds(settings.auto_commit_interval, "auto_commit_interval"),
        session,
        idle,
        check_positive_int(settings.max_poll_records, "max_poll_records"),
        settings.parent_first,
        exclusive_prefix,
    )


def seconds(value: Any, what: str) -> float:
    """Seconds of the duration ``value``; ``InvalidDurationError`` when it is not one or is
    longer than ``MAX_DURATION`` (``parse_duration`` bounds every duration)."""
    return parse_duration(value, what=what).total_seconds()


def timeout(value: Any) -> float:
    """Seconds to wait for ``value`` (a duration); one longer than any duration leasekit takes
    (``MAX_DURATION``) waits until records come: ``math.inf``."""
    return parse_wait(value, what="timeout")
