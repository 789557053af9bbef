"""Break-Merge's QIT publishes class ranges that contain the true values of the class's rows.

The QIT (``<name>_qit``) has one row per individual but no row identifier, so the checks work per
class (distinct QI tuple), in SQL written here with PostgreSQL's own range operators:

* covered: every source row has a QIT class whose every range ``@>`` its value (a NULL value may
  sit in any class), and every class has at least as many source rows inside it as it has QIT
  rows;
* tight: every bound of a released range is a value of the source (upper bounds of discrete
  ranges one past it, or unbounded at the type's maximum).
"""
from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from tests.helpers import release_schema_of

# column -> (type, released range type, values: the extremes float8 cannot carry)
COLUMNS = {
    "i4": ("int4", "int4range", ["2147483647", "2147483646", "-2147483648", "-2147483647", "0", "1"]),
    "i8": ("int8", "int8range", ["9223372036854775807", "9223372036854775806", "-9223372036854775807",
                                 "-9223372036854775808", "9007199254740993", "9007199254740992"]),
    "num": ("numeric", "numrange", ["12345678901234567890.1", "12345678901234567890.2",
                                    "12345678901234567891", "0.000000000000000000000000000001",
                                    "0.000000000000000000000000000002",
                                    "0.000000000000000000000000000003"]),
    "f8": ("float8", "numrange", ["0.1", "0.30000000000000004", "0.3", "1e308", "-1e308", "5e-324"]),
    "d": ("date", "daterange", ["5874897-12-31", "5874897-12-30", "4713-11-24 BC", "4713-11-25 BC",
                                "2000-01-01", "2000-01-02"]),
    "ts": ("timestamp", "tsrange", ["0001-01-01 00:00:00.000001", "0001-01-01 00:00:00.000002",
                                    "294276-12-31 23:59:59.999999", "294276-12-31 23:59:59.999998",
                                    "2000-01-01 00:00:00.000001", "2000-01-01 00:00:00.000002"]),
    "tstz": ("timestamptz", "tstzrange", ["0001-01-01 00:00:00.000001+00",
                                          "0001-01-01 00:00:00.000002+00",
                                          "294276-12-31 23:59:59.999999+00",
                                          "294276-12-31 23:59:59.999998+00",
                                          "2000-01-01 00:00:00.000001+00",
                                          "2000-01-01 00:00:00.000002+00"]),
}
ELEMENT = {"int4range": "int4", "int8range": "int8", "numrange": "numeric", "daterange": "date",
           "tsrange": "timestamp", "tstzrange": "timestamptz"}
DISCRETE = ("int4range", "int8range", "daterange")


def element_of(type_name, range_type):
    """A float's true value is its text form (the shortest digits that read back as the same
    float, what the source shows); PostgreSQL 15's float-to-numeric cast rounds to 15 / 6 digits."""
    return "text::numeric" if type_name in ("float4", "float8") else ELEMENT[range_type]


