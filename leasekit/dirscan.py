"""Recursive listing of a local directory that lists again only the directories that changed
since they were last listed (``Warehouse.scan`` of a local warehouse)."""

from __future__ import annotations

import os
import stat
import time
from typing import NamedTuple

__all__ = ["LocalScan"]

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

    Arguments:
        location: the absolute directory the returned paths are relative to.
    """

    def __init__(self, location: str) -> None:
        self._location = location
        self._seen: dict[str, dict[str, _Seen]] = {}
        """Per directory scanned, every directory below it as last listed."""

    def scan(self, top: str) -> list[str]:
        """The files below ``top`` (recursively, relative to the location; none if it does
        not exist), not following symbolic links to directories.

        Raises:
            OSError: a directory could not be read (not one removed meanwhile).
        """
        began = time.time_ns()
        seen = self._seen.get(top, {})
        now: dict[str, _Seen] = {}
        paths: list[str] = []
        pending = [top]
        while pending:
            directory = pending.pop()
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
        return paths

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
