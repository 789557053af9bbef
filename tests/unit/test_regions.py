"""The pure rules of the out-of-core Mondrian's top cuts (plpy_anon/core/regions.py)."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import example, given
from hypothesis import strategies as st

from plpy_anon.core import regions
from plpy_anon.core.encoding import encode_factorized, encode_numeric
from plpy_anon.core.generalize import SpreadMeasure
from plpy_anon.core.prioritized import PrioritizedMondrian
from plpy_anon.core.privacy_models import Models


@given(rows=st.integers(1, 10**7), data=st.data())
def test_median_fraction_picks_the_value_at_the_in_memory_median_position(rows, data):
    non_null = data.draw(st.integers(0, rows))
    nulls = rows - non_null
    f = regions.median_fraction(rows, non_null)
    if rows // 2 < nulls or non_null == 0:
        assert f is None
    else:   # percentile_disc returns the value at 1-based index ceil(f * N) of the sorted values
        assert math.ceil(f * non_null) == rows // 2 - nulls + 1


@given(values=st.lists(st.one_of(st.none(), st.integers(0, 20)), min_size=1, max_size=300))
def test_median_from_counts_per_value_is_the_value_percentile_disc_gives(values):
    """The value found in a region's counts per value (NULL lowest, left out of the counts) is
    the one at position rows // 2 of its rows sorted, as percentile_disc at median_fraction
    reads it."""
    rows, present = len(values), sorted(v for v in values if v is not None)
    f = regions.median_fraction(rows, len(present))
    counts = sorted((v, present.count(v)) for v in set(present))
    found = regions.value_at(counts, regions.median_index(rows, len(present))) if f is not None else None
    ordered = [None] * (rows - len(present)) + present
    assert found == ordered[rows // 2]


def test_region_budget_leaves_room_for_what_the_backend_holds():
    mib = 1 << 20
    assert regions.leaf_budget(512 * mib, 120 * mib) == 392 * mib
    assert regions.leaf_budget(64 * mib, 300 * mib) == 32 * mib          # half at least


@given(rows=st.integers(2, 200), k=st.integers(1, 50), lt=st.integers(0, 200), extra=st.integers(0, 200))
def test_chosen_cut_keeps_k_rows_on_both_sides_and_is_the_more_balanced(rows, k, lt, extra):
    lt = min(lt, rows)
    le = min(rows, lt + extra)
    chosen = regions.choose(rows, k, None, regions.Candidate(lt), regions.Candidate(le))
    ok = [n for n in (lt, le) if n >= k and rows - n >= k]
    if not ok:
        assert chosen is None
        return
    left = lt if chosen else le
    assert left >= k and rows - left >= k
    assert abs(2 * left - rows) == min(abs(2 * n - rows) for n in ok)
    if lt in ok and abs(2 * lt - rows) == abs(2 * le - rows):
        assert chosen is True                                  # ties to "<"


def test_cut_is_refused_when_a_side_has_fewer_than_l_sensitive_values():
    good = regions.Candidate(10, (2,), (3,))
    thin = regions.Candidate(10, (1,), (3,))
    assert regions.choose(20, 5, 2, good, None) is True
    assert regions.choose(20, 5, 2, thin, None) is None
    assert regions.choose(20, 5, 2, thin, good) is False


@given(values=st.lists(st.one_of(st.none(), st.integers(-50, 50)), min_size=1, max_size=60),
       low=st.integers(-100, -50), high=st.integers(50, 100))
def test_widened_numeric_column_keeps_every_value_and_measures_against_the_table(values, low, high):
    raw = np.array([0 if v is None else v for v in values], dtype=np.int64)
    enc = encode_numeric("x", raw, np.array([v is None for v in values]))
    wide, shift = regions.widened(enc, regions.QIStats(0, float(low), float(high)))
    present = np.array([v is not None for v in values])
    if present.any():
        before = enc.labels[enc.codes[present] - (1 if enc.null_code == 0 else 0)]
        after = wide.labels[wide.codes[present] - (1 if wide.null_code == 0 else 0)]
        assert (before == after).all()
        assert SpreadMeasure(wide)._width == high - low
        assert shift == int(low < enc.labels[0])
    assert (wide.codes[~present] == enc.codes[~present]).all()


INT8_MIN, INT8_MAX = -2**63, 2**63 - 1
#: int8 values at and near its limits (where float64 rounds by up to 1024) and small ones
NEAR_INT8_LIMITS = st.one_of(st.integers(INT8_MIN, INT8_MIN + 4096), st.integers(INT8_MAX - 4096, INT8_MAX),
                             st.integers(-100, 100))


@given(values=st.lists(NEAR_INT8_LIMITS, min_size=1, max_size=40),
       low_at=st.one_of(st.none(), NEAR_INT8_LIMITS, st.integers(INT8_MIN, INT8_MAX)),
       high_at=st.one_of(st.none(), NEAR_INT8_LIMITS, st.integers(INT8_MIN, INT8_MAX)),
       exact=st.booleans())
@example(values=[0, 96], low_at=None, high_at=INT8_MAX, exact=False)
def test_widened_int8_column_reaches_the_tables_extremes_near_the_types_limits(values, low_at, high_at,
                                                                               exact):
    """A region's int8 QI widened to the table's extremes near +-2^63 keeps its values and spans
    the table: exactly from the extremes as ints, within float64's rounding from them as floats
    (2^63 - 1 rounds to 2^63, beyond int8, and stands for the type's maximum)."""
    low = min(values) if low_at is None else min(low_at, min(values))
    high = max(values) if high_at is None else max(high_at, max(values))
    enc = encode_numeric("x", np.array(values, dtype=np.int64))
    whole = regions.QIStats(len(values), low, high) if exact else \
        regions.QIStats(len(values), float(low), float(high))
    wide, shift = regions.widened(enc, whole)
    labels = [int(v) for v in wide.labels.tolist()]
    assert labels == sorted(set(labels))
    assert [labels[c] for c in wide.codes.tolist()] == values
    tolerance = 0 if exact else 1024
    assert abs(labels[0] - low) <= tolerance and abs(labels[-1] - high) <= tolerance
    assert shift == int(labels[0] < min(values))


def test_widened_categorical_column_counts_the_tables_values():
    enc = encode_factorized("c", np.array([0, 1, 1, -1]), ["a", "b"])
    wide, shift = regions.widened(enc, regions.QIStats(4, distinct=10))
    assert shift == 0 and len(wide.labels) == 10 and (wide.codes == enc.codes).all()
    assert list(wide.labels[:3]) == list(enc.labels)


def test_widened_categorical_column_of_many_table_values_holds_labels_linear_in_them():
    """A categorical QI of more distinct values than its order is read for
    (out_of_core.order_values) is widened by a label per value the region lacks: labels whose
    texts grow with the table's values, not with their square (a region of 3 values in a table of 50,000 would hold ~1.25e9
    characters)."""
    enc = encode_factorized("c", np.array([0, 1, 2, 1]), ["a", "b", "c"])
    wide, _ = regions.widened(enc, regions.QIStats(4, distinct=5_000))
    assert len(wide.labels) == 5_000 and len(set(wide.labels.tolist())) == 5_000
    assert sum(len(label) for label in wide.labels.tolist()) <= 10 * 5_000
    assert all(label.startswith(regions.PHANTOM) for label in wide.labels[3:].tolist())


@given(table=st.lists(st.one_of(st.none(), st.sampled_from(["a", "b", "c", "d", "e", "f"])),
                      min_size=1, max_size=200), data=st.data())
def test_region_coded_in_the_tables_order_has_the_whole_table_fits_codes(table, data):
    """A region's categorical QI coded in the table's order (its texts and rows counted by the
    database) has, row for row, the codes the whole table's encoding gives: the region's fit
    cuts its values where the whole-table fit would; values it lacks are labels no code uses."""
    rows = sorted(data.draw(st.sets(st.integers(0, len(table) - 1), min_size=1)))
    uniques = sorted({v for v in table if v is not None})
    factor = np.array([-1 if v is None else uniques.index(v) for v in table])
    whole = encode_factorized("c", factor, uniques)
    counts = [(v, table.count(v)) for v in uniques] + ([(None, table.count(None))] if None in table else [])
    order = regions.frequency_order(counts[::-1] + [(counts[0][0], 0)])   # any order, split counts
    assert order == list(whole.labels)
    part = [table[i] for i in rows]
    held = sorted({v for v in part if v is not None})
    region = encode_factorized("c", np.array([-1 if v is None else held.index(v) for v in part]), held)
    coded, shift = regions.widened(region, regions.QIStats(len(table), distinct=len(order), order=order))
    assert shift == 0 and (coded.codes == whole.codes[rows]).all()
    assert (coded.null_code is None) == (None not in part)
    used = set(coded.codes.tolist())
    for code, label in enumerate(coded.labels):
        assert (label == whole.labels[code]) if code in used else label.startswith(regions.PHANTOM)


@given(values=st.lists(st.one_of(st.none(), st.integers(0, 30)), min_size=1, max_size=40),
       table=st.tuples(st.integers(-5, 0), st.integers(30, 40)))
def test_numeric_spread_of_a_region_is_the_in_memory_fits(values, table):
    """A region's spread on a numeric QI, from its figures or a sample's ranks, is the spread the
    in-memory fit measures on its codes: NULL and values together spread 1 (so both rank the
    QI first and cut NULL apart), else the values' range over the table's."""
    column = _sample_column(values, numeric=True)
    whole = regions.QIStats(2, float(table[0]), float(table[1]))
    got = regions.spread(column.stats(column.ranks), whole, numeric=True)
    present = np.array([v for v in values if v is not None] + list(table), dtype=float)
    mask = np.array([v is None for v in values] + [False, False])
    enc = encode_numeric("a", np.where(mask, 0, present if present.size == mask.size else 0), mask)
    codes = enc.codes[:len(values)]
    expected = SpreadMeasure(enc)(np.array([codes.min()]), np.array([codes.max()]))[0]
    assert math.isclose(got, expected, abs_tol=1e-12)


def _sample_column(values: list, numeric: bool) -> regions.SampleColumn:
    """Ranks of ``values`` (None lowest) as the sample query gives them, labels their texts."""
    present = sorted({v for v in values if v is not None})
    has_null = any(v is None for v in values)
    rank = {v: i + 1 + has_null for i, v in enumerate(present)}
    ranks = np.array([1 if v is None else rank[v] for v in values], dtype=np.int32)
    return regions.SampleColumn(ranks, has_null, [str(v) for v in present],
                                np.array(present, dtype=float) if numeric else None)


def _inside(bound: regions.Bound, value) -> bool:
    """Whether a row's value (None: NULL, lowest) is on the bound's side."""
    if bound.value is None:
        left = value is None
    else:
        left = value is None or (value < int(bound.value) if bound.strict else value <= int(bound.value))
    return left == bound.left


@given(data=st.data(), k=st.integers(1, 8), l=st.sampled_from([None, 2]),
       leaf_rows=st.integers(1, 40))
def test_sampled_tree_partitions_the_sample_with_cuts_keeping_k_and_l_on_both_sides(data, k, l, leaf_rows):
    n = data.draw(st.integers(1, 150))
    cells = st.one_of(st.none(), st.integers(0, 30))
    table = [data.draw(st.lists(cells, min_size=n, max_size=n)) for _ in range(3)]
    sensitive = data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    columns = [_sample_column(table[0], True), _sample_column(table[1], False), None,
               _sample_column(table[2], True)]
    values = [table[0], table[1], None, table[2]]
    root = regions.sample_tree(columns, [np.array(sensitive, dtype=np.int32)], k, l,
                               lambda rows: rows <= leaf_rows, 10)
    leaves = regions.sample_leaves(root)
    owner = [[leaf.leaf for leaf in leaves
              if all(_inside(b, values[b.qi][i]) for b in leaf.bounds)] for i in range(n)]
    assert all(len(o) == 1 for o in owner)                      # each row in one leaf
    assert [leaf.leaf for leaf in leaves] == list(range(len(leaves)))

    def check(node):
        members = [i for i in range(n) if all(_inside(b, values[b.qi][i]) for b in node.bounds)]
        assert node.sampled == len(members)
        if node.children is None:
            return
        assert node.children[0].sampled >= k and node.children[1].sampled >= k
        assert all(b.qi != 2 for b in node.children[0].bounds)   # a QI not cut at the top
        if l:
            for side in node.children:
                inside = [i for i in members if all(_inside(b, values[b.qi][i]) for b in side.bounds)]
                assert len({sensitive[i] for i in inside if sensitive[i]}) >= l
        for child in node.children:
            check(child)

    check(root)


def _tree(depth: int, bounds=()):
    node = regions.SampleNode(bounds, 0)
    if depth:
        node.children = tuple(_tree(depth - 1, bounds + (regions.Bound(0, str(depth), True, side),))
                              for side in (True, False))
    return node


def test_counted_cut_whose_side_lacks_k_rows_or_l_values_is_undone():
    root = _tree(2)
    for number, leaf in enumerate(regions.sample_leaves(root)):
        leaf.leaf = number
    kept, undone = regions.counted_regions(root, {0: 10, 1: 10, 2: 10, 3: 10}, {}, 5, None)
    assert [r.rows for r in kept] == [10, 10, 10, 10] and undone == 0
    # leaf 1 below k: its parent's cut is undone, the root's (20 and 20 rows) kept
    kept, undone = regions.counted_regions(root, {0: 16, 1: 4, 2: 10, 3: 10}, {}, 5, None)
    assert [(len(r.bounds), r.rows) for r in kept] == [(1, 20), (2, 10), (2, 10)] and undone == 1
    # l: leaf 3 has one value; a side holds at least its richest leaf's values
    distinct = {0: (3,), 1: (1,), 2: (2,), 3: (1,)}
    kept, undone = regions.counted_regions(root, {0: 10, 1: 10, 2: 10, 3: 10}, distinct, 5, 2, 1)
    assert [(len(r.bounds), r.rows) for r in kept] == [(1, 20), (1, 20)] and undone == 2
    # a leaf absent from the exact counts (no row, no sensitive value) undoes its parent's cut
    kept, undone = regions.counted_regions(root, {0: 10, 1: 10, 2: 10}, {0: (2,), 1: (2,), 2: (2,)},
                                           5, 2, 1)
    assert [(len(r.bounds), r.rows) for r in kept] == [(2, 10), (2, 10), (1, 10)] and undone == 1


def test_counted_cut_whose_side_fails_entropy_l_is_undone_and_sides_sum_their_leaves():
    root = _tree(2)
    for number, leaf in enumerate(regions.sample_leaves(root)):
        leaf.leaf = number
    model = Models(l=2, l_diversity="entropy")

    def entropy_l(counts):
        return all(bool(model.satisfied(c)[0]) for c in counts)

    rows = {0: 10, 1: 10, 2: 10, 3: 10}
    distinct = {leaf: (2,) for leaf in rows}
    # leaves 0 and 1 are 1 to 9 and 9 to 1 (entropy below ln 2): their parent's cut is undone;
    # summed (10 and 10) they hold it, as do leaves 2 and 3
    counts = {0: [np.array([1, 9])], 1: [np.array([9, 1])], 2: [np.array([5, 5])],
              3: [np.array([5, 5])]}
    kept, undone = regions.counted_regions(root, rows, distinct, 5, 2, 1, counts, entropy_l)
    assert [(len(r.bounds), r.rows) for r in kept] == [(1, 20), (2, 10), (2, 10)] and undone == 1
    # a side that fails even summed: the root's cut undone too (one region, the whole table)
    counts[0] = [np.array([10, 0])]
    kept, undone = regions.counted_regions(root, rows, distinct, 5, 2, 1, counts, entropy_l)
    assert [(len(r.bounds), r.rows) for r in kept] == [(0, 40)] and undone == 2


def test_side_holding_no_value_of_a_sensitive_column_keeps_no_cut():
    """A region whose values of a sensitive column are all NULL has no distribution, which its
    fit refuses (as the in-memory fit refuses such a table): a cut leaving such a side is not
    made, level by level or from the sample's leaves, even where the model (t against the
    table: a class of NULLs is measured against the table as it is) passes it."""
    model = Models(t=0.6, table=np.array([0.5, 0.5]))

    def t_close(counts):
        return all(bool(model.satisfied(c)[0]) for c in counts)

    region = [np.array([4, 4])]
    assert t_close([np.array([0, 0])])
    assert not regions.held_by(t_close, [np.array([0, 0])], region)
    assert not regions.held_by(t_close, [np.array([4, 4])], region)
    assert regions.held_by(t_close, [np.array([2, 2])], region)
    root = _tree(1)
    for number, leaf in enumerate(regions.sample_leaves(root)):
        leaf.leaf = number
    counts = {0: [np.array([4, 4])], 1: [np.array([0, 0])]}
    kept, undone = regions.counted_regions(root, {0: 8, 1: 8}, {}, 5, None, 1, counts, t_close)
    assert [(len(r.bounds), r.rows) for r in kept] == [(0, 16)] and undone == 1


def test_sampled_tree_without_a_qi_cut_at_the_top_is_one_leaf():
    root = regions.sample_tree([None, None], [], 2, None, lambda rows: False, 10)
    assert root.children is None and root.leaf == 0 and root.sampled == 0


@given(spreads=st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0]) | st.floats(0, 1), min_size=1,
                        max_size=6).filter(lambda s: any(s)),
       data=st.data(), spread_weight=st.floats(0, 3), priority_weight=st.floats(0.01, 3))
