"""Checks of the release methods' shared parameters beyond each value's own constraint.

Every parameter -- its SQL type, default, constraint and hint -- is declared once, in
``plpy_anon.parameters``, and checked there; these check what one value alone cannot (the
privacy models' combination; k against the rows read is the core's guard,
``core.k_anonymity.check_k``).
"""
from __future__ import annotations

from plpy_anon.spec import Promise


def check_models(promise: Promise) -> None:
    """The combination of the promise's l, l_diversity, c and t (each already validated alone):
    c only, and always, with recursive; entropy/recursive only with l (InvalidParameter, 22023)."""
    from plpy_anon.core.privacy_models import check_models as check
    check(promise.l, promise.l_diversity, promise.c, promise.t)

