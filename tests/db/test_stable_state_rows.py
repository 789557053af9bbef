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
#: a budget just over the release's rows (600 x 4 columns: ~77 kB estimated; a smaller one refuses
#: the stable mode), whose state rows hold PER_ROW people
TINY = "80kB"
PER_ROW = 80 * 1024 // 64 // 60
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
    # written in rows of PER_ROW, read and rewritten in one row, then in rows of PER_ROW again
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
            assert len(rows) >= published / PER_ROW > 20
            assert all(r[0] <= PER_ROW and r[1] <= PER_ROW for r in rows)
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


def test_a_tiny_budget_writes_no_state_of_more_than_1024_rows(db, schema):
    """Any role may set a tiny budget: a stable release over it is created region by region,
    its state in rows of at least a 1,024th of its people (not rows of 16: 1,250 here), however
    many regions end a row of their own."""
    db.execute("CREATE TABLE many (id int PRIMARY KEY, age int, dx text); INSERT INTO many "
               "SELECT i, i % 90, 'dx' || i % 7 FROM generate_series(1, 20000) i")
    db.execute("SELECT set_config('plpy_anon.build_memory', '1kB', false)")
    try:
        rel = create_release(db, "mondrian_view", schema, "many", k=10, l=2,
                             quasi_identifiers=["age"], sensitive=["dx"], identifiers=["id"],
                             refresh_mode="stable")
    finally:
        db.execute("RESET plpy_anon.build_memory")
    rows, regions, people = db.execute("""
        SELECT count(*), count(DISTINCT s.region), sum(octet_length(s.persons) / 32)
        FROM anon.release_state s JOIN anon.releases r USING (release_id)
        WHERE format('%%I.%%I', r.release_schema, r.release_name) = %s""", (rel,)).fetchone()
    assert regions > 1 and people == 20000
    assert rows <= 1024


def test_the_arrays_aligned_with_people_are_stored_without_a_compression_attempt(db):
    # groups and entries in the order of the people's hashes do not compress; trying (pglz)
    # reads them whole at every refresh. The arrays that do compress are still compressed.
    storage = dict(db.execute(
        "SELECT attname, attstorage FROM pg_attribute WHERE attrelid = 'anon.release_state'::regclass "
        "AND attname IN ('persons', 'member_groups', 'entries', 'record_entries', 'versions', "
        "'last_versions', 'cohorts')").fetchall())
    assert {name for name, kind in storage.items() if kind == "e"} == {
        "persons", "member_groups", "entries", "record_entries"}
    assert {storage[name] for name in ("versions", "last_versions", "cohorts")} == {"x"}
