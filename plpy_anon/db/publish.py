"""Creating a release: names checked, old release replaced, catalog row inserted, relations built,
then verified (verify.py) and recorded (``record``) and granted (grants.py), all in the caller's
transaction. What the method modules call; ``releases.py`` above it holds the SQL entry points
that act on existing releases (refresh, drop) and the registry of methods.
"""
from __future__ import annotations

import contextlib
import functools
import json
import re
import secrets
from collections.abc import Callable

from plpy_anon.core.errors import AnonError, DuplicateObject, InvalidParameter
from plpy_anon.db import class_counts, extschema, grants, republication, risk, timing, verify
from plpy_anon.db.guards import Table, lock_source
from plpy_anon.db.method import ReleaseMethod
from plpy_anon.db.release_rows import (
    BUILDING_KEY,
    SECRETS,
    SUFFIX,
    by_id,
    check_genuine,
    create_frozen_view,
    genuine_relations,
    lock_release,
    owner_state,
    record_timing,
    relation_exists,
    store_definitions,
    store_secrets,
    take_run,
)
from plpy_anon.db.sqltext import (
    build_work_mem,
    ident,
    jsonb,
    jsonb_text,
    local_settings,
    progress,
    run,
)
from plpy_anon.db.swap_locks import SwapWaits, lock_for_swap


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


def create_release(plpy, GD, *, source: Table, method: ReleaseMethod, release_schema: str,
                   release_name: str, replace: bool, parameters: dict,
                   build: Callable[[int, str], None],
                   write_settings: Callable[[int], dict] = lambda release_id: {}) -> dict:
    """Record a release and build its relations; returns the final catalog row.

    ``build(release_id, qualified_name)`` creates the release's relations (e.g. CREATE MATERIALIZED
    VIEW ... AS SELECT ... anon._<method>_partition(release_id) ...). A release owning more than one
    relation (Break-Merge's _qit/_st_*) lists the others in ``parameters["objects"]``, dependents
    first, so that replacement and drop find them all. The row's ``refresh_seconds`` is the wall
    clock of the whole call (from its SQL function's start), its phases in ``metrics.timing``.
    ``write_settings(release_id)``: settings the build runs with (out_of_core.write_settings).
    """
    with timing.call(timing.entry_started()) as clock:
        return _create_release(plpy, GD, clock, source=source, method=method,
                               release_schema=release_schema, release_name=release_name,
                               replace=replace, parameters=parameters, build=build,
                               write_settings=write_settings)


def _create_release(plpy, GD, clock: timing.Clock, *, source: Table, method: ReleaseMethod,
                    release_schema: str, release_name: str, replace: bool, parameters: dict,
                    build: Callable[[int, str], None],
                    write_settings: Callable[[int], dict]) -> dict:
    check_name(release_schema, "release_schema")
    check_name(release_name, "release_name")
    if re.search(rf"{SUFFIX}\d+$", release_name):
        # a refresh builds its new relation under <name>__refresh<id> and drops what carries
        # that name as its own leftover: no release may be called so
        raise InvalidParameter(f'release name "{release_name}" ends like the name a refresh gives '
                               f"its new relation ({SUFFIX}<id>)",
                               hint="Choose another release_name.")
    schema_oid = ensure_schema(plpy, release_schema)
    lock_release_name(plpy, release_schema, release_name)
    existing = run(plpy, "SELECT * FROM anon.releases WHERE release_schema = $1 AND release_name = $2",
                   ["text", "text"], [release_schema, release_name])
    if existing and not replace:
        raise DuplicateObject(
            f'release {release_schema}.{release_name} already exists',
            hint="Pass replace => true to rebuild it, or choose another release_name.")
    replaced_versions = 0
    if existing:
        replaced_versions = published_history(plpy, existing[0])
        drop(plpy, existing[0], source_locked=True)
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
        [release_schema, release_name, source.oid, method.name,
         json.dumps({k: v for k, v in parameters.items() if k not in SECRETS}), schema_oid])[0]
    release_id = row["release_id"]
    store_secrets(plpy, release_id, parameters)
    progress(plpy, f"creating {release_schema}.{release_name} ({method.name})")
    building = GD.setdefault(BUILDING_KEY, set()) if GD is not None else set()
    building.add(release_id)
    try:
        with temp_file_limit_explained(plpy, source.oid, write_settings(release_id)), \
                timing.phase("build"):
            build(release_id, ident(plpy, release_schema, release_name))
    finally:
        building.discard(release_id)
    progress(plpy, "checking the released rows")
    with temp_file_limit_explained(plpy, source.oid):      # the check's grouping may spill too
        row = record(plpy, release_id, take_run(GD, release_id), built=True, method=method)
    with timing.phase("grants"):
        grants.grant_release(plpy, row)  # analysts read every new release (anon.grant_analyst)
    row = record_timing(plpy, release_id, clock.figures())
    progress(plpy, f"done: {row['row_count']} rows, k = {row['achieved_k']}, {row['refresh_seconds']:.2f} s")
    if replaced_versions:   # said once the new release stands: a failed replace dropped nothing
        warn_history_replaced(plpy, release_schema, release_name, replaced_versions)
    return row


