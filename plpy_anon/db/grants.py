"""Analysts' access: roles that may read every release and nothing else.

``anon.grant_analyst(role)`` records the role in ``anon.analysts`` and grants it USAGE on each
release schema and SELECT on each relation a release owns; ``create_release`` (and every refresh
that rebuilds relations) calls ``grant_release`` so future releases are readable too. Nothing
else is granted: the ``anon`` schema, the catalog, the source tables and the extension's
functions stay closed (900-privileges.sql revokes them from PUBLIC). Reading a release never runs
extension code -- a materialized view's query only runs at refresh, as its owner. A release whose
method restricts it to some roles (``parameters.grantees``: trust-aware releases) is never
granted to analysts.
"""
from __future__ import annotations

from plpy_anon.core.errors import InvalidParameter, UndefinedObject
from plpy_anon.db.errors import sql_entry
from plpy_anon.db.sqltext import ident, jsonb, run


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
    """Qualified names of the relations of a release that exist right now."""
    from plpy_anon.db.releases import owned_relations, relation_exists
    schema = release["release_schema"]
    return [ident(plpy, schema, rel) for rel in owned_relations(plpy, release)
            if relation_exists(plpy, schema, rel)]


def restricted_to(release: dict) -> list[str] | None:
    """The roles a release is meant for when its method restricts it (``parameters.grantees``,
    e.g. a trust-aware release made for one requester), else None: every analyst reads it."""
    params = release["parameters"]
    params = jsonb(params)
    grantees = (params or {}).get("grantees")
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
    grantees = ", ".join(plpy.quote_ident(r) for r in roles)
    plpy.execute(f"GRANT USAGE ON SCHEMA {ident(plpy, release['release_schema'])} TO {grantees}")
    for rel in release_relations(plpy, release):
        plpy.execute(f"GRANT SELECT ON {rel} TO {grantees}")


def all_releases(plpy) -> list[dict]:
    return list(run(plpy, "SELECT * FROM anon.releases ORDER BY release_id"))


@sql_entry
def grant_analyst(plpy, role: str) -> int:
    """Make ``role`` an analyst; returns the number of releases it can now read."""
    role = check_role(plpy, role)
    run(plpy, "INSERT INTO anon.analysts (role_name) VALUES ($1) ON CONFLICT DO NOTHING", ["name"], [role])
    releases = all_releases(plpy)
    for release in releases:
        grant_release(plpy, release, [role])
    return len(releases)


def release_only_schemas(plpy) -> list[str]:
    """Schemas holding releases and nothing else: USAGE on them was ours to give, so it is ours to
    take back. A schema the DBA shares with other objects keeps whatever USAGE it had."""
    rows = run(plpy, """
        SELECT DISTINCT r.release_schema::text AS s FROM anon.releases r
        WHERE NOT EXISTS (
            SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = r.release_schema AND c.relkind IN ('r', 'v', 'm', 'p', 'f')
              AND NOT EXISTS (SELECT 1 FROM anon.releases o
                              WHERE o.release_schema = n.nspname
                                AND (o.release_name = c.relname
                                     OR o.parameters -> 'objects' ? c.relname::text)))
        ORDER BY 1""")
    return [r["s"] for r in rows]


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
    grantee = plpy.quote_ident(role)
    releases = all_releases(plpy)
    for release in releases:
        for rel in release_relations(plpy, release):
            plpy.execute(f"REVOKE SELECT ON {rel} FROM {grantee}")
    for schema in release_only_schemas(plpy):
        plpy.execute(f"REVOKE USAGE ON SCHEMA {ident(plpy, schema)} FROM {grantee}")
    return len(releases)
