"""Recursive listing of a local directory that lists again only the directories that changed
since they were last listed (``Warehouse.scan`` of a local warehouse).

A large tree is walked by a worker process of its own (this module run as a script, the
standard library alone): the walk is one system call per directory, each of which gives up
and takes back the interpreter lock, so in the caller's process it competes with the work it
was meant to overlap (reading ZooKeeper, planning) and takes the sum of both. The worker keeps
its own record of the directories it listed; the caller gets the paths."""

from __future__ import annotations

import logging
import os
import pickle
import signal
import stat
import struct
import subprocess
import sys
import threading
import time
import weakref
from typing import IO, Any, NamedTuple

__all__ = ["LocalScan"]

log = logging.getLogger(__name__)

WORKER_DIRS = 20_000
"""A scan that walks more directories than this hands the later scans to a worker process
(about 0.1 s of walking here against the worker's start, some 30 ms, once)."""

_FRAME = struct.Struct(">Q")
"""The length that precedes each message between a scan and its worker (a pickle)."""
_PROTOCOL = "1"
"""The messages' version, given to the worker on its command line: a worker started from
another version of this file (leasekit upgraded in place under a running process) exits at
once, and its caller scans by itself."""

_SETTLED_NS = 2_000_000_000
"""How long before a scan a local directory must have last changed for its listing to be kept:
file systems stamp changes with a clock of coarse ticks, so a directory changed just now could
change again within the same tick without its stamp changing."""


class _Seen(NamedTuple):
    """A local directory as last listed."""

    stamp: tuple[int, int, int]
    """Its device, inode and status change time (ctime): any entry added, removed or renamed in
    it sets its ctime to the time of the change, and no call sets a ctime back."""
    files: tuple[str, ...]
    """Its files, relative to the warehouse root."""
    dirs: tuple[str, ...]
    """Its subdirectories (not followed through symbolic links), as file-system paths."""


class LocalScan:
    """The files below local directories, each directory listed again only when its stamp
    (``_Seen.stamp``) differs from the one it had when last listed, or when it had changed
    less than ``_SETTLED_NS`` before that listing began.

    Once a scan walks more than ``worker_dirs`` directories, the later scans are made by a
    worker process (``_Worker``) that walks the same way; if it cannot start or fails, they
    are made here again.

    Arguments:
        location: the absolute directory the returned paths are relative to.
        worker_dirs: directories a scan walks before the next goes to a worker; None: never.
    """

    def __init__(self, location: str, worker_dirs: int | None = WORKER_DIRS) -> None:
        self._location = location
        self._seen: dict[str, dict[str, _Seen]] = {}
        """Per directory scanned, every directory below it as last listed."""
        self._worker_dirs = worker_dirs
        self._worker: _Worker | None = None
        self._lock = threading.Lock()

    @property
    def worker_pid(self) -> int | None:
        """The process id of the worker making the scans; None while they are made here."""
        worker = self._worker
        return None if worker is None else worker.pid

    def close(self) -> None:
        """End the worker, if one runs (a later scan may start another)."""
        with self._lock:
            worker, self._worker = self._worker, None
        if worker is not None:
            worker.close()

    def scan(self, top: str) -> list[str]:
        """The files below ``top`` (recursively, relative to the location; none if it does
        not exist), not following symbolic links to directories.

        Raises:
            OSError: a directory could not be read (not one removed meanwhile).
        """
        worker = self._worker
        if worker is not None:
            paths = worker.scan(top)
            if paths is not None:
                return paths
            log.warning("the directory scan worker ended; scanning in this process")
            with self._lock:
                self._worker, self._worker_dirs = None, None
        paths, walked = self._walk(top)
        limit = self._worker_dirs
        if limit is not None and walked > limit:
            with self._lock:
                if self._worker is None:
                    self._worker = _Worker.start(self._location)
                    if self._worker is not None:
                        self._seen.clear()  # the worker keeps its own
                        self._worker.prime(top)  # its first walk starts now, not next scan
                    else:
                        self._worker_dirs = None
        return paths

    def _walk(self, top: str) -> tuple[list[str], int]:
        """The files below ``top`` and the number of directories walked, in this process."""
        began = time.time_ns()
        seen = self._seen.get(top, {})
        now: dict[str, _Seen] = {}
        paths: list[str] = []
        pending = [top]
        walked = 0
        while pending:
            directory = pending.pop()
            walked += 1
            try:
                st = os.stat(directory)
            except (FileNotFoundError, NotADirectoryError):
                continue  # absent, or removed since its parent was read
            if not stat.S_ISDIR(st.st_mode):
                continue
            stamp = (st.st_dev, st.st_ino, st.st_ctime_ns)
            listed = seen.get(directory)
            if listed is None or listed.stamp != stamp:
                listed = self._read_dir(directory, stamp)
            if st.st_ctime_ns < began - _SETTLED_NS:
                now[directory] = listed
            paths += listed.files
            pending += listed.dirs
        self._seen[top] = now
        return paths, walked

    def _read_dir(self, directory: str, stamp: tuple[int, int, int]) -> _Seen:
        """The files (relative to the location) and subdirectories of a directory."""
        rel = directory[len(self._location) + 1 :]
        prefix = f"{rel}/" if rel else ""
        files: list[str] = []
        dirs: list[str] = []
        try:
            scanner = os.scandir(directory)
        except (FileNotFoundError, NotADirectoryError):
            return _Seen(stamp, (), ())  # removed since its stat: the next scan sees it changed
        with scanner:
            for entry in scanner:
                if entry.is_dir(follow_symlinks=False):
                    dirs.append(entry.path)
                elif entry.is_file():
                    files.append(prefix + entry.name)
        return _Seen(stamp, tuple(files), tuple(dirs))


