"""Released ranges contain the true values (issue 9) and non-finite values (issue 11).

Every check joins the released rows back to the source (the id is released as a sensitive column
for this purpose) and tests containment with PostgreSQL's own operators (``range @> value``), so it
shares no code with the extension.
"""
from __future__ import annotations

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from plpy_anon.db.generalization import array_element, generalized_release_query, pack_literals
from tests.helpers import class_sizes, matview, release_schema_of

# (column type, released range type, values): extremes float8 cannot represent or that
# overflow a discrete range's canonical form, infinities and NaN.
CASES = {
    "int4": ("int4range", ["-2147483648", "-2147483647", "0", "1", "2147483646", "2147483647"]),
    "int2": ("int4range", ["-32768", "-32767", "0", "1", "32766", "32767"]),
    "int8": ("int8range", ["-9223372036854775808", "-9223372036854775807", "9007199254740992",
                           "9007199254740993", "9007199254740994", "9007199254740995",
                           "9223372036854775806", "9223372036854775807"]),
    "numeric": ("numrange", ["12345678901234567890.1", "12345678901234567890.2",
                             "12345678901234567891", "0.000000000000000000000000000001",
                             "0.000000000000000000000000000002", "0.000000000000000000000000000003",
                             "Infinity", "-Infinity", "NaN", "NaN"]),
    "float8": ("numrange", ["Infinity", "-Infinity", "NaN", "1e308", "-1e308", "5e-324",
                            "0.1", "0.30000000000000004", "0.3"]),
    "float4": ("numrange", ["Infinity", "-Infinity", "NaN", "3.4e38", "1.1", "1.1000001"]),
    "date": ("daterange", ["5874897-12-31", "5874897-12-30", "4713-11-24 BC", "4713-11-25 BC",
                           "infinity", "-infinity", "2000-01-01", "2000-01-02"]),
    "timestamp": ("tsrange", ["0001-01-01 00:00:00.000001", "0001-01-01 00:00:00.000002",
                              "294276-12-31 23:59:59.999999", "294276-12-31 23:59:59.999998",
                              "infinity", "-infinity", "2000-01-01 00:00:00.000001",
                              "2000-01-01 00:00:00.000002"]),
    "timestamptz": ("tstzrange", ["0001-01-01 00:00:00.000001+00", "0001-01-01 00:00:00.000002+00",
                                  "294276-12-31 23:59:59.999999+00",
                                  "294276-12-31 23:59:59.999998+00", "infinity", "-infinity",
                                  "2000-01-01 00:00:00.000001+00", "2000-01-01 00:00:00.000002+00"]),
}
ELEMENT = {"int4range": "int4", "int8range": "int8", "numrange": "numeric", "daterange": "date",
           "tsrange": "timestamp", "tstzrange": "timestamptz"}
# A float's true value is its text form (the shortest digits that read back as the same float,
# what the source shows); PostgreSQL 15's float-to-numeric cast rounds to 15 / 6 digits.
FLOAT_ELEMENT = "text::numeric"


def element_of(type_name, range_type):
    return FLOAT_ELEMENT if type_name in ("float4", "float8") else ELEMENT[range_type]


def load(db, type_name, values, nulls=1):
    db.execute(sql.SQL("CREATE TABLE vals (id int PRIMARY KEY, v {})").format(sql.SQL(type_name)))
    rows = [(i + 1, v) for i, v in enumerate(values)] + [(len(values) + i + 1, None)
                                                         for i in range(nulls)]
    db.cursor().executemany(sql.SQL("INSERT INTO vals VALUES (%s, %s::{})").format(
        sql.SQL(type_name)), rows)
    db.execute("SELECT anon.set_column_role('vals', 'id', 'sensitive')")


def release(db, schema, table="vals", k=2, **kwargs):
    args = "".join(f", {key} => %({key})s" for key in kwargs)
    return db.execute(f"SELECT anon.mondrian_view(%(t)s, k => %(k)s, release_schema => %(s)s{args})",
                      dict(t=f'"{schema}".{table}', k=k, s=release_schema_of(schema), **kwargs)).fetchone()[0]


