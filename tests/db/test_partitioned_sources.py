"""Partitioned tables and inheritance parents are released whole, by every method (issue 10).

ctids repeat across partitions / children (every one starts at (0,1)), so a release that joined by
ctid alone, or read ``FROM ONLY``, would lose or duplicate rows. Each check counts the released
rows against ``SELECT count(*) FROM <parent>`` and joins them back by id, in SQL.
"""
from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from tests.db.test_trust import purpose, record, requester, role  # noqa: F401 (fixtures)
from tests.helpers import class_sizes, release_schema_of

COLUMNS = """(id int, name text, age int, sex text, zip text, born date, perf float8,
              salary int, diagnosis text)"""
ROWS = """SELECT i, 'p' || i, 18 + (i * 37) % 70, CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END,
                 (53700 + (i * 13) % 40)::text, DATE '1950-01-01' + (i * 97) % 20000,
                 40 + ((i * 53) % 600) / 10.0, 20000 + (i * 7919) % 50000,
                 (ARRAY['flu', 'hiv', 'cancer', 'asthma', 'gout'])[1 + (i * 7) % 5]
          FROM generate_series({lo}, {hi}) i"""
QIS = ["age", "sex", "zip", "born"]


def partitioned(db):
    """Declarative: three partitions, one of them the default (300 rows)."""
    db.execute(f"CREATE TABLE src {COLUMNS} PARTITION BY RANGE (id)")
    db.execute("CREATE TABLE src_1 PARTITION OF src FOR VALUES FROM (1) TO (101)")
    db.execute("CREATE TABLE src_2 PARTITION OF src FOR VALUES FROM (101) TO (201)")
    db.execute("CREATE TABLE src_default PARTITION OF src DEFAULT")
    db.execute("INSERT INTO src " + ROWS.format(lo=1, hi=300))
    return 300


def inherited(db):
    """Inheritance: 20 rows in the parent, 100 in each of two children (one with an extra column)."""
    db.execute(f"CREATE TABLE src {COLUMNS}")
    db.execute("CREATE TABLE src_c1 () INHERITS (src)")
    db.execute("CREATE TABLE src_c2 (extra int) INHERITS (src)")
    db.execute("INSERT INTO src " + ROWS.format(lo=1, hi=20))
    db.execute("INSERT INTO src_c1 " + ROWS.format(lo=21, hi=120))
    db.execute("INSERT INTO src_c2 " + ROWS.format(lo=121, hi=220))
    return 220


@pytest.fixture(params=[partitioned, inherited], ids=["partitioned", "inherited"])
def source(request, db, schema):
    n = request.param(db)
    assert db.execute("SELECT count(*) FROM src").fetchone()[0] == n
    assert db.execute("SELECT count(*) FROM ONLY src").fetchone()[0] < n
    return f'"{schema}".src'


def count(db, relation):
    return db.execute(f"SELECT count(*) FROM {relation}").fetchone()[0]


def check_rows_released_once(db, rel, id_column="id", key="id"):
    """Every source row appears exactly once in the release (joined back by its unique id)."""
    n = count(db, "src")
    assert count(db, rel) == n
    assert db.execute(f"SELECT count(DISTINCT {id_column}) FROM {rel}").fetchone()[0] == n
    assert db.execute(f"SELECT count(*) FROM {rel} r JOIN src s ON s.{key} = r.{id_column}"
                      ).fetchone()[0] == n


def check_generalized(db, rel, k):
    check_rows_released_once(db, rel)
    bad = db.execute(f"""SELECT count(*) FROM {rel} r JOIN src s USING (id)
                         WHERE NOT (r.age @> s.age AND r.born @> s.born AND r.sex @> ARRAY[s.sex]
                                    AND r.zip @> ARRAY[s.zip])""").fetchone()[0]
    assert bad == 0
    assert min(class_sizes(db, rel, QIS)) >= k


def test_mondrian_releases_every_row_of_every_partition(db, schema, source):
    rel = db.execute("SELECT anon.mondrian_view(%s, k => 5, quasi_identifiers => %s, "
                     "sensitive => ARRAY['id', 'diagnosis'], release_schema => %s)",
                     (source, QIS, release_schema_of(schema))).fetchone()[0]
    check_generalized(db, rel, 5)
    n = count(db, "src")
    assert db.execute("SELECT row_count FROM anon.releases WHERE release_schema = %s",
                      (release_schema_of(schema),)).fetchone()[0] == n
    # rows added to a partition / child are in the refreshed release
    db.execute("INSERT INTO src " + ROWS.format(lo=1001, hi=1010))
    db.execute("SELECT anon.refresh(%s)", (rel,))
    check_generalized(db, rel, 5)
    assert count(db, rel) == n + 10


