"""A table's bucket layout: each bucket owns the keys whose ``pmod(hash(key...), m) == r`` for its
residue class (r, m); any active bucket splits into the two halves of its class, and the two
buckets of one split, while both are active, merge back (K1, K2). Pure values: no ZooKeeper I/O
(the table's record stores them, in ``zk.layout_formats``'s form)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ..errors import (
    BucketNotFoundError,
    CorruptMetadataError,
    IllegalStateError,
    InvalidArgumentError,
    InvalidTypeError,
    LeasekitError,
)
from ..structs import BucketLineage, TableBucket
from ..validate import check_int
from ..zk.layout_formats import MAX_MODULUS, MAX_OFFSET, LayoutRecord, MergeOp, SplitOp
from .layout_spark import layout_sql
from .routes import Route, route_hashes

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = ["BucketLayout", "ResidueClass", "ACTIVE", "SEALED", "MAX_INITIAL_BUCKETS"]

ACTIVE, SEALED = "active", "sealed"
"""States of a bucket (``BucketLineage.state``)."""
MAX_INITIAL_BUCKETS = 1_000_000
"""Most buckets a layout starts with."""


class ResidueClass(NamedTuple):
    """The hashes a bucket owns: those with ``pmod(hash, modulus) == residue``."""

    residue: int
    """0 <= residue < modulus."""
    modulus: int
    """1 <= modulus < 2**31."""


class _Created(NamedTuple):
    """A bucket made by a split or a merge."""

    owns: ResidueClass
    """Its residue class."""
    parents: tuple[int, ...]
    """The bucket it was split from, or the two it was merged from (lower residue first)."""


class _Seal(NamedTuple):
    """How a sealed bucket ended."""

    sealed_at: int
    """Its end offset at the seal."""
    children: tuple[int, ...]
    """The buckets it was split or merged into."""
    rescale: int
    """Index of that split or merge in the layout's operations."""


