"""Adversarial: a plain Mondrian fit of 210,000 rows (the compiled fit's large-table path) of a
table and columns named with mixed case, spaces, quotes and commas, QIs holding NULLs (an
integer QI NULL on a third of the rows, a date QI with +-infinity and 4713 BC, a text QI with
'', 'NULL', quotes, braces, backslashes and 0x01 / 0x02), on the compact layout whose ranges and
sets the compiled writer makes. Checked from the released rows against the source: every row
once, each non-NULL value inside its class's range, each text in its class's set, classes of at
least k rows."""
from __future__ import annotations

from psycopg import sql

from tests.helpers import release_schema_of

ROWS = 210_000
K = 7
TABLE = 'Odd "Tab", le'
QIS = ["Int Col", 'Da"te', "t,x"]


def test_a_large_fit_of_odd_names_and_nulls_keeps_k_and_truthful_ranges(db, schema):
    db.execute(sql.SQL("""CREATE TABLE {} (id int, {} int, {} date, {} text, s int)""").format(
        sql.Identifier(TABLE), *map(sql.Identifier, QIS)))
    db.execute(sql.SQL("""INSERT INTO {} SELECT g,
        CASE WHEN g %% 3 = 0 THEN NULL ELSE (g * 7919) %% 100003 END,
        CASE g %% 11 WHEN 0 THEN date 'infinity' WHEN 1 THEN date '-infinity'
                    WHEN 2 THEN date '4713-01-01 BC' WHEN 3 THEN NULL
                    ELSE date '1990-01-01' + (g * 31) %% 9000 END,
        (ARRAY['', 'NULL', NULL, 'a"b', '{{x,y}}', 'c\\d', e'\\x01', e'\\x02', 'plain', ' '])
            [1 + (g * 13) %% 10],
        g %% 5
        FROM generate_series(1, %s) g""").format(sql.Identifier(TABLE)), (ROWS,))
    rel = db.execute(sql.SQL(
        "SELECT anon.mondrian_view({}, {}, quasi_identifiers => {}, sensitive => ARRAY['id'], "
        "layout => 'compact', release_schema => {})").format(
            sql.Literal(sql.Identifier(schema, TABLE).as_string(db)), sql.Literal(K),
            sql.Literal(QIS), sql.Literal(release_schema_of(schema)))).fetchone()[0]
    i, d, t = (sql.Identifier(c) for c in QIS)
    assert db.execute(sql.SQL("SELECT count(*), count(DISTINCT id) FROM {}").format(
        sql.SQL(rel))).fetchone() == (ROWS, ROWS)
    outside = db.execute(sql.SQL("""
        SELECT count(*) FROM {rel} r JOIN {src} t USING (id)
        WHERE NOT coalesce((t.{i} IS NULL OR r.{i} @> t.{i})
                           AND (t.{d} IS NULL OR r.{d} @> t.{d})
                           AND EXISTS (SELECT 1 FROM unnest(r.{t}) u
                                       WHERE u IS NOT DISTINCT FROM t.{t}), false)""").format(
        rel=sql.SQL(rel), src=sql.Identifier(schema, TABLE), i=i, d=d, t=t)).fetchone()[0]
    assert outside == 0
    smallest = db.execute(sql.SQL("""SELECT min(n) FROM (SELECT count(*) AS n FROM {}
        GROUP BY {}::text, {}::text, {}::text) c""").format(sql.SQL(rel), i, d, t)).fetchone()[0]
    assert smallest >= K
