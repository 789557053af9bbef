"""Refreshing releases without analysts ever seeing an empty or half-built one, or queueing.

A release that is one materialized view (plus, optionally, plain views of its own over it, listed
in ``parameters.objects``) is refreshed by **build and swap**: the view's own query
(``pg_get_viewdef``) builds a new materialized view beside the old one -- the long part, during
which readers keep reading the old release without waiting -- then, in the same transaction, the
old view is dropped and the new one renamed into its place with the old owner, privileges,
comment and indexes (the release's own views are recreated over it). Readers wait only for that
swap (milliseconds) and then see the new release; PostgreSQL re-resolves the name after the lock
wait, so they never see an error or an empty relation.

* Every snapshot sees the new release: it is built with ``CREATE ... WITH NO DATA`` then
  ``REFRESH``, which writes frozen rows. (``CREATE MATERIALIZED VIEW ... AS`` would stamp them
  with our transaction id: a REPEATABLE READ / SERIALIZABLE reader whose snapshot predates the
  refresh would find the swapped-in release empty.)
* The swap never sits in the lock queue in front of readers: its ACCESS EXCLUSIVE lock is taken
  in attempts of ``plpy_anon.swap_lock_timeout`` (default 200ms; readers arriving meanwhile wait
  at most that long), backing off between attempts, for at most ``plpy_anon.swap_wait`` (default
  60s) in all; then the refresh fails with SQLSTATE 55P03 (lock_not_available), recorded like
  any failure, and the old release stays.

Plain REFRESH MATERIALIZED VIEW would hold an ACCESS EXCLUSIVE lock for the whole rebuild
(readers block for minutes), and ``REFRESH ... CONCURRENTLY`` needs a unique index that a
k-anonymous release (duplicate rows by design) cannot have. When other objects depend on the
release (a DBA's view on top of it), dropping it is impossible, so such a release falls back to
an in-place REFRESH (taking its lock the same bounded way): consistent, but readers wait for the
whole rebuild. A stable release (``refresh_mode`` 'stable') is always refreshed in place: its
relations keep their OIDs, so a pg_dump that listed them before the refresh still finds them;
readers wait for its build too, as they already waited for its check across versions, which
runs after the swap under the same lock.

A method whose release is built otherwise keeps its own ``refresh_release`` (see releases.py);
Break-Merge's calls ``rebuild_view`` (storage view + QIT/ST/merge views).

A failed refresh leaves the old release (the rebuild runs in a subtransaction) and is recorded in
``anon.refresh_history`` and ``anon.releases.last_error`` through a short separate connection to
the same database (an autonomous transaction), so the record survives the rollback the error
causes; then the error is raised as usual. The connection is the session's own user over the
server's Unix socket (the same path pg_cron uses), or ``plpy_anon.loopback_dsn`` if set in the
server's configuration (a session's or role's value is ignored: see settings.py).
"""
from __future__ import annotations

import contextlib
import functools
import graphlib
import json
import re
import time

from plpy_anon.core.errors import AnonError, InvalidParameter, SerializationFailure, UndefinedObject
from plpy_anon.db import extschema, grants, out_of_core, publish, republication, timing
from plpy_anon.db.guards import guard_source, lock_source
from plpy_anon.db.method import ReleaseMethod
from plpy_anon.db.release_rows import (  # noqa: F401 -- lock_release, temp_name: used by callers
    LOCK_CLASS,
    SUFFIX,
    by_id,
    check_genuine,
    lock_release,
    owned_relations,
    record_timing,
    relation_exists,
    storage_of,
    take_run,
    temp_name,
)
from plpy_anon.db.settings import may_read_all_settings, server_setting
from plpy_anon.db.sqltext import ident, jsonb, progress, run
from plpy_anon.db.swap_locks import (  # noqa: F401 -- LockNotAvailable: raised through here
    LockNotAvailable,
    SwapWaits,
    lock_for_swap,
    qualified_text,
)

# ---------------------------------------------------------------------------- one release

def refresh(plpy, GD, release: dict, method: ReleaseMethod | None, *,
            started: float | None = None) -> dict:
    """Rebuild ``release`` (``method.refresh_release(plpy, GD, release)`` for methods with their
    own refresh, else build-and-swap); on failure record it autonomously and re-raise. The
    recorded seconds (catalog and history alike) are the wall clock of the whole call from
    ``started`` (time.monotonic(); default now), lock waits included, its phases in
    ``metrics.timing``."""
    with timing.call(started) as clock:
        return _refresh(plpy, GD, release, method, clock)


