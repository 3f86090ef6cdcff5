"""``leasekit table create|list|describe|snapshot|compact|split|merge``: primary-key tables of the
namespace. ``snapshot`` starts Spark (or reuses the active session); the others do not.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import InvalidArgumentError
from ..structs import TableBucket
from . import table_compact
from .common import add_command, connect, spark
from .output import emit, format_fields, format_table, listing, unreadable, value_text

if TYPE_CHECKING:
    from ..table import Table

__all__ = ["register"]

OFFSET_COLUMNS = [
    "bucket",
    "state",
    "beginning_offset",
    "end_offset",
    "latest_snapshot",
    "snapshot_log_offset",
    "snapshot_rows",
]


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


def _bucket_rows(table: Table, sealed: Mapping[int, tuple[str, ...]]) -> list[dict[str, Any]]:
    """The offsets and latest snapshot of every active bucket and of the sealed ones still in
    use (``sealed``: bucket -> why), by bucket number."""
    begin, end = table.beginning_offsets(), table.end_offsets()
    latest: dict[int, Any] = {}
    for snap in table.snapshots():
        bucket = snap.table_bucket.bucket
        if bucket not in latest or snap.snapshot_id > latest[bucket].snapshot_id:
            latest[bucket] = snap
    shown = sorted({*table.layout.active, *sealed})
    rows = []
    for b in shown:
        tb, snap = TableBucket(table.name, b), latest.get(b)
        rows.append({
            "bucket": b,
            "state": "sealed" if b in sealed else "active",
            "beginning_offset": begin[tb],
            "end_offset": end[tb],
            "latest_snapshot": snap.snapshot_id if snap else None,
            "snapshot_log_offset": snap.log_offset if snap else None,
            "snapshot_rows": snap.row_count if snap else None,
            "in_use": list(sealed[b]) if b in sealed else None,
        })  # fmt: skip
    return rows


def _lineage_rows(table: Table) -> list[dict[str, Any]]:
    """Every bucket the table ever had: state, parents, children, the offset it was sealed at
    and when (K8)."""
    times = table.sealed_times()
    return [
        {"bucket": x.table_bucket.bucket, "state": x.state, "parents": list(x.parents),
         "children": list(x.children), "sealed_at": x.sealed_at,
         "sealed_time": times.get(x.table_bucket.bucket)}
        for x in table.lineage()
    ]  # fmt: skip


def _nums(ids: Sequence[int]) -> str:
    return ", ".join(map(str, ids))


def _rescale_text(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lineage as ``table describe`` prints it: the buckets a split or merge sealed or
    made, each with where it came from and went ("sealed at offset 22,198 → 8, 9") and when."""
    by_bucket = {r["bucket"]: r for r in rows}

    def when(sealed: dict[str, Any]) -> str:
        kind = "split" if len(sealed["children"]) == 2 else "merged"
        at = sealed["sealed_time"]
        return f"{kind} {value_text(at)}" if at is not None else f"{kind}, time not recorded"

    out = []
    for r in rows:
        if not (r["parents"] or r["children"]):
            continue
        parts = [f"from {_nums(r['parents'])}"] if r["parents"] else []
        if r["state"] == "sealed":
            parts.append(f"sealed at offset {r['sealed_at']:,} → {_nums(r['children'])}")
        made = when(by_bucket[r["parents"][0]]) if r["parents"] else None
        out.append({
            "bucket": r["bucket"],
            "state": r["state"],
            "lineage": "; ".join(parts),
            "when": when(r) if r["state"] == "sealed" else made,
        })  # fmt: skip
    return out


