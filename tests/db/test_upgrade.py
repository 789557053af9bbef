"""ALTER EXTENSION plpy_anon UPDATE keeps releases and the catalog, and what follows works.

Two kinds of old version:

* **Every released version** (``sql/versions.txt``, each tagged ``v<version>`` in git): its
  ``sql/``, package and contract helpers are taken from the tag (``git archive``), its install
  script is built for a scratch environment holding that package, a database gets a release of
  every method made by the old code, and it is updated to the current version with the scripts
  ``make install`` put in place, then read, refreshed and verified by the current package.
* **The next version, made now**: in a copy of sql/, ``build.py --freeze`` records the current
  version as released, the version is bumped (to ``<current>.test``, a name no real release will
  use), a new incremental file is added and one declared function's signature changed; the
  upgrade from the current version must run that file, drop the old signature and keep the catalog.

Scratch scripts are installed next to the real ones for the test and removed afterwards (a file of
the same name that was there is put back).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

import plpy_anon
from tests.contract.methods import N_ROWS, insert_rows

ROOT = Path(__file__).resolve().parents[2]
PG_CONFIG = os.environ.get("PG_CONFIG", "/usr/lib/postgresql/15/bin/pg_config")
CURRENT = plpy_anon.__version__
NEXT = f"{CURRENT}.test"
DBNAME = "anon_upgrade"


def released_versions() -> list[str]:
    lines = (ROOT / "sql" / "versions.txt").read_text().splitlines()
    return [line.split()[0] for line in lines if line.strip() and not line.startswith("#")]


RELEASED = released_versions()


def extension_dir() -> Path:
    return Path(subprocess.check_output([PG_CONFIG, "--sharedir"], text=True).strip()) / "extension"


def build_next_version(work: Path, venv: Path) -> Path:
    """The next version's scripts, built by sql/build.py from a modified copy of sql/."""
    shutil.copytree(ROOT / "sql", work / "sql")
    # the build reads the version and the methods' parameters from the package
    shutil.copytree(ROOT / "plpy_anon", work / "plpy_anon", ignore=shutil.ignore_patterns("__pycache__"))
    init = work / "plpy_anon" / "__init__.py"
    build = [sys.executable, str(work / "sql" / "build.py")]
    subprocess.run(build + ["--freeze"], check=True, capture_output=True)
    init.write_text(init.read_text().replace(f'__version__ = "{CURRENT}"', f'__version__ = "{NEXT}"'))
    (work / "sql" / "incremental" / "999-upgrade-probe.sql").write_text(
        "CREATE TABLE anon.upgrade_probe (x integer);\n"
        "ALTER TABLE anon.refresh_history ADD COLUMN note text;\n")
    # a changed signature (declarations: sql/functions/); only the signature is looked at
    ops = work / "sql" / "functions" / "070-operations.toml"
    text = ops.read_text()
    declared = 'name = "unschedule_refresh"\nargs = ["release text"'
    assert declared in text
    ops.write_text(text.replace(declared, declared + ', "quiet boolean DEFAULT false"'))
    out = work / "out"
    subprocess.run(build + ["--out", str(out), "--venv", str(venv), "--no-docs"], check=True, capture_output=True)
    return out


def scratch_environment(root: Path) -> Path:
    """A Python environment whose site-packages holds this package labelled NEXT; dependencies come
    from the real environment through a .pth file."""
    site = root / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    installed = Path(plpy_anon.__file__).resolve().parent
    shutil.copytree(installed, site / "plpy_anon", ignore=shutil.ignore_patterns("__pycache__"))
    init = site / "plpy_anon" / "__init__.py"
    init.write_text(init.read_text().replace(f'__version__ = "{CURRENT}"', f'__version__ = "{NEXT}"'))
    (site / "real-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return root


@pytest.fixture(scope="module")
def next_version():
    target = extension_dir()
    if not os.access(target, os.W_OK):
        pytest.skip(f"cannot install scratch upgrade scripts into {target} (run as root, as CI does)")
    work = Path(tempfile.mkdtemp(prefix="plpy_anon_upgrade_"))
    installed = []
    try:
        out = build_next_version(work, work / "venv")
        names = {p.name for p in out.glob("*.sql")}
        assert {f"plpy_anon--{NEXT}.sql", f"plpy_anon--{CURRENT}--{NEXT}.sql"} <= names
        assert names - {f"plpy_anon--{NEXT}.sql"} == {f"plpy_anon--{v}--{NEXT}.sql" for v in [*RELEASED, CURRENT]}
        for name in (f"plpy_anon--{NEXT}.sql", f"plpy_anon--{CURRENT}--{NEXT}.sql"):
            shutil.copy(out / name, target / name)
            installed.append(target / name)
        env = scratch_environment(work / "venv")
        for path in [work, *work.rglob("*")]:          # the server runs as postgres
            path.chmod(0o755 if path.is_dir() else 0o644)
        yield {"venv": env, "upgrade_script": (out / f"plpy_anon--{CURRENT}--{NEXT}.sql").read_text()}
    finally:
        for path in installed:
            path.unlink(missing_ok=True)
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
def upgrade_db(connect):
    with connect(dbname="postgres") as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(DBNAME)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DBNAME)))
        admin.execute("DROP ROLE IF EXISTS upgrade_analyst")
        admin.execute("CREATE ROLE upgrade_analyst LOGIN")
    yield DBNAME
    with connect(dbname="postgres") as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(DBNAME)))
        admin.execute("DROP ROLE IF EXISTS upgrade_analyst")