def _refresh(plpy, GD, release: dict, method: ReleaseMethod | None, clock: timing.Clock) -> dict:
    started_at = run(plpy, "SELECT pg_catalog.clock_timestamp() - pg_catalog.make_interval(secs => $1) AS t",
                     ["float8"], [clock.figures()["seconds"]])[0]["t"]
    with timing.phase("locks"):
        lock_source(plpy, release["source"])     # the one lock order: source, release, its relations
        lock_release(plpy, release["release_id"])
    # re-read after the wait: a drop or a replace => true that committed meanwhile
    current = run(plpy, "SELECT * FROM anon.releases WHERE release_id = $1", ["int4"],
                  [release["release_id"]])
    if not current:
        raise UndefinedObject(
            f"release {qualified_text(release)} was dropped or replaced while this refresh "
            "waited for it",
            hint="Nothing was refreshed. If it was replaced, the new release is already current; "
                 "see SELECT * FROM anon.release_status().")
    release = current[0]
    progress(plpy, f"refreshing {qualified_text(release)} ({release['method']})")
    try:
        with plpy.subtransaction():
            # before anything reads the release's relations by name: they must be plpy_anon's
            # (schema not re-created, relations owned by the release's creator), or a stale row
            # would rebuild someone else's view with our rights
            check_genuine(plpy, release)
            # and before anything plans a query on its source (its indexes' code runs then)
            source = run(plpy, "SELECT $1::pg_catalog.regclass::pg_catalog.oid AS oid", ["text"],
                         [release["source"]])[0]["oid"]
            guard_source(plpy, source)
            if method is not None and method.refresh_release is not None:
                # the default rebuild handed in, for the method to wrap (methods do not import
                # this module: they stand below it)
                method.refresh_release(plpy, GD, release, functools.partial(
                    rebuild_view, plpy, GD, release, method=method))
            else:
                rebuild_view(plpy, GD, release, method=method)
            with timing.phase("grants"):
                grants.grant_release(plpy, by_id(plpy, release["release_id"]))
    except Exception as exc:  # noqa: BLE001 -- any failure is recorded, then re-raised
        figures = clock.figures()
        record_failure(plpy, release, started_at, figures["seconds"], exc, phases=figures["phases"])
        raise as_anon_error(exc) from None
    figures = clock.figures()
    row = record_timing(plpy, release["release_id"], figures)
    seconds = row["refresh_seconds"]
    across = (jsonb(row["verification"]) or {}).get("across_versions") if row["verification"] else None
    run(plpy, """
        INSERT INTO anon.refresh_history (release_id, release_name, started_at, seconds, succeeded,
                                          row_count, achieved_k, across_versions, phases)
        VALUES ($1, $2, $3::timestamptz, $4, true, $5, $6, $7, $8)""",
        ["int4", "text", "text", "float8", "int8", "int4", "jsonb", "jsonb"],
        [row["release_id"], qualified_text(row), started_at, seconds, row["row_count"], row["achieved_k"],
         json.dumps(across) if across is not None else None, json.dumps(figures["phases"])])
    progress(plpy, f"done: {row['row_count']} rows, k = {row['achieved_k']}, {seconds:.2f} s")
    return row


