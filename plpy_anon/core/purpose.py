"""Attribute priorities of a purpose: given explicitly, or derived from mutual information (001).

The trust- and purpose-aware model, Definition 1: order the attributes from the most useful ``A_1`` (priority 1) to the
least useful ``A_m`` (priority 0); with ``MI`` the normalized pairwise mutual-information matrix,

    P(A_i) = [MI(A_i, A_{i+1}) P(A_{i-1}) + MI(A_i, A_{i-1}) P(A_{i+1})]
             / [MI(A_i, A_{i+1}) + MI(A_i, A_{i-1})],        P(A_1) = 1, P(A_m) = 0.

The extraction kept the numerator's first term and cut the rest; the reading above (a convex
combination of the two neighbours' priorities, so that Theorem 1, ``0 <= P <= 1``, holds by the
discrete maximum principle) is the one the guide describes. Choices made where the paper is silent:

* The recursion couples each priority to both neighbours, so it is solved as one linear
  (tridiagonal) system rather than evaluated forwards.
* Each coupling weight is ``MI + mi_floor`` (``mi_floor > 0``): with a zero MI the system can be
  singular (two neighbours pointing at each other); the floor keeps it solvable and, for
  independent neighbours, degrades the rule to plain linear interpolation.
* The paper fixes only the two ends; the attributes in between are ordered by how much more
  information they share with the most useful attribute than with the least useful one,
  ``MI(A, A_1) - MI(A, A_m)`` (descending, ties in column order).
* ``MI`` is normalized as ``I(X; Y) / sqrt(H(X) H(Y))`` (1 on the diagonal, 0 if either column
  is constant); numeric columns are discretized into ``n_bins`` quantile bins first.
"""

import numpy as np
import pandas as pd

from plpy_anon.core.errors import InsufficientData, InvalidParameter, UndefinedObject
from plpy_anon.core.workload import number_value


def _check_columns_exist(names, columns, what):
    missing = [name for name in names if name not in columns]
    if missing:
        raise UndefinedObject(
            f"{what} {missing[0]!r} is not a column of the table",
            hint=f"use one of: {', '.join(map(str, columns))}",
        )


def validate_priorities(priorities, columns):
    """Check explicit priorities: known columns, values in [0, 1]. Returns a float Series."""
    if not priorities:
        raise InvalidParameter("a purpose needs at least one attribute priority",
                               hint='pass e.g. {"age": 1, "sex": 0.5}')
    _check_columns_exist(list(priorities), list(columns), "priority for")
    values = {name: number_value(value) for name, value in priorities.items()}
    for name, value in values.items():
        if value is None:
            raise InvalidParameter(
                f"priority of {name!r} is {'null' if priorities[name] is None else repr(priorities[name])}, "
                "not a number",
                hint='write priorities as JSON numbers in [0, 1], e.g. {"age": 1, "sex": 0.5}',
            )
    series = pd.Series(values, dtype=float)
    bad = ~np.isfinite(series) | (series < 0.0) | (series > 1.0)
    if bad.any():
        name = series.index[bad.to_numpy()][0]
        raise InvalidParameter(
            f"priority of {name!r} must lie in [0, 1]; got {float(series[name])}",
            hint="1 = most useful for the purpose (kept as exact as possible), 0 = least useful",
        )
    return series


def discretize(frame, n_bins=10):
    """Integer codes ``(n_rows, n_columns)``: quantile bins for numbers, categories otherwise.

    Missing values get their own code: "unknown" carries information too.
    """
    if n_bins < 2:
        raise InvalidParameter(f"n_bins must be at least 2; got {n_bins!r}", hint="use e.g. 10")
    codes = np.empty(frame.shape, dtype=np.int64)
    for j, name in enumerate(frame.columns):  # loop over columns only: each one is vectorized
        column = frame[name]
        if pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column):
            column = pd.qcut(column, q=n_bins, duplicates="drop")
        codes[:, j] = pd.factorize(column, use_na_sentinel=False)[0]
    return codes


def entropy(codes):
    """Shannon entropy (nats) of one code column (scipy.stats.entropy of its counts)."""
    from scipy.stats import entropy as shannon  # lazy: scipy.stats costs ~1 s to import

    return float(shannon(np.bincount(codes)))


def mutual_information(x, y):
    """``I(X; Y)`` in nats from two integer code columns (sklearn.metrics.mutual_info_score)."""
    from sklearn.metrics import mutual_info_score  # lazy: see entropy

    return float(mutual_info_score(x, y))