def load(db, columns, n_rows, nulls=True):
    """``vals(id, <columns>, s)``: row i takes a value of each column's list by a different walk,
    so that classes mix values; the last two rows hold NULLs."""
    defs = sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(t))
                              for c, (t, _, _) in columns.items())
    db.execute(sql.SQL("CREATE TABLE vals (id int PRIMARY KEY, {}, s text)").format(defs))
    rows = []
    for i in range(n_rows):
        values = []
        for j, (_, _, vs) in enumerate(columns.values()):
            values.append(None if nulls and i >= n_rows - 2 and (i + j) % 2 else
                          vs[(i * (j + 1) + i // len(vs)) % len(vs)])
        rows.append((i, *values, "ab"[i % 2]))
    casts = sql.SQL(", ").join(sql.SQL("%s::{}").format(sql.SQL(t)) for t, _, _ in columns.values())
    db.cursor().executemany(sql.SQL("INSERT INTO vals VALUES (%s, {}, %s)").format(casts), rows)


def break_merge(db, schema, columns, k=3):
    db.execute("SELECT anon.break_merge('vals', k => %s, l => 2, sensitive => ARRAY['s'], "
               "quasi_identifiers => %s, identifiers => ARRAY['id'], release_schema => %s)",
               (k, list(columns), release_schema_of(schema)))
    return f'"{release_schema_of(schema)}".vals_bm_qit'


def released_types(db, qit):
    return dict(db.execute("SELECT attname::text, format_type(atttypid, NULL) FROM pg_attribute "
                           "WHERE attrelid = %s::regclass AND attnum > 0", (qit,)).fetchall())


def contains(column, type_name, range_type):
    c = sql.Identifier(column)
    return sql.SQL("(s.{c} IS NULL OR q.{c} @> s.{c}::{e})").format(
        c=c, e=sql.SQL(element_of(type_name, range_type)))


def check_release(db, qit, columns):
    n = db.execute("SELECT count(*) FROM vals").fetchone()[0]
    assert db.execute(f"SELECT count(*) FROM {qit}").fetchone()[0] == n
    types = released_types(db, qit)
    assert {c: types[c] for c in columns} == {c: r for c, (_, r, _) in columns.items()}
    inside = sql.SQL(" AND ").join(contains(c, t, r) for c, (t, r, _) in columns.items())
    names = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
    classes = sql.SQL("(SELECT {names}, count(*) AS n FROM {qit} GROUP BY {names})").format(
        names=names, qit=sql.SQL(qit))
    # covered: every source row lies inside some class
    outside = db.execute(sql.SQL(
        "SELECT s.id FROM vals s WHERE NOT EXISTS (SELECT 1 FROM {classes} q WHERE {inside})"
    ).format(classes=classes, inside=inside)).fetchall()
    assert outside == []
    # ... and no class holds more QIT rows than source rows inside its ranges
    overfull = db.execute(sql.SQL(
        "SELECT q.n, (SELECT count(*) FROM vals s WHERE {inside}) AS m FROM {classes} q"
    ).format(classes=classes, inside=inside)).fetchall()
    assert [r for r in overfull if r[0] > r[1]] == []
    # tight: bounds are source values (the type's own), discrete upper bounds canonical
    for column, (type_name, range_type, _) in columns.items():
        c, e = sql.Identifier(column), sql.SQL(element_of(type_name, range_type))
        upper = "upper_inc(q.{c}) AND upper(q.{c}) IN (SELECT {c}::{e} FROM vals)"
        if range_type in DISCRETE:   # canonical [lo, hi + 1); an infinite date stays inclusive
            upper += (" OR upper_inf(q.{c}) OR (NOT upper_inc(q.{c}) AND upper(q.{c}) - 1 IN "
                      "(SELECT {c}::{e} FROM vals))")
        upper = sql.SQL(upper)
        loose = db.execute(sql.SQL(
            "SELECT DISTINCT q.{c}::text FROM {qit} q WHERE q.{c} IS NOT NULL AND NOT ("
            "lower_inc(q.{c}) AND lower(q.{c}) IN (SELECT {c}::{e} FROM vals) AND (" + upper.as_string(db) + "))"
        ).format(c=c, e=e, qit=sql.SQL(qit))).fetchall()
        assert loose == [], column
    # a class is the whole QI tuple: at least k rows each
    return db.execute(sql.SQL("SELECT min(n) FROM {classes} q").format(classes=classes)).fetchone()[0]


def test_released_ranges_contain_extreme_values(db, schema):
    load(db, COLUMNS, 38)
    qit = break_merge(db, schema, COLUMNS, k=3)
    assert check_release(db, qit, COLUMNS) >= 3


@pytest.mark.parametrize("column", list(COLUMNS))
def test_each_type_alone_is_contained_and_tight(db, schema, column):
    """One QI at a time: classes are narrow, so nearly every extreme is a bound of its class."""
    columns = {column: COLUMNS[column]}
    load(db, columns, 14)
    qit = break_merge(db, schema, columns, k=2)
    assert check_release(db, qit, columns) >= 2


NON_FINITE = {
    "d": ("date", "daterange", ["infinity", "-infinity", "2000-01-01", "2000-01-02", "2000-01-03"]),
    "ts": ("timestamp", "tsrange", ["infinity", "-infinity", "2000-01-01 00:00:00.000001",
                                    "2000-01-01 00:00:00.000002", "2000-01-01 00:00:00.000003"]),
    "tstz": ("timestamptz", "tstzrange", ["infinity", "-infinity", "2000-01-01 00:00:00.000001+00",
                                          "2000-01-01 00:00:00.000002+00", "1999-12-31 00:00:00+00"]),
    "f8": ("float8", "numrange", ["Infinity", "-Infinity", "NaN", "1.5", "2.5"]),
    "num": ("numeric", "numrange", ["Infinity", "-Infinity", "NaN", "1.000000000000000000001",
                                    "1.000000000000000000002"]),
}


def test_infinity_and_nan_are_released_inside_their_ranges(db, schema):
    load(db, NON_FINITE, 30)
    qit = break_merge(db, schema, NON_FINITE, k=2)
    assert check_release(db, qit, NON_FINITE) >= 2
    released = db.execute(f"SELECT count(*) FROM {qit} WHERE upper(d) = 'infinity' "
                          "OR lower(d) = '-infinity'").fetchone()[0]
    assert released >= 2                  # the infinite dates are published, not turned away


def test_refresh_recomputes_exact_ranges(db, schema):
    columns = {c: COLUMNS[c] for c in ("i8", "num", "ts")}
    load(db, columns, 12, nulls=False)
    qit = break_merge(db, schema, columns, k=2)
    db.execute("INSERT INTO vals VALUES (100, 9223372036854775805, 12345678901234567890.15, "
                "'294276-12-31 23:59:59.999997', 'a'), "
                "(101, -9223372036854775806, 0.0000000000000000000000000000015, "
                "'0001-01-01 00:00:00.000003', 'b')")
    db.execute("SELECT anon.refresh(%s)", (f'"{release_schema_of(schema)}".vals_bm',))
    assert check_release(db, qit, columns) >= 2


WRONG_SET = """
import json as _json
r = _json.loads(break_merge.run_release(plpy, GD, release_id))
r["classes"]["q1"][0] = '{"no such value"}'   # class 0's released set holds none of its rows
return _json.dumps(r)
"""


def test_rows_outside_their_released_values_fail_the_build(db, schema):
    """The QIT counts only the rows inside their class's released values: a class published with
    a set that misses its rows loses them, and the verification refuses the release."""
    from tests.db.test_break_merge import _break, _load, _people
    from tests.db.test_verification import tampered

    source = _load(db, schema, _people(200))
    with tampered(db, "anon._break_merge_run_py(integer)", WRONG_SET,
                  "return break_merge.run_release(plpy, GD, release_id)"), \
            pytest.raises(psycopg.errors.DataException) as failed:
        _break(db, schema, source, k=5, l=2)
    assert "rows released" in failed.value.diag.message_primary
    assert db.execute("SELECT count(*) FROM anon.releases WHERE release_schema = %s",
                      (release_schema_of(schema),)).fetchone()[0] == 0
