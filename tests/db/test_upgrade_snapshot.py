"""An upgraded database has exactly the objects of a fresh install (pgai's snapshot test).

A copy of sql/ is frozen as released (``build.py --freeze``) and the version bumped to
``<current>.snap``: the upgrade script re-runs every code file and the cleanup, and the fresh
script is the same sources -- any difference is the upgrade path's own doing. (Scripts of commits
before the extension created its own schemas cannot be installed with today's control file, which
names pg_catalog: none of them was released.)

One database installs the prior version and runs ALTER EXTENSION UPDATE, another installs the new
version fresh; ``snapshot()`` of both must be equal. The scratch scripts are removed afterwards.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from psycopg import sql

import plpy_anon
from tests.db.test_upgrade import extension_dir, scratch_environment

ROOT = Path(__file__).resolve().parents[2]
CURRENT = plpy_anon.__version__
SNAP = f"{CURRENT}.snap"

# Every object of the extension (pg_depend 'e'), and what defines it.
MEMBERS = """
    SELECT d.classid, d.objid FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
    WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e' AND e.extname = 'plpy_anon'
"""
QUERIES = {
    "functions": f"""
        SELECT n.nspname, p.proname, pg_get_function_identity_arguments(p.oid),
               pg_get_function_result(p.oid), l.lanname, p.prokind, p.provolatile, p.prosecdef,
               p.proisstrict, p.proconfig, p.proacl::text, obj_description(p.oid, 'pg_proc'),
               md5(p.prosrc)
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        JOIN pg_language l ON l.oid = p.prolang
        WHERE (n.nspname IN ('anon', 'anon_py')
               OR p.oid IN (SELECT objid FROM ({MEMBERS}) m WHERE classid = 'pg_proc'::regclass))
        ORDER BY 1, 2, 3""",
    "members": f"""
        SELECT pg_describe_object(classid, objid, 0) FROM ({MEMBERS}) m ORDER BY 1""",
    "relations": """
        SELECT n.nspname, c.relname, c.relkind, c.relacl::text, c.reloptions,
               obj_description(c.oid, 'pg_class'),
               CASE WHEN c.relkind IN ('v', 'm') THEN pg_get_viewdef(c.oid) END
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname IN ('anon', 'anon_py') ORDER BY 1, 2""",
    "columns": """
        SELECT n.nspname, c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod),
               a.attnotnull, pg_get_expr(ad.adbin, ad.adrelid), a.attidentity, a.attgenerated,
               a.attacl::text, col_description(c.oid, a.attnum)
        FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
        WHERE n.nspname IN ('anon', 'anon_py') AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY 1, 2, 3""",
    "constraints": """
        SELECT n.nspname, c.conrelid::regclass::text, c.contypid::regtype::text, c.conname,
               pg_get_constraintdef(c.oid)
        FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
        WHERE n.nspname IN ('anon', 'anon_py') ORDER BY 1, 2, 3, 4""",
    "indexes": """
        SELECT schemaname, tablename, indexname, indexdef FROM pg_indexes
        WHERE schemaname IN ('anon', 'anon_py') ORDER BY 1, 2, 3""",
    "triggers": """
        SELECT t.tgrelid::regclass::text, t.tgname, pg_get_triggerdef(t.oid), t.tgenabled
        FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname IN ('anon', 'anon_py') AND NOT t.tgisinternal ORDER BY 1, 2""",
    "schemas": """
        SELECT n.nspname, pg_get_userbyid(n.nspowner), n.nspacl::text,
               obj_description(n.oid, 'pg_namespace')
        FROM pg_namespace n
        WHERE n.nspname IN ('anon', 'anon_py')
           OR n.oid IN (SELECT objid FROM (""" + MEMBERS + """) m
                        WHERE classid = 'pg_namespace'::regclass)
        ORDER BY 1""",
    "default_acl": """
        SELECT pg_get_userbyid(d.defaclrole), d.defaclnamespace::regnamespace::text,
               d.defaclobjtype, d.defaclacl::text FROM pg_default_acl d ORDER BY 1, 2, 3""",
    "event_triggers": """
        SELECT evtname, evtevent, evtfoid::regprocedure::text, evtenabled, evttags
        FROM pg_event_trigger ORDER BY 1""",
    "types": """
        SELECT n.nspname, t.typname, t.typtype, t.typacl::text,
               pg_catalog.format_type(t.typbasetype, t.typtypmod),
               (SELECT array_agg(e.enumlabel ORDER BY e.enumsortorder) FROM pg_enum e
                WHERE e.enumtypid = t.oid)
        FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
        WHERE n.nspname IN ('anon', 'anon_py') ORDER BY 1, 2""",
    "config_tables": """
        SELECT c::regclass::text FROM pg_extension e, unnest(e.extconfig) c
        WHERE e.extname = 'plpy_anon' ORDER BY 1""",
}


def snapshot(conn) -> dict[str, list[tuple]]:
    """The extension's objects and what defines each, independent of OIDs."""
    return {kind: conn.execute(query).fetchall() for kind, query in QUERIES.items()}


