"""The release-method contract: what a method declares so that the shared machinery (publish,
refresh, verification, grants) can act on its releases without knowing it.

A method module builds one ``ReleaseMethod`` and registers it in ``plpy_anon.db.methods``:

* ``name``: the value of ``anon.releases.method`` for its releases;
* ``parameter_constraints``: ``{name: params.Interval}`` of its shared parameters (``k``, ``l``),
  validated once by ``validate`` (scikit-learn's ``_parameter_constraints`` style);
* ``refresh_release(plpy, GD, release)``: only for releases that are not one materialized view
  (default: rebuild the view beside the old one and swap it in, refreshing.py);
* ``verification_spec(plpy, release, stats) -> verify.Spec``: only for releases whose relations
  are not one view of QIs + sensitive columns (default: verify.default_spec);
* the run behind every build and refresh, in three hooks that ``run`` calls in order:
  ``read(ctx) -> data`` (the source, read once in the caller's snapshot; ``ctx`` is a ``Run``),
  ``fit(data, parameters) -> result`` (the core estimator), ``publish(ctx, data, result) ->
  (output, stats)`` (what the SQL function returns, and ``release_rows.stash_run``'s keywords).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from plpy_anon.db import params, release_rows
from plpy_anon.db.sqltext import jsonb


@dataclass(frozen=True)
class ReleaseMethod:
    name: str
    parameter_constraints: dict = field(default_factory=dict)
    refresh_release: Callable | None = None
    verification_spec: Callable | None = None
    read: Callable | None = None
    fit: Callable | None = None
    publish: Callable | None = None

    def validate(self, **values) -> dict:
        """The method's parameters checked against its constraints (InvalidParameter, 22023)."""
        return params.validate(self.parameter_constraints, values)


@dataclass
class Run:
    """One run of a method over its release's source: what the hooks share."""

    plpy: object
    GD: dict | None
    release_id: int
    release: dict              # the anon.releases row
    parameters: dict           # its parameters, validated against the method's constraints
    started: float             # time.monotonic() at the start (stash_run's clock)
    read_s: float = 0.0        # seconds spent in read
    fit_s: float = 0.0         # seconds spent in fit

    def elapsed(self) -> float:
        return time.monotonic() - self.started


def run(method: ReleaseMethod, plpy, GD, release_id: int):
    """The one run of every method: look up the release, validate its parameters once, read the
    source, fit, and stash the run's statistics for the catalog; returns the hook's output."""
    started = time.monotonic()
    release = release_rows.by_id(plpy, release_id)
    stored = jsonb(release["parameters"])
    checked = method.validate(**{name: stored.get(name) for name in method.parameter_constraints})
    ctx = Run(plpy, GD, release_id, release, {**stored, **checked}, started)
    data = method.read(ctx)
    ctx.read_s = ctx.elapsed()
    t0 = time.monotonic()
    result = method.fit(data, ctx.parameters)
    ctx.fit_s = time.monotonic() - t0
    output, stats = method.publish(ctx, data, result)
    release_rows.stash_run(GD, release_id, started=started, **stats)
    return output
