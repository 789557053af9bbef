"""db.republication's record of who is still in the table: from each person's entry (the version
that first held them and their group then) and each stored version's step (the group of the
next version holding each of its groups), :func:`~plpy_anon.db.republication.alive_groups` says
for every stored version which of its groups hold someone in the table now -- checked against
each version's membership kept here, over random merges, leavers, joiners and people held back,
and for a state stored before entries were kept (followed from its newest version on)."""
from __future__ import annotations

import hashlib

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.db.republication import State, alive_groups, entries, packed


def person(i: int) -> bytes:
    return hashlib.sha256(str(i).encode()).digest()


def stored(everyone: dict, held: set, found) -> State:
    """The state the check writes (db.republication.remember): published people and held back
    people apart, each sorted, with their entries (``found``: entries()'s answer, aligned with
    published people then held back ones, in the order of ``everyone``)."""
    version, since, entry, entry_versions, entry_groups = found
    shown = [p for p in everyone if p not in held]
    waiting = [p for p in everyone if p in held]
    position = {p: i for i, p in enumerate(shown + waiting)}
    persons = packed([person(p) for p in shown])
    order = np.argsort(persons, kind="stable")
    held_hashes = packed([person(p) for p in waiting])
    held_order = np.argsort(held_hashes, kind="stable")
    return State(persons[order], np.array([everyone[p] for p in shown], dtype=np.int64)[order],
                 np.zeros(len(shown), dtype=np.int64), np.zeros(len(shown), dtype=np.int64), [],
                 entry[[position[p] for p in shown]][order], entry_versions, entry_groups,
                 held_hashes[held_order], entry[[position[p] for p in waiting]][held_order],
                 version, since)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_versions=st.integers(2, 9), migrated=st.integers(0, 8))
def test_the_groups_of_every_stored_version_that_hold_someone_now_follow_from_the_entries(
        seed, n_versions, migrated):
    rng = np.random.default_rng(seed)
    table: dict = {}                  # person -> group now
    held: set = set()                 # people the newest version held back
    rows, members = [], []            # per stored version: its row, its people's groups
    state = State(np.empty(0, dtype="S32"), *(np.empty(0, dtype=np.int64),) * 3, [])
    next_person = next_group = 0
    since = 0
    for version in range(n_versions):
        if version and version == migrated:
            # a state stored before entries were kept: no entries, no steps (the step of the
            # newest version is stored by the refresh)
            state.entries = state.version = state.entries_since = None
            for row in rows:
                row["next_groups"] = None
            since = version - 1
        if version:
            for gone in rng.choice(sorted(table), size=len(table) // 4, replace=False).tolist():
                del table[gone]
            # groups only merge (into the smallest id)
            current = sorted(set(table.values()))
            parent = {g: g for g in current}
            for _ in range(int(rng.integers(0, 3))):
                if len(current) > 1:
                    a, b = rng.choice(current, size=2, replace=False).tolist()
                    while parent[a] != a:
                        a = parent[a]
                    while parent[b] != b:
                        b = parent[b]
                    parent[max(a, b)] = min(a, b)

            def root(g, parent=parent):
                while parent.get(g, g) != g:
                    g = parent[g]
                return g
            table = {p: root(g) for p, g in table.items()}
            rows[-1]["next_groups"] = [root(g) for g in rows[-1]["group_ids"]]
        for _ in range(int(rng.integers(3, 9))):
            groups = sorted(set(table.values()))
            if groups and rng.random() < 0.6:
                table[next_person] = int(rng.choice(groups))
            else:
                table[next_person] = next_group
                next_group += 1
            next_person += 1
        held = {p for p in table if rng.random() < 0.15}
        if version:
            # the refresh: which groups of each stored version hold someone in the table now
            found = alive_groups(rows, state, packed([person(p) for p in table]))
            for row, then, alive in zip(rows, members, found):
                if version == migrated or row["version"] < since:
                    assert alive is None
                else:
                    truth = np.isin(row["group_ids"], [g for p, g in then.items() if p in table])
                    assert alive is not None and (alive == truth).all()
        rows.append({"version": version, "group_ids": sorted(set(table.values())),
                     "next_groups": None, "waiting": [person(p) for p in sorted(held)],
                     "waiting_groups": [table[p] for p in sorted(held)]})
        members.append(dict(table))
        everyone = [p for p in table if p not in held] + [p for p in table if p in held]
        newest = None if state.entries is not None else (rows[-2] if len(rows) > 1 else None)
        found = entries(state, packed([person(p) for p in everyone]),
                        np.array([table[p] for p in everyone], dtype=np.int64), newest)
        assert found[0] == version and found[1] == since
        state = stored(table, held, found)
