"""A compact release written from the values its run read (no join back to the source:
plpy_anon.db.stored_classes) must release exactly what a flat release of the same table does,
which computes every bound in SQL from the source's own values: the same rows, compared as
analysts see them (as text, so that a bound's scale or spelling counts too), at the extremes of
every type read so."""
from __future__ import annotations

import json
import string

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from tests.helpers import class_sizes, create_release, matview

EXTREMES = """
CREATE TABLE extremes (id int, i2 int2, i4 int4, i8 int8, f4 float4, f8 float8, d date, word text,
                       note text, at timestamptz, amount numeric, yes bool, raw bytea, x float8,
                       folded text COLLATE case_insensitive, code varchar(12), price numeric(30, 9),
                       ts timestamp, tz timestamptz, n numeric);
INSERT INTO extremes
SELECT i,
       (ARRAY[-32768, 32767, 0, NULL, 7])[1 + i % 5]::int2,
       (ARRAY[-2147483648, 2147483647, 0, NULL, 42, 2147483646])[1 + i % 6]::int4,
       (ARRAY[-9223372036854775808, 9223372036854775807, 0, NULL, 4611686018427387904])[1 + i % 5]::int8,
       (ARRAY['0.1', '1e-45', '3.4028235e38', 'NaN', 'Infinity', '-Infinity', '-0', NULL, '16777216', '1.5'])
           [1 + i % 10]::float4,
       (ARRAY['0.1', '1e-300', '1e15', '1000000000000000.5', 'NaN', 'Infinity', '-Infinity', '-0', NULL,
              '0.30000000000000004', '123456789012345678', '2.5e-7', '1e23'])[1 + i % 13]::float8,
       (ARRAY['infinity', '-infinity', '4713-01-01 BC', '5874897-12-31', '10000-01-01', '0001-01-01',
              '0001-12-31 BC', '2000-01-01', NULL, '1999-12-31'])[1 + i % 10]::date,
       (ARRAY['a', 'b', 'c'])[1 + i % 3],
       (ARRAY['plain', 'with "quotes"', 'comma, here', '{braces}', 'back\\slash', ' spaced ', 'NULL',
              '', 'ünïcødé', NULL, 'null'])[1 + (i * 7) % 11],
       TIMESTAMPTZ '2024-02-29 12:34:56.789012+00' + make_interval(secs => i * 3601.5),
       CASE WHEN i % 9 = 0 THEN NULL ELSE 12345678901234567890.123456789 * i END,
       CASE WHEN i % 4 = 0 THEN NULL ELSE i % 2 = 0 END,
       CASE WHEN i % 5 = 0 THEN NULL ELSE ('\\x' || lpad(to_hex(i), 6, '0'))::bytea END,
       (ARRAY['NaN', 'Infinity', '-0', '1e-300', '0.1'])[1 + i % 5]::float8,
       (ARRAY['HIV', 'hiv', 'Hiv', 'flu'])[1 + i % 4],
       'c' || i, i / 7.0,
       (ARRAY['infinity', '-infinity', '4714-11-24 00:00:00 BC', '294276-12-31 23:59:59.999999',
              '2024-02-29 12:34:56.789012', '2024-02-29 12:34:56.789013', NULL, '0001-01-01 00:00:00 BC',
              '1969-12-31 23:59:59.999999'])[1 + i % 9]::timestamp,
       (ARRAY['infinity', '-infinity', '4714-11-24 00:00:00+00 BC', '294276-12-31 23:59:59.999999+00',
              '2024-02-29 12:34:56.789012+05:30', '2250-01-01 00:00:00.000001+00', NULL,
              '2250-01-01 00:00:00.000002+00'])[1 + i % 8]::timestamptz,
       -- one float8 for distinct values (20 digits; 1e400, 1e-400 beyond float8's range)
       (ARRAY['1.00000000000000000001', '1.00000000000000000002', '1e400', '-1e400', '1e-400', 'NaN',
              'Infinity', '-Infinity', NULL, '12345678901234567890.123456789', '0', '-2.50',
              '0.99999999999999999999'])[1 + (i * 5) % 13]::numeric
FROM generate_series(1, 240) i;
"""
QIS = ["i2", "i4", "i8", "f4", "f8", "d", "ts", "tz", "n", "word"]
SENSITIVE = ["note", "at", "amount", "yes", "raw", "x", "folded", "code", "price"]


