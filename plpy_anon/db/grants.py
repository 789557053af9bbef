"""Analysts' access: roles that may read every release and nothing else.

Release schemas are the extension's own: ``ensure_release_schema`` creates them (recorded in
``anon.release_schemas`` with their OID) and refuses an existing schema it did not create, or one
holding anything but releases (a function, type, table, ... that USAGE would hand to analysts).
A schema is the one plpy_anon created only while its OID is the recorded one: a release schema
dropped outside plpy_anon and created again by anyone else under its name is not a release
schema (nothing is created, granted or refreshed in it).

``anon.grant_analyst(role)`` records the role in ``anon.analysts`` and grants it USAGE on each
release schema -- after checking again that each holds releases only -- and SELECT on each
relation a release owns. USAGE is granted once per (schema, role): when grant_analyst registers
a role, and when the extension creates a schema (to the analysts registered then). Creating or
refreshing a release only grants SELECT on its own new relations (``grant_release``): concurrent
creates and refreshes never update the same catalog row (``GRANT USAGE`` on every create made
them collide: "tuple concurrently updated", deadlocks on pg_namespace). ``revoke_analyst`` takes
SELECT on every release and USAGE on every release schema back.

Nothing else is granted: the ``anon`` schema, the catalog, the source tables and the extension's
functions stay closed (900-privileges.sql revokes them from PUBLIC). Reading a release never runs
extension code -- a materialized view's query only runs at refresh, as its owner. A release whose
method restricts it to some roles (``parameters.grantees``: trust-aware releases) is never
granted to analysts.
"""
from __future__ import annotations

from plpy_anon.core.errors import (
    AnonError,
    InsufficientPrivilege,
    InvalidParameter,
    UndefinedObject,
)
from plpy_anon.db.errors import sql_entry
from plpy_anon.db.release_rows import genuine_relations, temp_name
from plpy_anon.db.sqltext import ident, jsonb, run
from plpy_anon.spec import Built

# Advisory lock keys (class 'ansc'): one per schema name while it is created, and one for the set
# of analysts (grant_analyst / revoke_analyst exclusive, release creation shared) so that a role
# registered while a release is being created still receives it.
LOCK_CLASS = 0x616E7363
ANALYSTS_KEY = 0


class SchemaNotOurs(AnonError):
    """An existing schema plpy_anon did not create (duplicate_schema)."""

    sqlstate = "42P06"


class SchemaNotReleaseOnly(AnonError):
    """A release schema holding objects that are not releases (object_not_in_prerequisite_state)."""

    sqlstate = "55000"


def check_role(plpy, role: str) -> str:
    """The role's name as stored in pg_roles; clear errors for unknown roles and superusers."""
    if role is None or not role.strip():
        raise InvalidParameter("a role name is required", hint="Pass the analysts' role: anon.grant_analyst('analyst').")
    rows = run(plpy, "SELECT rolname, rolsuper FROM pg_catalog.pg_roles WHERE rolname = $1", ["text"], [role])
    if not rows:
        raise UndefinedObject(f'role "{role}" does not exist',
                              hint=f"Create it first, e.g. CREATE ROLE {plpy.quote_ident(role)} NOLOGIN; "
                                   "and grant it to the analysts' login roles.")
    if rows[0]["rolsuper"]:
        raise InvalidParameter(f'role "{role}" is a superuser and can read everything already',
                               hint="Grant releases to an ordinary role that analysts log in as (or are members of).")
    return rows[0]["rolname"]


def analysts(plpy) -> list[str]:
    """Analyst roles that still exist (a dropped role simply stops receiving grants)."""
    rows = run(plpy, """
        SELECT a.role_name::text AS role_name FROM anon.analysts a
        JOIN pg_catalog.pg_roles r ON r.rolname = a.role_name ORDER BY 1""")
    return [r["role_name"] for r in rows]


def release_relations(plpy, release: dict) -> list[str]:
    """Qualified names of the relations of a release that exist right now and are plpy_anon's
    (releases.genuine_relations: in the schema the release was created in, owned by its creator;
    nothing of a stale release whose schema was dropped or re-created outside plpy_anon)."""
    schema = release["release_schema"]
    stored = Built.of(jsonb(release["parameters"])).storage   # read through the view only
    return [ident(plpy, schema, rel) for rel, _ in genuine_relations(plpy, release) if rel != stored]


