"""``leasekit lease list|inventory|acquire|renew|release|drop``: KV snapshot leases from the
shell.

Leases outlive the command: ``acquire`` pins and leaves the lease to expire, renew or drop.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..durations import parse_duration
from ..errors import LeaseNotFoundError
from ..structs import TableBucket
from ..validate import check_id
from .common import add_command, bucket_arg, connect, duration_arg
from .output import emit, format_table, frame_rows, listing, unreadable, value_text

if TYPE_CHECKING:
    from ..connection import Connection
    from ..structs import LeaseInfo

__all__ = ["register"]

NO_SNAPSHOT = -1  # an unavailable bucket's id when the bucket has no snapshot yet (L6)


def _pin_rows(pins: Mapping[TableBucket, int]) -> list[dict[str, Any]]:
    return [{"table": tb.table, "bucket": tb.bucket, "snapshot_id": sid}
            for tb, sid in sorted(pins.items())]  # fmt: skip


def _find(conn: Connection, lease_id: str) -> LeaseInfo:
    """The stored lease; ``LeaseNotFoundError`` if it does not exist (or is being dropped)."""
    for info in conn.leases():
        if info.lease_id == lease_id:
            return info
    raise LeaseNotFoundError(f"lease {lease_id!r} does not exist")


def _lease_row(info: LeaseInfo, now: datetime) -> dict[str, Any]:
    return {
        "lease_id": info.lease_id,
        "pins": _pin_rows(info.pins),
        "tables": sorted({tb.table for tb in info.pins}),
        "duration": info.duration,
        "created_at": info.created_at,
        "renewed_at": info.renewed_at,
        "expires_at": info.expires_at,
        # whole seconds, rounded down: negative exactly when the lease has expired (L7)
        "expires_in": timedelta(seconds=math.floor((info.expires_at - now).total_seconds())),
        "owner": info.owner,
    }


def _corrupt_row(lease_id: str, exc: Exception) -> dict[str, Any]:
    """A lease whose stored record cannot be read: listed as such, the rest goes on
    (docs/security.md)."""
    row: dict[str, Any] = dict.fromkeys(_LIST_COLUMNS)
    return {**row, "lease_id": lease_id, "state": "corrupt", "error": unreadable(exc)}


_LIST_COLUMNS = ["lease_id", "pins", "tables", "duration", "renewed_at", "expires_at",
                 "expires_in", "owner"]  # fmt: skip


def _list(args: argparse.Namespace) -> int:
    from ..connection import context_of
    from ..leases.upkeep import read_leases

    with connect(args, read_only=True) as conn:
        now = conn.server_time()
        leases, corrupt = read_leases(context_of(conn))
    rows = [{**_lease_row(info, now), "state": "ok", "error": None} for info in leases]
    rows += [_corrupt_row(lease_id, exc) for lease_id, exc in corrupt.items()]
    rows.sort(key=lambda row: row["lease_id"])

    def render(r: list[dict[str, Any]]) -> str:
        shown = [
            {**row, "pins": len(row["pins"]), "tables": ",".join(row["tables"])}
            if row["state"] == "ok" else row
            for row in r
        ]  # fmt: skip
        return listing(shown, "lease", _LIST_COLUMNS, f"no leases in namespace {args.namespace!r}")

    emit(args, rows, render)
    return 0


_INVENTORY_COLUMNS = ["lease_id", "state", "owner", "host", "pinned_buckets", "tables",
                      "pinned_bytes", "exclusive_bytes", "expires_in", "expires_at"]  # fmt: skip


def _inventory(args: argparse.Namespace) -> int:
    with connect(args, read_only=True) as conn:
        frame = conn.lease_inventory()
    measured: datetime = frame.attrs["measured_at"]
    rows = frame_rows(frame)
    for row in rows:  # seconds in JSON, like every duration; negative once expired
        row["expires_in"] = row["expires_at"] - measured

    def render(r: list[dict[str, Any]]) -> str:
        if not r:
            return f"no leases in namespace {args.namespace!r}"
        shown = [{**row, "tables": ",".join(row["tables"])} for row in r]
        return format_table(shown, _INVENTORY_COLUMNS)

    emit(args, rows, render)
    return 0


def _acquire(args: argparse.Namespace) -> int:
    check_id(args.lease_id)
    # checked before connecting: a bad value never creates a warehouse or starts a server
    duration = parse_duration(duration_arg(args.duration), what="lease duration")
    tables = list(dict.fromkeys(args.table))
    with connect(args) as conn:
        # no context manager: the lease must outlive the command
        lease = conn.lease(args.lease_id, duration, drop_on_exit=False)
        result = lease.acquire_latest(tables)
    unavailable = _pin_rows(result.unavailable)
    for row in unavailable:
        row["reason"] = (
            "records but no snapshot yet"
            if row["snapshot_id"] == NO_SNAPSHOT
            else "snapshot deleted while pinning"
        )
    data = {
        "lease_id": args.lease_id,
        "expires_at": result.expires_at,
        "tables": [
            {"table": name,
             "acquired": sum(tb.table == name for tb in result.acquired),
             "empty": sum(tb.table == name and sid == 0 for tb, sid in result.acquired.items()),
             "unavailable": sum(tb.table == name for tb in result.unavailable)}
            for name in tables
        ],
        "acquired": _pin_rows(result.acquired),
        "unavailable": unavailable,
    }  # fmt: skip

    def render(d: dict[str, Any]) -> str:
        text = (
            f"lease {d['lease_id']} pins the latest snapshot of {len(d['acquired'])} "
            f"bucket(s); it expires at {value_text(d['expires_at'])}"
        )
        text += f"\n\n{format_table(d['tables'])}"
        if d["unavailable"]:
            text += f"\n\nnot pinned:\n{format_table(d['unavailable'])}"
            if any(row["snapshot_id"] == NO_SNAPSHOT for row in d["unavailable"]):
                names = sorted({row["table"] for row in d["unavailable"]})
                text += (
                    "\n\na bucket with records but no snapshot has nothing to pin yet: take one "
                    f"with `leasekit table snapshot {names[0]}` (or table.snapshot(spark)) and "
                    "acquire again"
                )
        if any(t["empty"] for t in d["tables"]):
            text += (
                "\n\n(empty buckets are pinned as empty, snapshot 0: the lease reads no rows there)"
            )
        return text

    emit(args, data, render)
    return 0


def _renew(args: argparse.Namespace) -> int:
    check_id(args.lease_id)
    duration = (
        None
        if args.duration is None  # checked before connecting, as in acquire
        else parse_duration(duration_arg(args.duration), what="lease duration")
    )
    with connect(args) as conn:
        before = _find(conn, args.lease_id)
        if duration is None:
            duration = before.duration
        expires_at = conn.renew_kv_snapshot_lease(args.lease_id, duration)
    data = {"lease_id": args.lease_id, "duration": parse_duration(duration),
            "expires_at": expires_at, "extended": expires_at > before.expires_at}  # fmt: skip

    def render(d: dict[str, Any]) -> str:
        head = f"renewed lease {d['lease_id']} (duration {value_text(d['duration'])}); "
        if d["extended"]:
            return head + f"it expires at {value_text(d['expires_at'])}"
        return head + (  # L7: a renewal only ever extends
            f"it still expires at {value_text(d['expires_at'])}: a renewal never shortens a "
            "lease, and this duration from now ends before that"
        )

    emit(args, data, render)
    return 0


def _release(args: argparse.Namespace) -> int:
    check_id(args.lease_id)
    with connect(args) as conn:
        table = conn.table(args.table)
        if args.bucket:
            buckets = [TableBucket(table.name, b) for b in dict.fromkeys(args.bucket)]
        else:
            buckets = table.buckets
        pinned = _find(conn, args.lease_id).pins  # L9 ignores the rest: say which they are
        conn.release_kv_snapshot_lease(args.lease_id, buckets)
        info = _find(conn, args.lease_id)
    data = {
        "lease_id": args.lease_id,
        "released": [{"table": tb.table, "bucket": tb.bucket} for tb in buckets if tb in pinned],
        "not_pinned": [
            {"table": tb.table, "bucket": tb.bucket} for tb in buckets if tb not in pinned
        ],
        "pins": _pin_rows(info.pins),
        "expires_at": info.expires_at,
    }

    def render(d: dict[str, Any]) -> str:
        def numbers(rows: list[dict[str, Any]]) -> str:
            return ", ".join(str(r["bucket"]) for r in rows)

        if not args.bucket and d["released"]:
            text = f"released every bucket of {args.table} from lease {d['lease_id']}"
        elif d["released"]:
            text = (
                f"released bucket(s) {numbers(d['released'])} of {args.table} from lease "
                f"{d['lease_id']}"
            )
        else:
            text = f"released nothing of {args.table} from lease {d['lease_id']}"
        if d["not_pinned"] and args.bucket:
            text += (
                f"; bucket(s) {numbers(d['not_pinned'])} of {args.table} were not pinned by "
                f"lease {d['lease_id']}"
            )
        elif not d["released"]:
            text += f"; it pinned no bucket of {args.table}"
        if not d["pins"]:
            return f"{text}; it pins nothing now and stays until dropped or expired"
        return f"{text}; it still pins {len(d['pins'])} bucket(s):\n\n{format_table(d['pins'])}"

    emit(args, data, render)
    return 0


def _drop(args: argparse.Namespace) -> int:
    check_id(args.lease_id)
    with connect(args) as conn:
        dropped = conn.drop_kv_snapshot_lease(args.lease_id)
    if not dropped and not args.if_exists:  # a typo is not a success (as Kafka's topic delete)
        raise LeaseNotFoundError(f"lease {args.lease_id!r} does not exist; nothing dropped")
    data = {"lease_id": args.lease_id, "dropped": dropped}
    emit(
        args,
        data,
        lambda d: (
            f"dropped lease {d['lease_id']}"
            if d["dropped"]
            else f"no such lease {d['lease_id']}; nothing dropped"
        ),
    )
    return 0


_DROP_EPILOG = """\
Exit status: 0 when the lease was dropped; 2 when there is no such lease (with --if-exists, 0:
it prints "no such lease", like `rm -f`), on an invalid lease id or any other error."""


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``lease list|inventory|acquire|renew|release|drop`` to the top-level subcommands."""
    lease = add_command(
        commands, "lease", "list, acquire, renew, release and drop KV snapshot leases", common
    )
    actions = lease.add_subparsers(dest="action", metavar="ACTION", required=True)
    add_command(
        actions, "list", "every lease of the namespace with its pins and expiry", common, _list
    )
    add_command(
        actions,
        "inventory",
        "every lease with its state (active, expiring, orphaned, expired), owner and the "
        "bytes it pins and alone keeps",
        common,
        _inventory,
    )
    _add_changes(actions, common)


