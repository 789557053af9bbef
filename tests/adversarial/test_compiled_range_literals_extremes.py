"""Adversarial: range literals of integer, date and timestamp QIs written by the compiled writer
(class_sets.ClassRanges), which a release of at least mondrian_jit.COMPILED_FROM_ROWS rows takes
even in a fresh backend. The QIs hold int2's, int4's and int8's limits, dates at 4713 BC, at
5874897 AD and +-infinity, timestamps at 4713 BC and 294276 AD and +-infinity, with and without
time zone (in a session whose TimeZone is not UTC), and NULLs, on the compact layout
(whose ranges are the literals written). Checked from the released rows
against the source: every row once, each non-NULL value inside its class's released range (a
NULL range for a non-NULL value counts as outside), classes of k rows and l distinct values."""
from __future__ import annotations

from tests.helpers import class_sizes, create_release, distinct_sensitive_per_class

ROWS = 51_000
QIS = ["i2", "i4", "i8", "dt", "ts", "tz"]

LOAD = f"""
INSERT INTO extremes SELECT i,
  CASE i % 5 WHEN 0 THEN 32767 WHEN 1 THEN -32768 WHEN 2 THEN NULL ELSE i % 97 END,
  CASE i % 7 WHEN 0 THEN 2147483647 WHEN 1 THEN -2147483648 WHEN 2 THEN NULL ELSE i END,
  CASE i % 7 WHEN 0 THEN 9223372036854775807 WHEN 1 THEN -9223372036854775808
             WHEN 2 THEN NULL WHEN 3 THEN 9223372036854775806 ELSE i::int8 * 1000003 END,
  CASE i % 9 WHEN 0 THEN date 'infinity' WHEN 1 THEN date '-infinity' WHEN 2 THEN NULL
             WHEN 3 THEN date '4713-01-01 BC' WHEN 4 THEN date '5874897-12-31'
             ELSE date '2000-01-01' + i % 3000 END,
  CASE i % 8 WHEN 0 THEN timestamp 'infinity' WHEN 1 THEN timestamp '-infinity' WHEN 2 THEN NULL
             WHEN 3 THEN timestamp '4713-01-01 00:00:00 BC'
             WHEN 4 THEN timestamp '294276-12-31 23:59:59.999999'
             ELSE timestamp '2000-01-01' + i * interval '37 minutes 0.000001 seconds' END,
  CASE i % 8 WHEN 0 THEN timestamptz 'infinity' WHEN 1 THEN timestamptz '-infinity'
             WHEN 2 THEN NULL WHEN 3 THEN timestamptz '4713-01-01 00:00:00+00 BC'
             WHEN 4 THEN timestamptz '294276-12-31 23:59:59.999999+00'
             ELSE timestamptz '2000-01-01 00:00:00+00' + i * interval '41 minutes' END,
  's' || (i % 3)
FROM generate_series(1, {ROWS}) i"""

CHECK = """
SELECT count(*) FROM {rel} r JOIN extremes t USING (id)
WHERE NOT (coalesce(t.i2 IS NULL OR r.i2 @> t.i2::int4, false)
           AND coalesce(t.i4 IS NULL OR r.i4 @> t.i4, false)
           AND coalesce(t.i8 IS NULL OR r.i8 @> t.i8, false)
           AND coalesce(t.dt IS NULL OR r.dt @> t.dt, false)
           AND coalesce(t.ts IS NULL OR r.ts @> t.ts, false)
           AND coalesce(t.tz IS NULL OR r.tz @> t.tz, false))"""


def test_compiled_range_literals_of_extreme_integers_dates_and_times_are_truthful(db, schema):
    db.execute("SET TimeZone = 'America/St_Johns'")
    try:
        released_truthfully(db, schema)
    finally:
        db.execute("RESET TimeZone")


def released_truthfully(db, schema):
    db.execute("CREATE TABLE extremes (id int, i2 int2, i4 int4, i8 int8, dt date, ts timestamp, "
               "tz timestamptz, s text)")
    db.execute(LOAD)
    rel = create_release(db, "mondrian_view", schema, "extremes", k=4, l=2, quasi_identifiers=QIS,
                         sensitive=["id", "s"], layout="compact")
    assert db.execute(f"SELECT count(*), count(DISTINCT id) FROM {rel}").fetchone() == (ROWS, ROWS)
    assert db.execute(CHECK.format(rel=rel)).fetchone()[0] == 0
    assert min(class_sizes(db, rel, QIS)) >= 4
    assert min(distinct_sensitive_per_class(db, rel, QIS, "s")) >= 2
