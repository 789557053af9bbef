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
    assert "pyarrow" in info.value.message and "pip install './[parquet]' in a clone" in info.value.hint
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


# -- typed Parquet and formula-safe CSV (issue 31) ------------------------------------------
TYPED = """
CREATE TABLE typed (id serial PRIMARY KEY, age int, zip text, visit date, amount numeric, ok boolean,
                    dx text, seen timestamptz, w float8);
INSERT INTO typed (age, zip, visit, amount, ok, dx, seen, w)
SELECT 20 + g % 40, 'z' || g % 5, date '2020-01-01' + g % 300, 12345678901234567890.123 + g, g % 2 = 0,
       CASE g % 4 WHEN 0 THEN '=HYPERLINK("http://x")' WHEN 1 THEN '+1' WHEN 2 THEN '@SUM(A1)' ELSE 'flu' END,
       timestamptz '2026-01-01 00:00:00+00' + g * interval '1 hour',
       CASE g WHEN 1 THEN 'NaN'::float8 WHEN 2 THEN '-Infinity' WHEN 3 THEN NULL ELSE g / 7.0 END
FROM generate_series(1, 200) g;
"""


@pytest.fixture
def typed_release(db, schema):
    db.execute(TYPED)
    return db.execute("SELECT anon.mondrian_view('typed', k => 5, quasi_identifiers => '{age,zip,visit}', "
                      "sensitive => '{amount,ok,dx,seen,w}', release_schema => %s)",
                      (release_schema_of(schema),)).fetchone()[0]


def test_parquet_export_is_typed_streamed_and_carries_the_metadata(db, anon, typed_release, tmp_path, monkeypatch):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    from plpy_anon.client import parquet
    monkeypatch.setattr(parquet, "CHUNK_BYTES", 16 << 10)      # 200 rows of ~500 bytes: row groups
    out = tmp_path / "typed.parquet"
    meta = anon.export(typed_release, out, format="parquet")
    assert meta["exported_rows"] == 200
    table = pq.read_table(out)
    assert pq.ParquetFile(out).metadata.num_row_groups >= 4                  # written as read
    types = {f.name: f.type for f in table.schema}
    assert types["age"] == pa.struct([("lower", pa.int32()), ("upper", pa.int32()), ("lower_inclusive", pa.bool_()),
                                      ("upper_inclusive", pa.bool_()), ("empty", pa.bool_())])
    assert types["visit"].field("lower").type == pa.date32()
    assert types["zip"] == pa.list_(pa.string()) and types["dx"] == pa.string()
    assert types["amount"] == pa.string() and types["ok"] == pa.bool_()
    assert types["seen"] == pa.timestamp("us", tz="UTC") and types["w"] == pa.float64()
    expected = db.execute(sql.SQL(
        "SELECT lower(age), upper(age), lower_inc(age), upper_inc(age), zip, lower(visit), upper(visit), amount::text, "
        "ok, dx, seen "
        "FROM {} ORDER BY age, zip, visit, amount, ok, dx, seen").format(sql.SQL(typed_release))).fetchall()
    got = table.to_pylist()
    assert [(r["age"]["lower"], r["age"]["upper"], r["age"]["lower_inclusive"], r["age"]["upper_inclusive"],
             r["zip"], r["visit"]["lower"], r["visit"]["upper"], r["amount"], r["ok"], r["dx"], r["seen"])
            for r in got] == [tuple(e) for e in expected]
    assert got[0]["visit"]["lower"] <= got[0]["visit"]["upper"]
    floats = db.execute(sql.SQL("SELECT w FROM {} ORDER BY age, zip, visit, amount, ok, dx, seen, w").format(
        sql.SQL(typed_release))).fetchall()
    assert [repr(r["w"]) for r in got] == [repr(w) for (w,) in floats]            # NaN, -inf, None too
    assert {"nan", "-inf", "None"} <= {repr(r["w"]) for r in got}
    assert any(r["amount"].startswith("1234567890123456789") and "." in r["amount"] for r in got)
    embedded = json.loads(table.schema.metadata[b"plpy_anon"])
    assert embedded["method"] == "mondrian" and embedded["parameters"]["k"] == 5
    assert embedded["achieved_k"] >= 5 and embedded["exported_rows"] == 200


def test_a_csv_cell_a_spreadsheet_would_run_is_written_with_a_quote_unless_asked_not_to(anon, typed_release, tmp_path):
    protected = tmp_path / "protected.csv"
    anon.export(typed_release, protected, format="csv")
    with open(protected, newline="") as f:
        cells = {row["dx"] for row in csv.DictReader(f)}
    assert cells == {"'=HYPERLINK(\"http://x\")", "'+1", "'@SUM(A1)", "flu"}
    raw = tmp_path / "raw.csv"
    anon.export(typed_release, raw, format="csv", formula_protection=False)
    with open(raw, newline="") as f:
        assert {row["dx"] for row in csv.DictReader(f)} == {'=HYPERLINK("http://x")', "+1", "@SUM(A1)", "flu"}


