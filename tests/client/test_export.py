"""AnonClient.export: a release's rows written to a file (csv, sql; parquet only with pyarrow)
with FILE.meta.json beside it; the sql script loads with psql into a database without plpy_anon."""
from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import uuid

import pytest
from psycopg import sql

from plpy_anon.client import AnonClient, errors
from tests.db.test_snapshot import libpq_env, pg_bin, rows
from tests.helpers import release_schema_of

TABLE = """
CREATE TABLE pat (id serial PRIMARY KEY, age int, zip text, dx text);
INSERT INTO pat (age, zip, dx) SELECT 20 + g % 40, 'z' || g % 5, 'd' || g % 4 FROM generate_series(1, 200) g;
"""


@pytest.fixture
def release(db, schema):
    db.execute(TABLE)
    return db.execute("SELECT anon.mondrian_view('pat', k => 5, quasi_identifiers => '{age,zip}', "
                      "sensitive => '{dx}', release_schema => %s)", (release_schema_of(schema),)).fetchone()[0]


@pytest.fixture
def anon(db):
    return AnonClient(connection=db)


def test_csv_export_holds_exactly_the_release_rows_and_a_metadata_file(db, anon, release, tmp_path):
    out = tmp_path / "pat.csv"
    meta = anon.export(release, out, format="csv")
    with open(out, newline="") as f:
        written = list(csv.reader(f))
    assert written[0] == ["age", "zip", "dx"]
    expected = db.execute(sql.SQL("SELECT age::text, zip::text, dx FROM {} ORDER BY age, zip, dx").format(
        sql.SQL(release))).fetchall()
    assert [tuple(r) for r in written[1:]] == expected and len(expected) == 200
    on_disk = json.loads((tmp_path / "pat.csv.meta.json").read_text())
    assert on_disk == json.loads(json.dumps(meta, default=str))
    catalog = db.execute("SELECT achieved_k, row_count FROM anon.releases WHERE format('%%I.%%I', "
                         "release_schema, release_name) = %s", (release,)).fetchone()
    assert (on_disk["achieved_k"], on_disk["row_count"], on_disk["exported_rows"]) == (*catalog, 200)
    assert on_disk["method"] == "mondrian" and on_disk["parameters"]["k"] == 5
    assert on_disk["format"] == "csv" and on_disk["exported_at"] and on_disk["refreshed_at"]
    assert on_disk["extension_version"] == anon.extension_version()
    # nothing about the source beyond the release: not its name, nor the columns left out ("id")
    assert "source" not in on_disk and "id" not in json.dumps(on_disk).replace('"', " ").split()


