"""Checks of the release methods' shared parameters beyond each value's own constraint.

Every parameter -- its SQL type, default, constraint and hint -- is declared once, in
``plpy_anon.parameters``; ``check_k`` and ``check_l`` apply those declarations, the others check
what one value alone cannot (k against the rows read, the privacy models' combination).
"""
from __future__ import annotations

from plpy_anon import parameters
from plpy_anon.core.errors import InsufficientData


def check_models(parameters: dict) -> None:
    """The combination of l, l_diversity, c and t (each already validated alone): c only, and
    always, with recursive; entropy/recursive only with l (InvalidParameter, 22023)."""
    from plpy_anon.core.privacy_models import check_models as check
    check(parameters.get("l"), parameters["l_diversity"], parameters.get("c"),
          parameters.get("t"))


def check_k(k, *, optional: bool = False) -> int | None:
    """The one k check of every method: an integer >= 2 (NULL only where ``optional``)."""
    return (parameters.OPTIONAL_K if optional else parameters.K).check(k)


def check_k_rows(k: int, n_rows: int, what: str) -> None:
    """k must not exceed the rows read: no class of k rows can be formed otherwise."""
    if n_rows < k:
        raise InsufficientData(f"table {what} has {n_rows} rows, fewer than k = {k}",
                               hint=f"Use k <= {n_rows}, or release a larger table.")


def check_l(l) -> int | None:
    """The one l check: NULL (no l-diversity) or an integer >= 1."""
    return parameters.L.check(l)
