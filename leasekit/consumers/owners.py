"""Bucket ownership in a group (C10, C11): a member consumes a bucket only after writing its id
into the bucket's owner znode (at the version it read, only when empty or naming a member that
is gone), and empties it when it hands the bucket back."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from ..errors import LeasekitError
from ..structs import TableBucket
from ..zk import (
    MAX_TXN_BYTES,
    MAX_TXN_OPS,
    Check,
    Create,
    GetChildren,
    GetData,
    Node,
    SetData,
    TxnConflict,
    chunk_ops,
    op_size,
    touch,
)
from ..zk.formats import OwnerRecord

__all__ = ["claim", "release", "owner_of"]

K = TypeVar("K")


def claim(
    store: Any,
    me: str,
    members: str,
    paths: Mapping[TableBucket, str],
    generation: int,
    held: dict[TableBucket, str],
) -> dict[TableBucket, int]:
    """As the live member at path ``me`` (under the ``members`` znode), claim the buckets of
    ``paths`` (bucket -> owner znode) that have no live owner; their owner znode versions.
    Buckets a live member still owns go into ``held`` (bucket -> owner znode path)."""
    name = me.rsplit("/", 1)[1]
    keys = list(paths)
    owner_paths = [paths[tb] for tb in keys]
    listed, *found = store.read_many([GetChildren(members), *(GetData(p) for p in owner_paths)])
    for result in (listed, *found):
        if result.error is not None:
            raise result.error  # never claim from a view it could not read
    live = set(listed.value or [])
    record = OwnerRecord(name, generation).encode()
    writes: dict[TableBucket, Create | SetData] = {}
    for tb, path, result in zip(keys, owner_paths, found):
        node = result.value
        holder = owner_of(node, path)
        if holder and holder in live and holder != name:
            held[tb] = path  # a live member still owns it: it releases after its revocation
        else:
            writes[tb] = (
                Create(path, record) if node is None else SetData(path, record, node.stat.version)
            )
    return _each(store, writes, [Check(me, -1)])


def release(store: Any, owned: Mapping[str, int]) -> None:
    """Empty the owner znodes (path -> the version this member wrote); those changed meanwhile
    are no longer this member's."""
    try:
        _each(store, {path: SetData(path, b"", version) for path, version in owned.items()})
    except LeasekitError:
        pass  # ZooKeeper unreachable: the member's end frees them (claims check liveness)


def owner_of(node: Node | None, path: str) -> str:
    """The member an owner znode names ("" once released, or unreadable: claimable)."""
    if node is None or not node.data:
        return ""
    try:
        return OwnerRecord.decode(node, path).member
    except LeasekitError:
        return ""  # unreadable: claimable


def _each(
    store: Any, writes: Mapping[K, Create | SetData], guard: list[Check] | None = None
) -> dict[K, int]:
    """Run ``writes`` (each transaction after ``guard``, ending with the group's change marker)
    in as few transactions as ZooKeeper's request limit allows; the new version of each done."""
    guard = guard or []
    if not writes:
        return {}
    # the group's change marker (owner znodes are <group>/owners/<table id>.<bucket>)
    marker = touch(next(iter(writes.values())).path.rsplit("/", 2)[0])
    keys = list(writes)
    room = MAX_TXN_BYTES - sum(op_size(op) for op in [*guard, marker])
    done: dict[K, int] = {}
    start = 0
    for chunk in chunk_ops(writes.values(), MAX_TXN_OPS - len(guard) - 1, room):
        part = keys[start : start + len(chunk)]
        start += len(chunk)
        done.update(_each_chunk(store, {k: writes[k] for k in part}, guard, marker))
    return done


def _each_chunk(
    store: Any, writes: Mapping[K, Create | SetData], guard: list[Check], marker: SetData
) -> dict[K, int]:
    """Run ``writes`` in one transaction, or one by one when some write conflicts (its znode
    changed meanwhile: that one is skipped); the new version of each done."""
    keys = list(writes)
    try:
        results = store.commit([*guard, *writes.values(), marker])
        return {k: _version(r) for k, r in zip(keys, results[len(guard) :])}
    except TxnConflict as exc:
        if exc.index < len(guard) or len(keys) == 1:
            return {}  # the guard failed (this member is gone), or the only write conflicted
    done = {}
    for key in keys:
        try:
            done[key] = _version(store.commit([*guard, writes[key], marker])[len(guard)])
        except TxnConflict:
            continue
    return done


def _version(result: Any) -> int:
    return 0 if isinstance(result, str) else result.version  # a Create gives its path: version 0