@pytest.fixture
def extremes(db, schema):
    db.execute("CREATE COLLATION IF NOT EXISTS public.case_insensitive "
               "(provider = icu, locale = 'und-u-ks-level2', deterministic = false)")
    db.execute(EXTREMES.replace("COLLATE case_insensitive", "COLLATE public.case_insensitive"))
    return "extremes"


def joined_back(db, release: str) -> bool:
    return db.execute("SELECT (parameters->>'joined_back')::bool FROM anon.releases "
                      "WHERE release_schema || '.' || release_name = %s", (release,)).fetchone()[0]


def released_text(db, relation: str, columns: list[str]) -> list[tuple]:
    """Every released row as analysts print it (text), sorted: a multiset to compare."""
    cols = sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(c)) for c in columns)
    rows = db.execute(sql.SQL("SELECT {} FROM {}").format(cols, sql.SQL(relation))).fetchall()
    return sorted(rows, key=repr)


def assert_same_release(db, schema, table, qis, sensitive, k, **kwargs):
    """A compact and a flat release written from the values read, each the same rows (as text)
    as the reference: a flat release joined back to the source (plpy_anon.join_back = on)."""
    made = {}
    for name, layout, join_back in (("c", "compact", "off"), ("f", "flat", "off"), ("ref", "flat", "on")):
        db.execute(f"SET plpy_anon.join_back = {join_back}")
        try:
            made[name] = create_release(db, "mondrian_view", schema, table, k=k, quasi_identifiers=qis,
                                        sensitive=sensitive, layout=layout, release_name=name, **kwargs)
        finally:
            db.execute("RESET plpy_anon.join_back")
    assert [joined_back(db, made[n]) for n in ("c", "f", "ref")] == [False, False, True]
    columns = qis + sensitive
    reference = released_text(db, made["ref"], columns)
    assert released_text(db, made["c"], columns) == reference
    assert released_text(db, made["f"], columns) == reference
    assert columns_of(db, made["f"]) == columns_of(db, made["ref"])
    total = db.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema, table))).fetchone()[0]
    sizes = class_sizes(db, made["c"], qis)
    assert min(sizes) >= k and sum(sizes) == total
    return made["c"]


def columns_of(db, relation: str) -> list[tuple]:
    """Each column's name, type (with its modifier) and collation."""
    return db.execute("SELECT attname, format_type(atttypid, atttypmod), attcollation FROM pg_attribute "
                      "WHERE attrelid = %s::regclass AND attnum > 0 ORDER BY attnum", (relation,)).fetchall()


def test_extreme_values_are_released_exactly_as_a_flat_release_does(db, schema, extremes):
    release = assert_same_release(db, schema, "extremes", QIS, SENSITIVE, k=4)
    # the stored spellings are the source's, not the merged ones l counts with
    spelled = {r[0] for r in db.execute(f"SELECT folded FROM {release}").fetchall()}
    assert spelled == {"HIV", "hiv", "Hiv", "flu"}
    # and every released range holds its row's value: each row's id is not released, so check
    # through the values that are unique per row (amount, at) paired with their source rows
    bad = db.execute(f"""
        SELECT count(*) FROM {release} r JOIN extremes e ON e.at = r.at
        WHERE NOT ((e.i2 IS NULL OR r.i2 @> e.i2::int4) AND (e.i4 IS NULL OR r.i4 @> e.i4)
               AND (e.i8 IS NULL OR r.i8 @> e.i8)
               AND (e.f4 IS NULL OR r.f4 @> e.f4::text::numeric)
               AND (e.f8 IS NULL OR r.f8 @> e.f8::text::numeric)
               AND (e.d IS NULL OR r.d @> e.d) AND e.word = ANY(r.word)
               AND (e.ts IS NULL OR r.ts @> e.ts) AND (e.tz IS NULL OR r.tz @> e.tz)
               AND (e.n IS NULL OR r.n @> e.n)
               AND r.note IS NOT DISTINCT FROM e.note AND r.amount IS NOT DISTINCT FROM e.amount
               AND r.raw IS NOT DISTINCT FROM e.raw AND r.yes IS NOT DISTINCT FROM e.yes)""").fetchone()[0]
    assert bad == 0
    assert db.execute(f"SELECT count(*) FROM {release} r JOIN extremes e ON e.at = r.at").fetchone()[0] == 240


