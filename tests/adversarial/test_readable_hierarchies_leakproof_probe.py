"""Adversarial: anon.readable_hierarchies (a security_barrier view every custodian may SELECT)
hides the hierarchy rows of columns the querying role may not read, but security_barrier lets the
planner push the querier's LEAKPROOF conditions below the view's own: texteq, text_lt and text_ge
on ``leaf`` become the index condition of the scan of anon.hierarchies, run before
has_column_privilege. EXPLAIN ANALYZE then shows how many hidden leaves -- the column's values --
met the condition ("actual rows" of that scan): one guess per query, or the values themselves by
bisection with ``leaf >= $1``. The same reason that keeps custodians from any privilege on
anon.release_secrets (docs/security.md).

Reproduction, as a custodian without SELECT on pay.salary (a superuser declared its hierarchy):
    EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
    SELECT * FROM anon.readable_hierarchies WHERE source = 'pay'::regclass AND leaf = '30037';
    -- Index Scan using hierarchies_pkey on hierarchies h (actual rows=1 ...): 30037 is a salary
"""
from __future__ import annotations

import re
import uuid

import pytest
from psycopg import sql

PLAN = "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) "
SALARIES = [30000 + i * 37 for i in range(1, 31)]


@pytest.fixture
def outsider(db):
    role = f"cust_{uuid.uuid4().hex[:8]}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE plpy_anon_custodian").format(sql.Identifier(role)))
    yield role
    db.execute(sql.SQL("DROP OWNED BY {0}; DROP ROLE {0}").format(sql.Identifier(role)))


def plan(conn, query: str, params) -> str:
    """The plan as executed, the constants the query was given left out."""
    text = "\n".join(r[0] for r in conn.execute(PLAN + query, params).fetchall())
    return re.sub(r"'(?:[^']|'')*'::\w+", "?", text)


def test_a_role_that_may_not_read_a_column_cannot_test_its_hierarchy_leaves_through_explain(
        db, schema, connect, outsider):
    db.execute("CREATE TABLE pay (id int, salary int)")
    db.execute("INSERT INTO pay SELECT i, s FROM unnest(%s::int[]) WITH ORDINALITY u(s, i)", (SALARIES,))
    db.execute("SELECT anon.set_hierarchy_intervals('pay', 'salary', ARRAY[1000, 10000])")
    oid = db.execute("SELECT 'pay'::regclass::oid").fetchone()[0]
    probes = ("SELECT * FROM anon.readable_hierarchies WHERE source = %s::oid::regclass AND leaf = %s",
              "SELECT * FROM anon.readable_hierarchies WHERE source = %s::oid::regclass AND leaf >= %s")
    with connect(user=outsider) as c:
        for probe in probes:
            assert c.execute(probe, (oid, str(SALARIES[0]))).fetchall() == []
            right, wrong = plan(c, probe, (oid, str(SALARIES[0]))), plan(c, probe, (oid, "30038"))
            assert right == wrong, f"the plan tells a salary from a wrong guess:\n{right}\n---\n{wrong}"
