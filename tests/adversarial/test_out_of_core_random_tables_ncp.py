"""Adversarial: random tables (hypothesis: sizes, skews, duplicates, NULLs, negative and int8-wide
values) built out of core at a small budget and in memory. From the released rows, in SQL
against the source: every row once, each value inside its class's range, classes of k rows,
and the out-of-core release's NCP (each row's range width over its QI's span, averaged over the
rows and QIs, computed here from the ranges analysts read) not worse than the in-memory one's
by more than 2 %."""
from __future__ import annotations

import itertools
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import class_sizes, release_schema_of

QIS = ["a", "b"]
K = 5
EXAMPLE = itertools.count()


def build(db, schema: str, table: str, name: str, budget: str | None) -> str:
    if budget:
        db.execute(f"SET plpy_anon.build_memory = '{budget}'")
    try:
        return db.execute(
            "SELECT anon.mondrian_view(%s::regclass, %s, quasi_identifiers => ARRAY['a', 'b'], "
            "sensitive => ARRAY['id'], release_name => %s, replace => true, "
            "release_schema => %s)", (table, K, name, release_schema_of(schema))).fetchone()[0]
    finally:
        db.execute("RESET plpy_anon.build_memory")


def ncp(db, rel: str, table: str) -> float:
    """Mean over rows and QIs of (upper - lower) / (the source's max - min); a NULL range 0."""
    return float(db.execute(f"""
        WITH span AS (SELECT max(a)::numeric - min(a) AS a, max(b)::numeric - min(b) AS b FROM {table})
        SELECT avg((coalesce((upper(r.a) - 1)::numeric - lower(r.a), 0) / nullif(span.a, 0)
                    + coalesce((upper(r.b) - 1)::numeric - lower(r.b), 0) / nullif(span.b, 0)) / 2)
        FROM {rel} r, span""").fetchone()[0] or 0)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.integers(3000, 20000), budget=st.sampled_from(["8kB", "64kB"]), spread_a=st.sampled_from([7, 300, 100003, 2**62]),
       spread_b=st.sampled_from([2, 50, 9973]), skew=st.integers(0, 9),
       nulls=st.integers(0, 30), seed=st.integers(0, 10**6))
def test_random_tables_out_of_core_keep_k_truthful_ranges_and_in_memory_ncp(
        db, schema, rows, budget, spread_a, spread_b, skew, nulls, seed):
    table = f"rnd{next(EXAMPLE)}"
    db.execute("SELECT setseed(%s)", (seed / 10**6,))
    db.execute(f"""CREATE TABLE {table} AS SELECT g AS id,
        CASE WHEN random() * 100 < %s THEN NULL WHEN g %% 10 < %s THEN 42::int8
             ELSE (floor(random() * %s) - %s / 2)::int8 END AS a,
        CASE WHEN random() * 100 < %s THEN NULL ELSE floor(random() * %s)::int8 END AS b
        FROM generate_series(1, %s) g""",
               (nulls, skew, float(spread_a), float(spread_a), nulls, spread_b, rows))
    db.execute(f"ANALYZE {table}")
    mem = build(db, schema, table, f"{table}_mem", None)
    ooc = build(db, schema, table, f"{table}_ooc", budget)
    metrics = db.execute("SELECT metrics FROM anon.releases WHERE format('%%I.%%I', release_schema, "
                         "release_name) = %s", (ooc,)).fetchone()[0]
    metrics = metrics if isinstance(metrics, dict) else json.loads(metrics)
    assert metrics["out_of_core"]["regions"] > 1
    for rel in (mem, ooc):
        assert db.execute(f"SELECT count(*), count(DISTINCT id) FROM {rel}").fetchone() == (
            rows, rows)
        assert db.execute(f"""SELECT count(*) FROM {rel} r JOIN {table} t USING (id) WHERE NOT
            coalesce((t.a IS NULL OR r.a @> t.a) AND (t.b IS NULL OR r.b @> t.b), false)
            """).fetchone()[0] == 0
        assert min(class_sizes(db, rel, QIS)) >= K
    in_memory, out_of_core = ncp(db, mem, table), ncp(db, ooc, table)
    assert out_of_core <= in_memory * 1.02 + 1e-9, (in_memory, out_of_core)
