"""``leasekit table create|list|describe|snapshot|split|merge``: primary-key tables of the
namespace. ``snapshot`` starts Spark (or reuses the active session); the others do not.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from ..errors import InvalidArgumentError
from .common import add_command, connect, spark
from .output import emit, format_fields, format_table, listing, unreadable

if TYPE_CHECKING:
    from ..table import Table

__all__ = ["register"]


def _parse_property(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def _table_info(table: Table) -> dict[str, Any]:
    from ..tables.schema import to_ddl

    return {
        "table": table.name,
        "schema": to_ddl(table.schema),
        "primary_key": list(table.primary_key),
        "buckets": table.num_buckets,
        "created_at": table.created_at,
        "properties": table.properties,
    }


def _bucket_rows(table: Table) -> list[dict[str, Any]]:
    begin, end = table.beginning_offsets(), table.end_offsets()
    latest: dict[int, Any] = {}
    for snap in table.snapshots():
        bucket = snap.table_bucket.bucket
        if bucket not in latest or snap.snapshot_id > latest[bucket].snapshot_id:
            latest[bucket] = snap
    rows = []
    for tb in table.buckets:
        snap = latest.get(tb.bucket)
        rows.append({
            "bucket": tb.bucket,
            "beginning_offset": begin[tb],
            "end_offset": end[tb],
            "latest_snapshot": snap.snapshot_id if snap else None,
            "snapshot_log_offset": snap.log_offset if snap else None,
            "snapshot_rows": snap.row_count if snap else None,
        })  # fmt: skip
    return rows


def _lineage_rows(table: Table) -> list[dict[str, Any]]:
    """Every bucket the table ever had: state, parents, children and seal (K8)."""
    return [
        {"bucket": x.table_bucket.bucket, "state": x.state, "parents": list(x.parents),
         "children": list(x.children), "sealed_at": x.sealed_at}
        for x in table.lineage()
    ]  # fmt: skip


def _parse_pair(text: str) -> tuple[int, int]:
    """``A,B``: the two bucket numbers of a merge."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"expected two bucket numbers A,B, got {text!r}")
    return int(parts[0]), int(parts[1])


def _new_buckets(name: str, created: list[int], parents: list[int]) -> list[dict[str, Any]]:
    return [{"table": name, "bucket": b, "parents": parents} for b in created]


