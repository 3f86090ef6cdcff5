"""``leasekit table compact NAME [--bucket B]``: merge runs of small log segments (R8) and say
what was merged and how many segments each bucket holds now."""

from __future__ import annotations

import argparse
from typing import Any

from ..durations import human_duration
from ..sizes import human_bytes
from .common import add_command, connect
from .output import emit

__all__ = ["register"]


def _compact(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        table = conn.table(args.name)
        done = table.compact_log(args.bucket)
        grace = conn.settings()["orphan.min-age"]
    rows = [{"bucket": tb.bucket, "segments": n} for tb, n in sorted(done.segments.items())]
    info = {**done._asdict(), "segments": rows, "replaced_files_kept_for": grace}

    def render(i: dict[str, Any]) -> str:
        counts = [r["segments"] for r in rows]
        low, high = min(counts, default=0), max(counts, default=0)
        each = f"{low} segment(s) each" if low == high else f"{low} to {high} segments"
        if not done.written:
            lost = f"; {done.lost} merge(s) lost to a concurrent change: run it again"
            return f"no run of small segments to merge in {args.name} (its buckets hold {each})" + (
                lost if done.lost else ""
            )
        return (
            f"merged {done.merged:,} segments of {args.name} into {done.written:,} "
            f"({done.records:,} records, {human_bytes(done.bytes_read)} -> "
            f"{human_bytes(done.bytes_written)}); its buckets now hold {each}\n"
            "the replaced files stay for readers that listed them until orphan.min-age "
            f"({human_duration(grace)}) has passed; retention deletes them then"
        )

    emit(args, info, render)
    return 0


def register(actions: Any, common: argparse.ArgumentParser) -> None:
    compact = add_command(
        actions,
        "compact",
        "merge runs of small log segments into segments of up to log.segment.target-bytes",
        common,
        _compact,
    )
    compact.add_argument("name", metavar="NAME")
    compact.add_argument(
        "--bucket", type=int, metavar="B", help="one bucket, active or sealed (default: all)"
    )
