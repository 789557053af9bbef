"""Adversarial: anon.set_hierarchy_intervals and anon.set_hierarchy_dates against a custodian who
may not read the column, extreme numbers and the session settings of whoever registers them.

Each test asserts the property a careful user relies on."""
from __future__ import annotations

import re
import uuid
from decimal import Decimal

import psycopg
import pytest
from psycopg import sql

from tests.helpers import matview, release_schema_of


def interval_holds(label: str, value) -> bool:
    match = re.fullmatch(r"\[(-?[0-9.]+),(-?[0-9.]+)\)", label)
    return label == "*" or (match is not None and
                            Decimal(match[1]) <= Decimal(str(value)) < Decimal(match[2]))


@pytest.fixture
def plain_custodian(db, connect):
    """A login role in plpy_anon_custodian and nothing else (no pg_read_all_data)."""
    role = f"hc_{uuid.uuid4().hex[:8]}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE plpy_anon_custodian").format(sql.Identifier(role)))
    yield role
    db.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(role)))
    db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_a_custodian_reads_no_value_of_a_column_it_may_not_select_through_a_built_hierarchy(
        db, schema, connect, plain_custodian):
    db.execute("CREATE TABLE pay (id int PRIMARY KEY, salary int, born date)")
    db.execute("INSERT INTO pay SELECT i, 30000 + i * 37, DATE '1970-01-01' + i * 91 "
               "FROM generate_series(1, 50) i")
    db.execute("SELECT anon.set_hierarchy_intervals('pay', 'salary', ARRAY[1000, 10000])")
    db.execute("SELECT anon.set_hierarchy_dates('pay', 'born', ARRAY['day', 'year'])")
    oid = db.execute("SELECT 'pay'::regclass::oid").fetchone()[0]
    db.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema),
                                                                  sql.Identifier(plain_custodian)))
    with connect(user=plain_custodian) as c, pytest.raises(psycopg.errors.InsufficientPrivilege):
        c.execute(sql.SQL("SELECT salary FROM {}.pay").format(sql.Identifier(schema)))
    with connect(user=plain_custodian) as c:
        try:
            leaves = c.execute("SELECT leaf FROM anon.hierarchies WHERE source::oid = %s",
                               (oid,)).fetchall()
        except psycopg.errors.InsufficientPrivilege:
            leaves = []
    assert not {leaf for (leaf,) in leaves} & {str(30000 + i * 37) for i in range(1, 51)}
    paths = ("SELECT path FROM anon.readable_hierarchies "
             "WHERE source = %s::oid::regclass AND column_name = %s")
    with connect(user=plain_custodian) as c:
        assert not c.execute(paths, (oid, "salary")).fetchall()
    # a role that may read the column reads its hierarchy (what a build of it needs)
    db.execute(sql.SQL("GRANT SELECT (salary) ON pay TO {}").format(sql.Identifier(plain_custodian)))
    with connect(user=plain_custodian) as c:
        assert len(c.execute(paths, (oid, "salary")).fetchall()) == 50
        assert not c.execute(paths, (oid, "born")).fetchall()


def test_interval_labels_hold_numbers_of_more_than_28_digits(db, schema):
    db.execute("CREATE TABLE big (id int, v numeric)")
    db.execute("INSERT INTO big VALUES (1, 25477731706230461112238806496), (2, 1), (3, 2)")
    try:
        db.execute("SELECT anon.set_hierarchy_intervals('big', 'v', ARRAY[3, 6])")
    except psycopg.errors.InvalidParameterValue as error:   # refusing them is fine too
        assert error.diag.message_hint
        return
    rows = db.execute("SELECT leaf, path FROM anon.hierarchies WHERE source = 'big'::regclass").fetchall()
    assert len(rows) == 3
    for leaf, path in rows:
        assert all(interval_holds(label, leaf) for label in path[1:]), (leaf, path)


