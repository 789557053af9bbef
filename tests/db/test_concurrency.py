"""Concurrent creates, refreshes and drops with an analyst registered: no errors.

Every create and refresh used to re-run ``GRANT USAGE ON SCHEMA`` on the release schema, and
concurrent GRANTs rewrite the same pg_namespace row ("tuple concurrently updated", deadlocks):
504 of 1,362 operations failed in an 8-session load, 3 of 16 pg_cron runs failed with 8 releases
scheduled in the same minute. USAGE is now granted once (when plpy_anon creates the schema, or
grant_analyst registers a role) and schema creation is serialized.

The soak (tests/soak.py) runs 8 writers and 2 analysts reading at REPEATABLE READ on SHARED
releases: no deadlock, no empty read, no unclean error, every release whole and k-anonymous
afterwards (``python -m tests.bench soak`` runs it for 120 s; a 15 s run is not ``slow``).

The three others are ``slow`` (a minute each). PLPY_ANON_LOAD_SECONDS shortens the load while
iterating.
"""
from __future__ import annotations

import collections
import itertools
import os
import random
import threading
import time

import psycopg
import pytest
from psycopg import sql

from tests import soak as shared_load
from tests.helpers import class_sizes, load_python_stack
from tests.waits import HANG, wait_until

SESSIONS = 8
ROWS = 300
K = 5
SECONDS = float(os.environ.get("PLPY_ANON_LOAD_SECONDS", "60"))

TABLES = f"""
CREATE TABLE people_a (id int PRIMARY KEY, age int, sex text, zip text, diagnosis text);
INSERT INTO people_a SELECT i, 20 + (i * 37) % 50, CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END,
       (53700 + (i * 13) % 30)::text, (ARRAY['flu', 'asthma', 'gout'])[1 + i % 3]
FROM generate_series(1, {ROWS}) i;
CREATE TABLE people_b (id int PRIMARY KEY, age int, sex text, diagnosis text);
INSERT INTO people_b SELECT i, 18 + (i * 11) % 60, CASE WHEN i % 2 = 0 THEN 'F' ELSE 'M' END,
       (ARRAY['flu', 'asthma'])[1 + i % 2]
FROM generate_series(1, {ROWS}) i;
SELECT anon.set_column_role('people_a', 'diagnosis', 'sensitive');
SELECT anon.set_column_role('people_b', 'diagnosis', 'sensitive');
"""

_roles = itertools.count()


@pytest.fixture
def analyst(db):
    role = f"load_analyst_{next(_roles)}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    db.execute("SELECT anon.grant_analyst(%s)", (role,))
    yield role
    db.execute("SELECT anon.revoke_analyst(%s)", (role,))
    db.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
    db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@pytest.fixture
def release_schemas(db, schema, release_schema):
    """Two shared release schemas, neither existing yet: the sessions' first releases race to
    create them."""
    other = f"{release_schema[:56]}_b"
    yield [release_schema, other]
    for (rel,) in db.execute("SELECT format('%%I.%%I', release_schema, release_name) FROM anon.releases "
                             "WHERE release_schema = %s", (other,)).fetchall():
        db.execute("SELECT anon.drop_release(%s, if_exists => true)", (rel,))
    db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(other)))
    db.execute("DELETE FROM anon.release_schemas WHERE schema_name = %s", (other,))


def create(conn, source, target_schema, name, replace):
    return conn.execute("SELECT anon.mondrian_view(%s::regclass, k => %s, release_name => %s, "
                        "release_schema => %s, replace => %s)",
                        (source, K, name, target_schema, replace)).fetchone()[0]


#: every operation a load goes on until it has done once
OPERATIONS = ("create", "replace", "refresh", "refresh_matview", "drop", "analyst_read")


