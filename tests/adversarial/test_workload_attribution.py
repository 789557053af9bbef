"""Adversarial: whose statements a table's learned priorities (and the guard of a learned release,
which measures on the same statements) are learned from.

``anon.learn_priorities`` reads pg_stat_statements by default, which records every role's
statements. A login role with no privilege on the source must not steer what is learned for it:
a statement it ran on a relation of its own (a temporary table, a table in its own schema) that
merely carries the source's name reads nothing of the source."""
from __future__ import annotations

import uuid

import psycopg
import pytest

from plpy_anon.cluster import ThrowawayCluster

TABLE = "CREATE TABLE {name} (id int, age int, zip int, sex text, diagnosis text)"


@pytest.fixture(scope="module")
def cluster_with_statement_statistics():
    with ThrowawayCluster(settings={"shared_preload_libraries": "'pg_stat_statements'"}) as cluster:
        with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
            admin.execute("CREATE EXTENSION plpy_anon CASCADE")
            admin.execute("CREATE EXTENSION pg_stat_statements")
        yield cluster


def learned(admin, table):
    return {name: weight for name, weight in admin.execute(
        "SELECT column_name, weight FROM anon.learn_priorities(%s)", (table,)).fetchall()}


def test_statements_on_another_roles_relation_named_like_the_source_do_not_steer_its_priorities(
        cluster_with_statement_statistics):
    cluster = cluster_with_statement_statistics
    outsider = f"ws_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
        admin.execute("CREATE SCHEMA clinic")
        admin.execute(TABLE.format(name="clinic.patients"))
        admin.execute("INSERT INTO clinic.patients SELECT i, 20 + i % 60, 10000 + i % 90, "
                      "CASE WHEN i % 2 = 0 THEN 'F' ELSE 'M' END, 'd' || i % 5 "
                      "FROM generate_series(1, 500) i")
        admin.execute(f"CREATE ROLE {outsider} LOGIN")
        admin.execute("SELECT pg_stat_statements_reset()")
        # the analysts' workload, as the DBA recorded it: they filter on age
        admin.execute("SELECT anon.add_queries(ARRAY['SELECT diagnosis FROM clinic.patients "
                      "WHERE age BETWEEN 30 AND 40'], ARRAY[20]::bigint[])")
        before = learned(admin, "clinic.patients")
        assert before["zip"] == before["sex"] == 0
        with psycopg.connect(cluster.dsn(), user=outsider, autocommit=True) as c:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute("SELECT count(*) FROM clinic.patients")
            c.execute(TABLE.format(name="pg_temp.patients"))
            for _ in range(300):
                c.execute("SELECT count(*) FROM patients WHERE zip = 10001 AND sex = 'F'")
        ran = admin.execute("SELECT sum(calls) FROM pg_stat_statements "
                            "WHERE userid = %s::regrole AND query LIKE 'SELECT count(*) FROM patients%%'",
                            (outsider,)).fetchone()[0]
        assert ran == 300, "pg_stat_statements recorded the outsider's statements"
        after = learned(admin, "clinic.patients")
        admin.execute(f"DROP ROLE {outsider}")
    assert after["zip"] == 0 and after["sex"] == 0, (
        f"an outsider's statements on its own table moved the learned weights {before} -> {after}")
    assert after["age"] == pytest.approx(before["age"])


def test_column_grants_count_a_role_only_when_it_may_read_every_column_of_the_source(
        cluster_with_statement_statistics):
    cluster = cluster_with_statement_statistics
    reader, partial = (f"ws_{uuid.uuid4().hex[:8]}" for _ in range(2))
    with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
        admin.execute("CREATE SCHEMA ward")
        admin.execute(TABLE.format(name="ward.patients"))
        admin.execute("INSERT INTO ward.patients SELECT i, 20 + i % 60, 10000 + i % 90, "
                      "CASE WHEN i % 2 = 0 THEN 'F' ELSE 'M' END, 'd' || i % 5 "
                      "FROM generate_series(1, 500) i")
        admin.execute("SELECT anon.add_queries(ARRAY['SELECT diagnosis FROM ward.patients "
                      "WHERE age BETWEEN 30 AND 40'], ARRAY[20]::bigint[])")
        for role, columns in ((reader, "id, age, zip, sex, diagnosis"), (partial, "id, age")):
            admin.execute(f"CREATE ROLE {role} LOGIN")
            admin.execute(f"GRANT USAGE ON SCHEMA ward TO {role}")
            admin.execute(f"GRANT SELECT ({columns}) ON ward.patients TO {role}")
        with psycopg.connect(cluster.dsn(), user=reader, autocommit=True) as c:
            for _ in range(50):
                c.execute("SELECT count(*) FROM ward.patients WHERE zip = 10001")
        with psycopg.connect(cluster.dsn(), user=partial, autocommit=True) as c:
            c.execute(TABLE.format(name="pg_temp.patients"))
            for _ in range(300):
                c.execute("SELECT count(*) FROM patients WHERE sex = 'F'")
        counted = learned(admin, "ward.patients")
        admin.execute(f"DROP OWNED BY {partial}")
        admin.execute(f"DROP ROLE {partial}")
        after_drop = learned(admin, "ward.patients")  # its statements stay in pg_stat_statements
        admin.execute(f"DROP OWNED BY {reader}")
        admin.execute(f"DROP ROLE {reader}")
    assert counted["zip"] > 0, f"a role granted every column was not counted: {counted}"
    assert counted["sex"] == 0, f"a role granted some columns steered the weights: {counted}"
    assert after_drop == pytest.approx(counted)