def test_weighted_ranking_is_the_prioritized_fits_ranking(spreads, data, spread_weight, priority_weight):
    names = [f"q{a}" for a in range(len(spreads))]
    weights = data.draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0]), min_size=len(spreads),
                                 max_size=len(spreads)).filter(any))
    model = PrioritizedMondrian(priorities=dict(zip(names, weights)),
                                metric_weights={"spread": spread_weight, "priority": priority_weight}
                                ).check_parameters(names)
    priority = np.array([model.priorities_[n] for n in names])
    model._priority_metric = priority / priority.max()
    in_memory = model._attribute_order(np.array([spreads]))[0]
    w = model.metric_weights_
    rank = regions.weighted_ranking(list(priority / priority.max()), w["spread"], w["priority"],
                                    sum(w.values()))
    assert rank(spreads) == [int(a) for a in in_memory if spreads[a] > 0]


def test_sampled_tree_with_priorities_cuts_the_prioritized_column_first():
    n = 400
    # both of spread 1 at the root: plain Mondrian cuts the first (ties by position)
    columns = [_sample_column([i % 100 for i in range(n)], True),
               _sample_column([(i * 7) % 50 for i in range(n)], True)]
    plain = regions.sample_tree(columns, [], 5, None, lambda rows: rows <= 50, 10)
    prioritized = regions.sample_tree(columns, [], 5, None, lambda rows: rows <= 50, 10,
                                      regions.weighted_ranking([0.0, 1.0], 1.0, 1.0, 2.0))
    assert plain.children[0].bounds[-1].qi == 0
    assert prioritized.children[0].bounds[-1].qi == 1

    def cuts(root):
        return sum(leaf.bounds[-1].qi == 1 for leaf in regions.sample_leaves(root) if leaf.bounds)

    assert cuts(prioritized) > cuts(plain)