def restricted_to(release: dict) -> list[str] | None:
    """The roles a release is meant for when its method restricts it (``parameters.grantees``,
    e.g. a trust-aware release made for one requester), else None: every analyst reads it."""
    grantees = Built.of(jsonb(release["parameters"]) or {}).grantees
    return None if grantees is None else list(grantees)


def grant_release(plpy, release: dict, roles: list[str] | None = None) -> None:
    """Give ``roles`` (default: every analyst) read access to one release. Called by
    create_release and after refreshes, so analysts never lose access to a rebuilt release. A
    release restricted to its grantees is only ever granted to them."""
    restricted = restricted_to(release)
    if restricted is not None:
        existing = {r["rolname"] for r in run(plpy, "SELECT rolname::text FROM pg_catalog.pg_roles "
                                                    "WHERE rolname = ANY($1)", ["text[]"], [restricted])}
        roles = [r for r in (restricted if roles is None else roles) if r in restricted and r in existing]
    elif roles is None:
        roles = analysts(plpy)
    if not roles:
        return
    relations = release_relations(plpy, release)
    if not relations:        # a stale release: nothing of it is ours to grant, nor its schema
        return
    # SELECT only: analysts got USAGE on the schema once (ensure_release_schema / grant_analyst);
    # re-granting it here made concurrent creates and refreshes collide on its pg_namespace row.
    # A restricted release's grantees need not be analysts: USAGE for them, unless they have it.
    if restricted is not None:
        for role in roles:
            grant_usage(plpy, release["release_schema"], role)
    grantees = ", ".join(plpy.quote_ident(r) for r in roles)
    for rel in relations:
        plpy.execute(f"GRANT SELECT ON {rel} TO {grantees}")


# ---------------------------------------------------------------------------- release schemas

