"""The core's long loops call the installed interrupt check (plpy_anon.core.interrupts), so that
the database layer can stop them; an interrupt raised by the check ends the work."""
import io
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core import containment, interrupts, stable_sort
from plpy_anon.core import mondrian as mondrian_module
from plpy_anon.core.containment import ANY, Axis, contained
from plpy_anon.core.encoding import encode_numeric
from plpy_anon.core.mondrian import Mondrian
from plpy_anon.core.prioritized import PrioritizedMondrian
from plpy_anon.core.republication import stable_partition
from plpy_anon.querylog.logs import read_server_log
from plpy_anon.querylog.priorities import PriorityLearner
from tests.helpers import CountingCheck, Interrupted


def columns(n, seed=0):
    rng = np.random.default_rng(seed)
    return [encode_numeric("a", rng.integers(0, 1000, n)), encode_numeric("b", rng.integers(0, 50, n))]


def test_check_does_nothing_unless_installed_and_nested_blocks_restore():
    interrupts.check()
    outer, inner = CountingCheck(), CountingCheck()
    with interrupts.checking(outer):
        interrupts.check()
        with interrupts.checking(inner):
            interrupts.check()
        interrupts.check()
    interrupts.check()
    assert (outer.calls, inner.calls) == (2, 1)


def test_another_thread_does_not_see_the_installed_check():
    seen = CountingCheck()
    with interrupts.checking(seen):
        thread = threading.Thread(target=interrupts.check)
        thread.start()
        thread.join()
    assert seen.calls == 0


# the numpy fit's loops (the compiled fit checks between its chunks: test_mondrian_compiled.py)
@pytest.mark.parametrize("model", [
    lambda: Mondrian(k=5, engine="numpy"), lambda: Mondrian(k=5, l=2, engine="numpy"),
    lambda: Mondrian(k=5, split="utility"),
    lambda: PrioritizedMondrian(k=5, priorities={"a": 1, "b": 0.2},
                                cut_points={"a": [(500, True)], "b": [(10, False)]},
                                engine="numpy"),
])
def test_a_fit_checks_at_every_level_and_stops_when_interrupted(model):
    n = 20_000
    cols, sensitive = columns(n), np.arange(n) % 3
    counted = CountingCheck()
    with interrupts.checking(counted):
        labels = model().fit(cols, sensitive=sensitive).labels_
    levels = int(np.ceil(np.log2(n / 5 / 2)))            # halvings until parts are under 2k
    assert counted.calls >= levels
    reference = model().fit(cols, sensitive=sensitive).labels_
    assert np.array_equal(labels, reference)             # checking changes nothing
    for raise_at in (1, counted.calls // 2, counted.calls):
        with interrupts.checking(CountingCheck(raise_at)), pytest.raises(Interrupted):
            model().fit(cols, sensitive=sensitive)


def test_the_stable_merges_check_and_stop_when_interrupted():
    rng = np.random.default_rng(3)
    n = 3000
    groups = np.repeat(np.arange(n // 5), 5)[rng.permutation(n)]
    groups[rng.random(n) < 0.4] = -1                      # new people: groups fall short, merge
    points = rng.random((n, 2))
    sensitive = rng.integers(0, 4, (n, 1))
    args = (groups, points, sensitive, np.full(n, -1), [np.zeros((0, 4), dtype=bool)], 5, 2)
    counted = CountingCheck()
    with interrupts.checking(counted):
        stable_partition(*args)
    assert counted.calls >= 2
    with interrupts.checking(CountingCheck(counted.calls)), pytest.raises(Interrupted):
        stable_partition(*args)


@pytest.mark.parametrize("engine", ["numpy", "numba"])
def test_matching_people_to_classes_checks_per_level_and_stops_when_interrupted(engine, monkeypatch):
    rng = np.random.default_rng(4)
    n, c = 20_000, 2_000
    # classes: disjoint tiles of one axis; people anywhere, some of any value on the other
    low = np.arange(c, dtype=np.int64) * 10 + 1
    axes = [Axis(rng.integers(1, c * 10, n), low, low + 9),
            Axis(np.where(rng.random(n) < 0.1, ANY, rng.integers(1, 5, n)),
                 np.ones(c, dtype=np.int64), np.full(c, 4))]
    # the compiled search checks every POINTS_A_CALL points: 20 calls here
    monkeypatch.setattr(containment, "POINTS_A_CALL", 1_000)
    warm = Axis(axes[0].points[:10], low, low + 9)
    contained([warm], 10, c, engine=engine)             # the kernels loaded before counting
    counted = CountingCheck()
    with interrupts.checking(counted):
        contained(axes, n, c, engine=engine)
    assert counted.calls >= 10          # each level of the split, each axis; each call
    with interrupts.checking(CountingCheck(counted.calls)), pytest.raises(Interrupted):
        contained(axes, n, c, engine=engine)


def test_learning_checks_per_statement_and_stops_when_interrupted():
    catalog = {"public": {"t": {"a": "integer", "b": "text"}}}
    statements = [f"SELECT a FROM t WHERE a > {i} AND b IN ({', '.join(['1'] * (i % 40 + 1))})"
                  for i in range(400)]
    counted = CountingCheck()
    with interrupts.checking(counted):
        PriorityLearner("t").fit(statements, catalog)
    assert counted.calls >= 400
    with interrupts.checking(CountingCheck(300)), pytest.raises(Interrupted):
        PriorityLearner("t").fit(statements, catalog)


def test_reading_a_log_checks_per_entry():
    log = "".join(f"2026-11-28 10:00:00 UTC [1] LOG:  statement: SELECT a FROM t WHERE a > {i}\n"
                  for i in range(100))
    counted = CountingCheck()
    with interrupts.checking(counted):
        read_server_log(io.StringIO(log), "stderr")
    assert counted.calls >= 100


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2**20), max_size=3000), st.integers(1, 700))
def test_a_sort_in_chunks_is_numpy_s_stable_argsort(values, chunk):
    codes = np.array(values, dtype=np.int32)
    original = stable_sort.SORT_CHUNK
    stable_sort.SORT_CHUNK = chunk
    try:
        got = stable_sort.stable_argsort(codes)
        narrow = stable_sort.stable_argsort((codes % 7).astype(np.uint16))
    finally:
        stable_sort.SORT_CHUNK = original
    assert got.dtype == np.int32 and np.array_equal(got, np.argsort(codes, kind="stable"))
    assert np.array_equal(narrow, np.argsort(codes % 7, kind="stable"))


