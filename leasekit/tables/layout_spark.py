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

    Each modulus gives at most two terms, each NULL for the hashes it does not own: the buckets
    whose id equals their residue are the ``pmod`` itself (under a hashed ``IN`` or ``NOT IN``
    unless they are all of them), the others a literal lookup. ``coalesce`` takes the first
    term that owns the row, the term owning the most hashes first.
    """
    hashed = f"hash({_quoted(key_columns)})"
    terms: list[tuple[float, str]] = []
    for m, residues, ids in routes:
        pmod = f"pmod({hashed}, {m})"
        same = ids == residues
        if same.any():
            terms.append((np.count_nonzero(same) / m, _identity(pmod, m, residues[same])))
        if not same.all():
            terms.append(
                (np.count_nonzero(~same) / m, _lookup(pmod, m, residues[~same], ids[~same]))
            )
    terms.sort(key=lambda t: -t[0])
    if len(terms) == 1:
        return terms[0][1]
    return f"coalesce({', '.join(term for _, term in terms)})"


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


def _identity(pmod: str, m: int, residues: np.ndarray) -> str:
    """``pmod`` where it is one of ``residues``, else NULL: no condition when they are all of
    them, else ``IN`` the residues or ``NOT IN`` the others, whichever list is shorter."""
    if residues.size == m:
        return pmod
    if 2 * residues.size > m:
        cond = f"{pmod} NOT IN ({_ints(np.setdiff1d(np.arange(m), residues))})"
    else:
        cond = f"{pmod} IN ({_ints(residues)})"
    return f"CASE WHEN {cond} THEN {pmod} END"


def _lookup(pmod: str, m: int, residues: np.ndarray, ids: np.ndarray) -> str:
    """The id of ``pmod``'s bucket where ``pmod`` is one of ``residues``, else NULL."""
    if residues.size == 1:
        return f"CASE WHEN {pmod} = {residues[0]} THEN {ids[0]} END"
    if m <= DENSE * residues.size:
        table = np.full(m, "NULL", dtype=object)
        table[residues] = ids.astype(str)
        return f"element_at(array({', '.join(table)}), {pmod} + 1)"
    pairs = np.column_stack([residues, ids]).ravel()
    return f"element_at(map({_ints(pairs)}), {pmod})"
