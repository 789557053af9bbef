"""The partitioner (codes kept in layout order, optional threads) gives exactly the labels of the
simpler implementation it replaced (tests/unit/reference_mondrian.py), on the numpy engine (the
compiled one is compared with it in test_mondrian_compiled.py). Equivalence, not timing:
the speed is measured by make bench (tests/bench/bench_mondrian.py)."""

from functools import partial

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core import mondrian
from plpy_anon.core.mondrian import Mondrian
from plpy_anon.core.prioritized import PrioritizedMondrian
from tests.runs import examples
from tests.unit import reference_mondrian
from tests.unit.test_mondrian import KINDS, _random_column, tables


@settings(max_examples=80, deadline=None)
@given(tables(max_rows=80), st.integers(1, 3))
def test_labels_identical_to_previous_implementation(table, l):
    columns, k, rng = table
    n = len(columns[0].codes)
    sensitive = rng.integers(0, 5, size=n)
    if len(set(sensitive.tolist())) < l:
        l = 1
    for lv, sens in ((None, None), (l, sensitive)):
        new = Mondrian(engine="numpy", k=k, l=lv).fit(columns, sens)
        old = reference_mondrian.Mondrian(k=k, l=lv).fit(columns, sens)
        np.testing.assert_array_equal(new.labels_, old.labels_)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([2, 5, 10]))
def test_larger_tables_identical_to_previous_implementation_threads(seed, k):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2000, 6000))
    columns = [_random_column(kind, f"q{i}", n, rng) for i, kind in enumerate(KINDS * 2)]
    sensitive = rng.integers(0, 70, n)             # > 64 values: the sort-based distinct count
    saved = (mondrian._Workers.THREADS, mondrian._Workers.MIN_ROWS, mondrian._STACKED_CELLS,
             mondrian._COMPRESS_CHUNK)
    # every level on two threads, regrouped in chunks of 97 positions; the default (a table
    # this small: all attributes stacked); one array per attribute on one thread
    for threads, pool_rows, stacked, chunk in ((2, 0, 0, 97), saved, (1, saved[1], 0, saved[3])):
        mondrian._Workers.THREADS, mondrian._Workers.MIN_ROWS = threads, pool_rows
        mondrian._STACKED_CELLS, mondrian._COMPRESS_CHUNK = stacked, chunk
        try:
            for lv, sens in ((None, None), (3, sensitive)):
                new = Mondrian(engine="numpy", k=k, l=lv).fit(columns, sens)
                old = reference_mondrian.Mondrian(k=k, l=lv).fit(columns, sens)
                np.testing.assert_array_equal(new.labels_, old.labels_)
        finally:
            (mondrian._Workers.THREADS, mondrian._Workers.MIN_ROWS, mondrian._STACKED_CELLS,
             mondrian._COMPRESS_CHUNK) = saved


def _renumbering_fits(columns, sensitive, target, k):
    """Every estimator that reads row-indexed state during the fit: codes (utility split, cut
    points), sensitive values (distinct l as bitmasks and as codes, entropy l, t), the target."""
    Mondrian, Prioritized = (partial(cls, engine="numpy") for cls in (mondrian.Mondrian,
                                                                     PrioritizedMondrian))
    numeric = [c.name for c in columns if c.kind == "numeric"
               and not np.issubdtype(c.labels.dtype, np.datetime64)]
    few, many = sensitive % 5, sensitive                    # bitmasks, and > 64 values
    return {
        "median": lambda: Mondrian(k=k).fit(columns),
        "distinct l, bitmask": lambda: Mondrian(k=k, l=3).fit(columns, few),
        "distinct l, codes": lambda: Mondrian(k=k, l=3).fit(columns, many),
        "entropy l": lambda: Mondrian(k=k, l=2, l_diversity="entropy").fit(columns, few),
        "t": lambda: Mondrian(k=k, t=0.4).fit(columns, few, sensitive_ordered=True),
        "utility": lambda: Mondrian(k=k, split="utility").fit(columns),
        "utility, l": lambda: Mondrian(k=k, l=2, split="utility").fit(columns, few),
        "prioritized": lambda: Prioritized(
            k=k, l=2, priorities={c.name: float(i % 3 + 1) for i, c in enumerate(columns)},
            cut_points={name: [(0.5, True)] for name in numeric[:1]},
            metric_weights={"spread": 1, "priority": 1, "infogain": 1},
        ).fit(columns, few, target=target),
    }


@examples(default=4, slow=30)
@given(st.integers(0, 2**32 - 1), st.sampled_from([2, 5, 10]), st.integers(0, 3))
def test_renumbered_rows_give_the_same_labels(seed, k, threshold):
    """Large tables renumber their rows mid-fit and regroup in tree order from then on
    (Mondrian._renumber, _TreeOrder): the labels must be those of the fit without, for every
    estimator that reads row-indexed state. Forced here on small tables, renumbering after
    the first level or deeper, with tree-order chunks of 97 positions."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1500, 4000))
    columns = [_random_column(kind, f"q{i}", n, rng) for i, kind in enumerate(KINDS * 2)]
    sensitive = rng.integers(0, 70, n)
    target = rng.integers(0, 3, n)
    fits = _renumbering_fits(columns, sensitive, target, k)
    saved = (mondrian._RENUMBER_MIN_ROWS, mondrian._RENUMBER_PARTITION,
             mondrian._STACKED_CELLS, mondrian._TreeOrder.CHUNK)
    try:
        mondrian._STACKED_CELLS = 0                 # one array per attribute: the large path
        plain = {name: fit().labels_ for name, fit in fits.items()}
        mondrian._RENUMBER_MIN_ROWS = 0
        mondrian._RENUMBER_PARTITION = (n, n // 3, 200, 2 * k)[threshold]
        mondrian._TreeOrder.CHUNK = 97
        for name, fit in fits.items():
            np.testing.assert_array_equal(fit().labels_, plain[name], err_msg=name)
    finally:
        (mondrian._RENUMBER_MIN_ROWS, mondrian._RENUMBER_PARTITION,
         mondrian._STACKED_CELLS, mondrian._TreeOrder.CHUNK) = saved


def test_renumbering_happens_when_forced(monkeypatch):
    """The property above is only worth something if the forced settings renumber: count."""
    rng = np.random.default_rng(7)
    columns = [_random_column(kind, f"q{i}", 3000, rng) for i, kind in enumerate(KINDS)]
    calls = []
    original = Mondrian._renumber
    monkeypatch.setattr(Mondrian, "_renumber",
                        lambda self, *a: calls.append(1) or original(self, *a))
    monkeypatch.setattr(mondrian, "_STACKED_CELLS", 0)
    Mondrian(k=5, engine="numpy").fit(columns)
    assert calls == []                              # 3,000 rows: below the threshold
    monkeypatch.setattr(mondrian, "_RENUMBER_MIN_ROWS", 0)
    monkeypatch.setattr(mondrian, "_RENUMBER_PARTITION", 600)
    Mondrian(k=5, engine="numpy").fit(columns)
    assert calls == [1]                             # once, not at every level