def uncontained(db, rel, column="v", element=None):
    """Source rows whose released value does not contain their value (NULLs may sit in any
    class), checked with the column's own range operator."""
    cast = f"::{element}" if element else ""
    return db.execute(
        f"SELECT s.id, s.{column}::text, r.{column}::text FROM {rel} r JOIN vals s USING (id) "
        f"WHERE s.{column} IS NOT NULL AND (r.{column} IS NULL OR NOT r.{column} @> s.{column}{cast})"
    ).fetchall()


@pytest.mark.parametrize("type_name", list(CASES))
def test_every_released_range_contains_its_rows_values(db, schema, type_name):
    range_type, values = CASES[type_name]
    load(db, type_name, values)
    rel = release(db, schema)
    kind = db.execute("SELECT format_type(atttypid, NULL) FROM pg_attribute "
                      "WHERE attrelid = %s::regclass AND attname = 'v'", (rel,)).fetchone()[0]
    assert kind == range_type                           # the analysts' surface is kept
    n = db.execute("SELECT count(*) FROM vals").fetchone()[0]
    assert db.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == n
    assert db.execute(f"SELECT count(*) FROM {rel} r JOIN vals USING (id)").fetchone()[0] == n
    assert uncontained(db, rel, element=element_of(type_name, range_type)) == []
    assert min(class_sizes(db, rel, ["v"])) >= 2
    # tight: each class's bounds are values of the class (inclusive, or unbounded at a maximum)
    element = element_of(type_name, range_type)
    next_up = " + 1" if range_type in ("int4range", "int8range", "daterange") else ""
    loose = db.execute(
        f"""SELECT r.v::text FROM {rel} r JOIN vals s USING (id) GROUP BY r.v
            HAVING r.v IS NOT NULL AND NOT (
                lower(r.v) = min(s.v)::{element}
                AND (upper_inf(r.v) OR (upper_inc(r.v) AND upper(r.v) = max(s.v)::{element})
                     OR (NOT upper_inc(r.v) AND upper(r.v) = max(s.v)::{element}{next_up})))""").fetchall()
    assert loose == []


def test_many_rows_beyond_float_precision_still_contained(db, schema):
    """A thousand bigints that float8 collapses to a handful of values, with NULLs, two QIs."""
    db.execute("CREATE TABLE vals (id int PRIMARY KEY, v int8, w numeric, c text)")
    db.execute("""INSERT INTO vals SELECT i, 9223372036854775807 - (i % 300),
                  CASE WHEN i % 17 = 0 THEN NULL ELSE 1e20 + i * 0.000000000001 END,
                  CASE WHEN i % 5 = 0 THEN NULL ELSE 'c' || (i % 7) END
                  FROM generate_series(1, 1000) i""")
    db.execute("SELECT anon.set_column_role('vals', 'id', 'sensitive')")
    rel = release(db, schema, k=4)
    assert db.execute(f"SELECT count(*) FROM {rel} r JOIN vals USING (id)").fetchone()[0] == 1000
    assert uncontained(db, rel, "v") == []
    assert uncontained(db, rel, "w") == []
    assert db.execute(f"SELECT count(*) FROM {rel} r JOIN vals s USING (id) "
                      "WHERE array_position(r.c, s.c) IS NULL").fetchone()[0] == 0
    assert min(class_sizes(db, rel, ["v", "w", "c"])) >= 4


def test_refresh_keeps_ranges_truthful(db, schema):
    load(db, "int8", CASES["int8"][1])
    rel = release(db, schema)
    db.execute("INSERT INTO vals VALUES (100, 9223372036854775805), (101, -9223372036854775806)")
    db.execute("SELECT anon.refresh(%s)", (rel,))
    assert db.execute(f"SELECT count(*) FROM {rel} r JOIN vals USING (id)").fetchone()[0] == 11
    assert uncontained(db, rel) == []


class _Quoter:
    """Just enough of plpy to render a release query outside the backend."""

    def __init__(self, conn):
        self.conn = conn

    def quote_ident(self, name):
        return sql.Identifier(name).as_string(self.conn)

    def quote_literal(self, value):
        return sql.Literal(value).as_string(self.conn)