def test_prioritized_mondrian_releases_every_row(db, schema, source):
    rel = db.execute("SELECT anon.mondrian_view(%s, k => 5, priorities => '{\"age\": 1}'::jsonb, "
                     "quasi_identifiers => %s, sensitive => ARRAY['id'], release_schema => %s)",
                     (source, QIS, release_schema_of(schema))).fetchone()[0]
    check_generalized(db, rel, 5)


def test_break_merge_releases_every_row(db, schema, source):
    rel = db.execute("SELECT anon.break_merge(%s, k => 5, l => 2, sensitive => ARRAY['diagnosis'], "
                     "quasi_identifiers => %s, identifiers => ARRAY['id', 'name'], "
                     "release_schema => %s)", (source, QIS, release_schema_of(schema))).fetchone()[0]
    qit = sql.Identifier(release_schema_of(schema), rel.split(".")[-1].strip('"') + "_qit").as_string(db)
    assert count(db, qit) == count(db, "src")
    assert min(class_sizes(db, qit, QIS)) >= 5
    st = sql.Identifier(release_schema_of(schema), rel.split(".")[-1].strip('"') + "_st_diagnosis").as_string(db)
    assert db.execute(f"SELECT sum(count) FROM {st}").fetchone()[0] == count(db, "src")


def test_pattern_releases_every_row(db, schema, source):
    rel = db.execute("SELECT anon.pattern_view(%s, columns => ARRAY['perf', 'salary'], segment => 20, "
                     "iterations => 50, seed => 1, sensitive => ARRAY['id'], release_schema => %s)",
                     (source, release_schema_of(schema))).fetchone()[0]
    check_rows_released_once(db, rel)


def test_fusion_releases_every_row(db, schema, source):
    db.execute("CREATE TABLE aux (name text, title text)")
    db.execute("INSERT INTO aux SELECT 'p' || i, CASE WHEN i % 2 = 0 THEN 'manager' ELSE 'clerk' END "
               "FROM generate_series(1, 40) i")
    rel = db.execute("SELECT anon.fusion_resilient_view(%s, sensitive => 'salary', identifier => 'name', "
                     "auxiliary => 'aux', attributes => ARRAY['perf'], k_from => 2, k_to => 4, "
                     "release_schema => %s)", (source, release_schema_of(schema))).fetchone()[0]
    check_rows_released_once(db, rel, id_column="name", key="name")


def test_trust_releases_every_row(db, schema, source, requester, purpose):  # noqa: F811
    record(db, requester, ["good"] * 5)
    name, _ = purpose({"age": 1, "sex": 0.5})
    # no suppression (the default allows 5 %): every row of every partition must be released
    rel = db.execute("SELECT anon.trust_view(%s, requester => %s, purpose => %s, k => 5, "
                     "quasi_identifiers => ARRAY['age', 'sex'], sensitive => ARRAY['id'], "
                     "max_suppression => 0, release_schema => %s)",
                     (source, requester, name, release_schema_of(schema))).fetchone()[0]
    check_rows_released_once(db, rel)
    assert db.execute(f"SELECT count(*) FROM {rel} r JOIN src s USING (id) "
                      "WHERE NOT (r.age @> s.age)").fetchone()[0] == 0
    assert min(class_sizes(db, rel, ["age", "sex"])) >= 5


def test_views_are_refused_clearly(db, schema):
    db.execute(f"CREATE TABLE base {COLUMNS}")
    db.execute("CREATE VIEW v AS SELECT * FROM base")
    with pytest.raises(psycopg.errors.DatatypeMismatch) as info:
        db.execute("SELECT anon.mondrian_view('v', k => 5, release_schema => %s)", (release_schema_of(schema),))
    assert info.value.sqlstate == "42804"
    assert "is a view" in str(info.value) and "CREATE TABLE" in info.value.diag.message_hint


