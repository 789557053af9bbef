"""Adversarial: pg_stat_statements rows count for a source only for roles that may SELECT every
column of it now -- not a role with BYPASSRLS and no privilege on it, not a role that reads it
only through a view, not a role whose SELECT was revoked -- whatever they ran on relations of
their own named like it (pg_temp)."""
from __future__ import annotations

import uuid

import psycopg
import pytest

from plpy_anon.cluster import ThrowawayCluster
from tests.adversarial.test_workload_attribution import TABLE, learned


@pytest.fixture(scope="module")
def cluster_with_statement_statistics():
    with ThrowawayCluster(settings={"shared_preload_libraries": "'pg_stat_statements'"}) as cluster:
        with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
            admin.execute("CREATE EXTENSION plpy_anon CASCADE")
            admin.execute("CREATE EXTENSION pg_stat_statements")
        yield cluster


def test_bypassrls_view_readers_and_revoked_roles_do_not_steer_a_sources_priorities(
        cluster_with_statement_statistics):
    cluster = cluster_with_statement_statistics
    bypass, viewer, revoked = (f"ws_{uuid.uuid4().hex[:8]}" for _ in range(3))
    with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
        admin.execute("CREATE SCHEMA lab")
        admin.execute(TABLE.format(name="lab.patients"))
        admin.execute("INSERT INTO lab.patients SELECT i, 20 + i % 60, 10000 + i % 90, "
                      "CASE WHEN i % 2 = 0 THEN 'F' ELSE 'M' END, 'd' || i % 5 "
                      "FROM generate_series(1, 500) i")
        admin.execute("CREATE VIEW lab.patients_view AS SELECT * FROM lab.patients")
        admin.execute("SELECT anon.add_queries(ARRAY['SELECT diagnosis FROM lab.patients "
                      "WHERE age BETWEEN 30 AND 40'], ARRAY[20]::bigint[])")
        before = learned(admin, "lab.patients")
        admin.execute(f"CREATE ROLE {bypass} LOGIN BYPASSRLS")
        admin.execute(f"CREATE ROLE {viewer} LOGIN")
        admin.execute(f"CREATE ROLE {revoked} LOGIN")
        for role in (bypass, viewer, revoked):
            admin.execute(f"GRANT USAGE ON SCHEMA lab TO {role}")
        admin.execute(f"GRANT SELECT ON lab.patients_view TO {viewer}")
        admin.execute(f"GRANT SELECT ON lab.patients TO {revoked}")
        for role in (bypass, viewer, revoked):
            with psycopg.connect(cluster.dsn(), user=role, autocommit=True) as c:
                c.execute(TABLE.format(name="pg_temp.patients"))
                for _ in range(200):
                    c.execute("SELECT count(*) FROM patients WHERE zip = 10001 AND sex = 'F'")
        admin.execute(f"REVOKE SELECT ON lab.patients FROM {revoked}")
        after = learned(admin, "lab.patients")
        for role in (bypass, viewer, revoked):
            ran = admin.execute("SELECT sum(calls) FROM pg_stat_statements WHERE userid = %s::regrole "
                                "AND query LIKE 'SELECT count(*) FROM patients%%'", (role,)).fetchone()[0]
            assert ran == 200, f"pg_stat_statements recorded {ran} statements of {role}"
        for role in (bypass, viewer, revoked):
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")
    assert after["zip"] == 0 and after["sex"] == 0, f"the weights moved {before} -> {after}"
