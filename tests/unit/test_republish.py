"""core.republish: random churn sequences, each version's published multisets checked against
every earlier version's, for every pair, as an analyst who knows who joined and left each class
subtracts them (groups linked across versions by the test's own union of the groups each
person was published in)."""
from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core import republish
from plpy_anon.core.encoding import encode_numeric
from plpy_anon.core.mondrian import Mondrian
from plpy_anon.core.privacy_models import Models
from plpy_anon.core.republication import CannotKeepCandidates, stable_partition
from plpy_anon.core.republish import Version, publish


def safe(models: Models, change: Counter) -> bool:
    """A change (values added or removed) is none, or meets the l model (NULL: no value)."""
    if not change:
        return True
    counts = np.array([[c for v, c in sorted(change.items()) if v is not None] or [0]])
    return bool(models.satisfied(counts)[0])


class Links:
    """The test's own union of group ids: a person published in group a, then in b, links them."""

    def __init__(self):
        self.parent = {}

    def find(self, x):
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            x = self.parent[x]
        return x

    def union(self, a, b):
        self.parent[self.find(a)] = self.find(b)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(2, 5), l=st.integers(2, 3),
       model=st.sampled_from(["distinct", "entropy"]), refreshes=st.integers(2, 7),
       churn=st.integers(1, 12))
