"""Adversarial: out-of-core Mondrian releases (plpy_anon.build_memory below the estimate) of
extreme values, checked from the released rows: every row once, inside its class's ranges, classes
of k rows and l distinct sensitive values; and who may change the budget of others' builds."""
from __future__ import annotations

import json
import uuid

import psycopg
import pytest
from psycopg import sql

from tests.helpers import class_sizes, distinct_sensitive_per_class, release_schema_of

QIS = ["a", "f", "d", "ts"]

EXTREMES = """
INSERT INTO extremes SELECT i,
  CASE i % 7 WHEN 0 THEN 9223372036854775807 WHEN 1 THEN -9223372036854775808
             WHEN 2 THEN NULL ELSE i END,
  CASE i % 5 WHEN 0 THEN 'NaN' WHEN 1 THEN 'Infinity' WHEN 2 THEN '-Infinity'
             WHEN 3 THEN NULL ELSE i / 3.0 END,
  CASE i % 4 WHEN 0 THEN 12345678901234567890123 + i WHEN 1 THEN 'NaN' WHEN 2 THEN NULL
             ELSE -99999999999999999999 - i END,
  CASE i % 6 WHEN 0 THEN 'infinity' WHEN 1 THEN '-infinity' WHEN 2 THEN NULL
             ELSE timestamp '2000-01-01' + i * interval '1 day' END,
  's' || (i % 3)
FROM generate_series(1, 300) i"""


@pytest.mark.parametrize("k, l", [(2, None), (3, 2)])
def test_an_out_of_core_release_of_extreme_values_keeps_k_l_and_truthful_ranges(db, schema, k, l):
    db.execute("CREATE TABLE extremes (id int, a int8, f float8, d numeric, ts timestamp, s text)")
    db.execute(EXTREMES)
    db.execute("SET plpy_anon.build_memory = '1kB'")
    try:
        rel = db.execute("SELECT anon.mondrian_view('extremes', %s, l => %s, quasi_identifiers => %s, "
                         "sensitive => ARRAY['id', 's'], release_schema => %s)",
                         (k, l, QIS, release_schema_of(schema))).fetchone()[0]
    finally:
        db.execute("RESET plpy_anon.build_memory")
    metrics = db.execute("SELECT metrics FROM anon.releases WHERE format('%%I.%%I', release_schema, "
                         "release_name) = %s", (rel,)).fetchone()[0]
    metrics = metrics if isinstance(metrics, dict) else json.loads(metrics)
    assert metrics["out_of_core"]["regions"] > 1
    assert db.execute(f"SELECT count(*), count(DISTINCT id) FROM {rel}").fetchone() == (300, 300)
    outside = db.execute(f"""
        SELECT count(*) FROM {rel} r JOIN extremes t USING (id)
        WHERE NOT ((t.a IS NULL OR r.a @> t.a) AND (t.f IS NULL OR r.f @> t.f::text::numeric)
                   AND (t.d IS NULL OR r.d @> t.d) AND (t.ts IS NULL OR r.ts @> t.ts))""").fetchone()[0]
    assert outside == 0
    assert min(class_sizes(db, rel, QIS)) >= k
    if l:
        assert min(distinct_sensitive_per_class(db, rel, QIS, "s")) >= l


@pytest.mark.parametrize("level", ["ROLE", "DATABASE"])
def test_a_role_that_is_not_a_superuser_cannot_set_the_build_budget_of_others_sessions(
        db, connect, level):
    """ALTER DATABASE/ROLE ... SET reaches the sessions of the DBA and of pg_cron: only superusers
    may write plpy_anon.build_memory there (its own session's value is every role's)."""
    role = f"bm_{uuid.uuid4().hex[:8]}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    target = sql.Identifier(role if level == "ROLE" else db.info.dbname)
    if level == "DATABASE":     # the database's owner
        db.execute(sql.SQL("ALTER DATABASE {} OWNER TO {}").format(target, sql.Identifier(role)))
    try:
        with connect(user=role) as c:
            c.execute("SET plpy_anon.build_memory = '1kB'")      # its own session: allowed
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute(sql.SQL("ALTER {} {} SET plpy_anon.build_memory = '1kB'")
                          .format(sql.SQL(level), target))
    finally:
        if level == "DATABASE":
            db.execute(sql.SQL("ALTER DATABASE {} OWNER TO CURRENT_USER").format(target))
        db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
    settings = db.execute("SELECT count(*) FROM pg_db_role_setting "
                          "WHERE array_to_string(setconfig, ',') LIKE '%%build_memory%%'").fetchone()[0]
    assert settings == 0
