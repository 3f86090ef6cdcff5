"""The ``leasekit`` command line: the embedded ZooKeeper, tables and the demo.

Prints aligned text tables, or one JSON document with ``--json``; errors exit 2, untraced.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from . import __version__
from .errors import InvalidArgumentError, LeasekitError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from .connection import Connection
    from .tables import Table

__all__ = ["main", "build_parser", "format_table", "format_fields", "to_json"]

EXIT_ERROR = 2
EXIT_NOT_RUNNING = 3  # like `service ... status`
EXIT_INTERRUPTED = 130

_GLOBAL_DEFAULTS: dict[str, Any] = {
    "zookeeper": None,
    "warehouse": None,
    "namespace": "leasekit",
    "json": False,
}

# Spark's own console progress bar would fight with tqdm's on stderr.
_SPARK_SUBMIT_ARGS = "--conf spark.ui.showConsoleProgress=false pyspark-shell"


# -- output ---------------------------------------------------------------------------------


def _iso(value: datetime) -> str:
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def to_json(value: Any) -> Any:
    """``value`` as JSON-ready data: datetimes ISO 8601 UTC, timedeltas like ``"7d"``."""
    from .durations import format_duration

    if value is None or isinstance(value, (bool, str, int, float)):
        return value
    if isinstance(value, datetime):
        return _iso(value)
    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_json(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars
        return to_json(value.item())
    return str(value)


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={_text(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_text(v) for v in value)
    data = to_json(value)
    return data if isinstance(data, str) else str(data)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def format_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    """Aligned plain-text columns under upper-case headers; numbers right-aligned."""
    if columns is None:
        columns = list(rows[0]) if rows else []
    headers = [c.upper().replace("_", "-") for c in columns]
    cells = [[_text(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    numeric = [
        bool(rows) and all(row.get(c) is None or _is_number(row.get(c)) for row in rows)
        for c in columns
    ]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers), *(line(r) for r in cells)])


def format_fields(fields: Mapping[str, Any]) -> str:
    """``name  value`` lines, values aligned; a mapping value gets one ``key = value`` line each."""
    width = max((len(k) for k in fields), default=0)
    lines = []
    for key, value in fields.items():
        label = key.replace("_", " ").ljust(width)
        if isinstance(value, Mapping) and value:
            items = [f"{k} = {_text(v)}" for k, v in value.items()]
            lines.append(f"{label}  {items[0]}")
            lines.extend(f"{' ' * width}  {item}" for item in items[1:])
        else:
            lines.append(f"{label}  {_text(value)}")
    return "\n".join(lines)


def _emit(args: argparse.Namespace, data: Any, render: Callable[[Any], str]) -> None:
    """Print ``data`` as one JSON document with --json, else as ``render(data)``."""
    if args.json:
        print(json.dumps(to_json(data), indent=2))
    else:
        print(render(data))


def _quiet_library_logs() -> None:
    """Keep kazoo's retry chatter (logged through ``leasekit.zk``) off the terminal.

    Failures still surface as one ``leasekit: error:`` line; an application that configured
    logging itself keeps its handlers.
    """
    lib = logging.getLogger("leasekit")
    if not logging.getLogger().handlers and not lib.handlers:
        lib.addHandler(logging.NullHandler())


def _note(message: str) -> None:
    print(f"leasekit: {message}", file=sys.stderr, flush=True)


# -- resources ------------------------------------------------------------------------------


@contextlib.contextmanager
def _connect(args: argparse.Namespace) -> Iterator[Connection]:
    from .connection import connect

    with connect(args.zookeeper, args.warehouse, namespace=args.namespace) as conn:
        yield conn


@contextlib.contextmanager
def _spark() -> Iterator[SparkSession]:
    """The active SparkSession, or a new one that is stopped at the end."""
    from pyspark.sql import SparkSession

    from .spark import spark_session

    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", _SPARK_SUBMIT_ARGS)
    _note("starting Spark ...")
    spark = spark_session("leasekit-cli")
    spark.sparkContext.setLogLevel("ERROR")
    try:
        yield spark
    finally:
        spark.stop()


def _embedded_dir(args: argparse.Namespace) -> str:
    """The data dir of the warehouse's embedded ZooKeeper."""
    if args.zookeeper is not None:
        raise InvalidArgumentError(
            "`leasekit zookeeper` manages the embedded server of a local warehouse; "
            "pick the warehouse with --warehouse, not --zookeeper"
        )
    from .connection import DEFAULT_WAREHOUSE
    from .warehouse import Warehouse

    location = args.warehouse or os.environ.get("LEASEKIT_WAREHOUSE") or DEFAULT_WAREHOUSE
    warehouse = Warehouse(location)
    if not warehouse.is_local:
        raise InvalidArgumentError(
            f"the embedded ZooKeeper needs a local warehouse, not {warehouse.location}"
        )
    return os.path.join(warehouse.location, "_zookeeper")


