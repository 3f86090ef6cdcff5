"""Shared benchmark plumbing: the benchmark record, Spark and warehouse setup, seeded data,
timing and instrumentation helpers.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from leasekit import testing

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from leasekit.connection import Connection

__all__ = [
    "Benchmark",
    "Outcome",
    "Timer",
    "ORDERS_DDL",
    "log",
    "bench_spark",
    "temp_warehouse",
    "orders_batch",
    "timed",
    "cpu_seconds",
    "cpu_delta",
    "cpu_figures",
    "ratio_or_none",
    "median",
    "spread",
    "alternate",
    "counterbalanced",
    "process_cpu_seconds",
    "machine_info",
    "settle",
    "load_average",
    "instrumented",
    "zk_cpu_seconds",
    "zk_monitor",
    "machine_cpu_seconds",
    "jvm_gc_seconds",
    "SideMeter",
    "slow_runs",
]

ORDERS_DDL = "id BIGINT NOT NULL, customer STRING, status STRING, amount DOUBLE, ts TIMESTAMP"
"""The table every data benchmark writes: orders keyed by ``id``."""

STATUSES = ("new", "paid", "shipped", "delivered", "cancelled", "returned")
STATUS_WEIGHTS = (0.10, 0.25, 0.25, 0.30, 0.07, 0.03)
CUSTOMERS = 100_000
TS_START_US = 1_735_689_600_000_000  # 2025-01-01T00:00:00Z
TS_SPAN_US = 90 * 86_400 * 1_000_000

_T0 = time.perf_counter()


@dataclass(frozen=True)
class Outcome:
    """What one benchmark measured."""

    measured: float
    """The headline figure compared with the target (a ratio or a value)."""
    figures: dict[str, Any]
    """Further summary figures (median times, counts), printed and stored."""
    runs: list[dict[str, Any]]
    """Raw figures of every timed run, stored only in the results file."""
    parameters: dict[str, Any]
    """Sizes and settings the benchmark ran with."""
    checks: dict[str, bool] = field(default_factory=dict)
    """Correctness checks (both sides agree, ...); a failed one fails the benchmark."""


@dataclass(frozen=True)
class Benchmark:
    """A registered benchmark: what it measures, its target, and how to run it."""

    id: str
    """Identifier from docs/benchmarks.md (``"B7"``)."""
    what: str
    """One line: what is compared with what."""
    metric: str
    """``"ratio"`` or ``"value"``: the key the measured figure is reported under."""
    target: float
    """The target the measured figure is checked against."""
    op: str
    """``"<="`` or ``">="``: how the measured figure must compare with the target."""
    run: Callable[[SparkSession | None, bool, int], Outcome]
    """``run(spark, quick, runs)`` measures and returns the outcome (``spark`` is None when
    the benchmark does not use Spark)."""
    unit: str = ""
    """Unit of a value metric (``"s"``, ``"B"``); empty for ratios."""
    target_note: str = ""
    """Further targets, checked as ``Outcome.checks`` (shown beside the main target)."""
    spark: bool = True
    """Whether the benchmark needs a SparkSession (ZooKeeper-only ones do not)."""
    default_runs: int = 5
    """Timed runs when ``--runs`` is not given (docs/benchmarks.md: the median of at least 5)."""
    quick_runs: int = 3
    """Timed runs in the smoke of every benchmark (``python -m bench.run --all --quick``)."""
    quick_full_size: bool = False
    """Whether the smoke runs this benchmark at full size (fewer runs): where that is cheap and
    the headline depends on the size; else at its quick size."""
    quick_figure: str = ""
    """Where the smoke finds the figure it compares with the committed headline: a key of the
    outcome's figures, dotted into a nested one (``"at_10000.plan_s"``: the quick run's second
    size is the committed first size); empty: the headline itself."""
    quick_note: str = ""
    """How the smoke's figure differs from the committed one in what it measures (size,
    members), shown beside the comparison; empty when it measures the same thing."""
    quick_less_work: bool = False
    """Whether the smoke's figure is a time over less work than the committed one (a smaller
    size): it is then expected below the committed spread, and only a slower figure moved."""
    spark_jars: Callable[[], list[str]] | None = None
    """Jars the benchmark's SparkSession needs on its classpath from the start (a peer's
    connector, such as Spark's Kafka source): called before the session is built, the paths go
    to ``spark.jars``; None: the session carries pyspark's jars only."""

    def passes(self, measured: float) -> bool:
        return measured <= self.target if self.op == "<=" else measured >= self.target


@dataclass
class Timer:
    """Cumulative seconds and call counts per name (see ``instrumented``)."""

    seconds: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        self.calls[name] = self.calls.get(name, 0) + 1

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()