def test_no_pair_of_versions_pins_anyone_by_difference(seed, k, l, model, refreshes, churn):
    rng = np.random.default_rng(seed)
    models = Models(l=l, l_diversity=model)
    n_values = 6
    people = {i: (rng.integers(0, 40, 2).astype(float), int(rng.integers(0, n_values))) for i in range(150)}
    next_id = 150
    ids = sorted(people)
    points = np.array([people[i][0] for i in ids])
    values = np.array([people[i][1] for i in ids])
    first = Mondrian(k=k, l=l, l_diversity=model).fit(
        [encode_numeric(f"q{d}", points[:, d], np.zeros(len(ids), dtype=bool)) for d in range(2)],
        values[:, None])
    labels = np.asarray(first.labels_, dtype=np.int64)
    state = {i: int(g) for i, g in zip(ids, labels)}      # published people -> their group
    published = [{int(g): Counter(values[labels == g].tolist()) for g in np.unique(labels)}]
    history = [Version(np.unique(labels), np.array([[c[v] for v in range(n_values)] + [0]
                                                   for c in published[0].values()]))]
    lineage = np.unique(labels)
    roots = lineage.copy()
    links = Links()
    for _ in range(refreshes):
        for gone in rng.choice(sorted(people), size=churn, replace=False).tolist():
            del people[gone]
            state.pop(gone, None)
        for _ in range(churn):
            people[next_id] = (rng.integers(0, 40, 2).astype(float), int(rng.integers(0, n_values)))
            next_id += 1
        for changed in rng.choice(sorted(people), size=max(1, churn // 3), replace=False).tolist():
            people[changed] = (people[changed][0], int(rng.integers(0, n_values)))
        ids = sorted(people)
        points = np.array([people[i][0] for i in ids]) / 40
        values = np.array([people[i][1] for i in ids])
        previous = np.array([state.get(i, -1) for i in ids])
        try:
            grouped = stable_partition(previous, points, values[:, None], np.full(len(ids), -1), [],
                                       k, l, models)
            out = publish(grouped, previous, values, points, history, lineage, roots, k, models,
                          (points * 40).astype(np.int64), np.array([True, True]))
        except CannotKeepCandidates:
            return                       # refused: the published version stays
        for i, label, before in zip(ids, out.labels.tolist(), previous.tolist()):
            if before >= 0:
                links.union(before, label)
        # groups an analyst could tell apart: no two released with the same ranges; groups whose
        # ranges meet on every QI (the test's own boxes) could each hold a person there
        keys = {}
        for label, point in zip(out.labels.tolist(), (points * 40).astype(int).tolist()):
            low, high = keys.setdefault(label, (list(point), list(point)))
            keys[label] = ([min(a, b) for a, b in zip(low, point)], [max(a, b) for a, b in zip(high, point)])
        assert len({str(v) for v in keys.values()}) == len(keys)
        overlaps = [(g, h) for g, a in keys.items() for h, b in keys.items()
                    if g < h and all(a[0][d] <= b[1][d] and b[0][d] <= a[1][d] for d in range(2))]
        # k holds on real published members; each class meets the l model
        real = Counter(out.labels[out.published].tolist())
        assert all(real[g] >= k for g, row in zip(out.ids.tolist(), out.counts) if row.sum())
        version = {int(g): Counter({v: int(c) for v, c in enumerate(row) if c}) for g, row in
                   zip(out.ids, out.counts)}
        assert all(safe(models, c) for c in version.values())
        # every pair (earlier version, now): added and removed values meet l or are none, in
        # each group followed by its people and in each union of groups whose boxes overlap now
        unions = Links()
        for g, h in overlaps:
            unions.union(links.find(g), links.find(h))
        for earlier in published:
            for find in (links.find, lambda g, unions=unions: unions.find(links.find(g))):
                components = {}
                for g, c in earlier.items():
                    components.setdefault(find(g), [Counter(), Counter()])[0].update(c)
                for g, c in version.items():
                    components.setdefault(find(g), [Counter(), Counter()])[1].update(c)
                for before, after in components.values():
                    assert safe(models, after - before) and safe(models, before - after)
        published.append(version)
        history.append(Version(out.ids, out.counts))
        lineage, roots = out.lineage, out.roots
        state = {i: int(g) for i, g, p in zip(ids, out.labels.tolist(), out.published.tolist()) if p}


def test_one_joiner_is_held_back_until_the_class_can_take_l_values_at_once():
    # one class of 6 published; one person joins with a new value
    history = [Version(np.array([0]), np.array([[2, 2, 2, 0]]))]
    codes = np.array([0, 0, 1, 1, 2, 2, 2])
    previous = np.array([0, 0, 0, 0, 0, 0, -1])
    out = publish(np.zeros(7, dtype=np.int64), previous, codes, np.zeros((7, 1)), history,
                  np.array([0]), np.array([0]), 5, Models(l=2))
    assert out.choice.tolist() == [republish.CHOICES.index("hold")] and out.counts.tolist() == [[2, 2, 2, 0]]
    assert out.held_back == 1 and out.counterfeit == 0


def test_a_version_no_merge_keeps_safe_publishes_nothing_and_keeps_its_people():
    # a class of {0, 1}: the person of 1 left, a joiner of 0 came: publishing the joiner pins
    # them (a lone added 0), and no class of two people shows two values without them
    history = [Version(np.array([0]), np.array([[1, 1, 0]]))]
    codes = np.array([0, 0])
    previous = np.array([0, -1])
    out = publish(np.zeros(2, dtype=np.int64), previous, codes, np.zeros((2, 1)), history,
                  np.array([0]), np.array([0]), 2, Models(l=2))
    assert republish.CHOICES[out.choice[0]] == "withdraw" and out.counts.tolist() == [[0, 0, 0]]
    # the stayer stays published (their group's history goes on), the joiner waits
    assert out.published.tolist() == [True, False] and out.roots.tolist() == [0]
    assert republish.unsafe_pairs(Models(l=2), out.ids, out.counts, history, lambda ids: ids).tolist() == [0]


def test_after_a_version_of_no_rows_a_group_can_hold_what_it_showed_before():
    # {0, 1, 2}, then no rows; the person of 2 has left: their value leaving alone would pin
    # them, so the group shows {0, 1, 2} again (the 2 a counterfeit), not nothing for good
    history = [Version(np.array([0]), np.array([[1, 1, 1, 0]])),
               Version(np.array([0]), np.zeros((1, 4), dtype=np.int64))]
    out = publish(np.zeros(2, dtype=np.int64), np.array([0, 0]), np.array([0, 1]), np.zeros((2, 1)),
                  history, np.array([0]), np.array([0]), 2, Models(l=2))
    assert republish.CHOICES[out.choice[0]] == "hold" and out.counts.tolist() == [[1, 1, 1, 0]]
    assert out.counterfeit == 1


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), l=st.integers(2, 3),
       model=st.sampled_from(["distinct", "entropy", "recursive"]), versions=st.integers(1, 4))
