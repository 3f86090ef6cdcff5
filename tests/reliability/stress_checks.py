"""The stress run's invariants: what its checkers verify while the workers run, and what it
verifies on quiet metadata after a ZooKeeper restart and at the end; and what the compaction
races (test_compaction_*.py) check of a log: its segments, and its records as a consumer reads
them against what the appends acknowledged."""

from __future__ import annotations

import bisect
import os
import time
from collections import Counter
from typing import TYPE_CHECKING

import pyarrow as pa
from stress_plan import GRACE_MS, TABLES, TB, epoch_ms

import leasekit as lk
from leasekit import spark as lks
from leasekit import testing
from leasekit.log.segments import list_segments
from leasekit.log.state import read_states
from leasekit.snapshots.catalog import list_snapshots, read_latest
from leasekit.snapshots.cover import cover
from leasekit.tables.bucketing import murmur3_hash
from leasekit.zk.formats import EMPTY_PIN, BucketState, LeaseRecord, PinChunk, SnapshotRecord

if TYPE_CHECKING:
    from stress_workload import Stress


def uncovered_buckets(table, acquired) -> list[int]:
    """The active buckets of ``table`` that neither a pin of their own nor one of an ancestor's
    covers (K4)."""
    pinned = {tb.bucket for tb in acquired if tb.table == table.name}

    def covered(b: int) -> bool:
        return (
            b in pinned
            or bool(table.layout.parents(b))
            and all(covered(p) for p in table.layout.parents(b))
        )

    return [b for b in table.active if not covered(b)]


def _sealed(table, bucket: int) -> str:
    return "active" if table.layout.is_active(bucket) else "sealed"


def log_problems(table, buckets=None, *, quiet: bool = True) -> list[str]:
    """W1, R8: the segments of each of ``buckets`` (default: every bucket the table has had,
    sealed ones too) follow each other with no gap and no overlap, and every listed file exists.
    ``quiet`` (nothing writes meanwhile): they also run exactly from the bucket's beginning to
    its end offset. Otherwise a problem counts only if a second listing shows it again: a merge
    or a retention pass between the reads of one listing can show a passing gap, and retention
    deletes a segment's znode first, its file after."""
    table = table.refresh()
    buckets = list(range(table.layout.count) if buckets is None else buckets)
    problems = _segment_problems(table, buckets, quiet)
    if problems and not quiet:
        again = set(_segment_problems(table, buckets, quiet))
        problems = [p for p in problems if p in again]
    return problems


def _segment_problems(table, buckets: list[int], quiet: bool) -> list[str]:
    bounds = dict(zip(buckets, read_states(table, buckets))) if quiet else {}
    problems = []
    for bucket, segs in list_segments(table, buckets).items():
        where = f"{table.name}/{bucket} ({_sealed(table, bucket)})"
        state = bounds.get(bucket)
        expected = state.begin if state is not None else None
        for seg in segs:
            extent = f"[{seg.base_offset}, {seg.end_offset})"
            if expected is not None and seg.base_offset != expected:
                kind = "a gap" if seg.base_offset > expected else "an overlap"
                problems.append(f"W1, R8: {where}: {kind} before segment {extent} at {expected}")
            expected = seg.end_offset
            if not os.path.exists(seg.file):
                problems.append(
                    f"W1, R8: {where} lists segment {extent} without its file {seg.file}"
                )
        if state is not None and (expected if segs else state.begin) != state.end:
            problems.append(
                f"W1: {where}: segments end at {expected}, the end offset is {state.end}"
            )
        elif quiet and state is None and segs:
            problems.append(f"W1: {where} lists segments without a state")
    return problems


Rec = tuple[int, int, str, int, "str | None"]
"""A record as a consumer reads it: offset, timestamp (ms), op, id, v."""


def records(data: pa.Table) -> list[Rec]:
    stamps = data.column("_timestamp").cast(pa.int64()).to_pylist()
    return list(
        zip(
            data.column("_offset").to_pylist(),
            stamps,
            data.column("_op").to_pylist(),
            data.column("id").to_pylist(),
            data.column("v").to_pylist(),
        )
    )


