"""Releases that leave the database: ``anon.snapshot`` and ``anon.release_metadata``.

A snapshot is a plain table holding exactly a release's rows and columns (CREATE TABLE AS from the
release's relation, read with the caller's rights): no view, no query, no dependency on the source
or on the extension's functions or types, so ``pg_dump -t`` carries it to a server without
plpy_anon. Its COMMENT and its ``anon.snapshots`` row carry the release's metadata (method,
parameters, achieved k, when built) as they were when it was taken; a later refresh or drop of
the release leaves it as it is.

Snapshots go into a schema of their own (default ``snapshot``), never into a release schema:
release schemas hold releases only (grants.check_release_only), because every analyst registered
with anon.grant_analyst receives USAGE on them. A snapshot is owned by the role that took it and
granted to nobody: its owner decides who reads it (GRANT SELECT), as for any table.
"""
from __future__ import annotations

import json

from plpy_anon.core.errors import (
    AnonError,
    DuplicateObject,
    InsufficientPrivilege,
    InvalidParameter,
    UndefinedObject,
    UnsupportedType,
)
from plpy_anon.db import compact, extschema, guards, publish, release_rows
from plpy_anon.db.errors import sql_entry
from plpy_anon.db.methods.registry import REGISTRY
from plpy_anon.db.sqltext import ident, jsonb, run

DEFAULT_SCHEMA = "snapshot"
# schemas a snapshot never goes into: the extension's own and the system's
PRIVATE_PARAMETERS = {"dropped", "grantees"}
RESERVED_SCHEMAS = {"anon", "anon_py", "pg_catalog", "information_schema", "pg_toast", "cron"}


class NotASingleRelation(AnonError):
    """A release published as several relations, named as a whole (feature_not_supported)."""

    sqlstate = "0A000"


def published_relations(release: dict) -> list[str]:
    """The relations of a release a reader sees: the main one, or for a release of several
    relations (Break-Merge) the ones listed in parameters.objects."""
    objects = jsonb(release["parameters"]).get("objects")
    return list(objects) if objects else [release["release_name"]]


def resolve(plpy, name: str) -> tuple[dict, str]:
    """(catalog row, relation name) of ``name``: a single-relation release, or one published
    relation of a release of several (``schema.relation``). Genuine releases only (55000), and
    only a release its caller or a superuser owns (guards.refuse_foreign_matview)."""
    release, relation = _resolve(plpy, name)
    guards.refuse_foreign_release(plpy, release, relation)
    return release, relation


def _resolve(plpy, name: str) -> tuple[dict, str]:
    try:
        release = release_rows.find(plpy, name)
    except UndefinedObject:
        parts = run(plpy, "SELECT pg_catalog.parse_ident($1) AS p", ["text"], [name])[0]["p"]
        rows = run(plpy, """
            SELECT * FROM anon.releases
            WHERE parameters -> 'objects' ? $2 AND ($1::text IS NULL OR release_schema = $1)""",
                   ["text", "text"], [parts[0] if len(parts) == 2 else None, parts[-1]])
        if len(rows) != 1:
            raise
        release_rows.check_genuine(plpy, rows[0])
        method = REGISTRY.get(rows[0]["method"])
        if method is None or method.check_relations is None:
            raise NotASingleRelation(
                f"{name} is not a relation plpy_anon builds for a release of method {rows[0]['method']}",
                hint="Snapshot the release itself, by its name.")
        method.check_relations(plpy, rows[0])         # one of its views: read by this caller
        return rows[0], parts[-1]
    relations = published_relations(release)
    if relations != [release["release_name"]]:
        q = release_rows.qualified_name(plpy, release)
        names = [ident(plpy, release["release_schema"], r) for r in relations]
        raise NotASingleRelation(
            f"release {q} is published as {len(names)} relations: {', '.join(names)}",
            hint="Name the relation to copy, one call each, e.g. "
                 f"SELECT anon.snapshot({plpy.quote_literal(names[0])}).")
    return release, release["release_name"]


def column_types(plpy, schema: str, relation: str) -> list[dict]:
    return list(run(plpy, """
        SELECT a.attname::text AS name, pg_catalog.format_type(a.atttypid, a.atttypmod) AS type,
               tn.nspname::text AS type_schema
        FROM pg_catalog.pg_attribute a
        JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
        JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
        JOIN pg_catalog.pg_namespace tn ON tn.oid = t.typnamespace
        WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY a.attnum""", ["text", "text"], [schema, relation]))


