"""Server settings the extension reads, honoured only when a superuser chose them.

A custom setting such as ``plpy_anon.loopback_dsn`` is a placeholder PostgreSQL lets *any* role
set: ``SET``, connection options, ``ALTER ROLE ... SET`` on itself, ``ALTER DATABASE ... SET`` as
the database's owner. A setting that makes the backend (the ``postgres`` OS user) do something --
connect somewhere, load code -- must come from a place only a superuser controls:
postgresql.conf / ALTER SYSTEM (source ``configuration file``) or the server's command line.
Anything else is ignored, as if the setting were not set.

A placeholder (a setting no loaded module defines, as every ``plpy_anon.*`` one) is not listed in
pg_settings, so its configured value is read from pg_file_settings, which only superusers and
members of pg_read_all_settings may read: for other roles such a setting is not set.
"""
from __future__ import annotations

from plpy_anon.db.sqltext import run

# pg_settings.source values only a superuser (or the server's administrator) can produce.
SUPERUSER_SOURCES = frozenset({"configuration file", "command line", "environment variable"})


def server_setting(plpy, name: str) -> str | None:
    """The value of ``name`` if it was set in the server's configuration, else None (unset, or set
    by a session, role, database or client, which any role may do)."""
    rows = run(plpy, "SELECT setting, source FROM pg_catalog.pg_settings WHERE name = $1",
               ["text"], [name])
    if rows:
        return rows[0]["setting"] or None if rows[0]["source"] in SUPERUSER_SOURCES else None
    if not may_read_all_settings(plpy):
        return None
    rows = run(plpy, """
        SELECT setting FROM pg_catalog.pg_file_settings
        WHERE name = $1 AND applied ORDER BY seqno DESC LIMIT 1""", ["text"], [name])
    return (rows[0]["setting"] or None) if rows else None


def may_read_all_settings(plpy) -> bool:
    """Whether the caller sees every setting and pg_file_settings (a superuser, or a member of
    pg_read_all_settings)."""
    return run(plpy, """
        SELECT pg_catalog.pg_has_role(current_user, 'pg_read_all_settings', 'USAGE') AS ok""")[0]["ok"]