def published_history(plpy, release: dict) -> int:
    """How many versions a release in the stable mode has published (anon.release_versions: one
    row each, read as its owner's, like ``drop``'s delete of them); 0 for any other release."""
    if not republication.is_stable(jsonb(release["parameters"]) or {}):
        return 0
    with owner_state(plpy):
        return run(plpy, "SELECT pg_catalog.count(*)::int AS n FROM anon.release_versions "
                         "WHERE release_id = $1", ["int4"], [release["release_id"]])[0]["n"]


def warn_history_replaced(plpy, schema: str, name: str, versions: int) -> None:
    """The WARNING of a replace that dropped a stable release's history: replacing is legitimate
    (to forget people), but the old versions stay with whoever kept them."""
    plpy.warning(
        f"replacing {schema}.{name}, a stable release, started a new history: "
        + (f"the {versions} versions it had published stay" if versions != 1
           else "the version it had published stays")
        + " with the analysts who kept them, who can intersect and subtract them with the new "
        "release's versions to narrow or pin people's sensitive values",
        hint="anon.refresh publishes a new version checked against every earlier one, keeping the "
             "history; replace a stable release only to forget people (docs/republication.md, "
             "'Honest limits': a new release is a new history).")


class TempFileLimitExceeded(AnonError):
    """A build that wrote more temporary files than temp_file_limit allows."""

    sqlstate = "53400"


@contextlib.contextmanager
def temp_file_limit_explained(plpy, source_oid: int, settings: dict | None = None):
    """The build's queries run with the build's work_mem (sqltext.build_work_mem: hashes and sorts
    in memory rather than in temporary files); past temp_file_limit, PostgreSQL's own error, with the source's size and what to do; the transaction rolls back,
    so nothing is published and an earlier release stays. ``settings``: others, or a smaller
    work_mem (an out-of-core build's: out_of_core.write_settings)."""
    try:
        with plpy.subtransaction(), local_settings(plpy, **{"work_mem": build_work_mem(plpy),
                                                            **(settings or {})}):
            yield
    except plpy.spiexceptions.ConfigurationLimitExceeded as exc:
        row = run(plpy, """
            SELECT pg_catalog.pg_size_pretty(pg_catalog.pg_total_relation_size($1)) AS size,
                   pg_catalog.current_setting('temp_file_limit') AS lim, $1::pg_catalog.regclass::text AS name""",
            ["oid"], [source_oid])[0]
        raise TempFileLimitExceeded(
            f"building a release of {extschema.user(row['name'])} ({row['size']}) needs more temporary files than "
            f"temp_file_limit = {row['lim']} allows; nothing was published",
            detail=str(exc).strip().removeprefix("spiexceptions.ConfigurationLimitExceeded: "),
            hint="A build writes temporary files where its hashes and sorts outgrow plpy_anon.build_work_mem "
                 "(docs/operations.md, 'Temporary files'): raise that setting, or temp_file_limit for the "
                 "session that builds (SET temp_file_limit, as a superuser).") from None


def create_view_release(plpy, GD, *, query: Callable[[int], str], **kwargs) -> dict:
    """``create_release`` for the common case: one materialized view whose query is
    ``query(release_id)``. Returns the catalog row."""
    def build(release_id, qualified):
        create_frozen_view(plpy, qualified, query(release_id))

    return create_release(plpy, GD, build=build, **kwargs)


