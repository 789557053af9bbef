"""db.republication's state in rows of a bounded number of people: a state split into rows
(Stored.rows, each row's candidate sets and entries its own) and read back row by row
(State._of_row, then State._joined) gives every person, published or held back, the same group,
versions, candidates, entry and record entry (as the entry's version and group) -- on random
states and row sizes."""
from __future__ import annotations

import hashlib
import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.db.republication import State, Stored
from tests.unit.test_republication_lookup import int4_array_send


def array_send(text: str | None) -> bytes | None:
    """What STATE reads (array_send) of an int4[] REMEMBER passes as text."""
    if text is None:
        return None
    inner = text.strip("{}").strip()
    return int4_array_send([int(v) for v in inner.split(",")] if inner else [])


def read_back(row: dict) -> dict:
    """A row as STATE returns it: integer arrays in their binary form, candidate sets as text."""
    out = dict(row)
    for name in ("member_groups", "versions", "cohorts", "entries", "entry_versions",
                 "entry_groups", "waiting_entries", "record_entries", "waiting_record_entries",
                 "last_versions", "stay_owners", "stay_entries", "stay_last"):
        out[name] = array_send(row[name])
    return out


@st.composite
def stored_states(draw):
    published = draw(st.integers(0, 40))
    held = draw(st.integers(0, 12))
    ids = draw(st.lists(st.integers(0, 10**6), min_size=published + held,
                        max_size=published + held, unique=True))
    hashes = sorted(hashlib.sha256(str(i).encode()).digest() for i in ids)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    # persons and waiting each in ascending order, as the state stores them
    chosen = rng.permutation(published + held)
    persons = np.array(sorted(hashes[i] for i in chosen[:published]), dtype="S32")
    waiting = np.array(sorted(hashes[i] for i in chosen[published:]), dtype="S32")
    sets = np.array([json.dumps({"dx": [f"v{j}" for j in range(s, s + 2)]})
                     for s in range(draw(st.integers(1, 6)))], dtype=object)
    entries = draw(st.integers(1, 8))
    with_records = draw(st.booleans())

    def ints(n, top):
        return rng.integers(0, top, n).astype(np.int64)

    stored = Stored(persons, ints(published, 50), ints(published, 9) + 1,
                    ints(published, len(sets)), sets, ints(published, entries),
                    ints(entries, 12), ints(entries, 50), waiting, ints(held, entries), 12, 3,
                    *((rng.integers(0, 2**63, published).astype(np.uint64), ints(published, entries),
                       rng.integers(0, 2**63, held).astype(np.uint64), ints(held, entries))
                      if with_records else ()))
    if published and draw(st.booleans()):
        # people marked absent (their last version before the state's) and earlier stays
        stays = draw(st.integers(0, 10))
        stored.last = ints(published, 13)
        stored.stay_owners = np.sort(ints(stays, published))
        stored.stay_entries, stored.stay_last = ints(stays, entries), ints(stays, 12)
    return stored


@settings(max_examples=150, deadline=None)
@given(stored_states(), st.integers(1, 45))
def test_a_state_in_rows_reads_back_as_the_state_written(stored, per_row):
    rows = list(stored.rows(per_row))
    assert [chunk for chunk, _ in rows] == list(range(len(rows)))
    assert all(len(row["persons"]) <= 32 * per_row and len(row["waiting_persons"]) <= 32 * per_row
               for _, row in rows)
    parts = [State._of_row(read_back(row), 1) for _, row in rows]
    state = parts[0] if len(parts) == 1 else State._joined(parts, 1)
    assert state.persons.tolist() == stored.persons.tolist()
    assert state.waiting.tolist() == stored.waiting.tolist()
    assert state.groups.tolist() == stored.groups.tolist()
    assert state.versions.tolist() == stored.versions.tolist()
    assert [state.sets[c] for c in state.cohorts] == \
        [json.loads(stored.sets[c]) for c in stored.cohorts]
    assert (state.version, state.entries_since) == (stored.version, stored.since)

    def entry_pairs(store, at):
        return list(zip(store.entry_versions[at].tolist(), store.entry_groups[at].tolist()))

    assert entry_pairs(state, state.entries) == entry_pairs(stored, stored.entries)
    assert entry_pairs(state, state.waiting_entries) == entry_pairs(stored, stored.waiting_entries)
    # each person's last version, and the earlier stays of each, as (person, entry, last)
    assert (None if state.last is None else state.last.tolist()) == \
        (None if stored.last is None else stored.last.tolist())

    def stays(store):
        return sorted(zip(store.persons[store.stay_owners].tolist(),
                          entry_pairs(store, store.stay_entries), store.stay_last.tolist()))

    assert stays(state) == stays(stored)
    if stored.records is None:
        assert state.records is None and state.record_entries is None
        return
    assert state.records.tolist() == stored.records.tolist()
    assert state.waiting_records.tolist() == stored.waiting_records.tolist()
    assert entry_pairs(state, state.record_entries) == entry_pairs(stored, stored.record_entries)
    assert entry_pairs(state, state.waiting_record_entries) == \
        entry_pairs(stored, stored.waiting_record_entries)
    # and the lookups the refresh makes: each person's entry and, with their record unchanged,
    # their record entry
    everyone = np.concatenate([stored.persons, stored.waiting])
    assert entry_pairs(state, state.entries_of(everyone)) == \
        entry_pairs(stored, np.concatenate([stored.entries, stored.waiting_entries]))
    now = np.concatenate([stored.records, stored.waiting_records])
    assert entry_pairs(state, state.record_entries_of(everyone, now)) == \
        entry_pairs(stored, np.concatenate([stored.record_entries, stored.waiting_record_entries]))
