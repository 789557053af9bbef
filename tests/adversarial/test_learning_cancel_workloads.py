"""Adversarial: learning priorities from pathological workloads under the 32 kB size bound other
than long IN lists -- long OR chains, deeply nested parentheses, NOT chains and subqueries, many
shapes -- honours pg_cancel_backend within a second of CPU, well into the parses."""
from __future__ import annotations

import pytest

from tests.db.test_interrupts import INTO_THE_PARSES, LEARN, WARM_UP, WITHIN, Running, canceled

#: each: a query over (%s: the schema) making 100 statements or more of the workload, enough
#: that learning them all takes several times the CPU spent before the cancel (100 OR chains of
#: 2,400 equalities learn in 0.9 s)
WORKLOADS = {
    "OR chains of 2,400 equalities": (
        "SELECT format('SELECT a FROM %%I.t WHERE ' || string_agg(format('a = %%s', v + n), ' OR '), "
        "%s::text) FROM generate_series(1, 2400) v, generate_series(1, 1000) n GROUP BY n"),
    "parentheses 3,000 deep": (
        "SELECT format('SELECT a FROM %%I.t WHERE ' || repeat('(', 3000 + n) || 'a > 1' "
        "|| repeat(')', 3000 + n), %s::text) FROM generate_series(1, 1000) n"),
    "subqueries 600 deep": (
        "SELECT format('SELECT a FROM ' || repeat('(SELECT a, b FROM ', 600 + n) || '%%I.t' "
        "|| repeat(' x WHERE b > 1)', 600 + n) || ' y', %s::text) FROM generate_series(1, 100) n"),
    "20,000 shapes": (
        "SELECT format('SELECT a FROM %%I.t WHERE b > %%s' || repeat(' AND a < 5', 1 + n %% 50) "
        "|| ' AND b < %%s', %s::text, n, n + 1) FROM generate_series(1, 20000) n"),
}


@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_a_cancel_stops_learning_from_other_pathological_workloads_within_a_second(
        db, schema, connect, workload):
    db.execute("CREATE TABLE t (a int, b int)")
    db.execute("DELETE FROM anon.workload")
    try:
        db.execute(f"INSERT INTO anon.workload (query, frequency) SELECT q, 1 "
                   f"FROM ({WORKLOADS[workload]}) s(q) WHERE octet_length(q) < 32000", (schema,))
        assert db.execute("SELECT count(*) FROM anon.workload").fetchone()[0] >= 100
        running = Running(connect, schema, LEARN, WARM_UP)
        running.wait_for_cpu(INTO_THE_PARSES, "learning ended before the cancel")
        late = running.cancel(db)
        canceled(running)
        assert late < WITHIN, late
    finally:
        db.execute("DELETE FROM anon.workload")
