"""Adversarial: a stable release refreshed while others read it or refresh it too, and refreshes
cancelled part way. An analyst role granted SELECT on the release alone reads it at REPEATABLE
READ and SERIALIZABLE while a custodian churns the table and refreshes: every read must be one
whole version that a refresh published (committed after its check), never a refused one, a
half-written one or two versions' rows mixed. A refresh at REPEATABLE READ whose snapshot
predates another refresh's commit must fail, not publish a version checked against the state
and versions as they were. A refresh cancelled at any point (statement_timeout,
pg_cancel_backend) must leave the released rows, the state and the stored versions as they
were, and the next refresh must succeed; the analyst who kept every version pins no one."""
from __future__ import annotations

import threading
import time
import uuid

import psycopg
import pytest
from psycopg import sql

from tests.helpers import (
    create_release,
    keep_released_version,
    pinned_by_difference,
    pinned_by_intersection,
)

QIS = {"age": "range", "zip": "range"}
VALUES = ["flu", "hiv", "cold", "ok", "gout"]


def make_table(db, n: int) -> None:
    db.execute("CREATE TABLE pt (id bigint PRIMARY KEY, age int, zip int, dx text)")
    db.execute("INSERT INTO pt SELECT g, 20 + (g * 37) %% 50, (g * 11) %% 90, "
               "(ARRAY['flu','hiv','cold','ok','gout'])[1 + (g * 7 + g / 13) %% 5] "
               "FROM generate_series(1, %s::int) g", (n,))


def stable(db, schema: str, **layout) -> str:
    return create_release(db, "mondrian_view", schema, "pt", k=5, l=2, quasi_identifiers=list(QIS),
                          sensitive=["dx"], identifiers=["id"], refresh_mode="stable", **layout)


def churn(db, step: int, n: int) -> None:
    """About 2 % of the people leave, as many join, and those who left the step before come
    back (with their record)."""
    db.execute("CREATE TABLE IF NOT EXISTS gone (LIKE pt)")
    db.execute("INSERT INTO pt SELECT * FROM gone ON CONFLICT DO NOTHING")
    db.execute("DELETE FROM gone")
    db.execute("WITH d AS (DELETE FROM pt WHERE (id * 13 + %s) %% 50 = 0 RETURNING *) "
               "INSERT INTO gone SELECT * FROM d", (step,))
    db.execute("INSERT INTO pt SELECT g, 20 + (g * 31) %% 50, (g * 17) %% 90, "
               "(ARRAY['flu','hiv','cold','ok','gout'])[1 + (g * 3) %% 5] "
               "FROM generate_series(%s::int, %s::int) g", (n * (step + 2), n * (step + 2) + n // 50))


def released(conn, release: str) -> tuple:
    """The released rows as a sorted tuple (what a reader sees, as a whole)."""
    return tuple(conn.execute(sql.SQL("SELECT age::text, zip::text, dx FROM {} ORDER BY 1, 2, 3")
                              .format(sql.SQL(release))).fetchall())


def stored(db, release: str) -> tuple:
    """Digests of the release's state and stored versions (rows of the catalog tables)."""
    rid = release_id(db, release)
    return db.execute(
        "SELECT (SELECT md5(string_agg(s::text, '|' ORDER BY s::text)) FROM anon.release_state s "
        "        WHERE s.release_id = %s), "
        "(SELECT md5(string_agg(v::text, '|' ORDER BY v.version)) FROM anon.release_versions v "
        "        WHERE v.release_id = %s)", (rid, rid)).fetchone()


def release_id(db, release: str) -> int:
    return db.execute("SELECT release_id FROM anon.releases WHERE format('%%I.%%I', release_schema, "
                      "release_name) = %s", (release,)).fetchone()[0]


def keep(db, release: str, kept: list) -> None:
    db.execute("DROP TABLE IF EXISTS seen")
    db.execute("CREATE TEMP TABLE seen AS SELECT id::text AS pk, age, zip, dx FROM pt")
    kept.append(keep_released_version(db, release, "seen", "pk", QIS, "dx"))


def pins(kept: list) -> tuple[dict, dict]:
    by_difference = {}
    for j in range(1, len(kept)):
        for i in range(j):
            by_difference.update(pinned_by_difference(kept[i], kept[j]))
    return by_difference, pinned_by_intersection(kept)


@pytest.fixture
def reader(db, connect):
    """reader(release) -> a connection as a login role granted USAGE on the release's schema and
    SELECT on the release, nothing else."""
    role = f"reader_{uuid.uuid4().hex[:8]}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    opened = []

    def make(release: str):
        schema_name = release.split(".")[0]
        db.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.SQL(schema_name), sql.Identifier(role)))
        db.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(sql.SQL(release), sql.Identifier(role)))
        opened.append(connect(user=role))
        return opened[-1]
    yield make
    for conn in opened:
        conn.close()
    db.execute(sql.SQL("DROP OWNED BY {0}; DROP ROLE {0}").format(sql.Identifier(role)))


