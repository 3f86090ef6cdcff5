"""``leasekit zookeeper start|status|stop``: the embedded ZooKeeper of a local warehouse.

``status`` exits 3 when the server is not running, like ``service ... status``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import Any

from ..errors import InvalidArgumentError
from .common import EXIT_NOT_RUNNING, add_command, missing_warehouse
from .output import emit, format_fields

__all__ = ["register"]


def _embedded_dir(args: argparse.Namespace) -> str:
    """The data dir of the warehouse's embedded ZooKeeper."""
    if args.zookeeper is not None:
        raise InvalidArgumentError(
            "`leasekit zookeeper` manages the embedded server of a local warehouse; "
            "pick the warehouse with --warehouse, not --zookeeper"
        )
    from ..connection import DEFAULT_WAREHOUSE
    from ..warehouse import Warehouse

    location = args.warehouse or os.environ.get("LEASEKIT_WAREHOUSE") or DEFAULT_WAREHOUSE
    warehouse = Warehouse(location)
    if not warehouse.is_local:
        raise InvalidArgumentError(
            f"the embedded ZooKeeper needs a local warehouse, not {warehouse.location}"
        )
    return os.path.join(warehouse.location, "_zookeeper")


def _server_fields(data_dir: str) -> dict[str, Any]:
    from .. import embedded

    status = embedded.status(data_dir)
    if status is None:
        return {"running": False, "address": None, "pid": None, "version": None,
                "started_at": None, "data_dir": os.path.realpath(data_dir)}  # fmt: skip
    return {"running": status.running, "address": status.address, "pid": status.pid,
            "version": status.version, "started_at": status.started_at,
            "data_dir": status.data_dir}  # fmt: skip


def _start(args: argparse.Namespace) -> int:
    from .. import embedded

    data_dir = _embedded_dir(args)
    was_running = _server_fields(data_dir)["running"]
    address = embedded.ensure_running(data_dir)
    fields = {**_server_fields(data_dir), "address": address, "started": not was_running}
    verb = "is already running" if was_running else "started"
    emit(
        args,
        fields,
        lambda f: f"ZooKeeper {verb} at {address} (pid {f['pid']}, data dir {f['data_dir']})",
    )
    return 0


def _status(args: argparse.Namespace) -> int:
    data_dir = _embedded_dir(args)
    missing = missing_warehouse(args)
    fields = {**_server_fields(data_dir), "warehouse_exists": missing is None}

    def render(f: Mapping[str, Any]) -> str:
        if missing is not None:
            return f"ZooKeeper is not running: no warehouse at {missing}"
        if not f["running"]:
            return f"ZooKeeper is not running (data dir {f['data_dir']})"
        return format_fields({k: v for k, v in f.items() if k != "warehouse_exists"})

    emit(args, fields, render)
    return 0 if fields["running"] else EXIT_NOT_RUNNING


def _stop(args: argparse.Namespace) -> int:
    from .. import embedded

    data_dir = _embedded_dir(args)
    before = _server_fields(data_dir)
    stopped = embedded.stop(data_dir)
    fields = {"stopped": stopped, "address": before["address"], "data_dir": before["data_dir"]}

    def render(f: Mapping[str, Any]) -> str:
        if f["stopped"]:
            return f"stopped ZooKeeper at {f['address']} (data dir {f['data_dir']})"
        return f"no ZooKeeper was running (data dir {f['data_dir']})"

    emit(args, fields, render)
    return 0


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``zookeeper start|status|stop`` to the top-level subcommands."""
    zookeeper = add_command(
        commands, "zookeeper", "manage the embedded ZooKeeper of a local warehouse", common
    )
    actions = zookeeper.add_subparsers(dest="action", metavar="ACTION", required=True)
    add_command(
        actions, "start", "start the embedded server (or reuse a running one)", common, _start
    )
    add_command(
        actions, "status", "show the embedded server; exit 3 if it is not running", common, _status
    )
    add_command(actions, "stop", "stop the embedded server", common, _stop)
