"""Pipelined reads of the ZooKeeper layer: the multiRead request (ZooKeeper >= 3.6) and
the fallback to one pipelined request per read for servers without it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from kazoo import exceptions as kx
from kazoo.protocol import serialization as ser
from kazoo.protocol.states import ZnodeStat

if TYPE_CHECKING:
    from .store import ZkStore

READS_PER_REQUEST = 500
"""Reads carried by one multiRead request (responses stay far below 1 MB)."""

_GET_DATA, _GET_CHILDREN = 4, 8


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
    def deserialize(cls, data: bytes, offset: int) -> list[Any]:
        results: list[Any] = []
        while True:
            op_type, done, _ = ser.multiheader_struct.unpack_from(data, offset)
            offset += ser.multiheader_struct.size
            if done:
                return results
            if op_type == _GET_DATA:
                value, offset = ser.read_buffer(data, offset)
                stat = ZnodeStat._make(ser.stat_struct.unpack_from(data, offset))
                offset += ser.stat_struct.size
                results.append((value or b"", stat))
            elif op_type == _GET_CHILDREN:
                (count,) = ser.int_struct.unpack_from(data, offset)
                offset += ser.int_struct.size
                names = []
                for _ in range(count):
                    name, offset = ser.read_string(data, offset)
                    names.append(name)
                results.append(names)
            else:
                (code,) = ser.int_struct.unpack_from(data, offset)
                offset += ser.int_struct.size
                results.append(kx.EXCEPTIONS[code]())


class _Singles:
    """One pipelined request per read: for servers without multiRead (before 3.6)."""

    def __init__(self, store: ZkStore, ops: Sequence[tuple[int, str]]) -> None:
        client = store.client
        self._results = [client.get_async(p) if t == _GET_DATA else client.get_children_async(p) for t, p in ops]

    def get(self, timeout: float) -> list[Any]:
        out: list[Any] = []
        for result in self._results:
            try:
                out.append(result.get(timeout=timeout))
            except kx.NoNodeError as exc:
                out.append(exc)
        return out


class _FallbackOnUnimplemented:
    """A multiRead result that switches the store to single reads if the server lacks it."""

    def __init__(self, store: ZkStore, ops: Sequence[tuple[int, str]], result: Any) -> None:
        self._store, self._ops, self._result = store, ops, result

    def get(self, timeout: float) -> list[Any]:
        try:
            return self._result.get(timeout=timeout)
        except kx.UnimplementedError:
            self._store._multi_read = False
            return _Singles(self._store, self._ops).get(timeout)