def rebuild_view(plpy, GD, release: dict, *, method: ReleaseMethod | None,
                 analyze: bool = False) -> None:
    """Build the release's materialized view beside the old one and swap it in; the release's own
    views over it (``parameters.objects``, e.g. Break-Merge's QIT/ST/merge views) are recreated
    on the new view with their owner, privileges and comment. ``analyze``: ANALYZE the new view
    before the swap (the views' plans need statistics)."""
    schema, name = release["release_schema"], storage_of(release)
    # The new view is built from the old one's query (pg_get_viewdef), run with our rights: only
    # ever the query of a view plpy_anon made (schema OID and owner as recorded at creation).
    check_genuine(plpy, release)
    waits = SwapWaits.from_settings(plpy)          # bad settings fail before the long build
    rel = view_oid(plpy, schema, name)
    views = owned_views(plpy, release)
    missing = sorted(set(owned_relations(plpy, release)) - {name} - {v for v, _ in views})
    if missing:          # e.g. a compact release's view, dropped outside plpy_anon
        raise UndefinedObject(
            f"relation {', '.join(missing)} of release {qualified_text(release)} no longer exists",
            hint="They were dropped outside plpy_anon; remove the catalog entry with anon.drop_release "
                 "and create the release again.")
    source = run(plpy, "SELECT $1::pg_catalog.regclass::pg_catalog.oid AS oid", ["text"], [release["source"]])[0]["oid"]
    write = out_of_core.write_settings(plpy, method, release["release_id"])
    # a stable release keeps its relations (OIDs, grants, dependent views): a pg_dump under way
    # reads the definitions of the relations it listed, and a swap would have dropped them
    stable = republication.is_stable(jsonb(release["parameters"]) or {})
    if stable or blocks_swap(plpy, rel, [oid for _, oid in views]):
        progress(plpy, "a stable release keeps its relations: refreshing in place (readers wait)"
                 if stable else "other objects depend on the release: refreshing in place (readers wait)")
        lock_for_swap(plpy, release, [("MATERIALIZED VIEW", schema, name)], waits)
        # REFRESH (not CREATE ... AS) writes frozen rows: a reader whose snapshot predates the
        # refresh sees the new release, never an empty one. The event trigger records the stash.
        with publish.temp_file_limit_explained(plpy, source, write), timing.phase("build"):
            plpy.execute(f"REFRESH MATERIALIZED VIEW {ident(plpy, schema, name)}")
        if analyze:
            plpy.execute(f"ANALYZE {ident(plpy, schema, name)}")
        return
    saved = saved_properties(plpy, rel)
    saved_views = [(view, saved_properties(plpy, oid)) for view, oid in views]
    temp = temp_name(name, release["release_id"])
    if relation_exists(plpy, schema, temp):   # left by a crash? it is ours: replace it
        plpy.execute(f"DROP MATERIALIZED VIEW {ident(plpy, schema, temp)}")
    progress(plpy, "building the new release beside the old one (readers keep the old)")
    with publish.temp_file_limit_explained(plpy, source, write), timing.phase("build"):
        build_frozen(plpy, ident(plpy, schema, temp), saved["query"], release["release_owner"])
        if analyze:
            plpy.execute(f"ANALYZE {ident(plpy, schema, temp)}")
    stats = take_run(GD, release["release_id"])
    progress(plpy, "swapping in the new release")
    with timing.phase("swap"):
        lock_for_swap(plpy, release, [("VIEW", schema, v) for v, _ in views] + [("MATERIALIZED VIEW", schema, name)],
                      waits)
        for view, _ in views:                               # dependents first (parameters.objects)
            plpy.execute(f"DROP VIEW {ident(plpy, schema, view)}")
        plpy.execute(f"DROP MATERIALIZED VIEW {ident(plpy, schema, name)}")
        plpy.execute(f"ALTER MATERIALIZED VIEW {ident(plpy, schema, temp)} RENAME TO {plpy.quote_ident(name)}")
        restore_properties(plpy, ident(plpy, schema, name), saved)
        for view, view_saved in reversed(saved_views):      # what they read first
            plpy.execute(f"CREATE VIEW {ident(plpy, schema, view)} AS {view_saved['query']}")
            restore_properties(plpy, ident(plpy, schema, view), view_saved, kind="VIEW")
    with publish.temp_file_limit_explained(plpy, source):
        publish.record(plpy, release["release_id"], stats, built=True, method=method)


def build_frozen(plpy, qualified: str, query: str, owner: str) -> None:
    """Create a materialized view whose rows every snapshot sees, its query run by its owner.

    ``CREATE MATERIALIZED VIEW ... AS`` writes rows stamped with our transaction id: a REPEATABLE
    READ or SERIALIZABLE reader whose snapshot is older finds the swapped-in relation EMPTY. A
    non-concurrent ``REFRESH`` writes its new heap with frozen tuples (TABLE_INSERT_FROZEN),
    visible to every snapshot, as a plain REFRESH of a release would be. Nobody can read the new
    view before we commit, so the REFRESH waits for no one. The event trigger ignores it (the view
    is not in the catalog): the run's statistics stay stashed for ``releases.record``.

    ``query`` is the release's own (pg_get_viewdef), which its owner may have redefined: it is
    created WITH NO DATA (parsed, never run), given to the release's ``owner`` and filled by
    REFRESH, which PostgreSQL runs as the owner in a security-restricted operation: the owner's
    code in it can never run with the refresher's rights."""
    plpy.execute(f"CREATE MATERIALIZED VIEW {qualified} AS {query} WITH NO DATA")
    # regrole's output is the role's name, quoted where it needs to be
    row = run(plpy, "SELECT $1::pg_catalog.regrole::text AS name, $1::pg_catalog.regrole::pg_catalog.oid "
                    "<> (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user) AS other",
              ["text"], [owner])[0]
    if row["other"]:
        plpy.execute(f"ALTER MATERIALIZED VIEW {qualified} OWNER TO {extschema.user(row['name'])}")
    plpy.execute(f"REFRESH MATERIALIZED VIEW {qualified}")