SOURCE = """
CREATE TABLE patients (id int PRIMARY KEY, name text, age int, sex text, zip text, diagnosis text);
INSERT INTO patients
SELECT i, 'name ' || i, 20 + (i * 37) % 60, CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END,
       (53700 + (i * 13) % 6)::text, (ARRAY['flu', 'asthma', 'gout'])[1 + i % 3]
FROM generate_series(1, 120) i;
CREATE TABLE fragile (id int PRIMARY KEY, age int, sex text);
INSERT INTO fragile SELECT i, i % 40, 'F' FROM generate_series(1, 30) i;
"""

CATALOG = {
    "releases": "SELECT release_id, release_schema, release_name, source::text, method, parameters, "
                "row_count, achieved_k, metrics, last_error FROM anon.releases ORDER BY 1",
    "roles": "SELECT source::text, column_name, role FROM anon.column_roles ORDER BY 1, 2",
    "hierarchies": "SELECT source::text, column_name, leaf, path FROM anon.hierarchies ORDER BY 1, 2, 3",
    "analysts": "SELECT role_name FROM anon.analysts",
    "history": "SELECT refresh_id, release_id, succeeded, error FROM anon.refresh_history ORDER BY 1",
}


def snapshot(conn) -> dict:
    return {k: conn.execute(q).fetchall() for k, q in CATALOG.items()}


def test_alter_extension_update_keeps_releases_and_catalog(connect, next_version, upgrade_db):
    # the script names the extension's schema by a placeholder (docs/installation.md)
    assert "CREATE TABLE @plpy_anon_schema@.upgrade_probe" in next_version["upgrade_script"]
    assert "CREATE TABLE @plpy_anon_schema@.releases" not in next_version["upgrade_script"]   # shipped: not re-run

    with connect(dbname=upgrade_db) as old:
        old.execute(sql.SQL("CREATE EXTENSION plpy_anon VERSION {} CASCADE").format(sql.Literal(CURRENT)))
        old.execute(SOURCE)
        old.execute("SELECT anon.set_column_role('patients', 'name', 'identifier')")
        old.execute("SELECT anon.set_column_role('patients', 'diagnosis', 'sensitive')")
        old.execute("SELECT anon.set_hierarchy_csv('patients', 'zip', %s)",
                    ("".join(f"5370{i};537**;*\n" for i in range(6)),))
        rel = old.execute("SELECT anon.mondrian_view('patients', k => 5)").fetchone()[0]
        fragile = old.execute("SELECT anon.mondrian_view('fragile', k => 3)").fetchone()[0]
        old.execute("SELECT anon.grant_analyst('upgrade_analyst')")
        old.execute("ALTER TABLE fragile RENAME COLUMN sex TO gender")   # release depends on it
        with pytest.raises(psycopg.Error):
            old.execute("SELECT anon.refresh(%s)", (fragile,))      # a recorded failure
        before = snapshot(old)
        rows_before = sorted(map(str, old.execute(f"SELECT * FROM {rel}").fetchall()))
    assert len(before["history"]) == 1 and before["releases"][1][-1] is not None

    with connect(dbname=upgrade_db) as new:
        new.execute(sql.SQL("ALTER EXTENSION plpy_anon UPDATE TO {}").format(sql.Literal(NEXT)))
        assert new.execute("SELECT extversion FROM pg_extension WHERE extname = 'plpy_anon'").fetchone()[0] == NEXT
        assert snapshot(new) == before                               # catalog kept, row for row
        assert sorted(map(str, new.execute(f"SELECT * FROM {rel}").fetchall())) == rows_before
        assert new.execute("SELECT to_regclass('anon.upgrade_probe') IS NOT NULL").fetchone()[0]
        signatures = new.execute("SELECT oid::regprocedure::text FROM pg_proc "
                                 "WHERE proname = 'unschedule_refresh' ORDER BY 1").fetchall()
        assert signatures == [("anon.unschedule_refresh(text,boolean)",),       # the old ones
                              ("anon_py.unschedule_refresh(text,boolean)",)]    # are gone
        versions = {r[0]: r[2] for r in new.execute("SELECT * FROM anon.versions()").fetchall()}
        assert versions["plpy_anon"].startswith(str(next_version["venv"]))   # the new package runs

        new.execute("INSERT INTO patients SELECT i, 'n', 33, 'F', '53701', 'flu' FROM generate_series(121, 130) i")
        row = new.execute("SELECT row_count, achieved_k FROM anon.refresh(%s)", (rel,)).fetchone()
        assert row[0] == 130 and row[1] >= 5
        assert new.execute("SELECT count(*) FROM anon.refresh_history WHERE succeeded").fetchone()[0] == 1
        public = new.execute("""
            SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname = 'anon' AND has_function_privilege('public', p.oid, 'EXECUTE')
              AND EXISTS (SELECT 1 FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
                          WHERE a.grantee = 0)""").fetchone()[0]
        assert public == 0

    with connect(dbname=upgrade_db, user="upgrade_analyst") as analyst:
        assert analyst.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == 130   # still granted


