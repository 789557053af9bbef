"""A stable release's refresh publishes its new version into the same relations: their OIDs,
privileges and comments stay, and so does a view an analyst's role made on top of the release (a
pg_dump under way reads the definitions of the relations it listed: it must still find them)."""
from __future__ import annotations

import random
import threading
import time

import psycopg
import pytest
from psycopg import sql

RELATIONS = """SELECT c.relname::text, c.oid FROM pg_catalog.pg_class c
               JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = %s AND c.relkind IN ('v', 'm') ORDER BY 1"""


@pytest.fixture
def stable_release(db, schema):
    db.execute("CREATE TABLE pt (id int PRIMARY KEY, age int, dx text)")
    db.execute("INSERT INTO pt SELECT g, g, (ARRAY['flu','hiv','cold','ok'])[1 + g % 4] "
               "FROM generate_series(1, 40) g")
    rel = db.execute("SELECT anon.mondrian_view('pt', k => 5, l => 2, quasi_identifiers => '{age}', "
                     "sensitive => '{dx}', identifiers => '{id}')").fetchone()[0]
    assert db.execute("SELECT parameters->>'refresh_mode' FROM anon.releases "
                      "WHERE pg_catalog.format('%%I.%%I', release_schema, release_name) = %s",
                      (rel,)).fetchone()[0] == "stable"
    return rel


def refreshed(db, rel, new_id):
    db.execute("INSERT INTO pt VALUES (%s, 33, 'cancer')", (new_id,))
    db.execute("SELECT anon.refresh(%s)", (rel,))
    return db.execute("""SELECT pg_catalog.max(v.version) FROM anon.release_versions v
                         JOIN anon.releases r USING (release_id)
                         WHERE pg_catalog.format('%%I.%%I', r.release_schema, r.release_name) = %s""",
                      (rel,)).fetchone()[0]


def test_a_stable_refresh_keeps_the_oids_privileges_and_comment_of_the_release(db, schema,
                                                                             stable_release):
    rel = stable_release
    released_in = db.execute("SELECT relnamespace::regnamespace::text FROM pg_class WHERE oid = %s::regclass",
                             (rel,)).fetchone()[0]
    db.execute("CREATE ROLE stable_reader")
    try:
        db.execute(f"GRANT SELECT ON {rel} TO stable_reader")
        db.execute(f"COMMENT ON VIEW {rel} IS 'monthly k=5'")
        before = db.execute(RELATIONS, (released_in,)).fetchall()
        assert len(before) == 2                      # compact: the classes and the view over them
        assert refreshed(db, rel, 41) == 1
        assert db.execute(RELATIONS, (released_in,)).fetchall() == before
        assert db.execute("SELECT has_table_privilege('stable_reader', %s, 'SELECT')",
                          (rel,)).fetchone()[0]
        assert db.execute("SELECT obj_description(%s::regclass, 'pg_class')",
                          (rel,)).fetchone()[0] == "monthly k=5"
    finally:
        db.execute(f"REVOKE ALL ON {rel} FROM stable_reader")
        db.execute("DROP ROLE stable_reader")


def test_a_stable_refresh_keeps_a_view_an_analyst_made_on_the_release(db, connect, schema,
                                                                    stable_release):
    rel = stable_release
    released_in = db.execute("SELECT relnamespace::regnamespace::text FROM pg_class WHERE oid = %s::regclass",
                             (rel,)).fetchone()[0]
    db.execute("CREATE ROLE stable_analyst LOGIN")
    mine = f"{schema}_analyst"
    try:
        db.execute(sql.SQL("CREATE SCHEMA {} AUTHORIZATION stable_analyst").format(sql.Identifier(mine)))
        db.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO stable_analyst").format(sql.Identifier(released_in)))
        db.execute(f"GRANT SELECT ON {rel} TO stable_analyst")
        with connect(user="stable_analyst") as analyst:
            analyst.execute(sql.SQL("CREATE VIEW {}.by_dx AS SELECT dx, count(*) AS n FROM {} GROUP BY dx")
                            .format(sql.Identifier(mine), sql.SQL(rel)))
        by_dx = db.execute("SELECT %s::regclass::oid", (f"{mine}.by_dx",)).fetchone()[0]
        before = db.execute(RELATIONS, (released_in,)).fetchall()
        assert refreshed(db, rel, 41) == 1
        assert refreshed(db, rel, 42) == 2
        released = db.execute(f"SELECT count(*) FROM {rel}").fetchone()[0]
        assert db.execute(RELATIONS, (released_in,)).fetchall() == before
        with connect(user="stable_analyst") as analyst:
            assert analyst.execute(sql.SQL("SELECT sum(n) FROM {}.by_dx").format(
                sql.Identifier(mine))).fetchone()[0] == released
            assert analyst.execute("SELECT %s::regclass::oid",
                                   (f"{mine}.by_dx",)).fetchone()[0] == by_dx
    finally:
        db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(mine)))
        db.execute(f"REVOKE ALL ON {rel} FROM stable_analyst")
        db.execute(sql.SQL("REVOKE ALL ON SCHEMA {} FROM stable_analyst").format(sql.Identifier(released_in)))
        db.execute("DROP ROLE stable_analyst")


@pytest.mark.slow                                  # an 8 s soak, like test_concurrency's
def test_writers_refreshing_a_stable_release_in_place_never_deadlock_nor_show_it_empty(
        db, connect, schema, stable_release):
    """Writers change the source and refresh the release (anon.refresh and a plain REFRESH of its
    classes) while analysts read it, each read a REPEATABLE READ transaction whose snapshot
    predates its lock wait: no deadlock, no error but a refresh giving up on readers (55P03), and
    never an empty release."""
    rel, seconds = stable_release, 8.0
    classes = db.execute("SELECT pg_catalog.format('%%I.%%I', release_schema, parameters->>'storage') "
                         "FROM anon.releases WHERE pg_catalog.format('%%I.%%I', release_schema, "
                         "release_name) = %s", (rel,)).fetchone()[0]
    failures, reads, refreshes = [], [], []
    deadline = time.monotonic() + seconds

    def writer(number):
        rng = random.Random(number)
        with connect() as conn:
            conn.execute(f"SET search_path = {sql.Identifier(schema).as_string(None)}")
            while time.monotonic() < deadline:
                try:
                    op = rng.choice(["update", "refresh", "matview"])
                    if op == "update":
                        conn.execute("UPDATE pt SET age = %s WHERE id = %s",
                                     (rng.randint(1, 60), rng.randint(1, 40)))
                    elif op == "refresh":
                        conn.execute("SELECT anon.refresh(%s)", (rel,))
                        refreshes.append(op)
                    else:
                        conn.execute(f"REFRESH MATERIALIZED VIEW {classes}")
                        refreshes.append(op)
                except psycopg.Error as exc:
                    if exc.sqlstate != "55P03":
                        failures.append((op, exc.sqlstate, str(exc).strip()[:300]))

    def analyst():
        with connect() as conn:
            conn.autocommit = False
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            while time.monotonic() < deadline:
                with conn.transaction():
                    reads.append(conn.execute(f"SELECT count(*) FROM {rel}").fetchone()[0])

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    threads += [threading.Thread(target=analyst) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert refreshes and reads
    assert min(reads) > 0
