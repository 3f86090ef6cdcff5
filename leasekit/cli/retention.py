"""``leasekit retention plan|run``: what retention keeps and deletes, with reasons, and a pass.

``plan`` changes nothing; ``run --dry-run`` reports what a pass would delete. Retention covers
leasekit's internal tables too (the lag history); their items are listed only with
``--internal`` (or ``--table`` naming one), and counted in a line of their own.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from ..sizes import human_bytes
from ..validate import is_internal_table
from .common import add_command, connect
from .output import emit, format_table

if TYPE_CHECKING:
    from ..structs import RetentionItem

__all__ = ["register"]

ITEM_COLUMNS = ["kind", "table", "bucket", "item_id", "action", "reason", "size_bytes"]
DELETED_COLUMNS = [c for c in ITEM_COLUMNS if c != "action"]


def _item_row(item: RetentionItem) -> dict[str, Any]:
    tb = item.table_bucket
    return {
        "kind": item.kind,
        "table": tb.table if tb else None,
        "bucket": tb.bucket if tb else None,
        "item_id": item.item_id,
        "action": item.action,
        "reason": item.reason,
        "size_bytes": item.size_bytes,
    }


def _split(
    args: argparse.Namespace, items: Any, *, deleting: bool
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The rows to list and, unless ``--internal`` (or ``--table``) asked for them, what the
    items of internal tables left out add up to: items, and bytes deleted."""
    shown, hidden = [], {"items": 0, "deletes": 0, "bytes": 0}
    for item in items:
        tb = item.table_bucket
        if tb is None or args.internal or args.table or not is_internal_table(tb.table):
            shown.append(_item_row(item))
        elif deleting or item.action == "delete":
            hidden["items"] += 1
            hidden["deletes"] += 1
            hidden["bytes"] += item.size_bytes
        else:
            hidden["items"] += 1
    return shown, hidden


def _internal_line(hidden: dict[str, int], verb: str) -> list[str]:
    if not hidden["items"]:
        return []
    return [
        f"{hidden['items']} of these item(s) are of leasekit's internal tables (the lag "
        f"history), {verb} {human_bytes(hidden['bytes'])}: --internal lists them"
    ]


def _plan(args: argparse.Namespace) -> int:
    with connect(args, read_only=True) as conn:
        plan = conn.retention_plan(args.table)
    rows, hidden = _split(args, plan.items, deleting=False)
    data = {
        "items": rows,
        "reclaimable_bytes": plan.reclaimable_bytes,
        "internal": hidden,
        "skipped": list(plan.skipped),
    }

    def render(d: dict[str, Any]) -> str:
        rows, hidden = d["items"], d["internal"]
        deletes = sum(r["action"] == "delete" for r in rows) + hidden["deletes"]
        keeps = len(rows) + hidden["items"] - deletes
        empty = "nothing to keep or delete" + (" in user tables" if hidden["items"] else "")
        parts = [format_table(rows, ITEM_COLUMNS) if rows else empty]
        parts.append(
            f"reclaimable {human_bytes(d['reclaimable_bytes'])}: {keeps} keep, {deletes} delete"
        )
        parts += _internal_line(d["internal"], "reclaimable")
        if d["skipped"]:
            parts.append(
                "skipped (unreadable metadata, left untouched):\n"
                + "\n".join(f"  {s}" for s in d["skipped"])
            )
        return "\n\n".join(parts)

    emit(args, data, render)
    return 0


def _run(args: argparse.Namespace) -> int:
    from ..connection import context_of
    from ..progress import progress
    from ..retention.apply import run_retention

    with (
        connect(args, read_only=args.dry_run) as conn,
        progress(desc="retention", unit="item", leave=False) as bar,
    ):
        ctx = context_of(conn)
        report = run_retention(ctx, args.table, dry_run=args.dry_run, progress=bar.update)
    rows, hidden = _split(args, report.deleted, deleting=True)
    data = {
        "dry_run": report.dry_run,
        "deleted": rows,
        "freed_bytes": report.freed_bytes,
        "internal": hidden,
        "errors": list(report.errors),
    }

    def render(d: dict[str, Any]) -> str:
        n, freed = len(d["deleted"]) + d["internal"]["items"], human_bytes(d["freed_bytes"])
        if d["dry_run"]:
            head = f"dry run: would delete {n} item(s) and free {freed}; nothing changed"
        else:
            head = f"deleted {n} item(s), freed {freed}"
        parts = [head]
        if d["deleted"]:
            parts.append(format_table(d["deleted"], DELETED_COLUMNS))
        parts += _internal_line(d["internal"], "would free" if d["dry_run"] else "freed")
        if d["errors"]:
            parts.append(
                f"{len(d['errors'])} error(s), retried by the next pass:\n"
                + "\n".join(f"  {e}" for e in d["errors"])
            )
        return "\n\n".join(parts)

    emit(args, data, render)
    return 0


_INTERNAL_HELP = (
    "also list the items of leasekit's internal tables (the lag history); retention covers "
    "them either way"
)


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``retention plan|run`` to the top-level subcommands."""
    retention = add_command(
        commands,
        "retention",
        "explain and run retention: snapshots, log segments, orphans, leases",
        common,
    )
    actions = retention.add_subparsers(dest="action", metavar="ACTION", required=True)
    plan = add_command(
        actions, "plan", "every keep and delete with its reason; changes nothing", common, _plan
    )
    plan.add_argument(
        "--table",
        metavar="T",
        help="only this table's snapshots, segments and files (leases always)",
    )
    plan.add_argument("--internal", action="store_true", help=_INTERNAL_HELP)
    run = add_command(
        actions, "run", "one retention pass: expire leases, then delete", common, _run
    )
    run.add_argument(
        "--table",
        metavar="T",
        help="only this table's snapshots, segments and files (leases always)",
    )
    run.add_argument(
        "--dry-run", action="store_true", help="report what would be deleted; change nothing"
    )
    run.add_argument("--internal", action="store_true", help=_INTERNAL_HELP)
