"""A stable release's record fingerprints (anon.release_state.records) are keyed by its salt: a
fingerprint under a public key let whoever read the state (a dump, say) and knew a person's
quasi-identifiers test each possible sensitive value. A state stored before, under the public
key, is keyed as its next refresh reads it, and that refresh publishes and remembers what a
refresh of the keyed state does."""
from __future__ import annotations

import hashlib

import numpy as np
import psycopg

from plpy_anon.core import text_hashes
from plpy_anon.db.republication import record_fingerprints, record_key
from tests.db.test_republication import churn
from tests.db.test_stable_state_rows import stable_release

#: what the refresh leaves of each person in the state
STATE = """SELECT persons, member_groups, records, record_entries, waiting_persons, waiting_records,
                  waiting_record_entries
           FROM anon.release_state WHERE release_id = %s ORDER BY chunk"""


def public_fingerprints(db, salt: str, persons: bytes) -> np.ndarray:
    """The fingerprints of the people's records under the public key (as stored before), from
    every row the table ever held (``everyone``), the people given by their hashes in order."""
    key = bytes.fromhex(salt)
    rows = {hashlib.sha256(key + str(i).encode()).digest(): r for i, *r in
            db.execute("SELECT id, age, sex, zip, dx FROM everyone").fetchall()}
    records = [rows[persons[at:at + 32]] for at in range(0, len(persons), 32)]
    return record_fingerprints([[str(r[c]) for r in records] for c in range(3)],
                               [r[3] for r in records])


def refreshed(db, release: str, rid: int, records=None, keyed=None):
    """The release's rows (sorted) and state after a refresh, rolled back; ``records``: the
    state's fingerprints first replaced by these (published people's, held back people's),
    marked ``keyed`` or not."""
    with db.transaction():
        if records is not None:
            db.execute("UPDATE anon.release_state SET records = %s, waiting_records = %s, "
                       "records_keyed = %s WHERE release_id = %s",
                       (records[0].astype("<u8").tobytes(), records[1].astype("<u8").tobytes(),
                        keyed, rid))
        db.execute("SELECT anon.refresh(%s)", (release,))
        out = (sorted(db.execute(f"SELECT * FROM {release}").fetchall(), key=repr),
               db.execute(STATE, (rid,)).fetchall())
        raise psycopg.Rollback()
    return out


def test_a_state_reader_tests_no_sensitive_value_against_the_record_fingerprints(db, schema):
    release, rid = stable_release(db, schema, None)
    db.execute("CREATE TABLE everyone AS SELECT * FROM patients")
    db.execute("SELECT anon.refresh(%s)", (release,))
    salt = db.execute("SELECT anon._release_salt(%s)", (rid,)).fetchone()[0]
    persons, records = db.execute("SELECT persons, records FROM anon.release_state "
                                  "WHERE release_id = %s", (rid,)).fetchone()
    stored = np.frombuffer(records, dtype="<u8")
    people = {hashlib.sha256(bytes.fromhex(salt) + str(i).encode()).digest(): r for i, *r in
              db.execute("SELECT id, age, sex, zip, dx FROM patients").fetchall()}
    values = sorted({r[3] for r in people.values()})
    found_public = found_keyed = 0
    for at, fingerprint in enumerate(stored.tolist()):
        age, sex, zip_code, dx = people[bytes(persons[32 * at:32 * at + 32])]
        guesses = record_fingerprints([[str(age)] * len(values), [sex] * len(values),
                                       [str(zip_code)] * len(values)], values)
        found_public += [values[j] for j in np.flatnonzero(guesses == fingerprint)] == [dx]
        keyed = text_hashes.keyed_fingerprints(guesses, record_key(salt))
        found_keyed += [values[j] for j in np.flatnonzero(keyed == fingerprint)] == [dx]
    assert found_public == 0, f"{found_public} of {stored.size} values read without the salt"
    assert found_keyed == stored.size == 600           # with the salt, every one


def test_a_state_stored_under_the_public_key_refreshes_as_the_keyed_one(db, schema):
    release, rid = stable_release(db, schema, None)
    db.execute("CREATE TABLE everyone AS SELECT * FROM patients")
    for version in (1, 2):
        churn(db, version, rows=40)
        db.execute("INSERT INTO everyone SELECT * FROM patients ON CONFLICT DO NOTHING")
        db.execute("SELECT anon.refresh(%s)", (release,))
    churn(db, 3, rows=40)
    db.execute("INSERT INTO everyone SELECT * FROM patients")
    salt = db.execute("SELECT anon._release_salt(%s)", (rid,)).fetchone()[0]
    state = db.execute(STATE, (rid,)).fetchall()
    assert len(state) == 1 and state[0][2] is not None
    public = (public_fingerprints(db, salt, bytes(state[0][0])),
              public_fingerprints(db, salt, bytes(state[0][4] or b"")))
    assert not np.array_equal(public[0], np.frombuffer(state[0][2], dtype="<u8"))
    keyed = refreshed(db, release, rid)
    assert refreshed(db, release, rid, public, keyed=False) == keyed
    # taken for keyed ones, the public fingerprints would have made everyone's record new
    assert refreshed(db, release, rid, public, keyed=True)[1] != keyed[1]
