"""Adversarial: anon.readable_hierarchies shows a hierarchy to any role that may SELECT its
column, on the ground that "a role that may read the column learns nothing new from them"
(docs/security.md). Row security breaks that ground: a role that may SELECT the column of a
table with row security (one tenant's rows, say) reads through the view the leaves -- the
distinct values -- of every row, the rows it may not see included (the hierarchy was built by the
DBA, who reads them all).

Reproduction (psql):
    -- as a superuser
    CREATE TABLE pay (tenant text, salary int); INSERT ...;   -- tenants 'a' and 'b'
    ALTER TABLE pay ENABLE ROW LEVEL SECURITY;
    CREATE POLICY own ON pay USING (tenant = current_user);
    GRANT SELECT ON pay TO a;                                  -- a is in plpy_anon_custodian
    SELECT anon.set_hierarchy_intervals('pay', 'salary', ARRAY[1000, 10000]);
    -- as a
    SELECT leaf FROM anon.readable_hierarchies WHERE source = 'pay'::regclass;   -- b's salaries too
"""
from __future__ import annotations

import uuid

import pytest
from psycopg import sql


@pytest.fixture
def tenant(db):
    role = f"tenant_{uuid.uuid4().hex[:8]}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE plpy_anon_custodian").format(sql.Identifier(role)))
    yield role
    db.execute(sql.SQL("DROP OWNED BY {0}; DROP ROLE {0}").format(sql.Identifier(role)))


def test_a_role_under_row_security_reads_no_hierarchy_leaf_of_rows_it_may_not_see(db, schema, connect, tenant):
    db.execute("CREATE TABLE pay (tenant text, salary int)")
    db.execute("INSERT INTO pay SELECT CASE WHEN i %% 2 = 0 THEN %s ELSE 'other' END, 30000 + i * 37 "
               "FROM generate_series(1, 40) i", (tenant,))
    db.execute("ALTER TABLE pay ENABLE ROW LEVEL SECURITY")
    db.execute("CREATE POLICY own ON pay USING (tenant = current_user)")
    db.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), sql.Identifier(tenant)))
    db.execute(sql.SQL("GRANT SELECT ON pay TO {}").format(sql.Identifier(tenant)))
    db.execute("SELECT anon.set_hierarchy_intervals('pay', 'salary', ARRAY[1000, 10000])")
    oid = db.execute("SELECT 'pay'::regclass::oid").fetchone()[0]
    with connect(user=tenant) as c:
        seen = {str(s) for (s,) in c.execute(sql.SQL("SELECT salary FROM {}.pay").format(sql.Identifier(schema)))}
        leaves = {leaf for (leaf,) in c.execute(
            "SELECT leaf FROM anon.readable_hierarchies WHERE source = %s::oid::regclass "
            "AND column_name = 'salary'", (oid,))}
    assert len(seen) == 20
    hidden = leaves - seen
    assert not hidden, f"{len(hidden)} salaries of rows row security hides read through the hierarchy"
