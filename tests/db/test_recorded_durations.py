"""The durations plpy_anon records are the caller's wall clock of the whole call: a creation's and a
refresh's ``refresh_seconds``, a refresh's ``anon.refresh_history.seconds`` and a plain REFRESH
MATERIALIZED VIEW's, with the phases in ``metrics.timing`` adding up to it. The slow part here is
a wait: another session holds the source locked until the call has waited for it HOLD seconds,
so the call takes at least that long, whichever of its steps waits."""
from __future__ import annotations

import threading
import time

import psycopg
import pytest
from psycopg import sql

from tests.helpers import release_schema_of
from tests.waits import HANG, wait_until

HOLD = 1.5

PEOPLE = """
CREATE TABLE people (id int PRIMARY KEY, age int, zip text, diagnosis text);
INSERT INTO people SELECT i, 20 + i % 50, lpad((i % 23)::text, 5, '0'), 'd' || i % 4
FROM generate_series(1, 400) i;
"""


@pytest.fixture
def people(db, schema):
    db.execute(PEOPLE)
    return sql.Identifier(schema, "people")


@pytest.fixture
def locked(connect):
    """locked(table): from its return, another session holds ``table`` ACCESS EXCLUSIVE until a
    call has waited for it HOLD seconds (the wait is timed from when the call is seen waiting,
    so however late the call starts, it waits at least HOLD)."""
    threads, failures = [], []

    def lock(table):
        taken = threading.Event()

        def hold():
            try:
                with connect() as conn, conn.transaction():
                    conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(table))
                    taken.set()
                    wait_until(lambda: conn.execute(   # pg_locks is live inside a transaction
                        "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE NOT granted "
                        "AND relation = %s::regclass)", (table.as_string(conn),)).fetchone()[0],
                        "a call waiting for the locked table")
                    time.sleep(HOLD)
            except (AssertionError, psycopg.Error) as error:
                failures.append(error)
                taken.set()
        thread = threading.Thread(target=hold)
        thread.start()
        threads.append(thread)
        assert taken.wait(HANG) and not failures, failures

    yield lock
    for thread in threads:
        thread.join()
    assert not failures, failures


def timed(conn, query) -> float:
    t0 = time.perf_counter()
    conn.execute(query)
    return time.perf_counter() - t0


def create(schema) -> sql.Composed:
    return sql.SQL("SELECT anon.mondrian_view({}, k => 5, quasi_identifiers => ARRAY['age', 'zip'], "
                   "sensitive => ARRAY['diagnosis'], identifiers => ARRAY['id'], release_schema => {})"
                   ).format(sql.Literal(f'"{schema}".people'), sql.Literal(release_schema_of(schema)))


def recorded(db, schema) -> tuple[float, dict]:
    seconds, timing = db.execute("SELECT refresh_seconds, metrics -> 'timing' FROM anon.releases "
                                 "WHERE release_schema = %s", (release_schema_of(schema),)).fetchone()
    return seconds, timing


def assert_whole_call(seconds: float, timing: dict, wall: float) -> None:
    assert HOLD <= seconds <= wall, (seconds, wall)
    assert timing["seconds"] == pytest.approx(seconds)
    assert sum(timing["phases"].values()) == pytest.approx(seconds, abs=0.005), timing


def test_a_creation_records_its_whole_call_lock_wait_included(db, schema, people, locked):
    locked(people)
    wall = timed(db, create(schema))
    seconds, timing = recorded(db, schema)
    assert_whole_call(seconds, timing, wall)
    assert {"read", "fit", "build", "verify"} <= set(timing["phases"])
    # and it is a release: every class of its rows holds k = 5 people
    smallest = db.execute(sql.SQL("SELECT min(n) FROM (SELECT count(*) AS n FROM {} GROUP BY age, zip) c")
                          .format(sql.Identifier(release_schema_of(schema), "people_k5"))).fetchone()[0]
    assert smallest >= 5


def test_a_refresh_records_its_whole_call_in_the_catalog_and_the_history(db, schema, people, locked):
    db.execute(create(schema))
    name = f"{release_schema_of(schema)}.people_k5"
    locked(people)
    wall = timed(db, sql.SQL("SELECT anon.refresh({})").format(sql.Literal(name)))
    seconds, timing = recorded(db, schema)
    assert_whole_call(seconds, timing, wall)
    assert timing["phases"]["locks"] >= HOLD, timing
    history = db.execute("SELECT seconds, phases FROM anon.refresh_history WHERE release_name = %s",
                         (name,)).fetchall()
    assert history == [(seconds, timing["phases"])]


def test_a_plain_refresh_records_the_statement_wait_included(db, schema, people, locked):
    db.execute(create(schema))
    (storage,) = db.execute("SELECT coalesce(parameters ->> 'storage', release_name) FROM anon.releases "
                            "WHERE release_schema = %s", (release_schema_of(schema),)).fetchone()
    locked(people)
    wall = timed(db, sql.SQL("REFRESH MATERIALIZED VIEW {}").format(
        sql.Identifier(release_schema_of(schema), storage)))
    seconds, timing = recorded(db, schema)
    assert_whole_call(seconds, timing, wall)


def test_refresh_all_records_for_each_release_the_seconds_it_reports(db, schema, people):
    """(anon.refresh_all refreshes every release of the database, other tests' too: no lock here,
    whose wait could fall on another release's turn.)"""
    db.execute(create(schema))
    name = f"{release_schema_of(schema)}.people_k5"
    t0 = time.perf_counter()
    reported = {r[0]: r[2] for r in db.execute("SELECT * FROM anon.refresh_all()").fetchall()}
    wall = time.perf_counter() - t0
    seconds, timing = recorded(db, schema)
    assert seconds <= reported[name] <= wall  # its own clock started first, stops after the history row
    assert timing["seconds"] == pytest.approx(seconds)
    assert sum(timing["phases"].values()) == pytest.approx(seconds, abs=0.005), timing
    history = db.execute("SELECT seconds, phases FROM anon.refresh_history WHERE release_name = %s",
                         (name,)).fetchall()
    assert history == [(seconds, timing["phases"])]


def test_a_failed_refresh_records_its_whole_call_in_the_history(db, schema, people, locked):
    db.execute(create(schema))
    name = f"{release_schema_of(schema)}.people_k5"
    db.execute(sql.SQL("DELETE FROM {} WHERE id > 3").format(people))      # fewer rows than k
    locked(people)
    t0 = time.perf_counter()
    with pytest.raises(psycopg.errors.DatabaseError):
        db.execute(sql.SQL("SELECT anon.refresh({})").format(sql.Literal(name)))
    wall = time.perf_counter() - t0
    ((succeeded, seconds, phases),) = db.execute(
        "SELECT succeeded, seconds, phases FROM anon.refresh_history WHERE release_name = %s", (name,)).fetchall()
    assert not succeeded
    assert HOLD <= seconds <= wall, (seconds, wall)
    assert sum(phases.values()) == pytest.approx(seconds, abs=0.005), phases