# Objects of a schema that are not part of a release, one query (one snapshot, so a release
# committed meanwhile is seen together with its catalog row). Part of a release: its relations
# (release_name, parameters.objects, and only as a materialized view a refresh's leftover, named
# exactly refreshing.temp_name(name, id): $2/$3 pair those names with release ids) -- of releases
# created in this very schema (same OID) and owned by the role that created the release -- their
# indexes and owned sequences (row and array types are reported with their relation or element
# type; functions first: they are what USAGE would hand over). Anything else -- functions,
# procedures, aggregates, types, domains, tables, views, sequences, operators, collations, text
# search objects, statistics, extensions -- is foreign, and so is CREATE granted to anyone but the
# owner (others could add objects later).
FOREIGN_OBJECTS = """
WITH ns AS (SELECT n.oid, n.nspowner, n.nspacl FROM pg_catalog.pg_namespace n WHERE n.nspname = $1),
ours AS (
    SELECT r.* FROM anon.releases r, ns WHERE r.release_schema = $1 AND r.schema_oid = ns.oid),
rel_names AS (
    SELECT r.release_owner, r.release_name::text AS name, false AS temp FROM ours r
    UNION ALL
    SELECT r.release_owner, r.parameters ->> 'storage', false FROM ours r
    WHERE r.parameters ->> 'storage' IS NOT NULL
    UNION ALL
    SELECT r.release_owner, o.name, false FROM ours r,
        pg_catalog.jsonb_array_elements_text(CASE WHEN pg_catalog.jsonb_typeof(r.parameters -> 'objects') = 'array'
                                                  THEN r.parameters -> 'objects' ELSE '[]' END) AS o(name)
    UNION ALL
    SELECT r.release_owner, t.name, true FROM ours r
    JOIN ROWS FROM (pg_catalog.unnest($2::text[]), pg_catalog.unnest($3::int4[])) AS t(name, release_id) ON t.release_id = r.release_id),
rel AS (
    SELECT c.oid FROM pg_catalog.pg_class c JOIN ns ON c.relnamespace = ns.oid
    WHERE c.relkind IN ('r', 'v', 'm', 'p')
      AND EXISTS (SELECT 1 FROM rel_names x
                  WHERE x.name = c.relname::text AND x.release_owner = c.relowner
                    AND (NOT x.temp OR c.relkind = 'm'))),
ok_rel AS (
    SELECT oid FROM rel
    UNION SELECT i.indexrelid FROM pg_catalog.pg_index i WHERE i.indrelid IN (SELECT oid FROM rel)
    UNION SELECT d.objid FROM pg_catalog.pg_depend d
          WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
            AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
            AND d.refobjid IN (SELECT oid FROM rel) AND d.deptype IN ('a', 'i')),
foreign_objects AS MATERIALIZED (     -- describe only what is found, not every row scanned
    SELECT 'pg_catalog.pg_class'::pg_catalog.regclass AS classid, c.oid AS objid FROM pg_catalog.pg_class c
    WHERE c.relnamespace = (SELECT oid FROM ns) AND c.oid NOT IN (SELECT oid FROM ok_rel)
    UNION ALL SELECT 'pg_catalog.pg_type'::pg_catalog.regclass, t.oid FROM pg_catalog.pg_type t
    WHERE t.typnamespace = (SELECT oid FROM ns)
      AND t.typrelid = 0                                    -- a row type goes with its relation
      AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_type e    -- an array type with its element type
                      WHERE e.oid = t.typelem AND e.typarray = t.oid)
    UNION ALL SELECT 'pg_catalog.pg_proc'::pg_catalog.regclass, oid FROM pg_catalog.pg_proc
    WHERE pronamespace = (SELECT oid FROM ns)
    UNION ALL SELECT 'pg_catalog.pg_operator'::pg_catalog.regclass, oid FROM pg_catalog.pg_operator
    WHERE oprnamespace = (SELECT oid FROM ns)
    UNION ALL SELECT 'pg_catalog.pg_collation'::pg_catalog.regclass, oid FROM pg_catalog.pg_collation
    WHERE collnamespace = (SELECT oid FROM ns)
    UNION ALL SELECT 'pg_catalog.pg_conversion'::pg_catalog.regclass, oid FROM pg_catalog.pg_conversion
    WHERE connamespace = (SELECT oid FROM ns)
    UNION ALL SELECT 'pg_catalog.pg_opclass'::pg_catalog.regclass, oid FROM pg_catalog.pg_opclass
    WHERE opcnamespace = (SELECT oid FROM ns)
    UNION ALL SELECT 'pg_catalog.pg_opfamily'::pg_catalog.regclass, oid FROM pg_catalog.pg_opfamily
    WHERE opfnamespace = (SELECT oid FROM ns)
    UNION ALL SELECT 'pg_catalog.pg_ts_config'::pg_catalog.regclass, oid FROM pg_catalog.pg_ts_config
    WHERE cfgnamespace = (SELECT oid FROM ns)
    UNION ALL SELECT 'pg_catalog.pg_ts_dict'::pg_catalog.regclass, oid FROM pg_catalog.pg_ts_dict
    WHERE dictnamespace = (SELECT oid FROM ns)
    UNION ALL SELECT 'pg_catalog.pg_ts_parser'::pg_catalog.regclass, oid FROM pg_catalog.pg_ts_parser
    WHERE prsnamespace = (SELECT oid FROM ns)
    UNION ALL SELECT 'pg_catalog.pg_ts_template'::pg_catalog.regclass, oid FROM pg_catalog.pg_ts_template
    WHERE tmplnamespace = (SELECT oid FROM ns)
    UNION ALL SELECT 'pg_catalog.pg_statistic_ext'::pg_catalog.regclass, oid FROM pg_catalog.pg_statistic_ext
    WHERE stxnamespace = (SELECT oid FROM ns)
    UNION ALL SELECT 'pg_catalog.pg_extension'::pg_catalog.regclass, oid FROM pg_catalog.pg_extension
    WHERE extnamespace = (SELECT oid FROM ns)),
described AS (
    SELECT CASE classid WHEN 'pg_catalog.pg_proc'::pg_catalog.regclass THEN 1
                        WHEN 'pg_catalog.pg_class'::pg_catalog.regclass THEN 2 ELSE 3 END AS rank,
           pg_catalog.pg_describe_object(classid, objid, 0) AS what FROM foreign_objects
    UNION ALL
    SELECT 0, pg_catalog.format('CREATE privilege on the schema granted to %s',
                             CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                                  ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END)
    FROM ns, pg_catalog.aclexplode(ns.nspacl) a
    WHERE a.privilege_type = 'CREATE' AND a.grantee <> ns.nspowner)
SELECT ARRAY(SELECT what FROM described WHERE what IS NOT NULL ORDER BY rank, what) AS objects"""


