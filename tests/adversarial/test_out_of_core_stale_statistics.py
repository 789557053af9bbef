"""Adversarial: a build over the budget may choose the out-of-core path from the planner's
estimate alone (rows per page at the last ANALYZE times the pages now), without counting. A
table analyzed large and then emptied of most rows (no VACUUM: its pages stay) keeps an estimate
far above the budget while holding a handful of rows. Its release must say what the same rows
say in memory: fewer rows than k is the same clear error (SQLSTATE and message), a few more than
k give k-anonymous, truthful classes."""
from __future__ import annotations

import json

import psycopg

from tests.helpers import class_sizes, release_schema_of

BUILD = ("SELECT anon.mondrian_view('shrunk', 5, quasi_identifiers => ARRAY['a', 'b'], "
         "sensitive => ARRAY['id'], release_schema => %s)")


def shrunk(db, kept: int) -> None:
    db.execute("CREATE TABLE shrunk (id int, a int, b int) WITH (autovacuum_enabled = off)")
    db.execute("INSERT INTO shrunk SELECT g, g % 1000, g % 77 FROM generate_series(1, 60000) g")
    db.execute("ANALYZE shrunk")
    db.execute("DELETE FROM shrunk WHERE id > %s", (kept,))


def error_of(db, schema: str, budget: str | None):
    if budget:
        db.execute(f"SET plpy_anon.build_memory = '{budget}'")
    try:
        with db.transaction():
            db.execute(BUILD, (release_schema_of(schema),))
    except psycopg.Error as error:
        return error.sqlstate, error.diag.message_primary
    finally:
        db.execute("RESET plpy_anon.build_memory")
    return None


def test_fewer_rows_than_k_under_stale_statistics_fail_as_in_memory(db, schema):
    shrunk(db, 3)
    in_memory = error_of(db, schema, None)
    assert in_memory is not None
    assert error_of(db, schema, "64kB") == in_memory


def test_a_few_rows_under_stale_statistics_are_released_k_anonymous_and_truthful(db, schema):
    shrunk(db, 12)
    db.execute("SET plpy_anon.build_memory = '64kB'")
    try:
        rel = db.execute(BUILD, (release_schema_of(schema),)).fetchone()[0]
    finally:
        db.execute("RESET plpy_anon.build_memory")
    assert db.execute(f"SELECT count(*), count(DISTINCT id) FROM {rel}").fetchone() == (12, 12)
    outside = db.execute(f"""SELECT count(*) FROM {rel} r JOIN shrunk t USING (id)
        WHERE NOT coalesce(r.a @> t.a AND r.b @> t.b, false)""").fetchone()[0]
    assert outside == 0
    assert min(class_sizes(db, rel, ["a", "b"])) >= 5
    metrics = db.execute("SELECT metrics FROM anon.releases WHERE format('%%I.%%I', release_schema, "
                         "release_name) = %s", (rel,)).fetchone()[0]
    metrics = metrics if isinstance(metrics, dict) else json.loads(metrics)
    assert metrics["out_of_core"]["rows_counted"] is False     # the path the estimate chose
