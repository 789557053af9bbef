"""anon.set_hierarchy_intervals and anon.set_hierarchy_dates: hierarchies built in SQL for number
and date columns, used by every method that takes hierarchies (Mondrian, trust, Break-Merge).

Each release is checked from its rows, independently of the hierarchy code: every released label,
read as the interval or calendar period it names, holds the source value of the same row (rows
matched by a released sensitive id), and every label is on the source value's registered path."""
from __future__ import annotations

import re
from decimal import Decimal

import psycopg
import pytest

from tests.db.test_trust import purpose, record, requester, role  # noqa: F401 (fixtures)
from tests.helpers import class_sizes, release_schema_of

ROWS = 240


@pytest.fixture
def people(db, schema):
    db.execute("CREATE TABLE people (id int PRIMARY KEY, age int, born date, seen timestamp, "
               "weight numeric, sex text)")
    db.execute(f"""
        INSERT INTO people
        SELECT i, 18 + (i * 7) % 60, DATE '1960-01-01' + (i * 97) % 15000,
               TIMESTAMP '2024-01-01 08:00' + (i * 13) * INTERVAL '1 day 1 hour',
               round(50 + ((i * 11) % 400) / 10.0, 1), CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END
        FROM generate_series(1, {ROWS}) i""")
    return "people"


def paths(db, column):
    return dict(db.execute("SELECT leaf, path FROM anon.hierarchies WHERE source = 'people'::regclass "
                           "AND column_name = %s", (column,)).fetchall())


def interval_holds(label: str, value) -> bool:
    match = re.fullmatch(r"\[(-?[0-9.]+),(-?[0-9.]+)\)", label)
    return label == "*" or (match is not None and
                            Decimal(match[1]) <= Decimal(str(value)) < Decimal(match[2]))


def period_holds(label: str, value) -> bool:
    """A calendar label (YYYY-MM-DD, YYYY-MM, YYYY-Qn, YYYY, YYYYs) holding the date ``value``."""
    if label == "*":
        return True
    if m := re.fullmatch(r"(\d{4})-Q([1-4])", label):
        return value.year == int(m[1]) and (value.month - 1) // 3 + 1 == int(m[2])
    if m := re.fullmatch(r"(\d{4})s", label):
        return value.year - value.year % 10 == int(m[1])
    return value.isoformat().startswith(label) and len(label) in (4, 7, 10)


def released_pairs(db, release, column):
    """(released label, source value) of every released row, matched by the released id."""
    return db.execute(f"SELECT r.{column}, p.{column}, p.{column}::text FROM {release} r "
                      f"JOIN people p USING (id)").fetchall()


def check_generalizes(db, release, column, holds):
    pairs = released_pairs(db, release, column)
    assert len(pairs) == ROWS
    registered = paths(db, column)
    for label, value, text in pairs:
        assert holds(label, value), (label, value)
        assert label in registered[text], (label, registered[text])
    assert any(label != text for label, _, text in pairs)


def test_interval_paths_nest_and_hold_their_values(db, schema, people):
    assert db.execute("SELECT anon.set_hierarchy_intervals('people', 'age', ARRAY[5, 10, 20])"
                      ).fetchone()[0] == 60
    assert paths(db, "age")["42"] == ["42", "[40,45)", "[40,50)", "[40,60)", "*"]
    assert db.execute("SELECT anon.set_hierarchy_intervals('people', 'weight', ARRAY[2.5, 5], "
                      "origin => 0.5)").fetchone()[0] > 0
    assert paths(db, "weight")["53.2"] == ["53.2", "[53,55.5)", "[50.5,55.5)", "*"]
    for leaf, path in paths(db, "weight").items():
        assert all(interval_holds(label, leaf) for label in path[1:]), path


def test_mondrian_releases_interval_and_date_labels_that_hold_each_rows_value(db, schema, people):
    db.execute("SELECT anon.set_hierarchy_intervals('people', 'age', ARRAY[5, 10, 20, 40])")
    db.execute("SELECT anon.set_hierarchy_dates('people', 'born', ARRAY['month', 'year', 'decade'])")
    release = db.execute(
        "SELECT anon.mondrian_view('people', k => 6, quasi_identifiers => ARRAY['age', 'born', 'sex'], "
        "sensitive => ARRAY['id'], release_schema => %s)", (release_schema_of(schema),)).fetchone()[0]
    types = dict(db.execute("SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute "
                            "WHERE attrelid = %s::regclass AND attnum > 0", (release,)).fetchall())
    assert types["age"] == "text" and types["born"] == "text"
    assert min(class_sizes(db, release, ["age", "born", "sex"])) >= 6
    check_generalizes(db, release, "age", interval_holds)
    check_generalizes(db, release, "born", period_holds)
    # a refresh re-reads the hierarchy: still labels, still truthful
    db.execute("SELECT anon.refresh(%s)", (release,))
    check_generalizes(db, release, "age", interval_holds)