# Made by the released version's own code, in a subprocess whose sys.path starts with its tree.
OLD_SIDE = """
import json, sys
import psycopg
from tests.contract.methods import METHODS, Context, create_table
conn = psycopg.connect(sys.argv[1], autocommit=True)
conn.execute("CREATE EXTENSION plpy_anon VERSION " + sys.argv[2] + " CASCADE")
source = create_table(conn, "public.people")
conn.execute("SELECT anon.add_requester('upgrade_requester', role => 'upgrade_analyst')")
conn.execute(\"\"\"SELECT anon.define_purpose('upgrade_purpose', priorities => '{"age": 1, "job": 0.2}')\"\"\")
ctx = Context(requester="upgrade_requester", purpose="upgrade_purpose")
made = {m.name: m.create(conn, ctx, source, 5, 2 if m.l_arg else None, release_name=m.name + "_r")
        for m in METHODS}
conn.execute("SELECT anon.grant_analyst('upgrade_analyst')")
package = conn.execute("SELECT location FROM anon.versions() WHERE component = 'plpy_anon'").fetchone()[0]
print(json.dumps({"source": source, "made": made, "package": package}))
"""


def released_commit(version: str) -> str:
    """The commit of a released version: its tag v<version>, or (a clone without tags) the commit
    that recorded it in sql/versions.txt."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    tag = git("rev-parse", "--verify", "--quiet", f"v{version}^{{commit}}")
    if tag.returncode == 0:
        return tag.stdout.strip()
    recorded = git("log", "--format=%H", "--reverse", "-G", f"^{re.escape(version)} ", "--", "sql/versions.txt")
    if recorded.stdout.split():
        return recorded.stdout.split()[0]
    if git("rev-parse", "--is-shallow-repository").stdout.strip() == "true":
        pytest.skip(f"a shallow clone holds neither the tag v{version} nor the commit that released it")
    raise AssertionError(f"version {version} is in sql/versions.txt but neither its tag v{version} "
                         "nor the commit recording it is in this repository ('git fetch --tags')")


@pytest.fixture(params=RELEASED, ids=lambda v: f"from-{v}")
def released_version(request):
    """The released version's tree (from its git tag), its install script built for a scratch
    environment holding its package, installed into the server's extension directory."""
    version = request.param
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the released versions come from their git tags")
    target = extension_dir()
    if not os.access(target, os.W_OK):
        pytest.skip(f"cannot install the released version's script into {target} (run as root, as CI does)")
    commit = released_commit(version)
    archive = subprocess.run(["git", "archive", "--format=tar", commit, "sql", "plpy_anon", "tests"],
                             cwd=ROOT, capture_output=True, check=False)
    assert archive.returncode == 0, archive.stderr.decode()
    work = Path(tempfile.mkdtemp(prefix="plpy_anon_released_"))
    script = target / f"plpy_anon--{version}.sql"
    kept = script.read_bytes() if script.exists() else None
    try:
        tree = work / "tree"
        tree.mkdir()
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
        venv = work / "venv"
        site = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
        shutil.copytree(tree / "plpy_anon", site / "plpy_anon")
        (site / "real-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        out = work / "out"
        subprocess.run([sys.executable, str(tree / "sql" / "build.py"), "--out", str(out),
                        "--venv", str(venv), "--no-docs"], check=True, capture_output=True)
        for path in [work, *work.rglob("*")]:          # the server runs as postgres
            path.chmod(0o755 if path.is_dir() else 0o644)
        shutil.copy(out / f"plpy_anon--{version}.sql", script)
        yield {"version": version, "tree": tree, "venv": venv}
    finally:
        if kept is None:
            script.unlink(missing_ok=True)
        else:
            script.write_bytes(kept)
        shutil.rmtree(work, ignore_errors=True)


def test_releases_of_every_method_made_by_a_released_version_survive_the_update(
        connect, released_version, upgrade_db, pg_server):
    """Issue 27, point 8: one release of each method made by the released version's code; after
    ALTER EXTENSION plpy_anon UPDATE (to the version ``make install`` installed) a new session runs
    the current package, and each release is read by its analyst, refreshed through anon.refresh
    and a plain REFRESH where it has a main materialized view, and verified from its rows again."""
    old = released_version["version"]
    dsn = psycopg.conninfo.make_conninfo(**dict(pg_server, dbname=upgrade_db))
    made = subprocess.run([sys.executable, "-c", OLD_SIDE, dsn, f"'{old}'"],
                          cwd=released_version["tree"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(released_version["tree"])}, check=False)
    assert made.returncode == 0, made.stderr[-3000:]
    made = json.loads(made.stdout.splitlines()[-1])
    assert made["package"].startswith(str(released_version["venv"]))    # the old code built them
    releases = made["made"]
    with connect(dbname=upgrade_db) as conn:
        assert conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'plpy_anon'").fetchone()[0] == old
        before = snapshot(conn)
        counts = {name: conn.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] for name, rel in releases.items()}
        conn.execute("ALTER EXTENSION plpy_anon UPDATE")
        assert conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'plpy_anon'").fetchone()[0] == CURRENT
        assert snapshot(conn) == before                               # catalog kept, row for row

    with connect(dbname=upgrade_db) as new:                          # a backend with the new package
        versions = {r[0]: r[2] for r in new.execute("SELECT * FROM anon.versions()").fetchall()}
        assert versions["plpy_anon"].startswith(sys.prefix) and not versions["plpy_anon"].startswith(
            str(released_version["venv"]))
        for name, rel in releases.items():
            assert new.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == counts[name], name
        insert_rows(new, made["source"], N_ROWS + 1, N_ROWS + 40)
        for name, rel in releases.items():
            row = new.execute("SELECT row_count, verified FROM anon.refresh(%s)", (rel,)).fetchone()
            assert row[1] is True and row[0] > 0, (name, row)
            if new.execute("SELECT relkind FROM pg_class WHERE oid = %s::regclass", (rel,)).fetchone()[0] == "m":
                new.execute(f"REFRESH MATERIALIZED VIEW {rel}")
        status = dict(new.execute("SELECT release, verified FROM anon.release_status()").fetchall())
        assert set(status) == set(releases.values()) and set(status.values()) == {True}, status
        counts = {name: new.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] for name, rel in releases.items()}

    with connect(dbname=upgrade_db, user="upgrade_analyst") as analyst:
        for name, rel in releases.items():
            assert analyst.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == counts[name], name