def foreign_objects(plpy, schema: str) -> list[str]:
    """Descriptions of what ``schema`` holds besides releases (empty: releases only)."""
    ids = run(plpy, "SELECT release_id, coalesce(parameters ->> 'storage', release_name::text) AS name "
                    "FROM anon.releases WHERE release_schema = $1", ["text"], [schema])
    temps = [temp_name(r["name"], r["release_id"]) for r in ids]
    return list(run(plpy, FOREIGN_OBJECTS, ["text", "text[]", "int4[]"],
                    [schema, temps, [r["release_id"] for r in ids]])[0]["objects"])


def check_release_only(plpy, schema: str) -> None:
    """Refuse (55000) a release schema that holds anything but releases: USAGE on it would
    hand analysts those objects (a PUBLIC-executable SECURITY DEFINER function, say)."""
    found = foreign_objects(plpy, schema)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise SchemaNotReleaseOnly(
            f'release schema "{schema}" holds {found[0]}{more}, which is not a release',
            detail="Objects that are not releases: " + "; ".join(found[:10]) + ("; ..." if len(found) > 10 else ""),
            hint="Release schemas hold releases only, because analysts get USAGE on them: move those objects "
                 "to another schema (ALTER ... SET SCHEMA) or drop them, or use another release_schema "
                 "(plpy_anon creates it), e.g. the default \"release\".")


def schema_exists(plpy, schema: str) -> bool:
    return bool(run(plpy, "SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1", ["text"], [schema]))


def is_release_schema(plpy, schema: str) -> bool:
    """Whether the schema now named ``schema`` is the one plpy_anon created: same OID. A row whose
    schema was dropped outside plpy_anon names nothing, whoever creates that name again."""
    return bool(run(plpy, """
        SELECT 1 FROM anon.release_schemas s
        JOIN pg_catalog.pg_namespace n ON n.nspname = s.schema_name AND n.oid = s.schema_oid
        WHERE s.schema_name = $1""", ["name"], [schema]))


def schema_oid(plpy, schema: str) -> int | None:
    rows = run(plpy, "SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = $1", ["text"], [schema])
    return rows[0]["oid"] if rows else None


def lock_analysts(plpy, *, shared: bool) -> None:
    fn = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
    run(plpy, f"SELECT pg_catalog.{fn}($1, $2)", ["int4", "int4"], [LOCK_CLASS, ANALYSTS_KEY])


def ensure_release_schema(plpy, schema: str) -> int:
    """Make sure releases can go into ``schema``: create it (and give the registered analysts
    USAGE, once) if it does not exist; otherwise it must be the one plpy_anon created (same OID),
    still holding releases only, or an empty schema of the caller's that no one else may create
    in (one left by DROP EXTENSION, which removes the releases but not their schemas), which is
    adopted. Serialized per schema name, so two first releases in a new schema do not both
    create it. Returns the schema's OID."""
    lock_analysts(plpy, shared=True)     # a concurrent grant_analyst waits for this release
    if not is_release_schema(plpy, schema):
        run(plpy, "SELECT pg_catalog.pg_advisory_xact_lock($1, pg_catalog.hashtext($2))",
            ["int4", "text"], [LOCK_CLASS, schema])
    if is_release_schema(plpy, schema):           # (re-read: another session may have made it)
        check_release_only(plpy, schema)
        check_may_create(plpy, schema)
        return schema_oid(plpy, schema)
    if not schema_exists(plpy, schema):
        plpy.execute(f"CREATE SCHEMA {ident(plpy, schema)}")
        return record_release_schema(plpy, schema)
    if adoptable(plpy, schema):
        return record_release_schema(plpy, schema)
    recorded = run(plpy, "SELECT 1 FROM anon.release_schemas WHERE schema_name = $1", ["name"], [schema])
    # dropping the schema is offered only for an empty one: "public" or a source's schema is
    # no leftover, and DROP SCHEMA ... CASCADE there would be the hint's doing
    empty = run(plpy, """
        SELECT NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                           WHERE d.refclassid = 'pg_catalog.pg_namespace'::pg_catalog.regclass
                             AND d.refobjid = n.oid) AS empty
        FROM pg_catalog.pg_namespace n WHERE n.nspname = $1""", ["text"], [schema])[0]["empty"]
    raise SchemaNotOurs(
        f'schema "{schema}" exists and was not created by plpy_anon: releases go only into '
        "schemas plpy_anon creates",
        detail=(f'plpy_anon created a schema "{schema}" once, but it was dropped outside plpy_anon '
                "and this one was created by someone else. " if recorded else "")
               + "Analysts get USAGE on release schemas, which would give them every object of an "
                 "existing schema (its functions, types, tables). An empty schema is taken over only "
                 "when it is the caller's own and no other role may create objects in it.",
        hint=("Use another release_schema (plpy_anon creates it)"
              + (', e.g. the default "release"' if schema != "release" else "")
              + (f'; or, if schema "{schema}" is an empty leftover (DROP EXTENSION leaves release schemas), '
                 f"DROP SCHEMA {ident(plpy, schema)} and call again." if empty else ".")))


