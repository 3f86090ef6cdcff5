"""Pipelined reads of the ZooKeeper layer: getData and getChildren reads of mixed kinds sent
in multiRead requests (ZooKeeper >= 3.6; one pipelined request per read on older servers),
each read with its own result, so one missing or unreadable znode does not fail a batch."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from kazoo import exceptions as kx
from kazoo.client import KazooClient
from kazoo.protocol import serialization as ser

from ..errors import LeasekitError
from .errors import translate
from .ops import Node, Stat, stat_of

__all__ = [
    "GetData",
    "GetChildren",
    "Read",
    "ReadResult",
    "Reader",
    "READS_PER_REQUEST",
    "MultiRead",
    "value_of",
]

READS_PER_REQUEST = 500
"""Reads carried by one multiRead request (responses stay far below 1 MB)."""

_GET_DATA, _GET_CHILDREN = 4, 8
_HEAD = ser.multiheader_struct
"""Header of each read of a multiRead: op type, done flag, error."""
_INT, _STAT = ser.int_struct, ser.stat_struct


class GetData(NamedTuple):
    """Read a znode's data and stat."""

    path: str

    OP = _GET_DATA


class GetChildren(NamedTuple):
    """List a znode's children."""

    path: str

    OP = _GET_CHILDREN


Read = GetData | GetChildren


class ReadResult(NamedTuple):
    """The outcome of one read of a batch."""

    value: Node | list[str] | None
    """The node (GetData) or the sorted child names (GetChildren); None if the znode is missing
    or the read failed."""
    error: LeasekitError | None = None
    """Why the read failed (for example ``PermissionDeniedError``); None when it did not."""


class MultiRead(NamedTuple):
    """ZooKeeper's multiRead request (opcode 22, ZooKeeper >= 3.6): many getData and
    getChildren reads answered in one round trip; each read succeeds or fails on its own.
    Shaped like kazoo's own request classes so kazoo's connection can send it."""

    operations: tuple[tuple[int, str], ...]
    type = 22

    def serialize(self) -> bytearray:
        out = bytearray()
        for op_type, path in self.operations:
            out += ser.multiheader_struct.pack(op_type, False, -1)
            out += ser.write_string(path)
            out += b"\x00"  # no watch
        return out + ser.multiheader_struct.pack(-1, True, -1)

    @classmethod
    def deserialize(cls, data: bytes, offset: int) -> list[ReadResult]:
        # Runs on kazoo's connection thread for every read of a batch (tens of thousands per
        # retention plan): named tuples are built with tuple.__new__, which skips the Python
        # frame of their generated __new__ and halves the time per read.
        results: list[ReadResult] = []
        append, new = results.append, tuple.__new__
        head, integer, stat = _HEAD.unpack_from, _INT.unpack_from, _STAT.unpack_from
        while True:
            op_type, done, _ = head(data, offset)
            if done:
                return results
            (n,) = integer(data, offset + _HEAD.size)  # data length, child count or error code
            offset += _HEAD.size + _INT.size
            if op_type == _GET_DATA:
                end = offset + max(n, 0)
                value = data[offset:end]
                s = stat(data, end)  # ZnodeStat's fields, in order
                offset = end + _STAT.size
                st = new(Stat, (s[4], s[2], s[3], s[9], s[5], s[0]))
                append(new(ReadResult, (new(Node, (value, st)), None)))
            elif op_type == _GET_CHILDREN:
                names = []
                for _ in range(n):
                    (length,) = integer(data, offset)
                    offset += _INT.size
                    names.append(data[offset : offset + length].decode())
                    offset += length
                names.sort()
                append(new(ReadResult, (names, None)))
            else:
                append(_result(_GET_DATA, kx.EXCEPTIONS[n]()))


class _Pending(NamedTuple):
    reads: tuple[tuple[int, str], ...]
    result: Any
    """kazoo async result of a MultiRead, or a list of per-read async results."""


class Reader:
    """Sends batches of reads without waiting and collects their per-read results; falls back
    to single pipelined reads for good once the server turns multiRead down."""

    def __init__(self, client: Callable[[], KazooClient], timeout: float) -> None:
        self._client = client
        self._timeout = timeout
        self.multi_read = True
        """False once the server answered that it does not implement multiRead (before 3.6)."""

    def send(self, reads: Sequence[Read]) -> list[_Pending]:
        """Send ``reads`` as requests of READS_PER_REQUEST reads each; nothing is awaited."""
        wire = [(r.OP, r.path) for r in reads]
        return [
            self._send(tuple(wire[i : i + READS_PER_REQUEST]))
            for i in range(0, len(wire), READS_PER_REQUEST)
        ]

    def _send(self, ops: tuple[tuple[int, str], ...]) -> _Pending:
        client = self._client()
        if self.multi_read:
            result = client.handler.async_result()
            client._call(MultiRead(ops), result)
            return _Pending(ops, result)
        return _Pending(
            ops,
            [
                client.get_async(p) if t == _GET_DATA else client.get_children_async(p)
                for t, p in ops
            ],
        )

    def collect(self, pending: Sequence[_Pending]) -> list[ReadResult]:
        """Per-read results of sent batches, in order. Errors of a whole request (connection
        loss, say) raise; errors of single reads are kept in their results."""
        out: list[ReadResult] = []
        for batch in pending:
            out += self._results(batch)
        return out

    def _results(self, batch: _Pending) -> list[ReadResult]:
        timeout = self._timeout * 3
        if isinstance(batch.result, list):  # single reads: kazoo's own results
            items = []
            for result in batch.result:
                try:
                    items.append(result.get(timeout=timeout))
                except (kx.NoNodeError, kx.NoAuthError) as exc:  # this read alone failed
                    items.append(exc)
            return [_result(t, item) for (t, _), item in zip(batch.reads, items)]
        try:
            return batch.result.get(timeout=timeout)  # MultiRead.deserialize made ReadResults
        except kx.UnimplementedError:
            self.multi_read = False
            return self._results(self._send(batch.reads))


def _result(op_type: int, item: Any) -> ReadResult:
    if isinstance(item, kx.NoNodeError):
        return ReadResult(None)
    if isinstance(item, BaseException):
        return ReadResult(None, translate(item, "read in a batch"))
    if op_type == _GET_DATA:
        data, stat = item
        return ReadResult(Node(data or b"", stat_of(stat)))
    return ReadResult(sorted(item))


def value_of(result: ReadResult) -> Any:
    """The value of a read's result; its error if the read failed."""
    if result.error is not None:
        raise result.error
    return result.value