def test_prioritized_mondrian_releases_interval_labels_that_hold_each_rows_value(db, schema, people):
    db.execute("SELECT anon.set_hierarchy_intervals('people', 'age', ARRAY[5, 10, 20, 40])")
    release = db.execute(
        "SELECT anon.mondrian_view('people', k => 6, priorities => '{\"age\": 1, \"sex\": 0}'::jsonb, "
        "quasi_identifiers => ARRAY['age', 'sex'], sensitive => ARRAY['id'], release_schema => %s)",
        (release_schema_of(schema),)).fetchone()[0]
    assert min(class_sizes(db, release, ["age", "sex"])) >= 6
    check_generalizes(db, release, "age", interval_holds)


def test_trust_releases_interval_labels_that_hold_each_rows_value(
        db, schema, people, requester, purpose):  # noqa: F811
    db.execute("SELECT anon.set_hierarchy_intervals('people', 'age', ARRAY[5, 10, 20, 40])")
    db.execute("SELECT anon.set_hierarchy_dates('people', 'seen', ARRAY['day', 'month', 'quarter', 'year'])")
    record(db, requester, ["good"] * 3)
    name, _ = purpose({"age": 1, "seen": 0.5, "sex": 0})
    release = db.execute(
        "SELECT anon.trust_view('people', requester => %s, purpose => %s, k => 5, "
        "quasi_identifiers => ARRAY['age', 'seen', 'sex'], sensitive => ARRAY['id'], "
        "max_suppression => 0, release_schema => %s)",
        (requester, name, release_schema_of(schema))).fetchone()[0]
    assert min(class_sizes(db, release, ["age", "seen", "sex"])) >= 5
    check_generalizes(db, release, "age", interval_holds)
    check_generalizes(db, release, "seen", period_holds)


def test_break_merge_releases_interval_labels_that_hold_its_rows(db, schema, people):
    """Break-Merge's QIT carries no row id: each released (age label, sex set) group of n rows
    must name a registered interval holding at least n source rows of those sexes."""
    db.execute("SELECT anon.set_hierarchy_intervals('people', 'age', ARRAY[10, 20, 60])")
    db.execute("SELECT anon.break_merge('people', k => 5, quasi_identifiers => ARRAY['age', 'sex'], "
               "sensitive => ARRAY['id'], max_categories => 1000, release_name => 'people_bm', "
               "release_schema => %s)", (release_schema_of(schema),))
    qit = f"{release_schema_of(schema)}.people_bm_qit"
    assert min(class_sizes(db, qit, ["age", "sex"])) >= 5
    labels = {label for path in paths(db, "age").values() for label in path[1:]}
    source = db.execute("SELECT age, sex FROM people").fetchall()
    groups = db.execute(f"SELECT age, sex, count(*) FROM {qit} GROUP BY 1, 2").fetchall()
    assert sum(n for _, _, n in groups) == ROWS
    for label, sex, n in groups:
        assert label in labels, label
        assert sum(1 for age, s in source if s in sex and interval_holds(label, age)) >= n, label
    assert any(label != "*" for label, _, _ in groups)


def test_a_break_merge_release_refreshes_in_its_form_after_a_hierarchy_is_registered(db, schema,
                                                                                    people):
    """A hierarchy registered after the release changes no released column: the refresh keeps
    age as the ranges the release was created with, each holding its rows' ages."""
    db.execute("SELECT anon.break_merge('people', k => 5, quasi_identifiers => ARRAY['age', 'sex'], "
               "sensitive => ARRAY['id'], max_categories => 1000, release_name => 'people_bm', "
               "release_schema => %s)", (release_schema_of(schema),))
    qit = f"{release_schema_of(schema)}.people_bm_qit"
    kind = db.execute(f"SELECT pg_typeof(age)::text FROM {qit} LIMIT 1").fetchone()[0]
    db.execute("SELECT anon.set_hierarchy_intervals('people', 'age', ARRAY[10, 20])")
    db.execute("SELECT anon.refresh(%s)", (f"{release_schema_of(schema)}.people_bm",))
    assert db.execute(f"SELECT pg_typeof(age)::text FROM {qit} LIMIT 1").fetchone()[0] == kind
    groups = db.execute(f"SELECT lower(age), upper(age), upper_inc(age), count(*) FROM {qit} "
                        "GROUP BY 1, 2, 3").fetchall()
    ages = [age for (age,) in db.execute("SELECT age FROM people").fetchall()]
    assert sum(n for *_, n in groups) == ROWS
    for low, high, inclusive, n in groups:
        assert sum(1 for a in ages if low <= a and (a <= high if inclusive else a < high)) >= n