def check_portable(plpy, release: dict, relation: str) -> list[dict]:
    """The relation's columns; refuses (42804) a column whose type is not a core type (of
    pg_catalog): a table of it would not restore where the type's schema is missing."""
    columns = column_types(plpy, release["release_schema"], relation)
    foreign = [c for c in columns if c["type_schema"] != "pg_catalog"]
    if foreign:
        c = foreign[0]
        raise UnsupportedType(
            f'column "{c["name"]}" of {ident(plpy, release["release_schema"], relation)} has type '
            f'{c["type"]} (schema {c["type_schema"]}), which a database without it cannot restore',
            detail="Columns of non-core types: " + ", ".join(f'{x["name"]} {x["type"]}' for x in foreign),
            hint="Snapshots and exports hold core PostgreSQL types only; release a column of a core type "
                 "(e.g. text) instead.")
    return columns


def has_column(plpy, table: str, column: str) -> bool:
    return bool(run(plpy, """
        SELECT 1 FROM pg_catalog.pg_attribute
        WHERE attrelid = pg_catalog.to_regclass($1) AND attname = $2 AND NOT attisdropped""",
                    ["text", "text"], [table, column]))


def metadata_of(plpy, release: dict, relation: str, columns: list[dict]) -> dict:
    """What travels with the rows: how the release was made and what it achieved. Nothing about
    the source's data beyond what the release itself shows."""
    # the risk report is another feature's column: included when this catalog has it
    extra = ["risk"] if has_column(plpy, extschema.sql("anon.releases"), "risk") else []
    row = run(plpy, f"""
        SELECT r.method, r.parameters::text AS parameters, r.achieved_k, r.row_count, r.verified,
               pg_catalog.to_json(r.created_at) #>> '{{}}' AS created_at,
               pg_catalog.to_json(r.refreshed_at) #>> '{{}}' AS refreshed_at,
               (SELECT e.extversion FROM pg_catalog.pg_extension e WHERE e.extname = 'plpy_anon') AS version
               {''.join(f', r.{c}::text AS {c}' for c in extra)}
        FROM anon.releases r WHERE r.release_id = $1""", ["int4"], [release["release_id"]])[0]
    meta = {
        "release": release_rows.qualified_name(plpy, release),
        "relation": ident(plpy, release["release_schema"], relation),
        "method": row["method"],
        # the method's parameters, less the names of source columns left out of the release and
        # of the roles it is granted to: nothing the release itself does not show
        "parameters": {k: v for k, v in jsonb(row["parameters"]).items() if k not in PRIVATE_PARAMETERS},
        "achieved_k": row["achieved_k"],
        "row_count": row["row_count"],
        "verified": row["verified"],
        "created_at": row["created_at"],
        "refreshed_at": row["refreshed_at"],
        "extension_version": row["version"],
        "columns": [{"name": c["name"], "type": c["type"]} for c in columns],
    }
    for c in extra:
        if row[c] is not None:
            meta[c] = jsonb(row[c])
    return meta


@sql_entry
def release_metadata(plpy, name: str) -> str:
    """anon.release_metadata(release): the JSON that travels with a snapshot or an export."""
    release, relation = resolve(plpy, name)
    return json.dumps(metadata_of(plpy, release, relation, check_portable(plpy, release, relation)))


def snapshot_schema_ready(plpy, schema: str) -> None:
    """Create ``schema`` (owned by the caller) if missing; refuse the extension's schemas and
    release schemas (which analysts get USAGE on and which hold releases only)."""
    if schema in RESERVED_SCHEMAS or schema == extschema.name() or schema.startswith("pg_"):
        raise InvalidParameter(f'snapshots do not go into schema "{schema}"',
                               hint=f'Use a schema of your own, or the default "{DEFAULT_SCHEMA}".')
    in_use = run(plpy, """
        SELECT 1 FROM anon.release_schemas WHERE schema_name = $1
        UNION ALL SELECT 1 FROM anon.releases WHERE release_schema = $1""", ["text"], [schema])
    if in_use:
        raise InvalidParameter(
            f'schema "{schema}" is a release schema: snapshots do not go into release schemas',
            detail="Release schemas hold releases only; every analyst registered with anon.grant_analyst "
                   "has USAGE on them.",
            hint=f'Use another snapshot_schema, e.g. the default "{DEFAULT_SCHEMA}".')
    # created if missing, and checked either way: another role may create it between the two
    plpy.execute(f"CREATE SCHEMA IF NOT EXISTS {ident(plpy, schema)}")
    # A schema someone else owns is refused: its owner could drop or rename the snapshot, and
    # (with CREATE granted to others) objects planted beside it would travel with a dump.
    rows = run(plpy, """
        SELECT pg_catalog.pg_get_userbyid(n.nspowner)::text AS owner,
               n.nspowner = (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = current_user) AS mine
        FROM pg_catalog.pg_namespace n WHERE n.nspname = $1""", ["text"], [schema])
    if not rows:
        raise InsufficientPrivilege(f'schema "{schema}" was dropped while the snapshot was being made',
                                    hint="Run the call again.")
    owner = rows[0]
    if not owner["mine"]:
        raise InsufficientPrivilege(
            f'schema "{schema}" is owned by role "{owner["owner"]}", not by you: snapshots go '
            f'into a schema the caller owns',
            detail="The owner of a schema can drop or rename the tables in it.",
            hint='Pass snapshot_schema => a schema you own (a missing one is created for you), or '
                 f'ALTER SCHEMA {ident(plpy, schema)} OWNER TO CURRENT_USER.')