class _Worker:
    """A process that makes a ``LocalScan``'s scans: ``python -I -S`` running this module,
    which imports the standard library alone. It reads requests (``("scan", top)``, answered,
    or ``("prime", top)``, a walk that records the directories and answers nothing) on its
    standard input and answers on its standard output, each a pickle after its length; it
    ends when its input closes (this process ended or closed it)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc
        self._lock = threading.Lock()
        self._parent = os.getpid()
        """The process that started it: a process forked from that one scans by itself."""
        self.pid = proc.pid
        self._ended = weakref.finalize(self, _end, proc, self._parent)

    @classmethod
    def start(cls, location: str) -> _Worker | None:
        """A worker scanning below ``location``; None if none can start here."""
        if not sys.executable:
            return None
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", os.path.abspath(__file__), location, _PROTOCOL],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # a terminal's Ctrl-C interrupts the caller alone
            )
        except OSError as exc:
            log.warning("cannot start a directory scan worker (%s); scanning in this process", exc)
            return None
        return cls(proc)

    def scan(self, top: str) -> list[str] | None:
        """The worker's scan of ``top``; None if the worker failed (it is ended then).

        Raises:
            OSError: the worker could not read a directory.
        """
        if os.getpid() != self._parent:
            return None
        with self._lock:
            stdin, stdout = self._proc.stdin, self._proc.stdout
            try:
                if stdin is None or stdout is None:
                    raise EOFError("no pipes")
                _send(stdin, ("scan", top))
                reply = _receive(stdout)
            except (OSError, EOFError, ValueError, pickle.UnpicklingError):
                self.close()
                return None
            except BaseException:  # interrupted mid-answer: its next answer would be this one's
                self.close()
                raise
        if reply[0] == "error":
            raise OSError(*reply[1:])
        paths: list[str] = reply[1]
        return paths

    def prime(self, top: str) -> None:
        """Have the worker walk ``top`` now, answering nothing: its record of the directories
        is then ready for the next scan (a failure shows at that scan)."""
        with self._lock:
            try:
                if self._proc.stdin is not None:
                    _send(self._proc.stdin, ("prime", top))
            except (OSError, ValueError):
                pass

    def close(self) -> None:
        self._ended()


def _end(proc: subprocess.Popen[bytes], parent: int) -> None:
    """End a worker: close its input (it exits), and kill it if it has not within a second.
    Not from a process forked from ``parent``: the worker is the parent's."""
    if os.getpid() != parent:
        return
    try:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=1.0)
    except (OSError, subprocess.TimeoutExpired):
        proc.kill()
        proc.wait()
    finally:
        if proc.stdout is not None:
            proc.stdout.close()


def _send(stream: IO[bytes], message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_FRAME.pack(len(data)) + data)
    stream.flush()


def _receive(stream: IO[bytes]) -> Any:
    head = stream.read(_FRAME.size)
    if len(head) < _FRAME.size:
        raise EOFError("the other side closed")
    (size,) = _FRAME.unpack(head)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the other side closed")
    return pickle.loads(data)


def _serve(location: str) -> None:
    """The worker's loop: a walk per request, until its input closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    scanner = LocalScan(location, worker_dirs=None)
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            kind, top = _receive(inp)
        except EOFError:
            return
        try:
            reply: tuple[Any, ...] = ("ok", scanner.scan(top))
        except OSError as exc:
            reply = ("error", exc.errno, exc.strerror, exc.filename)
        if kind == "scan":
            _send(out, reply)


if __name__ == "__main__":
    if sys.argv[2:] == [_PROTOCOL]:
        _serve(sys.argv[1])
