"""What the demo reports: the result (``--json``), and the summary and tables it prints."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..durations import human_duration, parse_duration
from ..sizes import human_bytes
from .demo_workload import BUCKETS, GROUP_SIZE, PROPERTIES
from .output import format_fields, format_table, frame_rows

if TYPE_CHECKING:
    from ..connection import Connection
    from .demo_scenario import Outcome

__all__ = ["result", "render", "opening", "check_list", "split_line"]

LAG_COLUMNS = [
    "bucket",
    "current_offset",
    "log_end_offset",
    "lag",
    "time_lag",
    "consumer_id",
    "last_commit",
    "status",
]


def result(conn: Connection, o: Outcome, elapsed: float, warehouse: str) -> dict[str, Any]:
    """The figures of a demo that passed its checks."""
    report, lease_info = o.after.report, o.after.lease_info
    return {
        "table": o.table.name,
        "rows_written": o.tally.written,
        "deletes": o.tally.deleted,
        "live_keys": sum(o.expected.values()),
        "buckets": o.table.num_buckets,
        "snapshots_taken": o.tally.snapshots,
        "rows_read": o.final_read[0],
        "rows_read_through_lease": o.pinned.first_read[0],
        "retention": {
            "snapshots_kept_by_lease": len(_kept_by_lease(o)),
            "deleted": {
                kind: sum(1 for i in report.deleted if i.kind == kind)
                for kind in ("snapshot", "segment", "orphan")
            },
            "freed_bytes": report.freed_bytes,
            "errors": report.errors,
        },
        "group": _group(o),
        "rescale": _rescale(o),
        "lease": {
            "lease_id": lease_info.lease_id,
            "pinned_buckets": len(lease_info.pins),
            "snapshot_ids": sorted(set(lease_info.pins.values())),
            "expires_at": lease_info.expires_at.isoformat(),
        },
        "check": "passed",
        "count_by_status": o.final_read[2],
        "elapsed_s": round(elapsed, 1),
        "warehouse": warehouse,
        "zookeeper": conn.zookeeper,
        "namespace": conn.namespace,
    }


def _group(o: Outcome) -> dict[str, Any]:
    lag = o.after.lag
    return {
        "group_id": o.group_id,
        "members": len(o.joined),
        "joined": {"seconds": round(o.join_seconds, 3), "assignment": o.joined},
        "takeover": {
            **o.takeover,
            "after_batch": o.pin_after + 1,
            "seconds": round(o.takeover["seconds"], 3),
        },
        "read": {
            tb.bucket: {
                "records": sum(len(r.offsets) for r in reads),
                "by": list(dict.fromkeys(r.member for r in reads)),
            }
            for tb, reads in sorted(o.audit.reads.items(), key=lambda kv: kv[0].bucket)
        },
        "records_consumed": o.audit.consumed,
        "lag": int(lag["lag"].sum()),
        "max_time_lag_s": round(lag["time_lag"].max().total_seconds(), 1),
        "status": o.after.health.status,
    }


def _rescale(o: Outcome) -> dict[str, Any]:
    split, followed = o.rescale, o.rescale.followed or {}
    return {
        "bucket": split.parent.bucket,
        "children": [tb.bucket for tb in split.children],
        "sealed_at": split.sealed_at,
        "after_batch": split.after_batch,
        "parent_drained_by": followed.get("parent_drained_by"),
        "children_assigned_to": followed.get("children_assigned_to", {}),
        "generation": followed.get("generation"),
    }


def _kept_by_lease(o: Outcome) -> list[Any]:
    return [
        i
        for i in o.after.plan.items
        if i.kind == "snapshot" and i.reason.startswith("pinned by lease")
    ]


def opening(table: str, rows: int, batches: int) -> str:
    """What the demo says before it starts: what it writes and reads, and its own table
    settings, chosen (unlike the defaults) so that retention has work to show."""
    settings = [
        (
            f"kv.snapshot.num-retained={PROPERTIES['kv.snapshot.num-retained']}",
            "keep only the newest snapshot of each bucket (default 2)",
        ),
        (
            f"log.retention={human_duration(parse_duration(PROPERTIES['log.retention']))}",
            "keep no log for its age alone (default 7d)",
        ),
        (
            "log.retention.respect-consumers="
            + str(PROPERTIES["log.retention.respect-consumers"]).lower(),
            "but keep the log the consumer group has not read (default false)",
        ),
    ]
    width = max(len(k) for k, _ in settings)
    return "\n".join(
        [
            f"demo: {rows} order upserts in {batches} batches into {table} ({BUCKETS} buckets), "
            f"read by a group of {GROUP_SIZE} consumers at half the pace",
            f"demo: table {table} is set up so that retention has work to show:",
            *(f"  {k.ljust(width)}  {why}" for k, why in settings),
        ]
    )


def render(
    conn: Connection, o: Outcome, figures: dict[str, Any], checks: dict[str, bool], elapsed: float
) -> str:
    """What the demo prints at its end: the story in the order it happened (the group's
    assignment, the takeover, the lease, the split, the group's describe table, retention and
    Spark's count by status), then the checks, one a line, then a short summary."""
    summary = format_fields(_summary(conn, o, figures, checks, elapsed))
    return "\n" + "\n\n".join([*_story(o, figures), check_list(checks), f"Summary\n{summary}"])


def _story(o: Outcome, figures: dict[str, Any]) -> list[str]:
    """The demo's sections, in the order of what they tell."""
    joined, takeover, group_id = o.joined, o.takeover, o.group_id
    stayed = ", ".join(m.name for m in o.audit.live)
    moved = format_table(takeover["moved"], ["bucket", "from", "to", "committed", "resumed_at"])
    counts = [{"status": s, "count": n} for s, n in o.final_read[2].items()]
    layout, after_split = o.table.layout, (o.rescale.followed or {}).get("assignment", [])
    plan_bucket = 0 if layout.is_active(0) else min(tb.bucket for tb in o.table.buckets)
    plan_title = f"bucket {plan_bucket}" + ("" if plan_bucket == 0 else ", as bucket 0 was split")
    return [
        f"Consumer group {group_id}: {len(joined)} consumers joined in "
        f"{human_duration(o.join_seconds)}, generation {joined[0]['generation']}\n"
        f"{format_table(joined)}",
        f"Takeover after batch {o.pin_after + 1}: {takeover['closed']} committed and closed; "
        f"{stayed} own all {BUCKETS} buckets at generation {takeover['generation'][1]} "
        f"(was {takeover['generation'][0]}) after {human_duration(takeover['seconds'])}, "
        f"resuming from the committed offsets\n{moved}",
        _lease_line(o),
        f"{split_line(figures['rescale'])}\n{format_table(after_split)}",
        f"Consumer group {group_id} (before retention): {o.audit.consumed} records read at half "
        f"the write rate, lag {figures['group']['lag']}, status {o.after.health.status}\n"
        f"{format_table(frame_rows(o.after.lag), LAG_COLUMNS)}",
        f"Retention plan, {plan_title} (before the run)\n"
        f"{format_table(_plan_rows(o, plan_bucket))}\n{_retention_line(o, figures)}",
        f"Spark: count by status of the latest snapshots\n{format_table(counts)}",
    ]


def _lease_line(o: Outcome) -> str:
    info = o.after.lease_info
    return (
        f"Lease after batch {o.pin_after + 1}: {info.lease_id} pinned the latest snapshots of "
        f"all {len(info.pins)} buckets (keepalive, expires {info.expires_at:%H:%M:%S} UTC) and "
        f"read {o.pinned.first_read[0]} rows through them while the writes went on"
    )


def _retention_line(o: Outcome, figures: dict[str, Any]) -> str:
    report = o.after.report
    deleted = ", ".join(f"{n} {k}s" for k, n in figures["retention"]["deleted"].items())
    return (
        f"Retention ran: deleted {deleted} ({human_bytes(report.freed_bytes)}); "
        f"{len(_kept_by_lease(o))} snapshots kept for the lease, which read the same "
        f"{o.after.second_read[0]} rows after it and was dropped at the end"
    )


def check_list(checks: dict[str, bool]) -> str:
    """The checks, one a line: "ok" or "FAILED", then what it checks."""
    return "Checks\n" + "\n".join(
        f"  {'ok' if passed else 'FAILED':6}  {what}" for what, passed in checks.items()
    )


def split_line(rescale: dict[str, Any]) -> str:
    """The line saying which bucket was split and how the group followed it."""
    parent, (low, high) = rescale["bucket"], rescale["children"]
    owners = rescale["children_assigned_to"]
    return (
        f"Split after batch {rescale['after_batch']}: bucket {parent}, the hottest "
        f"({rescale['sealed_at']:,} records), sealed at offset {rescale['sealed_at']:,} → "
        f"{low}, {high}; the group read {parent} to its seal, then {low} → {owners[low]}, "
        f"{high} → {owners[high]} at generation {rescale['generation']}"
    )


def _summary(
    conn: Connection, o: Outcome, figures: dict[str, Any], checks: dict[str, bool], elapsed: float
) -> dict[str, Any]:
    passed = sum(checks.values())
    return {
        "rows written": o.tally.written,
        "deletes": o.tally.deleted,
        "live keys": figures["live_keys"],
        "buckets": (
            f"{figures['buckets']} (bucket {o.rescale.parent.bucket} split into "
            + ", ".join(str(tb.bucket) for tb in o.rescale.children)
            + ")"
        ),
        "snapshots taken": o.tally.snapshots,
        "read through the lease": f"{o.pinned.first_read[0]} rows, before and after retention",
        "rows read by Spark": f"{o.final_read[0]} (latest snapshots)",
        "checks": f"{passed} of {len(checks)} passed",
        "elapsed": human_duration(elapsed),
        "warehouse": figures["warehouse"],
        "zookeeper": f"{figures['zookeeper']} (namespace {conn.namespace})",
    }


def _plan_rows(o: Outcome, bucket: int) -> list[dict[str, Any]]:
    """The retention plan's snapshots and segments of ``bucket``."""
    return [
        {"item": f"{i.kind} {i.item_id}", "action": i.action, "reason": i.reason}
        for i in o.after.plan.items
        if i.kind in ("snapshot", "segment") and i.table_bucket and i.table_bucket.bucket == bucket
    ]