def test_without_sensitive_columns_the_class_sizes_are_stored(db, schema, extremes):
    assert_same_release(db, schema, "extremes", ["i4", "f8", "d"], [], k=6)


def test_l_diversity_and_a_refresh_use_the_values_read(db, schema, extremes):
    release = assert_same_release(db, schema, "extremes", ["i4", "f8", "word"], ["note"], k=4, l=3)
    db.execute("DELETE FROM extremes WHERE id % 7 = 0")
    db.execute("SELECT * FROM anon.refresh(%s)", (release,))
    assert sum(class_sizes(db, release, ["i4", "f8", "word"])) == db.execute(
        "SELECT count(*) FROM extremes").fetchone()[0]
    low = db.execute(f"""SELECT count(*) FROM (SELECT count(DISTINCT note) AS n FROM {release}
                         GROUP BY i4, f8, word) c WHERE n < 3""").fetchone()[0]
    assert low == 0


def test_numeric_bounds_keep_a_spelling_the_source_has(db, schema):
    """Equal numerics spelled apart (1.0, 1.00) make one value; a bound is spelled as the
    source spells it (the first read), and every range equals the joined-back one as a value."""
    db.execute("""CREATE TABLE spelled AS SELECT i AS id, (ARRAY['1.0', '1.00', '1', '2.50', '2.5', '-0.000',
                  '0', '3', '3.000000000000000000001'])[1 + i % 9]::numeric AS n, 'd' || i % 3 AS dx
                  FROM generate_series(1, 90) i""")
    made = {}
    for name, join_back in (("c", "off"), ("ref", "on")):
        db.execute(f"SET plpy_anon.join_back = {join_back}")
        try:
            made[name] = create_release(db, "mondrian_view", schema, "spelled", k=10,
                                        quasi_identifiers=["n"], sensitive=["dx"], release_name=name)
        finally:
            db.execute("RESET plpy_anon.join_back")
    assert not joined_back(db, made["c"]) and joined_back(db, made["ref"])
    differ = db.execute(f"""SELECT (SELECT count(*) FROM (SELECT n FROM {made['c']} EXCEPT ALL
                                                        SELECT n FROM {made['ref']}) a)
                                 + (SELECT count(*) FROM (SELECT n FROM {made['ref']} EXCEPT ALL
                                                        SELECT n FROM {made['c']}) b)""").fetchone()[0]
    assert differ == 0
    spellings = {r[0] for r in db.execute("SELECT n::text FROM spelled").fetchall()}
    bounds = db.execute(f"SELECT DISTINCT lower(n)::text, upper(n)::text FROM {made['c']}").fetchall()
    assert bounds and all(lo in spellings and hi in spellings for lo, hi in bounds)


@pytest.mark.parametrize("value", ["('v' || i % 3 || '  ')::bpchar", "'pg_class'::regclass"])
def test_sensitive_columns_whose_text_is_not_their_value_are_joined_back(db, schema, value):
    """bpchar without a length: its ::text drops the trailing blanks it keeps; regclass prints
    a name another search_path reads as another object."""
    db.execute(f"CREATE TABLE odd AS SELECT i % 10 AS age, {value} AS code FROM generate_series(1, 50) i")
    release = create_release(db, "mondrian_view", schema, "odd", k=5, quasi_identifiers=["age"],
                             sensitive=["code"], layout="compact")
    assert joined_back(db, release) is True


def release_function(name: str, body: str) -> str:
    """``pg_temp.<name>(release text) RETURNS text``: ``body`` (PL/Python) run with the release's
    catalog ``row``, its ``params``, its ``relation`` and ``storage`` and its ``sensitive``
    columns at hand."""
    return f"""
CREATE OR REPLACE FUNCTION pg_temp.{name}(release text) RETURNS text AS $body$
import json
from plpy_anon.db import class_counts, release_rows
row = release_rows.find(plpy, release)
params = json.loads(row["parameters"])
relation, storage = class_counts.storage_for(plpy, row)
sensitive = params["sensitive"]
{body}
$body$ LANGUAGE plpython3u"""


