"""anon.snapshot: a release copied into a plain table that pg_dump -t carries to a database
without the extension (here: a new database of the test cluster, no CREATE EXTENSION), with
exactly the release's rows and columns; refusals for bad inputs."""
from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.helpers import drop_statement, release_columns


def pg_bin(tool: str) -> str:
    if os.environ.get("PG_BIN"):
        return str(Path(os.environ["PG_BIN"]) / tool)
    out = subprocess.run([os.environ.get("PG_CONFIG", "pg_config"), "--bindir"], capture_output=True, text=True, check=True)
    return str(Path(out.stdout.strip()) / tool)


@pytest.fixture
def pat(db, schema):
    db.execute("CREATE TABLE pat (id serial PRIMARY KEY, age int, zip text, dx text)")
    db.execute("INSERT INTO pat (age, zip, dx) SELECT 20 + g % 40, 'z' || g % 5, 'd' || g % 4 "
               "FROM generate_series(1, 200) g")
    return f"{schema}.pat"


@pytest.fixture
def snapshot_schema(db, schema):
    name = f"{schema[:50]}_snap"
    yield name
    db.execute("DELETE FROM anon.snapshots WHERE snapshot_schema = %s", (name,))
    db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
def empty_database(connect, pg_server):
    """A new database of the test cluster without the extension (a fresh cluster costs ~3 s)."""
    name = f"restore_{uuid.uuid4().hex[:8]}"
    with connect(dbname="postgres") as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield name
    with connect(dbname="postgres") as admin:
        admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def mondrian(db, release_schema, name="pat_k5"):
    return db.execute("SELECT anon.mondrian_view('pat', k => 5, quasi_identifiers => '{age,zip}', "
                      "sensitive => '{dx}', release_schema => %s, release_name => %s)",
                      (release_schema, name)).fetchone()[0]


def rows(conn, relation: str) -> list[tuple]:
    n = len(conn.execute(sql.SQL("SELECT * FROM {} LIMIT 0").format(sql.SQL(relation))).description)
    order = sql.SQL(", ").join(sql.Literal(i) for i in range(1, n + 1))
    return conn.execute(sql.SQL("SELECT * FROM {} ORDER BY {}").format(sql.SQL(relation), order)).fetchall()


def libpq_env(pg_server) -> dict:
    return {**os.environ, "PGHOST": pg_server["host"], "PGPORT": str(pg_server["port"]),
            "PGUSER": pg_server["user"]}