def differences(a: dict, b: dict) -> dict[str, dict[str, list]]:
    return {kind: {"only_upgraded": [r for r in a[kind] if r not in b[kind]],
                   "only_fresh": [r for r in b[kind] if r not in a[kind]]}
            for kind in a if a[kind] != b[kind]}


def installed_venv() -> str:
    """The environment baked into the installed script of the current version."""
    text = (extension_dir() / f"plpy_anon--{CURRENT}.sql").read_text()
    return re.search(r"^    _venv = '([^']+)'$", text, re.MULTILINE).group(1)


def copy_sources(work: Path) -> list[str]:
    shutil.copytree(ROOT / "sql", work / "sql")
    # the build reads the version and the methods' parameters from the package
    shutil.copytree(ROOT / "plpy_anon", work / "plpy_anon", ignore=shutil.ignore_patterns("__pycache__"))
    (work / "docs").mkdir()
    return [sys.executable, str(work / "sql" / "build.py"), "--no-docs"]


def frozen_case(work: Path) -> dict:
    """Prior: the current sources, frozen; new: the same sources as version SNAP."""
    build = copy_sources(work)
    subprocess.run(build + ["--freeze"], check=True, capture_output=True)
    init = work / "plpy_anon" / "__init__.py"
    init.write_text(init.read_text().replace(f'__version__ = "{CURRENT}"', f'__version__ = "{SNAP}"'))
    scratch = scratch_environment_for(work / "venv", SNAP)
    out = work / "out"
    subprocess.run(build + ["--out", str(out), "--venv", str(scratch)], check=True, capture_output=True)
    return {"prior": CURRENT, "new": SNAP,
            "scripts": [out / f"plpy_anon--{SNAP}.sql", out / f"plpy_anon--{CURRENT}--{SNAP}.sql"]}


def scratch_environment_for(root: Path, version: str) -> Path:
    env = scratch_environment(root)          # labels the package tests.db.test_upgrade.NEXT
    from tests.db import test_upgrade
    init = next(env.rglob("plpy_anon/__init__.py"))
    init.write_text(init.read_text().replace(f'__version__ = "{test_upgrade.NEXT}"',
                                             f'__version__ = "{version}"'))
    return env


@pytest.fixture(scope="module", params=["frozen"])
def versions(request):
    target = extension_dir()
    if not os.access(target, os.W_OK):
        pytest.skip(f"cannot install scratch scripts into {target} (run as root, as CI does)")
    work = Path(tempfile.mkdtemp(prefix="plpy_anon_snapshot_"))
    installed = []
    try:
        case = frozen_case(work)
        for script in case["scripts"]:
            shutil.copy(script, target / script.name)
            installed.append(target / script.name)
        for path in [work, *work.rglob("*")]:          # the server runs as postgres
            path.chmod(0o755 if path.is_dir() else 0o644)
        yield case
    finally:
        for path in installed:
            path.unlink(missing_ok=True)
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
def two_databases(connect):
    names = ("anon_snap_upgraded", "anon_snap_fresh")
    with connect(dbname="postgres") as admin:
        for name in names:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield names
    with connect(dbname="postgres") as admin:
        for name in names:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_upgrade_and_fresh_install_have_the_same_objects(connect, versions, two_databases):
    upgraded_db, fresh_db = two_databases
    with connect(dbname=upgraded_db) as upgraded, connect(dbname=fresh_db) as fresh:
        upgraded.execute(sql.SQL("CREATE EXTENSION plpy_anon VERSION {} CASCADE")
                         .format(sql.Literal(versions["prior"])))
        upgraded.execute(sql.SQL("ALTER EXTENSION plpy_anon UPDATE TO {}").format(sql.Literal(versions["new"])))
        fresh.execute(sql.SQL("CREATE EXTENSION plpy_anon VERSION {} CASCADE")
                      .format(sql.Literal(versions["new"])))
        after, expected = snapshot(upgraded), snapshot(fresh)
        assert all(after[k] for k in ("functions", "relations", "columns", "schemas", "members"))
        assert differences(after, expected) == {}

        # The comparison catches what an upgrade script could get wrong: a leftover function, a
        # changed grant, a column default (planted in the fresh database, then rolled back).
        with fresh.transaction(force_rollback=True):
            fresh.execute("CREATE FUNCTION anon.forgotten(integer) RETURNS integer LANGUAGE sql "
                          "AS 'SELECT 1'")
            fresh.execute("ALTER EXTENSION plpy_anon ADD FUNCTION anon.forgotten(integer)")
            fresh.execute("GRANT EXECUTE ON FUNCTION anon.release_status() TO PUBLIC")
            fresh.execute("ALTER TABLE anon.releases ALTER COLUMN row_count SET DEFAULT 7")
            planted = differences(after, snapshot(fresh))
        assert {"functions", "members", "columns"} <= set(planted)
        assert [r[1] for r in planted["functions"]["only_fresh"]].count("forgotten") == 1
        assert "release_status" in {r[1] for r in planted["functions"]["only_fresh"]}
        assert differences(after, snapshot(fresh)) == {}