# the class x value tables of a compact release as its check counts them (from its stored
# classes: class_counts.read_stored, or in SQL where it cannot), each class a sorted list of
# (value rank, rows) pairs with its size
STORED_PAIRS = release_function("stored_pairs", """\
read = class_counts.read_stored(plpy, storage, params["quasi_identifiers"], sensitive) is not None
counts = class_counts.Counter(plpy, row).get(relation, params["quasi_identifiers"], sensitive)
out = {"read_stored": read, "sizes": dict(zip(counts.sizes.tolist(), counts.classes.tolist()))}
for s in sensitive:
    pairs = {}
    for c, v, n in zip(*(a.tolist() for a in counts.tables[s])):
        pairs.setdefault(c, []).append([v, n])
    out[s] = sorted(sorted(p) for p in pairs.values())
return json.dumps(out)""")


def counted_in_sql(db, relation: str, qis: list[str], column: str) -> list:
    """Each class's (value rank, rows) pairs of ``column`` counted over what analysts read: its
    values grouped by their type's equality and collation, ranked in its order, NULL -1."""
    group = sql.SQL(", ").join(sql.SQL("p.{}").format(sql.Identifier(q)) for q in qis)
    inner = sql.SQL(", ").join(sql.Identifier(q) for q in qis)
    col = sql.Identifier(column)
    query = sql.SQL("""
        SELECT array_agg(ARRAY[coalesce(r.r, -1), p.n] ORDER BY coalesce(r.r, -1))
        FROM (SELECT {inner}, {col} AS v, count(*) AS n FROM {rel} GROUP BY {inner}, {col}) AS p
        LEFT JOIN (SELECT u.v, dense_rank() OVER (ORDER BY u.v) - 1 AS r
                   FROM (SELECT DISTINCT {col} AS v FROM {rel} WHERE {col} IS NOT NULL) AS u) AS r
               ON r.v = p.v
        GROUP BY {group}""").format(inner=inner, col=col, rel=sql.SQL(relation), group=group)
    return sorted(p for (p,) in db.execute(query).fetchall())


@pytest.mark.parametrize("datestyle", [None, "SQL, DMY"])
def test_stored_classes_count_each_value_as_sql_groups_it(db, schema, extremes, datestyle):
    """The check's class x value tables read from a compact release's stored texts are those
    SQL counts over the released rows: equal values spelled apart (case-insensitive 'HIV' and
    'hiv', -0 and 0) one value, NULLs -1, empty texts, quotes, braces, commas and backslashes
    values like any other, under any DateStyle and TimeZone."""
    qis = ["i4", "word"]
    release = create_release(db, "mondrian_view", schema, "extremes", k=4, quasi_identifiers=qis,
                             sensitive=SENSITIVE, layout="compact")
    db.execute(STORED_PAIRS)
    if datestyle:
        db.execute(f"SET DateStyle = '{datestyle}'")
        db.execute("SET TimeZone = 'Asia/Shanghai'")
    try:
        got = json.loads(db.execute("SELECT pg_temp.stored_pairs(%s)", (release,)).fetchone()[0])
    finally:
        reset(db)
    assert got["read_stored"] is True
    for column in SENSITIVE:
        assert got[column] == counted_in_sql(db, release, qis, column), column
    assert len({v for c in got["folded"] for v, _ in c}) == 2          # HIV (any case), flu
    assert any(v == -1 for c in got["note"] for v, _ in c)


SET_STORED_CHUNK = """
DO $do$
from plpy_anon.db import class_counts
class_counts.STORED_CHUNK_BLOCKS = %d
$do$ LANGUAGE plpython3u"""