def test_dump_of_a_snapshot_restores_without_the_extension_with_the_release_rows(
        db, connect, pg_server, pat, release_schema, snapshot_schema, empty_database):
    rel = mondrian(db, release_schema)
    snap = db.execute("SELECT anon.snapshot(%s, snapshot_schema => %s)", (rel, snapshot_schema)).fetchone()[0]
    day = db.execute("SELECT to_char(now(), 'YYYYMMDD')").fetchone()[0]
    assert snap == f"{snapshot_schema}.pat_k5_{day}"
    released = rows(db, rel)
    assert len(released) == 200 and rows(db, snap) == released
    assert release_columns(db, snap) == release_columns(db, rel)
    # a plain table, owned by the caller, granted to nobody, depending on nothing of the extension
    kind, owner, acl = db.execute("SELECT relkind, pg_get_userbyid(relowner), relacl FROM pg_class "
                                  "WHERE oid = %s::regclass", (snap,)).fetchone()
    assert (kind, owner, acl) == ("r", pg_server["user"], None)
    refs = db.execute("""
        SELECT DISTINCT pg_describe_object(d.refclassid, d.refobjid, 0) FROM pg_depend d
        WHERE d.classid = 'pg_class'::regclass AND d.objid = %s::regclass""", (snap,)).fetchall()
    assert [r[0] for r in refs] == [f"schema {snapshot_schema}"]

    env = libpq_env(pg_server)
    dump = subprocess.run([pg_bin("pg_dump"), "-d", "anon_test", "-t", snap, "--no-owner"],
                          env=env, capture_output=True, text=True, check=True).stdout
    code = [line for line in dump.splitlines() if not line.startswith("COMMENT ON TABLE")]
    assert not [line for line in code if "anon." in line or "anon_py." in line or "_partition" in line]
    assert "CREATE TABLE" in dump and "MATERIALIZED" not in dump and "pat" in dump
    subprocess.run([pg_bin("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", empty_database,
                    "-c", f"CREATE SCHEMA {snapshot_schema}"], env=env, check=True, capture_output=True)
    subprocess.run([pg_bin("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", empty_database],
                   input=dump, env=env, text=True, check=True, capture_output=True)
    with connect(dbname=empty_database) as other:
        assert other.execute("SELECT to_regnamespace('anon'), to_regnamespace('anon_py'), "
                             "(SELECT count(*) FROM pg_extension WHERE extname = 'plpy_anon')").fetchone() \
            == (None, None, 0)
        assert rows(other, snap) == released
        comment = other.execute("SELECT obj_description(%s::regclass, 'pg_class')", (snap,)).fetchone()[0]
    meta = json.loads(comment.removeprefix("plpy_anon snapshot "))
    assert meta["method"] == "mondrian" and meta["parameters"]["k"] == 5
    assert meta["achieved_k"] >= 5 and meta["row_count"] == 200 and meta["snapshot_rows"] == 200
    assert meta["refreshed_at"] and meta["extension_version"]
    assert [c["name"] for c in meta["columns"]] == ["age", "zip", "dx"]


def test_a_snapshot_keeps_its_rows_when_the_source_changes_and_outlives_its_release(
        db, pat, release_schema, snapshot_schema):
    rel = mondrian(db, release_schema)
    snap = db.execute("SELECT anon.snapshot(%s, 'frozen', %s)", (rel, snapshot_schema)).fetchone()[0]
    before = rows(db, snap)
    db.execute("UPDATE pat SET dx = 'changed' WHERE id % 2 = 0")
    db.execute("SELECT anon.refresh(%s)", (rel,))
    assert rows(db, rel) != before            # the release moved on
    assert rows(db, snap) == before           # the snapshot did not
    row = db.execute("SELECT release, row_count, metadata->>'method' FROM anon.snapshots "
                     "WHERE snapshot_schema = %s AND snapshot_name = 'frozen'", (snapshot_schema,)).fetchone()
    assert row == (rel, 200, "mondrian")
    db.execute("SELECT anon.drop_release(%s)", (rel,))
    assert rows(db, snap) == before
    assert db.execute("SELECT count(*) FROM anon.snapshots WHERE snapshot_schema = %s",
                      (snapshot_schema,)).fetchone()[0] == 1


def test_bad_inputs_are_refused(db, pat, release_schema, snapshot_schema):
    rel = mondrian(db, release_schema)
    with pytest.raises(psycopg.errors.UndefinedObject, match='release "no_such" does not exist'):
        db.execute("SELECT anon.snapshot('no_such')")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="argument release must not be NULL"):
        db.execute("SELECT anon.snapshot(NULL)")
    db.execute("SELECT anon.snapshot(%s, 'once', %s)", (rel, snapshot_schema))
    with pytest.raises(psycopg.errors.DuplicateObject) as info:
        db.execute("SELECT anon.snapshot(%s, 'once', %s)", (rel, snapshot_schema))
    assert "replace => true" in info.value.diag.message_hint
    db.execute("SELECT anon.snapshot(%s, 'once', %s, replace => true)", (rel, snapshot_schema))
    # replace never drops what is not a snapshot
    db.execute(sql.SQL("CREATE TABLE {}.mine (x int)").format(sql.Identifier(snapshot_schema)))
    with pytest.raises(psycopg.errors.DuplicateObject, match="is not a snapshot"):
        db.execute("SELECT anon.snapshot(%s, 'mine', %s, replace => true)", (rel, snapshot_schema))
    # never into a release schema (analysts have USAGE there) nor the extension's schemas
    for target in (release_schema, "anon", "anon_py"):
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="snapshots do not go into"):
            db.execute("SELECT anon.snapshot(%s, 'x', %s)", (rel, target))
    # a stale release: its relation was re-created outside plpy_anon
    db.execute(drop_statement(db, rel))
    db.execute(sql.SQL("CREATE ROLE {} ").format(sql.Identifier(f"{snapshot_schema}_o")))
    try:
        db.execute(sql.SQL("CREATE TABLE {} (age int)").format(sql.SQL(rel)))
        db.execute(sql.SQL("ALTER TABLE {} OWNER TO {}").format(sql.SQL(rel), sql.Identifier(f"{snapshot_schema}_o")))
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="outside plpy_anon"):
            db.execute("SELECT anon.snapshot(%s, 'stale', %s)", (rel, snapshot_schema))
    finally:
        db.execute(sql.SQL("DROP TABLE {}").format(sql.SQL(rel)))
        db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(f"{snapshot_schema}_o")))


