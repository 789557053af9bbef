"""Record fingerprints are stored in a release's state, so the numpy hashes that make them
(core.text_hashes, in numpy or by the compiled kernel) must give exactly the values pandas'
``hash_array`` gives: any text (empty, unicode, longer than SipHash's 8-byte words), NULL, in
coded columns or plain lists."""
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core import text_hashes
from plpy_anon.db.republication import Coded, record_fingerprints

# texts as PostgreSQL holds them (never a zero character), short and long, any script
TEXT = st.one_of(st.sampled_from(["", "a", "None", "é", "日本語", "\x01", "\x02", "12345678"]),
                 st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                         max_size=40))
ROWS = st.lists(st.tuples(st.none() | TEXT, st.none() | TEXT, st.none() | TEXT), max_size=30)


def pandas_fingerprints(qi_texts, sensitive_texts) -> np.ndarray:
    """Record fingerprints as pandas makes them: the oracle."""
    out = np.zeros(len(sensitive_texts), dtype=np.uint64)
    for texts in (*qi_texts, sensitive_texts):
        out = (out * np.uint64(0x100000001B3)) ^ pd.util.hash_array(np.asarray(texts, dtype=object))
    return out


def coded(texts: list) -> Coded:
    dictionary = list(dict.fromkeys(t for t in texts if t is not None))[::-1]
    position = {t: i for i, t in enumerate(dictionary)}
    return Coded(np.array([-1 if t is None else position[t] for t in texts], dtype=np.int32),
                 dictionary)


@settings(max_examples=200, deadline=None)
@given(st.lists(TEXT, unique=True, max_size=30))
def test_distinct_text_hashes_are_pandas_hash_array(texts):
    expected = pd.util.hash_array(np.asarray(texts, dtype=object), categorize=False)
    assert text_hashes.distinct_text_hashes(texts).tolist() == expected.tolist()


@settings(max_examples=200, deadline=None)
@given(st.lists(TEXT, unique=True, max_size=30))
def test_compiled_distinct_text_hashes_are_pandas_hash_array(texts):
    pytest.importorskip("numba")
    expected = pd.util.hash_array(np.asarray(texts, dtype=object), categorize=False)
    assert text_hashes.distinct_text_hashes(texts, "numba").tolist() == expected.tolist()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.none() | TEXT, max_size=30))
def test_text_hashes_with_nulls_are_pandas_hash_array(texts):
    expected = pd.util.hash_array(np.asarray(texts, dtype=object))
    assert text_hashes.text_hashes(texts).tolist() == expected.tolist()


@settings(max_examples=200, deadline=None)
@given(ROWS, st.booleans())
def test_record_fingerprints_are_those_pandas_gives(rows, as_codes):
    qis = [[r[0] for r in rows], [r[1] for r in rows]]
    sensitive = [r[2] for r in rows]
    expected = pandas_fingerprints(qis, sensitive)
    if as_codes:
        qis, sensitive = [coded(q) for q in qis], coded(sensitive)
    assert record_fingerprints(qis, sensitive).tolist() == expected.tolist()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), max_size=40), st.binary(min_size=16, max_size=16),
       st.sampled_from(["numpy", "numba"]))
def test_keyed_fingerprints_are_siphash_of_each_values_bytes_under_the_key(values, key, engine):
    """The keyed form of stored fingerprints, by numpy and by the compiled kernel, is SipHash-2-4
    under the key of each value's 8 little-endian bytes (the generic SipHash: the oracle)."""
    if engine == "numba":
        pytest.importorskip("numba")
    expected = text_hashes.siphash24([v.to_bytes(8, "little") for v in values], key)
    assert text_hashes.keyed_fingerprints(np.array(values, dtype=np.uint64), key,
                                          engine).tolist() == expected.tolist()


def test_keyed_fingerprints_differ_by_key_and_from_the_public_ones():
    values = np.arange(1000, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    one, other = (text_hashes.keyed_fingerprints(values, k) for k in (b"a" * 16, b"b" * 16))
    assert len(set(one.tolist()) & set(other.tolist())) == 0
    assert len(set(one.tolist()) & set(values.tolist())) == 0