ONE_CLASS = [(1, "[10,31)", ["a", None]), (3, "[10,31)", ["a", None]), (4, "[10,31)", ["a", None])]
TWO_CLASSES = [(1, "[10,21)", ["a", None]), (3, "[30,31)", ["a", None]), (4, "[30,31)", ["a", None])]


def _slice(first_position, first_class, sizes, ctids, literal):
    """An anon.partition_slice of one class: (first_position, first_class, class_sizes,
    ctids_utf8, row_tableoids, classes, literals, separators), its QI q1's ``literal`` packed
    (pack_literals; as hex, so no brace meets the caller's str.format)."""
    packed, marks = pack_literals([literal])
    return (f"ROW({first_position}, {first_class}, '{sizes}', convert_to({ctids}, 'UTF8'), NULL, "
            f"NULL, ARRAY['\\x{packed.hex()}'::bytea], chr({ord(marks[0])}) || chr({ord(marks[1])}))"
            "::anon.partition_slice")


@pytest.mark.parametrize("layout, expected", [
    # anon.partition (row_ctids, class_ids, row_positions, classes, row_tableoids): one class
    ("ROW({ctids}, '{{0,0,0,0}}', '{{0,1,2,3}}', '{{\"q1\": [\"{{a,NULL}}\"]}}', NULL)::anon.partition",
     ONE_CLASS),
    # one slice holding the one class
    ("unnest(ARRAY[" + _slice(0, 0, "{{4}}", "{ctids}", "{a,NULL}") + "])", ONE_CLASS),
    # two slices of one class each: the second's class id and positions come from its offsets
    ("unnest(ARRAY[" + _slice(0, 0, "{{2}}", "{ctids_12}", "{a,NULL}") + ", "
     + _slice(2, 1, "{{2}}", "{ctids_34}", "{a,NULL}") + "])", TWO_CLASSES),
], ids=["per-row", "one-slice", "two-slices"])
def test_containment_filter_leaves_out_rows_outside_their_class_value(db, schema, layout, expected):
    """A partition whose published values do not contain the rows' values (here crafted by
    hand) releases no row under a wrong value: the filter drops it, so the release's row count
    differs from the source's (what the post-build verification refuses). anon.partition's
    per-row layout and the Mondrian family's slices (anon.partition_slice), one or two."""
    db.execute("CREATE TABLE vals (id int PRIMARY KEY, v int4, c text)")
    db.execute("INSERT INTO vals VALUES (1, 10, 'a'), (2, 20, 'b'), (3, 30, 'a'), (4, NULL, NULL)")
    from plpy_anon.db.columns import Column
    from plpy_anon.db.guards import Table
    oid = db.execute("SELECT 'vals'::regclass::oid").fetchone()[0]
    tbl = Table(int(oid), schema, "vals", guard="checked")   # the query's text only: nothing read here
    roles = [(Column("id", "int4", "integer", "N", True, True, True), "sensitive"),
             (Column("v", "int4", "integer", "N", False, False, True), "quasi_identifier"),
             (Column("c", "text", "text", "S", False, False, True), "quasi_identifier")]

    def ctids(where):
        return sql.Literal(db.execute(f"SELECT array_agg(ctid ORDER BY id)::text FROM vals "
                                      f"WHERE {where}").fetchone()[0]).as_string(db)
    # each class's value set for c claims only "a" (and NULL): row 2 ('b') must not be released
    call = layout.format(ctids=ctids("true"), ctids_12=ctids("id <= 2"), ctids_34=ctids("id > 2"))
    query = generalized_release_query(_Quoter(db), tbl, roles, {"v": "int4range", "c": "text[]"},
                                      call, sliced="partition_slice" in layout)
    rows = db.execute(f"SELECT id, v::text, c FROM ({query}) AS q ORDER BY id").fetchall()
    assert rows == expected


def test_a_quasi_identifier_the_release_reads_cannot_be_dropped(db, schema):
    load(db, "int4", CASES["int4"][1])
    release(db, schema)
    with pytest.raises(psycopg.errors.DependentObjectsStillExist):
        db.execute("ALTER TABLE vals DROP COLUMN v")


# ---------------------------------------------------------------------------- non-finite values

