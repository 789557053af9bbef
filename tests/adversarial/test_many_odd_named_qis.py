"""Adversarial: a slice's class literals travel packed one text per literal column, found by
position (q<i> by i, then s<j> by j). Eleven QIs (q10 sorts after q9 only by number), numbers
and texts interleaved, named with mixed case, spaces, quotes, a comma and a backslash; in
memory on either layout and out of core. Checked from the released rows: every row once,
inside each of its class's ranges and sets, classes of k rows."""
from __future__ import annotations

import pytest
from psycopg import sql

from tests.helpers import class_sizes, create_release

NAMES = ["Age", "the zip", 'say "hi"', "a,b", "back\\slash", "q10", "Q9", "s0", "x y z", "ünï", "n"]
NUMERIC = {0, 2, 5, 7, 10}


@pytest.mark.parametrize("layout, memory", [("flat", None), ("compact", None), ("compact", "1kB"),
                                            ("flat", "1kB")])
def test_eleven_odd_named_qis_are_each_released_truthfully(db, schema, layout, memory):
    cols = [sql.Identifier(n) for n in NAMES]
    defs = sql.SQL(", ").join(sql.SQL("{} {}").format(c, sql.SQL("int" if i in NUMERIC else "text"))
                              for i, c in enumerate(cols))
    db.execute(sql.SQL("CREATE TABLE wide (id int, {}, dx text)").format(defs))
    values = sql.SQL(", ").join(
        sql.SQL("(i * {} + {}) % {}").format(sql.Literal(7 + j), sql.Literal(j), sql.Literal(5 + j))
        if j in NUMERIC else
        sql.SQL("(ARRAY['a', E'b\\x01', '', NULL, '\"q\"', E'\\x1f'])[1 + (i * {}) % 6]").format(
            sql.Literal(j + 1))
        for j in range(len(NAMES)))
    db.execute(sql.SQL("INSERT INTO wide SELECT i, {}, 'd' || i % 3 FROM generate_series(1, 300) i")
               .format(values))
    if memory:
        db.execute("SELECT set_config('plpy_anon.build_memory', %s, false)", (memory,))
    rel = create_release(db, "mondrian_view", schema, "wide", k=3, quasi_identifiers=NAMES,
                         sensitive=["id", "dx"], layout=layout)
    assert db.execute(sql.SQL("SELECT count(*), count(DISTINCT id) FROM {}").format(sql.SQL(rel))
                      ).fetchone() == (300, 300)
    inside = sql.SQL(" AND ").join(
        sql.SQL("(t.{0} IS NULL OR r.{0} @> t.{0})").format(c) if j in NUMERIC else
        sql.SQL("EXISTS (SELECT 1 FROM unnest(r.{0}) u WHERE u IS NOT DISTINCT FROM t.{0})").format(c)
        for j, c in enumerate(cols))
    outside = db.execute(sql.SQL("SELECT count(*) FROM {} r JOIN wide t USING (id) WHERE NOT ({})")
                         .format(sql.SQL(rel), inside)).fetchone()[0]
    assert outside == 0
    assert min(class_sizes(db, rel, NAMES)) >= 3
