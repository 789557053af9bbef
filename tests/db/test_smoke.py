"""The extension installs, its backend runs the venv's packages, and nothing is open to PUBLIC."""
import psycopg
import pytest

import plpy_anon


def test_versions_report_the_venv_packages(db):
    rows = {r[0]: (r[1], r[2]) for r in db.execute("SELECT * FROM anon.versions()").fetchall()}
    assert rows["plpy_anon"][0] == plpy_anon.__version__
    assert rows["python"][1] == "/usr/bin/python3"   # Debian's interpreter, embedded by PL/Python
    for name in ("numpy", "pandas", "sklearn", "sqlglot"):
        assert rows[name][0], name
        assert rows[name][1].startswith("/opt/plpy_anon/venv/") or "/venv" in rows[name][1], rows[name]


def test_extension_version_matches_package(db):
    (version,) = db.execute("SELECT extversion FROM pg_extension WHERE extname = 'plpy_anon'").fetchone()
    assert version == plpy_anon.__version__


def test_no_function_of_ours_is_executable_by_public(db):
    rows = db.execute("""
        SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'anon' AND has_function_privilege('public', p.oid, 'EXECUTE') IS TRUE
          AND EXISTS (SELECT 1 FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
                      WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')""").fetchall()
    assert rows == []


def test_every_function_pins_search_path(db):
    rows = db.execute("""
        SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'anon'
          AND NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) c WHERE c LIKE 'search_path=%')""").fetchall()
    assert rows == []


def test_errors_reach_the_client_without_plpython_prefix(db):
    with pytest.raises(psycopg.errors.InvalidParameterValue) as info:
        db.execute("SELECT anon.mondrian_view('pg_catalog.pg_class', k => 1)")
    assert info.value.diag.message_primary.startswith("k must be at least 2")
    assert "k => 2" in info.value.diag.message_hint


def test_user_facing_functions_are_wrapped(db):
    """Every anon.f the user calls is PL/pgSQL around anon._py_f (890-error-messages.sql), with
    the same arguments, so no PL/Python prefix reaches users."""
    rows = db.execute("""
        SELECT p.proname, l.lanname,
               EXISTS (SELECT 1 FROM pg_proc q WHERE q.pronamespace = p.pronamespace
                       AND q.proname = '_py_' || p.proname AND q.proargtypes = p.proargtypes)
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace JOIN pg_language l ON l.oid = p.prolang
        WHERE n.nspname = 'anon' AND p.proname NOT LIKE '\\_%'""").fetchall()
    assert rows
    assert [r for r in rows if r[1] == "plpython3u"] == []
    wrapped = [r[0] for r in rows if r[1] == "plpgsql" and r[2]]
    assert "mondrian_view" in wrapped and "refresh" in wrapped