def _split(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        table = conn.table(args.name)
        created = [tb.bucket for tb in table.split_bucket(args.bucket)]
    rows = _new_buckets(args.name, created, [args.bucket])

    def render(r: list[dict[str, Any]]) -> str:
        into = ", ".join(str(x["bucket"]) for x in r)
        return f"split bucket {args.bucket} of {args.name} into buckets {into}\n\n{format_table(r)}"

    emit(args, rows, render)
    return 0


def _merge(args: argparse.Namespace) -> int:
    a, b = args.buckets
    with connect(args) as conn:
        table = conn.table(args.name)
        merged = table.merge_buckets(a, b).bucket
    rows = _new_buckets(args.name, [merged], [a, b])

    def render(r: list[dict[str, Any]]) -> str:
        return f"merged buckets {a}, {b} of {args.name} into bucket {merged}\n\n{format_table(r)}"

    emit(args, rows, render)
    return 0


def _create(args: argparse.Namespace) -> int:
    properties: dict[str, str] = {}
    for key, value in args.property or []:
        if key in properties:
            raise InvalidArgumentError(f"property {key!r} is given twice")
        properties[key] = value
    with connect(args) as conn:
        table = conn.create_table(
            args.name, args.schema, args.primary_key, buckets=args.buckets, properties=properties
        )
        info = _table_info(table)
    emit(args, info, lambda i: f"created table {i['table']}\n\n{format_fields(i)}")
    return 0


def _list(args: argparse.Namespace) -> int:
    from ..errors import CorruptMetadataError, TableNotFoundError

    rows = []
    with connect(args, read_only=True) as conn:
        for name in conn.tables():
            try:
                table = conn.table(name)
            except TableNotFoundError:  # dropped meanwhile
                continue
            except CorruptMetadataError as exc:  # §9: shown as unreadable, the rest is listed
                shown = unreadable(exc)
                rows.append({"table": name, "buckets": None, "primary_key": None,
                             "created_at": None, "state": "corrupt", "error": shown})  # fmt: skip
                continue
            rows.append({
                "table": name,
                "buckets": table.num_buckets,
                "primary_key": list(table.primary_key),
                "created_at": table.created_at,
                "state": "ok",
                "error": None,
            })  # fmt: skip

    def render(r: list[dict[str, Any]]) -> str:
        return listing(r, "table", ["table", "buckets", "primary_key", "created_at"],
                       f"no tables in namespace {args.namespace!r}")  # fmt: skip

    emit(args, rows, render)
    return 0


def _describe(args: argparse.Namespace) -> int:
    with connect(args, read_only=True) as conn:
        table = conn.table(args.name)
        info = {
            **_table_info(table),
            "bucket_offsets": _bucket_rows(table),
            "lineage": _lineage_rows(table),
        }

    def render(i: dict[str, Any]) -> str:
        fields = {k: v for k, v in i.items() if k not in ("bucket_offsets", "lineage")}
        text = f"{format_fields(fields)}\n\n{format_table(i['bucket_offsets'])}"
        if any(r["parents"] or r["children"] for r in i["lineage"]):  # ever rescaled
            text += f"\n\nlineage\n\n{format_table(i['lineage'])}"
        return text

    emit(args, info, render)
    return 0


def _snapshot(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        table = conn.table(args.name)
        with spark() as session:
            taken = table.snapshot(session)
    rows = [
        {"bucket": s.table_bucket.bucket, "snapshot_id": s.snapshot_id, "log_offset": s.log_offset,
         "row_count": s.row_count, "size_bytes": s.size_bytes, "created_at": s.created_at}
        for s in sorted(taken.values(), key=lambda s: s.table_bucket.bucket)
    ]  # fmt: skip

    def render(r: list[dict[str, Any]]) -> str:
        if not r:
            return f"no bucket of {args.name} advanced since its latest snapshot; nothing taken"
        return f"took {len(r)} snapshot(s) of {args.name}\n\n{format_table(r)}"

    emit(args, rows, render)
    return 0


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``table create|list|describe|snapshot|split|merge`` to the top-level subcommands."""
    table = add_command(
        commands, "table", "create, list, describe, snapshot, split and merge tables", common
    )
    actions = table.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = add_command(actions, "create", "create a primary-key table", common, _create)
    create.add_argument("name", metavar="NAME")
    create.add_argument(
        "--schema",
        required=True,
        metavar="DDL",
        help="Spark DDL column list, like 'id BIGINT, name STRING'",
    )
    create.add_argument(
        "--primary-key", required=True, metavar="COL[,COL]", help="primary-key column(s)"
    )
    create.add_argument(
        "--buckets", type=int, default=4, metavar="N", help="number of buckets (default: 4)"
    )
    create.add_argument(
        "--property",
        action="append",
        type=_parse_property,
        metavar="K=V",
        help="table property, like kv.snapshot.num-retained=3 (repeatable)",
    )
    add_command(actions, "list", "list the tables of the namespace", common, _list)
    describe = add_command(
        actions,
        "describe",
        "schema, key, properties, per-bucket offsets and lineage",
        common,
        _describe,
    )
    describe.add_argument("name", metavar="NAME")
    snapshot = add_command(
        actions,
        "snapshot",
        "take a KV snapshot of every advanced bucket (Spark)",
        common,
        _snapshot,
    )
    snapshot.add_argument("name", metavar="NAME")
    split = add_command(
        actions, "split", "seal a bucket and split its keys into two new buckets", common, _split
    )
    split.add_argument("name", metavar="NAME")
    split.add_argument("--bucket", required=True, type=int, metavar="B", help="bucket to split")
    merge = add_command(
        actions, "merge", "merge the two buckets of one split into a new bucket", common, _merge
    )
    merge.add_argument("name", metavar="NAME")
    merge.add_argument(
        "--buckets",
        required=True,
        type=_parse_pair,
        metavar="A,B",
        help="the two buckets one split made",
    )
