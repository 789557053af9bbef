"""Adversarial: a partitioned table with odd names (mixed case, spaces, quotes in the table, its
partitions and its QI columns), one partition analyzed full and then mostly deleted (its pages
stay: the planner's estimate of the tree stays far above the budget), one loaded after its
ANALYZE, one never analyzed, built at 64kB and in memory. From the released rows against the
source: every row once, each value inside its class's range, classes of k rows, and the
out-of-core release's NCP not worse than the in-memory one's by more than 2 %."""
from __future__ import annotations

import json

import pytest
from psycopg import sql

from tests.helpers import class_sizes, release_schema_of

PARENT = 'Part "ed", T'
QIS = ["Age Col", 'Zi"p']
K = 4


def build(db, schema: str, name: str, budget: str | None) -> str:
    if budget:
        db.execute(f"SET plpy_anon.build_memory = '{budget}'")
    try:
        return db.execute(sql.SQL(
            "SELECT anon.mondrian_view({}, {}, quasi_identifiers => {}, sensitive => ARRAY['id'], "
            "release_name => {}, release_schema => {})").format(
                sql.Literal(sql.Identifier(schema, PARENT).as_string(db)), sql.Literal(K),
                sql.Literal(QIS), sql.Literal(name),
                sql.Literal(release_schema_of(schema)))).fetchone()[0]
    finally:
        db.execute("RESET plpy_anon.build_memory")


@pytest.mark.parametrize("analyze_last", [False, True])
def test_a_partitioned_odd_named_source_out_of_core_matches_in_memory(db, schema, analyze_last):
    age, zip_ = (sql.Identifier(c) for c in QIS)
    parent = sql.Identifier(schema, PARENT)
    parts = [sql.Identifier(schema, f'{PARENT} p{i}') for i in range(3)]
    db.execute(sql.SQL("CREATE TABLE {} (id int, {} int8, {} int) PARTITION BY RANGE (id)").format(
        parent, age, zip_))
    for i, part in enumerate(parts):
        db.execute(sql.SQL("CREATE TABLE {} PARTITION OF {} FOR VALUES FROM ({}) TO ({}) "
                           "WITH (autovacuum_enabled = off)").format(
            part, parent, sql.Literal(i * 100_000), sql.Literal((i + 1) * 100_000)))
    insert = sql.SQL("""INSERT INTO {} SELECT g, CASE WHEN g % 17 = 0 THEN NULL
        WHEN g % 13 = 0 THEN 1000000 ELSE (g * 7919) % 97 END, (g * 31) % 1009
        FROM generate_series({}, {}) g""")
    db.execute(insert.format(parent, sql.Literal(0), sql.Literal(60_000)))
    db.execute(sql.SQL("ANALYZE {}").format(parts[0]))
    db.execute(sql.SQL("DELETE FROM {} WHERE id > 3000").format(parent))
    db.execute(sql.SQL("ANALYZE {}").format(parts[1]))
    db.execute(insert.format(parent, sql.Literal(100_000), sql.Literal(103_000)))
    db.execute(insert.format(parent, sql.Literal(200_000), sql.Literal(202_000)))
    if analyze_last:
        db.execute(sql.SQL("ANALYZE {}").format(parts[2]))
    rows = db.execute(sql.SQL("SELECT count(*) FROM {}").format(parent)).fetchone()[0]
    mem = build(db, schema, "p_mem", None)
    ooc = build(db, schema, "p_ooc", "64kB")
    metrics = db.execute("SELECT metrics FROM anon.releases WHERE format('%%I.%%I', release_schema, "
                         "release_name) = %s", (ooc,)).fetchone()[0]
    metrics = metrics if isinstance(metrics, dict) else json.loads(metrics)
    assert metrics["out_of_core"]["regions"] > 1
    ncp = {}
    for rel in (mem, ooc):
        assert db.execute(f"SELECT count(*), count(DISTINCT id) FROM {rel}").fetchone() == (
            rows, rows)
        assert db.execute(sql.SQL("""SELECT count(*) FROM {} r JOIN {} t USING (id) WHERE NOT
            coalesce((t.{a} IS NULL OR r.{a} @> t.{a}) AND r.{z} @> t.{z}, false)""").format(
                sql.SQL(rel), parent, a=age, z=zip_)).fetchone()[0] == 0
        assert min(class_sizes(db, rel, QIS)) >= K
        ncp[rel] = float(db.execute(sql.SQL("""
            WITH span AS (SELECT max({a})::numeric - min({a}) AS a,
                                 max({z})::numeric - min({z}) AS z FROM {t})
            SELECT avg((coalesce((upper(r.{a}) - 1)::numeric - lower(r.{a}), 0) / span.a
                        + ((upper(r.{z}) - 1)::numeric - lower(r.{z})) / span.z) / 2)
            FROM {r} r, span""").format(a=age, z=zip_, t=parent, r=sql.SQL(rel))).fetchone()[0])
    assert ncp[ooc] <= ncp[mem] * 1.02, ncp
