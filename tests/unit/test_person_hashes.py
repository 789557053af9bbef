"""An integer identifier read as a number hashes as its text does (the digits PostgreSQL prints,
int64's ends included); the compiled SHA-256 gives hashlib's digests (salts and texts of every
length, so messages of one block and of several, and any number of rows beside the lanes); and
the state's integer array texts are what array_in reads, by the kernels and by numpy alike."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core import person_hashes

pytest.importorskip("numba")

SALTS = st.binary(min_size=0, max_size=40)
INTEGERS = st.lists(st.integers(-(1 << 63), (1 << 63) - 1), max_size=40)
# salts past one block of SHA-256 (64 bytes, 9 of them its padding) with the longest digits
LONG_SALTS = st.binary(min_size=0, max_size=140)
# identifier texts as PostgreSQL holds them (never a zero character), any script and length
TEXTS = st.lists(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                         max_size=150), max_size=40)


def oracle(salt: bytes, texts) -> bytes:
    return b"".join(hashlib.sha256(salt + t.encode()).digest() for t in texts)


@settings(deadline=None)
@given(SALTS, INTEGERS)
def test_hashes_of_integers_are_those_of_their_texts(salt, values):
    array = np.array(values, dtype=np.int64)
    expected = oracle(salt, [str(v) for v in values])
    assert person_hashes.salted_sha256_integers(salt, array).tobytes() == expected


@settings(deadline=None)
@given(INTEGERS)
def test_integer_array_texts_are_the_digits_array_in_reads(values):
    assert person_hashes._kernels(0, "numba") is not None      # written by the kernel
    array = np.array(values, dtype=np.int64)
    expected = "{" + ",".join(str(v) for v in values) + "}"
    assert person_hashes.int_array_text(array) == expected


@settings(deadline=None)
@given(INTEGERS)
def test_integer_array_texts_without_the_kernels_are_the_digits_array_in_reads(values):
    array = np.array(values, dtype=np.int64)
    expected = "{" + ",".join(str(v) for v in values) + "}"
    assert person_hashes.int_array_text(array, "numpy") == expected


@settings(deadline=None)
@given(LONG_SALTS, INTEGERS, TEXTS)
def test_hashes_without_the_kernels_are_hashlib_digests(salt, values, texts):
    array = np.array(values, dtype=np.int64)
    assert person_hashes.salted_sha256_integers(salt, array, "numpy").tobytes() \
        == oracle(salt, [str(v) for v in values])
    assert person_hashes.salted_sha256(salt, texts, "numpy").tobytes() == oracle(salt, texts)


@settings(deadline=None)
@given(LONG_SALTS, INTEGERS)
def test_compiled_hashes_of_integers_are_hashlib_digests(salt, values):
    array = np.array(values, dtype=np.int64)
    assert person_hashes.salted_sha256_integers(salt, array, "numba").tobytes() \
        == oracle(salt, [str(v) for v in values])


@settings(deadline=None)
@given(LONG_SALTS, TEXTS)
def test_compiled_hashes_of_texts_are_hashlib_digests(salt, texts):
    assert person_hashes.salted_sha256(salt, texts, "numba").tobytes() == oracle(salt, texts)


def test_compiled_hashes_cover_every_lane_of_many_rows():
    # more rows than a chunk of lanes, not a multiple of them, mixed numbers of blocks
    rng = np.random.default_rng(43)
    values = rng.integers(-(1 << 63), (1 << 63) - 1, 1000, dtype=np.int64)
    texts = ["x" * int(n) for n in rng.integers(0, 130, 1001)]
    salt = bytes(range(16))
    assert person_hashes.salted_sha256_integers(salt, values, "numba").tobytes() \
        == oracle(salt, [str(v) for v in values.tolist()])
    assert person_hashes.salted_sha256(salt, texts, "numba").tobytes() == oracle(salt, texts)