def log(message: str) -> None:
    """Progress line on stderr, with seconds since the harness started."""
    print(f"[{time.perf_counter() - _T0:7.1f}s] {message}", file=sys.stderr, flush=True)


def bench_spark(jars: Sequence[str] = ()) -> SparkSession:
    """The benchmark SparkSession: local[*], no UI, 4g driver, UTC, ERROR logging; ``jars``
    (file paths) join its classpath as ``spark.jars``, which only a new JVM takes."""
    from pyspark.sql import SparkSession

    if not os.environ.get("JAVA_HOME"):
        from leasekit.embedded.java import java_home

        os.environ["JAVA_HOME"] = java_home()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master("local[*]")
        .appName("leasekit-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "4g")
        .config("spark.sql.session.timeZone", "UTC")
    )
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@contextlib.contextmanager
def temp_warehouse(label: str) -> Iterator[Connection]:
    """A connection on a fresh namespace of a new temporary warehouse.

    ``connect()`` starts the warehouse's embedded ZooKeeper; on exit it is stopped and the
    warehouse removed.
    """
    import leasekit
    from leasekit import embedded

    root = tempfile.mkdtemp(prefix=f"leasekit-bench-{label.lower()}-")
    conn = None
    try:
        log(f"warehouse {root}: starting ZooKeeper")
        conn = leasekit.connect(
            warehouse=root, namespace=f"bench-{label.lower()}-{uuid.uuid4().hex[:8]}"
        )
        yield conn
    finally:
        if conn is not None:
            conn.close()
        embedded.stop(os.path.join(root, "_zookeeper"))
        shutil.rmtree(root, ignore_errors=True)


_CUSTOMER_NAMES: pa.Array | None = None


