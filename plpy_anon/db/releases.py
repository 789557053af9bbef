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

from plpy_anon.core.errors import AnonError, DuplicateObject, InvalidParameter, UndefinedObject
from plpy_anon.db import grants, refreshing, risk, verify
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


def find(plpy, name: str, *, genuine: bool = True) -> dict:
    """The catalog row of a release named ``name`` or ``schema.name`` (quoted parts allowed).
    ``genuine`` (default): refuse a stale release (``check_genuine``) -- callers then read its
    relations by name; drop and refresh pass False (drop removes a stale row, refresh checks
    under the release's lock and records the failure)."""
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
    if genuine:
        check_genuine(plpy, rows[0])
    return rows[0]


# ---------------------------------------------------------------------------- genuine releases
#
# A release is a catalog row naming relations (schema, name): names alone prove nothing. A
# schema dropped outside plpy_anon leaves its release rows behind, and whoever creates a schema
# of that name next would own relations carrying the releases' names -- which a refresh rebuilds
# from their own query (pg_get_viewdef) with the refresher's rights, and a verification reads
# with the extension owner's. So every path that acts on a release's relations first checks that
# they are the ones plpy_anon made: the schema has the OID recorded when the release was created
# (anon.releases.schema_oid), and each relation is owned by the role that created the release
# (anon.releases.release_owner; plpy_anon creates every relation of a release as that role and a
# refresh keeps the owner). Releases made by different roles in one schema are each checked
# against their own creator.


class StaleRelease(AnonError):
    """A catalog row whose schema or relations were dropped or re-created outside plpy_anon
    (object_not_in_prerequisite_state)."""

    sqlstate = "55000"


GENUINE = """
SELECT n.oid IS NOT NULL AS schema_exists, n.oid IS NOT DISTINCT FROM r.schema_oid AS schema_ours,
       ARRAY(SELECT pg_catalog.format('%s (owned by %s)', c.relname, pg_catalog.pg_get_userbyid(c.relowner))
             FROM pg_catalog.pg_class c
             WHERE c.relnamespace = n.oid AND c.relname::text = ANY($2) AND c.relowner <> r.release_owner
             ORDER BY c.relname) AS impostors,
       pg_catalog.pg_get_userbyid(r.release_owner) AS owner
FROM anon.releases r LEFT JOIN pg_catalog.pg_namespace n ON n.nspname = r.release_schema
WHERE r.release_id = $1"""


def stale_reason(plpy, release: dict) -> tuple[str, str] | None:
    """Why ``release``'s relations are not plpy_anon's (message, detail), or None if they are."""
    rows = run(plpy, GENUINE, ["int4", "text[]"], [release["release_id"], owned_relations(plpy, release)])
    if not rows:
        return None              # the row is gone: callers report that themselves
    row, q = rows[0], f"{release['release_schema']}.{release['release_name']}"
    schema = release["release_schema"]
    if not row["schema_exists"]:
        what = f'schema "{schema}" was dropped'
        detail = "The release's relations went with it; only its catalog row is left."
    elif not row["schema_ours"]:
        what = f'schema "{schema}" was dropped and re-created'
        detail = (f'The schema now named "{schema}" is not the one the release was created in: '
                  "plpy_anon neither reads nor changes anything in it on the release's behalf.")
    elif row["impostors"]:
        what = "relations were dropped and re-created"
        detail = (f"Relations carrying its names are not owned by {row['owner']}, the role that "
                  f"created the release: {', '.join(row['impostors'])}.")
    elif changed := changed_definitions(plpy, release["release_id"]):
        what = "relations were changed"
        detail = (f"The definitions of {', '.join(changed)} are not the ones plpy_anon built "
                  "(CREATE OR REPLACE, or dropped and re-created by their owner): plpy_anon runs "
                  "no query of theirs.")
    else:
        return None
    return f"release {q}'s {what} outside plpy_anon; drop the release with anon.drop_release", detail


# md5 of each relation's definition as plpy_anon built it: a rebuild runs the storage view's own
# query (pg_get_viewdef) and verification reads the release's views, possibly as the extension's
# owner (the event trigger), so a definition changed since is never run on the release's behalf.
# The definition is the view's stored query tree (pg_rewrite.ev_action), which names relations
# and columns by OID and number: renaming the source or its columns leaves it as it was (the
# method then says which column is gone); CREATE OR REPLACE or drop-and-re-create changes it.
DEFINITIONS = """
SELECT coalesce(pg_catalog.jsonb_object_agg(c.relname::text, pg_catalog.md5(w.ev_action::text)),
                '{}'::jsonb) AS defs
FROM anon.releases r
JOIN pg_catalog.pg_class c ON c.relnamespace = r.schema_oid AND c.relowner = r.release_owner
JOIN pg_catalog.pg_rewrite w ON w.ev_class = c.oid AND w.rulename = '_RETURN'
WHERE r.release_id = $1 AND c.relname::text = ANY($2) AND c.relkind IN ('m', 'v')"""


def current_definitions(plpy, release_id: int, names: list[str]) -> dict:
    return jsonb(run(plpy, DEFINITIONS, ["int4", "text[]"], [release_id, names])[0]["defs"])


