"""Change markers: one znode per table (its ``latest`` parent) and per group (its root) that
every transaction changing what lies below sets, so a view watches one znode per table or group
instead of each znode it read; ``watch_targets`` maps the znodes a read touched to them."""

from __future__ import annotations

from collections.abc import Iterable

from .ops import SetData
from .paths import Paths

__all__ = ["Touch", "touch", "watch_targets"]


class Touch(SetData):
    """A ``SetData`` that marks a change at a marker. When a transaction fails on it alone (it
    comes last, so every other op succeeded) because the marker is missing, as in data older
    than markers, the store creates the marker and sends the transaction again."""

    __slots__ = ()


def touch(path: str) -> Touch:
    """The op that marks a change at the marker ``path`` (an empty value, any version: it never
    conflicts); put it at the end of the transaction that makes the change.

    Arguments:
        path: a marker (``Paths.table_changes`` or ``Paths.group_changes``).

    Returns:
        The ``Touch`` op.
    """
    return Touch(path, b"", -1)


def watch_targets(
    paths: Paths, data: Iterable[str], children: Iterable[str]
) -> tuple[set[str], set[str]]:
    """The znodes to watch (data, children) so that every change of what was read is heard: a
    znode below a table's data or a group maps to that table's or group's marker, a lease's
    pin arrays to its record and the leases' marker, a group's members to its members list
    (ephemeral: they end without a transaction); everything else is watched as read.

    Arguments:
        paths: the namespace's layout.
        data: znodes whose data or existence was read.
        children: znodes whose children were listed.

    Returns:
        (paths whose data to watch, paths whose children to watch).
    """
    out_data: set[str] = set()
    out_children: set[str] = set()
    for path in data:
        _map(paths, path, out_data, out_children, listed=False)
    for path in children:
        _map(paths, path, out_data, out_children, listed=True)
    return out_data, out_children


def _map(paths: Paths, path: str, data: set[str], children: set[str], *, listed: bool) -> None:
    target = paths.marker_of(path)
    if target is None:
        (children if listed else data).add(path)
    elif target == paths.leases:
        data.add(paths.leases)
        lease_id = path[len(paths.leases) + 1 :].split("/", 1)[0]
        data.add(paths.lease(lease_id))  # the lease's record: acquire and renew set it
    elif target.endswith("/members"):
        children.add(target)
    else:
        data.add(target)