def _parse_pair(text: str) -> tuple[int, int]:
    """``A,B``: the two bucket numbers of a merge."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"expected two bucket numbers A,B, got {text!r}")
    return int(parts[0]), int(parts[1])


def _new_buckets(table: Table, created: list[int], parents: list[int]) -> list[dict[str, Any]]:
    """The buckets a rescale made, each with its parents and the offsets they were sealed at
    (the new buckets open at offset 0, K1)."""
    seals = [table.layout.sealed_at(p) for p in parents]
    return [
        {"table": table.name, "bucket": b, "parents": parents, "parents_sealed_at": seals}
        for b in created
    ]


def _sealed_line(parents: list[int], seals: list[int], created: list[int]) -> str:
    """Where the parents were sealed and the new buckets open ("bucket 2 sealed at offset
    22,198; children 8, 9 open at offset 0"), and how consumers follow (K5)."""
    sealed = ", ".join(
        f"bucket {p} sealed at offset {s:,}" if i == 0 else f"bucket {p} at offset {s:,}"
        for i, (p, s) in enumerate(zip(parents, seals))
    )
    opened = f"children {_nums(created)} open" if len(created) > 1 else f"child {created[0]} opens"
    what = f"bucket {parents[0]} to its seal" if len(parents) == 1 else (
        f"buckets {_nums(parents)} to their seals"
    )  # fmt: skip
    return (
        f"{sealed}; {opened} at offset 0\n"
        f"consumers read {what} before {_nums(created)} (parent first)"
    )


def _split(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        table = conn.table(args.name)
        created = [tb.bucket for tb in table.split_bucket(args.bucket)]
        rows = _new_buckets(table, created, [args.bucket])

    def render(r: list[dict[str, Any]]) -> str:
        return (
            f"split bucket {args.bucket} of {args.name} into buckets {_nums(created)}\n"
            + _sealed_line([args.bucket], r[0]["parents_sealed_at"], created)
        )

    emit(args, rows, render)
    return 0


def _merge(args: argparse.Namespace) -> int:
    a, b = args.buckets
    with connect(args) as conn:
        table = conn.table(args.name)
        merged = table.merge_buckets(a, b).bucket
        rows = _new_buckets(table, [merged], [a, b])

    def render(r: list[dict[str, Any]]) -> str:
        return f"merged buckets {a}, {b} of {args.name} into bucket {merged}\n" + _sealed_line(
            [a, b], r[0]["parents_sealed_at"], [merged]
        )

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
            except CorruptMetadataError as exc:  # shown as unreadable, the rest is listed
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
    from ..retention.sealed import in_use

    with connect(args, read_only=True) as conn:
        table = conn.table(args.name)
        sealed = in_use(table.context, table) if table.layout.rescaled else {}
        info = {
            **_table_info(table),
            "bucket_offsets": _bucket_rows(table, sealed),
            "lineage": _lineage_rows(table),
        }
    emit(args, info, _render_describe)
    return 0


def _render_describe(info: dict[str, Any]) -> str:
    fields = {k: v for k, v in info.items() if k not in ("bucket_offsets", "lineage")}
    lineage = _rescale_text(info["lineage"])
    columns = [c for c in OFFSET_COLUMNS if c != "state" or lineage]
    text = f"{format_fields(fields)}\n\n{format_table(info['bucket_offsets'], columns)}"
    if not lineage:  # never rescaled: the offsets say it all
        return text
    shown = {r["bucket"] for r in info["bucket_offsets"]}
    notes = [
        f"sealed bucket {r['bucket']} is still in use: " + "; ".join(r["in_use"])
        for r in info["bucket_offsets"]
        if r["in_use"]
    ]
    gone = [
        r["bucket"] for r in info["lineage"] if r["state"] == "sealed" and r["bucket"] not in shown
    ]
    if gone:
        them = "them" if len(gone) > 1 else "it"
        notes.append(
            f"sealed bucket{'s' if len(gone) > 1 else ''} {_nums(gone)}: drained and out of use "
            f"(retention may delete {them}), not shown above"
        )
    sections = [text, "\n".join(notes), f"lineage\n\n{format_table(lineage)}"]
    return "\n\n".join(x for x in sections if x)


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


def _register_rescale(actions: Any, common: argparse.ArgumentParser) -> None:
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


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``table create|list|describe|snapshot|compact|split|merge`` to the top-level
    subcommands."""
    table = add_command(
        commands,
        "table",
        "create, list, describe, snapshot, compact, split and merge tables",
        common,
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
    table_compact.register(actions, common)
    _register_rescale(actions, common)
