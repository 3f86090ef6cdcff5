"""The monitoring part of the ``Connection`` facade (DESIGN §6.12): the lag history of a group
and the overview of every group."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from ..context import Context

__all__ = ["MonitorMethods"]


class MonitorMethods:
    """Monitoring methods of ``Connection``; they act on its context."""

    _context: Context

    def lag_history(
        self, group_id: str, *, since: Any = None, until: Any = None, by_bucket: bool = False
    ) -> pd.DataFrame:
        """The group's lag over time, from the samples the janitor (or ``leasekit exporter``)
        takes of every group every ``monitor.interval``, live or stopped (M1).

        Arguments:
            group_id: the group.
            since: the oldest sample wanted: a ``datetime`` (naive means UTC) or a duration back
                from now (a ``timedelta``, seconds, or a string like ``"6h"``). None means the
                last 6 hours: enough for a trend (720 samples at the default 30s), read fast;
                ask for more, up to ``monitor.retention`` (7d), explicitly.
            until: the newest sample wanted, in the same forms; None means now.
            by_bucket: one row per bucket and sample instead of one per sample.

        Returns:
            The samples, oldest first: columns ``time`` (tz-aware UTC), [``table``,
            ``bucket``,] ``lag``, ``time_lag`` (a Timedelta), ``committed``, ``end``. Summed
            over the group's buckets unless ``by_bucket`` (``time_lag`` the largest; lag and
            committed over committed buckets, <NA> where none is). Empty for a group with no
            sample in the range.

        Raises:
            InvalidArgumentError: a bad ``group_id``, ``until`` before ``since``, or a group
                that does not exist and has no history in the range (the message names it).
            InvalidDurationError: a bad duration for ``since`` or ``until``.
            InvalidTypeError: ``by_bucket`` is not a bool.
            CorruptMetadataError: the history's metadata cannot be read.
        """
        from ..monitor.lag import lag_history

        return lag_history(self._context, group_id, since=since, until=until, by_bucket=by_bucket)