def test_a_version_of_no_rows_pins_no_one_against_any_earlier_version(seed, l, model, versions):
    """Whatever parts an analyst forms (groups merged since, boxes linked in either version,
    earlier groups followed or cut), a part only loses whole classes that each met the l model,
    and their sum meets it too."""
    rng = np.random.default_rng(seed)
    models = Models(l=l, l_diversity=model, c=2.0)
    n_values, history = 5, []
    for _ in range(versions):
        n = int(rng.integers(1, 8))
        ids = np.sort(rng.choice(40, size=n, replace=False))
        rows = []
        while len(rows) < n:
            row = np.append(rng.integers(0, 4, n_values), rng.integers(0, 2))
            if models.satisfied(row[None, :-1])[0]:
                rows.append(row)
        linked = np.minimum(ids, ids[rng.integers(0, n, n)])
        history.append(Version(ids, np.array(rows), linked, linked, rng.integers(0, 2, n).astype(bool),
                               rng.integers(0, 2, n).astype(bool)))
    now = np.sort(rng.choice(40, size=int(rng.integers(1, 6)), replace=False))
    merged = dict(zip(range(40), now[rng.integers(0, now.size, 40)].tolist()))

    def roots_of(group_ids):
        return np.array([merged[g] for g in np.asarray(group_ids).tolist()], dtype=np.int64)

    zeros = np.zeros((now.size, n_values + 1), dtype=np.int64)
    linked_now = np.minimum(now, now[rng.integers(0, now.size, now.size)])
    assert republish.unsafe_pairs(models, now, zeros, history, roots_of).sum() == 0
    assert republish.unsafe_unions(models, now, zeros, linked_now, history, roots_of,
                                   people_linked=linked_now).sum() == 0


def test_groups_released_with_the_same_ranges_are_one_class():
    history = [Version(np.array([0, 1]), np.array([[1, 1, 0, 0], [1, 1, 0, 0]]))]
    codes = np.array([0, 1, 0, 1])
    previous = np.array([0, 0, 1, 1])
    qi = np.array([[1], [5], [1], [5]])
    out = publish(np.array([0, 0, 1, 1]), previous, codes, qi.astype(float), history,
                  np.array([0, 1]), np.array([0, 1]), 2, Models(l=2), qi, np.array([True]))
    assert out.ids.tolist() == [0] and out.counts.tolist() == [[2, 2, 0, 0]]


def test_the_check_counts_a_pair_that_pins_a_joiner():
    # a class of {0, 0, 1, 1, 2} gaining one value 3: the added value is the joiner's
    history = [Version(np.array([0]), np.array([[2, 2, 1, 0, 0]]))]
    models = Models(l=2)
    same = np.array([[2, 2, 1, 0, 0]])
    joined = np.array([[2, 2, 1, 1, 0]])
    gained_two = np.array([[2, 2, 1, 1, 0]]) + np.array([[1, 0, 0, 0, 0]])

    def identity(ids):
        return ids

    assert republish.unsafe_pairs(models, np.array([0]), same, history, identity).tolist() == [0]
    assert republish.unsafe_pairs(models, np.array([0]), joined, history, identity).tolist() == [1]
    assert republish.unsafe_pairs(models, np.array([0]), gained_two, history, identity).tolist() == [0]
    # a group gone: its values all leave at once, which the class met l with
    assert republish.unsafe_pairs(models, np.array([], dtype=np.int64), np.zeros((0, 5), dtype=np.int64),
                                  history, identity).tolist() == [0]


