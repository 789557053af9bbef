"""The release-method contract: what a method declares so that the shared machinery (publish,
refresh, verification, grants) can act on its releases without knowing it.

A method module builds one ``ReleaseMethod`` and registers it in ``plpy_anon.db.methods``:

* ``name``: the value of ``anon.releases.method`` for its releases;
* ``parameter_constraints``: ``{name: params.Interval}`` of its shared parameters (``k``, ``l``),
  validated once by ``validate`` (scikit-learn's ``_parameter_constraints`` style);
* ``refresh_release(plpy, GD, release)``: only for releases that are not one materialized view
  (default: rebuild the view beside the old one and swap it in, refreshing.py);
* ``verification_spec(plpy, release, stats) -> verify.Spec``: only for releases whose relations
  are not one view of QIs + sensitive columns (default: verify.default_spec).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from plpy_anon.db import params


@dataclass(frozen=True)
class ReleaseMethod:
    name: str
    parameter_constraints: dict = field(default_factory=dict)
    refresh_release: Callable | None = None
    verification_spec: Callable | None = None

    def validate(self, **values) -> dict:
        """The method's parameters checked against its constraints (InvalidParameter, 22023)."""
        return params.validate(self.parameter_constraints, values)