@pytest.mark.parametrize("values, widths", [("(1, 1e30), (2, 1)", "ARRAY[0.001]"),
                                            ("(1, 18), (2, 77)", "ARRAY[1e-30]")])
def test_a_width_too_fine_for_the_values_is_a_clear_error(db, schema, values, widths):
    db.execute("CREATE TABLE fine (id int, v numeric)")
    db.execute(f"INSERT INTO fine VALUES {values}")
    with pytest.raises(psycopg.errors.InvalidParameterValue) as error:
        db.execute(f"SELECT anon.set_hierarchy_intervals('fine', 'v', {widths})")
    assert error.value.diag.message_hint


@pytest.mark.parametrize("setting, column, builder", [
    ("SET TimeZone = 'Pacific/Kiritimati'", "seen", "anon.set_hierarchy_dates('people', 'seen', ARRAY['day', 'month'])"),
    ("SET DateStyle = 'SQL, DMY'", "born", "anon.set_hierarchy_dates('people', 'born')"),
    ("SET DateStyle = 'German'", "born", "anon.set_hierarchy_dates('people', 'born')"),
    ("SET extra_float_digits = 0", "w", "anon.set_hierarchy_intervals('people', 'w', ARRAY[0.1])"),
])
def test_a_hierarchy_registered_under_any_session_setting_releases_or_is_refused(
        db, schema, connect, setting, column, builder):
    db.execute("CREATE TABLE people (id int PRIMARY KEY, born date, seen timestamptz, w float8)")
    db.execute("INSERT INTO people SELECT i, DATE '1960-01-01' + (i * 97) % 15000, "
               "TIMESTAMPTZ '2024-01-31 20:00+00' + (i % 7) * INTERVAL '1 hour', "
               "CASE WHEN i % 2 = 0 THEN 0.29999999999999993::float8 ELSE 0.5 END "
               "FROM generate_series(1, 120) i")
    with connect() as c:
        c.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
        c.execute(setting)
        try:
            c.execute(f"SELECT {builder}")
        except psycopg.errors.InvalidParameterValue:   # refused where it is registered: fine
            return
    release = db.execute(
        "SELECT anon.mondrian_view('people', k => 5, quasi_identifiers => %s, sensitive => ARRAY['id'], "
        "release_schema => %s)", ([column], release_schema_of(schema))).fetchone()[0]
    assert db.execute(f"SELECT count(*) FROM {release}").fetchone()[0] == 120


def test_a_refresh_after_a_value_outside_a_built_hierarchy_names_the_builder_and_keeps_the_rows(
        db, schema):
    db.execute("CREATE TABLE pp (id int PRIMARY KEY, age int, dx text)")
    db.execute("INSERT INTO pp SELECT i, 18 + (i * 7) % 60, 'd' || i % 4 FROM generate_series(1, 200) i")
    db.execute("SELECT anon.set_hierarchy_intervals('pp', 'age', ARRAY[10, 20])")
    release = db.execute("SELECT anon.mondrian_view('pp', k => 5, quasi_identifiers => ARRAY['age'], "
                         "sensitive => ARRAY['dx'], release_schema => %s)",
                         (release_schema_of(schema),)).fetchone()[0]
    db.execute("INSERT INTO pp VALUES (1000, 1000, 'd1')")
    with pytest.raises(psycopg.errors.UndefinedObject) as error:
        db.execute("SELECT anon.refresh(%s)", (release,))
    assert db.execute(f"SELECT count(*) FROM {release}").fetchone()[0] == 200
    assert "set_hierarchy_intervals" in (error.value.diag.message_hint or "")


@pytest.mark.parametrize("setting, column", [("SET DateStyle = 'German'", "born"),
                                             ("SET TimeZone = 'Pacific/Kiritimati'", "seen")])
