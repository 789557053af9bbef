"""The stable refresh's grouping steps run column-wise on arrays of every row: each must give what
its per-row definition gives (a dict of the rows' pairs, numpy's unique, the l model counted on
floats), or a refresh would keep someone's group, or check a multiset, differently."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core.privacy_models import Models
from plpy_anon.core.republication import _value_codes, group_index
from plpy_anon.core.republish import _mapping, _set_codes, _step, meets


def dict_step(labels, previous, published_before, held_in):
    """The per-row definition: a dict of (last group, group now) pairs, the last pair of a
    group winning, the published members' pairs over the held-back ones'."""
    step = dict(zip(previous[published_before].tolist(), labels[published_before].tolist()))
    if held_in is not None:
        waited = (held_in >= 0) & ~published_before
        step = dict(zip(held_in[waited].tolist(), labels[waited].tolist())) | step
    return step


@st.composite
def rows(draw):
    n = draw(st.integers(0, 60))
    spread = draw(st.sampled_from([3, 20, 10_000]))
    ints = st.lists(st.integers(-1, spread), min_size=n, max_size=n)
    labels = np.array(draw(st.lists(st.integers(0, spread), min_size=n, max_size=n)),
                      dtype=np.int64)
    previous = np.array(draw(ints), dtype=np.int64)
    held_in = np.array(draw(ints), dtype=np.int64) if draw(st.booleans()) else None
    return labels, previous, held_in


@settings(max_examples=300, deadline=None)
@given(rows())
def test_each_last_group_steps_to_the_group_the_dict_of_its_rows_names(case):
    labels, previous, held_in = case
    published_before = previous >= 0
    assert _step(labels, previous, published_before, held_in) == \
        dict_step(labels, previous, published_before, held_in)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 10_000), max_size=80), st.sampled_from([1, 7, 1000]))
def test_group_index_is_numpys_unique_with_its_inverse(values, scale):
    labels = np.array(values, dtype=np.int64) // scale
    ids, index = group_index(labels)
    want_ids, want_index = np.unique(labels, return_inverse=True)
    assert np.array_equal(ids, want_ids)
    assert np.array_equal(index, want_index.ravel())
    assert index.dtype == np.int64 and ids.dtype == np.int64


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 12), st.integers(1, 6), st.sampled_from([None, 1, 2, 3, 4.0]),
       st.sampled_from(["distinct", "entropy", "recursive"]), st.data())
def test_meets_counts_what_the_l_model_counts(groups, width, l, kind, data):
    counts = np.array(data.draw(st.lists(st.integers(0, 4), min_size=groups * (width + 1),
                                         max_size=groups * (width + 1))),
                      dtype=np.int64).reshape(groups, width + 1)
    models = Models(l=l, l_diversity=kind, c=2.0 if kind == "recursive" else None)
    assert np.array_equal(meets(models, counts), models.satisfied(counts[:, :-1]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-1, 12), max_size=60), st.sampled_from([1, 3]))
def test_a_set_qis_codes_are_each_rows_rank_among_its_distinct_codes(values, scale):
    col = np.array(values, dtype=np.int64) * scale
    assert np.array_equal(_set_codes(col), _value_codes(col)[0])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(-5, 40), st.integers(0, 9)), max_size=40),
       st.lists(st.integers(-60, 60), max_size=30), st.sampled_from([1, 1000]))
def test_a_mapping_gives_each_keys_last_value_and_leaves_other_values(pairs, xs, scale):
    keys = np.array([k * scale for k, _ in pairs], dtype=np.int64)
    values = np.array([v for _, v in pairs], dtype=np.int64)
    x = np.array(xs, dtype=np.int64) * scale
    want = dict(zip(keys.tolist(), values.tolist()))
    assert _mapping(keys, values)(x).tolist() == [want.get(v, v) for v in x.tolist()]