def test_stored_classes_read_a_few_blocks_at_a_time_count_as_sql_does(db, schema):
    """The stored classes are read a range of blocks at a time, each range's classes in one row:
    read a block at a time (hundreds of ranges, classes without a value, NULLs, a value of the
    delimiter's neighbours), each class's (value, rows) pairs are those SQL counts."""
    db.execute(r"""CREATE TABLE spread AS SELECT i, i % 300 AS age,
                   CASE WHEN i % 7 = 0 THEN NULL WHEN i % 11 = 0 THEN E'\x02'
                        ELSE 'dx' || (i * 31) % 13 END AS dx,
                   CASE WHEN i < 40 THEN NULL ELSE (i % 5)::text END AS note
                   FROM generate_series(1, 6000) i""")
    release = create_release(db, "mondrian_view", schema, "spread", k=4, quasi_identifiers=["age"],
                             sensitive=["dx", "note"], layout="compact")
    blocks = db.execute("SELECT pg_relation_size(%s::regclass) / 8192",
                        (release + "_classes",)).fetchone()[0]
    assert blocks > 10
    db.execute(STORED_PAIRS)
    db.execute(SET_STORED_CHUNK % 1)
    try:
        got = json.loads(db.execute("SELECT pg_temp.stored_pairs(%s)", (release,)).fetchone()[0])
    finally:
        db.execute(SET_STORED_CHUNK % 2048)
    assert got["read_stored"] is True
    sizes = class_sizes(db, release, ["age"])
    assert got["sizes"] == {str(size): sizes.count(size) for size in set(sizes)}
    for column in ("dx", "note"):
        assert got[column] == counted_in_sql(db, release, ["age"], column), column


# a bounded pass's figures (an out-of-core release's check) of a compact release: from its stored
# classes, and counted in SQL over the view it publishes
STREAMED_FIGURES = release_function("streamed_figures", """\
ordered = {s: i % 2 == 0 for i, s in enumerate(sensitive)}
out = {}
for how, where in (("stored", storage), ("sql", None)):
    counts = class_counts.count(plpy, relation, params["quasi_identifiers"], sensitive, where,
                                budget=64 << 20, ordered=ordered)
    out[how] = {"sizes": dict(zip(counts.sizes.tolist(), counts.classes.tolist())),
                "fewest": {s: counts.fewest_distinct(s) for s in sensitive},
                "figures": {s: counts.sensitive_figures(s, ordered=ordered[s], c=3.0)
                            for s in sensitive}}
out["read_stored"] = class_counts.read_stored(plpy, storage, params["quasi_identifiers"], sensitive,
                                              streamed=ordered) is not None
return json.dumps(out, default=float)""")


def test_a_bounded_pass_over_stored_classes_has_the_figures_sql_counts(db, schema, extremes):
    """An out-of-core release's check keeps figures, not tables: read from the stored texts in
    two passes (the values first), they are those of the pass counting the view in SQL."""
    release = create_release(db, "mondrian_view", schema, "extremes", k=4, quasi_identifiers=["i4", "word"],
                             sensitive=SENSITIVE, layout="compact")
    db.execute(STREAMED_FIGURES)
    got = json.loads(db.execute("SELECT pg_temp.streamed_figures(%s)", (release,)).fetchone()[0])
    assert got["read_stored"] is True
    assert got["stored"] == got["sql"]
    assert got["stored"]["fewest"]["folded"] >= 1 and got["stored"]["fewest"]["note"] >= 1


MERGED_COUNTS = """
CREATE OR REPLACE FUNCTION pg_temp.merged_counts() RETURNS text AS $merged$
import json
from plpy_anon.db import class_counts
storage = class_counts.Storage("stored", "coalesce(GREATEST(pg_catalog.cardinality(s.dx)), 0)")
counts = class_counts.count(plpy, "unfolded", ["age"], ["dx"], storage)
return json.dumps({"sizes": dict(zip(counts.sizes.tolist(), counts.classes.tolist())),
                   "fewest": counts.fewest_distinct("dx")})
$merged$ LANGUAGE plpython3u"""


