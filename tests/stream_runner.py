"""The stream reader of ``format("leasekit")`` driven the way PySpark's streaming source
runner drives it, in a process of its own, for the SIGTERM tests (D3): one command byte per
call read from stdin (``j``: ``latestOffset`` then print ``joined``; any other byte:
``latestOffset``), end of input ends the loop, ``reader.stop()`` in a ``finally``, and any
exception ends the process with status 255, as the runner does.

    python tests/stream_runner.py ZOOKEEPER WAREHOUSE NAMESPACE TABLE GROUP [--kill-before-stop]

``--kill-before-stop`` sends the process SIGTERM between the end of its input and ``stop``:
the moment Spark's stop lands in when it closes the socket and signals the process at once.
``--hang-on-leave`` makes leaving the group hang (as against a ZooKeeper that went away).
"""

from __future__ import annotations

import os
import signal
import sys


def main() -> None:
    zookeeper, warehouse, namespace, table, group = sys.argv[1:6]
    kill_before_stop = "--kill-before-stop" in sys.argv[6:]
    if "--hang-on-leave" in sys.argv[6:]:
        import time

        from leasekit.datasource.stream_member import StreamMember

        StreamMember.close = lambda self: time.sleep(3600)  # type: ignore[method-assign]
    from pyspark.sql.datasource import ReadAllAvailable
    from pyspark.sql.types import StructType

    from leasekit.datasource.options import parse_options
    from leasekit.datasource.stream import stream_reader

    options = {"zookeeper": zookeeper, "warehouse": warehouse, "namespace": namespace}
    opts = parse_options({"path": table, "group": group, **options})
    commands = os.fdopen(0, "rb", buffering=0)
    try:
        reader = stream_reader(opts, StructType())
        try:
            start = reader.initialOffset()
            while command := commands.read(1):
                start = reader.latestOffset(start, ReadAllAvailable())
                if command == b"j":
                    print("joined", flush=True)
        finally:
            if kill_before_stop:
                os.kill(os.getpid(), signal.SIGTERM)
            reader.stop()
    except BaseException:
        sys.exit(255)


if __name__ == "__main__":
    main()
