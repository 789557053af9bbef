"""Integer encoding of quasi-identifier columns for the Mondrian core.

Every column becomes ``codes`` (int32, one per row) whose ORDER is the order cuts follow:

* numeric (numbers, datetime64): code order = value order. SQL NULL is a value of its own with
  code 0, sorted before every value, so a median cut can isolate it. ``labels`` holds the sorted
  distinct non-NULL values, so the value of code ``c`` is ``labels[c - offset]`` with
  ``offset = 1 if null_code == 0 else 0`` (see :func:`numeric_offset`).
* categorical without hierarchy: codes ordered by FREQUENCY, most frequent first (ties by label),
  so median cuts separate frequent values; NULL is one more value (label ``None``).
* categorical with a :class:`Hierarchy`: codes = the hierarchy's depth-first leaf numbers (all
  leaves, also those absent from the data), so every subtree is a contiguous code range; NULL, if
  present, gets the code after the last leaf and is read as one more child of the root.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from plpy_anon.core.errors import InvalidParameter, UnsupportedType
from plpy_anon.core.hierarchy import Hierarchy


@dataclass
class EncodedColumn:
    """One quasi-identifier as integer codes (see the module docstring for the code order)."""

    name: str
    kind: str                 # "numeric" | "categorical"
    codes: np.ndarray         # int32 (n,)
    labels: np.ndarray        # numeric: sorted non-NULL values; categorical: object array
    null_code: int | None     # code of SQL NULL, None when the column has no NULL
    hierarchy: Hierarchy | None = None

    @property
    def n_codes(self):
        """Size of the code domain (including the NULL code)."""
        return len(self.labels) + (1 if self.kind == "numeric" and self.null_code is not None else 0)


def numeric_offset(col):
    """Shift between a numeric column's codes and ``labels`` indices (1 when NULL has code 0)."""
    return 1 if col.null_code == 0 else 0


def encode_numeric(name, values, null_mask=None):
    """Encode a numeric or datetime64 column; NaN/NaT also count as NULL.

    ``null_mask`` marks SQL NULLs; their entries in ``values`` are ignored.
    """
    values = np.asarray(values)
    if values.ndim != 1:
        raise InvalidParameter(f"column {name!r} must be one-dimensional, got shape {values.shape}",
                               hint="pass one array per column")
    if not (np.issubdtype(values.dtype, np.number) or np.issubdtype(values.dtype, np.datetime64)
            or values.dtype == np.bool_):
        raise UnsupportedType(
            f"column {name!r} has dtype {values.dtype}, which is not numeric or datetime",
            hint="encode text columns with encode_categorical",
        )
    if np.iscomplexobj(values):
        raise UnsupportedType(f"column {name!r} is complex; it has no order",
                              hint="pass real numbers")
    is_null = _null_mask(name, values, null_mask)
    if not is_null.any():             # no copy of the values, no masked writes
        labels, inverse = sorted_distinct(values)
        return EncodedColumn(name, "numeric", inverse.astype(np.int32), labels, None)
    present = values[~is_null]
    labels, inverse = sorted_distinct(present)
    codes = np.zeros(values.shape[0], dtype=np.int32)
    codes[~is_null] = inverse.astype(np.int32) + 1
    return EncodedColumn(name, "numeric", codes, labels, 0)


def sorted_distinct(values):
    """``np.unique(values, return_inverse=True)``. Integers whose range is not much wider than
    their count (ages, days, small codes) by a table of that range instead of a sort: O(n +
    range), several times faster at a million rows."""
    if values.size and np.issubdtype(values.dtype, np.integer):
        lo, hi = int(values.min()), int(values.max())
        if hi - lo < 4 * values.size + 65536:
            # in the column's own width, read unsigned: exact for any width (offset < 2**bits)
            start = values.dtype.type(lo)
            unsigned = np.dtype(f"u{values.dtype.itemsize}")
            offsets = (values - start).view(unsigned).astype(np.intp)
            seen = np.zeros(hi - lo + 1, dtype=bool)
            seen[offsets] = True
            rank = np.cumsum(seen, dtype=np.intp) - 1
            return start + np.flatnonzero(seen).astype(values.dtype), rank[offsets]
    return np.unique(values, return_inverse=True)


