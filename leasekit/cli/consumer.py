"""``leasekit consumer list|describe|reset-offsets|delete``: consumer groups as
``kafka-consumer-groups`` shows them, with lag in time and lag health; ``describe --members``
lists the live members (``overview`` and ``history``: ``consumer_monitor``).

``reset-offsets`` prints the plan and changes nothing without ``--execute``.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..consumers.admin import health
from ..durations import parse_duration, parse_timestamp
from ..errors import InvalidArgumentError
from ..structs import BucketLineage, TableBucket
from ..validate import check_id
from .common import add_command, bucket_arg, connect, duration_arg, offset_arg, shift_arg
from .consumer_monitor import register_monitor
from .output import emit, format_table, frame_rows

if TYPE_CHECKING:
    from ..connection import Connection

__all__ = ["register"]

MEMBERS = ["consumer_id", "host", "#buckets", "buckets", "assigned"]
RESET = ["group", "table", "bucket", "current_offset", "new_offset", "clamped"]


def _list(args: argparse.Namespace) -> int:
    with connect(args, read_only=True) as conn:
        groups = conn.consumer_groups()
    emit(args, {"groups": groups}, lambda d: "\n".join(d["groups"]) or "no consumer groups")
    return 0


def _existing_group(conn: Connection, group: str) -> None:
    """Raise unless ``group`` has committed offsets or live members."""
    check_id(group, what="group id", error=InvalidArgumentError)
    if group not in conn.consumer_groups():
        raise InvalidArgumentError(
            f"consumer group {group!r} does not exist in namespace "
            f"{conn.namespace!r} (no committed offsets, no live members)"
        )


def _describe(args: argparse.Namespace) -> int:
    if args.members:
        return _members(args)
    with connect(args, read_only=True) as conn:
        _existing_group(conn, args.group)
        board = conn.group_board(args.group)
    rows = frame_rows(board.frame.drop(columns="metadata"))
    status = health.group_status(
        (TableBucket(r["table"], r["bucket"]), r["status"]) for r in rows if r["status"]
    )
    waiting = _waiting(rows, board.lineage)
    data = {
        "group": args.group,
        "status": status.status,
        "generation": board.generation,
        "leader": board.leader,
        "buckets": rows,
        "unowned": [
            {"table": r["table"], "bucket": r["bucket"]}
            for r in rows
            if r["consumer_id"] is None
            and board.leader is not None
            and (r["table"], r["bucket"]) not in waiting
        ],
        "waiting": [
            {"table": t, "bucket": b, "parents": list(parents)}
            for (t, b), parents in sorted(waiting.items())
        ],
    }
    emit(args, data, lambda d: _render_describe(d, board.lineage))
    return 0


def _waiting(
    rows: list[dict[str, Any]], lineage: Mapping[TableBucket, BucketLineage]
) -> dict[tuple[str, int], tuple[int, ...]]:
    """The described buckets no member owns that wait for their parents: made by a split or
    merge whose sealed parent the group has not read to its seal yet (it is still described,
    K6), so no member is assigned them before (parent first, K5); each with those parents."""
    described = {(r["table"], r["bucket"]) for r in rows}
    out = {}
    for r in rows:
        lin = lineage.get(TableBucket(r["table"], r["bucket"]))
        if r["consumer_id"] is None and lin is not None:
            parents = tuple(p for p in lin.parents if (r["table"], p) in described)
            if parents:
                out[r["table"], r["bucket"]] = parents
    return out


def _render_describe(d: dict[str, Any], lineage: Mapping[TableBucket, BucketLineage]) -> str:
    """The group's header lines, its buckets (a bucket waiting for its parents says so where
    its owner would be) and a line per rescaled bucket the group still reads (K5, K6)."""
    from ..consumers.admin.group_admin import DESCRIBE_COLUMNS  # loads kazoo: not at CLI import

    if not d["buckets"] and d["leader"] is None:
        return f"group {d['group']} has no committed offsets and no live members"
    waits = {(w["table"], w["bucket"]): w["parents"] for w in d["waiting"]}
    shown = [
        {**r, "consumer_id": _waiting_for(waits[r["table"], r["bucket"]])}
        if (r["table"], r["bucket"]) in waits
        else r
        for r in d["buckets"]
    ]
    notes = []
    for r in d["buckets"]:
        lin = lineage.get(TableBucket(r["table"], r["bucket"]))
        if lin is not None and lin.state == "sealed":
            notes.append(_sealed_note(r["table"], lin, waits))
    return "\n".join(
        [
            f"GROUP {d['group']}: {d['status']}",
            _state(d, len(d["unowned"]), len(d["waiting"])),
            "",
            format_table(shown, DESCRIBE_COLUMNS),
            *([""] + notes if notes else []),
        ]
    )


def _waiting_for(parents: list[int]) -> str:
    """The owner column of a bucket waiting for its parents: "waiting for 2 (parent)"."""
    if len(parents) == 1:
        return f"waiting for {parents[0]} (parent)"
    return f"waiting for {', '.join(map(str, parents))} (parents)"


def _sealed_note(table: str, lin: BucketLineage, waits: Mapping[Any, list[int]]) -> str:
    """A sealed bucket the group still reads, as the widgets say it ("bucket 2 of orders: sealed
    at offset 22,198 → 8, 9"), and which of its children wait until the group has read it to
    its seal (parent first, K5)."""
    b, children = lin.table_bucket.bucket, lin.children
    into = ", ".join(map(str, children))
    text = f"bucket {b} of {table}: sealed at offset {lin.sealed_at:,} → {into}"
    held = [c for c in children if (table, c) in waits]
    if not held:
        return text
    them = ", ".join(map(str, held))
    verb = "waits" if len(held) == 1 else "wait"
    return f"{text}; {them} {verb} until the group has read {b} to its seal (parent first)"


def _state(d: dict[str, Any], unowned: int, waiting: int = 0) -> str:
    """The line under the group's: its generation and leader (``-`` for none), how many
    buckets no live member owns (their CONSUMER-ID is ``-``, as in Kafka's tool) and how many
    wait for their parents."""
    generation = "-" if d["generation"] is None else d["generation"]
    wait = f"  WAITING {waiting} (parent first)" if waiting else ""
    if d["leader"] is None:
        return f"GENERATION {generation}  LEADER -  no live members{wait}"
    return (
        f"GENERATION {generation}  LEADER {d['leader']}"
        + (f"  UNOWNED {unowned}" if unowned else "")
        + wait
    )


def _buckets(buckets: Any) -> str:
    """``orders(0,2), payments(1)``, as Kafka prints an assignment."""
    by_table: dict[str, list[int]] = {}
    for tb in sorted(buckets):
        by_table.setdefault(tb.table, []).append(tb.bucket)
    return ", ".join(f"{t}({','.join(map(str, bs))})" for t, bs in by_table.items()) or "-"


def _members(args: argparse.Namespace) -> int:
    """``describe --members``: each live member with what it owns now and what it is assigned,
    as ``kafka-consumer-groups --describe --members --verbose``."""
    with connect(args, read_only=True) as conn:
        _existing_group(conn, args.group)
        members = conn.group_members(args.group)
    leader = next((m.member_id for m in members if m.leader), None)
    data = {
        "group": args.group,
        "generation": members[0].generation if members else None,
        "leader": leader,
        "members": [
            {
                "consumer_id": m.member_id,
                "host": m.host,
                "leader": m.leader,
                "buckets": [{"table": tb.table, "bucket": tb.bucket} for tb in sorted(m.buckets)],
                "assigned": [{"table": tb.table, "bucket": tb.bucket} for tb in sorted(m.assigned)],
            }
            for m in members
        ],
    }
    table = [
        {
            "consumer_id": m.member_id,
            "host": m.host,
            "#buckets": len(m.buckets),
            "buckets": _buckets(m.buckets),
            "assigned": _buckets(m.assigned),
        }
        for m in members
    ]

    def render(d: dict[str, Any]) -> str:
        if not d["members"]:
            return f"group {d['group']} has no live members"
        return "\n".join([f"GROUP {d['group']}", _state(d, 0), "", format_table(table, MEMBERS)])

    emit(args, data, render)
    return 0


def _reset(args: argparse.Namespace) -> int:
    to: Any = None
    shift = None
    if args.to_earliest:
        to = "earliest"
    elif args.to_latest:
        to = "latest"
    elif args.to_current:
        to = "current"
    elif args.to_offset is not None:
        to = args.to_offset
    elif args.to_datetime is not None:
        to = parse_timestamp(args.to_datetime, what="--to-datetime")
    elif args.by_duration is not None:
        to = parse_duration(duration_arg(args.by_duration), what="--by-duration")
    else:
        shift = args.shift_by
    buckets = None
    if args.bucket:
        if len(args.table or []) != 1:
            raise InvalidArgumentError("--bucket needs exactly one --table")
        buckets = [TableBucket(args.table[0], b) for b in args.bucket]
    with connect(args, read_only=not args.execute) as conn:
        plan = frame_rows(
            conn.reset_offsets(
                args.group,
                to=to,
                shift_by=shift,
                tables=args.table,
                buckets=buckets,
                dry_run=not args.execute,
            )
        )
    data = {"executed": args.execute, "plan": plan}

    def render(d: dict[str, Any]) -> str:
        head = (
            "offsets reset"
            if d["executed"]
            else "dry run: nothing changed (add --execute to reset these offsets)"
        )
        return head + (
            "\n\n" + format_table(d["plan"], RESET) if d["plan"] else "\n\nno offsets to reset"
        )

    emit(args, data, render)
    return 0


def _delete(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        deleted = conn.delete_group(args.group)
    emit(
        args,
        {"group": args.group, "deleted": deleted},
        lambda d: f"deleted group {d['group']}" if d["deleted"] else f"no group {d['group']}",
    )
    return 0


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``consumer list|describe|reset-offsets|delete|overview|history``."""
    consumer = add_command(
        commands, "consumer", "consumer groups: offsets, lag, lag health, resets", common
    )
    actions = consumer.add_subparsers(dest="action", metavar="ACTION", required=True)
    add_command(actions, "list", "groups with committed offsets or live members", common, _list)
    describe = add_command(
        actions,
        "describe",
        "offsets, lag and time lag now, owner and status, per bucket",
        common,
        _describe,
    )
    describe.add_argument("group", metavar="GROUP")
    describe.add_argument(
        "--members",
        action="store_true",
        help="the live members instead: each one's buckets owned now and assigned",
    )
    reset = add_command(
        actions,
        "reset-offsets",
        "plan (or with --execute, carry out) an offset reset",
        common,
        _reset,
    )
    reset.add_argument("group", metavar="GROUP")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="the beginning of each log")
    target.add_argument("--to-latest", action="store_true", help="the end of each log")
    target.add_argument(
        "--to-current", action="store_true", help="the committed offsets (end where none)"
    )
    target.add_argument(
        "--to-offset", type=offset_arg, metavar="N", help="this offset in every bucket"
    )
    target.add_argument(
        "--to-datetime", metavar="ISO8601", help="the first record at or after this time"
    )
    target.add_argument(
        "--by-duration", metavar="D", help="the first record at or after now minus D"
    )
    target.add_argument(
        "--shift-by", type=shift_arg, metavar="N", help="move by N (clamped to the log)"
    )
    reset.add_argument("--table", action="append", metavar="T", help="only this table (repeatable)")
    reset.add_argument(
        "--bucket",
        action="append",
        type=bucket_arg,
        metavar="B",
        help="only this bucket (repeatable)",
    )
    reset.add_argument(
        "--execute", action="store_true", help="carry the reset out (default: a dry run)"
    )
    delete = add_command(actions, "delete", "delete a group and its offsets", common, _delete)
    delete.add_argument("group", metavar="GROUP")
    register_monitor(actions, common)
