"""Adversarial: two sessions of a stable release's owner refresh it at once with plain
``REFRESH MATERIALIZED VIEW`` at READ COMMITTED. PostgreSQL takes the second REFRESH's snapshot
when its statement starts, before it waits for the first one's lock on the release: its run then
reads the state and stored versions as they were before the first refresh committed, and the
check that follows must not publish a version bound by that older state (the first refresh's
version, which analysts may have read, left out of both the state and the comparison). An
analyst whose read was queued before the second REFRESH reads the first one's version, then the
second's."""
from __future__ import annotations

import threading
import time

import psycopg
import pytest

from tests.adversarial.test_stable_refresh_concurrency import (
    QIS,
    churn,
    keep,
    make_table,
    pins,
    release_id,
    stable,
)
from tests.helpers import keep_released_version


def newest(db, rid: int) -> tuple:
    """(the state's version, the newest stored version, the earlier versions the last refresh's
    check compared against)."""
    return db.execute(
        "SELECT (SELECT max(version) FROM anon.release_state WHERE release_id = %(r)s), "
        "(SELECT max(version) FROM anon.release_versions WHERE release_id = %(r)s), "
        "(SELECT (verification->'across_versions'->>'versions_compared')::int "
        " FROM anon.releases WHERE release_id = %(r)s)", {"r": rid}).fetchone()


def wait_for_lock(db, pid: int) -> None:
    for _ in range(200):
        if db.execute("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s",
                      (pid,)).fetchone()[0]:
            return
        time.sleep(0.05)
    raise AssertionError("the second REFRESH never waited for the first one's lock")


def test_a_plain_refresh_waiting_for_another_is_checked_against_the_version_it_published(
        db, connect, churned_stable_release):
    release, rid = churned_stable_release
    db.execute(f"REFRESH MATERIALIZED VIEW {release}")
    # one refresh after another: the state is the newest version's, checked against those before
    assert newest(db, rid) == (1, 1, 1)
    churn(db, 1, 2000)
    first, second = connect(), connect()
    first.execute("BEGIN")
    first.execute(f"REFRESH MATERIALIZED VIEW {release}")
    churn(db, 2, 2000)
    outcome = {}

    def refresh_second():
        try:
            second.execute(f"REFRESH MATERIALIZED VIEW {release}")
            outcome["second"] = "published"
        except psycopg.Error as refused:
            outcome["second"] = refused.diag.sqlstate
    waiting = threading.Thread(target=refresh_second)
    waiting.start()
    wait_for_lock(db, second.info.backend_pid)
    first.execute("COMMIT")
    waiting.join()
    first.close()
    second.close()
    # run again on what the first left (READ COMMITTED): published after the first, its state
    # following version 3, checked against versions 0 to 2
    assert outcome["second"] == "published", outcome
    assert newest(db, rid) == (3, 3, 3), outcome


def test_a_refresh_at_repeatable_read_after_another_committed_is_refused_with_a_hint_to_retry(
        db, connect, churned_stable_release):
    """The second REFRESH's transaction at REPEATABLE READ, its snapshot taken before the first
    committed: no statement of it can read the first one's state, so it is refused as a
    serialization failure that names the release and says to retry; the first one's version
    and state stay."""
    release, rid = churned_stable_release
    first, second = connect(), connect()
    second.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    second.execute("SELECT 1")             # the snapshot, before the first refresh commits
    first.execute(f"REFRESH MATERIALIZED VIEW {release}")
    with pytest.raises(psycopg.errors.SerializationFailure) as refused:
        second.execute(f"REFRESH MATERIALIZED VIEW {release}")
    second.close()
    first.close()
    assert release.split(".")[-1] in refused.value.diag.message_primary
    assert "again" in (refused.value.diag.message_hint or "")
    assert newest(db, rid) == (1, 1, 1)


def joiners(db, first: int, n: int, seed: int) -> None:
    db.execute("INSERT INTO pt SELECT g, 20 + (g * %s) %% 50, (g * 17 + %s) %% 90, "
               "(ARRAY['flu','hiv','cold','ok','gout'])[1 + (g * 3 + %s) %% 5] "
               "FROM generate_series(%s::int, %s::int) g", (seed, seed, seed, first, first + n - 1))