def finite_for_ordering(values, null_mask=None):
    """Non-finite numbers mapped to finite stand-ins that keep PostgreSQL's order, for
    partitioning only (released bounds are computed in SQL from the real values).

    ``-inf`` becomes just below the smallest finite value, ``+inf`` just above the largest, and
    NaN (which PostgreSQL sorts above infinity, equal to itself) just above that, so a median cut
    can still isolate them and spreads are not poisoned by infinite widths (the stand-ins lie 1% of
    the finite width beyond the extremes; values within 2% of the float8 maximum may overflow). Entries marked in
    ``null_mask`` are left as they are. Integer arrays are returned unchanged.
    """
    values = np.asarray(values)
    if not np.issubdtype(values.dtype, np.floating):
        return values
    present = np.ones(values.shape, dtype=bool) if null_mask is None else ~np.asarray(null_mask, dtype=bool)
    finite = np.isfinite(values)
    bad = present & ~finite
    if not bad.any():
        return values
    usable = values[present & finite]
    lo, hi = (float(usable.min()), float(usable.max())) if usable.size else (0.0, 0.0)
    # 1% of the finite width (computed without overflow), and never below the float spacing
    step = max(hi / 100 - lo / 100, max(abs(hi), abs(lo), 1.0) * 1e-6)
    out = values.astype(np.float64, copy=True)
    out[bad & np.isneginf(values)] = lo - step
    out[bad & np.isposinf(values)] = hi + step
    out[bad & np.isnan(values)] = hi + 2 * step
    return out


def encode_categorical(name, values, hierarchy=None):
    """Encode a text column (``str`` or ``None`` = NULL); see the module docstring for the order."""
    values = np.asarray(values, dtype=object)
    if values.ndim != 1:
        raise InvalidParameter(f"column {name!r} must be one-dimensional, got shape {values.shape}",
                               hint="pass one sequence per column")
    import pandas as pd  # here: a build that never factorizes objects pays no import
    factor, uniques = pd.factorize(values, use_na_sentinel=True)
    return encode_factorized(name, factor, [str(u) for u in uniques], hierarchy)


def encode_factorized(name, factor, uniques, hierarchy=None):
    """:func:`encode_categorical` of a column already factorized: ``factor`` int codes into the
    list of strings ``uniques``, -1 for NULL (every unique occurring at least once)."""
    has_null = bool((factor < 0).any())
    if hierarchy is None:
        return _encode_by_frequency(name, factor, uniques, has_null)
    return _encode_by_hierarchy(name, factor, uniques, has_null, hierarchy)


def _encode_by_frequency(name, factor, uniques, has_null):
    # factorize gives NULL the sentinel -1; move it to a slot of its own after the strings
    slot = np.where(factor < 0, len(uniques), factor) if has_null else factor
    counts = np.bincount(slot, minlength=len(uniques) + 1)
    keys = [(-counts[i], 0, u) for i, u in enumerate(uniques)]
    if has_null:
        keys.append((-counts[-1], 1, ""))          # NULL after strings of equal frequency
    rank = sorted(range(len(keys)), key=keys.__getitem__)
    code_of_slot = np.empty(len(keys), dtype=np.int32)
    code_of_slot[rank] = np.arange(len(keys), dtype=np.int32)
    labels = np.array([uniques[i] if i < len(uniques) else None for i in rank], dtype=object)
    codes = code_of_slot[slot]                     # int32, as code_of_slot
    null_code = int(code_of_slot[-1]) if has_null else None
    return EncodedColumn(name, "categorical", codes, labels, null_code)


def _encode_by_hierarchy(name, factor, uniques, has_null, hierarchy):
    hierarchy.check_covers(uniques, name)
    n_leaves = len(hierarchy.leaves)
    code_of_unique = np.array([hierarchy.leaf_number(u) for u in uniques] + [n_leaves],
                              dtype=np.int32)
    codes = code_of_unique[factor]                 # factor == -1 (NULL) picks n_leaves
    labels = np.array(list(hierarchy.leaves) + ([None] if has_null else []), dtype=object)
    return EncodedColumn(name, "categorical", codes, labels, n_leaves if has_null else None,
                         hierarchy)


def _null_mask(name, values, null_mask):
    if null_mask is None:
        is_null = np.zeros(values.shape[0], dtype=bool)
    else:
        is_null = np.asarray(null_mask, dtype=bool)
        if is_null.shape != values.shape:
            raise InvalidParameter(
                f"null_mask of column {name!r} has shape {is_null.shape}, values {values.shape}",
                hint="give one NULL flag per value",
            )
        is_null = is_null.copy()
    if np.issubdtype(values.dtype, np.floating) or np.issubdtype(values.dtype, np.datetime64):
        is_null |= np.isnan(values)
    return is_null
