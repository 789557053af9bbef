"""Adversarial: a plain ``REFRESH MATERIALIZED VIEW`` of a stable release that waited for another
refresh's lock runs again inside its event trigger (READ COMMITTED). Three sessions at once, the
REFRESH inside a DO block in an explicit transaction after a SAVEPOINT, pg_cron's anon.refresh
queued behind a plain REFRESH, and a cancel while it runs again: each refresh publishes one
version checked against every earlier one, a cancelled one leaves the released rows, the state
and the stored versions as the committed refresh left them, and the next refresh succeeds."""
from __future__ import annotations

import threading
import time

import psycopg

from tests.adversarial.test_stable_plain_refreshes_at_once import newest, wait_for_lock
from tests.adversarial.test_stable_refresh_concurrency import (
    churn,
    released,
    stored,
)


def queued(db, release: str, statements: list[tuple[psycopg.Connection, str]]) -> dict:
    """A first session refreshes ``release`` in an open transaction; each of ``statements``
    starts in its own thread and waits for its lock, in turn; then the first commits. Returns
    each statement's outcome ("done" or the SQLSTATE)."""
    first = statements[0][0].__class__.connect(statements[0][0].info.dsn, autocommit=True)
    first.execute("BEGIN")
    first.execute(f"REFRESH MATERIALIZED VIEW {release}")
    churn(db, 2, 2000)
    outcome: dict = {}

    def go(i, conn, statement):
        try:
            conn.execute(statement)
            outcome[i] = "done"
        except psycopg.Error as refused:
            outcome[i] = refused.diag.sqlstate
    threads = []
    for i, (conn, statement) in enumerate(statements):
        threads.append(threading.Thread(target=go, args=(i, conn, statement)))
        threads[-1].start()
        wait_for_lock(db, conn.info.backend_pid)
    first.execute("COMMIT")
    for thread in threads:
        thread.join()
    first.close()
    return outcome


def test_two_plain_refreshes_and_anon_refresh_queued_behind_a_third_each_publish_one_version(
        db, connect, churned_stable_release):
    release, rid = churned_stable_release
    second, third, cron = connect(), connect(), connect()
    outcome = queued(db, release, [(second, f"REFRESH MATERIALIZED VIEW {release}"),
                                   (third, f"REFRESH MATERIALIZED VIEW {release}"),
                                   (cron, f"SELECT anon.refresh('{release}')")])
    for conn in (second, third, cron):
        conn.close()
    assert outcome == {0: "done", 1: "done", 2: "done"}
    # versions 1 (the first), 2, 3 and 4, each checked against every one before it
    assert newest(db, rid) == (4, 4, 4)
    assert db.execute("SELECT count(*) FILTER (WHERE succeeded), count(*) FILTER (WHERE NOT "
                      "succeeded) FROM anon.refresh_history WHERE release_id = %s",
                      (rid,)).fetchone() == (1, 0)


def test_a_plain_refresh_in_a_do_block_after_a_savepoint_runs_again_on_what_the_other_left(
        db, connect, churned_stable_release):
    release, rid = churned_stable_release
    second = connect()
    second.execute("BEGIN")
    second.execute("SELECT count(*) FROM anon.releases")
    second.execute("SAVEPOINT before_refresh")
    block = f"DO $$ BEGIN REFRESH MATERIALIZED VIEW {release}; END $$"
    outcome = queued(db, release, [(second, block)])
    assert outcome == {0: "done"}
    second.execute("RELEASE SAVEPOINT before_refresh")
    second.execute("COMMIT")
    second.close()
    assert newest(db, rid) == (2, 2, 2)


def test_a_plain_refresh_cancelled_while_it_runs_again_leaves_the_committed_version(
        db, connect, churned_stable_release):
    release, rid = churned_stable_release
    second = connect()
    second.execute("SET plpy_anon.progress = on")
    cancelled = threading.Event()

    def cancel_on_running_again(notice):
        if "running it again" in (notice.message_primary or "") and not cancelled.is_set():
            cancelled.set()
            db.execute("SELECT pg_cancel_backend(%s)", (second.info.backend_pid,))
    second.add_notice_handler(cancel_on_running_again)
    outcome = queued(db, release, [(second, f"REFRESH MATERIALIZED VIEW {release}")])
    second.close()
    assert cancelled.is_set(), outcome
    assert outcome == {0: "57014"}
    after_first = (released(db, release), stored(db, release))
    assert newest(db, rid)[:2] == (1, 1)
    churn(db, 3, 2000)
    db.execute(f"REFRESH MATERIALIZED VIEW {release}")
    assert newest(db, rid) == (2, 2, 2)
    assert after_first[1] != stored(db, release)


def test_a_plain_refresh_that_waited_records_its_wait_apart_from_its_build(db, connect, churned_stable_release):
    release, rid = churned_stable_release
    second = connect()
    first = connect()
    first.execute("BEGIN")
    first.execute(f"REFRESH MATERIALIZED VIEW {release}")
    waiting = threading.Thread(target=second.execute,
                               args=(f"REFRESH MATERIALIZED VIEW {release}",))
    waiting.start()
    wait_for_lock(db, second.info.backend_pid)
    time.sleep(3)
    first.execute("COMMIT")
    waiting.join()
    first.close()
    second.close()
    phases = db.execute("SELECT metrics->'timing'->'phases' FROM anon.releases "
                        "WHERE release_id = %s", (rid,)).fetchone()[0]
    # the release builds in well under a second alone; 3 s of it were a wait
    assert phases["build"] < 1.5 and phases["locks"] >= 2.5, phases