# -- zookeeper ------------------------------------------------------------------------------


def _server_fields(data_dir: str) -> dict[str, Any]:
    from . import embedded

    status = embedded.status(data_dir)
    if status is None:
        return {"running": False, "address": None, "pid": None, "version": None,
                "started_at": None, "data_dir": os.path.realpath(data_dir)}  # fmt: skip
    return {"running": status.running, "address": status.address, "pid": status.pid,
            "version": status.version, "started_at": status.started_at,
            "data_dir": status.data_dir}  # fmt: skip


def _zookeeper_start(args: argparse.Namespace) -> int:
    from . import embedded

    data_dir = _embedded_dir(args)
    was_running = _server_fields(data_dir)["running"]
    address = embedded.ensure_running(data_dir)
    fields = {**_server_fields(data_dir), "address": address, "started": not was_running}
    verb = "is already running" if was_running else "started"
    _emit(args, fields,
          lambda f: f"ZooKeeper {verb} at {address} (pid {f['pid']}, data dir {f['data_dir']})")
    return 0


def _zookeeper_status(args: argparse.Namespace) -> int:
    fields = _server_fields(_embedded_dir(args))

    def render(f: Mapping[str, Any]) -> str:
        if not f["running"]:
            return f"ZooKeeper is not running (data dir {f['data_dir']})"
        return format_fields(f)

    _emit(args, fields, render)
    return 0 if fields["running"] else EXIT_NOT_RUNNING


def _zookeeper_stop(args: argparse.Namespace) -> int:
    from . import embedded

    data_dir = _embedded_dir(args)
    before = _server_fields(data_dir)
    stopped = embedded.stop(data_dir)
    fields = {"stopped": stopped, "address": before["address"], "data_dir": before["data_dir"]}

    def render(f: Mapping[str, Any]) -> str:
        if f["stopped"]:
            return f"stopped ZooKeeper at {f['address']} (data dir {f['data_dir']})"
        return f"no ZooKeeper was running (data dir {f['data_dir']})"

    _emit(args, fields, render)
    return 0


# -- tables ---------------------------------------------------------------------------------