def read_all(conn: lk.Connection, name: str, max_records: int = 500) -> dict[int, list[Rec]]:
    """Every record of every bucket the table has had, as a consumer reads it from the
    beginning (C1: its position moves past each record handed out)."""
    table = conn.table(name).refresh()
    tbs = [TB(name, b) for b in range(table.layout.count)]
    ends, begins = table.end_offsets(), table.beginning_offsets()
    got: dict[int, list[Rec]] = {tb.bucket: [] for tb in tbs}
    reached = dict(begins)
    consumer = conn.consumer(auto_offset_reset="earliest", parent_first=False)
    try:
        consumer.assign(tbs)
        deadline = time.monotonic() + 60
        while any(reached[tb] < ends[tb] for tb in tbs):
            assert time.monotonic() < deadline, f"read {reached} of {ends}"
            for tb, data in consumer.poll("100ms", max_records=max_records).items():
                got[tb.bucket] += records(data)
                reached[tb] = got[tb.bucket][-1][0] + 1
    finally:
        consumer.close()
    return got


def check_log(
    conn: lk.Connection,
    name: str,
    appends: list[dict],
    originals: dict[tuple[int, int], tuple[int, int]] | None = None,
    got: dict[int, list[Rec]] | None = None,
) -> list[str]:
    """What users see of the table's log after everything (nothing writes meanwhile), against
    the acknowledged ``appends``: segments contiguous with their files (W1, R8); each bucket read
    from its beginning holds every offset to its end once, in order (W1), with non-decreasing
    timestamps (W3); each acknowledged append that retention left is there whole, with its rows
    and one timestamp, its commit's, taken between the call's start and end (W3); the records
    at the offsets in ``originals`` are the very ones appended there, timestamps included (R8);
    and nothing else is there. The rows of one append to one bucket are compared as a set: an
    append whose bucket a rescale sealed under it routes them again in another order (keys
    differ within an append here, so that order is no key's)."""
    table = conn.table(name).refresh()
    problems = log_problems(table)
    begins, ends = table.beginning_offsets(), table.end_offsets()
    got = read_all(conn, name) if got is None else got
    at: dict[tuple[int, int], Rec] = {}
    for bucket, recs in got.items():
        tb = TB(name, bucket)
        if [r[0] for r in recs] != list(range(begins[tb], ends[tb])):
            problems.append(f"W1: {tb} read offsets {_extents([r[0] for r in recs])}, stored "
                            f"[{begins[tb]}, {ends[tb]})")  # fmt: skip
        if [r[1] for r in recs] != sorted(r[1] for r in recs):
            problems.append(f"W3: {tb} timestamps go down")
        at.update(((bucket, r[0]), r) for r in recs)
    owned: set[tuple[int, int]] = set()
    for append in appends:
        problems += _check_append(name, append, at, begins, owned)
    phantom = sorted(set(at) - owned)
    if phantom:
        problems.append(f"{len(phantom)} records no append acknowledged, e.g. {phantom[:5]}")
    changed = [
        (k, v, at[k][1::2]) for k, v in (originals or {}).items() if k in at and at[k][1::2] != v
    ]
    if changed:
        problems.append(f"R8: {len(changed)} records moved or changed time, e.g. {changed[:5]}")
    return problems


def _check_append(name, append, at, begins, owned) -> list[str]:
    problems = []
    ids = set()
    whole = True
    for key, (start, end) in append["ranges"].items():
        bucket = int(key)
        if start < begins[TB(name, bucket)]:
            whole = False
            if end > begins[TB(name, bucket)]:
                problems.append(f"R3: {name}/{bucket} [{start}, {end}) cut by the beginning")
            continue
        recs = [at.get((bucket, o)) for o in range(start, end)]
        if None in recs:
            problems.append(f"W1: {name}/{bucket} acknowledged [{start}, {end}) is not all read")
            continue
        owned.update((bucket, o) for o in range(start, end))
        mine = {r[3] for r in recs}
        ids |= mine
        want = [tuple(row) for row in append["rows"] if row[1] in mine]
        if sorted(r[2:] for r in recs) != sorted(want):
            problems.append(f"R8: {name}/{bucket} [{start}, {end}) reads {recs}, appended {want}")
        stamps = {r[1] for r in recs}
        if len(stamps) != 1 or not append["t0"] <= min(stamps) <= append["t1"]:
            problems.append(
                f"W3: {name}/{bucket} [{start}, {end}) has timestamps {sorted(stamps)}, "
                f"committed within [{append['t0']}, {append['t1']}]"
            )
    if whole and ids != {row[1] for row in append["rows"]}:
        problems.append(f"W1: the rows of {append['rows']} read as {sorted(ids)}")
    return problems