def refused_or_done(conn, statement: str) -> None:
    """Run ``statement``; a serialization failure (the refresh refused) is an outcome too."""
    try:
        conn.execute(statement)
    except psycopg.errors.SerializationFailure:
        pass


def pinned_over_two_refreshes(db, schema: str, connect, at_once: bool, layout: str = "flat",
                              isolation: str = "READ COMMITTED", first_by: str = "plain") -> dict:
    """An analyst keeps version 0, the first refresh's version (read by a session queued behind
    it) and the second's; a fifth of the people join and a tenth leave before each refresh.
    ``at_once``: the second REFRESH starts while the first is not committed (``isolation``: the
    second's; ``first_by``: "plain", or "anon.refresh" for the first refresh); ``layout``: the
    release's (a compact one's storage is what is refreshed). Returns the people pinned (by
    difference or intersection) with the value the analyst reads, and their own."""
    make_table(db, 1000)
    release = stable(db, schema, layout=layout)
    target = release if layout == "flat" else db.execute(
        "SELECT format('%%I.%%I', release_schema, parameters->>'storage') FROM anon.releases "
        "WHERE release_id = %s", (release_id(db, release),)).fetchone()[0]
    kept: list = []
    keep(db, release, kept)
    joiners(db, 10000, 200, 7)
    db.execute("DELETE FROM pt WHERE id % 5 = 1 AND id < 1000")
    db.execute("CREATE TABLE seen_first AS SELECT id::text AS pk, age, zip, dx FROM pt")
    first, second, analyst = connect(), connect(), connect()
    first.execute("BEGIN")
    if first_by == "plain":
        first.execute(f"REFRESH MATERIALIZED VIEW {target}")
    else:
        first.execute("SELECT anon.refresh(%s)", (release,))
    second.execute(f"SET default_transaction_isolation = '{isolation.lower()}'")
    if not at_once:
        first.execute("COMMIT")
    joiners(db, 20000, 200, 10)
    db.execute("DELETE FROM pt WHERE id % 5 = 2 AND id < 1000")
    db.execute("CREATE TABLE seen_second AS SELECT id::text AS pk, age, zip, dx FROM pt")
    reads = [threading.Thread(target=analyst.execute,
                              args=(f"CREATE TABLE {schema}.first_version AS SELECT * FROM {release}",)),
             threading.Thread(target=refused_or_done, args=(second, f"REFRESH MATERIALIZED VIEW {target}"))]
    for thread, conn in zip(reads, (analyst, second)):
        thread.start()
        if at_once:
            wait_for_lock(db, conn.info.backend_pid)
        else:
            thread.join()
    if at_once:
        first.execute("COMMIT")
    for thread in reads:
        thread.join()
    for conn in (first, second, analyst):
        conn.close()
    kept.append(keep_released_version(db, f"{schema}.first_version", "seen_first", "pk", QIS, "dx"))
    kept.append(keep_released_version(db, release, "seen_second", "pk", QIS, "dx"))
    by_difference, by_intersection = pins(kept)
    truth = dict(db.execute("SELECT pk, dx FROM seen_first UNION SELECT pk, dx FROM seen_second")
                 .fetchall())
    return {p: (v, truth[p]) for p, v in {**by_difference, **by_intersection}.items()}


def test_two_plain_refreshes_in_turn_pin_no_one(db, schema, connect):
    """The control: the same changes and refreshes, the second REFRESH after the first commits."""
    assert pinned_over_two_refreshes(db, schema, connect, at_once=False) == {}


def test_a_plain_refresh_at_repeatable_read_waiting_for_another_pins_no_one(db, schema, connect):
    """The second REFRESH at REPEATABLE READ: refused (40001) or checked, never pinning."""
    assert pinned_over_two_refreshes(db, schema, connect, at_once=True,
                                     isolation="REPEATABLE READ") == {}


@pytest.mark.parametrize("layout,first_by", [("flat", "plain"), ("compact", "plain"),
                                             ("flat", "anon.refresh")])
def test_a_plain_refresh_at_once_with_another_pins_no_one(db, schema, connect, layout, first_by):
    """The first refresh a plain REFRESH, or anon.refresh (pg_cron's), the second a plain one."""
    pinned = pinned_over_two_refreshes(db, schema, connect, at_once=True, layout=layout,
                                       first_by=first_by)
    right = sum(value == own for value, own in pinned.values())
    assert pinned == {}, f"{len(pinned)} people pinned, {right} to their own value"