def _add_changes(actions: Any, common: argparse.ArgumentParser) -> None:
    """Add ``acquire``, ``renew``, ``release`` and ``drop`` under ``lease``."""
    acquire = add_command(
        actions,
        "acquire",
        "pin the latest snapshots of tables; creates the lease on first use",
        common,
        _acquire,
    )
    acquire.add_argument("lease_id", metavar="LEASE_ID")
    acquire.add_argument(
        "--table",
        action="append",
        required=True,
        metavar="T",
        help="table whose buckets to pin (repeatable)",
    )
    acquire.add_argument(
        "--duration",
        default="1h",
        metavar="D",
        help="lease duration, like 90s, 30m, 2h or seconds (default: 1h)",
    )

    renew = add_command(actions, "renew", "extend a lease; renew never shortens it", common, _renew)
    renew.add_argument("lease_id", metavar="LEASE_ID")
    renew.add_argument(
        "--duration", metavar="D", help="extend to now + D (default: the lease's own duration)"
    )

    release = add_command(
        actions,
        "release",
        "unpin buckets of a table; the lease stays, maybe empty",
        common,
        _release,
    )
    release.add_argument("lease_id", metavar="LEASE_ID")
    release.add_argument("--table", required=True, metavar="T", help="table to unpin")
    release.add_argument(
        "--bucket",
        action="append",
        type=bucket_arg,
        metavar="B",
        help="bucket to unpin (repeatable; default: every bucket of T)",
    )

    drop = add_command(
        actions, "drop", "remove a lease and all its pins", common, _drop, epilog=_DROP_EPILOG
    )
    drop.add_argument("lease_id", metavar="LEASE_ID")
    drop.add_argument(
        "--if-exists",
        action="store_true",
        help="a lease that does not exist is no error: print so and exit 0",
    )