def test_sql_export_loads_into_a_database_without_the_extension(db, connect, pg_server, anon, release, tmp_path):
    out = tmp_path / "pat.sql"
    anon.export(release, out, format="sql")
    text = out.read_text()
    assert "anon." not in text.split("COPY ", 1)[0].replace("plpy_anon export", "").split("COMMENT ON", 1)[0]
    name = f"load_{uuid.uuid4().hex[:8]}"
    with connect(dbname="postgres") as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        subprocess.run([pg_bin("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", name, "-f", str(out)],
                       env=libpq_env(pg_server), check=True, capture_output=True)
        table = release.split(".")[1]
        with connect(dbname=name) as other:
            assert other.execute("SELECT count(*) FROM pg_extension WHERE extname = 'plpy_anon'").fetchone()[0] == 0
            assert rows(other, table) == rows(db, release)
            comment = other.execute("SELECT obj_description(%s::regclass, 'pg_class')", (table,)).fetchone()[0]
        assert json.loads(comment.removeprefix("plpy_anon export "))["method"] == "mondrian"
    finally:
        with connect(dbname="postgres") as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.mark.skipif(importlib.util.find_spec("pyarrow") is not None, reason="pyarrow is installed")
def test_parquet_without_pyarrow_is_refused_naming_the_fix(anon, release, tmp_path):
    with pytest.raises(errors.PrerequisiteMissing) as info:
        anon.export(release, tmp_path / "pat.parquet", format="parquet")
    assert "pyarrow" in info.value.message and "pip install pyarrow" in info.value.hint
    assert not os.listdir(tmp_path)


def test_export_refusals(anon, release, tmp_path):
    with pytest.raises(errors.UndefinedObject, match='release "no_such" does not exist'):
        anon.export("no_such", tmp_path / "x.csv")
    with pytest.raises(errors.InvalidParameter, match="unknown export format"):
        anon.export(release, tmp_path / "x.xlsx", format="xlsx")
    assert not os.listdir(tmp_path)


def test_the_client_calls_no_function_of_a_schema_on_the_administrators_search_path(db, anon, release, tmp_path):
    # CVE-2018-1058's pattern: a role that can create functions in a schema on the
    # administrator's search_path adds overloads that match the client's calls better than the
    # built-ins (exact types instead of VARIADIC "any" or a defaulted argument). The client
    # qualifies what it calls with pg_catalog, so none of them runs.
    db.execute("""
        CREATE FUNCTION format(text, name, name) RETURNS text LANGUAGE plpgsql AS
            $$BEGIN RAISE EXCEPTION 'planted format ran'; END$$;
        CREATE FUNCTION parse_ident(text) RETURNS text[] LANGUAGE plpgsql AS
            $$BEGIN RAISE EXCEPTION 'planted parse_ident ran'; END$$;
        CREATE FUNCTION cardinality(text[]) RETURNS int LANGUAGE plpgsql AS
            $$BEGIN RAISE EXCEPTION 'planted cardinality ran'; END$$;""")
    try:
        # the planted functions would run: an unqualified call picks them
        with pytest.raises(Exception, match="planted format ran"):
            db.execute("SELECT format('%I.%I', 'a'::name, 'b'::name)")
        assert anon.release_name(release.split(".")[1]) == release
        assert anon.release(release)["method"] == "mondrian"
        meta = anon.export(release, tmp_path / "pat.sql", format="sql")
        assert meta["exported_rows"] == 200
        assert anon.extension_version() and anon.available_versions()
    finally:    # the fixture's own cleanup calls format()
        db.execute("DROP FUNCTION format(text, name, name), parse_ident(text), cardinality(text[])")


def test_a_sql_export_runs_nothing_a_table_name_carries(db, connect, pg_server, anon, schema, tmp_path):
    """A review named a table "visits<CR>\\! id > file #": the export wrote the release's name in
    a ``--`` comment, psql ended the comment at the carriage return and ran the shell command on
    the machine loading the file. Names are written there with control characters replaced."""
    table = "pat\r\\echo PLANTED_BY_NAME"
    db.execute(sql.SQL("CREATE TABLE {} (age int, zip text, dx text)").format(sql.Identifier(table)))
    db.execute(sql.SQL("INSERT INTO {} SELECT 20 + g % 40, 'z' || g % 5, 'd' || g % 4 "
                       "FROM generate_series(1, 100) g").format(sql.Identifier(table)))
    release = db.execute("SELECT anon.mondrian_view(%s, k => 5, quasi_identifiers => '{age,zip}', "
                         "sensitive => '{dx}', release_schema => %s)",
                         (sql.Identifier(table).as_string(db), release_schema_of(schema))).fetchone()[0]
    out = tmp_path / "named.sql"
    anon.export(release, out, format="sql")
    header = out.read_bytes().split(b"COPY ", 1)[0]
    comments = [line for line in header.split(b"\n") if line.startswith(b"--")]
    assert comments and not any(b"\r" in line for line in comments)
    name = f"load_{uuid.uuid4().hex[:8]}"
    with connect(dbname="postgres") as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        loaded = subprocess.run([pg_bin("psql"), "-X", "-v", "ON_ERROR_STOP=1", "-d", name, "-f", str(out)],
                                env=libpq_env(pg_server), check=True, capture_output=True, text=True)
        assert "PLANTED_BY_NAME" not in loaded.stdout + loaded.stderr
        with connect(dbname=name) as other:          # the rows arrived under the quoted name
            assert other.execute(sql.SQL("SELECT count(*) FROM {}").format(
                sql.Identifier(release.split(".", 1)[1].strip('"').replace('""', '"')))).fetchone()[0] == 100
    finally:
        with connect(dbname="postgres") as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
