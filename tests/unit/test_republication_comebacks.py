"""db.republication's record of who is still in the table, and of people who leave and come back.

From each person's entry (the version that first held them and their group then) and each
stored version's step (the group of the next version holding each of its groups),
:func:`~plpy_anon.db.republication.alive_groups` says for every stored version which of its groups
hold someone in the table now who was in the table then -- checked against each version's
membership kept here, over random merges, leavers, joiners and people held back: for a state as
the check writes it, also one stored before entries were kept (followed from its newest version
on); and for a state written in rows and read back, where a person who leaves is marked absent
(never erased) and one who comes back (to the group holding theirs) is followed in every stored
version they were in the table, and in none they were not. core.republish publishes a person who
comes back only with every value their group holds now."""
from __future__ import annotations

import hashlib

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core import republish
from plpy_anon.core.privacy_models import Models
from plpy_anon.core.republish import Version, publish
from plpy_anon.db.republication import State, _with_absent, alive_groups, entries, packed
from tests.unit.test_state_rows import read_back


def person(i: int) -> bytes:
    return hashlib.sha256(str(i).encode()).digest()


class History:
    """A table's people and their groups, version after version: a quarter of the people leave,
    groups merge (into the smallest id), some who left come back to the group holding theirs
    (with ``comebacks``), new people join a group or a new one, some are held back. Keeps each
    stored version's row and its people's groups."""

    def __init__(self, rng, comebacks: bool):
        self.rng, self.comebacks = rng, comebacks
        self.table: dict = {}             # person -> group now
        self.absent: dict = {}            # person -> their group as they left
        self.parent: dict = {}            # every group id -> the group it merged into
        self.held: set = set()            # people the newest version held back
        self.rows: list = []              # per stored version: its row
        self.members: list = []           # per stored version: its people's groups
        self.next_person = self.next_group = 0

    def root(self, g):
        while self.parent.get(g, g) != g:
            g = self.parent[g]
        return g

    def change(self, first: bool) -> None:
        """The table's changes up to the next version (none before the first but joiners)."""
        rng, table = self.rng, self.table
        if not first:
            for gone in rng.choice(sorted(table), size=len(table) // 4, replace=False).tolist():
                self.absent[gone] = table.pop(gone)
            current = sorted(set(table.values()))
            for _ in range(int(rng.integers(0, 3))):
                if len(current) > 1:
                    a, b = (self.root(g) for g in rng.choice(current, size=2, replace=False).tolist())
                    self.parent[max(a, b)] = min(a, b)
            self.table = table = {p: self.root(g) for p, g in table.items()}
            self.rows[-1]["next_groups"] = [self.root(g) for g in self.rows[-1]["group_ids"]]
            if self.comebacks:
                for back in rng.choice(sorted(self.absent),
                                       size=min(len(self.absent), int(rng.integers(0, 4))),
                                       replace=False).tolist():
                    table[back] = self.root(self.absent.pop(back))
        for _ in range(int(rng.integers(3, 9))):
            groups = sorted(set(table.values()))
            if groups and rng.random() < 0.6:
                table[self.next_person] = int(rng.choice(groups))
            else:
                table[self.next_person] = self.next_group
                self.next_group += 1
            self.next_person += 1
        self.held = {p for p in table if rng.random() < 0.15}

    def check_alive(self, state: State, unfollowed=lambda row: False) -> None:
        """alive_groups over the stored versions against their membership: None for the
        versions ``unfollowed`` names."""
        found = alive_groups(self.rows, state, packed([person(p) for p in self.table]))
        for row, then, alive in zip(self.rows, self.members, found):
            if unfollowed(row):
                assert alive is None, row["version"]
            else:
                truth = np.isin(row["group_ids"], [g for p, g in then.items() if p in self.table])
                assert alive is not None and (alive == truth).all(), (row["version"], alive, truth)

    def record(self, version: int) -> None:
        held = sorted(self.held)
        self.rows.append({"version": version, "group_ids": sorted(set(self.table.values())),
                          "next_groups": None, "waiting": [person(p) for p in held],
                          "waiting_groups": [self.table[p] for p in held]})
        self.members.append(dict(self.table))


def empty_state() -> State:
    return State(np.empty(0, dtype="S32"), *(np.empty(0, dtype=np.int64),) * 3, [])


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


def written(state: State, table: dict, held: set, version: int, per_row: int) -> State:
    """The state the check leaves (db.republication.remember, no sensitive column), written in
    rows of ``per_row`` people and read back."""
    everyone = [p for p in table if p not in held] + [p for p in table if p in held]
    hashes = packed([person(p) for p in everyone])
    groups = np.array([table[p] for p in everyone], dtype=np.int64)
    found = entries(state, hashes, groups, None)
    assert found[0] == version
    _, since, entry, entry_versions, entry_groups = found
    n = len(table) - len(held)
    keys = (entry_versions << 32 | entry_groups)[entry]
    stored = _with_absent(state, hashes, n, groups[n:], version, since, keys, None, None,
                          hashes[:n], groups[:n], np.ones(n, dtype=np.int64),
                          np.zeros(n, dtype=np.int64), np.array(["{}"], dtype=object))
    parts = [State._of_row(read_back(row), 1) for _, row in stored.rows(per_row)]
    return parts[0] if len(parts) == 1 else State._joined(parts, 1)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_versions=st.integers(2, 9), migrated=st.integers(0, 8))
