"""core.containment: the classes holding each point, found by splitting and searching, are the
ones a test of every point against every class finds."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core import containment
from plpy_anon.core.containment import ANY, Axis, contained, set_axis


def every_pair(points: list, boxes: list) -> set:
    """(point, class) for every class whose box holds the point: ranges as (low, high) closed
    (None: a class of NULLs, holding NULL points only... and NULL points sit in any class),
    sets as Python sets of values (None is a value)."""
    found = set()
    for i, point in enumerate(points):
        for c, box in enumerate(boxes):
            ok = True
            for value, bound in zip(point, box):
                if isinstance(bound, frozenset):
                    ok &= value in bound
                elif value is None:
                    ok &= True
                elif bound is None:
                    ok = False
                else:
                    ok &= bound[0] <= value <= bound[1]
            if ok:
                found.add((i, c))
    return found


def axes_of(points: list, boxes: list, kinds: list) -> list[Axis]:
    """The coding the database layer does: ranks for ranges, one code per value for sets."""
    axes = []
    for j, kind in enumerate(kinds):
        values = [p[j] for p in points]
        if kind == "set":
            universe = sorted({v for v in values if v is not None}) + [None]
            code = {v: i for i, v in enumerate(universe)}
            pairs = [(c, code[v]) for c, box in enumerate(boxes) for v in box[j] if v in code]
            classes = np.array([c for c, _ in pairs], dtype=np.int64)
            codes = np.array([v for _, v in pairs], dtype=np.int64)
            axes.append(set_axis(np.array([code[v] for v in values]), classes, codes,
                                 len(boxes), len(universe)))
            continue
        bounds = [b[j] for b in boxes if b[j] is not None]
        ranked = sorted({v for v in values if v is not None} | {x for b in bounds for x in b})
        rank = {v: i + 1 for i, v in enumerate(ranked)}
        low = np.array([1 if b[j] is None else rank[b[j][0]] for b in boxes], dtype=np.int64)
        high = np.array([0 if b[j] is None else rank[b[j][1]] for b in boxes], dtype=np.int64)
        axes.append(Axis(np.array([ANY if v is None else rank[v] for v in values]), low, high))
    return axes


@st.composite
def tables(draw):
    kinds = draw(st.lists(st.sampled_from(["range", "set"]), min_size=1, max_size=4))
    wide = draw(st.sampled_from([10, 10**9]))            # the width of the values must not matter
    n_classes = draw(st.integers(0, 40))
    n_points = draw(st.integers(0, 60))

    def value(kind):
        if kind == "set":
            return draw(st.one_of(st.none(), st.sampled_from("abcdefg")))
        return draw(st.one_of(st.none(), st.integers(0, 30).map(lambda v: v * wide)))

    def bound(kind):
        if kind == "set":
            return frozenset(draw(st.lists(st.one_of(st.none(), st.sampled_from("abcdefgh")),
                                           max_size=4)))
        if draw(st.integers(0, 9)) == 0:
            return None
        a, b = sorted(draw(st.lists(st.integers(0, 30), min_size=2, max_size=2)))
        return (a * wide, b * wide)

    # disjoint tiles as Mondrian makes them, plus overlapping boxes
    boxes = [tuple(bound(k) for k in kinds) for _ in range(n_classes)]
    tiles = draw(st.integers(0, 30))
    for t in range(tiles):
        boxes.append(tuple((t * wide, t * wide + wide - 1) if k == "range" else frozenset("abcdefg")
                           for k in kinds))
    points = [tuple(value(k) for k in kinds) for _ in range(n_points)]
    return kinds, points, boxes


@settings(max_examples=300, deadline=None)
@given(tables(), st.integers(1, 9))
def test_splitting_finds_the_classes_testing_every_pair_finds(table, leaf):
    kinds, points, boxes = table
    original = containment.LEAF_CLASSES
    containment.LEAF_CLASSES = leaf
    try:
        p, c = contained(axes_of(points, boxes, kinds), len(points), len(boxes), engine="numpy")
    finally:
        containment.LEAF_CLASSES = original
    assert set(zip(p.tolist(), c.tolist())) == every_pair(points, boxes)
    assert len(p) == len(set(zip(p.tolist(), c.tolist())))          # each pair once


@settings(max_examples=150, deadline=None)
@given(tables(), st.integers(1, 64), st.sampled_from([0, 8, 1 << 20]))
def test_the_compiled_search_finds_the_pairs_the_numpy_split_finds(table, chunk, bits_bytes):
    """Whichever sets the classes' bits hold (none, some, all: the rest searched among their
    members) and however few pairs a call finds."""
    kinds, points, boxes = table
    axes = axes_of(points, boxes, kinds)
    original = containment.FOUND_CHUNK, containment.MEMBER_BITS_BYTES
    containment.FOUND_CHUNK = chunk          # a few pairs per call: calls resume where they stopped
    containment.MEMBER_BITS_BYTES = bits_bytes
    try:
        p, c = contained(axes, len(points), len(boxes), engine="numba")
    finally:
        containment.FOUND_CHUNK, containment.MEMBER_BITS_BYTES = original
    expected_p, expected_c = contained(axes, len(points), len(boxes), engine="numpy")
    found = list(zip(p.tolist(), c.tolist()))
    assert sorted(found) == sorted(zip(expected_p.tolist(), expected_c.tolist()))
    assert len(found) == len(set(found))                               # each pair once


@settings(max_examples=150, deadline=None)
@given(tables(), st.data())
def test_the_search_guided_by_linked_classes_finds_the_pairs_the_numpy_split_finds(table, data):
    """Hints change nothing: pairs of classes that hold one point with no NULL on a range (the
    fewest a caller may pass), some others, and any visiting order give the numpy split's pairs."""
    kinds, points, boxes = table
    axes = axes_of(points, boxes, kinds)
    expected_p, expected_c = contained(axes, len(points), len(boxes), engine="numpy")
    holding = {}
    for p, c in zip(expected_p.tolist(), expected_c.tolist()):
        ranged_null = any(v is None and k == "range" for v, k in zip(points[p], kinds))
        if not ranged_null:
            holding.setdefault(p, []).append(c)
    pairs = {(a, b) for held in holding.values() for a in held for b in held if a < b}
    if boxes:
        pairs |= set(data.draw(st.lists(st.tuples(st.integers(0, len(boxes) - 1),
                                                  st.integers(0, len(boxes) - 1)), max_size=20)))
    linked = (np.array([a for a, _ in pairs], dtype=np.int64),
              np.array([b for _, b in pairs], dtype=np.int64))
    near = np.array(data.draw(st.lists(st.integers(0, 3), min_size=len(points),
                                       max_size=len(points))), dtype=np.int64)
    p, c = contained(axes, len(points), len(boxes), engine="numba", linked=linked, near=near)
    found = list(zip(p.tolist(), c.tolist()))
    assert sorted(found) == sorted(zip(expected_p.tolist(), expected_c.tolist()))
    assert len(found) == len(set(found))                               # each pair once
