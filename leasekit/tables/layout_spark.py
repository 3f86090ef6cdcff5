"""The Spark SQL form of a bucket layout's routing: one ``pmod(hash(key...), m)`` per modulus,
with set membership (hashed ``IN``) and literal lookups, compact for many thousands of buckets."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import InvalidArgumentError, InvalidTypeError

__all__ = ["layout_sql"]

DENSE = 4
"""A lookup is an array literal of ``m`` entries when ``m`` is at most this many times its
entries, else a map literal (searched linearly by Spark, so only for sparse classes)."""


def layout_sql(key_columns: Sequence[str], routes: list[tuple[int, np.ndarray, np.ndarray]]) -> str:
    """SQL expression (int) of the bucket of each row, for active buckets given per modulus as
    ``(m, residues, ids)`` (residues ascending, each hash in exactly one of them).

    Every modulus contributes terms ``WHEN <pmod in its residues> THEN <bucket>``: where a
    bucket's id equals its residue the bucket is the ``pmod`` itself, else a literal lookup. The
    term covering the most hashes comes first; one that covers them all needs no condition.
    """
    hashed = f"hash({_quoted(key_columns)})"
    terms: list[tuple[float, str | None, str]] = []
    for m, residues, ids in routes:
        pmod = f"pmod({hashed}, {m})"
        same = ids == residues
        for identity, part in ((True, same), (False, ~same)):
            if part.any():
                res = residues[part]
                value = pmod if identity else _lookup(pmod, m, res, ids[part])
                terms.append((res.size / m, _member(pmod, m, res), value))
    terms.sort(key=lambda t: -t[0])
    if len(terms) == 1 and terms[0][1] is None:
        return terms[0][2]
    whens = " ".join(f"WHEN {cond} THEN {value}" for _, cond, value in terms if cond is not None)
    rest = [value for _, cond, value in terms if cond is None]
    return f"CASE {whens}{f' ELSE {rest[0]}' if rest else ''} END"


def _quoted(key_columns: Sequence[str]) -> str:
    """The key columns as backquoted SQL identifiers, comma separated."""
    if isinstance(key_columns, (str, bytes)) or not isinstance(key_columns, Sequence):
        raise InvalidTypeError("key_columns must be a sequence of column names")
    if not key_columns:
        raise InvalidArgumentError("key_columns must name at least one column")
    if not all(isinstance(name, str) for name in key_columns):
        raise InvalidTypeError("key_columns must be a sequence of column names")
    return ", ".join("`" + name.replace("`", "``") + "`" for name in key_columns)


def _ints(values: np.ndarray) -> str:
    return ", ".join(map(str, values.tolist()))


def _member(pmod: str, m: int, residues: np.ndarray) -> str | None:
    """Condition that ``pmod`` is one of ``residues``: None when they are all of them, else
    ``IN`` the residues or ``NOT IN`` the others, whichever list is shorter."""
    if residues.size == m:
        return None
    if 2 * residues.size > m:
        return f"{pmod} NOT IN ({_ints(np.setdiff1d(np.arange(m), residues))})"
    return f"{pmod} IN ({_ints(residues)})"


def _lookup(pmod: str, m: int, residues: np.ndarray, ids: np.ndarray) -> str:
    """The id of ``pmod``'s bucket, for a ``pmod`` among ``residues``."""
    if residues.size == 1:
        return str(ids[0])
    if m <= DENSE * residues.size:
        table = np.full(m, "NULL", dtype=object)
        table[residues] = ids.astype(str)
        return f"element_at(array({', '.join(table)}), {pmod} + 1)"
    pairs = np.column_stack([residues, ids]).ravel()
    return f"element_at(map({_ints(pairs)}), {pmod})"