def _parse_property(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def _table_info(table: Table) -> dict[str, Any]:
    from .schema import to_ddl

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


def _table_create(args: argparse.Namespace) -> int:
    properties: dict[str, str] = {}
    for key, value in args.property or []:
        if key in properties:
            raise InvalidArgumentError(f"property {key!r} is given twice")
        properties[key] = value
    with _connect(args) as conn:
        table = conn.create_table(
            args.name, args.schema, args.primary_key, buckets=args.buckets, properties=properties
        )
        info = _table_info(table)
    _emit(args, info, lambda i: f"created table {i['table']}\n\n{format_fields(i)}")
    return 0


def _table_list(args: argparse.Namespace) -> int:
    from .errors import TableNotFoundError

    rows = []
    with _connect(args) as conn:
        for name in conn.tables():
            try:
                table = conn.table(name)
            except TableNotFoundError:  # dropped meanwhile
                continue
            rows.append({
                "table": name,
                "buckets": table.num_buckets,
                "primary_key": list(table.primary_key),
                "created_at": table.created_at,
            })  # fmt: skip

    def render(r: list[dict[str, Any]]) -> str:
        return format_table(r) if r else f"no tables in namespace {args.namespace!r}"

    _emit(args, rows, render)
    return 0


def _table_describe(args: argparse.Namespace) -> int:
    with _connect(args) as conn:
        table = conn.table(args.name)
        info = {**_table_info(table), "bucket_offsets": _bucket_rows(table)}

    def render(i: dict[str, Any]) -> str:
        fields = {k: v for k, v in i.items() if k != "bucket_offsets"}
        return f"{format_fields(fields)}\n\n{format_table(i['bucket_offsets'])}"

    _emit(args, info, render)
    return 0


def _table_snapshot(args: argparse.Namespace) -> int:
    with _connect(args) as conn:
        table = conn.table(args.name)
        with _spark() as spark:
            taken = table.snapshot(spark)
    rows = [
        {"bucket": s.table_bucket.bucket, "snapshot_id": s.snapshot_id, "log_offset": s.log_offset,
         "row_count": s.row_count, "size_bytes": s.size_bytes, "created_at": s.created_at}
        for s in sorted(taken.values(), key=lambda s: s.table_bucket.bucket)
    ]  # fmt: skip

    def render(r: list[dict[str, Any]]) -> str:
        if not r:
            return f"no bucket of {args.name} advanced since its latest snapshot; nothing taken"
        return f"took {len(r)} snapshot(s) of {args.name}\n\n{format_table(r)}"

    _emit(args, rows, render)
    return 0


# -- demo -----------------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _demo(args: argparse.Namespace) -> int:
    from . import demo

    def out(text: str) -> None:
        print(text, file=sys.stderr if args.json else sys.stdout, flush=True)

    with _connect(args) as conn, _spark() as spark:
        result = demo.run(
            conn, spark, table=args.table, rows=args.rows, batches=args.batches, out=out
        )
    if args.json:
        print(json.dumps(to_json(result), indent=2))
    return 0


# -- parser ---------------------------------------------------------------------------------


def _global_options() -> argparse.ArgumentParser:
    """Options accepted before or after any subcommand (defaults filled in after parsing)."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("global options")
    suppress = argparse.SUPPRESS
    group.add_argument("--zookeeper", metavar="HOSTS", default=suppress,
                       help="ZooKeeper connect string, like zk1:2181,zk2:2181 (default: "
                       "$LEASEKIT_ZOOKEEPER, else the warehouse's embedded server)")
    group.add_argument("--warehouse", metavar="LOCATION", default=suppress,
                       help="warehouse path or URI (default: $LEASEKIT_WAREHOUSE, else "
                       "./leasekit-warehouse)")
    group.add_argument("--namespace", metavar="NAME", default=suppress,
                       help="metadata namespace (default: leasekit)")
    group.add_argument("--json", action="store_true", default=suppress,
                       help="print machine-readable JSON instead of text tables")
    return parent


def build_parser() -> argparse.ArgumentParser:
    """The ``leasekit`` argument parser."""
    common = _global_options()
    parser = argparse.ArgumentParser(
        prog="leasekit",
        description="KV snapshot leases, Spark reads and explained retention for a bucketed "
        "table store (metadata in ZooKeeper, data in Parquet).",
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"leasekit {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(
        group: Any, name: str, summary: str, func: Callable[..., int] | None = None
    ) -> argparse.ArgumentParser:
        sub = group.add_parser(name, help=summary, description=summary, parents=[common])
        if func is not None:
            sub.set_defaults(func=func)
        return sub

    zookeeper = command(commands, "zookeeper", "manage the embedded ZooKeeper of a local warehouse")
    zk_actions = zookeeper.add_subparsers(dest="action", metavar="ACTION", required=True)
    command(zk_actions, "start", "start the embedded server (or reuse a running one)",
            _zookeeper_start)
    command(zk_actions, "status", "show the embedded server; exit 3 if it is not running",
            _zookeeper_status)
    command(zk_actions, "stop", "stop the embedded server", _zookeeper_stop)

    table = command(commands, "table", "create, list, describe and snapshot tables")
    table_actions = table.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = command(table_actions, "create", "create a primary-key table", _table_create)
    create.add_argument("name", metavar="NAME")
    create.add_argument("--schema", required=True, metavar="DDL",
                        help="Spark DDL column list, like 'id BIGINT, name STRING'")
    create.add_argument("--primary-key", required=True, metavar="COL[,COL]",
                        help="primary-key column(s)")
    create.add_argument("--buckets", type=int, default=4, metavar="N",
                        help="number of buckets (default: 4)")
    create.add_argument("--property", action="append", type=_parse_property, metavar="K=V",
                        help="table property, like kv.snapshot.num-retained=3 (repeatable)")
    command(table_actions, "list", "list the tables of the namespace", _table_list)
    describe = command(table_actions, "describe", "schema, key, properties and per-bucket offsets",
                       _table_describe)
    describe.add_argument("name", metavar="NAME")
    snapshot = command(table_actions, "snapshot",
                       "take a KV snapshot of every advanced bucket (Spark)", _table_snapshot)
    snapshot.add_argument("name", metavar="NAME")

    demo = command(commands, "demo", "run the end-to-end demo on embedded defaults", _demo)
    demo.add_argument("--table", default="demo_orders",
                      help="demo table name (default: demo_orders)")
    demo.add_argument("--rows", type=_positive_int, default=100_000, metavar="N",
                      help="upsert rows to write (default: 100000)")
    demo.add_argument("--batches", type=_positive_int, default=5, metavar="N",
                      help="append batches (default: 5)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and argument errors
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_ERROR)
    for key, default in _GLOBAL_DEFAULTS.items():
        if not hasattr(args, key):
            setattr(args, key, default)
    _quiet_library_logs()
    try:
        return int(args.func(args))
    except LeasekitError as exc:
        message = str(exc).strip().splitlines()
        print(f"leasekit: error: {message[0] if message else type(exc).__name__}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("leasekit: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`leasekit table list | head`): stop quietly.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