def test_stored_classes_an_analyst_sees_as_one_are_counted_as_one(db, schema):
    """Two stored classes with the same released QIs are one class to an analyst: counted
    through the view, its rows and distinct values are theirs together."""
    db.execute("CREATE TABLE stored (age int4range, dx text[])")
    db.execute("INSERT INTO stored VALUES ('[20,29]', ARRAY['a', 'a', 'a']), ('[20,29]', ARRAY['b', 'b']), "
               "('[30,39]', ARRAY['c', 'd', 'c', 'd'])")
    db.execute("CREATE VIEW unfolded AS SELECT s.age, u.dx FROM stored s CROSS JOIN LATERAL unnest(s.dx) AS u(dx)")
    db.execute(MERGED_COUNTS)
    got = json.loads(db.execute("SELECT pg_temp.merged_counts()").fetchone()[0])
    assert got == {"sizes": {"4": 1, "5": 1}, "fewest": 2}
    db.execute("UPDATE stored SET age = '[40,49]' WHERE dx = ARRAY['b', 'b']")
    got = json.loads(db.execute("SELECT pg_temp.merged_counts()").fetchone()[0])
    assert got == {"sizes": {"2": 1, "3": 1, "4": 1}, "fewest": 1}


def test_a_stored_value_holding_the_delimiter_is_counted_in_sql(db, schema):
    """A value holding the byte the stored texts are split at cannot be told from two values:
    the pass counts those classes in SQL instead, with the same figures."""
    db.execute("CREATE TABLE odd AS SELECT i % 10 AS age, "
               "(ARRAY['a' || chr(1) || 'b', 'a', 'b', NULL])[1 + i % 4] AS code "
               "FROM generate_series(1, 80) i")
    release = create_release(db, "mondrian_view", schema, "odd", k=8, quasi_identifiers=["age"],
                             sensitive=["code"], layout="compact", l=2)
    db.execute(STORED_PAIRS)
    got = json.loads(db.execute("SELECT pg_temp.stored_pairs(%s)", (release,)).fetchone()[0])
    assert got["read_stored"] is False
    assert got["code"] == counted_in_sql(db, release, ["age"], "code")
    assert {v for c in got["code"] for v, _ in c} == {-1, 0, 1, 2}


def test_a_char_n_sensitive_column_is_padded_back(db, schema):
    """char(n)::text drops the padding; the cast back to char(n) restores it, as the source's."""
    db.execute("CREATE TABLE padded AS SELECT i % 10 AS age, ('v' || i % 3)::char(4) AS code, "
               "(ARRAY['a', 'b c', NULL])[1 + i % 3]::character(3) AS code2 FROM generate_series(1, 60) i")
    release = assert_same_release(db, schema, "padded", ["age"], ["code", "code2"], k=5)
    assert {r[0] for r in db.execute(f"SELECT octet_length(code) FROM {release}").fetchall()} == {4}


def test_a_float_sensitive_column_needs_exact_float_text(db, schema, extremes):
    db.execute("SET extra_float_digits = 0")
    try:
        with pytest.raises(Exception, match="extra_float_digits"):
            create_release(db, "mondrian_view", schema, "extremes", k=5, quasi_identifiers=["i4"],
                           sensitive=["x"], layout="compact")
    finally:
        db.execute("RESET extra_float_digits")


TEXT = st.text(alphabet=string.ascii_letters + ' ,{}"\\\'é', max_size=6)


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=st.lists(st.tuples(
    st.one_of(st.none(), st.integers(-2**63, 2**63 - 1)),
    st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
    st.one_of(st.none(), st.integers(-2_000_000, 2_000_000)),
    st.one_of(st.none(), TEXT)), min_size=6, max_size=60),
    k=st.integers(2, 6))
def test_random_tables_release_as_flat_ones_do(db, schema, rows, k):
    if len(rows) < k:
        return
    db.execute("CREATE TABLE IF NOT EXISTS r (big int8, real float8, day date, label text)")
    db.execute("TRUNCATE r")
    with db.cursor() as cur:
        cur.executemany("INSERT INTO r VALUES (%s, %s::float8, DATE '2000-01-01' + %s::int, %s)",
                        [(b, None if f is None else repr(f), d, t) for b, f, d, t in rows])
    assert_same_release(db, schema, "r", ["big", "real", "day"], ["label"], k=k, replace=True)


def test_a_partitioned_source_is_released_as_a_flat_release_does(db, schema):
    db.execute("""
        CREATE TABLE visits (age int, day date, ward text, dx text) PARTITION BY RANGE (age);
        CREATE TABLE visits_young PARTITION OF visits FOR VALUES FROM (MINVALUE) TO (50);
        CREATE TABLE visits_old PARTITION OF visits FOR VALUES FROM (50) TO (MAXVALUE);
        INSERT INTO visits SELECT 18 + i % 70, DATE '2020-01-01' + i % 400, 'w' || i % 4,
                                  (ARRAY['flu', 'gout', NULL, 'hiv'])[1 + i % 4]
        FROM generate_series(1, 500) i""")
    assert_same_release(db, schema, "visits", ["age", "day", "ward"], ["dx"], k=5)


