"""Records a consumer read and has not handed out yet, one batch per bucket (as aiokafka's
fetcher keeps them: positions move only when a record is handed out, C1)."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from ..log.reader import OFFSET, TIMESTAMP
from ..log.segments import OP_COLUMN
from ..structs import Record, TableBucket

__all__ = ["Buffered", "to_records"]


class Buffered:
    """Records of one bucket read and not yet handed out: rows ``taken:`` of ``data``, whose
    first row is offset ``start``."""

    __slots__ = ("data", "start", "taken", "_records")

    def __init__(self, data: pa.Table, start: int) -> None:
        self.data, self.start, self.taken = data, start, 0
        self._records: list[Record] | None = None

    @property
    def next_offset(self) -> int:
        """Offset of the first record not handed out."""
        return self.start + self.taken

    @property
    def left(self) -> int:
        return self.data.num_rows - self.taken

    def table(self, n: int) -> pa.Table:
        """Hand out the next ``n`` records (fewer when fewer are left) as a table."""
        out = self.data.slice(self.taken, min(n, self.left))  # n may be any int (max_records)
        self.taken += out.num_rows
        return out

    def record(self, tb: TableBucket) -> Record:
        """Hand out the next record (the batch is converted to records once, on the first call)."""
        if self._records is None:
            self._records = list(to_records(tb, self.data))
        record = self._records[self.taken]
        self.taken += 1
        return record


def to_records(tb: TableBucket, table: pa.Table) -> Iterator[Record]:
    """The rows of a batch read from ``tb`` as records."""
    columns = [n for n in table.column_names if n not in (OFFSET, TIMESTAMP, OP_COLUMN)]
    offsets = table.column(OFFSET).to_pylist()
    stamps = table.column(TIMESTAMP).cast(pa.int64()).to_pylist()
    ops = table.column(OP_COLUMN).to_pylist()
    values = table.select(columns).to_pylist()
    for offset, ts, op, value in zip(offsets, stamps, ops, values):
        yield Record(tb, offset, ts, op, value)
