"""The stable check compares multisets in numpy: the released classes' multisets (and those of
the unions that linked classes form) against the groups', as (value, rows) pairs over one
dictionary. They must count the same multisets as sorting each one's values does, so that a
release whose classes differ from its groups by one value, or whose unions differ, is refused."""
from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.db.republication import _group_pairs, _signatures, _union_signatures


def decoded(signatures: list[bytes]) -> Counter:
    """Signatures (a sorted list, a bag) back to sorted value tuples (each code repeated as many
    times as held)."""
    assert signatures == sorted(signatures)
    out = Counter()
    for raw in signatures:
        pairs = np.frombuffer(raw, dtype=np.int64).reshape(-1, 2)
        out[tuple(int(c) for c, n in pairs for _ in range(int(n)))] += 1
    return out


def naive_unions(pairs, members: dict) -> Counter:
    parent = {m: m for m in members}

    def find(x):
        while parent[x] != x:
            x = parent[x]
        return x
    for a, b in pairs:
        parent[find(a)] = find(b)
    unions = {}
    for m, vals in members.items():
        unions.setdefault(find(m), []).append(vals)
    return Counter(tuple(sorted(v for vals in parts for v in vals))
                   for parts in unions.values() if len(parts) > 1)


@st.composite
def multisets(draw):
    n = draw(st.integers(0, 12))
    members = [draw(st.lists(st.integers(0, 5), max_size=6)) for _ in range(n)]
    pairs = draw(st.lists(st.tuples(st.integers(0, max(n - 1, 0)), st.integers(0, max(n - 1, 0))),
                          max_size=10)) if n else []
    return members, pairs


def triples(members, split: bool, shuffled: bool = True):
    """(owner, code, count) of each member's values, a code's rows given in two triples
    (``split``), in no order as an unsorted read may give them (``shuffled``) or by owner and
    code as a count matrix's cells come."""
    owner, code, count = [], [], []
    for m, vals in enumerate(members):
        for v, times in Counter(vals).items():
            parts = [1, times - 1] if split and times > 1 else [times]
            for t in parts:
                owner.append(m)
                code.append(v)
                count.append(t)
    order = np.random.default_rng(len(owner)).permutation(len(owner)) if shuffled else \
        np.lexsort((code, owner))
    return tuple(np.asarray(x, dtype=np.int64)[order] for x in (owner, code, count))


@settings(max_examples=300, deadline=None)
@given(multisets(), st.booleans(), st.booleans())
def test_each_members_multiset_is_counted_as_its_sorted_values(case, split, shuffled):
    members, _ = case
    assert decoded(_signatures(*triples(members, split, shuffled), len(members))) == \
        Counter(tuple(sorted(vals)) for vals in members)


@settings(max_examples=100, deadline=None)
@given(multisets(), st.randoms(use_true_random=False))
def test_members_holding_the_same_multisets_in_another_order_are_the_same_bag(case, rng):
    members, _ = case
    others = list(members)
    rng.shuffle(others)
    assert _signatures(*triples(members, False), len(members)) == \
        _signatures(*triples(others, True), len(others))


@settings(max_examples=300, deadline=None)
@given(multisets(), st.booleans())
def test_the_unions_linked_pairs_form_are_counted_as_their_sorted_values(case, split):
    members, pairs = case
    a = np.asarray([p[0] for p in pairs], dtype=np.int64)
    b = np.asarray([p[1] for p in pairs], dtype=np.int64)
    found = _union_signatures(a, b, len(members), triples(members, split))
    assert decoded(found) == naive_unions(pairs, dict(enumerate(members)))


def test_one_value_more_in_one_member_changes_the_count():
    members = [[1, 1, 2], [3, 4]]
    tampered = [[1, 2, 2], [3, 4]]
    assert _signatures(*triples(members, False), 2) != _signatures(*triples(tampered, False), 2)
    a, b = np.array([0]), np.array([1])
    assert _union_signatures(a, b, 2, triples(members, False)) != \
        _union_signatures(a, b, 2, triples(tampered, False))


def test_groups_are_paired_with_the_group_their_union_is_named_after():
    a, b = _group_pairs([7, 3, 9], [3, 3, 42])
    assert (a.tolist(), b.tolist()) == ([0, 1], [1, 1])       # 42 names no group: no pair
    a, b = _group_pairs([7, 3], None)
    assert a.size == b.size == 0