class Load:
    def __init__(self, connect, schema, targets, analyst):
        self.connect, self.schema, self.targets, self.analyst = connect, schema, targets, analyst
        self.counts = collections.Counter()
        self.errors = []
        self.lock = threading.Lock()
        self.deadline = None
        self.start = None

    def count(self, op):
        with self.lock:
            self.counts[op] += 1

    def error(self, who, op, exc):
        with self.lock:
            self.errors.append((who, op, getattr(exc, "sqlstate", None), str(exc).strip()[:300]))

    def session(self, number):
        rng = random.Random(number)
        names = itertools.count()
        mine = {}                    # qualified name -> (schema, name, source)
        with self.connect() as conn:
            conn.execute(sql.SQL("SET search_path = {}, public").format(sql.Identifier(self.schema)))
            load_python_stack(conn)                                      # import the Python stack now
            self.start.wait()
            while self.going():
                ops = ["create"] + (["replace", "refresh", "refresh_matview", "drop"] if mine else [])
                op = rng.choice(ops)
                try:
                    if op == "create":
                        target = rng.choice(self.targets)
                        name = f"s{number}_r{next(names)}"
                        source = rng.choice(["people_a", "people_b"])
                        mine[create(conn, source, target, name, False)] = (target, name, source)
                    else:
                        rel = rng.choice(sorted(mine))
                        target, name, source = mine[rel]
                        if op == "replace":
                            create(conn, source, target, name, True)
                        elif op == "refresh":
                            conn.execute("SELECT anon.refresh(%s)", (rel,))
                        elif op == "refresh_matview":
                            # the releases here are compact (the default): their storage
                            conn.execute(f"REFRESH MATERIALIZED VIEW {rel}_classes")
                        else:
                            conn.execute("SELECT anon.drop_release(%s)", (rel,))
                            del mine[rel]
                    self.count(op)
                except psycopg.Error as exc:
                    self.error(number, op, exc)

    def going(self) -> bool:
        """Until the time is up and every operation has been done once: a loaded machine gets
        through fewer in the time (HANG more at the most)."""
        now = time.monotonic()
        if now < self.deadline:
            return True
        with self.lock:
            return now < self.deadline + HANG and any(self.counts[op] == 0 for op in OPERATIONS)

    def reader(self):
        """The analyst reads whatever releases exist, all the time."""
        with self.connect(user=self.analyst) as conn:
            self.start.wait()
            while self.going():
                rels = conn.execute(
                    "SELECT format('%%I.%%I', n.nspname, c.relname) FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = ANY(%s) "
                    # the releases: flat ones and compact ones' views, not compact storage
                    "AND (c.relkind = 'v' OR (c.relkind = 'm' AND c.relname NOT LIKE '%%\\_classes'))",
                    (self.targets,)).fetchall()
                for (rel,) in rels:
                    try:
                        n = conn.execute(f"SELECT count(*) FROM {rel}").fetchone()[0]
                        if n != ROWS:
                            self.error("analyst", "read", ValueError(f"{rel} has {n} rows, not {ROWS}"))
                        self.count("analyst_read")
                    except psycopg.errors.UndefinedTable:
                        self.count("analyst_vanished")     # dropped between listing and reading
                    except psycopg.Error as exc:
                        self.error("analyst", "read", exc)
                time.sleep(0.05)

    def run(self, seconds):
        # open the sessions first (each backend imports the Python stack), then start together
        def go():
            self.deadline = time.monotonic() + seconds
        self.start = threading.Barrier(SESSIONS + 1, action=go, timeout=HANG)
        threads = [threading.Thread(target=self.session, args=(i,)) for i in range(SESSIONS)]
        threads.append(threading.Thread(target=self.reader))
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=seconds + 2 * HANG)
        assert not any(t.is_alive() for t in threads)


@pytest.mark.slow
def test_concurrent_creates_refreshes_and_drops_with_an_analyst(db, connect, schema, release_schemas, analyst):
    db.execute(TABLES)
    load = Load(connect, schema, release_schemas, analyst)
    load.run(SECONDS)
    ops = sum(n for op, n in load.counts.items() if not op.startswith("analyst"))
    print(f"\nload: {SESSIONS} sessions, {SECONDS:.0f} s: {ops} operations {dict(load.counts)}, "
          f"{len(load.errors)} errors")
    for e in load.errors[:20]:
        print("  error:", e)
    assert load.errors == []
    for op in OPERATIONS:
        assert load.counts[op] > 0, (op, load.counts)

    # afterwards: catalog rows and relations match, nothing left over, every release readable
    catalog = set(db.execute("SELECT release_schema::text, release_name::text FROM anon.releases "
                             "WHERE release_schema = ANY(%s)", (release_schemas,)).fetchall())
    storage = set(db.execute("SELECT release_schema::text, parameters ->> 'storage' FROM anon.releases "
                             "WHERE release_schema = ANY(%s) AND parameters ? 'storage'",
                             (release_schemas,)).fetchall())
    relations = set(db.execute("SELECT n.nspname::text, c.relname::text FROM pg_class c "
                               "JOIN pg_namespace n ON n.oid = c.relnamespace "
                               "WHERE n.nspname = ANY(%s) AND c.relkind IN ('r', 'v', 'm', 'p')",
                               (release_schemas,)).fetchall())
    assert catalog | storage == relations
    assert not [r for r in relations if "__refresh" in r[1]]
    assert catalog, "some releases survive the load"
    assert db.execute("SELECT count(*) FROM anon.release_schemas WHERE schema_name = ANY(%s)",
                      (release_schemas,)).fetchone()[0] == 2
    with connect(user=analyst) as conn:
        for s, n in sorted(catalog):
            rel = sql.Identifier(s, n).as_string(conn)
            assert conn.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == ROWS
            # and the release is k-anonymous, checked from its rows
            qi = ["age", "sex", "zip"] if "zip" in [c.name for c in conn.execute(
                f"SELECT * FROM {rel} LIMIT 0").description] else ["age", "sex"]
            smallest = conn.execute(f"SELECT min(c) FROM (SELECT count(*) c FROM {rel} "
                                    f"GROUP BY {', '.join(qi)}) g").fetchone()[0]
            assert smallest >= K