def _penalty(columns, whole, rows, left):
    """The size-weighted spread of both sides summed over the QIs, by brute force."""
    total = 0.0
    for b, col in enumerate(columns):
        if col is None:
            continue
        for side in (rows[left], rows[~left]):
            total += side.size * regions.spread(col.stats(col.ranks[side]), whole[b],
                                                col.values is not None)
    return total / rows.size


@given(data=st.data(), k=st.integers(1, 6), l=st.sampled_from([None, 2]))
def test_utility_cut_of_a_sample_keeps_k_and_l_and_without_l_is_the_least_loss(data, k, l):
    n = data.draw(st.integers(2, 80))
    cells = st.one_of(st.none(), st.integers(0, 12))
    table = [data.draw(st.lists(cells, min_size=n, max_size=n)) for _ in range(2)]
    sensitive = [np.array(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)),
                          dtype=np.int32)]
    columns = [_sample_column(table[0], True), _sample_column(table[1], False)]
    whole = [c.stats(c.ranks) for c in columns]
    rows = np.arange(n)
    spreads = [regions.spread(c.stats(c.ranks), w, c.values is not None) for c, w in zip(columns, whole)]
    chosen = regions.utility_choice(columns, whole, sensitive, rows, spreads, k, l)
    options = []
    for a, col in enumerate(columns):
        if spreads[a] <= 0:
            continue
        for last in np.unique(col.ranks)[:-1]:
            left = col.ranks <= last
            sides = (int(left.sum()), n - int(left.sum()))
            if min(sides) >= k and (not l or min(regions.distinct_ranks(sensitive[0][m], True)
                                                 for m in (left, ~left)) >= l):
                options.append(_penalty(columns, whole, rows, left))
    if chosen is None:
        assert not options or l
        return
    a, last, left = chosen
    assert left.sum() >= k and (~left).sum() >= k
    assert np.array_equal(left, columns[a].ranks <= last)
    if l:
        assert min(regions.distinct_ranks(sensitive[0][m], True) for m in (left, ~left)) >= l
    else:
        assert math.isclose(_penalty(columns, whole, rows, left), min(options), abs_tol=1e-9)


