"""core.republication.stable_partition: versions of a table with churn, each person's candidate
values intersected across every version as an analyst who keeps them would (each version's
candidates: the values of the person's class). Checked from the labels alone."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core.republication import CannotKeepCandidates, stable_partition


def candidate_sets(rows_values, labels):
    """Per row, the set of values its class holds."""
    by_class = {}
    for label, value in zip(labels.tolist(), rows_values.tolist()):
        by_class.setdefault(label, set()).add(value)
    return [by_class[label] for label in labels.tolist()]


def one_version(people, state, k, l, n_values):
    """Labels for ``people`` (id -> (point, value)) given ``state`` (id -> (group, candidates))."""
    ids = sorted(people)
    points = np.array([people[i][0] for i in ids], dtype=float)
    values = np.array([people[i][1] for i in ids])
    groups = np.array([state[i][0] if i in state else -1 for i in ids])
    # a first version: everyone a group of their own, merged into valid classes
    if (groups < 0).all():
        groups = np.arange(len(ids))
    sets = sorted({frozenset(state[i][1]) for i in ids if i in state}, key=sorted)
    index = {s: c for c, s in enumerate(sets)}
    cohorts = np.array([index[frozenset(state[i][1])] if i in state else -1 for i in ids])
    matrix = np.zeros((len(sets), n_values), dtype=bool)
    for s, c in index.items():
        matrix[c, list(s)] = True
    labels = stable_partition(groups, points, values[:, None], cohorts, [matrix], k, l)
    return ids, values, labels


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(2, 6), l=st.integers(1, 4),
       n_values=st.integers(4, 12), refreshes=st.integers(1, 8))
def test_every_person_keeps_l_candidates_across_versions(seed, k, l, n_values, refreshes):
    rng = np.random.default_rng(seed)
    next_id = 0
    people = {}
    for _ in range(300):
        people[next_id] = (rng.integers(0, 50, 2), int(rng.integers(0, n_values)))
        next_id += 1
    state = {}                      # id -> (group, candidates) after the last version
    away = {}                       # people who left, who may come back
    previous = None
    for version in range(refreshes + 1):
        if version:
            for gone in rng.choice(sorted(people), size=15, replace=False).tolist():
                away[gone] = people.pop(gone)   # state is kept: a person may come back
            for back in rng.choice(sorted(away), size=min(5, len(away)), replace=False).tolist():
                people[back] = away.pop(back)
            for _ in range(10):
                people[next_id] = (rng.integers(0, 50, 2), int(rng.integers(0, n_values)))
                next_id += 1
        ids, values, labels = one_version(people, state, k, l, n_values)
        assert np.unique(labels, return_counts=True)[1].min() >= k
        held = candidate_sets(values, labels)
        assert min(len(s) for s in held) >= l
        if previous is not None:
            # groups only merge: two people of the last version together before are together now
            together = {}
            for i, label in zip(ids, labels.tolist()):
                if i in previous:
                    together.setdefault(previous[i], set()).add(label)
            assert all(len(labels_now) == 1 for labels_now in together.values())
        for i, label, values_now in zip(ids, labels.tolist(), held):
            # people back from an absence are held to what the versions they were in showed
            candidates = values_now if i not in state else state[i][1] & values_now
            assert people[i][1] in candidates
            assert len(candidates) >= l
            state[i] = (label, candidates)
        previous = {i: state[i][0] for i in ids}


def test_a_group_below_k_after_deletions_merges_with_its_nearest():
    groups = np.array([0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2])
    points = np.array([[0], [0], [1], [10], [11], [12], [12], [50], [51], [52], [53]], dtype=float)
    labels = stable_partition(groups, points, None, np.full(11, -1), [], k=4, l=None)
    assert labels[0] == labels[3] != labels[7]
    assert np.unique(labels, return_counts=True)[1].min() >= 4


def test_a_value_gone_from_the_whole_table_is_refused():
    # the cohort's candidates were {0, 1}; nobody holds 1 any more
    groups = np.array([0, 0, 1, 1])
    values = np.array([[0], [0], [0], [2]])
    matrix = np.array([[True, True, False]])
    with pytest.raises(CannotKeepCandidates):
        stable_partition(groups, np.zeros((4, 1)), values, np.array([0, 0, -1, -1]), [matrix], k=2, l=2)


def test_newcomers_join_the_nearest_group():
    groups = np.array([0, 0, 1, 1, -1, -1])
    points = np.array([[0], [1], [100], [101], [2], [99]], dtype=float)
    labels = stable_partition(groups, points, None, np.full(6, -1), [], k=2, l=None)
    assert labels[4] == labels[0] and labels[5] == labels[2] and labels[0] != labels[2]