def owned_views(plpy, release: dict) -> list[tuple[str, int]]:
    """The plain views a release owns over its materialized view (``parameters.objects``, and a
    compact release's own view, in ``owned_relations`` order: dependents first), with their
    OIDs; relations that are not views are not swapped."""
    storage = storage_of(release)
    objects = [o for o in owned_relations(plpy, release) if o != storage]
    if not objects:
        return []
    rows = run(plpy, """
        SELECT c.relname::text AS name, c.oid FROM pg_catalog.pg_class c
        JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = $1 AND c.relname = ANY($2) AND c.relkind = 'v'""",
        ["text", "text[]"], [release["release_schema"], list(objects)])
    oids = {r["name"]: r["oid"] for r in rows}
    return [(o, oids[o]) for o in objects if o in oids]


def view_oid(plpy, schema: str, name: str) -> int:
    rows = run(plpy, """
        SELECT c.oid, c.relkind::text AS relkind FROM pg_catalog.pg_class c
        JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = $1 AND c.relname = $2""", ["text", "text"], [schema, name])
    if not rows:
        raise UndefinedObject(
            f"the relation of release {schema}.{name} no longer exists",
            hint="It was dropped outside plpy_anon (perhaps by DROP ... CASCADE on its source); "
                 "remove the catalog entry with anon.drop_release and create the release again.")
    if rows[0]["relkind"] != "m":
        raise InvalidParameter(f"release {schema}.{name} is not a materialized view",
                               hint="Its method must define refresh_release; recreate it with replace => true.")
    return rows[0]["oid"]


def blocks_swap(plpy, rel: int, own_views: list[int] = ()) -> bool:
    """True when dropping the view (and the release's own views over it, which the swap
    recreates) is impossible or unsafe: other relations' rules depend on them, or a catalog row
    names one as a source (regclass columns hold the OID a swap would change)."""
    rows = run(plpy, """
        WITH swapped AS (SELECT pg_catalog.unnest(pg_catalog.array_append($2, $1)) AS oid)
        SELECT EXISTS (
            SELECT 1 FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_rewrite w ON w.oid = d.objid
            WHERE d.classid = 'pg_catalog.pg_rewrite'::regclass AND d.refobjid IN (SELECT oid FROM swapped)
              AND w.ev_class NOT IN (SELECT oid FROM swapped))
        OR EXISTS (SELECT 1 FROM anon.releases WHERE source::oid IN (SELECT oid FROM swapped))
        OR EXISTS (SELECT 1 FROM anon.column_roles WHERE source::oid IN (SELECT oid FROM swapped))
        OR EXISTS (SELECT 1 FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_depend d
                   ON d.refclassid = 'pg_catalog.pg_extension'::regclass AND d.refobjid = e.oid
                   WHERE d.classid = 'pg_catalog.pg_class'::regclass
                     AND d.objid IN (SELECT oid FROM swapped)) AS blocked""",
        ["oid", "oid[]"], [rel, list(own_views)])
    return rows[0]["blocked"]