def test_the_update_deletes_the_hierarchies_of_columns_dropped_under_the_released_version(
        connect, released_version, upgrade_db):
    """The released version kept a hierarchy's leaves after its column or table was dropped; the
    update deletes them and keeps those of live columns."""
    with connect(dbname=upgrade_db) as conn:
        conn.execute(sql.SQL("CREATE EXTENSION plpy_anon VERSION {} CASCADE").format(
            sql.Literal(released_version["version"])))
        conn.execute("CREATE TABLE pay (id int, salary int, age int); CREATE TABLE gone (id int, v int)")
        for table, column in (("pay", "salary"), ("pay", "age"), ("gone", "v")):
            conn.execute("INSERT INTO anon.hierarchies VALUES (%s::regclass, %s, '1', '{1,*}'), "
                         "(%s::regclass, %s, '2', '{2,*}')", (table, column, table, column))
        pay = conn.execute("SELECT 'pay'::regclass::oid").fetchone()[0]
        conn.execute("ALTER TABLE pay DROP COLUMN salary; DROP TABLE gone")
        assert conn.execute("SELECT count(*) FROM anon.hierarchies").fetchone()[0] == 6
        conn.execute("ALTER EXTENSION plpy_anon UPDATE")
        assert conn.execute("SELECT source::oid, column_name::text, leaf FROM anon.hierarchies "
                            "ORDER BY leaf").fetchall() == [(pay, "age", "1"), (pay, "age", "2")]
