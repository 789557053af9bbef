"""core.refresh_groups: the groups of regions a stable refresh must run together are closed (no
merged group's hull meets a box of another group), hold every linked pair, and are the least
such groups: the same as an oracle that grows groups over the grid points of the boxes, whatever
the order of the regions."""
from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core.refresh_groups import Axis, closed, meets, plan

SIDE = 12
SYMBOLS = 4


@st.composite
def regions(draw):
    """The leaves of a random tree of cuts over two ordered QIs (positions 0..SIDE-1) and one QI
    of symbols: disjoint boxes covering the domain, as a creation's regions are."""
    leaves = [{"x": Axis(0, SIDE - 1), "y": Axis(0, SIDE - 1),
               "s": Axis(symbols=frozenset(range(SYMBOLS)))}]
    for _ in range(draw(st.integers(0, 10))):
        i = draw(st.integers(0, len(leaves) - 1))
        box = leaves[i]
        q = draw(st.sampled_from(["x", "y", "s"]))
        if q == "s":
            if len(box["s"].symbols) < 2:
                continue
            held = sorted(box["s"].symbols)
            left = frozenset(draw(st.lists(st.sampled_from(held), min_size=1,
                                           max_size=len(held) - 1, unique=True)))
            parts = [Axis(symbols=left), Axis(symbols=box["s"].symbols - left)]
        else:
            if box[q].low == box[q].high:
                continue
            cut = draw(st.integers(box[q].low, box[q].high - 1))
            parts = [Axis(box[q].low, cut), Axis(cut + 1, box[q].high)]
        leaves[i:i + 1] = [{**box, q: part} for part in parts]
    n = len(leaves)
    links = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=4))
    return leaves, links


def points(box: dict) -> set:
    return set(itertools.product(range(box["x"].low, box["x"].high + 1),
                                 range(box["y"].low, box["y"].high + 1), box["s"].symbols))


def oracle(boxes: list, links) -> list[frozenset]:
    """The least closed groups, grown over grid points: a group's reach is every point between
    its points' lowest and highest x and y, with any of their symbols."""
    cells = [points(b) for b in boxes]
    groups = [{r} for r in range(len(boxes))]

    def join(a, b):
        ga = next(g for g in groups if a in g)
        gb = next(g for g in groups if b in g)
        if ga is not gb:
            groups.remove(gb)
            ga |= gb
            return True
        return False
    for a, b in links:
        join(a, b)
    changed = True
    while changed:
        changed = False
        for g in [g for g in groups if len(g) > 1]:
            held = set().union(*(cells[r] for r in g))
            xs, ys, ss = zip(*held)
            for r in range(len(boxes)):
                if r not in g and any(min(xs) <= x <= max(xs) and min(ys) <= y <= max(ys)
                                      and s in ss for x, y, s in cells[r]):
                    changed |= join(min(g), r)
    return sorted((frozenset(g) for g in groups), key=sorted)


def grouped(groups: list) -> list[frozenset]:
    out: dict = {}
    for r, g in enumerate(groups):
        out.setdefault(g, set()).add(r)
    return sorted((frozenset(m) for m in out.values()), key=sorted)


@given(regions(), st.randoms(use_true_random=False))
@settings(max_examples=200, deadline=None)
def test_the_groups_are_the_least_closed_ones_holding_every_link(drawn, random):
    boxes, links = drawn
    # the regions are disjoint
    assert not any(meets(a, b) for a, b in itertools.combinations(boxes, 2))
    got = plan(boxes, links, [1] * len(boxes))
    assert all(got.groups[a] == got.groups[b] for a, b in links)
    assert closed(boxes, got.groups)
    assert grouped(got.groups) == oracle(boxes, links)
    assert sum(got.group_rows.values()) == len(boxes)
    # the same groups whatever the order of the regions
    order = list(range(len(boxes)))
    random.shuffle(order)
    again = plan([boxes[r] for r in order], [(order.index(a), order.index(b)) for a, b in links],
                 [1] * len(boxes))
    assert sorted((frozenset(order[r] for r in g) for g in grouped(again.groups)), key=sorted) == \
        grouped(got.groups)


@given(regions())
@settings(max_examples=50, deadline=None)
def test_without_links_every_region_is_its_own_group(drawn):
    boxes, _ = drawn
    got = plan(boxes, [], list(range(len(boxes))))
    assert got.groups == list(range(len(boxes))) and got.rounds == 0
    assert got.group_rows == {r: r for r in range(len(boxes))}


def test_a_link_across_a_gap_takes_the_boxes_between():
    """Three boxes along x: a person linking the outer two reaches the middle one."""
    boxes = [{"x": Axis(0, 3)}, {"x": Axis(4, 7)}, {"x": Axis(8, 11)}]
    got = plan(boxes, [(0, 2)], [5, 6, 7])
    assert got.groups == [0, 0, 0] and got.group_rows == {0: 18} and got.rounds == 1
    # on a QI of symbols a union reaches nothing between
    boxes = [{"s": Axis(symbols=frozenset({0}))}, {"s": Axis(symbols=frozenset({1}))},
             {"s": Axis(symbols=frozenset({2}))}]
    assert plan(boxes, [(0, 2)], [1, 1, 1]).groups == [0, 1, 0]
    assert plan(boxes, [(0, 2)], [1, 1, 1], everything=True).groups == [0, 0, 0]


def test_a_regions_version_is_carried_onto_the_values_of_a_read_in_another_order():
    """The check reads a region again; a parallel scan may code its sensitive texts in another
    order: the run's counts follow the texts, and other texts are no version of these people."""
    from plpy_anon.db.stable_regions import _in_values_of

    version = {"group_ids": [4, 9], "values": ["flu", "ok", None],
               "counts": np.array([[2, 0, 1], [0, 3, 0]])}
    got = _in_values_of(version, ["ok", None, "flu"])
    assert got["values"] == ["ok", None, "flu"]
    assert got["counts"].tolist() == [[0, 1, 2], [3, 0, 0]]
    assert _in_values_of(version, ["ok", "hiv", None]) is None
    assert _in_values_of(version, ["ok", None]) is None
