"""Checks of the release methods' shared parameters beyond each value's own constraint.

Every parameter -- its SQL type, default, constraint and hint -- is declared once, in
``plpy_anon.parameters``, and checked there; these check what one value alone cannot (k against
the rows read, the privacy models' combination).
"""
from __future__ import annotations

from plpy_anon.core.errors import InsufficientData


def check_models(parameters: dict) -> None:
    """The combination of l, l_diversity, c and t (each already validated alone): c only, and
    always, with recursive; entropy/recursive only with l (InvalidParameter, 22023)."""
    from plpy_anon.core.privacy_models import check_models as check
    check(parameters.get("l"), parameters["l_diversity"], parameters.get("c"),
          parameters.get("t"))


def check_k_rows(k: int, n_rows: int, what: str) -> None:
    """k must not exceed the rows read: no class of k rows can be formed otherwise."""
    if n_rows < k:
        raise InsufficientData(f"table {what} has {n_rows} rows, fewer than k = {k}",
                               hint=f"Use k <= {n_rows}, or release a larger table.")