@pytest.mark.parametrize("chunk_blocks", ["1", "3"])
def test_mondrian_reads_partition_by_partition_in_chunks(db, schema, chunk_blocks):
    """Issue 14: the source is read relation by relation, a few blocks per query
    (plpy_anon.read_chunk_blocks), categorical codes merged across chunks. Many chunks per
    partition, NULLs in numeric and text QIs, a value first seen in a late chunk: every row is
    released once, inside its released ranges / sets, in classes of at least k."""
    db.execute(f"CREATE TABLE src {COLUMNS} PARTITION BY RANGE (id)")
    db.execute("CREATE TABLE src_1 PARTITION OF src FOR VALUES FROM (1) TO (1501)")
    db.execute("CREATE TABLE src_2 PARTITION OF src FOR VALUES FROM (1501) TO (3001)")
    db.execute("CREATE TABLE src_default PARTITION OF src DEFAULT")
    db.execute("INSERT INTO src " + ROWS.format(lo=1, hi=3300))
    db.execute("UPDATE src SET age = NULL, zip = NULL WHERE id % 97 = 0")
    db.execute("UPDATE src SET sex = 'X' WHERE id > 3200")          # only in the last chunks
    assert db.execute("SELECT count(DISTINCT (tableoid, (ctid::text::point)[0])) FROM src"
                      ).fetchone()[0] > 30                            # many blocks: many chunks
    db.execute("SET plpy_anon.read_chunk_blocks = " + chunk_blocks)
    try:
        rel = db.execute("SELECT anon.mondrian_view('src', k => 5, quasi_identifiers => %s, "
                         "sensitive => ARRAY['id', 'diagnosis'], release_schema => %s)",
                         (QIS, release_schema_of(schema))).fetchone()[0]
    finally:
        db.execute("RESET plpy_anon.read_chunk_blocks")
    check_rows_released_once(db, rel)
    bad = db.execute(f"""SELECT count(*) FROM {rel} r JOIN src s USING (id)
                         WHERE NOT ((s.age IS NULL OR r.age @> s.age) AND r.born @> s.born
                                    AND s.sex = ANY(r.sex)
                                    AND array_position(r.zip, s.zip) IS NOT NULL)""").fetchone()[0]
    assert bad == 0
    assert min(class_sizes(db, rel, QIS)) >= 5
    assert db.execute(f"SELECT count(*) FROM {rel} WHERE 'X' = ANY(sex)").fetchone()[0] >= 100
    verified = db.execute("SELECT verified FROM anon.release_status() WHERE release = %s",
                          (rel,)).fetchone()[0]
    assert verified is True


@pytest.mark.parametrize("slice_rows", [1, 37])
def test_mondrian_release_over_many_slices_of_its_run(db, schema, source, slice_rows):
    """The Mondrian family's run comes back in slices of whole classes (anon.partition_slice,
    ~2^20 rows each in production). Here this backend's slices hold one class, or about 37
    rows, so a few hundred rows span many slices, each with its own offsets and its rows'
    relations: every row is released once, inside its class's ranges and sets, in classes of at
    least k, and the release is verified."""
    db.execute("SELECT * FROM anon.versions()")       # the package is loaded in this backend
    db.execute(f"DO $$ from plpy_anon.db.methods import mondrian_family; mondrian_family.SLICE_ROWS = {slice_rows} $$ "
               "LANGUAGE plpython3u")
    try:
        rel = db.execute("SELECT anon.mondrian_view(%s, k => 5, quasi_identifiers => %s, "
                         "sensitive => ARRAY['id', 'diagnosis'], release_schema => %s)",
                         (source, QIS, release_schema_of(schema))).fetchone()[0]
        slices = db.execute("SELECT count(*) FROM anon._mondrian_partition_slices("
                            "(SELECT release_id FROM anon.releases WHERE release_schema = %s))",
                            (release_schema_of(schema),)).fetchone()[0]
    finally:
        db.execute("DO $$ from plpy_anon.db.methods import mondrian_family; mondrian_family.SLICE_ROWS = 1 << 20 $$ "
                   "LANGUAGE plpython3u")
    assert slices >= 5                                   # many slices, not one
    check_generalized(db, rel, 5)
    assert db.execute("SELECT verified FROM anon.release_status() WHERE release = %s",
                      (rel,)).fetchone()[0] is True