@pytest.mark.parametrize("layout", ["compact", "flat"])
@pytest.mark.parametrize("isolation", ["REPEATABLE READ", "SERIALIZABLE"])
def test_an_analyst_reading_during_refreshes_sees_only_whole_published_versions(db, schema, connect,
                                                                                reader, isolation, layout):
    make_table(db, 4000)
    release = stable(db, schema, layout=layout)
    published = [released(db, release)]
    kept: list = []
    keep(db, release, kept)
    analyst = reader(release)
    reads, errors, done = [], [], threading.Event()

    def read():
        while not done.is_set():
            try:
                with analyst.transaction():
                    analyst.execute(f"SET TRANSACTION ISOLATION LEVEL {isolation}, READ ONLY")
                    first = released(analyst, release)
                    time.sleep(0.05)
                    reads.append((first, released(analyst, release)))
            except psycopg.errors.SerializationFailure:
                pass
            except psycopg.Error as e:     # pragma: no cover - reported below
                errors.append(repr(e))
                return
    thread = threading.Thread(target=read)
    thread.start()
    try:
        for step in range(3):
            churn(db, step, 4000)
            db.execute("SELECT anon.refresh(%s)", (release,))
            published.append(released(db, release))
            keep(db, release, kept)
    finally:
        done.set()
        thread.join()
    assert errors == []
    assert reads
    versions = set(published)
    # each single read is a whole published version (an old snapshot may see the newer one:
    # an in-place refresh writes its rows frozen, as PostgreSQL's REFRESH does)
    assert [i for i, (a, b) in enumerate(reads) if a not in versions or b not in versions] == []
    assert pins(kept) == ({}, {})


def test_a_refresh_at_repeatable_read_older_than_another_refresh_publishes_nothing(db, schema, connect):
    make_table(db, 400)
    release = stable(db, schema)
    kept: list = []
    keep(db, release, kept)
    late = connect()
    late.execute(sql.SQL("SET search_path = {}, public").format(sql.Identifier(schema)))
    late.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    late.execute("SELECT count(*) FROM pt")          # its snapshot: before the churn and refresh
    churn(db, 0, 400)
    db.execute("SELECT anon.refresh(%s)", (release,))
    keep(db, release, kept)
    before = stored(db, release), released(db, release)
    churn(db, 1, 400)
    with pytest.raises(psycopg.errors.SerializationFailure):
        late.execute("SELECT anon.refresh(%s)", (release,))
    late.execute("ROLLBACK")
    late.close()
    assert (stored(db, release), released(db, release)) == before
    db.execute("SELECT anon.refresh(%s)", (release,))
    keep(db, release, kept)
    assert pins(kept) == ({}, {})