def test_dropping_the_hierarchy_releases_the_column_as_ranges_again(db, schema, people):
    db.execute("SELECT anon.set_hierarchy_intervals('people', 'age', ARRAY[10])")
    assert db.execute("SELECT generalized_as FROM anon.column_roles('people') "
                      "WHERE column_name = 'age'").fetchone()[0] == "text (hierarchy)"
    db.execute("SELECT anon.drop_hierarchy('people', 'age')")
    assert db.execute("SELECT generalized_as FROM anon.column_roles('people') "
                      "WHERE column_name = 'age'").fetchone()[0] == "int4range"


@pytest.mark.parametrize("call, error, message", [
    ("anon.set_hierarchy_intervals('people', 'sex', ARRAY[5])", psycopg.errors.DatatypeMismatch,
     "interval hierarchies apply to number columns"),
    ("anon.set_hierarchy_intervals('people', 'born', ARRAY[5])", psycopg.errors.DatatypeMismatch,
     "interval hierarchies apply to number columns"),
    ("anon.set_hierarchy_intervals('people', 'age', ARRAY[]::numeric[])",
     psycopg.errors.InvalidParameterValue, "widths is empty"),
    ("anon.set_hierarchy_intervals('people', 'age', ARRAY[5, NULL])",
     psycopg.errors.InvalidParameterValue, "must not be NULL"),
    ("anon.set_hierarchy_intervals('people', 'age', ARRAY[0])",
     psycopg.errors.InvalidParameterValue, "positive numbers"),
    ("anon.set_hierarchy_intervals('people', 'age', ARRAY[10, 25])",
     psycopg.errors.InvalidParameterValue, "not a multiple"),
    ("anon.set_hierarchy_intervals('people', 'age', NULL)",
     psycopg.errors.InvalidParameterValue, "widths"),
    ("anon.set_hierarchy_intervals('people', 'nope', ARRAY[5])",
     psycopg.errors.UndefinedObject, 'column "nope" does not exist'),
    ("anon.set_hierarchy_dates('people', 'age')", psycopg.errors.DatatypeMismatch,
     "date hierarchies apply to date and timestamp columns"),
    ("anon.set_hierarchy_dates('people', 'born', ARRAY['year', 'month'])",
     psycopg.errors.InvalidParameterValue, "not from the finest to the coarsest"),
    ("anon.set_hierarchy_dates('people', 'born', ARRAY['week'])",
     psycopg.errors.InvalidParameterValue, "unknown date level"),
    ("anon.set_hierarchy_dates('people', 'born', ARRAY[NULL]::text[])",
     psycopg.errors.InvalidParameterValue, "unknown date level"),
    ("anon.set_hierarchy_dates('people', 'born', ARRAY[]::text[])",
     psycopg.errors.InvalidParameterValue, "levels is empty"),
])
def test_bad_builder_input_is_a_clear_error_and_registers_nothing(db, schema, people, call, error,
                                                                    message):
    with pytest.raises(error, match=message) as info:
        db.execute(f"SELECT {call}")
    assert info.value.diag.message_hint
    assert db.execute("SELECT count(*) FROM anon.hierarchies WHERE source = 'people'::regclass"
                      ).fetchone()[0] == 0


@pytest.mark.parametrize("call, value", [
    ("anon.set_hierarchy_intervals('people', 'weight', ARRAY[5])", "'NaN'::numeric"),
    ("anon.set_hierarchy_dates('people', 'born')", "'infinity'::date"),
])
def test_a_value_with_no_label_is_a_clear_error(db, schema, people, call, value):
    column = "weight" if "weight" in call else "born"
    db.execute(f"UPDATE people SET {column} = {value} WHERE id = 1")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="has no"):
        db.execute(f"SELECT {call}")


def test_a_column_without_values_is_a_clear_error(db, schema, people):
    db.execute("UPDATE people SET age = NULL")
    with pytest.raises(psycopg.errors.DataException, match="holds no value"):
        db.execute("SELECT anon.set_hierarchy_intervals('people', 'age', ARRAY[5])")