def test_break_merge_releases_a_date_hierarchy_whatever_the_builders_session(
        db, schema, connect, setting, column):
    db.execute("CREATE TABLE people (id int PRIMARY KEY, born date, seen timestamptz, sex text)")
    db.execute("INSERT INTO people SELECT i, DATE '1960-01-01' + (i * 97) % 15000, "
               "TIMESTAMPTZ '2024-01-31 20:00+00' + (i % 7) * INTERVAL '1 hour', "
               "CASE WHEN i % 2 = 0 THEN 'F' ELSE 'M' END FROM generate_series(1, 120) i")
    db.execute(f"SELECT anon.set_hierarchy_dates('people', '{column}', ARRAY['day', 'month'])")
    with connect() as c:
        c.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
        c.execute(setting)
        c.execute("SELECT anon.break_merge('people', k => 5, quasi_identifiers => ARRAY[%s, 'sex'], "
                  "sensitive => ARRAY['id'], max_categories => 1000, release_name => 'bm', "
                  "release_schema => %s)", (column, release_schema_of(schema)))
        qit = sql.SQL("{}.bm_qit").format(sql.Identifier(release_schema_of(schema)))
        assert c.execute(sql.SQL("SELECT count(*) FROM {}").format(qit)).fetchone()[0] == 120


def test_a_failed_refresh_records_no_source_value_another_custodian_can_read(
        db, schema, connect, plain_custodian):
    db.execute("CREATE TABLE pay (id int PRIMARY KEY, salary int, dx text)")
    db.execute("INSERT INTO pay SELECT i, 30000 + (i % 20) * 1000, 'd' || i % 4 "
               "FROM generate_series(1, 200) i")
    db.execute("SELECT anon.set_hierarchy_intervals('pay', 'salary', ARRAY[10000])")
    release = db.execute("SELECT anon.mondrian_view('pay', k => 5, quasi_identifiers => ARRAY['salary'], "
                         "sensitive => ARRAY['dx'], release_schema => %s)",
                         (release_schema_of(schema),)).fetchone()[0]
    db.execute("INSERT INTO pay VALUES (1000, 987654, 'd1')")       # the CEO's salary
    with pytest.raises(psycopg.errors.UndefinedObject) as error:
        db.execute("SELECT anon.refresh(%s)", (release,))
    assert "987654" in error.value.diag.message_detail           # the caller is told
    with connect(user=plain_custodian) as c:
        seen = [str(v) for v in c.execute(
            "SELECT h.error FROM anon.refresh_history h UNION ALL "
            "SELECT r::text FROM anon.releases r").fetchall()]
    assert not [text for text in seen if "987654" in text]


@pytest.mark.parametrize("how", ["anon.refresh", "REFRESH MATERIALIZED VIEW"])
def test_a_hierarchy_registered_after_a_release_leaves_its_refresh_working_or_clearly_refused(
        db, schema, how):
    db.execute("CREATE TABLE pp (id int PRIMARY KEY, age int, dx text)")
    db.execute("INSERT INTO pp SELECT i, 18 + (i * 7) % 60, 'd' || i % 4 FROM generate_series(1, 200) i")
    release = db.execute("SELECT anon.mondrian_view('pp', k => 5, quasi_identifiers => ARRAY['age'], "
                         "sensitive => ARRAY['dx'], release_schema => %s)",
                         (release_schema_of(schema),)).fetchone()[0]
    before = db.execute(f"SELECT age::text FROM {release} ORDER BY 1").fetchall()
    db.execute("SELECT anon.set_hierarchy_intervals('pp', 'age', ARRAY[10, 20])")
    try:
        db.execute("SELECT anon.refresh(%s)" if how == "anon.refresh"
                   else f"REFRESH MATERIALIZED VIEW {matview(db, release)}",
                   (release,) if how == "anon.refresh" else None)
    except psycopg.Error as error:
        assert error.sqlstate != "22P02" and error.diag.message_hint, error
        assert db.execute(f"SELECT age::text FROM {release} ORDER BY 1").fetchall() == before
        return
    assert db.execute(f"SELECT count(*) FROM {release}").fetchone()[0] == 200
