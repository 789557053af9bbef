"""db.republication's lookups of people by their hashes: positions, the order the state stores
them in, and the cohorts of equal candidates -- checked against plain Python (a dict, sorted
bytes, numpy's unique over rows) on random hashes, many of them sharing their first 8 bytes
(the integer the lookups sort by)."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.db.republication import (
    State,
    _distinct_keys,
    _distinct_rows,
    _hash_order,
    _int4s,
    _positions,
    packed,
)

# hashes from a few prefixes and tails: equal first words (and equal hashes) are common
hash_bytes = st.builds(lambda head, tail: head + tail,
                       st.sampled_from([bytes(8), b"\xff" * 8, b"\x01" * 7 + b"\x00", b"abcdefgh"]),
                       st.binary(min_size=24, max_size=24).map(lambda b: b[:2] + bytes(22)))


@settings(max_examples=200, deadline=None)
@given(st.lists(hash_bytes, unique=True, max_size=40), st.lists(hash_bytes, max_size=40))
def test_positions_find_each_hash_where_a_dict_does(stored, asked):
    where = {h: i for i, h in enumerate(stored)}
    found = _positions(packed(stored), packed(asked))
    assert found.tolist() == [where.get(h, -1) for h in asked]


@pytest.mark.parametrize("engine", ["numba", "numpy"])
@settings(max_examples=200, deadline=None)
@given(st.lists(hash_bytes, unique=True, max_size=40), st.lists(hash_bytes, max_size=40))
def test_positions_in_a_sorted_state_find_each_hash_where_a_dict_does(engine, stored, asked):
    if engine == "numba":
        pytest.importorskip("numba")
    stored = sorted(stored)             # a state's order: bucketed by the compiled lookup
    where = {h: i for i, h in enumerate(stored)}
    found = _positions(packed(stored), packed(asked), engine)
    assert found.tolist() == [where.get(h, -1) for h in asked]


def test_positions_of_many_people_are_found_by_the_compiled_lookup_as_by_numpy():
    pytest.importorskip("numba")
    rng = np.random.default_rng(43)
    stored = np.frombuffer(rng.bytes(32 * 200_000), dtype="S32")
    stored = stored[_hash_order(stored)]
    asked = np.concatenate([stored[rng.permutation(stored.size)[:150_000]],
                            np.frombuffer(rng.bytes(32 * 50_000), dtype="S32")])
    assert (_positions(stored, asked, "numba") == _positions(stored, asked, "numpy")).all()


@settings(max_examples=200, deadline=None)
@given(st.lists(hash_bytes, unique=True, max_size=3), st.lists(hash_bytes, min_size=49, max_size=80))
def test_positions_of_many_asked_among_few_stored_find_each_hash_where_a_dict_does(stored, asked):
    where = {h: i for i, h in enumerate(stored)}
    found = _positions(packed(stored), packed(asked))
    assert found.tolist() == [where.get(h, -1) for h in asked]


@settings(max_examples=100, deadline=None)
@given(st.lists(hash_bytes, unique=True, min_size=2, max_size=30))
def test_state_lookups_answer_an_array_changed_in_place_anew(stored):
    state = State(packed(stored), *(np.arange(len(stored)),) * 3, [])
    asked = packed(stored).copy()
    assert state.find(asked).tolist() == list(range(len(stored)))
    asked[:] = asked[::-1].copy()
    assert state.find(asked).tolist() == list(range(len(stored)))[::-1]


@settings(max_examples=200, deadline=None)
@given(st.lists(hash_bytes, unique=True, max_size=40))
def test_hash_order_sorts_hashes_as_bytes(hashes):
    order = _hash_order(packed(hashes))
    assert [hashes[i] for i in order.tolist()] == sorted(hashes)


@settings(max_examples=100, deadline=None)
@given(st.lists(hash_bytes, unique=True, min_size=1, max_size=30), st.data())
def test_state_lookups_answer_each_question_asked_not_the_last(stored, data):
    state = State(packed(stored), *(np.arange(len(stored)),) * 3, [])
    where = {h: i for i, h in enumerate(stored)}
    for _ in range(3):
        asked = data.draw(st.lists(st.sampled_from(stored) | hash_bytes, max_size=20))
        assert state.find(packed(asked)).tolist() == [where.get(h, -1) for h in asked]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 3).flatmap(lambda w: st.lists(
    st.lists(st.sampled_from([0, 1, 2**63, 2**64 - 1]), min_size=w, max_size=w), max_size=40)),
    st.integers(1, 3))
def test_distinct_rows_group_equal_rows_as_numpy_unique(rows, width):
    matrix = np.array(rows, dtype=np.uint64).reshape(len(rows), -1) if rows \
        else np.zeros((0, width), dtype=np.uint64)
    first, distinct = _distinct_rows(matrix)
    _, numpy_first, numpy_distinct = np.unique(matrix, axis=0, return_index=True,
                                               return_inverse=True)
    assert sorted(first.tolist()) == sorted(numpy_first.tolist())
    # the same partition of the rows, each distinct row numbered after its first row
    assert distinct.size == matrix.shape[0]
    assert all((matrix[first[d]] == matrix[i]).all() for i, d in enumerate(distinct.tolist()))
    assert len(set(distinct.tolist())) == len(set(numpy_distinct.ravel().tolist()))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 99), max_size=60))
def test_distinct_keys_are_the_sorted_distinct_values(keys):
    assert _distinct_keys(np.array(keys, dtype=np.int64), 100).tolist() == sorted(set(keys))


def int4_array_send(values: list[int | None], ndim: int = 1) -> bytes:
    """PostgreSQL's binary form of a one-dimensional int4[] (array_send; 23: int4's oid)."""
    if not values:
        return struct.pack(">iii", 0, 0, 23)
    body = b"".join(struct.pack(">i", -1) if v is None else struct.pack(">ii", 4, v)
                    for v in values)
    return struct.pack(">iiiii", ndim, None in values, 23, len(values), 1) + body


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-2**31, 2**31 - 1), max_size=30))
def test_int4s_read_array_send_as_its_integers(values):
    assert _int4s(int4_array_send(values)).tolist() == values
    assert _int4s(None) is None


def test_int4s_refuse_null_elements():
    assert _int4s(int4_array_send([1, None, 3])) is None