def test_methods_that_compute_with_numbers_refuse_nan_naming_the_column(db, schema):
    db.execute("CREATE TABLE vals (id int PRIMARY KEY, w float8, x float8)")
    db.execute("INSERT INTO vals SELECT i, CASE WHEN i = 7 THEN 'NaN' ELSE i::float8 END, i % 9 "
               "FROM generate_series(1, 60) i")
    with pytest.raises(psycopg.Error) as info:
        db.execute("SELECT anon.pattern_view('vals', columns => ARRAY['w', 'x'], segment => 10, "
                   "iterations => 10, sensitive => ARRAY['id'], release_schema => %s)", (release_schema_of(schema),))
    assert info.value.sqlstate == "22023"
    assert 'column "w"' in str(info.value) and "NaN" in str(info.value)
    assert "NULL" in info.value.diag.message_hint
    assert db.execute("SELECT count(*) FROM anon.releases WHERE release_schema = %s",
                      (release_schema_of(schema),)).fetchone()[0] == 0          # nothing half-built


def test_floats_are_bounded_by_their_exact_text_not_the_rounding_cast(db, schema):
    """PostgreSQL 15 casts float8 to numeric with 15 significant digits and float4 with 6; the
    released bounds are the floats' exact text form, so 123456.71 is not published as 123457."""
    db.execute("CREATE TABLE vals (id int PRIMARY KEY, v float4, w float8)")
    db.execute("INSERT INTO vals SELECT i, 123456.71::float4 + i, 1234567890123456::float8 + i "
               "FROM generate_series(1, 6) i")
    db.execute("SELECT anon.set_column_role('vals', 'id', 'sensitive')")
    rel = release(db, schema)
    lost = db.execute(f"SELECT s.id FROM {rel} r JOIN vals s USING (id) "
                      "WHERE NOT (r.v @> s.v::text::numeric AND r.w @> s.w::text::numeric)").fetchall()
    assert lost == []
    assert db.execute(f"SELECT bool_and(lower(r.v) <> round(lower(r.v))) FROM {rel} r").fetchone()[0]


def test_a_session_that_rounds_floats_cannot_build_a_float_release(db, schema):
    """With extra_float_digits < 1 the text form of a float is rounded too: every build path
    refuses (naming the columns) instead of publishing rounded bounds; the old release stays."""
    db.execute("CREATE TABLE vals (id int PRIMARY KEY, v float8)")
    db.execute("INSERT INTO vals SELECT i, 1234567890123456::float8 + i FROM generate_series(1, 6) i")
    db.execute("SELECT anon.set_column_role('vals', 'id', 'sensitive')")
    db.execute("SET extra_float_digits = 0")
    try:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="extra_float_digits"):
            release(db, schema)
        db.execute("RESET extra_float_digits")
        rel = release(db, schema)
        before = db.execute(f"SELECT v::text FROM {rel} ORDER BY 1").fetchall()
        db.execute("SET extra_float_digits = 0")
        for refresh in (f"REFRESH MATERIALIZED VIEW {matview(db, rel)}", f"SELECT anon.refresh('{rel}')"):
            with pytest.raises(psycopg.errors.InvalidParameterValue, match="'v'"):
                db.execute(refresh)
    finally:
        db.execute("RESET extra_float_digits")
    assert db.execute(f"SELECT v::text FROM {rel} ORDER BY 1").fetchall() == before


# ---------------------------------------------------------------------------- value-set literals

@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.none(), st.text(max_size=8),
                          st.sampled_from(["", "NULL", "null", " a", "a b", "{x}", 'q"t', "b\\s",
                                           "a,b", "\t", "\u00a0", "é", "NuLl"])),
                max_size=6))
def test_value_set_literals_read_back_as_the_same_values(db, values):
    """Released value sets travel as text[] literals whose elements are quoted only where
    array_in needs it: PostgreSQL must read every such literal back as exactly the values."""
    values = [v.replace("\x00", "") if v is not None else None for v in values]
    literal = "{" + ",".join(array_element(v) for v in values) + "}"
    assert db.execute("SELECT %s::text[]", (literal,)).fetchone()[0] == values