def saved_properties(plpy, rel: int) -> dict:
    """What a swap must carry over: query, owner, privileges, comment, index definitions."""
    row = run(plpy, """
        SELECT pg_catalog.pg_get_viewdef(c.oid) AS query,
               pg_catalog.pg_get_userbyid(c.relowner) AS owner,
               pg_catalog.obj_description(c.oid, 'pg_class') AS comment,
               ARRAY(SELECT pg_catalog.format('GRANT %s ON %%s TO %s%s', a.privilege_type,
                                    CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                                         ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END,
                                    CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END)
                     FROM pg_catalog.aclexplode(c.relacl) a WHERE a.grantee <> c.relowner) AS grants,
               ARRAY(SELECT pg_catalog.pg_get_indexdef(i.indexrelid) FROM pg_catalog.pg_index i
                     WHERE i.indrelid = c.oid ORDER BY i.indexrelid) AS indexes
        FROM pg_catalog.pg_class c WHERE c.oid = $1""", ["oid"], [rel])[0]
    # SQL the catalog prints is complete (the extension's objects already named in its schema, a
    # user's as they are): user text, never rewritten (db/extschema.py)
    user = extschema.user
    return {"query": user(row["query"].rstrip().rstrip(";")), "owner": row["owner"],
            "comment": row["comment"], "grants": [user(g) for g in row["grants"]],
            "indexes": [user(i) for i in row["indexes"]]}


def restore_properties(plpy, qualified: str, saved: dict, kind: str = "MATERIALIZED VIEW") -> None:
    current = run(plpy, "SELECT current_user::text AS u")[0]["u"]
    if saved["owner"] != current:
        plpy.execute(f"ALTER {kind} {qualified} OWNER TO {plpy.quote_ident(saved['owner'])}")
    for grant in saved["grants"]:
        plpy.execute(grant.replace("%s", qualified, 1))
    if saved["comment"] is not None:
        plpy.execute(f"COMMENT ON {kind} {qualified} IS {plpy.quote_literal(saved['comment'])}")
    for index in saved["indexes"]:       # the old indexes went with the old view; same names, same table name
        plpy.execute(index)


# ---------------------------------------------------------------------------- failures

PREFIXES = re.compile(r"^(?:(?:spiexceptions\.\w+|plpy\.\w+|\w*Error): )+")


def clean_message(text: str) -> str:
    """An error's own message: without the ``spiexceptions.X: plpy.Error: `` prefixes PL/Python
    stacks up each time an error crosses a PL/Python function boundary."""
    return PREFIXES.sub("", text.strip())


def error_parts(exc: BaseException) -> tuple[str, str | None]:
    if isinstance(exc, AnonError):
        return clean_message(exc.message), exc.sqlstate
    return clean_message(str(exc)) or type(exc).__name__, getattr(exc, "sqlstate", None)


def as_anon_error(exc: BaseException) -> BaseException:
    """The refresh's error as an AnonError carrying its original SQLSTATE, hint and detail, so
    sql_entry reports it with a clean message (not a PL/Python traceback label)."""
    if isinstance(exc, AnonError):
        exc.message = clean_message(exc.message)
        return exc
    if not hasattr(exc, "sqlstate"):
        return exc
    message, sqlstate = error_parts(exc)
    # PL/Python's SPIError keeps the original error's fields in spidata: (code, detail, hint, ...)
    spidata = getattr(exc, "spidata", None) or (None, None, None)
    error = AnonError(message, hint=spidata[2], detail=spidata[1])
    error.sqlstate = sqlstate or "P0001"
    return error


def record_failure(plpy, release: dict, started_at, seconds: float, exc: BaseException, *,
                   phases: dict | None = None) -> None:
    """Write the failure through a separate connection (it must outlive our rollback)."""
    message, sqlstate = error_parts(exc)
    try:
        write_autonomously(plpy, release, started_at, seconds, message, sqlstate, phases)
    except Exception as write_error:  # noqa: BLE001 -- never hide the refresh's own error
        plpy.warning(f"plpy_anon: the failed refresh of {qualified_text(release)} could not be "
                     f"recorded: {str(write_error).strip()}",
                     hint="Set plpy_anon.loopback_dsn to a connection string this server accepts "
                          "from itself (the same kind pg_cron's cron.host needs).")
    progress(plpy, f"failed: {message}")


def loopback_conninfo(plpy) -> dict:
    row = run(plpy, """
        SELECT pg_catalog.current_database()::text AS dbname, session_user::text AS user,
               pg_catalog.current_setting('port') AS port""")[0]
    dsn = server_setting(plpy, "plpy_anon.loopback_dsn")   # never a session's or role's value
    if dsn:
        return {"conninfo": dsn}
    host = socket_directory(plpy) or "localhost"
    return {"conninfo": "", "host": host, "port": row["port"], "dbname": row["dbname"], "user": row["user"]}


