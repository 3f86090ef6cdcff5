"""``leasekit consumer list|describe|reset-offsets|delete``: consumer groups as
``kafka-consumer-groups`` shows them, with lag in time and lag health.

``reset-offsets`` prints the plan and changes nothing without ``--execute``.
"""

from __future__ import annotations

import argparse
from datetime import datetime, timezone
from typing import Any

from ..durations import parse_duration
from ..errors import InvalidArgumentError
from ..records import TableBucket
from .common import add_command, connect, duration_arg
from .output import emit, format_table, frame_rows

__all__ = ["register"]

DESCRIBE = ["group", "table", "bucket", "current_offset", "log_end_offset", "lag", "time_lag", "consumer_id",
            "host", "last_commit", "status"]
RESET = ["group", "table", "bucket", "current_offset", "new_offset"]


def _list(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        groups = conn.consumer_groups()
    emit(args, {"groups": groups}, lambda d: "\n".join(d["groups"]) or "no consumer groups")
    return 0


def _describe(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        rows = frame_rows(conn.describe_group(args.group))
        status = conn.group_status(args.group)
    data = {"group": args.group, "status": status.status, "buckets": rows}

    def render(d: dict[str, Any]) -> str:
        if not d["buckets"]:
            return f"group {d['group']} has no committed offsets"
        return f"GROUP {d['group']}: {d['status']}\n\n" + format_table(d["buckets"], DESCRIBE)

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
        try:
            to = datetime.fromisoformat(args.to_datetime.replace("Z", "+00:00"))
        except ValueError:
            raise InvalidArgumentError(f"--to-datetime {args.to_datetime!r} is not ISO 8601") from None
        if to.tzinfo is None:
            to = to.replace(tzinfo=timezone.utc)
    elif args.by_duration is not None:
        to = parse_duration(duration_arg(args.by_duration), what="--by-duration")
    else:
        shift = args.shift_by
    buckets = None
    if args.bucket:
        if len(args.table or []) != 1:
            raise InvalidArgumentError("--bucket needs exactly one --table")
        buckets = [TableBucket(args.table[0], b) for b in args.bucket]
    with connect(args) as conn:
        plan = frame_rows(conn.reset_offsets(args.group, to=to, shift_by=shift, tables=args.table, buckets=buckets,
                                        dry_run=not args.execute))
    data = {"executed": args.execute, "plan": plan}

    def render(d: dict[str, Any]) -> str:
        head = ("offsets reset" if d["executed"]
                else "dry run: nothing changed (add --execute to reset these offsets)")
        return head + ("\n\n" + format_table(d["plan"], RESET) if d["plan"] else "\n\nno offsets to reset")

    emit(args, data, render)
    return 0


def _delete(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        deleted = conn.delete_group(args.group)
    emit(args, {"group": args.group, "deleted": deleted},
         lambda d: f"deleted group {d['group']}" if d["deleted"] else f"no group {d['group']}")
    return 0


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``consumer list|describe|reset-offsets|delete`` to the top-level subcommands."""
    consumer = add_command(commands, "consumer", "consumer groups: offsets, lag, lag health, resets", common)
    actions = consumer.add_subparsers(dest="action", metavar="ACTION", required=True)
    add_command(actions, "list", "groups with committed offsets or live members", common, _list)
    describe = add_command(actions, "describe", "offsets, lag and time lag now, and status, per bucket",
                           common, _describe)
    describe.add_argument("group", metavar="GROUP")
    reset = add_command(actions, "reset-offsets", "plan (or with --execute, carry out) an offset reset",
                        common, _reset)
    reset.add_argument("group", metavar="GROUP")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="the beginning of each log")
    target.add_argument("--to-latest", action="store_true", help="the end of each log")
    target.add_argument("--to-current", action="store_true", help="the committed offsets (end where none)")
    target.add_argument("--to-offset", type=int, metavar="N", help="this offset in every bucket")
    target.add_argument("--to-datetime", metavar="ISO8601", help="the first record at or after this time")
    target.add_argument("--by-duration", metavar="D", help="the first record at or after now minus D")
    target.add_argument("--shift-by", type=int, metavar="N", help="move by N (clamped to the log)")
    reset.add_argument("--table", action="append", metavar="T", help="only this table (repeatable)")
    reset.add_argument("--bucket", action="append", type=int, metavar="B", help="only this bucket (repeatable)")
    reset.add_argument("--execute", action="store_true", help="carry the reset out (default: a dry run)")
    delete = add_command(actions, "delete", "delete a group and its offsets", common, _delete)
    delete.add_argument("group", metavar="GROUP")