def test_the_release_depends_on_its_source_and_columns(db, schema, extremes):
    create_release(db, "mondrian_view", schema, "extremes", k=5, quasi_identifiers=["i4", "word"],
                   sensitive=["note"], layout="compact")
    for statement in ("DROP TABLE extremes", "ALTER TABLE extremes DROP COLUMN note",
                      "ALTER TABLE extremes ALTER COLUMN i4 TYPE numeric"):
        with pytest.raises((psycopg.errors.DependentObjectsStillExist,
                            psycopg.errors.FeatureNotSupported)), db.transaction():
            db.execute(statement)
    # one it does not release stays free to change
    db.execute("ALTER TABLE extremes DROP COLUMN amount")


@pytest.mark.parametrize("how", ["anon.refresh", "REFRESH MATERIALIZED VIEW"])
@pytest.mark.parametrize("layout", ["compact", "flat"])
@pytest.mark.parametrize("swapped", [("diagnosis", "full_name"), ("age", "zip")])
def test_a_refresh_after_columns_were_renamed_is_refused(db, schema, how, layout, swapped):
    """Read by name, swapped names would release one column under the other's name (a name as a
    diagnosis, a zip code as an age); refused, the old release kept."""
    db.execute("CREATE TABLE pat AS SELECT i % 30 AS age, i % 7 AS zip, 'diag' || i % 5 AS diagnosis, "
               "'Person ' || i AS full_name FROM generate_series(1, 300) i")
    release = create_release(db, "mondrian_view", schema, "pat", k=5, quasi_identifiers=["age", "zip"],
                             sensitive=["diagnosis"], identifiers=["full_name"], layout=layout)
    first, second = swapped
    db.execute(f"ALTER TABLE pat RENAME {first} TO tmp")
    db.execute(f"ALTER TABLE pat RENAME {second} TO {first}")
    db.execute(f"ALTER TABLE pat RENAME tmp TO {second}")
    statement = (f"SELECT anon.refresh('{release}')" if how == "anon.refresh"
                 else f"REFRESH MATERIALIZED VIEW {matview(db, release)}")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="renamed"):
        db.execute(statement)
    assert db.execute(f"SELECT count(*) FROM {release} WHERE diagnosis LIKE 'Person%'").fetchone()[0] == 0
    assert db.execute(f"SELECT count(*) FROM {release}").fetchone()[0] == 300


@pytest.mark.parametrize("datestyle, timezone", [("SQL, MDY", "Asia/Shanghai"), ("Postgres, DMY", "Asia/Kolkata"),
                                                 ("SQL, YMD", "Europe/Dublin")])
def test_dates_and_times_survive_any_session_settings(db, schema, datestyle, timezone):
    """Read and read back in the caller's session: zone abbreviations (CST, IST) and day-month
    orders must not shift a value."""
    db.execute("CREATE TABLE visits AS SELECT 20 + i % 10 AS age, "
               "TIMESTAMPTZ '2024-05-01 12:00+00' + i * INTERVAL '1 min' AS seen, "
               "DATE '2024-01-01' + i AS day, TIMESTAMP '2024-07-01 08:00' + i * INTERVAL '1 hour' AS at, "
               "i * INTERVAL '-1 day 3 hours' AS took FROM generate_series(1, 40) i")
    db.execute(f"SET DateStyle = '{datestyle}'")
    db.execute(f"SET TimeZone = '{timezone}'")
    db.execute("SET IntervalStyle = 'sql_standard'")
    try:
        release = create_release(db, "mondrian_view", schema, "visits", k=4, quasi_identifiers=["age"],
                                 sensitive=["seen", "day", "at", "took"], layout="compact")
        db.execute(f"REFRESH MATERIALIZED VIEW {release}_classes")
        reset(db)
        assert joined_back(db, release) is False
        differing = db.execute(f"""SELECT count(*) FROM (SELECT seen, day, at, took FROM {release}
                                   EXCEPT ALL SELECT seen, day, at, took FROM visits) d""").fetchone()[0]
        assert differing == 0
        # and as QIs: their ranges as a joined-back release's, under the same settings
        db.execute(f"SET DateStyle = '{datestyle}'")
        db.execute(f"SET TimeZone = '{timezone}'")
        assert_same_release(db, schema, "visits", ["age", "seen", "day", "at"], ["took"], k=4)
    finally:
        reset(db)


