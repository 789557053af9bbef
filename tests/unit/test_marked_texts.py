"""Texts each ended by a mark (the read's chunks, the check's stored values) factorized by the
compiled kernel (core.mondrian_jit.factorized_marked) as pyarrow's ``dictionary_encode``, its
oracle, factorizes them: the same distinct values in the same order and the same indices; a
buffer holding another number of values is refused; the readers give the same codes either
way."""

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core import mondrian_jit
from plpy_anon.db import class_counts, reader

pytestmark = pytest.mark.skipif(mondrian_jit.kernels() is None, reason="numba is not installed")

#: few and short texts (many repeats), ASCII and not, empty, and the read's own marks
TEXTS = st.lists(st.sampled_from(["", "a", "ab", "b", "é", "日本", "\x02", "x" * 40, "a b"])
                 | st.text(max_size=6), min_size=1, max_size=300)


def oracle(buffer: bytes, end: int, n: int):
    """pyarrow's factorization of ``buffer``'s ``n`` values, each with its end mark."""
    ends = np.flatnonzero(np.frombuffer(buffer, dtype=np.uint8) == end)
    assert ends.shape[0] == n
    offsets = np.concatenate([[0], ends + 1]).astype(np.int32)
    encoded = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets),
                                                     pa.py_buffer(buffer)]).dictionary_encode()
    return encoded.dictionary.to_pylist(), encoded.indices.to_numpy(zero_copy_only=False)


@settings(max_examples=200, deadline=None)
@given(TEXTS, st.sampled_from([0x00, 0x01]))
def test_the_kernel_factorizes_as_pyarrow(texts, end):
    texts = [t.replace(chr(end), "") for t in texts]
    buffer = b"".join(t.encode() + bytes([end]) for t in texts)
    uniques, indices = mondrian_jit.factorized_marked(buffer, end, len(texts))
    expected_uniques, expected_indices = oracle(buffer, end, len(texts))
    assert uniques == expected_uniques
    assert indices.tolist() == expected_indices.tolist()
    assert [uniques[i][:-1].decode() for i in indices] == texts


def test_more_distinct_values_than_the_first_table_holds():
    # 3 * FIRST_SLOTS distinct values: the table grows until they fit, twice over
    texts = [f"v{i % (3 * mondrian_jit.FIRST_SLOTS)}" for i in range(7 * mondrian_jit.FIRST_SLOTS)]
    buffer = b"".join(t.encode() + b"\x01" for t in texts)
    uniques, indices = mondrian_jit.factorized_marked(buffer, 1, len(texts))
    assert len(uniques) == 3 * mondrian_jit.FIRST_SLOTS
    assert [uniques[i][:-1].decode() for i in indices] == texts


@pytest.mark.parametrize("buffer, n", [(b"a\x01b\x01", 3), (b"a\x01b\x01", 1),
                                       (b"a\x01b", 2), (b"a\x01\x01b\x01", 2), (b"", 1)])
def test_a_buffer_of_another_number_of_values_is_refused(buffer, n):
    uniques, _ = mondrian_jit.factorized_marked(buffer, 1, n)
    assert uniques is None


@settings(max_examples=50, deadline=None)
@given(TEXTS)
def test_the_read_and_the_check_split_as_with_pyarrow(texts):
    text = "\x01".join(t.replace("\x01", "") for t in texts)
    n, nulls = len(texts), text.split("\x01").count("\x02")
    read = reader.TextDictionary.split_text(text, n, nulls)
    stored = class_counts._split_stored(text.encode() + b"\x01", n, "c")
    original = mondrian_jit.factorized_marked
    mondrian_jit.factorized_marked = lambda *args: None       # the pyarrow path
    try:
        read_by_pyarrow = reader.TextDictionary.split_text(text, n, nulls)
        stored_by_pyarrow = class_counts._split_stored(text.encode() + b"\x01", n, "c")
    finally:
        mondrian_jit.factorized_marked = original
    assert read[0] == read_by_pyarrow[0] and read[2] == read_by_pyarrow[2]
    assert read[1].tolist() == read_by_pyarrow[1].tolist()
    assert stored[0] == stored_by_pyarrow[0]
    assert stored[1].tolist() == stored_by_pyarrow[1].tolist()


def test_the_check_refuses_a_value_holding_its_delimiter():
    with pytest.raises(class_counts.AmbiguousTexts):
        class_counts._split_stored(b"a\x01b\x01c\x01", 2, "c")