def _extents(offsets: list[int]) -> list[tuple[int, int]]:
    """Consecutive runs of ``offsets`` as [first, last] pairs (a short description)."""
    out: list[list[int]] = []
    for o in offsets:
        if out and o == out[-1][1] + 1:
            out[-1][1] = o
        else:
            out.append([o, o])
    return [tuple(e) for e in out[:8]]  # type: ignore[misc]


def _rows(df) -> tuple[dict[int, str], list[int]]:
    """The rows of ``df`` by key, and the keys it holds more than once."""
    keys = Counter()
    rows = {}
    for row in df.collect():
        keys[row["id"]] += 1
        rows[row["id"]] = row["v"]
    return rows, sorted(k for k, n in keys.items() if n > 1)


def _owned(rows: dict[int, str], classes) -> dict[int, str]:
    """The rows whose key hashes into one of the residue classes (None: all of them)."""
    if classes is None or not rows:
        return rows
    keys = list(rows)
    hashes = murmur3_hash(pa.table({"id": pa.array(keys, pa.int64())}), ["id"]).astype("int64")
    return {
        k: rows[k]
        for k, h in zip(keys, hashes.tolist())
        if any(h % c.modulus == c.residue for c in classes)
    }


def _state_at(spark, table, offsets: dict[int, int]) -> dict[int, str]:
    """S1, K3: the table's state at ``offsets`` (bucket: offset), each key read at the offset of
    the bucket that stands for it: one read when no bucket descends from another, else each
    bucket's read restricted to the keys it stands for (``cover``), as ``read_snapshots``
    counts them."""
    used = cover(table.refresh().layout, offsets).used
    whole = {b: off for b, off in offsets.items() if used.get(b, ()) is None}
    state, _ = _rows(lks.read_at(spark, table, whole)) if whole else ({}, [])
    for b, classes in used.items():
        if classes is not None:
            part, _ = _rows(lks.read_at(spark, table, {b: offsets[b]}))
            state.update(_owned(part, classes))
    return state


def _differences(got: dict[int, str], want: dict[int, str]) -> list[str]:
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    differ = sorted(k for k in set(got) & set(want) if got[k] != want[k])
    return [
        f"{len(keys)} keys {what} (e.g. {keys[:5]})"
        for what, keys in (("missing", missing), ("extra", extra), ("with other values", differ))
        if keys
    ]


def check_latest(conn, spark, name: str, lease_id: str) -> list[str] | None:
    """K3, K4, S1: ``read_snapshots`` of ``latest_snapshots()`` holds each key once and equals
    ``read_at`` at the offsets those snapshots were taken at. The snapshots are pinned by lease
    ``lease_id`` meanwhile (retention may delete them otherwise); None when one of them went
    before it was pinned."""
    table = conn.table(name)
    latest = table.latest_snapshots()
    if not latest:
        return []
    with conn.lease(lease_id, "2m") as lease:  # dropped at the end of the block
        if lease.acquire(latest).acquired != latest:
            return None  # one was deleted meanwhile: another round
        stored = {
            (s.table_bucket, s.snapshot_id): s
            for s in list_snapshots(table, sorted(tb.bucket for tb in latest))
        }
        if any(key not in stored for key in latest.items()):
            return [f"{name}: pinned latest snapshots {latest} are not all stored"]
        offsets = {tb.bucket: stored[(tb, sid)].log_offset for tb, sid in latest.items()}
        shown = {tb.bucket: sid for tb, sid in latest.items()}
        try:
            got, twice = _rows(lks.read_snapshots(spark, table, latest))
            want = _state_at(spark, table, offsets)
        except (lk.InvalidArgumentError, lk.OffsetOutOfRangeError) as exc:
            return [f"{name}: latest snapshots {shown} cannot be read: {exc}"]
    problems = [f"{len(twice)} keys read twice (e.g. {twice[:5]})"] if twice else []
    problems += _differences(got, want)
    if not problems:
        return []
    return [
        f"K3, S1: {name}: read_snapshots of latest snapshots {shown} != read_at at their "
        f"offsets {offsets}: " + "; ".join(problems)
    ]


