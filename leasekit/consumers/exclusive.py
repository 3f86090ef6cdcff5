"""An exclusive member of a group (the data source's stream, D3): it joins only an empty group,
and while it is a member every other join is refused, both with ``GroupNotEmptyError``.

The exclusive member creates the ephemeral znode ``<group>/exclusive`` (holding its member id
prefix) in its join transaction, which also checks the ``members`` znode's data version read
with an empty membership (every join bumps it). An ordinary join creates and deletes that znode
in its own transaction, so it fails while the znode exists. A member of an earlier incarnation
of the same exclusive member (same prefix, its session not expired yet) is taken over: its
member and exclusive znodes are deleted in the new join's transaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import GroupNotEmptyError
from ..zk import Create, Delete, SetData, TxnConflict

if TYPE_CHECKING:
    from ..zk import Op, ZkStore
    from ..zk.paths import Paths

__all__ = ["exclusive_path", "ordinary_join", "exclusive_join", "refused"]

JOIN_ATTEMPTS = 20
"""Times an exclusive join reads the membership again after a concurrent change."""


def exclusive_path(paths: Paths, group_id: str) -> str:
    """The znode an exclusive member holds while it is a member."""
    return f"{paths.group(group_id)}/exclusive"


def ordinary_join(paths: Paths, group_id: str) -> list[Op]:
    """The ops an ordinary join adds to its transaction: they fail while an exclusive member
    holds the group."""
    path = exclusive_path(paths, group_id)
    return [Create(path), Delete(path)]


def refused(group_id: str, exc: TxnConflict, paths: Paths) -> GroupNotEmptyError | None:
    """The error of an ordinary join whose transaction failed because an exclusive member holds
    the group; None when it failed for another reason."""
    if exc.op.path != exclusive_path(paths, group_id) or not isinstance(exc.op, Create):
        return None
    return GroupNotEmptyError(
        f"group {group_id} is read by a Spark stream, its only member while it runs: "
        "no other consumer may join it (stop the query first)"
    )


def exclusive_join(store: ZkStore, paths: Paths, group_id: str, prefix: str, member: Create) -> str:
    """Join as the group's only member: commit ``member`` (the member znode's Create) with the
    exclusive znode, checked against a membership read empty (but for stale members whose names
    start with ``prefix``, deleted in the same transaction). Returns the member znode's path.

    Raises:
        GroupNotEmptyError: the group has other live members.
    """
    members, marker = paths.group_members(group_id), exclusive_path(paths, group_id)
    for _ in range(JOIN_ATTEMPTS):
        ops, version = _join_ops(store, group_id, members, marker, prefix)
        try:
            return str(store.commit([*ops, member, SetData(members, b"", version)])[-2])
        except TxnConflict:
            continue  # a member joined or left between the reads and the commit: read again
    raise GroupNotEmptyError(
        f"group {group_id}: its membership kept changing while a Spark stream tried to join it"
    )


def _join_ops(
    store: ZkStore, group_id: str, members: str, marker: str, prefix: str
) -> tuple[list[Op], int]:
    """Deletes of the stale incarnation's znodes and the exclusive znode's Create, and the
    data version of ``members`` the membership was read at."""
    node = store.get(members)  # the version first: a join after it makes the commit fail
    version = -1 if node is None else node.stat.version
    names = store.children(members) or []
    others = sorted(n for n in names if not n.startswith(prefix))
    if others:
        raise GroupNotEmptyError(
            f"group {group_id} has {len(others)} live member(s) ({', '.join(others[:3])}): a "
            "Spark stream reads a group alone (stop its consumers first)"
        )
    ops: list[Op] = [Delete(f"{members}/{n}") for n in names]  # the same stream's, stale
    held = store.get(marker)
    if held is not None:
        if not held.data.decode("utf-8", "replace").startswith(prefix):
            raise GroupNotEmptyError(f"group {group_id} is read by another Spark stream")
        ops.append(Delete(marker, held.stat.version))
    ops.append(Create(marker, prefix.encode(), ephemeral=True))
    return ops, version