def check_may_create(plpy, schema: str) -> None:
    """A release schema is its creator's: another custodian releases into a schema of its own
    (plpy_anon creates it) rather than sharing one whose owner may drop what is in it; and a
    schema owned by a role that is neither a superuser nor the caller takes no release, since
    its owner could drop or take over what the caller puts there. (Not "a role the caller is a
    member of": a superuser is a member of every role, so its releases went into a schema a
    custodian had created and could replace them with views of her own.)"""
    row = run(plpy, """
        SELECT pg_catalog.has_schema_privilege(n.oid, 'CREATE') AS may,
               n.nspowner = (SELECT c.oid FROM pg_catalog.pg_roles c WHERE c.rolname = current_user)
                   OR r.rolsuper AS trusted,
               pg_catalog.pg_get_userbyid(n.nspowner)::text AS owner
        FROM pg_catalog.pg_namespace n JOIN pg_catalog.pg_roles r ON r.oid = n.nspowner
        WHERE n.nspname = $1""", ["text"], [schema])[0]
    if row["may"] and not row["trusted"]:
        raise InsufficientPrivilege(
            f'release schema "{schema}" belongs to {row["owner"]}, who could drop or replace a release '
            "you put there",
            hint="Pass a release schema of your own (plpy_anon creates it), e.g. the default \"release\" "
                 "if it is yours.")
    if not row["may"]:
        raise InsufficientPrivilege(
            f'release schema "{schema}" belongs to {row["owner"]}: you may not create releases in it',
            hint="Pass a release schema of your own, e.g. release_schema => "
                 + plpy.quote_literal(f"{schema}_" + run(plpy, "SELECT current_user::text AS u")[0]["u"])
                 + " (plpy_anon creates it and you own it), or have " + row["owner"]
                 + f" run GRANT CREATE ON SCHEMA {ident(plpy, schema)} TO you.")


ADOPTABLE = """
SELECT 1 FROM pg_catalog.pg_namespace n
WHERE n.nspname = $1
  AND n.nspowner = (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user)
  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                  WHERE d.refclassid = 'pg_catalog.pg_namespace'::pg_catalog.regclass AND d.refobjid = n.oid)
  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.relnamespace = n.oid)
  AND NOT EXISTS (SELECT 1 FROM pg_catalog.aclexplode(n.nspacl) a
                  WHERE a.privilege_type = 'CREATE' AND a.grantee <> n.nspowner)"""


def adoptable(plpy, schema: str) -> bool:
    """An existing schema may become a release schema: the caller owns it, it is empty, and no
    other role may create objects in it (USAGE would hand analysts nothing but releases)."""
    return bool(run(plpy, ADOPTABLE, ["text"], [schema]))