def test_the_groups_of_every_stored_version_that_hold_someone_now_follow_from_the_entries(
        seed, n_versions, migrated):
    history, state, since = History(np.random.default_rng(seed), comebacks=False), empty_state(), 0
    for version in range(n_versions):
        if version and version == migrated:
            # a state stored before entries were kept: no entries, no steps (the step of the
            # newest version is stored by the refresh)
            state.entries = state.version = state.entries_since = None
            for row in history.rows:
                row["next_groups"] = None
            since = version - 1
        history.change(first=not version)
        if version:      # the refresh: which groups of each stored version hold someone now
            history.check_alive(state, lambda row, v=version, s=since: v == migrated or row["version"] < s)
        history.record(version)
        table, held, rows = history.table, history.held, history.rows
        everyone = [p for p in table if p not in held] + [p for p in table if p in held]
        newest = None if state.entries is not None else (rows[-2] if len(rows) > 1 else None)
        found = entries(state, packed([person(p) for p in everyone]),
                        np.array([table[p] for p in everyone], dtype=np.int64), newest)
        assert found[0] == version and found[1] == since
        state = stored(table, held, found)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_versions=st.integers(2, 10), per_row=st.integers(1, 40))
def test_people_who_come_back_link_the_versions_they_were_in_and_no_other(seed, n_versions,
                                                                           per_row):
    history, state = History(np.random.default_rng(seed), comebacks=True), empty_state()
    ever: set = set()                 # everyone in the table so far
    shown: set = set()                # everyone published so far
    for version in range(n_versions):
        history.change(first=not version)
        if version:
            history.check_alive(state)
        history.record(version)
        table, held = history.table, history.held
        state = written(state, table, held, version, per_row)
        # nobody is erased: everyone ever in the table is in the state, those not in it now
        # marked absent, those never published with no versions
        ever.update(table)
        shown.update(p for p in table if p not in held)
        assert sorted(state.persons.tolist()) == sorted(person(p) for p in ever)
        assert sorted(state.persons[state.versions > 0].tolist()) == sorted(person(p) for p in shown)
        here = np.isin(state.persons, packed([person(p) for p in table]))
        assert (state.last[here] == version).all() and (state.last[~here] < version).all()


def test_a_person_who_comes_back_takes_no_counterfeit_row():
    """A class published {0, 1, 2, 2}; the person of one 2 has left; one person of 2 comes back
    (bound by candidates earlier versions left them, which only the class's values now keep)
    and one new person of 2 joins: the new one takes the counterfeit row, the one back waits."""
    history = [Version(np.array([0]), np.array([[1, 1, 2, 0, 0]]))]
    codes = np.array([0, 1, 2, 2, 2])
    previous = np.array([0, 0, 0, -1, -1])
    out = publish(np.zeros(5, dtype=np.int64), previous, codes, np.zeros((5, 1)), history,
                  np.array([0]), np.array([0]), 4, Models(l=2),
                  bound=np.array([False, False, False, True, False]))
    assert republish.CHOICES[out.choice[0]] == "hold"
    assert out.counts.tolist() == [[1, 1, 2, 0, 0]]
    assert out.published.tolist() == [True, True, True, False, True]


