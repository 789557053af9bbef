"""The release machinery shared by every method: create, find, refresh, drop, record.

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

import importlib
import json
import time
from collections.abc import Callable

from plpy_anon.core.errors import DuplicateObject, InvalidParameter, UndefinedObject
from plpy_anon.db import grants, refreshing, verify
from plpy_anon.db.columns import Table
from plpy_anon.db.errors import sql_entry
from plpy_anon.db.sqltext import ident, jsonb, run

RUNS_KEY = "plpy_anon.runs"


def stash_run(GD, release_id: int, *, row_count: int, achieved_k: int | None, metrics: dict,
              started: float, source_rows: int | None = None, suppressed: int = 0) -> None:
    """Called by a method's partitioning function: what this run produced, for record_refresh.

    ``row_count`` is what the catalog shows; the release must hold ``source_rows`` (rows read from
    the source in the build's snapshot, default ``row_count``) minus ``suppressed`` rows, which
    verify.py checks against ``count(*)`` of the released relation."""
    GD.setdefault(RUNS_KEY, {})[release_id] = {
        "row_count": row_count, "achieved_k": achieved_k, "metrics": metrics,
        "seconds": time.monotonic() - started, "started": started,
        "source_rows": row_count if source_rows is None else int(source_rows),
        "suppressed": int(suppressed)}


def take_run(GD, release_id: int) -> dict | None:
    return GD.get(RUNS_KEY, {}).pop(release_id, None)


CATALOG_ROW = "SELECT * FROM anon.releases WHERE release_id = $1"


def by_id(plpy, release_id: int) -> dict:
    rows = run(plpy, CATALOG_ROW, ["int4"], [release_id])
    if not rows:
        raise UndefinedObject(f"release {release_id} is not in anon.releases",
                              hint="Its catalog row was deleted; drop the relation and create the release again.")
    return rows[0]


def find(plpy, name: str) -> dict:
    """The catalog row of a release named ``name`` or ``schema.name`` (quoted parts allowed)."""
    if name is None or not name.strip():
        raise InvalidParameter("a release name is required", hint="See SELECT * FROM anon.releases.")
    parts = run(plpy, "SELECT pg_catalog.parse_ident($1) AS p", ["text"], [name])[0]["p"]
    if len(parts) == 2:
        rows = run(plpy, "SELECT * FROM anon.releases WHERE release_schema = $1 AND release_name = $2",
                   ["text", "text"], parts)
    elif len(parts) == 1:
        rows = run(plpy, "SELECT * FROM anon.releases WHERE release_name = $1", ["text"], parts)
    else:
        rows = []
    if len(rows) > 1:
        where = ", ".join(f"{r['release_schema']}.{r['release_name']}" for r in rows)
        raise InvalidParameter(f'release name "{name}" is ambiguous: {where}',
                               hint="Qualify it with its schema.")
    if not rows:
        raise UndefinedObject(f'release "{name}" does not exist',
                              hint="See SELECT release_schema, release_name FROM anon.releases.")
    return rows[0]


def relation_exists(plpy, schema: str, name: str) -> str | None:
    """relkind of schema.name, or None."""
    rows = run(plpy, """
        SELECT c.relkind::text AS relkind FROM pg_catalog.pg_class c
        JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = $1 AND c.relname = $2""", ["text", "text"], [schema, name])
    return rows[0]["relkind"] if rows else None


def check_name(name: str, what: str) -> None:
    if name is None or name == "":
        raise InvalidParameter(f"{what} must not be empty", hint="Give a name, or leave it NULL for the default.")
    if len(name.encode()) > 63:
        raise InvalidParameter(f'{what} "{name}" is longer than 63 bytes',
                               hint="PostgreSQL would truncate it; choose a shorter name.")


def ensure_schema(plpy, schema: str) -> None:
    """Create the release schema, or check that an existing one is plpy_anon's own and holds
    releases only (grants.ensure_release_schema: clear errors otherwise)."""
    grants.ensure_release_schema(plpy, schema)


NAME_LOCK_CLASS = 0x616E726E   # advisory lock namespace ('anrn'): one creation per release name


def lock_release_name(plpy, schema: str, name: str) -> None:
    """Serialize creations of the same schema.name (two replace => true of one release would
    otherwise both drop the old one and collide on the catalog's unique key)."""
    run(plpy, "SELECT pg_catalog.pg_advisory_xact_lock($1, pg_catalog.hashtext($2))",
        ["int4", "text"], [NAME_LOCK_CLASS, f"{schema}.{name}"])


def create_release(plpy, GD, *, source: Table, method: str, release_schema: str,
                   release_name: str, replace: bool, parameters: dict,
                   build: Callable[[int, str], None]) -> dict:
    """Record a release and build its relations; returns the final catalog row.

    ``build(release_id, qualified_name)`` creates the release's relations (e.g. CREATE MATERIALIZED
    VIEW ... AS SELECT ... anon._<method>_partition(release_id) ...). A release owning more than one
    relation (Break-Merge's _qit/_st_*) lists the others in ``parameters["objects"]``, dependents
    first, so that replacement and drop find them all.
    """
    check_name(release_schema, "release_schema")
    check_name(release_name, "release_name")
    ensure_schema(plpy, release_schema)
    lock_release_name(plpy, release_schema, release_name)
    existing = run(plpy, "SELECT * FROM anon.releases WHERE release_schema = $1 AND release_name = $2",
                   ["text", "text"], [release_schema, release_name])
    if existing and not replace:
        raise DuplicateObject(
            f'release {release_schema}.{release_name} already exists',
            hint="Pass replace => true to rebuild it, or choose another release_name.")
    if existing:
        drop(plpy, existing[0])
    elif relation_exists(plpy, release_schema, release_name):
        raise DuplicateObject(
            f"relation {release_schema}.{release_name} already exists and is not a release",
            hint="Choose another release_name; plpy_anon never replaces objects it did not create.")
    row = run(plpy, """
        INSERT INTO anon.releases (release_schema, release_name, source, method, parameters)
        VALUES ($1, $2, $3::oid::regclass, $4, $5) RETURNING release_id""",
        ["text", "text", "oid", "text", "jsonb"],
        [release_schema, release_name, source.oid, method, json.dumps(parameters)])[0]
    release_id = row["release_id"]
    build(release_id, ident(plpy, release_schema, release_name))
    row = record(plpy, release_id, take_run(GD, release_id))
    grants.grant_release(plpy, row)      # analysts read every new release (anon.grant_analyst)
    return row


def create_view_release(plpy, GD, *, query: Callable[[int], str], **kwargs) -> dict:
    """``create_release`` for the common case: one materialized view whose query is
    ``query(release_id)``. Returns the catalog row."""
    def build(release_id, qualified):
        plpy.execute(f"CREATE MATERIALIZED VIEW {qualified} AS {query(release_id)}")

    return create_release(plpy, GD, build=build, **kwargs)


def qualified_name(plpy, release: dict) -> str:
    """The quoted ``schema.name`` of a release's catalog row (what the SQL entry points return)."""
    return ident(plpy, release["release_schema"], release["release_name"])


def record(plpy, release_id: int, run_stats: dict | None) -> dict:
    """Check the release just built from its released rows (verify.py; raises, so the caller's
    transaction rolls back, when it breaks a promise), then write what the build produced and the
    check's figures into the catalog row and return the row."""
    figures = verify.check(plpy, by_id(plpy, release_id), run_stats)
    stats = run_stats or {}
    seconds = stats.get("seconds")
    rows = run(plpy, """
        UPDATE anon.releases SET
            refreshed_at = pg_catalog.clock_timestamp(),
            refresh_seconds = $2,
            row_count = coalesce($3, row_count),
            achieved_k = coalesce($4, achieved_k),
            metrics = coalesce($5, metrics),
            verified = $6 IS NOT NULL, verification = $6,
            last_error = NULL, last_error_at = NULL
        WHERE release_id = $1 RETURNING *""",
        ["int4", "float8", "int8", "int4", "jsonb", "jsonb"],
        [release_id, seconds, stats.get("row_count"), stats.get("achieved_k"),
         json.dumps(stats["metrics"]) if "metrics" in stats else None,
         json.dumps(figures) if figures is not None else None])
    return rows[0]


REFRESHING_KEY = "plpy_anon.refreshing"


@sql_entry
def record_refresh(plpy, GD, relation_oid: int) -> None:
    """After REFRESH MATERIALIZED VIEW of a release (event trigger): check and record it. A plain
    REFRESH that fails the check is recorded here (autonomously: it outlives the rollback that
    keeps the old rows); inside anon.refresh, refreshing.refresh records it."""
    rows = run(plpy, """
        SELECT r.* FROM anon.releases r
        JOIN pg_catalog.pg_namespace n ON n.nspname = r.release_schema
        JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = r.release_name
        WHERE c.oid = $1""", ["oid"], [relation_oid])
    for r in rows:
        stats = take_run(GD, r["release_id"])
        try:
            record(plpy, r["release_id"], stats)
        except verify.VerificationFailed as exc:
            if r["release_id"] not in GD.get(REFRESHING_KEY, set()):
                started_at = run(plpy, "SELECT pg_catalog.statement_timestamp()::text AS t")[0]["t"]
                refreshing.record_failure(plpy, r, started_at, (stats or {}).get("seconds") or 0.0, exc)
            raise


def method_module(method: str):
    """The db module of a release method (``plpy_anon.db.<method>``), or None."""
    try:
        return importlib.import_module(f"plpy_anon.db.{method}")
    except ModuleNotFoundError:
        return None


@sql_entry
def refresh(plpy, name: str, GD=None) -> dict:
    """Re-run a release from current data. A method whose release is not a single materialized
    view defines ``refresh_release(plpy, GD, release)`` in its db module; otherwise the view is
    rebuilt beside the old one and swapped in (refreshing.py). A failure is recorded in
    anon.refresh_history / last_error and re-raised; the old release stays."""
    return refresh_row(plpy, GD, find(plpy, name))


def refresh_row(plpy, GD, release: dict) -> dict:
    module = method_module(release["method"])
    rebuild = getattr(module, "refresh_release", None) if module is not None else None
    # a REFRESH run by the rebuild reaches record_refresh: refreshing.refresh records its failure
    inside = GD.setdefault(REFRESHING_KEY, set()) if GD is not None else set()
    inside.add(release["release_id"])
    try:
        return refreshing.refresh(plpy, GD, release, rebuild)
    finally:
        inside.discard(release["release_id"])


@sql_entry
def refresh_all(plpy, GD=None) -> list[tuple]:
    """anon.refresh_all(): every release in dependency order; see refreshing.refresh_all."""
    return refreshing.refresh_all(plpy, lambda release: refresh_row(plpy, GD, release))


def drop(plpy, release: dict) -> None:
    """Drop a release's relations and catalog row. Waits for a refresh of the same release to
    finish (the refresh lock), so a refresh never loses its relations halfway."""
    refreshing.lock_release(plpy, release["release_id"])
    schema = release["release_schema"]
    for rel in owned_relations(plpy, release):
        kind = relation_exists(plpy, schema, rel)
        if kind == "m":
            plpy.execute(f"DROP MATERIALIZED VIEW {ident(plpy, schema, rel)}")
        elif kind == "v":
            plpy.execute(f"DROP VIEW {ident(plpy, schema, rel)}")
        elif kind == "r":
            plpy.execute(f"DROP TABLE {ident(plpy, schema, rel)}")
    run(plpy, "DELETE FROM anon.releases WHERE release_id = $1", ["int4"], [release["release_id"]])


def owned_relations(plpy, release: dict) -> list[str]:
    """The relations a release owns: its main relation plus any listed in parameters.objects
    (dependents first, so views over tables drop cleanly)."""
    params = release["parameters"]
    params = jsonb(params)
    return list(params.get("objects", [])) + [release["release_name"]]


@sql_entry
def drop_release(plpy, name: str, if_exists: bool) -> bool:
    try:
        release = find(plpy, name)
    except UndefinedObject:
        if if_exists:
            return False
        raise
    drop(plpy, release)
    return True