def socket_directory(plpy) -> str | None:
    """The server's first Unix socket directory. Read from postmaster.pid in the data directory
    (the backend's working directory; line 5), where the postmaster writes it: the setting
    unix_socket_directories needs pg_read_all_settings, which would show a custodian every setting
    of the server (primary_conninfo, archive_command, ...)."""
    try:
        with open("postmaster.pid", encoding="utf-8") as pid_file:
            lines = pid_file.read().splitlines()
        if len(lines) > 4 and lines[4].strip():
            return lines[4].strip()
    except OSError:
        pass
    if may_read_all_settings(plpy):
        value = run(plpy, "SELECT pg_catalog.current_setting('unix_socket_directories') AS d")[0]["d"]
        return value.split(",")[0].strip() or None
    return None


def write_autonomously(plpy, release, started_at, seconds, message, sqlstate, phases=None) -> None:
    import psycopg  # the venv's; imported only when a refresh fails

    params = loopback_conninfo(plpy)
    conninfo = params.pop("conninfo")
    with psycopg.connect(conninfo, autocommit=True, connect_timeout=5,
                         application_name="plpy_anon refresh log",
                         # the database's owner may set (ALTER DATABASE ... SET) a search_path
                         # whose types or functions would shadow pg_catalog's here, or a role
                         options="-c lock_timeout=2s -c statement_timeout=10s "
                                 "-c search_path=pg_catalog,pg_temp -c role=none "
                                 "-c default_transaction_read_only=off", **params) as conn:
        conn.execute(extschema.sql("""
            INSERT INTO anon.refresh_history (release_id, release_name, started_at, seconds,
                                              succeeded, error, sqlstate, phases)
            VALUES (%s, %s, %s::pg_catalog.timestamptz, %s, false, %s, %s, %s::pg_catalog.jsonb)"""),
            extschema.unmarked((release["release_id"], qualified_text(release), started_at, seconds,
                                message, sqlstate, json.dumps(phases) if phases is not None else None)))
        try:
            # lock_timeout: if our own transaction holds the row (it updated it earlier), waiting
            # would deadlock invisibly; the history row above is then the record.
            conn.execute(extschema.sql("UPDATE anon.releases SET last_error = %s, last_error_at = %s::pg_catalog.timestamptz "
                                       "WHERE release_id = %s"),
                         extschema.unmarked((message, started_at, release["release_id"])))
        except psycopg.errors.LockNotAvailable:
            pass


# ---------------------------------------------------------------------------- all releases

def release_graph(plpy) -> tuple[dict, dict]:
    """Every release by id, and for each the ids of the releases it reads: its source is one of
    their relations, or its query (a view's rewrite rule) reads one."""
    rows = run(plpy, "SELECT * FROM anon.releases ORDER BY release_id")
    edges = run(plpy, """
        SELECT DISTINCT a.release_id AS dependent, b.release_id AS dependency
        FROM anon.releases a
        JOIN anon.releases b ON b.release_id <> a.release_id
        JOIN pg_catalog.pg_namespace bn ON bn.nspname = b.release_schema
        JOIN pg_catalog.pg_class bc ON bc.relnamespace = bn.oid AND bc.relname = b.release_name
        LEFT JOIN pg_catalog.pg_namespace an ON an.nspname = a.release_schema
        LEFT JOIN pg_catalog.pg_class ac ON ac.relnamespace = an.oid AND ac.relname = a.release_name
        WHERE a.source::oid = bc.oid
           OR EXISTS (SELECT 1 FROM pg_catalog.pg_rewrite w JOIN pg_catalog.pg_depend d
                      ON d.classid = 'pg_catalog.pg_rewrite'::regclass AND d.objid = w.oid
                      WHERE w.ev_class = ac.oid AND d.refobjid = bc.oid)""")
    deps: dict[int, set[int]] = {r["release_id"]: set() for r in rows}
    for e in edges:
        deps[e["dependent"]].add(e["dependency"])
    return {r["release_id"]: r for r in rows}, deps


def dependency_order(by_id: dict, deps: dict) -> list[dict]:
    try:
        order = list(graphlib.TopologicalSorter(deps).static_order())
    except graphlib.CycleError as cycle:
        raise InvalidParameter(f"releases depend on each other in a cycle: {cycle.args[1]}",
                               hint="Drop one of them; a release cannot be built from itself.")
    return [by_id[i] for i in order]


#: SQLSTATE of pg_cancel_backend and statement_timeout
QUERY_CANCELED = "57014"