class BucketLayout:
    """Every bucket a table ever had: its residue class, state, parents, children and seal.

    An immutable value: ``split`` and ``merge`` return a new layout. A table created with N
    buckets starts with buckets 0..N-1 owning ``(b, N)``, so rows go where
    ``pmod(hash(key...), N)`` sends them; new buckets get the next unused ids.
    """

    def __init__(self, num_buckets: int) -> None:
        """The initial layout of ``num_buckets`` (see ``initial``)."""
        self._n = check_int(num_buckets, "num_buckets", minimum=1, maximum=MAX_INITIAL_BUCKETS)
        self._ops: list[SplitOp | MergeOp] = []
        self._created: list[_Created] = []
        self._seals: dict[int, _Seal] = {}
        self._owner: dict[ResidueClass, int] = {}
        """The active buckets made by splits and merges, by residue class."""

    @classmethod
    def initial(cls, num_buckets: int) -> BucketLayout:
        """The layout of a new table: buckets ``0 .. num_buckets - 1``, bucket b owning (b, N).

        Raises:
            InvalidTypeError: ``num_buckets`` is not an int.
            InvalidArgumentError: it is outside [1, MAX_INITIAL_BUCKETS].
        """
        return cls(num_buckets)

    @cached_property
    def active(self) -> tuple[int, ...]:
        """The ids of the active buckets, ascending."""
        ids = [route.ids for route in self._routes]
        return tuple(np.sort(np.concatenate(ids)).tolist())

    @property
    def count(self) -> int:
        """How many buckets the layout ever had: their ids are ``0 .. count - 1``."""
        return self._n + len(self._created)

    @property
    def rescaled(self) -> bool:
        """Whether any bucket was ever split or merged."""
        return bool(self._ops)

    def parents(self, bucket: int) -> tuple[int, ...]:
        """The bucket ``bucket`` was split from, or the two it was merged from; () for a bucket
        the table was created with."""
        b = self._bucket(bucket)[0]
        return () if b < self._n else self._created[b - self._n].parents

    def children(self, bucket: int) -> tuple[int, ...]:
        """The buckets ``bucket`` was split or merged into; () while it is active."""
        seal = self._seals.get(self._bucket(bucket)[0])
        return () if seal is None else seal.children

    def sealed_at(self, bucket: int) -> int | None:
        """The end offset ``bucket`` was sealed at; None while it is active."""
        seal = self._seals.get(self._bucket(bucket)[0])
        return None if seal is None else seal.sealed_at

    def sealed_by(self, bucket: int) -> int | None:
        """Index in ``record.operations`` of the split or merge that sealed ``bucket``; None
        while it is active."""
        seal = self._seals.get(self._bucket(bucket)[0])
        return None if seal is None else seal.rescale

    def is_active(self, bucket: int) -> bool:
        """Whether ``bucket`` is one of the layout's buckets and takes appends."""
        return 0 <= bucket < self.count and bucket not in self._seals

    def residue_class(self, bucket: int) -> ResidueClass:
        """The hashes ``bucket`` owns (owned while active, before its seal while sealed).

        Raises:
            BucketNotFoundError: the layout never had ``bucket``.
        """
        return self._bucket(bucket)[1]

    def lineage(self, table: str) -> list[BucketLineage]:
        """Every bucket the layout ever had, by id, as buckets of ``table``."""
        parents = [()] * self._n + [created.parents for created in self._created]
        out = [
            BucketLineage(TableBucket(table, b), ACTIVE, p, (), None) for b, p in enumerate(parents)
        ]
        for b, seal in self._seals.items():
            out[b] = out[b]._replace(state=SEALED, children=seal.children, sealed_at=seal.sealed_at)
        return out

    def split(self, bucket: int, sealed_at: int) -> tuple[BucketLayout, tuple[int, int]]:
        """Seal ``bucket`` at its end offset ``sealed_at`` and split its keys into two new buckets:
        owning (r, m), it yields (r, 2m) and (r + m, 2m), in that order (K1).

        Returns:
            The new layout and the ids of the two new buckets.

        Raises:
            InvalidTypeError: an argument is not an int.
            InvalidArgumentError: ``sealed_at`` is outside [0, 2**63).
            BucketNotFoundError: the layout never had ``bucket`` (K8).
            IllegalStateError: ``bucket`` is sealed, or its halves' modulus would reach 2**31.
        """
        at = check_int(sealed_at, "sealed_at", minimum=0, maximum=MAX_OFFSET)
        b, owns = self._active_bucket(bucket, "split")
        layout = self._copy()
        return layout, layout._split(b, owns, at)

    def merge(
        self, bucket_a: int, bucket_b: int, sealed_at_a: int, sealed_at_b: int
    ) -> tuple[BucketLayout, int]:
        """Seal two active siblings (the two buckets one split made) at their end offsets and
        merge their keys into one new bucket: (r, 2m) and (r + m, 2m) give (r, m), the inverse of
        that split (K1).

        Returns:
            The new layout and the id of the new bucket.

        Raises:
            InvalidTypeError: an argument is not an int.
            InvalidArgumentError: an offset is outside [0, 2**63), or the buckets are one bucket
                or not the two buckets of one split (K8).
            BucketNotFoundError: the layout never had one of them (K8).
            IllegalStateError: one of them is sealed (K8).
        """
        at_a = check_int(sealed_at_a, "sealed_at_a", minimum=0, maximum=MAX_OFFSET)
        at_b = check_int(sealed_at_b, "sealed_at_b", minimum=0, maximum=MAX_OFFSET)
        a, owns_a = self._active_bucket(bucket_a, "merged")
        b, owns_b = self._active_bucket(bucket_b, "merged")
        if a == b:
            raise InvalidArgumentError(f"bucket {a} cannot be merged with itself")
        (low, lo_id, lo_at), (high, hi_id, hi_at) = sorted([(owns_a, a, at_a), (owns_b, b, at_b)])
        whole = _whole(low, high)
        if whole is None or not self._siblings(a, b):
            raise InvalidArgumentError(
                f"buckets {a} ({_describe(owns_a)}) and {b} ({_describe(owns_b)}) are not "
                "siblings: only the two buckets one split made merge back"
            )
        layout = self._copy()
        return layout, layout._merge(whole, (lo_id, lo_at), (hi_id, hi_at))

    def route(self, hashes: np.ndarray) -> np.ndarray:
        """The active bucket owning each hash (Spark's ``hash(key...)``, as ``murmur3_hash``
        returns it): one modulo and one lookup per distinct modulus of the active buckets, the
        modulus owning most hashes first, each later one over the hashes still unrouted.

        Raises:
            InvalidTypeError: ``hashes`` is not an int32 array.
        """
        if not isinstance(hashes, np.ndarray) or hashes.dtype != np.int32:
            raise InvalidTypeError("hashes must be an int32 numpy array")
        return route_hashes(self._routes, hashes)

    def spark_column(self, key_columns: Sequence[str]) -> Column:
        """Spark column (int) of the active bucket owning each row, the bucket ``route`` gives
        its hash (W4, K2); for a layout never rescaled, ``pmod(hash(key...), N)``.

        Raises:
            InvalidTypeError: ``key_columns`` is not a sequence of names.
            InvalidArgumentError: it is empty.
        """
        from pyspark.sql import functions as F

        routes = [(r.modulus, r.residues, r.ids) for r in self._routes]
        return F.expr(layout_sql(key_columns, routes))

    @property
    def record(self) -> LayoutRecord:
        """The stored form: the initial bucket count and every split and merge, in order."""
        return LayoutRecord(self._n, tuple(self._ops))

    def encode(self) -> bytes:
        """The msgpack value stored in ZooKeeper (about 20 bytes per split or merge)."""
        return self.record.encode()

    @classmethod
    def decode(cls, data: bytes, path: str) -> BucketLayout:
        """The layout stored at ``path``.

        Raises:
            CorruptMetadataError: garbage, another format version, a field out of range, or an
                operation on a residue class no active bucket owns; the error names ``path``.
        """
        return cls.from_record(LayoutRecord.decode(data, path), path)

    @classmethod
    def from_record(cls, record: LayoutRecord, path: str) -> BucketLayout:
        """The layout ``record`` describes, its operations replayed in order.

        Raises:
            CorruptMetadataError: an operation the layout refuses, naming ``path``.
        """
        try:
            layout = cls.initial(record.num_buckets)
            for i, op in enumerate(record.operations):
                layout._replay(op, i)
        except LeasekitError as exc:
            raise CorruptMetadataError(f"bucket layout at {path} is invalid: {exc}", path) from None
        return layout

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BucketLayout) and other.record == self.record

    def __hash__(self) -> int:
        return hash(self.record)

    def __repr__(self) -> str:
        return f"BucketLayout(initial={self._n}, rescales={len(self._ops)})"

    # -- building (only on a layout not yet returned to a caller) --

    def _copy(self) -> BucketLayout:
        layout = BucketLayout(self._n)
        layout._ops = list(self._ops)
        layout._created = list(self._created)
        layout._seals = dict(self._seals)
        layout._owner = dict(self._owner)
        return layout

    def _bucket(self, bucket: object) -> tuple[int, ResidueClass]:
        """``bucket``'s id and residue class; ``BucketNotFoundError`` if it never existed."""
        b = check_int(bucket, "bucket")
        if 0 <= b < self._n:
            return b, ResidueClass(b, self._n)
        if self._n <= b < self._n + len(self._created):
            return b, self._created[b - self._n].owns
        last = self._n + len(self._created) - 1
        raise BucketNotFoundError(f"the table has no bucket {b} (its buckets are 0..{last})")

    def _active_bucket(self, bucket: object, action: str) -> tuple[int, ResidueClass]:
        b, owns = self._bucket(bucket)
        seal = self._seals.get(b)
        if seal is not None:
            raise IllegalStateError(
                f"bucket {b} cannot be {action}: it is sealed at offset {seal.sealed_at} "
                f"(into buckets {', '.join(map(str, seal.children))})"
            )
        return b, owns

    def _owner_of(self, owns: ResidueClass) -> int:
        """The active bucket owning exactly the class ``owns``."""
        initial = owns.modulus == self._n and owns.residue not in self._seals
        b = owns.residue if initial else self._owner.get(owns)
        if b is None:
            raise IllegalStateError(f"no active bucket owns {_describe(owns)}")
        return b

    def _replay(self, op: SplitOp | MergeOp, index: int) -> None:
        """Apply the stored operation number ``index``."""
        whole = ResidueClass(op.residue, op.modulus)
        if isinstance(op, SplitOp):
            self._split(self._owner_of(whole), whole, op.sealed_at)
            return
        if 2 * op.modulus > MAX_MODULUS:
            raise IllegalStateError(f"operation {index} merges halves beyond modulus 2**31")
        low = self._owner_of(ResidueClass(op.residue, 2 * op.modulus))
        high = self._owner_of(ResidueClass(op.residue + op.modulus, 2 * op.modulus))
        if not self._siblings(low, high):
            raise IllegalStateError(f"operation {index} merges buckets no split made")
        self._merge(whole, (low, op.sealed_at_low), (high, op.sealed_at_high))

    def _split(self, bucket: int, owns: ResidueClass, sealed_at: int) -> tuple[int, int]:
        r, m = owns
        if 2 * m > MAX_MODULUS:
            raise IllegalStateError(
                f"bucket {bucket} ({_describe(owns)}) cannot split: its halves' modulus "
                f"{2 * m} would reach 2**31"
            )
        c1, c2 = self._create([ResidueClass(r, 2 * m), ResidueClass(r + m, 2 * m)], (bucket,))
        self._seal(bucket, owns, _Seal(sealed_at, (c1, c2), len(self._ops)))
        self._ops.append(SplitOp(r, m, sealed_at))
        return c1, c2

    def _merge(self, whole: ResidueClass, low: tuple[int, int], high: tuple[int, int]) -> int:
        r, m = whole
        (c,) = self._create([whole], (low[0], high[0]))
        index = len(self._ops)
        self._seal(low[0], ResidueClass(r, 2 * m), _Seal(low[1], (c,), index))
        self._seal(high[0], ResidueClass(r + m, 2 * m), _Seal(high[1], (c,), index))
        self._ops.append(MergeOp(r, m, low[1], high[1]))
        return c

    def _siblings(self, a: int, b: int) -> bool:
        """Whether ``a`` and ``b`` are the two buckets of one split."""
        if a < self._n or b < self._n:
            return False
        parents = self._created[a - self._n].parents
        return len(parents) == 1 and parents == self._created[b - self._n].parents

    def _create(self, classes: list[ResidueClass], parents: tuple[int, ...]) -> list[int]:
        ids = []
        for owns in classes:
            ids.append(self._n + len(self._created))
            self._created.append(_Created(owns, parents))
            self._owner[owns] = ids[-1]
        return ids

    def _seal(self, bucket: int, owns: ResidueClass, seal: _Seal) -> None:
        self._seals[bucket] = seal
        self._owner.pop(owns, None)

    @cached_property
    def _routes(self) -> tuple[Route, ...]:
        """The active buckets grouped by modulus, ascending."""
        groups: dict[int, list[tuple[int, int]]] = {}
        for owns, b in self._owner.items():
            groups.setdefault(owns.modulus, []).append((owns.residue, b))
        kept = np.ones(self._n, bool)
        kept[[b for b in self._seals if b < self._n]] = False
        first = np.flatnonzero(kept)
        routes = []
        for m in sorted(set(groups) | ({self._n} if first.size else set())):
            pairs = np.array(groups.get(m, []), np.int64).reshape(-1, 2)
            residues, ids = pairs[:, 0], pairs[:, 1]
            if m == self._n:
                residues, ids = np.concatenate([first, residues]), np.concatenate([first, ids])
            routes.append(Route.of(m, residues, ids))
        return tuple(routes)


def _whole(low: ResidueClass, high: ResidueClass) -> ResidueClass | None:
    """The class whose two halves are ``low`` and ``high``, if they are its halves."""
    m = low.modulus
    if high.modulus != m or m % 2 or high.residue - low.residue != m // 2:
        return None
    return ResidueClass(low.residue, m // 2)


def _describe(owns: ResidueClass) -> str:
    return f"hash mod {owns.modulus} == {owns.residue}"