def test_counterfeits_are_retired_once_their_values_can_leave_together():
    # a class published {0, 1, 2, 3, 3, 4, 4}; the people of 0, 1 and 2 have left: their
    # counterfeit values may leave together (l = 2); the one joiner (value 3) stays held back
    history = [Version(np.array([0]), np.array([[1, 1, 1, 2, 2, 0, 0]]))]
    codes = np.array([3, 3, 4, 4, 3])
    previous = np.array([0, 0, 0, 0, -1])
    out = publish(np.zeros(5, dtype=np.int64), previous, codes, np.zeros((5, 1)), history,
                  np.array([0]), np.array([0]), 3, Models(l=2))
    assert republish.CHOICES[out.choice[0]] == "retire"
    assert out.counts.tolist() == [[0, 0, 0, 2, 2, 0, 0]]
    assert out.counterfeit == 0 and out.held_back == 1


def test_groups_whose_boxes_overlap_change_together_as_l_diverse_unions():
    # groups 0 (ages 0, 1, 5, 2) and 1 (ages 4, 7) overlap on 4..5: a person there could be in
    # either, so an analyst subtracts their union. Value codes p q x w r s z = 0..6.
    # Group 0 gains x and w (two joiners), group 1 loses z and a counterfeit w: each change
    # meets l = 2, but the union gains x alone and loses z alone.
    history = [Version(np.array([0, 1]), np.array([[1, 1, 0, 0, 0, 0, 0, 0],
                                                   [0, 0, 0, 1, 1, 1, 1, 0]]))]
    codes = np.array([0, 1, 2, 3, 4, 5])
    previous = np.array([0, 0, -1, -1, 1, 1])
    ages = np.array([[0], [1], [5], [2], [4], [7]])
    models = Models(l=2)
    out = publish(np.array([0, 0, 0, 0, 1, 1]), previous, codes, ages.astype(float), history,
                  np.array([0, 1]), np.array([0, 1]), 2, models, ages, np.array([True]))
    before = history[0].counts.sum(axis=0)
    after = out.counts.sum(axis=0)
    added, removed = np.maximum(after - before, 0), np.maximum(before - after, 0)
    for change in (added, removed):
        assert change.sum() == 0 or models.satisfied(change[None, :-1])[0]


def test_an_ancestor_whose_people_all_left_is_subtracted_apart():
    # groups 0 {a, b} and 1 {c, d, e} were merged; when everyone of group 1 has left, an analyst
    # links group 0's class alone to the merged one: {a, b, c} then shows one value gained, c,
    # though against both groups together it only lost d and e
    history = [Version(np.array([0, 1]), np.array([[1, 1, 0, 0, 0, 0], [0, 0, 1, 1, 1, 0]]))]

    def merged(ids):
        return np.zeros_like(ids)

    pinned = republish.unsafe_pairs(Models(l=2), np.array([0]), np.array([[1, 1, 1, 0, 0, 0]]),
                                    history, merged)
    assert pinned.tolist() == [1]


def test_a_joiner_takes_the_row_of_a_counterfeit_of_its_value():
    # a class published {0, 1, 2, 2}; the person of one 2 has left; two people of 2 join: one
    # takes the counterfeit row (the multiset stays), the other waits (alone, {2, 2} gained
    # would be theirs)
    history = [Version(np.array([0]), np.array([[1, 1, 2, 0, 0]]))]
    codes = np.array([0, 1, 2, 2, 2])
    previous = np.array([0, 0, 0, -1, -1])
    out = publish(np.zeros(5, dtype=np.int64), previous, codes, np.zeros((5, 1)), history,
                  np.array([0]), np.array([0]), 4, Models(l=2))
    assert republish.CHOICES[out.choice[0]] == "hold"
    assert out.counts.tolist() == [[1, 1, 2, 0, 0]]
    assert out.published.tolist() == [True, True, True, True, False]
    assert out.counterfeit == 0 and out.held_back == 1