@given(data=st.data(), ordered=st.booleans(), t=st.sampled_from([0.05, 0.1, 0.2, 0.5]))
def test_class_within_its_region_t_of_its_region_is_within_t_of_the_table(data, ordered, t):
    """A region's fit measures a class's EMD against the region's rows over the region's own
    values (with the ordered distance, those values 1/(m_r - 1) apart): any class it accepts
    within region_t of its region (a class of NULLs only too, where the region has NULLs) is
    within t of the table, measured over the table's values as the check does (a region
    holding a few of the table's values, unevenly spread)."""
    m = data.draw(st.integers(2, 30))
    table = np.array(data.draw(st.lists(st.integers(1, 40), min_size=m, max_size=m)))
    held = data.draw(st.lists(st.booleans(), min_size=m, max_size=m))
    region = np.array([data.draw(st.integers(1, n)) if h else 0 for n, h in zip(table, held)])
    nulls = data.draw(st.integers(0, 3))
    if region.sum() == 0:
        return
    whole = Models(t=t, table=table / table.sum(), ordered=ordered)
    if whole.emd(region)[0] > t - 1e-6:
        return                                   # a region the top cuts never keep
    room, fit_ordered = regions.region_t(table, region, t, ordered, 2e-9, int(region.sum()) + nulls)
    present = np.flatnonzero(region)
    # the region's fit: its own values, its own distribution (Mondrian._table_models)
    fit = Models(t=min(max(room, 1e-12), 1.0), table=region[present] / region.sum(),
                 ordered=fit_ordered)
    for _ in range(10):
        cls = np.array([n - data.draw(st.integers(0, n)) for n in region])
        if (cls.sum() == 0 and not nulls) or not fit.satisfied(cls[present])[0]:
            continue
        assert whole.emd(cls)[0] <= t + 1e-9