# -- checks on quiet metadata ---------------------------------------------------------------


def verify_acknowledged(conn, stress: Stress) -> list[str]:
    """Every acknowledged append, snapshot and own lease is there (workers quiet)."""
    problems = []
    acked = stress.acked
    for name in TABLES:
        table = conn.table(name)
        ends, begins = table.end_offsets(), table.beginning_offsets()
        known = range(table.layout.count)
        sealed = {b for b in known if not table.layout.is_active(b)}
        segments = list_segments(table, known)
        latest = read_latest(table)
        stored = {(s.table_bucket, s.snapshot_id): s for s in table.snapshots()}
        for bucket in known:
            tb = TB(name, bucket)
            segs = segments.get(bucket, [])
            bounds = [(s.base_offset, s.end_offset) for s in segs]
            expected = begins[tb]  # W1: the stored log is contiguous from begin to end
            for base, end in bounds:
                if base != expected:
                    problems.append(f"{tb}: segment at {base}, expected {expected}")
                expected = end
            if expected != ends[tb]:
                problems.append(f"{tb}: segments end at {expected}, end offset {ends[tb]}")
            if any(not os.path.exists(s.file) for s in segs):
                problems.append(f"{tb}: a registered segment file is missing")
            bases = sorted({b for b, _ in bounds} | {ends[tb]})
            ranges = sorted(r for t, r in acked.appends if t == tb)
            for previous, current in zip(ranges, ranges[1:]):
                if current.start < previous.end:
                    problems.append(f"{tb}: acknowledged ranges {previous} and {current} overlap")
            for r in ranges:
                if r.end > ends[tb]:
                    problems.append(f"{tb}: acknowledged {r} beyond end offset {ends[tb]}")
                elif r.start >= begins[tb] and r.end > bases[bisect.bisect_right(bases, r.start)]:
                    # W1, R8: one append is one segment, and a merge keeps it in one piece
                    problems.append(f"{tb}: acknowledged {r} is split over segments")
                elif r.start < begins[tb] < r.end:
                    problems.append(
                        f"{tb}: acknowledged {r} is cut by beginning offset {begins[tb]}"
                    )
            mine = [sid for (t, sid) in acked.snapshots if t == tb]
            if mine and latest.get(bucket, 0) < max(mine) and bucket not in sealed:  # K7
                problems.append(
                    f"{tb}: latest snapshot {latest.get(bucket)} < acknowledged {max(mine)}"
                )
        for (tb, sid), snap in acked.snapshots.items():
            if tb.table != name:
                continue
            now = stored.get((tb, sid))
            if now is not None:
                if (now.log_offset, now.files) != (snap.log_offset, snap.files):
                    problems.append(f"{tb} snapshot {sid} changed: {now} != {snap}")
                if not all(os.path.exists(f) for f in now.files):
                    problems.append(f"{tb} snapshot {sid} lost files")
            elif (
                name,
                tb.bucket,
                sid,
            ) not in acked.deleted_snapshots and not acked.retention_interrupted:
                problems.append(f"{tb} snapshot {sid} vanished without retention deleting it")
            elif sid >= latest.get(tb.bucket, 0) and tb.bucket not in sealed:
                problems.append(f"{tb} snapshot {sid} (the newest) was deleted")
    now = testing.context(conn).server_time_ms()
    stored_leases = {i.lease_id: i for i in conn.leases()}
    for slot in (s for slots in stress.slots for s in slots):
        if not slot.exists:
            continue
        info = stored_leases.get(slot.lease_id)
        if info is None:
            if now <= slot.expires_ms + GRACE_MS:  # L11: never reclaimed before expiry + grace
                problems.append(
                    f"lease {slot.lease_id} gone although acknowledged until {slot.expires_ms}"
                )
        elif info.pins != slot.pins or epoch_ms(info.expires_at) != slot.expires_ms:
            problems.append(
                f"lease {slot.lease_id}: stored {info.pins} until {epoch_ms(info.expires_at)}, "
                f"acknowledged {slot.pins} until {slot.expires_ms}\n"
                + "\n".join(slot.history[-12:])
            )
    return problems


