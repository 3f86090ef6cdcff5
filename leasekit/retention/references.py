"""Which warehouse files the metadata references: the snapshot files and log segments it
names, the files of segments merges replaced (kept for readers until retention deletes them
with their record, R8), and the side files Spark writes beside them (checksums, job markers)."""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .meta import TableMeta

__all__ = ["referenced_files", "is_companion", "directories", "unreferenced"]


def referenced_files(tables: Iterable[TableMeta]) -> set[str]:
    """Every file the tables' metadata names: snapshot files, log segments, and the files of
    segments merges replaced while their records last (never orphans: R4, R8)."""
    referenced: set[str] = set()
    for tm in tables:
        referenced.update(f for snaps in tm.snapshots.values() for s in snaps for f in s.files)
        referenced.update(s.file for segs in tm.segments.values() for s in segs)
        referenced.update(f for recs in tm.retired.values() for r in recs for f in r.files)
    return referenced


def is_companion(path: str, referenced: set[str], dirs: Callable[[], set[str]]) -> bool:
    """Spark's side files of referenced data files: checksums and job markers. ``dirs`` gives
    the directories of the referenced files (computed only when a job marker needs them)."""
    directory, name = posixpath.split(path)
    if name.startswith(".") and name.endswith(".crc"):
        target = posixpath.join(directory, name[1:-4])
        return target in referenced or is_companion(target, referenced, dirs)
    return name == "_SUCCESS" and any(
        d == directory or d.startswith(directory + "/") for d in dirs()
    )


def directories(files: set[str]) -> Callable[[], set[str]]:
    """The directories of ``files``, computed on first use and then kept."""
    cache: list[set[str]] = []

    def get() -> set[str]:
        if not cache:
            cache.append({posixpath.dirname(f) for f in files})
        return cache[0]

    return get


def unreferenced(paths: Iterable[str], referenced: set[str]) -> list[str]:
    """Of ``paths``, those neither referenced nor a companion of a referenced file."""
    dirs = directories(referenced)
    return [p for p in paths if p not in referenced and not is_companion(p, referenced, dirs)]
