"""Scheduled refreshes with pg_cron.

pg_cron 1.4 (Debian 12's postgresql-15-cron) schedules to the minute, so the test that watches
pg_cron itself run a job waits up to ~70 s: it is marked ``slow`` (``make test`` and CI run it;
``-m "not slow"`` skips it while iterating). The fast tests check what can be checked without
waiting: the job row pg_cron stores (schedule, command, database, user), that the stored command
refreshes the release when run the way pg_cron runs it (a new session of the job's user), the
status join, the clear errors, and unscheduling.
"""
from __future__ import annotations

import psycopg
import pytest

from plpy_anon.cluster import PG_BIN, ThrowawayCluster
from tests.helpers import release_schema_of
from tests.waits import wait_until

TABLE = """
CREATE TABLE patients (id int PRIMARY KEY, age int, sex text, diagnosis text);
INSERT INTO patients SELECT i, 20 + i % 50, CASE WHEN i % 2 = 0 THEN 'F' ELSE 'M' END, 'flu'
FROM generate_series(1, 80) i;
"""


@pytest.fixture
def released(db, schema):
    db.execute(TABLE)
    return db.execute("SELECT anon.mondrian_view('patients', k => 4, release_name => 'r', "
                      "release_schema => %s)", (release_schema_of(schema),)).fetchone()[0]


@pytest.fixture
def cron(db):
    # pg_cron's control file names no schema: without SCHEMA it would belong to the test's
    # schema (first on the search_path) and be dropped with it -- and pg_cron caches its table's
    # OID per backend, so the shared connection could not use a re-created one.
    db.execute("CREATE EXTENSION IF NOT EXISTS pg_cron SCHEMA public")
    yield
    db.execute("SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname LIKE 'plpy_anon refresh %'")


def job(db, release):
    return db.execute("""
        SELECT j.jobid, j.schedule, j.command, j.database, j.username FROM cron.job j
        JOIN anon.releases r ON j.jobname = anon._refresh_job_name(r.release_schema, r.release_name)
        WHERE format('%%I.%%I', r.release_schema, r.release_name) = %s""", (release,)).fetchone()


def test_schedule_stores_a_job_that_refreshes_the_release(db, connect, schema, released, cron):
    jobid = db.execute("SELECT anon.schedule_refresh(%s, '0 3 * * *')", (released,)).fetchone()[0]
    stored = job(db, released)
    assert stored[0] == jobid
    assert (stored[1], stored[3]) == ("0 3 * * *", "anon_test")
    assert f"PERFORM anon.refresh('{released}')" in stored[2]
    # rescheduling replaces the job instead of adding one
    again = db.execute("SELECT anon.schedule_refresh(%s, '30 2 * * 1')", (released,)).fetchone()[0]
    assert again == jobid and job(db, released)[1] == "30 2 * * 1"
    status = db.execute("SELECT schedule, jobid FROM anon.release_status() WHERE release = %s",
                        (released,)).fetchone()
    assert status == ("30 2 * * 1", jobid)
    # what pg_cron will run, run the way it runs it: a new session as the job's user
    db.execute("INSERT INTO patients SELECT i, 30, 'F', 'flu' FROM generate_series(81, 100) i")
    with connect(user=stored[4]) as session:
        session.execute(stored[2])
    assert db.execute("SELECT row_count FROM anon.release_status() WHERE release = %s",
                      (released,)).fetchone()[0] == 100


def test_status_shows_the_latest_run_of_the_job(db, schema, released, cron):
    jobid = db.execute("SELECT anon.schedule_refresh(%s, '0 3 * * *')", (released,)).fetchone()[0]
    # Two runs as pg_cron records them (written here: pg_cron would take up to a minute).
    db.execute("""
        INSERT INTO cron.job_run_details (jobid, runid, job_pid, database, username, command, status,
                                          return_message, start_time, end_time)
        VALUES (%(j)s, nextval('cron.runid_seq'), 1, 'anon_test', 'postgres', 'x', 'failed', 'boom',
                '2026-01-01 03:00:00+00', '2026-01-01 03:00:02+00'),
               (%(j)s, nextval('cron.runid_seq'), 2, 'anon_test', 'postgres', 'x', 'succeeded', 'SELECT 1',
                '2026-01-02 03:00:00+00', '2026-01-02 03:00:05.5+00')""", {"j": jobid})
    try:
        row = db.execute("SELECT last_run_status, last_run_seconds, last_run_message, last_run_start::date "
                         "FROM anon.release_status() WHERE release = %s", (released,)).fetchone()
        assert row[:3] == ("succeeded", 5.5, "SELECT 1")
        assert str(row[3]) == "2026-01-02"
    finally:
        db.execute("DELETE FROM cron.job_run_details WHERE jobid = %s", (jobid,))


