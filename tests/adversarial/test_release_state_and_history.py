"""Attacks on a stable release's state (row security on anon.release_people and
anon.release_secrets), on the pg_cron job's command, on a requester's history without foreign
keys and on anon.load_sample, by roles with no more than they are given."""
from __future__ import annotations

import re
import threading
import uuid

import psycopg
import pytest
from psycopg import sql

from tests.db.test_custodian import create
from tests.waits import wait_until_blocked

HEX = "0123456789abcdef"
PLAN = "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) "


def stable_release(connect, role: str, own: str) -> tuple[str, int]:
    with connect(user=role) as conn:
        name = create(conn, own, extra=", l => 2, identifiers => '{id}'")
        release_id = conn.execute("SELECT release_id FROM anon.releases WHERE format('%%I.%%I', "
                                  "release_schema, release_name) = %s", (name,)).fetchone()[0]
    return name, release_id


def plan(conn, query: str, params) -> str:
    """The plan as executed, the constants the query was given left out."""
    text = "\n".join(r[0] for r in conn.execute(PLAN + query, params).fetchall())
    return re.sub(r"'(?:[^']|'')*'::\w+", "?", text)


def test_another_custodian_cannot_recover_a_stable_releases_salt_through_explain(
        db, connect, owner, intruder):
    """Row security hides rows, not values from the planner: with SELECT on the salts (row
    secured), starts_with (leakproof) ran below the policy's qual, and whether the policy's
    subplan ran at all (EXPLAIN ANALYZE) told whether the hidden salt started with a guess.
    Custodians have no privilege on the salts at all; their owner reaches its own through
    anon._release_salt."""
    _, release_id = stable_release(connect, *owner)
    query = "SELECT * FROM anon.release_secrets WHERE release_id = %s AND starts_with(person_salt, %s)"
    with connect(user=intruder[0]) as conn:
        for probe in (PLAN + query, query):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(probe, (release_id, "0"))
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="state of release"):
            conn.execute("SELECT anon._release_salt(%s)", (release_id,))
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="state of release"):
            conn.execute("SELECT anon._store_release_salt(%s, '00')", (release_id,))
    with connect(user=owner[0]) as conn:
        assert len(conn.execute("SELECT anon._release_salt(%s)", (release_id,)).fetchone()[0]) == 32