def record(plpy, release_id: int, run_stats: dict | None, *, method: ReleaseMethod | None,
           built: bool = False) -> dict:
    """Check the release just built from its released rows (verify.py; raises, so the caller's
    transaction rolls back, when it breaks a promise), then write what the build produced and the
    check's figures into the catalog row, store the risk report (risk.store) and return the row.
    ``built``: plpy_anon itself just (re)created the relations (create, build-and-swap): their
    definitions become the recorded ones; otherwise (a plain REFRESH) they must still be the recorded ones."""
    with timing.phase("verify"):
        figures, report = _checked(plpy, release_id, run_stats, method=method, built=built)
    with timing.phase("record"):
        if not built:   # genuine by one of its digests: record both as they are now (after the
            store_definitions(plpy, release_id)  # check, so a failure's autonomous record finds the row free)
        stats = run_stats or {}
        # the call's duration so far (its caller writes the final one, record_timing); a run
        # outside a create or refresh call: its own seconds
        clock = timing.current()
        seconds = clock.figures()["seconds"] if clock is not None else stats.get("seconds")
        # k as the released rows have it, where the check counted their classes (a version of
        # no rows has none), else as the run made it
        counted = figures is not None and "smallest_class" in figures
        achieved_k = figures["smallest_class"] if counted else stats.get("achieved_k")
        run(plpy, """
            UPDATE anon.releases SET
                refreshed_at = pg_catalog.clock_timestamp(),
                refresh_seconds = $2,
                row_count = coalesce($3, row_count),
                achieved_k = CASE WHEN $7 THEN $4 ELSE coalesce($4, achieved_k) END,
                metrics = coalesce($5, metrics),
                verified = $6 IS NOT NULL, verification = $6,
                last_error = NULL, last_error_at = NULL
            WHERE release_id = $1 RETURNING *""",
            ["int4", "float8", "int8", "int4", "jsonb", "jsonb", "bool"],
            [release_id, seconds, stats.get("row_count"), achieved_k,
             jsonb_text(stats["metrics"]) if "metrics" in stats else None,
             json.dumps(figures) if figures is not None else None, counted])
        risk.store_report(plpy, release_id, report)
        return by_id(plpy, release_id)


def _checked(plpy, release_id: int, run_stats: dict | None, *, method: ReleaseMethod | None,
             built: bool) -> tuple:
    """(verification figures, risk report) of the release just built, from its rows."""
    if built:
        store_definitions(plpy, release_id)
    release = by_id(plpy, release_id)
    # the check and the stored report read the same classes: one pass (class_counts.py), in
    # which the check also counts the sensitive columns the report will ask for
    check_genuine(plpy, release)
    if method is not None and method.check_relations is not None:
        method.check_relations(plpy, release)        # before anything reads them (its views)
    populated = method is not None and verify.is_populated(plpy, release)
    spec = verify.spec_for(plpy, release, None, method) if populated else None
    report_target = risk.stored_target(plpy, release, spec)
    # an out-of-core release is checked within the memory it was built in: its models (entropy,
    # recursive l, t) class by class as the pass reads them (verify.model_of)
    budget = ((run_stats or {}).get("metrics") or {}).get("out_of_core", {}).get("budget_bytes")
    models = None
    if spec is not None and spec.models_asked():
        models = {column: functools.partial(verify.model_of, spec, column)
                  for column in spec.model_columns}
    counter = class_counts.Counter(plpy, release, budget, models)
    if report_target is not None and report_target.qis:
        counter.expect(report_target.relation, report_target.qis, report_target.sensitive,
                       report_target.ordered)
    def checks():
        figures = verify.check(plpy, release, run_stats, method, counter)
        # a stable release's version against the ones published before (refused if it narrows
        # someone below l), remembered for the next
        with owner_state(plpy), timing.phase("republication"):
            across = republication.check_and_remember(plpy, release, run_stats)
        if across is not None and figures is not None:
            figures["across_versions"] = across
        if report_target is None:
            return figures, None
        with timing.phase("risk"):
            return figures, risk.compute(plpy, report_target, counter=counter)

    return checked_as_owner(plpy, release, checks)


# Checks left pending by checked_as_owner for anon._check_as_owner, by id: (work, result, error)
_PENDING: dict[int, dict] = {}


