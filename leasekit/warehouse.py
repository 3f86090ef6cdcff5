"""The warehouse: data files (Parquet) addressed through ``pyarrow.fs``.

Metadata stores paths relative to the warehouse root; this module turns them into
file-system paths, user-facing URIs and Spark paths, and translates I/O errors.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
from collections.abc import Iterable, Iterator
from typing import NamedTuple

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from .errors import IllegalStateError, InvalidArgumentError

__all__ = ["Warehouse", "FileEntry"]

_SPARK_SCHEMES = {"s3": "s3a"}


class FileEntry(NamedTuple):
    """A file in the warehouse."""

    path: str
    """Path relative to the warehouse root."""
    size: int
    """Size in bytes."""
    mtime_ms: int
    """Modification time, epoch ms (the file system's clock)."""


@contextlib.contextmanager
def io_errors(what: str) -> Iterator[None]:
    """Translate pyarrow and OS errors into ``IllegalStateError``."""
    try:
        yield
    except (OSError, pa.ArrowException) as exc:
        raise IllegalStateError(f"{what}: {exc}") from None


class Warehouse:
    """A warehouse root: a local directory or a pyarrow file-system URI."""

    def __init__(self, location: str | os.PathLike[str]) -> None:
        location = os.fspath(location)
        if not isinstance(location, str) or not location:
            raise InvalidArgumentError("warehouse must be a non-empty path or URI")
        if "://" in location and not location.startswith("file://"):
            self.scheme = location.split("://", 1)[0]
            self.location = location.rstrip("/")
        else:
            self.scheme = "file"
            local = location[len("file://"):] if location.startswith("file://") else location
            self.location = os.path.abspath(os.path.expanduser(local))
        self._fs: pafs.FileSystem | None = None
        self._root = ""

    @property
    def is_local(self) -> bool:
        return self.scheme == "file"

    def open(self) -> None:
        """Resolve the file system and create the root directory."""
        with io_errors(f"open warehouse {self.location}"):
            if self.is_local:
                self._fs, self._root = pafs.LocalFileSystem(), self.location
            else:
                self._fs, self._root = pafs.FileSystem.from_uri(self.location)
            self._fs.create_dir(self._root, recursive=True)

    @property
    def fs(self) -> pafs.FileSystem:
        if self._fs is None:
            raise IllegalStateError("the warehouse is not open")
        return self._fs

    def fs_path(self, rel: str) -> str:
        """Path of ``rel`` for ``self.fs``."""
        return f"{self._root}/{rel}"

    def uri(self, rel: str) -> str:
        """User-facing location of ``rel``: an absolute path (local) or a full URI."""
        if self.is_local:
            return os.path.join(self.location, rel)
        return f"{self.location}/{rel}"

    def to_spark(self, location: str) -> str:
        """Spark path of a user-facing location returned by ``uri``."""
        if self.is_local:
            return "file://" + location
        scheme, rest = location.split("://", 1)
        return f"{_SPARK_SCHEMES.get(scheme, scheme)}://{rest}"

    def write_parquet(self, rel: str, table: pa.Table) -> int:
        """Write ``table`` to ``rel`` (complete before return); its size in bytes."""
        path = self.fs_path(rel)
        with io_errors(f"write {self.uri(rel)}"):
            self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
            pq.write_table(table, path, filesystem=self.fs, compression="snappy")
            return self.fs.get_file_info(path).size

    def read_parquet(self, rel: str, columns: list[str] | None = None) -> pa.Table:
        with io_errors(f"read {self.uri(rel)}"):
            return pq.read_table(self.fs_path(rel), filesystem=self.fs, columns=columns)

    def parquet_metadata(self, rel: str) -> pq.FileMetaData:
        """The Parquet footer of ``rel`` (row counts, statistics)."""
        with io_errors(f"read {self.uri(rel)}"), self.fs.open_input_file(self.fs_path(rel)) as f:
            return pq.ParquetFile(f).metadata

    def list(self, rel_dir: str) -> list[FileEntry]:
        """Every file below ``rel_dir`` (recursively); empty if it does not exist."""
        base = self.fs_path(rel_dir)
        with io_errors(f"list {self.uri(rel_dir)}"):
            infos = self.fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
        prefix = len(self._root) + 1
        return [
            FileEntry(info.path[prefix:], info.size or 0, (info.mtime_ns or 0) // 1_000_000)
            for info in infos
            if info.type == pafs.FileType.File
        ]

    def exists(self, rel: str) -> bool:
        with io_errors(f"stat {self.uri(rel)}"):
            return self.fs.get_file_info(self.fs_path(rel)).type == pafs.FileType.File

    def delete_files(self, rels: Iterable[str]) -> None:
        """Delete files (and, locally, the checksum files Hadoop writes beside them); missing
        ones are ignored."""
        for rel in rels:
            targets = [rel]
            if self.is_local:
                directory, name = posixpath.split(rel)
                targets.append(posixpath.join(directory, f".{name}.crc"))
            for target in targets:
                with io_errors(f"delete {self.uri(target)}"), contextlib.suppress(FileNotFoundError):
                    self.fs.delete_file(self.fs_path(target))

    def delete_dir(self, rel_dir: str) -> None:
        """Delete a directory tree; a missing one is ignored."""
        with io_errors(f"delete {self.uri(rel_dir)}"), contextlib.suppress(FileNotFoundError):
            self.fs.delete_dir(self.fs_path(rel_dir))