@pytest.fixture
def cron(db):
    db.execute("CREATE EXTENSION IF NOT EXISTS pg_cron SCHEMA public")
    yield
    jobs = [j for (j,) in db.execute("SELECT jobid FROM cron.job WHERE jobname LIKE 'plpy_anon refresh %'")]
    db.execute("SELECT cron.unschedule(jobid) FROM cron.job WHERE jobid = ANY(%s)", (jobs,))
    db.execute("DELETE FROM cron.job_run_details WHERE jobid = ANY(%s)", (jobs,))


@pytest.mark.slow
def test_eight_releases_scheduled_for_the_same_minute_all_refresh(db, schema, release_schema, analyst, cron):
    db.execute(TABLES)
    rels = [create(db, "people_a" if i % 2 else "people_b", release_schema, f"cron_{i}", False)
            for i in range(SESSIONS)]
    jobs = [db.execute("SELECT anon.schedule_refresh(%s, '* * * * *')", (rel,)).fetchone()[0] for rel in rels]
    finished = []

    def all_ended():
        finished[:] = db.execute("""
            SELECT DISTINCT ON (jobid) jobid, status, return_message FROM cron.job_run_details
            WHERE jobid = ANY(%s) AND status IN ('succeeded', 'failed')
            ORDER BY jobid, start_time""", (jobs,)).fetchall()
        return len(finished) == len(jobs)
    try:        # eight new backends at once at the minute boundary: minutes on a loaded machine
        wait_until(all_ended, "every first run ending", timeout=2 * HANG, every=2)
    except AssertionError:
        pass                                       # reported below, with what did end
    db.execute("SELECT cron.unschedule(j) FROM unnest(%s::bigint[]) j", (jobs,))
    print(f"\npg_cron: {len(finished)} of {len(jobs)} first runs finished: "
          f"{collections.Counter(s for _, s, _ in finished)}")
    assert len(finished) == len(jobs)
    assert [(j, s, m) for j, s, m in finished if s != "succeeded"] == []
    failures = db.execute("SELECT count(*) FROM anon.refresh_history h JOIN anon.releases r USING (release_id) "
                          "WHERE r.release_schema = %s AND NOT h.succeeded", (release_schema,)).fetchone()[0]
    assert failures == 0


@pytest.mark.slow
def test_writers_and_analysts_on_shared_releases_never_deadlock(db, connect, schema, release_schema, analyst):
    check_soak(db, connect, schema, release_schema, analyst, SECONDS)


def test_a_short_soak_has_no_deadlock_and_no_empty_read(db, connect, schema, release_schema, analyst):
    """The soak for 15 s (``python -m tests.bench soak`` runs it for 120 s): 8 writers, 2 analysts
    reading at REPEATABLE READ, whose snapshot predates the lock waits on a replace."""
    check_soak(db, connect, schema, release_schema, analyst, float(os.environ.get("PLPY_ANON_SHORT_SOAK", "15")))


def check_soak(db, connect, schema, release_schema, analyst, seconds):
    shared_load.setup(db, schema)
    soak = shared_load.Soak(connect, schema, release_schema, analyst).run(seconds)
    print("\nsoak:", soak.summary())
    for failure in soak.failures[:10]:
        print("  ", failure)
    assert soak.by_sqlstate().get("40P01", 0) == 0
    assert soak.empty_reads == 0
    assert soak.failures == []
    for op in shared_load.WRITES:
        assert soak.ops[op, "ok"] > 0, (op, soak.ops)
    # afterwards: catalog and relations agree, no leftovers, every release whole and k-anonymous
    catalog = {n for (n,) in db.execute("SELECT release_name::text FROM anon.releases WHERE release_schema = %s",
                                        (release_schema,))}
    stored = {n for (n,) in db.execute("SELECT parameters ->> 'storage' FROM anon.releases "
                                       "WHERE release_schema = %s AND parameters ? 'storage'", (release_schema,))}
    relations = {n for (n,) in db.execute("SELECT c.relname::text FROM pg_class c JOIN pg_namespace n "
                                          "ON n.oid = c.relnamespace WHERE n.nspname = %s", (release_schema,))}
    assert catalog | stored == relations
    for name in catalog:
        rel = sql.Identifier(release_schema, name).as_string(db)
        assert db.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == shared_load.ROWS
        assert min(class_sizes(db, rel, ["age", "sex", "zip"])) >= 5