def test_bad_schedule_and_unknown_release_are_clear_errors(db, schema, released, cron):
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="invalid cron schedule") as info:
        db.execute("SELECT anon.schedule_refresh(%s, 'every night')", (released,))
    assert "0 3 * * *" in info.value.diag.message_hint
    with pytest.raises(psycopg.errors.UndefinedObject, match="does not exist"):
        db.execute("SELECT anon.schedule_refresh('no_such_release', '0 3 * * *')")
    assert db.execute("SELECT count(*) FROM cron.job WHERE jobname LIKE 'plpy_anon refresh %'").fetchone()[0] == 0


def test_unschedule_removes_the_job(db, schema, released, cron):
    db.execute("SELECT anon.schedule_refresh(%s, '0 3 * * *')", (released,))
    assert db.execute("SELECT anon.unschedule_refresh(%s)", (released,)).fetchone()[0] is True
    assert job(db, released) is None
    assert db.execute("SELECT anon.unschedule_refresh(%s)", (released,)).fetchone()[0] is False


def test_long_names_get_a_job_name_pg_cron_can_store(db):
    long = db.execute("SELECT anon._refresh_job_name(repeat('s', 60), repeat('r', 60))").fetchone()[0]
    assert len(long.encode()) <= 63 and long.startswith("plpy_anon refresh ")
    other = db.execute("SELECT anon._refresh_job_name(repeat('s', 60), repeat('r', 59) || 'x')").fetchone()[0]
    assert long != other


def test_missing_pg_cron_is_a_clear_error():
    """On a cluster of its own: first without pg_cron preloaded, then preloaded but with the
    extension not created. The status still lists releases without pg_cron."""
    with ThrowawayCluster() as cluster:
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION plpy_anon CASCADE")
            conn.execute(TABLE)
            rel = conn.execute("SELECT anon.mondrian_view('patients', k => 4)").fetchone()[0]
            with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as info:
                conn.execute("SELECT anon.schedule_refresh(%s, '0 3 * * *')", (rel,))
            assert "not loaded" in info.value.diag.message_primary
            assert "shared_preload_libraries" in info.value.diag.message_hint
            assert conn.execute("SELECT release, schedule FROM anon.release_status()").fetchall() == [(rel, None)]
            conn.execute("ALTER SYSTEM SET shared_preload_libraries = pg_cron")
        cluster._run([PG_BIN / "pg_ctl", "-D", cluster.datadir, "-l", cluster.root / "server.log", "-w", "restart"])
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as info:
                conn.execute("SELECT anon.unschedule_refresh(%s)", (rel,))
            assert "not installed" in info.value.diag.message_primary
            assert info.value.diag.message_hint == "CREATE EXTENSION pg_cron;"


@pytest.mark.slow
def test_pg_cron_runs_the_scheduled_refresh(db, schema, released, cron):
    """Every minute; pg_cron starts it at the next minute boundary (at most ~60 s away)."""
    db.execute("INSERT INTO patients SELECT i, 30, 'F', 'flu' FROM generate_series(81, 120) i")
    db.execute("SELECT anon.schedule_refresh(%s, '* * * * *')", (released,))

    def ended():
        status = db.execute("SELECT row_count, last_run_status, last_run_seconds, last_run_start "
                            "FROM anon.release_status() WHERE release = %s", (released,)).fetchone()
        return status if status[1] in ("succeeded", "failed") else None
    # the next minute boundary, then a new backend's imports and the refresh: a loaded machine
    # takes longer than the minute for the last two
    status = wait_until(ended, "pg_cron's run of the refresh ending", every=1)
    assert status[1] == "succeeded", status
    assert status[0] == 120                 # the refresh saw the new rows
    assert status[2] >= 0 and status[3] is not None
    history = db.execute("SELECT succeeded FROM anon.refresh_history h JOIN anon.releases r USING (release_id) "
                         "WHERE r.release_schema = %s", (release_schema_of(schema),)).fetchall()
    assert (True,) in history