def changed_definitions(plpy, release_id: int) -> list[str]:
    """Names of the release's relations whose definition is not the one plpy_anon recorded."""
    row = run(plpy, "SELECT * FROM anon.releases WHERE release_id = $1", ["int4"], [release_id])
    if not row or row[0]["definitions"] is None:
        return []
    recorded = jsonb(row[0]["definitions"])
    current = current_definitions(plpy, release_id, list(recorded))
    # a relation that is gone is not "changed": callers report missing relations themselves
    return sorted(n for n, digest in recorded.items() if n in current and current[n] != digest)


def store_definitions(plpy, release_id: int) -> None:
    """Record the definitions of the relations plpy_anon just built (create, rebuild)."""
    release = by_id(plpy, release_id)
    defs = current_definitions(plpy, release_id, owned_relations(plpy, release))
    run(plpy, "UPDATE anon.releases SET definitions = $2 WHERE release_id = $1",
        ["int4", "jsonb"], [release_id, json.dumps(defs)])


def check_genuine(plpy, release: dict) -> None:
    """Raise StaleRelease (55000) unless ``release``'s schema and relations are plpy_anon's own."""
    reason = stale_reason(plpy, release)
    if reason is not None:
        q = qualified_name(plpy, release)
        raise StaleRelease(
            reason[0], detail=reason[1],
            hint=f"Drop the release with SELECT anon.drop_release({plpy.quote_literal(q)}) (it removes the "
                 "catalog row and leaves objects plpy_anon did not make alone) and create it again.")


GENUINE_RELATIONS = """
SELECT c.relname::text AS name, c.relkind::text AS relkind FROM anon.releases r
JOIN pg_catalog.pg_namespace n ON n.nspname = r.release_schema AND n.oid = r.schema_oid
JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relowner = r.release_owner
WHERE r.release_id = $1 AND c.relname::text = ANY($2)"""


def genuine_relations(plpy, release: dict) -> list[tuple[str, str]]:
    """(name, relkind) of the release's relations that exist and are plpy_anon's (in the schema
    the release was created in, owned by its creator), in ``owned_relations`` order (dependents
    first). Empty for a release whose schema was dropped or re-created."""
    names = owned_relations(plpy, release)
    found = {r["name"]: r["relkind"] for r in run(plpy, GENUINE_RELATIONS, ["int4", "text[]"],
                                                   [release["release_id"], names])}
    return [(n, found[n]) for n in names if n in found]


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


def ensure_schema(plpy, schema: str) -> int:
    """Create the release schema, or check that an existing one is plpy_anon's own and holds
    releases only (grants.ensure_release_schema: clear errors otherwise); returns its OID."""
    return grants.ensure_release_schema(plpy, schema)


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
    schema_oid = ensure_schema(plpy, release_schema)
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
    # the schema's OID and the creating role: what tells this release's relations from anything
    # else that may carry their names later (see check_genuine)
    row = run(plpy, """
        INSERT INTO anon.releases (release_schema, release_name, source, method, parameters,
                                   schema_oid, release_owner)
        VALUES ($1, $2, $3::oid::regclass, $4, $5, $6,
                (SELECT a.oid FROM pg_catalog.pg_roles a WHERE a.rolname = current_user))
        RETURNING release_id""",
        ["text", "text", "oid", "text", "jsonb", "oid"],
        [release_schema, release_name, source.oid, method, json.dumps(parameters), schema_oid])[0]
    release_id = row["release_id"]
    build(release_id, ident(plpy, release_schema, release_name))
    row = record(plpy, release_id, take_run(GD, release_id), built=True)
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


def record(plpy, release_id: int, run_stats: dict | None, *, built: bool = False) -> dict:
    """Check the release just built from its released rows (verify.py; raises, so the caller's
    transaction rolls back, when it breaks a promise), then write what the build produced and the
    check's figures into the catalog row, store the risk report (risk.store) and return the row. ``built``: plpy_anon itself just
    (re)created the relations (create, build-and-swap): their definitions become the recorded
    ones; otherwise (a plain REFRESH) they must still be the recorded ones."""
    if built:
        store_definitions(plpy, release_id)
    figures = verify.check(plpy, by_id(plpy, release_id), run_stats)
    stats = run_stats or {}
    seconds = stats.get("seconds")
    run(plpy, """
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
    risk.store(plpy, release_id)
    return by_id(plpy, release_id)


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
        JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = r.release_name
                                  AND c.relowner = r.release_owner AND c.relkind = 'm'
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
    return refresh_row(plpy, GD, find(plpy, name, genuine=False))   # checked under the lock


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
    finish (the refresh lock), so a refresh never loses its relations halfway. Only relations
    plpy_anon made are dropped (``genuine_relations``): of a stale release (its schema dropped or
    re-created outside plpy_anon) only the catalog row goes, whatever now carries its names."""
    refreshing.lock_release(plpy, release["release_id"])
    schema = release["release_schema"]
    for rel, kind in genuine_relations(plpy, release):
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
        release = find(plpy, name, genuine=False)   # a stale release is dropped too (its row only)
    except UndefinedObject:
        if if_exists:
            return False
        raise
    drop(plpy, release)
    return True
