"""The warehouse: data files (Parquet) addressed through ``pyarrow.fs``.

Metadata stores paths relative to the warehouse root; this module turns them into
file-system paths, user-facing URIs and Spark paths, and translates I/O errors.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
import threading
from collections.abc import Iterable, Iterator
from typing import NamedTuple

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from .dirscan import LocalScan
from .errors import CorruptMetadataError, IllegalStateError, InvalidArgumentError

__all__ = ["Warehouse", "FileEntry", "Listing", "contained"]

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


_PATH_PART = re.compile(r"[A-Za-z0-9._=-]+")
"""What a component of a path in metadata may hold: what leasekit and Spark name files and
directories with. No URI scheme (``:``), no Hadoop glob (``*?[]{}``), no escape (``\\``, ``%``)."""


_NORMAL_PATH = re.compile(r"[A-Za-z0-9_=-][A-Za-z0-9._=-]*(?:/[A-Za-z0-9_=-][A-Za-z0-9._=-]*)*")
"""A relative path that is normal already (no empty, ``.`` or ``..`` component) and made of
``_PATH_PART``s: the form every path leasekit writes has, checked at once."""


def contained(rel: object, within: str, znode: str) -> str:
    """The warehouse-relative path ``rel`` that the metadata at ``znode`` names, resolved, if
    it lies inside the directory ``within`` (docs/security.md, "Containment").

    Every path that metadata names goes through here before it is read or deleted.

    Arguments:
        rel: the path as stored: relative to the warehouse root, ``/``-separated.
        within: the warehouse-relative directory it must lie in (strictly inside, never the
            directory itself), already normalized.
        znode: the znode that names it, for the error.

    Returns:
        ``rel`` normalized (``.``, ``..`` and empty components resolved).

    Raises:
        CorruptMetadataError: naming ``znode``, when ``rel`` is not a string, is absolute, is a
            URI, holds characters no leasekit path has (globs, escapes, control characters),
            or resolves to a place outside ``within``.
    """
    if isinstance(rel, str) and _NORMAL_PATH.fullmatch(rel) and rel.startswith(within + "/"):
        return rel  # the common case, as the general one below would resolve it
    shown = f"{rel!r:.200}"
    if not isinstance(rel, str):
        raise CorruptMetadataError(
            f"metadata at {znode} names a path that is not a string: {shown}", znode
        )
    why = None
    if rel.startswith("/") or "://" in rel:
        why = "an absolute path or URI, not a path relative to the warehouse"
    else:
        parts = [p for p in rel.split("/") if p not in ("", ".")]
        if not all(p == ".." or _PATH_PART.fullmatch(p) for p in parts):
            why = "a path with characters leasekit never writes"
        else:
            resolved = posixpath.normpath("/".join(parts)) if parts else ""
            if resolved.startswith(within + "/"):
                return resolved
            why = "a path outside it"
    raise CorruptMetadataError(
        f"metadata at {znode} names {shown}: {why}; its files must lie inside {within}/ of the "
        "warehouse, so nothing is read or deleted there",
        znode,
    )


class Listing:
    """The files found below a warehouse directory (``Warehouse.scan``)."""

    def __init__(
        self, warehouse: Warehouse, paths: list[str], entries: dict[str, FileEntry] | None
    ) -> None:
        self.paths = paths
        """Every file found, relative to the warehouse root."""
        self._warehouse = warehouse
        self._entries = entries

    def entries(self, rels: Iterable[str]) -> list[FileEntry]:
        """Sizes and times of ``rels`` (paths of this listing): from the listing where it has
        them, else read now; files deleted since the scan are left out."""
        if self._entries is None:
            return self._warehouse.stat(rels)
        return [self._entries[rel] for rel in rels if rel in self._entries]


class Warehouse:
    """A warehouse root: a local directory or a pyarrow file-system URI.

    A URI may carry file-system options as a query string, e.g.
    ``s3://bucket/wh?endpoint_override=host:9000&scheme=http`` (the options pyarrow's
    ``S3FileSystem.from_uri`` reads); without them an S3 warehouse takes its credentials,
    region and endpoint from the AWS environment (``AWS_ACCESS_KEY_ID``,
    ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``, ...). File URIs and Spark paths never
    carry the options.
    """

    def __init__(self, location: str | os.PathLike[str]) -> None:
        location = os.fspath(location)
        if not isinstance(location, str) or not location:
            raise InvalidArgumentError("warehouse must be a non-empty path or URI")
        self.options = ""
        """File-system options of a URI (its query string, without the ``?``): given to
        ``pyarrow.fs.FileSystem.from_uri`` and kept out of ``location`` and every file URI."""
        if "://" in location and not location.startswith("file://"):
            base, _, self.options = location.partition("?")
            self.scheme = base.split("://", 1)[0]
            self.location = base.rstrip("/")
        else:
            self.scheme = "file"
            local = location[len("file://") :] if location.startswith("file://") else location
            self.location = os.path.abspath(os.path.expanduser(local))
        self._fs: pafs.FileSystem | None = None
        self._root = ""
        self._local = LocalScan(self.location)

    @property
    def is_local(self) -> bool:
        return self.scheme == "file"

    @property
    def scan_worker_pid(self) -> int | None:
        """The process id of the worker making this local warehouse's scans (``LocalScan``);
        None while this process makes them."""
        return self._local.worker_pid

    def open(self) -> None:
        """Resolve the file system and create the root directory."""
        with io_errors(f"open warehouse {self.location}"):
            if self.is_local:
                self._fs, self._root = pafs.LocalFileSystem(), self.location
            else:
                uri = f"{self.location}?{self.options}" if self.options else self.location
                self._fs, self._root = pafs.FileSystem.from_uri(uri)
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

    def relative(self, location: str) -> str:
        """The warehouse-relative path of a location returned by ``uri``."""
        if not location.startswith(self.location + "/"):
            raise InvalidArgumentError(f"{location} is not in the warehouse {self.location}")
        return location[len(self.location) + 1 :]

    def open_parquet(self, rel: str) -> pq.ParquetFile:
        """An open Parquet file (footer read) for reads of chosen row groups; ``FileNotFoundError``
        when it does not exist, other I/O errors as ``IllegalStateError``."""
        path = self.fs_path(rel)
        try:
            return pq.ParquetFile(self.fs.open_input_file(path))
        except FileNotFoundError:
            raise
        except (OSError, pa.ArrowException) as exc:
            if self.fs.get_file_info(path).type == pafs.FileType.NotFound:
                raise FileNotFoundError(path) from None
            raise IllegalStateError(f"read {self.uri(rel)}: {exc}") from None

    def to_spark(self, location: str) -> str:
        """Spark path of a user-facing location returned by ``uri``."""
        if self.is_local:
            return "file://" + location
        scheme, rest = location.split("://", 1)
        return f"{_SPARK_SCHEMES.get(scheme, scheme)}://{rest}"

    def write_parquet(self, rel: str, table: pa.Table, row_group_size: int | None = None) -> int:
        """Write ``table`` to ``rel`` (complete before return, in row groups of at most
        ``row_group_size`` rows); its size in bytes."""
        path = self.fs_path(rel)
        with io_errors(f"write {self.uri(rel)}"):
            self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
            pq.write_table(
                table, path, filesystem=self.fs, compression="snappy", row_group_size=row_group_size
            )
            return self.fs.get_file_info(path).size

    def write_parquet_parts(
        self, rel: str, schema: pa.Schema, parts: Iterable[pa.Table], row_group_size: int
    ) -> int:
        """Write the rows of ``parts`` in order to ``rel`` as one file, in row groups of
        ``row_group_size`` rows (the last may be shorter) whatever the parts' sizes, holding at
        most about one row group in memory; its size in bytes."""
        path = self.fs_path(rel)
        with io_errors(f"write {self.uri(rel)}"):
            self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
            with pq.ParquetWriter(path, schema, filesystem=self.fs, compression="snappy") as out:
                held: list[pa.Table] = []
                rows = 0
                for part in parts:
                    held.append(part)
                    rows += part.num_rows
                    if rows >= row_group_size:
                        data = pa.concat_tables(held)
                        whole = rows - rows % row_group_size
                        out.write_table(data.slice(0, whole), row_group_size=row_group_size)
                        held, rows = [data.slice(whole)], rows - whole
                if rows:
                    out.write_table(pa.concat_tables(held), row_group_size=row_group_size)
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
            infos = self.fs.get_file_info(
                pafs.FileSelector(base, recursive=True, allow_not_found=True)
            )
        prefix = len(self._root) + 1
        return [
            FileEntry(info.path[prefix:], info.size or 0, (info.mtime_ns or 0) // 1_000_000)
            for info in infos
            if info.type == pafs.FileType.File
        ]

    def scan(self, rel_dir: str) -> Listing:
        """The files below ``rel_dir`` (recursively; none if it does not exist): their paths now,
        their sizes and times on demand.

        A local scan reads names and types from the directories alone, without a stat call per
        file, so a caller that needs the sizes and times of a few files (the unreferenced ones,
        say) does not pay for all of them; remote listings carry them anyway and keep them.
        A local directory unchanged since it was last listed is not listed again (``LocalScan``).
        """
        if not self.is_local:
            entries = self.list(rel_dir)
            return Listing(self, [e.path for e in entries], {e.path: e for e in entries})
        with io_errors(f"list {self.uri(rel_dir)}"):
            paths = self._local.scan(os.path.join(self.location, rel_dir))
        return Listing(self, paths, None)

    def stat(self, rels: Iterable[str]) -> list[FileEntry]:
        """Size and modification time of each of ``rels`` that exists."""
        rels = list(rels)
        if not rels:
            return []
        with io_errors(f"stat {len(rels)} files in {self.location}"):
            infos = self.fs.get_file_info([self.fs_path(rel) for rel in rels])
        return [
            FileEntry(rel, info.size or 0, (info.mtime_ns or 0) // 1_000_000)
            for rel, info in zip(rels, infos)
            if info.type == pafs.FileType.File
        ]

    def exists(self, rel: str) -> bool:
        with io_errors(f"stat {self.uri(rel)}"):
            return self.fs.get_file_info(self.fs_path(rel)).type == pafs.FileType.File

    def delete_files(self, rels: Iterable[str]) -> None:
        """Delete files (and, locally, the checksum files Hadoop writes beside them); missing
        ones are ignored.

        Raises:
            IllegalStateError: on an I/O error, or (local) when a file's directory leads out of
                the warehouse through a symbolic link: nothing is deleted there.
        """
        inside: dict[str, None] = {}  # local directories found inside the warehouse
        for rel in rels:
            targets = [rel]
            if self.is_local:
                directory, name = posixpath.split(rel)
                if directory not in inside:
                    self._check_no_link_out(directory)
                    inside[directory] = None
                targets.append(posixpath.join(directory, f".{name}.crc"))
            for target in targets:
                with (
                    io_errors(f"delete {self.uri(target)}"),
                    contextlib.suppress(FileNotFoundError),
                ):
                    self.fs.delete_file(self.fs_path(target))

    def delete_dir(self, rel_dir: str) -> None:
        """Delete a directory tree; a missing one is ignored.

        Raises:
            IllegalStateError: on an I/O error, or (local) when the directory leads out of the
                warehouse through a symbolic link: nothing is deleted there.
        """
        if self.is_local:
            self._check_no_link_out(rel_dir)
        with io_errors(f"delete {self.uri(rel_dir)}"), contextlib.suppress(FileNotFoundError):
            self.fs.delete_dir(self.fs_path(rel_dir))

    def _check_no_link_out(self, rel_dir: str) -> None:
        """Refuse a local directory whose real path is outside the warehouse's (docs/security.md,
        "Containment": a link planted in the warehouse does not carry a delete out of it)."""
        root = os.path.realpath(self.location)
        real = os.path.realpath(os.path.join(self.location, rel_dir))
        if real != root and not real.startswith(root + os.sep):
            raise IllegalStateError(
                f"{self.uri(rel_dir)} leads out of the warehouse through a symbolic link (to "
                f"{real}); nothing is deleted there"
            )

    # -- small files (the namespace directory's owner marker) -------------------------------

    def read_small(self, rel: str) -> bytes | None:
        """The bytes of the small file ``rel``, or None if it does not exist."""
        path = self.fs_path(rel)
        with io_errors(f"read {self.uri(rel)}"):
            if self.fs.get_file_info(path).type != pafs.FileType.File:
                return None
            try:
                with self.fs.open_input_stream(path) as f:
                    return f.read()
            except FileNotFoundError:
                return None

    def create_exclusive(self, rel: str, data: bytes) -> bool:
        """Write the small file ``rel`` unless it exists; whether this call wrote it. Atomic on
        a local warehouse (a complete temporary file hard-linked into place); elsewhere the
        existence check and the write are two steps."""
        path = self.fs_path(rel)
        with io_errors(f"write {self.uri(rel)}"):
            self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
            if not self.is_local:
                if self.fs.get_file_info(path).type != pafs.FileType.NotFound:
                    return False
                with self.fs.open_output_stream(path) as f:
                    f.write(data)
                return True
            temp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
            with open(temp, "wb") as f:
                f.write(data)
            try:
                os.link(temp, path)
                return True
            except FileExistsError:
                return False
            finally:
                os.unlink(temp)