def record_release_schema(plpy, schema: str) -> int:
    """Register ``schema`` (just created or adopted) as a release schema and give every
    registered analyst USAGE on it. A row left by a schema of that name dropped outside
    plpy_anon now names this one."""
    oid = schema_oid(plpy, schema)
    run(plpy, """INSERT INTO anon.release_schemas (schema_name, schema_oid) VALUES ($1, $2)
                 ON CONFLICT (schema_name) DO UPDATE
                 SET created_at = pg_catalog.now(), schema_oid = EXCLUDED.schema_oid""",
        ["name", "oid"], [schema, oid])
    roles = analysts(plpy)
    if roles:
        plpy.execute(f"GRANT USAGE ON SCHEMA {ident(plpy, schema)} TO "
                     + ", ".join(plpy.quote_ident(r) for r in roles))
    return oid


def release_schemas(plpy) -> list[str]:
    """Release schemas that exist: those plpy_anon created, and any schema a release was created
    in -- the very schemas (same OID), not others created under their names since."""
    rows = run(plpy, """
        SELECT n.nspname::text AS s FROM pg_catalog.pg_namespace n
        WHERE (n.nspname, n.oid) IN (SELECT schema_name, schema_oid FROM anon.release_schemas
                                     UNION SELECT release_schema, schema_oid FROM anon.releases)
        ORDER BY 1""")
    return [r["s"] for r in rows]


def grant_usage(plpy, schema: str, role: str) -> None:
    """USAGE on a release schema for ``role``, unless it holds it already: GRANT rewrites the
    schema's pg_namespace row even when nothing changes, and concurrent rewrites collide."""
    if not has_usage(plpy, schema, role):
        plpy.execute(f"GRANT USAGE ON SCHEMA {ident(plpy, schema)} TO {plpy.quote_ident(role)}")


def has_usage(plpy, schema: str, role: str) -> bool:
    """Whether ``role`` itself holds USAGE on ``schema`` (an explicit ACL entry)."""
    return run(plpy, """
        SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace n, pg_catalog.aclexplode(n.nspacl) a
                       WHERE n.nspname = $1 AND a.privilege_type = 'USAGE'
                         AND a.grantee = (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = $2)) AS u""",
               ["text", "text"], [schema, role])[0]["u"]


def all_releases(plpy) -> list[dict]:
    return list(run(plpy, "SELECT * FROM anon.releases ORDER BY release_id"))


@sql_entry
def grant_analyst(plpy, role: str) -> int:
    """Make ``role`` an analyst; returns the number of releases it can now read."""
    role = check_role(plpy, role)
    lock_analysts(plpy, shared=False)     # waits for releases being created right now
    schemas = release_schemas(plpy)
    for schema in schemas:                 # check all first: USAGE never reaches a foreign object
        check_release_only(plpy, schema)
    run(plpy, "INSERT INTO anon.analysts (role_name) VALUES ($1) ON CONFLICT DO NOTHING", ["name"], [role])
    for schema in schemas:
        grant_usage(plpy, schema, role)
    releases = all_releases(plpy)
    for release in releases:
        grant_release(plpy, release, [role])
    return len(releases)


@sql_entry
def revoke_analyst(plpy, role: str) -> int:
    """Take back what grant_analyst gave; returns the number of releases revoked."""
    if role is None or not role.strip():
        raise InvalidParameter("a role name is required", hint="Pass the role given to anon.grant_analyst.")
    exists = run(plpy, "SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = $1", ["text"], [role])
    deleted = run(plpy, "DELETE FROM anon.analysts WHERE role_name = $1 RETURNING 1", ["name"], [role])
    if not exists:
        if deleted:
            return 0          # the role is gone, and with it its privileges
        raise UndefinedObject(f'role "{role}" does not exist', hint="See SELECT role_name FROM anon.analysts.")
    lock_analysts(plpy, shared=False)
    grantee = plpy.quote_ident(role)
    releases = all_releases(plpy)
    for release in releases:
        for rel in release_relations(plpy, release):
            plpy.execute(f"REVOKE SELECT ON {rel} FROM {grantee}")
    for schema in release_schemas(plpy):   # every release schema: all of them were ours to give
        plpy.execute(f"REVOKE USAGE ON SCHEMA {ident(plpy, schema)} FROM {grantee}")
    return len(releases)