def refresh_all(plpy, refresh_one) -> list[tuple]:
    """Refresh every release in dependency order, each on its own (``refresh_one(release,
    started)``, started = time.monotonic() at its start, so that the seconds it records are the
    ones returned): a failure is recorded, its dependents are skipped, the others go on. Returns
    (release, status, seconds, error) rows."""
    by_id, deps = release_graph(plpy)
    # every source first, in one order (by OID), before any release's lock: one transaction
    # refreshing several releases must not hold one release's lock while it waits for the
    # next one's source, which a drop or replace of that release holds
    sources = run(plpy, """
        SELECT DISTINCT s.source::text AS source, s.source::oid AS oid FROM anon.releases s
        ORDER BY 2""")
    for row in sources:
        lock_source(plpy, row["source"])
    results, failed = [], set()
    for release in dependency_order(by_id, deps):
        name = qualified_text(release)
        if deps[release["release_id"]] & failed:
            failed.add(release["release_id"])
            results.append((name, "skipped", None, "a release it is built from failed to refresh"))
            continue
        t0 = time.monotonic()
        try:
            with plpy.subtransaction():
                refresh_one(release, t0)
        except Exception as exc:
            if error_parts(exc)[1] == QUERY_CANCELED:   # a cancel or timeout stops them all
                raise
            failed.add(release["release_id"])
            message = error_parts(exc)[0]
            plpy.warning(f"plpy_anon: refresh of {name} failed: {message}")
            results.append((name, "failed", time.monotonic() - t0, message))
            continue
        results.append((name, "refreshed", time.monotonic() - t0, None))
    return results


# ---------------------------------------------------------------------------- refreshes at once

def run_again_after_lock(plpy, release: dict, run_stats: dict | None) -> bool:
    """A plain REFRESH MATERIALIZED VIEW takes its snapshot before it waits for the release's
    lock: a stable release's run then read the state and stored versions as they were before a
    refresh holding that lock committed, and its rows must not be checked against them
    (republication.read_before_commit). At READ COMMITTED the REFRESH runs again, a statement
    after the lock whose snapshot sees that commit, checked and recorded by its own event
    trigger: True. At REPEATABLE READ or SERIALIZABLE no statement of the transaction sees the
    commit: refused (40001), to be retried. False: the run read the committed state."""
    release_id = release["release_id"]
    if not republication.read_before_commit(plpy, release_id, run_stats):
        return False
    level = run(plpy, "SELECT pg_catalog.current_setting('transaction_isolation') AS l")[0]["l"]
    # once: the REFRESH run again holds the lock from its start, so it reads the committed state
    if level != "read committed" or release_id in _RUNNING_AGAIN:
        raise refreshed_meanwhile(release, level)
    progress(plpy, f"{qualified_text(release)} was refreshed while this REFRESH waited for it: "
                   "running it again on what that refresh left")
    _RUNNING_AGAIN.add(release_id)
    try:
        plpy.execute(f"REFRESH MATERIALIZED VIEW "
                     f"{ident(plpy, release['release_schema'], storage_of(release))}")
    finally:
        _RUNNING_AGAIN.discard(release_id)
    return True


#: the releases whose REFRESH this backend is running again
_RUNNING_AGAIN: set[int] = set()


def refreshed_meanwhile(release: dict, level: str) -> SerializationFailure:
    return SerializationFailure(
        f"release {qualified_text(release)} was refreshed by another transaction after this "
        f"one's snapshot was taken ({level}): this refresh read the state of its people as it "
        "was before, and was refused; nothing was published",
        hint="Run the refresh again in a new transaction: it reads the state the other refresh "
             "left. At READ COMMITTED a refresh that waits for another runs on what it left.")


@contextlib.contextmanager
def refused_if_refreshed_meanwhile(plpy, release: dict):
    """The record of a stable release's refresh: a write that meets another transaction's newer
    state or version (a serialization failure: REPEATABLE READ or SERIALIZABLE, the other one
    committed after this one's snapshot) is refused with what happened and how to retry."""
    try:
        yield
    except SerializationFailure:
        raise
    except Exception as exc:
        if getattr(exc, "sqlstate", None) != SerializationFailure.sqlstate \
                or not republication.is_stable(jsonb(release["parameters"]) or {}):
            raise
        level = run(plpy, "SELECT pg_catalog.current_setting('transaction_isolation') AS l")[0]["l"]
        raise refreshed_meanwhile(release, level) from None
