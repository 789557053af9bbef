"""The release catalog's rows (``anon.releases``), below everything that acts on them: lookups
(``by_id``, ``find``), the genuineness check of a release's relations (``check_genuine``), the
run statistics a build stashes (``stash_run``/``take_run``) and the per-release lock.

The lowest layer of the release machinery: grants, verify, refreshing, publish and releases all
import it, and it imports none of them (no import cycle: see tests/unit/test_db_imports.py).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import re
import time

from plpy_anon.core.errors import AnonError, InsufficientData, InvalidParameter, UndefinedObject
from plpy_anon.db import extschema
from plpy_anon.db.planner_code import PLANNER_CODE
from plpy_anon.db.sqltext import ident, jsonb, local_settings, run
from plpy_anon.spec import Built

RUNS_KEY = "plpy_anon.runs"


def stash_run(GD, release_id: int, *, row_count: int, achieved_k: int | None, metrics: dict,
              started: float, source_rows: int | None = None, suppressed: int = 0,
              people: tuple | None = None) -> None:
    """Called by a method's partitioning function: what this run produced, for record_refresh.

    ``row_count`` is what the catalog shows; the release must hold ``source_rows`` (rows read from
    the source in the build's snapshot, default ``row_count``) minus ``suppressed`` rows, which
    verify.py checks against ``count(*)`` of the released relation. ``people``: a stable
    release's (person hashes, groups), for republication.check_and_remember."""
    GD.setdefault(RUNS_KEY, {})[release_id] = {
        "row_count": row_count, "achieved_k": achieved_k, "metrics": metrics,
        "seconds": time.monotonic() - started, "started": started,
        "source_rows": row_count if source_rows is None else int(source_rows),
        "suppressed": int(suppressed), "people": people}


def take_run(GD, release_id: int) -> dict | None:
    return GD.get(RUNS_KEY, {}).pop(release_id, None)


#: releases this backend is creating: the REFRESH that fills their relations is recorded by the
#: creation itself (publish.create_release), not by the event trigger
BUILDING_KEY = "plpy_anon.building"


def create_frozen_view(plpy, qualified: str, query: str) -> None:
    """``CREATE MATERIALIZED VIEW qualified AS query``, its rows visible to every snapshot.

    Rows written by ``CREATE ... AS`` carry this transaction's id: a REPEATABLE READ or
    SERIALIZABLE reader whose snapshot is older, waiting for the name while a replace => true
    drops the old release, would find the new one EMPTY. A REFRESH writes frozen rows (as a
    refresh's build does: refreshing.build_frozen); the query still runs once."""
    plpy.execute(f"CREATE MATERIALIZED VIEW {qualified} AS {query} WITH NO DATA")
    plpy.execute(f"REFRESH MATERIALIZED VIEW {qualified}")


#: what a release keeps out of its catalog row (anon.releases, which every custodian reads): kept
#: in anon.release_secrets, which only the release's owner reaches (anon._release_salt)
SECRETS = ("person_salt",)


def person_salt(parameters: dict) -> str | None:
    """The stable mode's salt, merged into a release's parameters from anon.release_secrets by
    the run of its owner (None outside the stable mode, or not merged)."""
    return parameters.get("person_salt")


def store_secrets(plpy, release_id: int, parameters: dict) -> None:
    """Keep ``parameters``' secrets (:data:`SECRETS`) in anon.release_secrets: the catalog row
    stores the parameters without them."""
    salt = person_salt(parameters)
    if salt is not None:
        run(plpy, "SELECT anon._store_release_salt($1, $2)", ["int4", "text"], [release_id, salt])


def salt_digest(salt: str) -> str:
    """What the catalog row keeps of a stable release's salt (Built.salt_digest): a SHA-256 that
    tells a salt replaced in anon.release_secrets (every person would be new to the state, which
    then no longer binds them) and tells nothing of the salt (128 random bits)."""
    return hashlib.sha256(b"plpy_anon release salt " + salt.encode()).hexdigest()


def secrets(plpy, release_id: int, parameters: dict | None = None) -> dict:
    """The release's secrets, to merge into its ``parameters`` for a run (empty when it has
    none); 42501 for a role that is not a member of its owner (anon._release_salt), 22000 for a salt
    that is not the one the release was created with."""
    salt = run(plpy, "SELECT anon._release_salt($1) AS s", ["int4"], [release_id])[0]["s"]
    if salt is None:
        return {}
    expected = Built.of(parameters or {}).salt_digest
    if not re.fullmatch(r"(?:[0-9a-f]{2})+", salt) or (expected and salt_digest(salt) != expected):
        raise InsufficientData(
            f"the salt of release {release_id}'s person hashes in anon.release_secrets is not the "
            "one it was created with: its state no longer knows anyone, and a refresh would take "
            "everyone for a new person",
            hint="Restore that row of anon.release_secrets from the backup the release's state "
                 "comes from, or create the release again with replace => true (a new history).")
    return {"person_salt": salt}


@contextlib.contextmanager
def owner_state(plpy):
    """Reads and writes of a release's state under row security (anon.release_state,
    anon.release_secrets: its owner's rows only) even where the session turned it off, as
    pg_dump/pg_restore do (a custodian's release refreshed by a restore reads its state as the
    custodian: with row_security = off that is an error)."""
    with local_settings(plpy, row_security="on"):
        yield


CATALOG_ROW = "SELECT * FROM anon.releases WHERE release_id = $1"


def record_timing(plpy, release_id: int, figures: dict) -> dict:
    """Write a create's or refresh's duration (timing.Clock.figures: the wall clock of the whole
    call, and its phases) into the catalog row: ``refresh_seconds`` and ``metrics.timing``.
    Returns the row."""
    return run(plpy, """
        UPDATE anon.releases SET refresh_seconds = $2,
               metrics = pg_catalog.jsonb_set(coalesce(metrics, '{}'::jsonb), '{timing}', $3)
        WHERE release_id = $1 RETURNING *""", ["int4", "float8", "jsonb"],
        [release_id, figures["seconds"], json.dumps(figures)])[0]


def by_id(plpy, release_id: int) -> dict:
    if release_id is None:
        raise InvalidParameter("the release id must not be NULL",
                               hint="Internal runs are called by a release's query with its id.")
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
    try:
        parts = run(plpy, "SELECT pg_catalog.parse_ident($1) AS p", ["text"], [name])[0]["p"]
    except plpy.SPIError as error:
        if getattr(error, "sqlstate", None) != InvalidParameter.sqlstate:
            raise
        raise InvalidParameter(f'release name "{extschema.user(name)}" is not a name or schema.name',
                               hint='Double-quote a part holding spaces, capitals or dots, as '
                                    '\'"My Schema"."My Release"\', and close every quote.') from None
    if len(parts) == 2:
        rows = run(plpy, "SELECT * FROM anon.releases WHERE release_schema = $1 AND release_name = $2",
                   ["text", "text"], parts)
    elif len(parts) == 1:
        rows = run(plpy, "SELECT * FROM anon.releases WHERE release_name = $1", ["text"], parts)
    else:
        rows = []
    if len(rows) > 1:
        where = ", ".join(extschema.user(f"{r['release_schema']}.{r['release_name']}") for r in rows)
        raise InvalidParameter(f'release name "{extschema.user(name)}" is ambiguous: {where}',
                               hint="Qualify it with its schema.")
    if not rows:
        raise UndefinedObject(f'release "{extschema.user(name)}" does not exist',
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
    row, q = rows[0], extschema.user(f"{release['release_schema']}.{release['release_name']}")
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
    elif wrong := wrong_kinds(plpy, release):
        what = "relations were replaced"
        detail = (f"{', '.join(wrong)}: a release is one materialized view and the plain views over it "
                  "plpy_anon made; a table under one of their names is not read on its behalf.")
    elif changed := changed_definitions(plpy, release["release_id"]):
        what = "relations were changed"
        detail = (f"The definitions of {', '.join(changed)} are not the ones plpy_anon built "
                  "(CREATE OR REPLACE, or dropped and re-created by their owner): plpy_anon runs "
                  "no query of theirs.")
    else:
        return None
    return f"release {q}'s {what} outside plpy_anon; drop the release with anon.drop_release", detail


def wrong_kinds(plpy, release: dict) -> list[str]:
    """The release's relations that exist but are not what plpy_anon made: its main relation a
    materialized view, the others (parameters.objects) plain views. A table under one of their
    names has no definition to compare, and its owner chooses its column types, whose casts and
    operators the verification would run."""
    names = owned_relations(plpy, release)
    rows = run(plpy, """
        SELECT c.relname::text AS name, c.relkind::text AS kind FROM pg_catalog.pg_class c
        WHERE c.relnamespace = $1::pg_catalog.regnamespace AND c.relname::text = ANY($2)""",
        ["text", "text[]"], [release["schema_oid"], names])
    expected = {name: "v" for name in names} | {storage_of(release): "m"}
    return sorted(f"{r['name']} is a {KINDS.get(r['kind'], r['kind'])}" for r in rows
                  if r["kind"] != expected[r["name"]])


KINDS = {"r": "table", "p": "partitioned table", "v": "view", "m": "materialized view",
         "f": "foreign table", "S": "sequence", "i": "index", "c": "composite type"}


# Each relation's definition, two ways: its rule's node tree (OIDs: unchanged by renames of what
# it reads) and its text (names: unchanged by pg_dump and restore, which give every object a new
# OID). A relation whose definition matches neither recorded digest was changed outside plpy_anon.
DEFINITIONS = """
SELECT coalesce(pg_catalog.jsonb_object_agg(
           c.relname::text, pg_catalog.jsonb_build_array(pg_catalog.md5(w.ev_action::text),
                                                         pg_catalog.md5(pg_catalog.pg_get_viewdef(c.oid)))),
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
    return sorted(n for n, digests in recorded.items()
                  if n in current and not set(map(str, current[n])) & set(map(str, digests)))


def store_definitions(plpy, release_id: int) -> None:
    """Record the definitions of the release's relations: those plpy_anon just built (create,
    rebuild), or, after a check found them genuine, both digests as they are now (a restored
    release matched by its text gets its new node tree's digest)."""
    release = by_id(plpy, release_id)
    defs = current_definitions(plpy, release_id, owned_relations(plpy, release))
    run(plpy, "UPDATE anon.releases SET definitions = $2 WHERE release_id = $1",
        ["int4", "jsonb"], [release_id, json.dumps(defs)])


def check_genuine(plpy, release: dict) -> None:
    """Raise StaleRelease (55000) unless ``release``'s schema and relations are plpy_anon's own,
    and UnsafeRelease (42501) if planning a query on them would run code not owned by a superuser."""
    reason = stale_reason(plpy, release)
    if reason is not None:
        q = qualified_name(plpy, release)
        raise StaleRelease(
            reason[0], detail=reason[1],
            hint=f"Drop the release with SELECT anon.drop_release({plpy.quote_literal(q)}) (it removes the "
                 "catalog row and leaves objects plpy_anon did not make alone) and create it again.")
    relations = [r["oid"] for r in run(plpy, GENUINE_RELATIONS, ["int4", "text[]"],
                                       [release["release_id"], owned_relations(plpy, release)])]
    ids = run(plpy, "SELECT $1::pg_catalog.regclass::pg_catalog.oid AS source, "
                    "$2::pg_catalog.regrole::pg_catalog.oid AS owner",
              ["text", "text"], [release["source"], release["release_owner"]])[0]
    check_release_query(plpy, release, relations, ids["source"], ids["owner"])
    check_column_types(plpy, release, relations, ids["source"])
    check_release_planner_code(plpy, release, relations)


# Columns of a release whose type is neither pg_catalog's nor the type of the source's column of
# that name. plpy_anon's queries give every column a built-in type (ranges, arrays, text, counts)
# or keep a source column's own; any other type came from a relation its owner re-created, and
# reading, comparing or casting its values (the verification does) could run that owner's code:
# an enum with the owner's cast to numeric, say.
FOREIGN_TYPES = """
SELECT pg_catalog.format('%s.%I is of type %s', a.attrelid::pg_catalog.regclass, a.attname,
                         pg_catalog.format_type(a.atttypid, a.atttypmod)) AS what
FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
WHERE a.attrelid = ANY($1) AND a.attnum > 0 AND NOT a.attisdropped
  AND t.typnamespace <> 'pg_catalog'::pg_catalog.regnamespace
  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute s
                  WHERE s.attrelid = $2 AND s.attname = a.attname AND s.atttypid = a.atttypid
                    AND s.attnum > 0 AND NOT s.attisdropped)
ORDER BY 1"""


def check_column_types(plpy, release: dict, relations: list[int], source: int) -> None:
    """Refuse (42501) a release with a column of a type plpy_anon would not have given it
    (``relations``: its relations' OIDs; ``source``: its source's)."""
    found = [r["what"] for r in run(plpy, FOREIGN_TYPES, ["oid[]", "oid"], [relations, source])]
    refuse_unsafe(plpy, release, found, "has columns of types plpy_anon did not give them",
                  "A release's columns are of built-in types or of its source column's own type; "
                  "another type's operators and casts would run its owner's code for whoever "
                  "reads the release.")


def refuse_unsafe(plpy, release: dict, found: list[str], what: str, detail: str) -> None:
    """Refuse (42501) the release when a check ``found`` anything: ``release <q> <what>: ...``."""
    if found:
        q = qualified_name(plpy, release)
        raise UnsafeRelease(
            f"release {q} {what}: " + "; ".join(found[:5]), detail=detail,
            hint=f"Drop the release with SELECT anon.drop_release({plpy.quote_literal(q)}) and "
                 "create it again from the table you mean.")


# What a release's queries (its relations' rules) read and call, beyond its source, its own
# relations and code a superuser owns: functions, operators' functions and casts' functions of
# other roles, and other relations. Whoever reads a release's views runs their functions, so the
# owner of a release could otherwise swap in its own function, or a view of its own under the
# source's name with an identical text (which a text digest alone would take for the original).
QUERY_READS = """
WITH deps AS (
    SELECT DISTINCT d.refclassid, d.refobjid
    FROM pg_catalog.pg_rewrite w
    JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass AND d.objid = w.oid
    WHERE w.ev_class = ANY($1) AND d.refobjid <> w.ev_class),
code(fn, what) AS (
    SELECT d.refobjid, 'function'
    FROM deps d WHERE d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass
    UNION ALL
    SELECT o.oprcode::pg_catalog.oid, pg_catalog.format('operator %s', o.oid::pg_catalog.regoperator)
    FROM deps d JOIN pg_catalog.pg_operator o ON o.oid = d.refobjid
    WHERE d.refclassid = 'pg_catalog.pg_operator'::pg_catalog.regclass
    UNION ALL
    SELECT c.castfunc, pg_catalog.format('cast %s', pg_catalog.format_type(c.castsource, NULL))
    FROM deps d JOIN pg_catalog.pg_cast c ON c.oid = d.refobjid
    WHERE d.refclassid = 'pg_catalog.pg_cast'::pg_catalog.regclass AND c.castfunc <> 0)
SELECT pg_catalog.format('%s calls %s (owned by %s)', c.what, p.oid::pg_catalog.regprocedure,
                         pg_catalog.pg_get_userbyid(p.proowner)) AS what
FROM code c JOIN pg_catalog.pg_proc p ON p.oid = c.fn JOIN pg_catalog.pg_roles r ON r.oid = p.proowner
WHERE NOT r.rolsuper
UNION ALL
SELECT pg_catalog.format('reads %s', d.refobjid::pg_catalog.regclass)
FROM deps d
JOIN pg_catalog.pg_class c ON c.oid = d.refobjid JOIN pg_catalog.pg_roles o ON o.oid = c.relowner
WHERE d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
  AND d.refobjid <> $2 AND d.refobjid <> ALL($1)
  AND NOT (c.relkind = 'c' AND o.rolsuper)        -- a superuser's composite type (anon.partition)
UNION ALL
SELECT pg_catalog.format('its owner %s may not read its source %s', pg_catalog.pg_get_userbyid($3),
                         $2::pg_catalog.regclass)
WHERE NOT pg_catalog.has_table_privilege($3, $2, 'SELECT')
ORDER BY 1"""


def check_release_query(plpy, release: dict, relations: list[int], source: int, owner: int) -> None:
    """Refuse (42501) a release whose queries read anything but its source and its own relations,
    or call code no superuser owns, or whose owner may no longer read its source: a release
    publishes only what its owner may read, through plpy_anon's code and the server's."""
    found = [r["what"] for r in run(plpy, QUERY_READS, ["oid[]", "oid", "oid"],
                                    [relations, source, owner])]
    refuse_unsafe(plpy, release, found, "is not plpy_anon's query of its source any more",
                  "A release's relations may read only its source and each other, and call only "
                  "code a superuser owns; nothing else is run on its behalf.")


class UnsafeRelease(AnonError):
    """A release whose relations carry code the planner would run for whoever reads them."""

    sqlstate = "42501"


def check_release_planner_code(plpy, release: dict, relations: list[int]) -> None:
    """The release's owner may add indexes and statistics to its relations; an index predicate or
    expression calling the owner's function runs with the rights of whoever plans a query on the
    relation -- the verification and the risk report of every refresh, a superuser's plain REFRESH
    or pg_cron job included. So a release is read on its behalf only while every function its
    relations' planner code calls is a superuser's (the same rule as a source's, planner_code.PLANNER_CODE).
    Refresh holds the relations locked, so nothing can be added between this check and the reads."""
    for oid in relations:
        found = [r for r in run(plpy, PLANNER_CODE, ["oid"], [oid]) if r["function"] is not None]
        if found:
            listing = "; ".join(f"{r['what']} calls {r['function']} (owned by {r['owner']})" for r in found[:5])
            raise UnsafeRelease(
                f"release {qualified_name(plpy, release)} carries code not owned by a superuser that "
                f"planning a query on it would run, with the rights of whoever verifies, reports on "
                f"or refreshes it: {listing}",
                hint="Drop that index or statistics object (an index on a release may use built-in "
                     "functions only), or have a superuser review the function and ALTER FUNCTION ... "
                     "OWNER TO a superuser role.")


GENUINE_RELATIONS = """
SELECT c.relname::text AS name, c.relkind::text AS relkind, c.oid FROM anon.releases r
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


def qualified_name(plpy, release: dict) -> str:
    """The quoted ``schema.name`` of a release's catalog row (what the SQL entry points return)."""
    return ident(plpy, release["release_schema"], release["release_name"])


def owned_relations(plpy, release: dict) -> list[str]:
    """The relations a release owns: its main relation plus any listed in parameters.objects
    and its storage (a compact release's), dependents first, so views over tables drop cleanly."""
    built = Built.of(jsonb(release["parameters"]))
    return [*built.objects, release["release_name"]] + ([built.storage] if built.storage else [])


def storage_of(release: dict) -> str:
    """The materialized view holding a release's rows: a compact release's storage (under the
    view analysts read), else the release's own relation."""
    return Built.of(jsonb(release["parameters"])).storage or release["release_name"]


LOCK_CLASS = 0x616E6F6E   # advisory lock namespace ('anon'): one refresh, drop or replace per release at a time
SUFFIX = "__refresh"


def lock_release(plpy, release_id: int) -> None:
    """The per-release lock refresh, drop and replace take (transaction-scoped): one of them at
    a time for a given release."""
    run(plpy, "SELECT pg_catalog.pg_advisory_xact_lock($1, $2)", ["int4", "int4"],
        [LOCK_CLASS, release_id])


def temp_name(name: str, release_id: int) -> str:
    """A name for the new view, at most 63 bytes and unique per release."""
    suffix = f"{SUFFIX}{release_id}"
    encoded = name.encode()[: 63 - len(suffix)]
    return encoded.decode(errors="ignore") + suffix