def test_analysts_cannot_read_a_snapshot(db, connect, pat, release_schema, snapshot_schema):
    analyst = f"snap_{uuid.uuid4().hex[:8]}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(analyst)))
    try:
        rel = mondrian(db, release_schema)
        db.execute("SELECT anon.grant_analyst(%s)", (analyst,))
        snap = db.execute("SELECT anon.snapshot(%s, 'private', %s)", (rel, snapshot_schema)).fetchone()[0]
        with connect(user=analyst) as conn:
            assert len(conn.execute(sql.SQL("SELECT * FROM {}").format(sql.SQL(rel))).fetchall()) == 200
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(sql.SQL("SELECT * FROM {}").format(sql.SQL(snap)))
    finally:
        db.execute("SELECT anon.revoke_analyst(%s)", (analyst,))
        db.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(analyst)))
        db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(analyst)))


def test_a_release_of_several_relations_is_snapshotted_relation_by_relation(db, pat, release_schema, snapshot_schema):
    rel = db.execute("SELECT anon.break_merge('pat', k => 5, l => 2, sensitive => ARRAY['dx'], "
                     "quasi_identifiers => ARRAY['age','zip'], identifiers => ARRAY['id'], "
                     "release_schema => %s)", (release_schema,)).fetchone()[0]
    objects = db.execute("SELECT parameters->'objects' FROM anon.releases WHERE format('%%I.%%I', "
                         "release_schema, release_name) = %s", (rel,)).fetchone()[0]
    with pytest.raises(psycopg.errors.FeatureNotSupported) as info:
        db.execute("SELECT anon.snapshot(%s, snapshot_schema => %s)", (rel, snapshot_schema))
    assert all(o in info.value.diag.message_primary for o in objects)
    assert "anon.snapshot(" in info.value.diag.message_hint
    for name in objects:
        qualified = f"{release_schema}.{name}"
        snap = db.execute("SELECT anon.snapshot(%s, snapshot_schema => %s)", (qualified, snapshot_schema)).fetchone()[0]
        assert rows(db, snap) == rows(db, qualified)
        assert db.execute("SELECT relkind FROM pg_class WHERE oid = %s::regclass", (snap,)).fetchone()[0] == "r"


def test_a_snapshot_schema_owned_by_another_role_is_refused(db, pat, release_schema, snapshot_schema):
    """Its owner could drop or rename the snapshot: refused (42501) naming the owner and the fix;
    the same schema once handed to the caller is accepted."""
    rel = mondrian(db, release_schema)
    other = f"{snapshot_schema}_owner"
    db.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(other)))
    db.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(snapshot_schema)))
    try:
        db.execute(sql.SQL("ALTER SCHEMA {} OWNER TO {}").format(
            sql.Identifier(snapshot_schema), sql.Identifier(other)))
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as info:
            db.execute("SELECT anon.snapshot(%s, 'taken', %s)", (rel, snapshot_schema))
        assert f'owned by role "{other}"' in info.value.diag.message_primary
        assert "snapshot_schema" in info.value.diag.message_hint
        assert db.execute("SELECT count(*) FROM anon.snapshots WHERE snapshot_name = 'taken'"
                          ).fetchone()[0] == 0
        db.execute(sql.SQL("ALTER SCHEMA {} OWNER TO CURRENT_USER").format(
            sql.Identifier(snapshot_schema)))
        db.execute("SELECT anon.snapshot(%s, 'taken', %s)", (rel, snapshot_schema))
    finally:
        db.execute(sql.SQL("ALTER SCHEMA {} OWNER TO CURRENT_USER").format(
            sql.Identifier(snapshot_schema)))
        db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(other)))
