"""The release machinery's SQL entry points (refresh, refresh_all, record_refresh, drop_release) and
the one place that maps ``anon.releases.method`` to its ``ReleaseMethod`` (``methods.REGISTRY``).
Creation is publish.py (what method modules import), catalog lookups release_rows.py.

A release is one or more relations in a release schema (``release`` by default), built from a
source table by one method with one set of parameters, and one row in ``anon.releases``. A method
supplies the SQL of its relations (usually a materialized view whose query calls the method's
STABLE partitioning function); this module owns their life cycle:

* creation and replacement happen in the caller's transaction, so a failure leaves nothing
  half-built and a replaced release stays as it was;
* refresh (refreshing.py) rebuilds a release's view beside the old one and swaps it in, so
  readers keep the old release until the new one commits; a failed refresh leaves the previous
  release and is recorded (anon.refresh_history); what the partitioning run measured (rows, achieved k, metrics) is
  stashed in the backend's ``GD`` by the method and moved into the catalog by ``record_refresh``,
  which the event trigger ``plpy_anon_record_refresh`` calls after every refresh of a release,
  whether it came through ``anon.refresh()`` or a plain ``REFRESH MATERIALIZED VIEW``.
"""
from __future__ import annotations

import time

from plpy_anon.core.errors import UndefinedObject
from plpy_anon.db import refreshing, timing, verify
from plpy_anon.db.errors import sql_entry
from plpy_anon.db.method import ReleaseMethod
from plpy_anon.db.methods.registry import REGISTRY
from plpy_anon.db.publish import (  # noqa: F401 -- the creation API, re-exported
    check_name,
    create_release,
    create_view_release,
    drop,
    record,
)
from plpy_anon.db.release_rows import (  # noqa: F401 -- the catalog lookups, re-exported
    BUILDING_KEY,
    RUNS_KEY,
    StaleRelease,
    by_id,
    check_genuine,
    find,
    genuine_relations,
    owned_relations,
    qualified_name,
    record_timing,
    relation_exists,
    stash_run,
    take_run,
)
from plpy_anon.db.sqltext import run

REFRESHING_KEY = "plpy_anon.refreshing"


@sql_entry
def record_refresh(plpy, GD, relation_oid: int) -> None:
    """After REFRESH MATERIALIZED VIEW of a release (event trigger): check and record it. A plain
    REFRESH that fails the check is recorded here (autonomously: it outlives the rollback that
    keeps the old rows); inside anon.refresh, refreshing.refresh records it."""
    # a release only in the schema it was created in and owned by its creator (the event trigger
    # checks the same): a view carrying a release's name elsewhere is someone else's, and this
    # runs as the extension's owner
    rows = run(plpy, """
        SELECT r.* FROM anon.releases r
        JOIN pg_catalog.pg_namespace n ON n.nspname = r.release_schema AND n.oid = r.schema_oid
        JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid
                                  AND c.relname = coalesce(r.parameters ->> 'storage', r.release_name)
                                  AND c.relowner = r.release_owner AND c.relkind = 'm'
        WHERE c.oid = $1""", ["oid"], [relation_oid])
    if not rows:
        return
    statement = run(plpy, "SELECT pg_catalog.statement_timestamp()::text AS t, pg_catalog.date_part('epoch', "
                          "pg_catalog.clock_timestamp() - pg_catalog.statement_timestamp()) AS s")[0]
    if timing.current() is not None:      # inside anon.refresh: its clock runs
        _record_refreshes(plpy, GD, rows, started_at=statement["t"])
        return
    # a plain REFRESH MATERIALIZED VIEW: the statement is the call, its time so far the wait
    # for the view's lock (until the run started) and the build
    with timing.call(time.monotonic() - statement["s"], first="locks") as clock:
        runs = [GD.get(RUNS_KEY, {}).get(r["release_id"]) for r in rows]
        started = min((run["started"] for run in runs if run), default=clock.started)
        clock.switch_at(started, "build")
        _record_refreshes(plpy, GD, rows, started_at=statement["t"], clock=clock)


def _record_refreshes(plpy, GD, rows: list[dict], *, started_at: str,
                      clock: timing.Clock | None = None) -> None:
    for r in rows:
        if r["release_id"] in GD.get(BUILDING_KEY, ()):
            continue            # being created: publish.create_release checks and records it
        stats = take_run(GD, r["release_id"])
        try:
            # a run that read the state before another refresh committed: run again or refused
            if not refreshing.run_again_after_lock(plpy, r, stats):
                with refreshing.refused_if_refreshed_meanwhile(plpy, r):
                    record(plpy, r["release_id"], stats, method=method_named(r["method"]))
        except verify.VerificationFailed as exc:
            if r["release_id"] not in GD.get(REFRESHING_KEY, set()):
                figures = clock.figures() if clock is not None else {"seconds": (stats or {}).get("seconds")}
                refreshing.record_failure(plpy, r, started_at, figures["seconds"] or 0.0, exc,
                                          phases=figures.get("phases"))
            raise
        if clock is not None:
            record_timing(plpy, r["release_id"], clock.figures())


def method_named(method: str) -> ReleaseMethod | None:
    """The registered method of a release (``anon.releases.method``), or None (unknown)."""
    return REGISTRY.get(method)


@sql_entry
def refresh(plpy, name: str, GD=None) -> dict:
    """Re-run a release from current data. A method whose release is not a single materialized
    view defines ``refresh_release(plpy, GD, release, rebuild)`` in its db module; otherwise the view is
    rebuilt beside the old one and swapped in (refreshing.py). A failure is recorded in
    anon.refresh_history / last_error and re-raised; the old release stays."""
    return refresh_row(plpy, GD, find(plpy, name, genuine=False),    # checked under the lock
                       started=timing.entry_started())


def refresh_row(plpy, GD, release: dict, *, started: float | None = None) -> dict:
    method = method_named(release["method"])
    # a REFRESH run by the rebuild reaches record_refresh: refreshing.refresh records its failure
    inside = GD.setdefault(REFRESHING_KEY, set()) if GD is not None else set()
    inside.add(release["release_id"])
    try:
        return refreshing.refresh(plpy, GD, release, method, started=started)
    finally:
        inside.discard(release["release_id"])


@sql_entry
def refresh_all(plpy, GD=None) -> list[tuple]:
    """anon.refresh_all(): every release in dependency order; see refreshing.refresh_all."""
    return refreshing.refresh_all(
        plpy, lambda release, started: refresh_row(plpy, GD, release, started=started))


@sql_entry
def drop_release(plpy, name: str, if_exists: bool) -> bool:
    try:
        release = find(plpy, name, genuine=False)   # a stale release is dropped too (its row only)
    except UndefinedObject:
        if if_exists:
            return False
        raise
    drop(plpy, release)
    return True