def normalized_mi_matrix(codes):
    """``I(X_i; X_j) / sqrt(H(X_i) H(X_j))`` for all column pairs; symmetric, in [0, 1]."""
    m = codes.shape[1]
    entropies = np.array([entropy(codes[:, j]) for j in range(m)])
    matrix = np.zeros((m, m))
    for i in range(m):  # m(m-1)/2 contingency tables; m is the number of attributes (small)
        for j in range(i + 1, m):
            matrix[i, j] = matrix[j, i] = mutual_information(codes[:, i], codes[:, j])
    scale = np.sqrt(np.outer(entropies, entropies))
    with np.errstate(divide="ignore", invalid="ignore"):
        matrix = np.where(scale > 0, matrix / scale, 0.0)
    np.fill_diagonal(matrix, (entropies > 0).astype(float))
    # I(X; Y) <= min(H(X), H(Y)) <= sqrt(H(X) H(Y)); clip only the float rounding above 1
    return np.clip(matrix, 0.0, 1.0)


def chain_priorities(mi, *, mi_floor=1e-3):
    """Solve Definition 1 along a chain: ``mi`` is the NMI matrix in chain order (first = 1).

    Returns the priorities in the same order; the first is 1, the last 0, all in [0, 1].
    """
    mi = np.asarray(mi, dtype=float)
    m = mi.shape[0]
    if m < 2:
        raise InsufficientData("deriving priorities needs at least two attributes",
                               hint="give the priorities explicitly instead")
    if not mi_floor > 0:
        raise InvalidParameter(f"mi_floor must be positive; got {mi_floor!r}",
                               hint="keep the default 1e-3")
    idx = np.arange(1, m - 1)
    toward_previous = mi[idx, idx + 1] + mi_floor  # weight on P(A_{i-1})
    toward_next = mi[idx, idx - 1] + mi_floor  # weight on P(A_{i+1})
    total = toward_previous + toward_next
    system = np.eye(m)
    system[idx, idx - 1] = -toward_previous / total
    system[idx, idx + 1] = -toward_next / total
    rhs = np.zeros(m)
    rhs[0] = 1.0
    priorities = np.linalg.solve(system, rhs)
    return np.clip(priorities, 0.0, 1.0)  # rounding only: the exact solution is in [0, 1]


class MIPriorities:
    """Derive a purpose's priorities from the data's normalized mutual-information matrix.

    Parameters: ``most`` / ``least`` -- the most and least useful column for the purpose;
    ``n_bins`` -- quantile bins for numeric columns; ``mi_floor`` -- see the module docstring.

    After ``fit(frame)``: ``columns_`` (analyzed columns), ``mi_matrix_`` (DataFrame),
    ``order_`` (most to least useful), ``priorities_`` (Series indexed by column).
    """

    def __init__(self, most, least, *, n_bins=10, mi_floor=1e-3):
        self.most = most
        self.least = least
        self.n_bins = n_bins
        self.mi_floor = mi_floor

    def fit(self, frame):
        columns = list(frame.columns)
        _check_columns_exist([self.most, self.least], columns, "attribute")
        if self.most == self.least:
            raise InvalidParameter(f"most and least useful are both {self.most!r}",
                                   hint="name two different columns")
        if len(frame) == 0:
            raise InsufficientData("cannot measure mutual information on an empty table",
                                   hint="derive priorities from a table with rows")
        matrix = normalized_mi_matrix(discretize(frame, self.n_bins))
        order = self._chain_order(matrix, columns)
        positions = [columns.index(name) for name in order]
        priorities = chain_priorities(matrix[np.ix_(positions, positions)],
                                      mi_floor=self.mi_floor)
        self.columns_ = columns
        self.mi_matrix_ = pd.DataFrame(matrix, index=columns, columns=columns)
        self.order_ = order
        self.priorities_ = pd.Series(priorities, index=order).reindex(columns)
        return self

    def _chain_order(self, matrix, columns):
        first, last = columns.index(self.most), columns.index(self.least)
        middle = [j for j in range(len(columns)) if j not in (first, last)]
        affinity = matrix[middle, first] - matrix[middle, last]
        ranked = [middle[j] for j in np.argsort(-affinity, kind="stable")]
        return [columns[j] for j in [first, *ranked, last]]
