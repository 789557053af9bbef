"""generalization.release_order: every row once, grouped by class, classes and rows inside a class
in random order; the same on the compiled counting sort and on numpy."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plpy_anon.core import mondrian_jit
from plpy_anon.core.encoding import encode_numeric
from plpy_anon.core.mondrian import Mondrian
from plpy_anon.db.generalization import release_order

needs_numba = pytest.mark.skipif(mondrian_jit.kernels() is None, reason="numba is not installed")


@pytest.fixture(params=["numba", "numpy"])
def engine(request, monkeypatch):
    if request.param == "numba":
        if mondrian_jit.kernels() is None:
            pytest.skip("numba is not installed")
        Mondrian(k=2, engine="numba").fit([encode_numeric("x", np.arange(10))])
    else:
        monkeypatch.setattr(mondrian_jit, "_kernels", None)
    return request.param


# the engine fixture holds for every example (the kernels loaded, or hidden)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(1, 400), st.integers(1, 40), st.integers(0, 2**32 - 1))
def test_every_row_once_grouped_by_class_in_rank_order(engine, n_rows, n_classes, seed):
    labels = np.random.default_rng(seed).integers(0, n_classes, n_rows).astype(np.int32)
    ranked, order = release_order(labels, n_classes)
    np.testing.assert_array_equal(np.sort(order), np.arange(n_rows))
    assert (np.diff(ranked[order]) >= 0).all()          # classes consecutive, by rank
    # the ranks renumber the classes one to one
    pairs = set(zip(labels.tolist(), ranked.tolist()))
    assert len(pairs) == len({a for a, _ in pairs}) == len({b for _, b in pairs})


def test_rows_inside_a_class_and_the_classes_come_in_random_order(engine):
    """Two calls on 3 classes of 200 rows: each class's rows in another order (the chance of the
    same order is 1/200!), and over 60 calls each class comes first some time (a miss: 3 x
    (2/3)^60)."""
    labels = np.repeat(np.arange(3, dtype=np.int32), 200)
    o1, o2 = release_order(labels, 3)[1], release_order(labels, 3)[1]
    for c in range(3):
        assert not np.array_equal(o1[labels[o1] == c], o2[labels[o2] == c])
    firsts = {int(labels[release_order(labels, 3)[1][0]]) for _ in range(60)}
    assert firsts == {0, 1, 2}


@needs_numba
def test_the_counting_sort_keeps_each_codes_rows_in_order():
    Mondrian(k=2, engine="numba").fit([encode_numeric("x", np.arange(10))])
    codes = np.random.default_rng(3).integers(0, 50, 5000).astype(np.int32)
    np.testing.assert_array_equal(mondrian_jit.grouped_order(codes, 50),
                                  np.argsort(codes, kind="stable"))
