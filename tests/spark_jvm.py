"""Java options that make the suite's Spark drivers start in half the time.

Every process that starts a SparkSession (a notebook's kernel, a CLI command, a stream test's
driver, the session of each pytest worker) pays for the JVM loading, verifying and compiling
the same ten thousand Spark classes, about 20 s of CPU each on a 2-core machine. Two standard
HotSpot features remove most of it, without changing what Spark does:

- a class-data-sharing archive (JDK 13+ dynamic CDS): one training run of a Spark driver
  dumps the classes it loaded, already parsed and verified, to a file that later JVMs map;
- ``-XX:TieredStopAtLevel=1``: the quick C1 compiler only, which suits JVMs working on little
  data (measured: a worker's session spends 30% less CPU over the Spark-heavy tests than with
  C2), and ``-XX:+UseSerialGC``, no parallel GC threads competing for 2 cores.

The archive depends on the exact JVM build and Spark jars: it is built once per machine into a
cache outside the repository (``$XDG_CACHE_HOME/leasekit-tests``), named by a digest of both,
so a second run builds nothing. A JVM whose class path does not match an archive maps none of
it and runs as before; so does one given no archive when the training run failed.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

QUICK_JIT = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m -XX:+UseSerialGC -Xss4m"
"""C1 only, serial GC, and 4 MB thread stacks: C1's frames are larger than C2's, and once a
stream execution thread overflowed the default 1 MB in Java's recursive regex matching. C1
alone shrinks the default code cache to 48 MB, which a worker's session filled in a full run
(47 of 48 MB used, then flushed to 17 MB: the sweeper threw compiled methods away and they were
compiled again); 240 MB is what the JVM reserves by default with both compilers."""

_TRAINING = r"""
import os, sys, tempfile
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader

class Rows(DataSource):
    @classmethod
    def name(cls):
        return "cds_training_rows"
    def schema(self):
        return "k int, v string"
    def reader(self, schema):
        return RowsReader()

class RowsReader(DataSourceReader):
    def read(self, partition):
        yield from ((i, str(i)) for i in range(100))

spark = (SparkSession.builder.master("local[2]").appName("cds-training")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4")
         .getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
spark.dataSource.register(Rows)
out = tempfile.mkdtemp()
spark.range(10000).selectExpr("id % 7 AS k", "id").groupBy("k").count().collect()
frame = spark.createDataFrame([(1, "a"), (2, "b")], "k int, v string")
frame.write.mode("overwrite").parquet(os.path.join(out, "p"))
spark.read.parquet(os.path.join(out, "p")).where("k > 1").collect()
spark.read.format("cds_training_rows").load().join(frame, "k").toPandas()
frame.toPandas()
from pyspark import SparkContext
jvm = SparkContext._gateway.proc
spark.stop()
jvm.stdin.close()  # the gateway JVM exits at the end of its input, dumping the archive
jvm.wait(timeout=240)
partial, archive, marker = sys.argv[1:4]
if jvm.returncode == 0 and os.path.exists(partial):
    os.replace(partial, archive)  # atomic: a JVM maps the whole archive or finds none
elif os.path.exists(partial):
    os.unlink(partial)  # a dump the JVM may not have finished
os.unlink(marker)
"""


def spark_submit_opts(cache: Path | None = None) -> tuple[str, subprocess.Popen | None]:
    """The ``SPARK_SUBMIT_OPTS`` for the suite's Spark drivers (the quick JIT and this JVM's
    class-data archive), and the training run building that archive in the background when
    this machine has none yet: drivers started before it ends find no archive and run
    without one."""
    archive = _archive_path(cache or _cache_dir())
    if archive is None:
        return QUICK_JIT, None
    training = None if archive.exists() or _training(archive) else _train(archive)
    return f"{QUICK_JIT} -XX:SharedArchiveFile={archive}", training


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "leasekit-tests"


def _archive_path(cache: Path) -> Path | None:
    """Where the archive of this JVM build and these Spark jars is; None without Java."""
    version = jvm_build()
    if version is None:
        return None
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    digest = hashlib.sha256(version)
    digest.update(str(jars).encode())
    for jar in sorted(jars.glob("*.jar")):
        digest.update(f"{jar.name}:{jar.stat().st_size}".encode())
    return cache / f"spark-driver-{digest.hexdigest()[:16]}.jsa"


def jvm_build() -> bytes | None:
    """What ``java -version`` prints, naming the JVM build an archive was dumped by; None
    without Java (the Spark and ZooKeeper tests say so themselves)."""
    from leasekit.embedded.java import find_java

    try:
        return subprocess.run(
            [find_java(), "-version"], capture_output=True, timeout=60, check=True
        ).stderr
    except Exception:
        return None


def _training(archive: Path) -> bool:
    """Whether another run's training of ``archive`` is under way (its marker names its pid)."""
    try:
        pid = int(archive.with_suffix(".training").read_text())
        if pid <= 0:  # os.kill would probe a process group, or every process
            return False
        os.kill(pid, 0)
    except (OSError, ValueError, OverflowError):  # none, a dead pid, or not a pid at all
        return False
    return True


def _train(archive: Path) -> subprocess.Popen:
    """Start the training driver, which dumps its classes and renames them to ``archive``.
    It runs on when the suite ends first, so that the next run has the archive."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_suffix(f".{os.getpid()}.partial")
    marker = archive.with_suffix(".training")
    env = dict(
        os.environ,
        PYSPARK_PYTHON=sys.executable,
        SPARK_SUBMIT_OPTS=f"{QUICK_JIT} -XX:ArchiveClassesAtExit={partial}",
    )
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    with open(archive.with_suffix(".log"), "wb") as log:
        training = subprocess.Popen(
            [sys.executable, "-c", _TRAINING, str(partial), str(archive), str(marker)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    marker.write_text(str(training.pid))
    return training