def test_another_custodian_cannot_tell_who_is_in_a_stable_release_through_explain(
        db, connect, owner, intruder):
    """Whether a person's key is among the hidden rows shows in EXPLAIN ANALYZE (byteaeq is
    leakproof), but the key is a SHA-256 of the release's salt and the person's identifiers: a
    custodian that cannot read the salt (previous test) cannot make the key of anyone it
    guesses, so a key it tries is present only by chance (2^-256)."""
    _, release_id = stable_release(connect, *owner)
    salt = db.execute("SELECT person_salt FROM anon.release_secrets WHERE release_id = %s",
                      (release_id,)).fetchone()[0]
    with connect(user=intruder[0]) as conn:
        for guess in ("", "00" * 16, "0" * 32):
            present = conn.execute(
                "SELECT count(*) FROM anon.release_people WHERE release_id = %s AND person = "
                "sha256(decode(%s, 'hex') || convert_to('1', 'UTF8'))", (release_id, guess)).fetchone()
            assert guess == salt or present == (0,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT person_salt FROM anon.release_secrets")


def test_a_custodian_cannot_adopt_the_state_of_a_release_whose_catalog_row_is_gone(
        db, connect, owner, intruder):
    """The owner deletes its catalog row (the guard lets it); the people and salt stay behind,
    and whoever inserts a catalog row with that release_id (OVERRIDING SYSTEM VALUE) owns them."""
    role, own = owner
    _, release_id = stable_release(connect, role, own)
    with connect(user=role) as conn:
        conn.execute("DELETE FROM anon.releases WHERE release_id = %s", (release_id,))
    other, theirs = intruder
    with connect(user=other) as conn:
        conn.execute(sql.SQL("CREATE TABLE {}.x (id int)").format(sql.Identifier(theirs)))
        with conn.transaction():
            try:
                conn.execute(
                    "INSERT INTO anon.releases (release_id, release_schema, release_name, source, method, "
                    "schema_oid, release_owner) OVERRIDING SYSTEM VALUE "
                    "VALUES (%s, %s, 'adopted', %s::regclass, 'mondrian', %s::regnamespace, %s::regrole)",
                    (release_id, theirs, f"{theirs}.x", theirs, other))
            except psycopg.Error:
                return          # refused: nothing adopted
            people = conn.execute("SELECT count(*) FROM anon.release_people WHERE release_id = %s",
                                  (release_id,)).fetchone()[0]
            salts = conn.execute("SELECT count(*) FROM anon.release_secrets WHERE release_id = %s",
                                 (release_id,)).fetchone()[0]
    assert (people, salts) == (0, 0), f"adopted {people} people and {salts} salt"


def test_a_custodian_cannot_block_another_custodians_next_stable_release(
        db, connect, owner, intruder):
    """A custodian plants salts under the release ids to come and deletes its catalog rows: the
    next stable releases, whoever makes them, fail on release_secrets' key."""
    other, theirs = intruder
    with connect(user=other) as conn:
        conn.execute(sql.SQL("CREATE TABLE {}.x (id int)").format(sql.Identifier(theirs)))
        nxt = conn.execute("SELECT last_value FROM anon.releases_release_id_seq").fetchone()[0] + 1
        ids = list(range(nxt, nxt + 5))
        # a non-superuser's new catalog row takes the id the sequence gives it, never a chosen one
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(
                "INSERT INTO anon.releases (release_id, release_schema, release_name, source, method, "
                "schema_oid, release_owner) OVERRIDING SYSTEM VALUE "
                "SELECT g, %s, 'planted' || g, %s::regclass, 'mondrian', %s::regnamespace, %s::regrole "
                "FROM unnest(%s::int[]) g", (theirs, f"{theirs}.x", theirs, other, ids))
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("INSERT INTO anon.release_secrets SELECT g, '00' FROM unnest(%s::int[]) g",
                         (ids,))
    stable_release(connect, *owner)


@pytest.fixture
def cron(db):
    db.execute("CREATE EXTENSION IF NOT EXISTS pg_cron SCHEMA public")
    yield
    db.execute("SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname LIKE 'plpy_anon refresh %'")


def test_a_scheduled_jobs_command_runs_whatever_the_release_is_named(db, connect, owner, cron):
    """The job's command is a DO block quoted with $job$: a release (or schema) named with
    $job$ in it ends the block early, and the job fails on every run."""
    role, own = owner
    with connect(user=role) as conn:
        name = create(conn, own, extra=", release_name => 'r$job$x'")
    jobid = db.execute("SELECT anon.schedule_refresh(%s, '0 3 * * *')", (name,)).fetchone()[0]
    command = db.execute("SELECT command FROM cron.job WHERE jobid = %s", (jobid,)).fetchone()[0]
    with connect() as conn:          # run as pg_cron runs it: a session of the job's user
        conn.execute(command)


@pytest.fixture
def analyst_role(db):
    role = f"req_{uuid.uuid4().hex[:8]}"
    db.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(role)))
    yield role
    db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_deleting_a_requester_takes_history_recorded_concurrently_under_repeatable_read(
        db, connect, analyst_role):
    """A foreign key's cascade sees rows committed after a REPEATABLE READ snapshot (or fails
    the delete); the statement trigger's DELETE uses the snapshot and leaves them orphaned, to
    be inherited by the next requester of that name."""
    name = "rr_requester"
    db.execute("SELECT anon.add_requester(%s, %s)", (name, analyst_role))
    try:
        recorder, deleter = connect(), connect()
        recorder.autocommit = deleter.autocommit = False
        deleter.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        deleter.execute("SELECT 1").fetchall()                       # the snapshot
        recorder.execute("SELECT anon.record_interaction(%s, '1')", (name,)).fetchall()
        failed = []

        def delete():
            try:
                deleter.execute("DELETE FROM anon.requesters WHERE requester_name = %s", (name,))
                deleter.commit()
            except psycopg.errors.SerializationFailure:
                failed.append(True)
                deleter.rollback()

        worker = threading.Thread(target=delete)
        worker.start()
        wait_until_blocked(db, deleter.info.backend_pid, "the delete waiting for the recorder's row lock")
        recorder.commit()
        worker.join(30)
        recorder.close()
        deleter.close()
        if failed:
            return
        left = db.execute("SELECT count(*) FROM anon.interactions WHERE requester_name = %s",
                          (name,)).fetchone()[0]
        assert left == 0, f"{left} interactions of a deleted requester left behind"
    finally:
        db.execute("DELETE FROM anon.requesters WHERE requester_name = %s", (name,))
        db.execute("DELETE FROM anon.interactions WHERE requester_name = %s", (name,))


def test_a_truncated_requesters_history_is_not_inherited_by_a_new_requester_of_its_name(
        db, analyst_role):
    """TRUNCATE fires no DELETE trigger (a foreign key refused it): the history stays and goes
    to whoever is registered next under the name. Run in a transaction rolled back."""
    name = "truncated_requester"
    inherited = 0
    with db.transaction():
        db.execute("SELECT anon.add_requester(%s, %s)", (name, analyst_role))
        db.execute("SELECT anon.record_interaction(%s, '0')", (name,))
        try:
            with db.transaction():
                db.execute("TRUNCATE anon.requesters")
                db.execute("SELECT anon.add_requester(%s, %s)", (name, analyst_role))
                inherited = db.execute("SELECT count(*) FROM anon.interactions WHERE requester_name = %s",
                                       (name,)).fetchone()[0]
        except psycopg.Error:
            pass                              # refused, as with the foreign key
        raise psycopg.Rollback()
    assert inherited == 0, f"a new requester inherited {inherited} interactions"


def test_load_sample_refuses_an_empty_schema_name_with_a_clear_error(db):
    """Bad input gets a clear error: an invalid name (22023 or 42602) with a hint, not the
    syntax error of the CREATE SCHEMA statement built from it."""
    with pytest.raises(psycopg.Error) as info:
        db.execute("SELECT anon.load_sample('hr', schema_name => '')")
    assert info.value.sqlstate in ("22023", "42602"), info.value
    assert info.value.diag.message_hint


def test_a_stable_release_whose_salt_is_gone_is_refused_with_a_clear_error(db, connect, owner):
    """A partial restore (or a superuser) may leave a stable release without its salt: the next
    refresh must say what is missing, as it does for a release whose people are gone, not raise
    a Python KeyError (38000)."""
    role, _ = owner
    name, release_id = stable_release(connect, *owner)
    db.execute("DELETE FROM anon.release_secrets WHERE release_id = %s", (release_id,))
    with connect(user=role) as conn, pytest.raises(psycopg.Error) as info:
        conn.execute("SELECT anon.refresh(%s)", (name,))
    assert info.value.sqlstate not in ("38000", "XX000"), info.value
    assert info.value.diag.message_hint
