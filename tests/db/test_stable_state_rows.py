"""A stable release's state (anon.release_state) in rows of a bounded number of people: at most
``plpy_anon.build_memory`` / 64 bytes of people a row (at least 16 people), each row a whole
state of its people. Whatever the budget it is written and read with, every stayer keeps what
the released rows leave them across the versions (computed here from the released rows alone),
their versions counted across rows; rows that do not make one state are refused."""
from __future__ import annotations

import psycopg
import pytest

from tests.db.test_republication import QIS, candidates_left, churn, keep_version, patients_sql
from tests.helpers import class_sizes, create_release, distinct_sensitive_per_class

PATIENTS = patients_sql(600)
#: a budget whose rows hold the fewest people a row may (16)
TINY = "1kB"
#: per state row of the release: its people, its held back people, its candidate sets, its chunk
ROWS = """SELECT cardinality(member_groups), octet_length(waiting_persons) / 32,
                 jsonb_array_length(candidate_sets), chunk, persons
          FROM anon.release_state WHERE release_id = %s ORDER BY chunk"""
#: each person of the view by their id (the owner's salt hashes the ids as the release does)
PEOPLE = """SELECT t.id, p.versions, jsonb_array_length(p.candidates -> 'dx')
            FROM anon.release_people p JOIN patients t
              ON p.person = sha256(decode(anon._release_salt(p.release_id), 'hex')
                                   || convert_to(t.id::text, 'UTF8'))
            WHERE p.release_id = %s"""


def release_id(db, release: str) -> int:
    return db.execute("SELECT release_id FROM anon.releases WHERE release_schema || '.' || "
                      "release_name = %s", (release,)).fetchone()[0]


def stable_release(db, schema, budget: str | None) -> tuple[str, int]:
    db.execute(PATIENTS)
    if budget:
        db.execute("SELECT set_config('plpy_anon.build_memory', %s, false)", (budget,))
    release = create_release(db, "mondrian_view", schema, "patients", k=4, l=3,
                             quasi_identifiers=QIS, sensitive=["dx"], identifiers=["id"],
                             refresh_mode="stable")
    return release, release_id(db, release)


def test_the_state_is_kept_in_bounded_rows_and_follows_people_whatever_the_budget(db, schema):
    release, rid = stable_release(db, schema, TINY)
    keep_version(db, release, 0)
    # written in rows of 16, read and rewritten in one row, then in rows of 16 again
    for version, budget in enumerate(("1GB", TINY, TINY), start=1):
        db.execute("SELECT set_config('plpy_anon.build_memory', %s, false)", (budget,))
        churn(db, version, rows=40)
        db.execute("SELECT anon.refresh(%s)", (release,))
        keep_version(db, release, version)
        assert min(class_sizes(db, release, QIS)) >= 4
        assert min(distinct_sensitive_per_class(db, release, QIS, "dx")) >= 3
        rows = db.execute(ROWS, (rid,)).fetchall()
        published = sum(r[0] for r in rows)
        if budget == TINY:
            assert len(rows) >= published / 16 > 30
            assert all(r[0] <= 16 and r[1] <= 16 for r in rows)
            # each row's people follow the rows before in the order of their hashes
            hashes = [bytes(r[4][i:i + 32]) for r in rows for i in range(0, len(r[4]), 32)]
            assert hashes == sorted(hashes) and len(set(hashes)) == published
            # each row holds the candidate sets of its own people only: fewer than all of them
            assert max(r[2] for r in rows) < db.execute(
                "SELECT count(DISTINCT candidates) FROM anon.release_people WHERE release_id = %s",
                (rid,)).fetchone()[0]
        else:
            assert len(rows) == 1
        assert [r[3] for r in rows] == list(range(len(rows)))
        people = {i: (versions, candidates) for i, versions, candidates in db.execute(PEOPLE, (rid,))}
        # everyone ever in the table is in the state once: the people in it now, and the
        # leavers, kept absent
        assert len(people) == 600 and published == 600 + 40 * version
        # the stayers (ids 1..300): held by every version, their candidates what the released
        # rows of every version leave them
        left = candidates_left(db, "SELECT generate_series(1, 300)")
        assert {i: people[i][0] for i in range(1, 301)} == {i: version + 1 for i in range(1, 301)}
        assert {i: people[i][1] for i in range(1, 301)} == left
        assert min(left.values()) >= 3
    across = db.execute("SELECT verification -> 'across_versions' FROM anon.releases "
                        "WHERE release_id = %s", (rid,)).fetchone()[0]
    assert across["below_l"] == 0 and across["most_versions"] == 4


@pytest.mark.parametrize("tamper", [
    # one row of another version than the others
    "UPDATE anon.release_state SET version = version + 1 WHERE release_id = %s AND chunk = 1",
    # one row without entries (as a state stored before they were kept) among rows with them
    ("UPDATE anon.release_state SET entries = NULL, entry_versions = NULL, entry_groups = NULL, "
     "waiting_persons = NULL, waiting_entries = NULL, version = NULL, entries_since = NULL, "
     "records = NULL, record_entries = NULL, waiting_records = NULL, waiting_record_entries = NULL "
     "WHERE release_id = %s AND chunk = 2"),
])
def test_rows_that_do_not_make_one_state_are_refused(db, schema, tamper):
    release, rid = stable_release(db, schema, TINY)
    before = db.execute(f"SELECT count(*), sum(hashtext(t::text)) FROM {release} t").fetchone()
    db.execute(tamper, (rid,))
    churn(db, 1, rows=40)
    with pytest.raises(psycopg.errors.DataException) as refused:
        db.execute("SELECT anon.refresh(%s)", (release,))
    assert refused.value.sqlstate == "22000"
    assert "anon.release_state" in str(refused.value) and "different versions" in str(refused.value)
    assert db.execute(f"SELECT count(*), sum(hashtext(t::text)) FROM {release} t").fetchone() == before


def test_a_tiny_budget_keeps_the_state_to_at_most_1024_rows(db, schema):
    db.execute("CREATE TABLE many (id int PRIMARY KEY, age int, dx text); INSERT INTO many "
               "SELECT i, i % 90, 'dx' || i % 7 FROM generate_series(1, 20000) i")
    db.execute("SELECT set_config('plpy_anon.build_memory', %s, false)", (TINY,))
    release = create_release(db, "mondrian_view", schema, "many", k=10, l=2,
                             quasi_identifiers=["age"], sensitive=["dx"], identifiers=["id"],
                             refresh_mode="stable")
    rows = db.execute(ROWS, (release_id(db, release),)).fetchall()
    # 20 people a row (20,000 / 1,024, rounded up), not the budget's 16
    assert len(rows) == 1000 and {r[0] for r in rows} == {20}