@sql_entry
def snapshot(plpy, name: str, snapshot_name: str | None = None, snapshot_schema: str | None = None,
             replace: bool = False) -> str:
    """anon.snapshot: copy a release into a plain table; returns its quoted qualified name."""
    release, relation = resolve(plpy, name)
    compact.check_view(plpy, release)     # the copy's metadata is the storage's check
    columns = check_portable(plpy, release, relation)
    schema = DEFAULT_SCHEMA if snapshot_schema is None else snapshot_schema
    if snapshot_name is None:
        day = run(plpy, "SELECT pg_catalog.to_char(pg_catalog.now(), 'YYYYMMDD') AS d")[0]["d"]
        snapshot_name = f"{relation}_{day}"
    publish.check_name(schema, "snapshot_schema")
    publish.check_name(snapshot_name, "snapshot_name")
    snapshot_schema_ready(plpy, schema)
    target = ident(plpy, schema, snapshot_name)
    # one snapshot per name at a time (two replace => true would otherwise collide)
    run(plpy, "SELECT pg_catalog.pg_advisory_xact_lock($1, pg_catalog.hashtext($2))",
        ["int4", "text"], [0x616E736E, f"{schema}.{snapshot_name}"])
    existing = release_rows.relation_exists(plpy, schema, snapshot_name)
    if existing is not None:
        ours = run(plpy, """
            SELECT s.snapshot_id FROM anon.snapshots s
            WHERE s.snapshot_schema = $1 AND s.snapshot_name = $2
              AND s.relation = pg_catalog.to_regclass($3)::oid""", ["text", "text", "text"],
                   [schema, snapshot_name, target])
        if not replace:
            raise DuplicateObject(f"relation {target} already exists",
                                  hint="Pass replace => true to replace a snapshot, or choose another snapshot_name.")
        if not ours:
            raise DuplicateObject(f"relation {target} already exists and is not a snapshot",
                                  hint="Choose another snapshot_name; plpy_anon never replaces objects it did not create.")
        plpy.execute(f"DROP TABLE {target}")
    run(plpy, "DELETE FROM anon.snapshots WHERE snapshot_schema = $1 AND snapshot_name = $2",
        ["text", "text"], [schema, snapshot_name])
    source = ident(plpy, release["release_schema"], relation)
    select = ", ".join(plpy.quote_ident(c["name"]) for c in columns)
    # CREATE TABLE AS: a plain heap table of the release's columns (core types, checked above)
    # and rows, read with the caller's rights; no default, constraint or dependency is copied
    rows = plpy.execute(f"CREATE TABLE {target} AS SELECT {select} FROM {source}").nrows()
    meta = metadata_of(plpy, release, relation, columns)
    meta["snapshot"] = target
    meta["snapshot_rows"] = rows
    meta["snapshot_at"] = run(plpy, "SELECT pg_catalog.to_json(pg_catalog.now()) #>> '{}' AS t")[0]["t"]
    text = json.dumps(meta, sort_keys=True)
    plpy.execute(f"COMMENT ON TABLE {target} IS {plpy.quote_literal('plpy_anon snapshot ' + text)}")
    run(plpy, """
        INSERT INTO anon.snapshots (release_id, release, relation, snapshot_schema, snapshot_name,
                                    row_count, metadata)
        VALUES ($1, $2, pg_catalog.to_regclass($3)::oid, $4, $5, $6, $7)""",
        ["int4", "text", "text", "text", "text", "int8", "jsonb"],
        [release["release_id"], meta["relation"], target, schema, snapshot_name, rows, text])
    return target
