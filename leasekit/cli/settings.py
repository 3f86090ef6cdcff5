"""``leasekit settings show|set|reset``: the namespace-wide settings every client applies.

``reset`` and ``set --replace`` overwrite the stored value without reading it, so they also
repair corrupt stored settings.
"""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..errors import CorruptMetadataError, InvalidArgumentError
from .common import EXIT_ERROR, add_command, connect, duration_arg
from .output import emit, format_table

if TYPE_CHECKING:
    from ..connection import Connection

__all__ = ["register"]

COLUMNS = ["setting", "value", "source"]


def _parse_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def _report(
    conn: Connection, settings: dict[str, Any], stored: dict[str, Any], corrupt: str | None
) -> dict[str, Any]:
    from ..connection import context_of

    return {
        "namespace": conn.namespace,
        "path": context_of(conn).paths.settings,
        "settings": [
            {"setting": key, "value": value, "source": "set" if key in stored else "default"}
            for key, value in settings.items()
        ],
        "corrupt": corrupt,
    }


def _render(head: str | None) -> Any:
    def render(d: dict[str, Any]) -> str:
        parts = [head] if head else []
        if d["corrupt"]:
            parts.append(
                f"{d['corrupt']}\n(`leasekit settings set --replace K=V ...` repairs "
                "too; meanwhile leases use the defaults below)"
            )
        parts.append(format_table(d["settings"], COLUMNS))
        return "\n\n".join(parts)

    return render


def _show(args: argparse.Namespace) -> int:
    from ..connection import context_of
    from ..properties import NAMESPACE_SETTINGS, effective

    with connect(args, read_only=True) as conn:
        try:
            stored, _ = context_of(conn).stored_settings()
            corrupt = None
        except CorruptMetadataError as exc:
            stored, corrupt = {}, str(exc)
        data = _report(conn, effective(stored, NAMESPACE_SETTINGS), stored, corrupt)
    emit(args, data, _render(None))
    return EXIT_ERROR if corrupt else 0


def _set(args: argparse.Namespace) -> int:
    from ..connection import context_of
    from ..properties import NAMESPACE_SETTINGS

    mapping: dict[str, Any] = {}
    for key, value in args.pairs:
        if key in mapping:
            raise InvalidArgumentError(f"setting {key!r} is given twice")
        known = NAMESPACE_SETTINGS.get(key)
        # a bare number is seconds, as in the Python API
        is_duration = known is not None and isinstance(known.default, timedelta)
        mapping[key] = duration_arg(value) if is_duration else value
    with connect(args) as conn:
        settings = conn.update_settings(mapping, replace=args.replace)
        stored = mapping if args.replace else context_of(conn).stored_settings()[0]
        data = _report(conn, settings, stored, None)
    head = f"{'replaced' if args.replace else 'updated'} the settings of namespace {args.namespace}"
    emit(args, data, _render(head))
    return 0


def _reset(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        data = _report(conn, conn.update_settings({}, replace=True), {}, None)
    emit(
        args,
        data,
        _render(f"reset the settings of namespace {args.namespace}: every setting has its default"),
    )
    return 0


_SHOW_EPILOG = """\
Exit status: 0; 2 when the stored settings are corrupt (the defaults are shown, retention
refuses to run until `leasekit settings reset` or `settings set --replace` repairs them)."""


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``settings show|set|reset`` to the top-level subcommands."""
    settings = add_command(
        commands,
        "settings",
        "namespace-wide settings: lease limits, expiry grace, orphan age",
        common,
    )
    actions = settings.add_subparsers(dest="action", metavar="ACTION", required=True)
    add_command(
        actions,
        "show",
        "every setting with its value and whether it is set or a default",
        common,
        _show,
        epilog=_SHOW_EPILOG,
    )
    set_ = add_command(
        actions, "set", "change settings for every client of the namespace", common, _set
    )
    set_.add_argument(
        "pairs",
        nargs="+",
        type=_parse_pair,
        metavar="K=V",
        help="setting and value, like lease.max-duration=2d (repeatable)",
    )
    set_.add_argument(
        "--replace",
        action="store_true",
        help="store exactly these settings (the rest return to their defaults), "
        "without reading the stored value: repairs corrupt settings",
    )
    add_command(
        actions,
        "reset",
        "remove every stored setting so the defaults apply (repairs corrupt settings)",
        common,
        _reset,
    )
