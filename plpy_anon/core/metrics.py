"""Information-loss and privacy figures of a partitioned release.

* ``achieved_k``: size of the smallest class -- a class below the requested ``k`` shows here, it is
  never dropped or hidden.
* ``c_dm``: discernibility ``sum |E|^2``; ``c_avg``: ``n / (n_classes * k)`` (1 is ideal).
* ``ncp_percent``: normalized certainty penalty, the mean over rows and quasi-identifiers of the
  normalized spread of the row's class (:class:`~plpy_anon.core.generalize.SpreadMeasure`:
  numeric ``(hi - lo) / (global max - min)``, categorical ``(values - 1) / (domain - 1)``,
  hierarchy ``(leaf_count(LCA) - 1) / (n_leaves - 1)``; 0 for a one-value domain), in percent;
  ``ncp_per_attribute`` the same per column.
"""

from __future__ import annotations

import numpy as np

from plpy_anon.core.errors import InsufficientData, InvalidParameter
from plpy_anon.core.generalize import (
    ClassIndex,
    SpreadMeasure,
    class_code_range,
    class_distinct_codes,
)
from plpy_anon.core.k_anonymity import check_k


def release_metrics(columns, labels, k, index=None, distinct=None, code_ranges=None):
    """Metrics of the release whose rows carry class ids ``labels`` (0..C-1). ``distinct``: for
    some value-set columns (by name), the number of distinct codes in every class, when the
    caller counted them already (a release's literals list them); ``code_ranges``: for some
    ranged columns (by name), :func:`class_code_range` of their codes, when the caller has it
    (a release's range literals are made from it)."""
    labels = np.asarray(labels)
    if labels.size == 0:
        raise InsufficientData("the release has no rows", hint="compute metrics of a non-empty release")
    if not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0:
        raise InvalidParameter("class labels must be non-negative integers",
                               hint="pass labels_ of a fitted Mondrian")
    check_k(k)                                     # c_avg divides by it
    n_rows = labels.size
    class_sizes = np.bincount(labels)
    class_sizes = class_sizes[class_sizes > 0]     # ids need not be dense
    n_classes = class_sizes.size
    index = index or ClassIndex.of(labels, int(labels.max()) + 1)
    distinct, code_ranges = distinct or {}, code_ranges or {}
    ncp = {col.name: 100.0 * float(_row_mean_spread(col, labels, index, distinct.get(col.name),
                                                    code_ranges.get(col.name)))
           for col in columns}
    return {
        "achieved_k": int(class_sizes.min()),
        "n_classes": int(n_classes),
        "c_dm": int(np.sum(class_sizes.astype(np.int64) ** 2)),
        "c_avg": n_rows / (n_classes * k),
        "ncp_percent": float(np.mean(list(ncp.values()))) if ncp else 0.0,
        "ncp_per_attribute": ncp,
    }


def _row_mean_spread(col, labels, index, distinct=None, code_range=None):
    """Mean over rows of the normalized spread of the row's class on ``col``."""
    n_slots = int(labels.max()) + 1
    measure = SpreadMeasure(col)
    if measure.needs_distinct:          # a value set's spread counts its values, not its range
        if distinct is None:
            distinct = class_distinct_codes(col.codes, labels, n_slots)
        lo = hi = None
        occupied = np.diff(index.bounds) > 0
    else:
        lo, hi = code_range or class_code_range(col.codes, labels, n_slots, index)
        distinct = None
        occupied = hi >= 0
    spread = np.zeros(n_slots)
    spread[occupied] = measure(None if lo is None else lo[occupied],
                               None if hi is None else hi[occupied],
                               None if distinct is None else distinct[occupied])
    # a sum, not a dot product: BLAS would wake its threads, which then spin on a busy machine
    return float((np.bincount(labels, minlength=n_slots) * spread).sum()) / labels.size