def reset(db):
    for setting in ("DateStyle", "TimeZone", "IntervalStyle"):
        db.execute(f"RESET {setting}")


def test_a_sensitive_columns_collation_is_kept(db, schema, extremes):
    release = assert_same_release(db, schema, "extremes", ["i4"], ["folded", "note"], k=4)
    collations = db.execute("SELECT attname, attcollation::regcollation::text FROM pg_attribute "
                            "WHERE attrelid = %s::regclass AND attname IN ('folded', 'note') ORDER BY 1",
                            (release,)).fetchall()
    assert collations == [("folded", "case_insensitive"), ("note", '"default"')]
    assert db.execute(f"SELECT count(*) FROM {release} WHERE folded = 'hiv'").fetchone()[0] == 180


@pytest.mark.parametrize("layout", ["compact", "flat"])
def test_a_float_range_as_wide_as_float8_is_released(db, schema, layout):
    """Its spread (inf / inf) is no number: the metric is stored as null, the release published."""
    db.execute("CREATE TABLE wide AS SELECT (CASE WHEN i % 2 = 0 THEN '1.7976931348623157e308' "
               "ELSE '-1.7976931348623157e308' END)::float8 AS b, i::text AS s FROM generate_series(1, 20) i")
    release = create_release(db, "mondrian_view", schema, "wide", k=3, quasi_identifiers=["b"],
                             sensitive=["s"], layout=layout)
    assert db.execute(f"SELECT count(*) FROM {release}").fetchone()[0] == 20
    report = db.execute("SELECT ncp_per_attribute FROM anon.release_report(%s)", (release,)).fetchone()[0]
    assert report["b"] is None


def test_a_table_named_like_the_check_does_not_hide_a_rename(db, schema):
    """The rename check reads the start of the release's definition, not any text in it."""
    db.execute("CREATE TABLE t5 AS SELECT i % 20 AS age, (ARRAY['flu', 'hiv', 'gout'])[1 + i % 3] AS dx, "
               "'SSN-' || i AS ssn FROM generate_series(1, 60) i")
    release = create_release(db, "mondrian_view", schema, "t5", k=5, quasi_identifiers=["age"],
                             sensitive=["dx"], identifiers=["ssn"], layout="flat")
    db.execute("ALTER TABLE t5 RENAME dx TO tmp")
    db.execute("ALTER TABLE t5 RENAME ssn TO dx")
    db.execute("ALTER TABLE t5 RENAME tmp TO ssn")
    db.execute('ALTER TABLE t5 RENAME TO "released_columns AS ( SELECT s.age, s.dx FROM "')
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="renamed"):
        db.execute(f"SELECT anon.refresh('{release}')")
    assert db.execute(f"SELECT count(*) FROM {release} WHERE dx LIKE 'SSN%'").fetchone()[0] == 0


@pytest.mark.parametrize("name", ["a  b", "患者\u3000診断", "tab\there", "x AS y", "from"])
def test_odd_column_names_refresh_and_restore(db, schema, name):
    db.execute(sql.SQL("CREATE TABLE odd AS SELECT i % 20 AS age, 'd' || i % 3 AS {} "
                       "FROM generate_series(1, 60) i").format(sql.Identifier(name)))
    for layout in ("compact", "flat"):
        release = create_release(db, "mondrian_view", schema, "odd", k=5, quasi_identifiers=["age"],
                                 sensitive=[name], layout=layout, release_name=f"odd_{layout}")
        db.execute(f"SELECT anon.refresh('{release}')")
        db.execute(f"REFRESH MATERIALIZED VIEW {matview(db, release)}")
        assert db.execute(f"SELECT count(*) FROM {release}").fetchone()[0] == 60
