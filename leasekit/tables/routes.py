"""Routing hashes to buckets: the active buckets of a layout grouped by modulus, each group a
lookup from residue to bucket id (``tables.layout`` builds them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

__all__ = ["Route", "route_hashes"]

_DENSE = 4
"""A modulus's route is a table of ``m`` ids when ``m`` is at most this many times its buckets."""


class Route(NamedTuple):
    """The active buckets of one modulus, by residue."""

    modulus: int
    residues: np.ndarray
    """Their residues, ascending (int64)."""
    ids: np.ndarray
    """Their bucket ids, in the order of ``residues`` (int32)."""
    table: np.ndarray | None
    """Bucket id by residue (-1: none of this modulus), when that table is small enough."""

    @classmethod
    def of(cls, modulus: int, residues: np.ndarray, ids: np.ndarray) -> Route:
        order = np.argsort(residues, kind="stable")
        residues, ids = residues[order], ids[order].astype(np.int32)
        table = None
        if modulus <= _DENSE * residues.size:
            table = np.full(modulus, -1, np.int32)
            table[residues] = ids
        return cls(modulus, residues, ids, table)

    def find(self, residues: np.ndarray) -> np.ndarray:
        """The bucket owning each residue of this modulus, -1 where no bucket of it does."""
        if self.table is not None:
            return self.table[residues]
        pos = np.minimum(np.searchsorted(self.residues, residues), self.residues.size - 1)
        return np.where(self.residues[pos] == residues, self.ids[pos], np.int32(-1))


def route_hashes(routes: Sequence[Route], hashes: np.ndarray) -> np.ndarray:
    """The bucket of each int32 hash: one modulo and one lookup per route, the route owning
    most hashes first, each later one over the hashes still unrouted (-1: no route owns it)."""
    wide = hashes.astype(np.int64).ravel()
    out = np.full(wide.shape, -1, np.int32)
    pending = np.arange(wide.size)
    for route in sorted(routes, key=lambda r: -r.ids.size / r.modulus):
        found = route.find(np.mod(wide[pending], route.modulus))
        hit = found >= 0
        out[pending[hit]] = found[hit]
        pending = pending[~hit]
        if not pending.size:
            break
    return out.reshape(hashes.shape)
