"""Adversarial: an int8 QI of small values that also holds values at int8's limit on one row in
13 (2^63-1, 2^63-2 or -2^63; NULL on one in 17), beside a second QI, built out of core at 64kB
and in memory. The top levels compare and widen the regions to the table's extremes, which
float64 rounds out of int8's range (2^63-1 and 2^63-2 to 2^63): read exactly, both releases
keep every row in its class's ranges and k, and the out-of-core one's NCP (computed here from
the released ranges: each row's width over its QI's span, averaged) is not worse than the
in-memory one's by more than 2 %."""
from __future__ import annotations

import json

import pytest

from tests.helpers import class_sizes, release_schema_of

ROWS = 9000
K = 4


def release(db, schema: str, name: str, budget: str | None) -> str:
    if budget:
        db.execute(f"SET plpy_anon.build_memory = '{budget}'")
    try:
        return db.execute(
            "SELECT anon.mondrian_view('t', %s, quasi_identifiers => ARRAY['a', 'z'], "
            "sensitive => ARRAY['id'], release_name => %s, release_schema => %s)",
            (K, name, release_schema_of(schema))).fetchone()[0]
    finally:
        db.execute("RESET plpy_anon.build_memory")


def ncp(db, rel: str) -> float:
    return float(db.execute(f"""
        WITH span AS (SELECT max(a)::numeric - min(a) AS a, max(z)::numeric - min(z) AS z FROM t)
        SELECT avg((coalesce((upper(r.a) - 1)::numeric - lower(r.a), 0) / span.a
                    + ((upper(r.z) - 1)::numeric - lower(r.z)) / span.z) / 2)
        FROM {rel} r, span""").fetchone()[0])


@pytest.mark.parametrize("limit", ["9223372036854775807", "9223372036854775806",
                                   "-9223372036854775808"])
def test_an_int8_limit_in_a_qi_keeps_the_out_of_core_ncp_near_the_in_memory_one(db, schema,
                                                                                 limit):
    db.execute(f"""CREATE TABLE t AS SELECT g AS id, CASE WHEN g % 17 = 0 THEN NULL
        WHEN g % 13 = 0 THEN '{limit}'::int8 ELSE (g * 7919) % 97 END AS a, (g * 31) % 1009 AS z
        FROM generate_series(1, {ROWS}) g""")
    mem, ooc = release(db, schema, "t_mem", None), release(db, schema, "t_ooc", "64kB")
    metrics = db.execute("SELECT metrics FROM anon.releases WHERE format('%%I.%%I', release_schema, "
                         "release_name) = %s", (ooc,)).fetchone()[0]
    metrics = metrics if isinstance(metrics, dict) else json.loads(metrics)
    assert metrics["out_of_core"]["regions"] > 1
    for rel in (mem, ooc):
        assert db.execute(f"SELECT count(*), count(DISTINCT id) FROM {rel}").fetchone() == (
            ROWS, ROWS)
        assert db.execute(f"""SELECT count(*) FROM {rel} r JOIN t USING (id) WHERE NOT
            coalesce((t.a IS NULL OR r.a @> t.a) AND r.z @> t.z, false)""").fetchone()[0] == 0
        assert min(class_sizes(db, rel, ["a", "z"])) >= K
    in_memory, out_of_core = ncp(db, mem), ncp(db, ooc)
    assert out_of_core <= in_memory * 1.02, (in_memory, out_of_core)