def test_region_t_of_an_ordered_column_counts_the_table_values_a_region_lacks():
    """A region lacking one of the table's values (positions 0, 2, 3 of 4): over the region's
    own values its class [3, _, 0, 1] is at ordered EMD 0.167 from the region, within
    t - EMD(region, table) = 0.168, but over the table's values it is at 0.224 > t = 0.2 from
    the table. region_t scales the room by the widest gap, so the region's fit refuses it."""
    table, region, cls = np.array([5, 1, 4, 3]), np.array([5, 0, 4, 3]), np.array([3, 0, 0, 1])
    whole = Models(t=0.2, table=table / table.sum(), ordered=True)
    assert whole.emd(cls)[0] > 0.2
    present = np.flatnonzero(region)
    own = region[present] / region.sum()
    unscaled = Models(t=0.2 - whole.emd(region)[0], table=own, ordered=True)
    assert unscaled.satisfied(cls[present])[0]
    room, ordered = regions.region_t(table, region, 0.2, True, 2e-9, int(region.sum()))
    scaled = Models(t=room, table=own, ordered=ordered)
    assert not scaled.satisfied(cls[present])[0]


def test_region_t_of_a_numeric_column_of_one_value_and_nulls_refuses_a_class_of_nulls():
    """A region whose numeric column holds one value and NULLs: the ordered distance over its
    one value puts every class at 0, a class of NULLs too, which the check finds at 0.667 > t
    from the table (values 0 and 1, rows 2 and 1). region_t measures it by the equal distance
    there (a class of NULLs at 1/2 from the region) and keeps t below that."""
    table, region = np.array([2, 1]), np.array([2, 0])
    whole = Models(t=0.6, table=table / table.sum(), ordered=True)
    assert whole.emd(np.zeros(2))[0] > 0.6 and whole.emd(region)[0] < 0.6
    room, ordered = regions.region_t(table, region, 0.6, True, 2e-9, rows=4)
    fit = Models(t=room, table=np.array([1.0]), ordered=ordered)
    assert not ordered and not fit.satisfied(np.zeros(1))[0] and fit.satisfied(np.ones(1))[0]
    assert Models(t=room, table=np.array([1.0]), ordered=True).satisfied(np.zeros(1))[0]
