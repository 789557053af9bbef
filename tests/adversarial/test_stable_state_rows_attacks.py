"""Adversarial: a stable release's state kept in several rows of anon.release_state (chunk 0, 1,
..., each a run of its people in ascending order of their hashes). A state whose rows are all
gone is refused (what the versions showed of each person is lost); a state that lost or gained
one row of people must be refused the same way, not read as a smaller or doubled state. Two
refreshes at once leave one state of whole rows; another custodian neither reads nor writes a
release's rows whatever their chunk."""
from __future__ import annotations

import threading

import psycopg
import pytest
from psycopg import sql

from tests.db.test_republication import churn
from tests.db.test_stable_state_rows import ROWS, TINY, stable_release

#: every column of anon.release_state but chunk, in order
COLUMNS = """SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute
             WHERE attrelid = 'anon.release_state'::regclass AND attnum > 0 AND NOT attisdropped
               AND attname NOT IN ('release_id', 'chunk')"""


def released(db, release: str):
    return db.execute(f"SELECT count(*), sum(hashtext(t::text)) FROM {release} t").fetchone()


def one_state(db, rid: int) -> tuple[int, bool]:
    """The people of the release's state rows, and whether they make one state: chunks 0..n-1,
    hashes ascending across rows, no one twice."""
    rows = db.execute(ROWS, (rid,)).fetchall()
    hashes = [bytes(r[4][i:i + 32]) for r in rows for i in range(0, len(r[4]), 32)]
    whole = [r[3] for r in rows] == list(range(len(rows))) and hashes == sorted(set(hashes))
    return len(hashes), whole


def tamper(db, rid: int, how: str) -> None:
    if how == "a row deleted":
        assert db.execute("DELETE FROM anon.release_state WHERE release_id = %s AND chunk = 1",
                          (rid,)).rowcount == 1
    else:              # a row copied after the last one, every row saying one more was written
        columns = db.execute(COLUMNS).fetchone()[0]
        db.execute("UPDATE anon.release_state SET chunks = chunks + 1 WHERE release_id = %s", (rid,))
        db.execute(f"INSERT INTO anon.release_state (release_id, chunk, {columns}) "
                   f"SELECT release_id, (SELECT max(chunk) + 1 FROM anon.release_state "
                   f"WHERE release_id = %s), {columns} FROM anon.release_state "
                   f"WHERE release_id = %s AND chunk = 0", (rid, rid))


@pytest.mark.parametrize("how", ["a row deleted", "a row duplicated"])
def test_a_state_that_lost_or_gained_a_row_is_refused_like_a_lost_state(db, schema, how):
    release, rid = stable_release(db, schema, TINY)
    assert one_state(db, rid)[1]
    tamper(db, rid, how)
    before = released(db, release)
    churn(db, 1, rows=40)
    with pytest.raises(psycopg.errors.DataException) as refused:
        db.execute("SELECT anon.refresh(%s)", (release,))
    assert "anon.release_state" in refused.value.diag.message_primary
    assert refused.value.diag.message_hint
    assert released(db, release) == before


def test_a_state_whose_rows_are_all_deleted_is_refused(db, schema):
    """What the row deleted above is measured against: the whole state deleted is refused."""
    release, rid = stable_release(db, schema, TINY)
    db.execute("DELETE FROM anon.release_state WHERE release_id = %s", (rid,))
    before = released(db, release)
    churn(db, 1, rows=40)
    with pytest.raises(psycopg.errors.DataException) as refused:
        db.execute("SELECT anon.refresh(%s)", (release,))
    assert "anon.release_state" in refused.value.diag.message_primary
    assert released(db, release) == before


@pytest.mark.parametrize("budgets", [(TINY, TINY), (TINY, "1GB")])
def test_two_refreshes_at_once_leave_one_state_of_whole_rows(db, schema, connect, budgets):
    """Two sessions refresh the release at the same moment, with the same budget or one in
    rows of a few people and one in a single row: both succeed one after the other, the state is
    one state of the newest version, and the next refresh reads it."""
    release, rid = stable_release(db, schema, TINY)
    churn(db, 1, rows=40)
    errors = {}

    def refresh(i):
        with connect() as conn:
            conn.execute(sql.SQL("SET search_path = {}, public").format(sql.Identifier(schema)))
            conn.execute("SELECT set_config('plpy_anon.build_memory', %s, false)", (budgets[i],))
            try:
                conn.execute("SELECT anon.refresh(%s)", (release,))
                errors[i] = None
            except psycopg.Error as error:
                errors[i] = error
    threads = [threading.Thread(target=refresh, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == {0: None, 1: None}
    people, whole = one_state(db, rid)
    # everyone ever in the table, once: the people in it now and the 40 who left (kept absent)
    assert whole and people == db.execute("SELECT count(*) FROM patients").fetchone()[0] + 40
    assert db.execute("SELECT array_agg(DISTINCT version) FROM anon.release_state "
                      "WHERE release_id = %s", (rid,)).fetchone()[0] == [2]
    churn(db, 2, rows=40)
    db.execute("SELECT anon.refresh(%s)", (release,))
    assert one_state(db, rid)[1]


def test_another_custodian_neither_reads_nor_adds_nor_renumbers_a_releases_rows(
        db, schema, connect, custodian):
    _, rid = stable_release(db, schema, TINY)
    columns = db.execute(COLUMNS).fetchone()[0]
    chunks = db.execute("SELECT count(*) FROM anon.release_state WHERE release_id = %s",
                        (rid,)).fetchone()[0]
    with custodian() as other:
        assert other.execute("SELECT count(*) FROM anon.release_state WHERE release_id = %s",
                             (rid,)).fetchone()[0] == 0
        assert other.execute("SELECT count(*) FROM anon.release_people WHERE release_id = %s",
                             (rid,)).fetchone()[0] == 0
        assert other.execute("UPDATE anon.release_state SET chunk = chunk + 1000 "
                             "WHERE release_id = %s", (rid,)).rowcount == 0
        assert other.execute("DELETE FROM anon.release_state WHERE release_id = %s",
                             (rid,)).rowcount == 0
        # a row forged for the release (its people emptied: a chunk after the last)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            other.execute(f"INSERT INTO anon.release_state (release_id, chunk, {columns}) "
                          f"VALUES (%s, 999, " + ", ".join(["NULL"] * len(columns.split(", ")))
                          + ")", (rid,))
    assert db.execute("SELECT count(*) FROM anon.release_state WHERE release_id = %s",
                      (rid,)).fetchone()[0] == chunks