def test_two_custodians_refreshing_at_once_publish_checked_versions_in_turn(db, schema, as_dba):
    """Two sessions of the release's owner (a superuser, or a custodian that is not one), one at
    READ COMMITTED and one at REPEATABLE READ, refresh it at once."""
    make_table(db, 3000)
    if as_dba.custodian:
        db.execute(sql.SQL("GRANT UPDATE ON pt TO {}").format(sql.Identifier(as_dba.role)))
    with as_dba() as owner:
        owner.execute(sql.SQL("SET search_path = {}, public").format(sql.Identifier(schema)))
        release = stable(owner, schema)
    kept: list = []
    keep(db, release, kept)
    churn(db, 0, 3000)
    outcomes = []

    def refresh(isolation):
        with as_dba() as conn:
            conn.execute(sql.SQL("SET search_path = {}, public").format(sql.Identifier(schema)))
            try:
                with conn.transaction():
                    conn.execute(f"SET TRANSACTION ISOLATION LEVEL {isolation}")
                    conn.execute("SELECT anon.refresh(%s)", (release,))
                outcomes.append("ok")
            except psycopg.errors.SerializationFailure:
                outcomes.append("40001")
    threads = [threading.Thread(target=refresh, args=(i,)) for i in ("READ COMMITTED", "REPEATABLE READ")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert "ok" in outcomes and set(outcomes) <= {"ok", "40001"}, outcomes
    versions = db.execute("SELECT array_agg(version ORDER BY version) FROM anon.release_versions "
                          "WHERE release_id = %s", (release_id(db, release),)).fetchone()[0]
    assert versions == list(range(len(versions))) and len(versions) == 1 + outcomes.count("ok")
    keep(db, release, kept)
    churn(db, 1, 3000)
    db.execute("SELECT anon.refresh(%s)", (release,))
    keep(db, release, kept)
    assert pins(kept) == ({}, {})


def test_a_refresh_cancelled_anywhere_leaves_everything_as_it_was_and_the_next_succeeds(db, schema, connect):
    make_table(db, 20000)
    release = stable(db, schema)
    kept: list = []
    keep(db, release, kept)
    churn(db, 0, 20000)
    before = stored(db, release), released(db, release)
    with connect() as probe:         # how long a whole refresh takes here (rolled back)
        probe.execute(sql.SQL("SET search_path = {}, public").format(sql.Identifier(schema)))
        with probe.transaction():
            took = time.monotonic()
            probe.execute("SELECT anon.refresh(%s)", (release,))
            took = time.monotonic() - took
            raise psycopg.Rollback()
    assert (stored(db, release), released(db, release)) == before
    cancelled, canceller = 0, connect()
    for fraction in (0.15, 0.4, 0.65, 0.9):
        with connect() as conn:
            conn.execute(sql.SQL("SET search_path = {}, public").format(sql.Identifier(schema)))
            pid = conn.info.backend_pid
            timer = threading.Timer(took * fraction, canceller.execute, ("SELECT pg_cancel_backend(%s)", (pid,)))
            timer.start()
            finished = False
            try:
                conn.execute("SELECT anon.refresh(%s)", (release,))
                finished = True
                conn.execute("SELECT pg_sleep(10)")  # the cancel then ends this
            except psycopg.errors.QueryCanceled:
                pass
            timer.cancel()
            timer.join()
            if finished:
                # that refresh published; the next ones start from its version
                keep(db, release, kept)
                before = stored(db, release), released(db, release)
            else:
                cancelled += 1
                assert (stored(db, release), released(db, release)) == before, fraction
    canceller.close()
    assert cancelled >= 2, cancelled
    with connect(options="-c statement_timeout=1000") as conn:
        conn.execute(sql.SQL("SET search_path = {}, public").format(sql.Identifier(schema)))
        try:
            conn.execute("SELECT anon.refresh(%s)", (release,))
        except psycopg.errors.QueryCanceled:
            assert (stored(db, release), released(db, release)) == before
    db.execute("SELECT anon.refresh(%s)", (release,))
    keep(db, release, kept)
    assert pins(kept) == ({}, {})