def test_a_person_who_comes_back_is_published_with_every_value_their_group_holds():
    """A class published {0, 1}; a stayer's value changed from 1 to 2 (published as 1 while the
    class does not advance); one person comes back with a 0 and one new person joins with a 3.
    Publishing the last multiset and the joiners ({0, 0, 1, 3}, what a class of new people
    would) leaves out 2, which the class holds now and which may be one of the few candidates
    earlier versions left the one back: the class holds instead, both wait."""
    history = [Version(np.array([0]), np.array([[1, 1, 0, 0, 0]]))]
    codes, previous = np.array([0, 2, 0, 3]), np.array([0, 0, -1, -1])

    def published(bound):
        return publish(np.zeros(4, dtype=np.int64), previous, codes, np.zeros((4, 1)), history,
                       np.array([0]), np.array([0]), 2, Models(l=2), bound=bound)

    assert republish.CHOICES[published(None).choice[0]] == "joiners"
    out = published(np.array([False, False, True, False]))
    assert republish.CHOICES[out.choice[0]] == "hold"
    assert out.counts.tolist() == [[1, 1, 0, 0, 0]]
    assert out.published.tolist() == [True, True, False, False]


def test_a_group_holding_a_person_back_shows_l_of_their_candidates_or_nothing():
    """A class published {0, 2, 3}; a person comes back with a 2, their candidates {0, 1}
    (values 0 hiv, 1 ok, 2 flu, 3 cold). Publishing them adds a lone 2 (a pin), so the class
    would hold its last multiset and hold them back; but they lie in its box all the same, and
    {0, 2, 3} keeps one of their candidates: with the candidates given, the version shows no
    rows instead."""
    history = [Version(np.array([0]), np.array([[1, 0, 1, 1, 0]]))]
    codes, previous = np.array([0, 2, 3, 2]), np.array([0, 0, 0, -1])
    bound = np.array([False, False, False, True])

    def published(candidates):
        return publish(np.zeros(4, dtype=np.int64), previous, codes, np.zeros((4, 1)), history,
                       np.array([0]), np.array([0]), 2, Models(l=2), bound=bound,
                       candidates=candidates)

    assert republish.CHOICES[published(None).choice[0]] == "hold"
    out = published(np.array([[True, True, False, False]]))
    assert republish.CHOICES[out.choice[0]] == "withdraw" and out.counts.sum() == 0
    # with candidates the class keeps two of, it holds as before
    assert republish.CHOICES[published(np.array([[True, False, True, False]])).choice[0]] == "hold"


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), l=st.integers(2, 3), groups=st.integers(1, 4))
def test_every_group_shows_l_candidates_of_each_person_back_in_it_or_nothing(seed, l, groups):
    """Random groups of a published version, each with stayers (some of whose values changed),
    leavers, joiners and people back with random candidates: whatever each group publishes (a
    merged group included), it shows at least l of the candidates of every person back in it,
    published or held back, unless the version shows no rows."""
    rng = np.random.default_rng(seed)
    n_values, k = 5, 2
    previous, codes, bound = [], [], []
    counts = np.zeros((groups, n_values + 1), dtype=np.int64)
    for g in range(groups):
        shown = rng.integers(0, n_values, size=int(rng.integers(k + 2, 9)))
        np.add.at(counts[g], shown, 1)
        stayers = shown[:int(rng.integers(k, shown.size + 1))].copy()
        changed = rng.random(stayers.size) < 0.2
        stayers[changed] = rng.integers(0, n_values, size=int(changed.sum()))
        others = rng.integers(0, n_values, size=int(rng.integers(0, 4)))
        previous += [g] * stayers.size + [-1] * others.size
        codes += stayers.tolist() + others.tolist()
        bound += [False] * stayers.size + (rng.random(others.size) < 0.5).tolist()
    previous, codes, bound = np.array(previous), np.array(codes), np.array(bound)
    candidates = rng.random((int(bound.sum()), n_values)) < 0.5
    ids = np.arange(groups)
    history = [Version(ids, counts)]
    # the rows' own groups (joiners and people back in their group then)
    labels = np.where(previous >= 0, previous, 0)
    labels[previous < 0] = np.minimum(np.cumsum(previous < 0)[previous < 0] % groups, groups - 1)
    points = rng.random((codes.size, 1))
    out = publish(labels, previous, codes, points, history, ids, ids, k, Models(l=l),
                  bound=bound, candidates=candidates)
    if (out.choice == republish.WITHDRAW).all():
        return
    shown = out.counts[np.searchsorted(out.ids, out.labels[bound])] > 0
    assert ((shown[:, :n_values] & candidates).sum(axis=1) >= l).all()