def orders_batch(rng: np.random.Generator, ids: np.ndarray) -> pa.Table:
    """Order rows for ``ids``, as a pyarrow table of the ``ORDERS_DDL`` columns."""
    global _CUSTOMER_NAMES
    if _CUSTOMER_NAMES is None:
        _CUSTOMER_NAMES = pa.array([f"customer-{i:06d}" for i in range(CUSTOMERS)])
    n = len(ids)
    status = pa.array(STATUSES).take(pa.array(rng.choice(len(STATUSES), n, p=STATUS_WEIGHTS)))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "customer": _CUSTOMER_NAMES.take(pa.array(rng.integers(0, CUSTOMERS, n))),
            "status": status,
            "amount": pa.array(np.round(rng.gamma(2.0, 40.0, n), 2)),
            "ts": pa.array(
                TS_START_US + rng.integers(0, TS_SPAN_US, n), pa.timestamp("us", tz="UTC")
            ),
        }
    )


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """``(seconds, result)`` of calling ``fn``, by ``time.perf_counter``."""
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def cpu_seconds(spark: SparkSession) -> float | None:
    """CPU seconds used so far by the Spark driver JVM (all local executors) and this process.

    Less sensitive than wall time to other work on a shared machine; None off Linux.
    """
    jvm = spark.sparkContext._jvm
    if jvm is None:
        return None
    try:
        with open(f"/proc/{jvm.java.lang.ProcessHandle.current().pid()}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / os.sysconf("SC_CLK_TCK") + time.process_time()


def cpu_delta(spark: SparkSession, before: float | None) -> float | None:
    """CPU seconds used since ``before`` (a ``cpu_seconds`` reading)."""
    after = cpu_seconds(spark)
    return None if before is None or after is None else round(after - before, 3)


def ratio_or_none(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def cpu_figures(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Median CPU seconds of both sides and the median per-run CPU ratio (None if unknown)."""
    if any(r.get("cpu_ratio") is None for r in runs):
        return {"cpu_ratio": None}
    return {
        "cpu_ratio": round(median([r["cpu_ratio"] for r in runs]), 3),
        "leasekit_cpu_s": round(median([r["leasekit_cpu_s"] for r in runs]), 3),
        "baseline_cpu_s": round(median([r["baseline_cpu_s"] for r in runs]), 3),
    }


def settle(spark: SparkSession | None) -> None:
    """Quiet the machine before a timed side: flush written files, collect garbage in both VMs."""
    os.sync()
    gc.collect()
    jvm = spark.sparkContext._jvm if spark is not None else None
    if jvm is not None:
        jvm.java.lang.System.gc()
    time.sleep(0.5)


def machine_cpu_seconds() -> float | None:
    """CPU seconds every process on the machine has used since boot (``/proc/stat``: user,
    nice, system, irq, softirq and steal); None off Linux. Its growth over a timed side, less
    the benchmark's own CPU, is the work other processes did meanwhile."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def jvm_gc_seconds(spark: SparkSession | None) -> float | None:
    """Seconds the Spark driver JVM (all local executors) has spent in garbage collection,
    summed over its collectors; None without a JVM."""
    jvm = spark.sparkContext._jvm if spark is not None else None
    if jvm is None:
        return None
    beans = jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    return sum(max(0, bean.getCollectionTime()) for bean in beans) / 1000.0


class SideMeter:
    """What one timed side cost besides its wall time: its own CPU seconds (Spark's JVM and
    this process, or this process alone without Spark), the JVM's garbage collection seconds,
    the CPU seconds the rest of the machine used meanwhile, and the load average before it.

    ``with SideMeter(spark) as m: ...`` then ``m.figures(prefix)``.
    """

    def __init__(self, spark: SparkSession | None, own: Callable[[], float | None] | None = None):
        self._spark = spark
        self._own = own or (
            (lambda: cpu_seconds(spark)) if spark is not None else time.process_time
        )
        self.cpu_s: float | None = None
        self.gc_s: float | None = None
        self.other_cpu_s: float | None = None
        self.load: float | None = None

    def __enter__(self) -> SideMeter:
        self.load = load_average()
        self._gc0 = jvm_gc_seconds(self._spark)
        self._machine0 = machine_cpu_seconds()
        self._own0 = self._own()
        return self

    def __exit__(self, *exc: object) -> None:
        own1, machine1 = self._own(), machine_cpu_seconds()
        gc1 = jvm_gc_seconds(self._spark)
        if self._own0 is not None and own1 is not None:
            self.cpu_s = round(own1 - self._own0, 3)
        if self.cpu_s is not None and self._machine0 is not None and machine1 is not None:
            self.other_cpu_s = round(max(0.0, machine1 - self._machine0 - self.cpu_s), 3)
        if self._gc0 is not None and gc1 is not None:
            self.gc_s = round(gc1 - self._gc0, 3)

    def figures(self, prefix: str) -> dict[str, Any]:
        return {
            f"{prefix}_cpu_s": self.cpu_s,
            f"{prefix}_gc_s": self.gc_s,
            f"{prefix}_other_cpu_s": self.other_cpu_s,
            f"{prefix}_load": self.load,
        }


def slow_runs(runs: Sequence[dict[str, Any]], key: str, target: float, op: str) -> dict[str, Any]:
    """Which runs missed ``target`` (per-run ``key``, compared by ``op``) and what the machine
    did meanwhile: the CPU seconds other processes used during the run's timed sides
    (``other_cpu_s``) and its load, beside the same figures for the runs that met it."""

    def met(r: dict[str, Any]) -> bool:
        return r[key] <= target if op == "<=" else r[key] >= target

    def other(rs: Sequence[dict[str, Any]]) -> float | None:
        values = [r["other_cpu_s"] for r in rs if r.get("other_cpu_s") is not None]
        return round(median(values), 3) if values else None

    missed = [r for r in runs if not met(r)]
    return {
        "missed": len(missed),
        "missed_runs": [
            {
                "run": runs.index(r) + 1,
                key: round(r[key], 3),
                "other_cpu_s": r.get("other_cpu_s"),
                "load_average": r.get("load_average"),
            }
            for r in missed
        ],
        "other_cpu_s_missed": other(missed),
        "other_cpu_s_met": other([r for r in runs if met(r)]),
    }


def load_average() -> float | None:
    """The 1-minute load average (other work on the machine skews the figures)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def spread(values: Sequence[float], digits: int = 3) -> dict[str, Any]:
    """How per-run figures spread around their median: min, quartiles, max, IQR and the count.

    Quartiles are ``statistics.quantiles(method="inclusive")`` (equal to min and max for
    fewer than 2 runs), so the IQR is that of the runs themselves, not an estimate.
    """
    ordered = sorted(float(v) for v in values)
    q1, q2, q3 = (
        statistics.quantiles(ordered, n=4, method="inclusive") if len(ordered) > 1 else ordered * 3
    )
    return {
        "n": len(ordered),
        "min": round(ordered[0], digits),
        "q1": round(q1, digits),
        "median": round(q2, digits),
        "q3": round(q3, digits),
        "max": round(ordered[-1], digits),
        "iqr": round(q3 - q1, digits),
    }


def alternate(run_index: int, sides: Sequence[str]) -> list[str]:
    """The order of the sides in run ``run_index``: as given on even runs, reversed on odd ones."""
    return list(sides) if run_index % 2 == 0 else list(reversed(sides))


def counterbalanced(run_index: int, sides: Sequence[str], rounds: int = 1) -> list[str]:
    """The order of the sides in run ``run_index`` when each runs twice per round: A B B A on
    even runs, B A A B on odd ones, each further round the mirror of the one before (A B B A
    B A A B ...). Averaging a side's timings cancels what the position in the run and a steady
    drift within it add (the first side after a pause, a machine getting busier), which a
    single alternating pair leaves in every run's ratio; more rounds average more of the
    machine's noise into each run."""
    first = alternate(run_index, sides)
    order: list[str] = []
    for r in range(rounds):
        block = [*first, *reversed(first)]
        order += block if r % 2 == 0 else [*reversed(first), *first]
    return order


def machine_info(spark: SparkSession | None) -> dict[str, Any]:
    """Cores, memory and the versions that decide the figures (Spark's only with a session)."""
    import pyspark

    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count()
    try:
        memory_gb = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        memory_gb = None
    info = {
        "cores": os.cpu_count(),
        "cores_available": affinity,
        "memory_gb": memory_gb,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "pyspark": pyspark.__version__,
        "pyarrow": pa.__version__,
        "numpy": np.__version__,
    }
    if spark is None:
        return {**info, "java": _java_version()}
    jvm = spark.sparkContext._jvm
    return {
        **info,
        "spark": spark.version,
        "java": jvm.System.getProperty("java.version") if jvm is not None else None,
        "spark_master": spark.sparkContext.master,
        "spark_default_parallelism": spark.sparkContext.defaultParallelism,
        "spark_shuffle_partitions": spark.conf.get("spark.sql.shuffle.partitions"),
        "spark_driver_memory": spark.conf.get("spark.driver.memory", None),
    }


def _java_version() -> str | None:
    """``java.version`` of the Java that runs the embedded ZooKeeper, without a Spark JVM."""
    from leasekit.embedded.java import find_java

    try:
        out = subprocess.run(
            [find_java(), "-XshowSettings:properties", "-version"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stderr
    except Exception:  # noqa: BLE001 - machine info is best effort
        return None
    for line in out.splitlines():
        key, _, value = line.strip().partition(" = ")
        if key == "java.version":
            return value
    return None


def zk_cpu_seconds(conn: Connection) -> float | None:
    """CPU seconds used so far by the embedded ZooKeeper server of ``conn``'s warehouse and
    this process (kazoo's threads included); None off Linux or without an embedded server."""
    from leasekit import embedded

    try:
        server = embedded.status(os.path.join(conn.warehouse, "_zookeeper"))
    except (OSError, AttributeError):
        return None
    used = None if server is None else process_cpu_seconds(server.pid)
    return None if used is None else used + time.process_time()


def process_cpu_seconds(pid: int) -> float | None:
    """CPU seconds process ``pid`` has used so far (user and system); None off Linux or when
    it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # proc(5) 14, 15


def zk_monitor(conn: Connection) -> dict[str, int]:
    """Integer figures of ZooKeeper's ``mntr`` (``znode_count``, ``approximate_data_size``,
    ...), without the ``zk_`` prefix; empty when the server does not answer."""
    from leasekit import embedded
    from leasekit.errors import LeasekitError

    try:
        text = embedded.four_letter(
            testing.context(conn).store.hosts.split(",")[0].split("/")[0], "mntr", timeout=5.0
        )
    except LeasekitError:
        return {}
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition("\t")
        if key.startswith("zk_") and value.strip().lstrip("-").isdigit():
            out[key[3:]] = int(value)
    return out


@contextlib.contextmanager
def instrumented(timer: Timer, targets: dict[str, str]) -> Iterator[Timer]:
    """Time calls to library functions for a profile, restoring them on exit.

    ``targets`` maps a label to ``"module:attr"`` or ``"module:Class.method"``. Each label
    gets its calls' exclusive wall time (time in nested instrumented calls of the same thread
    goes to theirs); calls on other threads (a read ahead) count too, so with them the labels
    may add up to more than the enclosing wall time.
    """
    restore: list[tuple[Any, str, Any]] = []
    local = threading.local()  # per thread, per active call: time spent in instrumented callees
    lock = threading.Lock()

    def wrap(label: str, func: Callable[..., Any]) -> Callable[..., Any]:
        def timed_call(*args: Any, **kwargs: Any) -> Any:
            nested = local.__dict__.setdefault("nested", [])
            nested.append(0.0)
            start = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - start
                with lock:
                    timer.add(label, elapsed - nested.pop())
                if nested:
                    nested[-1] += elapsed

        return timed_call

    try:
        for label, spec in targets.items():
            module_name, _, attr_path = spec.partition(":")
            owner: Any = importlib.import_module(module_name)
            *parents, attr = attr_path.split(".")
            for parent in parents:
                owner = getattr(owner, parent)
            original = getattr(owner, attr)
            restore.append((owner, attr, original))
            setattr(owner, attr, wrap(label, original))
        yield timer
    finally:
        for owner, attr, original in reversed(restore):
            setattr(owner, attr, original)
