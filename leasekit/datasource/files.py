"""Reading leasekit's Parquet files with pyarrow inside Spark's Python workers: a row range of a
file, restricted to the keys of some residue classes, cast to the schema Spark expects.

Workers get the warehouse's location and warehouse-relative paths, never a connection:
executors need the files only, not ZooKeeper.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import IllegalStateError
from ..tables.bucketing import murmur3_hash
from ..warehouse import Warehouse, io_errors

if TYPE_CHECKING:
    from ..tables.layout import ResidueClass

__all__ = ["FileGone", "FileSlice", "open_warehouse", "read_slice", "keep_within", "conform"]


class FileGone(IllegalStateError):
    """A file the plan named is gone when a task reads it (retention deleted it)."""


class FileSlice(NamedTuple):
    """Rows of one Parquet file of the warehouse."""

    path: str
    """The file, relative to the warehouse root."""
    first: int = 0
    """First row read (a log segment's row i holds offset base + i)."""
    stop: int | None = None
    """Row after the last one read; None: to the end of the file."""
    within: tuple[ResidueClass, ...] | None = None
    """Only rows whose key hashes into one of these classes; None: every row."""


_open: dict[str, Warehouse] = {}
_lock = threading.Lock()


def open_warehouse(location: str) -> Warehouse:
    """The warehouse at ``location`` (a path, or a URI with its file-system options), opened
    once per worker process.

    Raises:
        InvalidArgumentError: an empty location.
        IllegalStateError: its file system cannot be reached.
    """
    with _lock:
        found = _open.get(location)
        if found is None:
            found = Warehouse(location)
            found.open()
            _open[location] = found
        return found


def read_slice(
    warehouse: Warehouse,
    part: FileSlice,
    columns: Sequence[str],
    key: Sequence[str],
    where: pc.Expression | None = None,
) -> pa.Table:
    """``columns`` of the rows of ``part`` whose ``key`` hashes into its classes, decoding only
    the row groups holding its row range; with ``where``, only rows matching it (on a whole
    file, row groups whose statistics rule it out are skipped).

    Raises:
        FileGone: the file is gone (retention deleted it).
        IllegalStateError: the file cannot be read.
    """
    path = warehouse.fs_path(part.path)
    what = f"read {warehouse.uri(part.path)}"
    with io_errors(what):  # (any other OS or pyarrow error: IllegalStateError)
        try:
            if part.first == 0 and part.stop is None and where is not None:
                data = _filtered(path, warehouse, columns, where)
            else:
                with pq.ParquetFile(path, filesystem=warehouse.fs) as parquet:
                    data = _row_range(parquet, columns, part.first, part.stop)
                if where is not None:
                    data = data.filter(where)
        except FileNotFoundError:
            raise FileGone(f"{what}: the file is gone (deleted by retention?)") from None
    return keep_within(data, key, part.within)


def _filtered(
    path: str, warehouse: Warehouse, columns: Sequence[str], where: pc.Expression
) -> pa.Table:
    """The rows of a whole file matching ``where``, skipping the row groups whose statistics
    rule it out."""
    import pyarrow.dataset as pads  # here: it loads pandas, which a stream's workers never use

    source = pads.dataset(path, filesystem=warehouse.fs, format="parquet")
    return source.to_table(columns=list(columns), filter=where)


def _row_range(
    parquet: pq.ParquetFile, columns: Sequence[str], first: int, stop: int | None
) -> pa.Table:
    """Rows ``[first, stop)`` of a file, decoding only the row groups holding them."""
    meta = parquet.metadata
    counts = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).tolist()
    end = starts[-1] if stop is None else min(stop, starts[-1])
    wanted = [i for i in range(len(counts)) if starts[i] < end and starts[i + 1] > first]
    if not wanted:
        return parquet.schema_arrow.empty_table().select(list(columns))
    data = parquet.read_row_groups(wanted, columns=list(columns))
    return data.slice(first - starts[wanted[0]], end - first)


def keep_within(
    data: pa.Table, key: Sequence[str], within: tuple[ResidueClass, ...] | None
) -> pa.Table:
    """The rows of ``data`` whose ``key`` hashes (Spark's ``hash``, as appends route rows) into
    one of ``within``; all of them when it is None."""
    if within is None or data.num_rows == 0:
        return data
    hashes = murmur3_hash(data, key).astype(np.int64)
    keep = np.zeros(data.num_rows, bool)
    for c in within:
        keep |= np.mod(hashes, c.modulus) == c.residue
    return data.filter(pa.array(keep))


def conform(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """``data`` with exactly the columns of ``schema``, in its order and types (what Spark
    expects of a reader's batches).

    Raises:
        IllegalStateError: a column is missing or does not cast (the file is not the table's).
    """
    try:
        columns = [data.column(f.name).cast(f.type) for f in schema]
    except (KeyError, pa.ArrowException) as exc:
        raise IllegalStateError(f"a file does not hold the table's columns: {exc}") from None
    return pa.Table.from_arrays(columns, schema=schema)
