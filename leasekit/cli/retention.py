"""``leasekit retention plan|run``: what retention keeps and deletes, with reasons, and a pass.

``plan`` changes nothing; ``run --dry-run`` reports what a pass would delete.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

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


def _plan(args: argparse.Namespace) -> int:
    with connect(args, read_only=True) as conn:
        plan = conn.retention_plan(args.table)
    data = {
        "items": [_item_row(i) for i in plan.items],
        "reclaimable_bytes": plan.reclaimable_bytes,
        "skipped": list(plan.skipped),
    }

    def render(d: dict[str, Any]) -> str:
        rows = d["items"]
        deletes = sum(r["action"] == "delete" for r in rows)
        parts = [format_table(rows, ITEM_COLUMNS) if rows else "nothing to keep or delete"]
        parts.append(
            f"reclaimable {d['reclaimable_bytes']} bytes: {len(rows) - deletes} keep, "
            f"{deletes} delete"
        )
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
    data = {
        "dry_run": report.dry_run,
        "deleted": [_item_row(i) for i in report.deleted],
        "freed_bytes": report.freed_bytes,
        "errors": list(report.errors),
    }

    def render(d: dict[str, Any]) -> str:
        n, freed = len(d["deleted"]), d["freed_bytes"]
        if d["dry_run"]:
            head = f"dry run: would delete {n} item(s) and free {freed} bytes; nothing changed"
        else:
            head = f"deleted {n} item(s), freed {freed} bytes"
        parts = [head]
        if d["deleted"]:
            parts.append(format_table(d["deleted"], DELETED_COLUMNS))
        if d["errors"]:
            parts.append(
                f"{len(d['errors'])} error(s), retried by the next pass:\n"
                + "\n".join(f"  {e}" for e in d["errors"])
            )
        return "\n\n".join(parts)

    emit(args, data, render)
    return 0


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
