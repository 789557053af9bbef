"""db.republication's state of the candidates of people held back: a person held back while a
released class held them has, from that version on, the candidates the check gave them (an
analyst who knew they were in the table intersected that class's values), kept through later
versions that hold them back in no class, absences and their publication; a person held back in
no class so far has none. Written in rows and read back, over random versions; a state written
before held back people had candidates (their set ``{}``) reads as none."""
from __future__ import annotations

import hashlib
import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.db.republication import State, _with_absent, entries, packed, with_candidates
from tests.unit.test_state_rows import read_back

EMPTY = State(np.empty(0, dtype="S32"), *(np.empty(0, dtype=np.int64),) * 3, [])


def person(i: int) -> bytes:
    return hashlib.sha256(str(i).encode()).digest()


def written(state: State, published: dict, held: dict, version: int, per_row: int) -> State:
    """The state the check leaves (db.republication.remember) for ``published`` (person ->
    their candidates' text) and ``held`` (person -> the text of the candidates this version
    gave them, None: no class held them), every person in group 0, in rows of ``per_row``."""
    everyone = list(published) + list(held)
    hashes = packed([person(p) for p in everyone])
    groups = np.zeros(len(everyone), dtype=np.int64)
    _, since, entry, entry_versions, entry_groups = entries(state, hashes, groups, None)
    n = len(published)
    keys = (entry_versions << 32 | entry_groups)[entry]
    texts = sorted({t for t in [*published.values(), *held.values()] if t is not None})
    position = {t: i for i, t in enumerate(texts)}
    at = state.find(hashes[:n])
    versions = np.where(at >= 0, state.versions[np.maximum(at, 0)], 0) + 1 if state.persons.size \
        else np.ones(n, dtype=np.int64)
    held_cohort = np.array([-1 if t is None else position[t] for t in held.values()], dtype=np.int64)
    stored = _with_absent(state, hashes, n, groups[n:], version, since, keys, None, None,
                          hashes[:n], groups[:n], versions,
                          np.array([position[t] for t in published.values()], dtype=np.int64),
                          np.array(texts, dtype=object), held_cohort)
    parts = [State._of_row(read_back(row), 1) for _, row in stored.rows(per_row)]
    return parts[0] if len(parts) == 1 else State._joined(parts, 1)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_versions=st.integers(1, 8), per_row=st.integers(1, 30))
def test_people_held_back_in_a_class_keep_their_candidates_from_then_on(seed, n_versions, per_row):
    rng = np.random.default_rng(seed)
    state, expected = EMPTY, {}          # person -> the text of their candidates (None: none)
    for version in range(n_versions):
        people = rng.choice(40, size=int(rng.integers(1, 25)), replace=False).tolist()
        published, held = {}, {}
        for p in people:
            text = json.dumps({"dx": sorted(rng.choice(["a", "b", "c", "d"], size=2,
                                                       replace=False).tolist())})
            kind = int(rng.integers(0, 3))
            if kind == 0:
                published[p] = expected[p] = text
            elif kind == 1:
                held[p] = expected[p] = text
            else:
                # held back in no class: keeps what they had
                held[p] = None
                expected.setdefault(p, None)
        state = written(state, published, held, version, per_row)
        at = state.find(packed([person(p) for p in expected]))
        assert (at >= 0).all()
        has = with_candidates(state, at)
        for p, i, yes in zip(expected, at.tolist(), has.tolist()):
            assert yes == (expected[p] is not None), (p, expected[p])
            if yes:
                assert state.sets[state.cohorts[i]] == json.loads(expected[p])


def test_a_state_written_before_held_back_people_had_candidates_gives_them_none():
    """A held back person stored with the empty set ``{}`` (as every held back person was, and
    is while no class holds them) has no candidates; one published before (versions 1) has."""
    held, shown = person(1), person(2)
    persons = packed(sorted([held, shown]))
    versions = np.array([0 if h == held else 1 for h in persons.tolist()])
    state = State(persons, np.zeros(2, dtype=np.int64), versions, 1 - versions,
                  [{"dx": ["a", "b"]}, {}])
    assert with_candidates(state, state.find(packed([held, shown]))).tolist() == [False, True]
