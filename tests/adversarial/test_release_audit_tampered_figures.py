"""A custodian writes its own release's figures (anon.releases.risk and .verification: a refresh
runs with its rights, so it may) in shapes no build writes. anon.release_audit, which a privacy
officer runs over every release, must still answer for every release: the tampered one judged
unsafe, saying its figures are not as a build records them, and every other release as before.

Found by a review: each shape below made ``anon.release_audit()`` and ``plpy-anon release-audit``
fail for every release (a Python error, or the result's cast of a text or 1e400 to float8)."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from psycopg import sql

from plpy_anon.cli import main
from tests.adversarial.conftest import custodian_role

#: (column, JSON text) a custodian writes into its own catalog row
TAMPERED = [
    ("risk", '{"a": 1}'),
    ("risk", '[1, 2]'),
    ("risk", '"text"'),
    ("risk", '[{"measure": "distinct_l", "column_name": "s", "value": "x"}]'),
    ("risk", '[{"measure": "distinct_l", "column_name": ["s"], "value": 1}]'),
    ("risk", '[{"measure": "t_closeness", "column_name": "s", "value": "x"}]'),
    ("risk", '[{"measure": "prosecutor_risk_max", "column_name": null, "value": {"x": 1}}]'),
    ("risk", '[{"measure": "distinct_l", "column_name": "s", "value": true}]'),
    ("risk", '[{"measure": "distinct_l", "column_name": "s", "value": 1e400}]'),
    ("verification", '[1]'),
    ("verification", '"x"'),
    ("verification", '{"l_by_column": [1]}'),
    ("verification", '{"l_by_column": {"s": "x"}}'),
    ("verification", '{"across_versions": [1]}'),
    ("verification", '{"across_versions": {"unsafe_unions": "x"}}'),
    ("verification", '{"across_versions": {"held_back": 1e12}}'),
    ("verification", '{"across_versions": {"versions_compared": 1, "held_back": "3"}}'),
]


@pytest.fixture(scope="module")
def releases(db, connect, module_schema):
    """A superuser's release and a custodian's, both k = 5, l = 2 on the same table: (the DBA's
    release, the custodian's, an open connection as the custodian)."""
    s = sql.Identifier(module_schema)
    db.execute(sql.SQL("CREATE TABLE {}.pt (id int, a int, s text)").format(s))
    db.execute(sql.SQL("INSERT INTO {}.pt SELECT i, i % 50, (ARRAY['x', 'y', 'z'])[1 + i % 3] "
                       "FROM generate_series(1, 300) i").format(s))
    arguments = ("k => 5, l => 2, quasi_identifiers => ARRAY['a'], sensitive => ARRAY['s'], "
                 "identifiers => ARRAY['id'], refresh_mode => 'fresh', release_schema => %s")
    dba = db.execute(f"SELECT anon.mondrian_view(%s, {arguments})::text",
                     (f'"{module_schema}".pt', f"{module_schema[:50]}_dba")).fetchone()[0]
    with custodian_role(db, connect) as custodian:
        db.execute(sql.SQL("GRANT UPDATE ON {}.pt TO {}").format(s, sql.Identifier(custodian.role)))
        with custodian() as c:
            own = c.execute(f"SELECT anon.mondrian_view(%s, {arguments})::text",
                            (f'"{module_schema}".pt', f"{module_schema[:50]}_cust")).fetchone()[0]
            yield dba, own, c


def audit(conn) -> dict:
    cursor = conn.execute("SELECT * FROM anon.release_audit()")
    names = [d.name for d in cursor.description]
    return {row[0]: dict(zip(names, row)) for row in cursor.fetchall()}


@pytest.mark.parametrize("column,value", TAMPERED, ids=[f"{c}-{i}" for i, (c, _) in enumerate(TAMPERED)])
def test_a_custodians_tampered_figures_leave_every_other_release_audited(db, releases, column, value):
    dba, own, c = releases
    before = audit(db)
    assert before[own]["safe"] and before[dba]["safe"], before
    where = "WHERE format('%%I.%%I', release_schema, release_name) = %s"
    original = c.execute(sql.SQL("SELECT {}::text FROM anon.releases " + where).format(
        sql.Identifier(column)), (own,)).fetchone()[0]
    c.execute(sql.SQL("UPDATE anon.releases SET {} = %s::jsonb " + where).format(sql.Identifier(column)),
              (value, own))
    try:
        after = audit(db)
        assert after[dba] == before[dba]
        tampered = after[own]
        assert tampered["safe"] is False
        assert f"its recorded {column} is not as a build writes it" in tampered["why"], tampered["why"]
        assert "anon.risk_report" in tampered["why"]
        assert tampered["distinct_l"] is None and tampered["t_closeness"] is None
        assert tampered["prosecutor_risk_max"] is None
        assert tampered["held_back"] is None and tampered["counterfeit"] is None
        assert audit(c) == after
        named = db.execute("SELECT safe, why FROM anon.release_audit(%s)", (own,)).fetchone()
        assert named == (False, tampered["why"])
    finally:
        c.execute(sql.SQL("UPDATE anon.releases SET {} = %s::jsonb " + where).format(sql.Identifier(column)),
                  (original, own))
    assert audit(db) == before


def test_plpy_anon_release_audit_answers_beside_a_tampered_release(db, pg_server, releases):
    dba, own, c = releases
    where = "WHERE format('%%I.%%I', release_schema, release_name) = %s"
    original = c.execute("SELECT risk::text FROM anon.releases " + where, (own,)).fetchone()[0]
    c.execute("UPDATE anon.releases SET risk = '{\"a\": 1}' " + where, (own,))
    try:
        dsn = " ".join(f"{k}={v}" for k, v in pg_server.items())
        result = CliRunner().invoke(main, ["--dsn", dsn, "--format", "json", "release-audit"])
        assert result.exit_code == 0, result.output
        rows = {r["release"]: r for r in json.loads(result.stdout)}
        assert rows[dba]["safe"] is True
        assert rows[own]["safe"] is False and "its recorded risk is not as a build writes it" in rows[own]["why"]
    finally:
        c.execute("UPDATE anon.releases SET risk = %s::jsonb " + where, (original, own))
