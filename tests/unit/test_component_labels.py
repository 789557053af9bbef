"""component_labels numbers the components of an undirected graph exactly as scipy's
connected_components does (the oracle), on random graphs of any shape."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from plpy_anon.core.disjoint_sets import component_labels


@st.composite
def graphs(draw):
    n = draw(st.integers(0, 60))
    if n == 0:
        return 0, np.empty(0, np.int64), np.empty(0, np.int64)
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    a = np.array([p[0] for p in pairs], dtype=np.int64)
    b = np.array([p[1] for p in pairs], dtype=np.int64)
    return n, a, b


@given(graphs())
@settings(max_examples=300, deadline=None)
def test_component_labels_are_scipys_connected_components(graph):
    n, a, b = graph
    expected = connected_components(coo_matrix((np.ones(a.size), (a, b)), shape=(n, n)),
                                     directed=False)[1] if n else np.empty(0)
    assert component_labels(a, b, n).tolist() == expected.tolist()


def test_a_long_path_in_shuffled_order_is_one_component():
    """The worst case of label propagation (a path whose ends hold the smallest ids) still ends,
    in one component."""
    rng = np.random.default_rng(7)
    n = 100_000
    order = rng.permutation(n)
    a, b = order[:-1], order[1:]
    assert set(component_labels(a, b, n).tolist()) == {0}
    assert component_labels(np.array([1, 3]), np.array([0, 2]), 5).tolist() == [0, 0, 1, 1, 2]
