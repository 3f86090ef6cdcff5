"""The monitoring part of the ``Connection`` facade (docs/monitoring.md): the lag history of a group
(or of many, from one read) and the overview of every group."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..memory import collector_paused

if TYPE_CHECKING:
    import pandas as pd

    from ..context import Context

__all__ = ["MonitorMethods"]

log = logging.getLogger("leasekit.monitor")


class MonitorMethods:
    """Monitoring methods of ``Connection``; they act on its context."""

    _context: Context

    @collector_paused()
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
        from ..monitor.lag.series import lag_history

        return lag_history(self._context, group_id, since=since, until=until, by_bucket=by_bucket)

    @collector_paused()
    def lag_histories(
        self, group_ids: list[str], *, since: Any = None, until: Any = None
    ) -> dict[str, pd.DataFrame]:
        """Each group's lag over time, as ``lag_history(group, since=..., until=...)`` gives it,
        from one read of the history: what a view of every group's trend reads (one
        ``lag_history`` per group would read the same files once per group).

        Arguments:
            group_ids: the groups; one without samples in the range gets an empty frame.
            since, until: as ``lag_history`` takes them.

        Returns:
            A frame of ``lag_history``'s columns per group id.

        Raises:
            InvalidArgumentError: a bad group id, or ``until`` before ``since``.
            InvalidDurationError: a bad duration.
        """
        from ..monitor.lag.series import lag_histories

        return lag_histories(self._context, group_ids, since=since, until=until)

    def sample_lag_history(self) -> int:
        """Take a lag history sample of every group if one is due (M1): what the janitor's
        sampler does every ``monitor.interval``, so that a view left open (the panels) records
        the lag while no janitor or exporter runs. Of samplers racing for one interval, one
        writes.

        Returns:
            The rows written; 0 when no sample was due, another sampler took it, there is no
            group, or this connection may not write the namespace (its ACL refuses this
            connection's credentials, or another store owns the warehouse directory), or the
            sampler's metadata holds garbage (logged: sampling is a view's side job, and the
            janitor's and the exporter's samplers report it).

        Raises:
            ZooKeeperUnavailableError: ZooKeeper did not answer.
        """
        from ..errors import CorruptMetadataError, PermissionDeniedError, WarehouseOwnedError
        from ..monitor.lag.history import sample

        try:
            return sample(self._context)
        except (PermissionDeniedError, WarehouseOwnedError):
            return 0  # a view that may not write records nothing
        except CorruptMetadataError as exc:
            log.warning("no lag history sample taken: %s", exc)
            return 0

    @collector_paused()
    def group_overview(self) -> pd.DataFrame:
        """Every consumer group of the namespace now, with its rates, time to catch up,
        retention risk and whether it is falling behind (M2, M3, M6).

        Returns:
            One row per group with offsets or live members, by id: ``group``, ``state``
            ("live" with live members, else "empty"), ``members`` (how many), ``generation``
            (<NA> before the first), ``tables`` (a list of names), ``total_lag`` (over the
            committed buckets), ``max_time_lag`` (NaT with none committed), ``status`` (the
            worst, ERR > AT_RISK > BEHIND > WARN > OK, of the Burrow status "OK" / "WARN" /
            "ERR", "BEHIND" when ``consume_rate`` is below 0.9 x ``produce_rate`` and the lag
            was higher at the rate window's last sample than at its first, and "AT_RISK" when
            ``retention_headroom`` is below ``eta`` or below ``monitor.risk-threshold``),
            ``consume_rate`` and
            ``produce_rate`` (records committed and appended per second between the first and
            last lag history samples of the last ``monitor.rate-window``; NaN with fewer than
            two), ``eta`` (total_lag / (consume - produce) when that is positive, 0 with no
            lag, NaT when not catching up or the rates are not known), ``retention_headroom``
            (the least, over buckets with records not consumed, of the table's log.retention
            minus the age of the first of them, at least 0; NaT, infinite, where nothing can
            be lost: no lag, or retention waits for consumers with
            log.retention.respect-consumers), ``last_commit`` (NaT: none).

        Raises:
            CorruptMetadataError: the namespace settings or a bucket's metadata cannot be read
                (groups whose znodes hold garbage are left out and logged).
            ZooKeeperUnavailableError: ZooKeeper did not answer.
        """
        from ..monitor.lag.overview import group_overview

        return group_overview(self._context)