def checked_as_owner(plpy, release: dict, work: Callable[[], tuple]):
    """``work()`` (the check of the release's rows and its stored report), run with the rights of
    the release's owner when the caller is another role and the owner is not a superuser: the
    owner may have changed what its relations hold or run in ways no check before the reading
    can list completely (SQL text, casts, types). The work
    runs inside the REFRESH of a throwaway materialized view owned by that role, which PostgreSQL
    executes as the owner in a security-restricted operation (no SET ROLE there, nothing the
    owner's code could use to get back to the caller's rights); the view is dropped after."""
    def checked():                  # the figures say whose rights the check ran with
        figures, report = work()
        if figures is not None:
            figures["checked_as"] = run(plpy, "SELECT current_user::text AS u")[0]["u"]
        return figures, report

    row = run(plpy, """
        SELECT $1::pg_catalog.regrole::pg_catalog.oid <> u.oid AND NOT o.rolsuper AS other,
               $1::pg_catalog.regrole::text AS owner
        FROM pg_catalog.pg_roles u, pg_catalog.pg_roles o
        WHERE u.rolname = current_user AND o.oid = $1::pg_catalog.regrole""",
        ["text"], [release["release_owner"]])
    if not row or not row[0]["other"]:
        return checked()
    key = release["release_id"]
    # a name no one can create beforehand (the owner may create objects in its release schema)
    helper = ident(plpy, release["release_schema"], f"plpy_anon_check_{key}_{secrets.token_hex(8)}")
    _PENDING[key] = {"work": checked}
    try:
        plpy.execute(f"CREATE MATERIALIZED VIEW {helper} AS SELECT anon._check_as_owner({int(key)}) AS ok "
                     "WITH NO DATA")
        plpy.execute(f"ALTER MATERIALIZED VIEW {helper} OWNER TO {extschema.user(row[0]['owner'])}")
        try:
            plpy.execute(f"REFRESH MATERIALIZED VIEW {helper}")
        except plpy.SPIError:
            if "error" in _PENDING.get(key, {}):
                raise _PENDING[key]["error"] from None     # the check's own error, as raised
            raise
        plpy.execute(f"DROP MATERIALIZED VIEW {helper}")
        pending = _PENDING[key]
        if "error" in pending:
            raise pending["error"]
        return pending["result"]
    finally:
        _PENDING.pop(key, None)


def run_pending_check(plpy, key: int) -> bool:
    """anon._check_as_owner: the pending check, now with the owner's rights."""
    pending = _PENDING.get(key)
    if pending is None or "work" not in pending:
        plpy.error("plpy_anon: no check is pending in this session (anon._check_as_owner is called only "
                   "by the throwaway view publish.checked_as_owner refreshes)", sqlstate="55000")
    try:
        pending["result"] = pending.pop("work")()
    except Exception as exc:
        pending["error"] = exc
        raise
    return True


def drop(plpy, release: dict, *, source_locked: bool = False) -> None:
    """Drop a release's relations and catalog row. Waits for a refresh of the same release to
    finish (the refresh lock), so a refresh never loses its relations halfway. Only relations
    plpy_anon made are dropped (``genuine_relations``): of a stale release (its schema dropped or
    re-created outside plpy_anon) only the catalog row goes, whatever now carries its names.
    Locks in the one order (docs/operations.md): the source (unless the caller, a replace, holds
    the new release's already), the release, its relations."""
    if not source_locked:
        lock_source(plpy, release["source"])
    lock_release(plpy, release["release_id"])
    schema = release["release_schema"]
    found = genuine_relations(plpy, release)
    if found:
        # readers lock a view before what it reads, a plain REFRESH's check its storage before
        # the view: locked together in bounded attempts, so neither order can deadlock the drop,
        # and a drop never queues in front of readers for longer than one attempt
        lock_for_swap(plpy, release, [("VIEW" if kind == "v" else "MATERIALIZED VIEW", schema, rel)
                                      for rel, kind in found if kind in ("v", "m")],
                      SwapWaits.from_settings(plpy), action="drop")
    for rel, kind in found:
        if kind == "m":
            plpy.execute(f"DROP MATERIALIZED VIEW {ident(plpy, schema, rel)}")
        elif kind == "v":
            plpy.execute(f"DROP VIEW {ident(plpy, schema, rel)}")
        elif kind == "r":
            plpy.execute(f"DROP TABLE {ident(plpy, schema, rel)}")
    with owner_state(plpy):
        republication.forget(plpy, release["release_id"])
        run(plpy, "SELECT anon._store_release_salt($1, NULL)", ["int4"], [release["release_id"]])
    run(plpy, "DELETE FROM anon.releases WHERE release_id = $1", ["int4"], [release["release_id"]])