def test_a_dropped_extensions_jobs_unschedule_themselves_instead_of_failing():
    """DROP EXTENSION plpy_anon CASCADE leaves pg_cron's rows (another extension's). Run the way
    pg_cron runs it (a new session of the job's user), a job refreshes its release while the
    extension is there and, once it is dropped, removes itself without an error. A job stored
    with the plain command of earlier versions gets the new one when the extension is installed
    again. On a cluster of its own (pg_cron preloaded for its database)."""
    with ThrowawayCluster(cron_database="postgres") as cluster:
        def session():
            return psycopg.connect(cluster.dsn(), autocommit=True)
        with session() as conn:
            conn.execute("CREATE EXTENSION pg_cron")
            conn.execute("CREATE EXTENSION plpy_anon CASCADE")
            conn.execute(TABLE)
            rel = conn.execute("SELECT anon.mondrian_view('patients', k => 4)").fetchone()[0]
            jobid = conn.execute("SELECT anon.schedule_refresh(%s, '0 3 * * *')", (rel,)).fetchone()[0]
            command = conn.execute("SELECT command FROM cron.job WHERE jobid = %s", (jobid,)).fetchone()[0]
            conn.execute("INSERT INTO patients SELECT i, 30, 'F', 'flu' FROM generate_series(81, 90) i")
        with session() as job:
            job.execute(command)
        with session() as conn:
            assert conn.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == 90
            conn.execute("DROP EXTENSION plpy_anon CASCADE")
        with session() as job:
            job.execute(command)                      # no error: the job unscheduled itself
        with session() as conn:
            assert conn.execute("SELECT count(*) FROM cron.job").fetchone()[0] == 0
            # a job as earlier versions stored it, left behind by a DROP EXTENSION
            old = conn.execute("SELECT cron.schedule('plpy_anon refresh release.patients_k4', '0 3 * * *', "
                               "$$SELECT anon.refresh('release.patients_k4')$$)").fetchone()[0]
            conn.execute("CREATE EXTENSION plpy_anon CASCADE")
            rewritten = conn.execute("SELECT command FROM cron.job WHERE jobid = %s", (old,)).fetchone()[0]
            assert rewritten == command
            conn.execute("DROP EXTENSION plpy_anon CASCADE")
        with session() as job:
            job.execute(rewritten)
        with session() as conn:
            assert conn.execute("SELECT count(*) FROM cron.job").fetchone()[0] == 0


def test_status_shows_a_job_made_by_hand_that_refreshes_the_release(db, schema, released, cron):
    """A job scheduled without anon.schedule_refresh (its own name, its own spelling) is the
    release's schedule too."""
    jobid = db.execute("SELECT cron.schedule('nightly by hand', '15 4 * * *', %s)",
                       (f"SELECT anon.refresh( '{released}' );",)).fetchone()[0]
    try:
        status = db.execute("SELECT schedule, jobid FROM anon.release_status() WHERE release = %s",
                            (released,)).fetchone()
        assert status == ("15 4 * * *", jobid)
        # the job schedule_refresh names wins over one made by hand
        named = db.execute("SELECT anon.schedule_refresh(%s, '0 3 * * *')", (released,)).fetchone()[0]
        assert db.execute("SELECT jobid FROM anon.release_status() WHERE release = %s",
                          (released,)).fetchone()[0] == named
    finally:
        db.execute("SELECT cron.unschedule(%s::bigint)", (jobid,))


def test_a_release_of_another_database_is_scheduled_from_pg_crons_database(connect, db, cron):
    """pg_cron runs in one database (cron.database_name); the client schedules a release of
    another database from there with cron.schedule_in_database, and unschedules it."""
    from plpy_anon.client import AnonClient
    other = "cron_elsewhere"
    with connect(dbname="postgres") as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {other} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {other}")
    try:
        with connect(dbname=other) as conn:
            conn.execute("CREATE EXTENSION plpy_anon CASCADE")
            conn.execute(TABLE)
            release = conn.execute("SELECT anon.mondrian_view('patients', k => 4)").fetchone()[0]
            with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState,
                               match="pg_cron runs in database anon_test") as info:
                conn.execute("SELECT anon.schedule_refresh(%s, '0 3 * * *')", (release,))
            assert "cron.schedule_in_database" in info.value.diag.message_hint
            # the hint names the release to ask anon.refresh_job about, not a placeholder
            assert f"SELECT * FROM anon.refresh_job('{release}') gives here" in info.value.diag.message_hint
            client = AnonClient(connection=conn)
            jobid = client.schedule_refresh(release, "0 5 * * *")
            stored = db.execute("SELECT schedule, database, command FROM cron.job WHERE jobid = %s",
                                (jobid,)).fetchone()
            assert stored[:2] == ("0 5 * * *", other)
            assert f"anon.refresh('{release}')" in stored[2]
            assert client.unschedule_refresh(release) is True
            assert db.execute("SELECT count(*) FROM cron.job WHERE jobid = %s",
                              (jobid,)).fetchone()[0] == 0
            assert client.unschedule_refresh(release) is False
    finally:
        with connect(dbname="postgres") as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {other} WITH (FORCE)")
