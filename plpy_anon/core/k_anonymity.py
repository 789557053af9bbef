"""k-anonymity's smallest class size and the core's one guard of k.

k is checked in three places on purpose, each independent of the others: where a release is
declared (``plpy_anon.parameters.K``, before anything is read), here (every core estimator that
forms classes of k rows, before it fits) and in the verification of the released rows
(``plpy_anon.db.verify``, in SQL). All three use :data:`MIN_K`.

Standard library only: ``plpy_anon.parameters`` (read by the build before any environment
exists) takes its minimum from here.
"""
from __future__ import annotations

from numbers import Integral

from plpy_anon.core.errors import InsufficientData, InvalidParameter

#: the smallest k of every method: k = 1 puts every row in a class of its own, released as it is
MIN_K = 2

HINT = (f"Use k => {MIN_K} or more (every class gets at least k rows; k = 1 would release every "
        "row as it is).")


def check_k(k, n_rows: int | None = None, what: str = "the table", name: str = "k") -> int:
    """``k`` as an int when it is an integer of at least :data:`MIN_K` and, given ``n_rows``, at
    most the rows to anonymize (``what``: how the error names them); InvalidParameter (22023) or
    InsufficientData (22000) otherwise; ``name``: the argument carrying k."""
    if isinstance(k, bool) or not isinstance(k, Integral):
        raise InvalidParameter(f"{name} must be an integer, got {k!r}", hint=HINT)
    if k < MIN_K:
        raise InvalidParameter(f"{name} must be at least {MIN_K}, got {k}", hint=HINT)
    if n_rows is not None and n_rows < k:
        raise InsufficientData(f"{what} has {n_rows} rows, fewer than k = {k}",
                               hint=f"Use k <= {n_rows}, or release a larger table.")
    return int(k)