def metadata_consistency(conn) -> list[str]:
    """No orphan pin, lease or snapshot metadata: pins and lease pin arrays agree both ways,
    every lease record decodes and is live, every snapshot's and segment's files exist."""
    ctx = testing.context(conn)
    problems = []
    store, paths = ctx.store, ctx.paths
    lease_ids = store.children(paths.leases) or []
    arrays: dict[str, dict[tuple[str, int], int]] = {}
    for lease_id in lease_ids:
        path = paths.lease(lease_id)
        node = store.get(path)
        if node is None:
            continue
        try:
            record = LeaseRecord.decode(node, path)
        except lk.CorruptMetadataError as exc:
            problems.append(f"orphan lease: {exc}")
            continue
        if record.state != "live":
            problems.append(f"lease {lease_id} left in state {record.state!r}")
        if store.exists(paths.lease_pins(lease_id)) is None:
            problems.append(f"lease {lease_id} has no pins znode")
        arrays[lease_id] = {}
        for name in store.children(paths.lease_pins(lease_id)) or []:
            chunk_path = f"{paths.lease_pins(lease_id)}/{name}"
            table_id, chunk = paths.parse_lease_chunk(name)
            pin_chunk = PinChunk.decode(store.get(chunk_path), chunk_path, table_id, chunk)
            for bucket, sid in pin_chunk.array.items():
                arrays[lease_id][(table_id, bucket)] = sid
                if sid == EMPTY_PIN:
                    continue  # L15: pinned as empty, no pin znode
                if store.exists(paths.pin(table_id, bucket, sid, lease_id)) is None:
                    problems.append(
                        f"lease {lease_id} lists {table_id}/{bucket} snapshot {sid} without a pin"
                    )
    for name in TABLES:
        table = conn.table(name)
        tid = table.table_id
        for bucket in range(table.layout.count):
            node = store.get(paths.bucket(tid, bucket))
            if node is None:
                continue  # a new bucket never written
            state = BucketState.decode(node, paths.bucket(tid, bucket))
            ids = sorted(int(s) for s in store.children(paths.snapshots(tid, bucket)) or [])
            latest = state.latest_snapshot
            if state.sealed and latest not in ids:
                latest = None  # K7: its newest snapshot went (pinned older ones may stay)
            elif ids and (latest != ids[-1] or state.next_snapshot <= ids[-1]):
                problems.append(
                    f"{name}/{bucket}: bucket state {state} disagrees with snapshots {ids}"
                )
            if read_latest(table, [bucket]).get(bucket) != latest:
                problems.append(
                    f"{name}/{bucket}: latest-snapshot array disagrees with the bucket state"
                )
            for sid in ids:
                snap_path = paths.snapshot(tid, bucket, sid)
                files = SnapshotRecord.decode(store.get(snap_path).data, snap_path).files
                if not all(os.path.exists(ctx.warehouse.uri(f)) for f in files):
                    problems.append(
                        f"orphan snapshot metadata: {name}/{bucket} snapshot {sid} lost files"
                    )
                for holder in store.children(snap_path) or []:  # sealed buckets' too
                    where = f"{snap_path}/{holder} ({_sealed(table, bucket)} bucket {bucket})"
                    if holder not in lease_ids:
                        problems.append(f"orphan pin: {where}: lease {holder!r} does not exist")
                    elif arrays.get(holder, {}).get((tid, bucket)) != sid:
                        pinned = arrays.get(holder, {}).get((tid, bucket))
                        problems.append(
                            f"orphan pin: {where}: lease {holder!r} pins snapshot {pinned} there"
                        )
        problems += log_problems(table)  # W1, R8: contiguous, every listed file there
    return problems