def test_a_csv_number_keeps_its_sign(db, anon, schema, tmp_path):
    db.execute("CREATE TABLE neg (id serial PRIMARY KEY, age int, dx int)")
    db.execute("INSERT INTO neg (age, dx) SELECT g % 30, -g FROM generate_series(1, 60) g")
    rel = db.execute("SELECT anon.mondrian_view('neg', k => 5, quasi_identifiers => '{age}', sensitive => '{dx}', "
                     "release_schema => %s)", (release_schema_of(schema),)).fetchone()[0]
    anon.export(rel, tmp_path / "neg.csv", format="csv")
    with open(tmp_path / "neg.csv", newline="") as f:
        assert sorted(int(row["dx"]) for row in csv.DictReader(f)) == list(range(-60, 0))


def test_parquet_refuses_an_infinite_date_naming_the_formats_that_keep_it(db, anon, schema, tmp_path):
    pytest.importorskip("pyarrow")
    db.execute("CREATE TABLE inf (id serial PRIMARY KEY, visit date, dx text)")
    db.execute("INSERT INTO inf (visit, dx) SELECT CASE WHEN g = 1 THEN '-infinity'::date ELSE date '2020-01-01' + g END, "
               "'d' || g % 3 FROM generate_series(1, 40) g")
    rel = db.execute("SELECT anon.mondrian_view('inf', k => 5, quasi_identifiers => '{visit}', sensitive => '{dx}', "
                     "release_schema => %s)", (release_schema_of(schema),)).fetchone()[0]
    with pytest.raises(errors.InvalidParameter) as info:
        anon.export(rel, tmp_path / "inf.parquet", format="parquet")
    assert "Parquet cannot" in info.value.message and "csv or sql" in info.value.hint
    assert not (tmp_path / "inf.parquet").exists()                 # nothing half-written


def test_formula_protection_covers_the_header_and_cells_after_white_space(db, anon, schema, tmp_path):
    """Found by review: a column named like a formula reached the header as is, and a value
    starting with white space or an invisible character before the = was not protected."""
    db.execute('CREATE TABLE f (id serial PRIMARY KEY, age int, "=HYPERLINK(""http://x"")" text)')
    db.execute("""INSERT INTO f (age, "=HYPERLINK(""http://x"")")
                  SELECT g % 10, (ARRAY[' =1+1', E'\\u00a0+cmd', E'\\u200b@SUM(A1)', E'\\uff1d1', 'plain'])[1 + g % 5]
                  FROM generate_series(1, 50) g""")
    rel = db.execute("""SELECT anon.mondrian_view('f', k => 5, quasi_identifiers => '{age}',
                        sensitive => '{"=HYPERLINK(\\"http://x\\")"}', release_schema => %s)""",
                     (release_schema_of(schema),)).fetchone()[0]
    out = tmp_path / "f.csv"
    anon.export(rel, out, format="csv")
    with open(out, newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["age", "'=HYPERLINK(\"http://x\")"]
    assert {r[1] for r in rows[1:]} == {"' =1+1", "'\u00a0+cmd", "'\u200b@SUM(A1)", "'\uff1d1", "plain"}


def test_a_release_with_a_json_column_exports_and_a_failed_export_leaves_no_file(db, anon, schema, tmp_path):
    pytest.importorskip("pyarrow")
    db.execute("CREATE TABLE j (id serial PRIMARY KEY, age int, doc json, seen date)")
    db.execute("""INSERT INTO j (age, doc, seen) SELECT g % 10, json_build_object('n', g % 3),
                  CASE WHEN g = 1 THEN 'infinity'::date ELSE date '2024-01-01' + g END FROM generate_series(1, 40) g""")
    rel = db.execute("SELECT anon.mondrian_view('j', k => 5, quasi_identifiers => '{age}', sensitive => '{doc,seen}', "
                     "release_schema => %s)", (release_schema_of(schema),)).fetchone()[0]
    for fmt in ("csv", "sql"):                     # json has no ordering: ordered by its text
        assert anon.export(rel, tmp_path / f"j.{fmt}", format=fmt)["exported_rows"] == 40
    with pytest.raises(errors.InvalidParameter):   # the infinite date
        anon.export(rel, tmp_path / "j.parquet", format="parquet")
    assert not (tmp_path / "j.parquet").exists() and not (tmp_path / "j.parquet.meta.json").exists()