def test_a_fit_sorting_in_chunks_checks_between_them_and_finds_the_same_classes(monkeypatch):
    cols, sensitive = columns(20_000, seed=5), np.arange(20_000) % 4
    whole = CountingCheck()
    with interrupts.checking(whole):
        reference = Mondrian(k=5, l=2, engine="numpy").fit(cols, sensitive=sensitive).labels_
    monkeypatch.setattr(stable_sort, "SORT_CHUNK", 1000)
    monkeypatch.setattr(mondrian_module, "_SORT_CHUNK", 1000)
    chunked = CountingCheck()
    with interrupts.checking(chunked):
        labels = Mondrian(k=5, l=2, engine="numpy").fit(cols, sensitive=sensitive).labels_
    assert np.array_equal(labels, reference)
    # two columns, sorted in 20 chunks each (one of them in two 16-bit passes)
    assert chunked.calls >= whole.calls + 2 * 20


def test_resolving_one_long_statement_checks_per_column():
    """One statement's resolution is a loop over its columns (an OR chain of 2,000 here)."""
    catalog = {"public": {"t": {"a": "integer", "b": "text"}}}
    chain = "SELECT a FROM t WHERE " + " OR ".join(f"a = {i}" for i in range(2000))
    counted = CountingCheck()
    with interrupts.checking(counted):
        PriorityLearner("t").fit([chain], catalog)
    assert counted.calls >= 2000
    with interrupts.checking(CountingCheck(1000)), pytest.raises(Interrupted):
        PriorityLearner("t").fit([chain], catalog)
