"""The people's salted hashes on the compiled kernels are hashlib's SHA-256 of the salt and each
identifier's text, byte for byte: texts of any length (one block, the padding's edge at 55 and 56
bytes, several blocks) and script, integers at int64's ends printed as PostgreSQL prints them."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core import person_hashes

pytest.importorskip("numba")

SALTS = st.binary(min_size=0, max_size=40)
# PostgreSQL's text holds no NUL
TEXTS = st.lists(st.text(st.characters(blacklist_characters="\x00"), max_size=150), max_size=40)
INTEGERS = st.lists(st.integers(-(1 << 63), (1 << 63) - 1), max_size=40)


def oracle(salt: bytes, texts) -> bytes:
    return b"".join(hashlib.sha256(salt + t.encode()).digest() for t in texts)


@settings(deadline=None)
@given(SALTS, TEXTS)
def test_compiled_hashes_of_texts_are_hashlibs(salt, texts):
    out = person_hashes.salted_sha256(salt, texts, engine="numba")
    assert out.dtype == np.dtype("S32") and out.shape == (len(texts),)
    assert out.tobytes() == oracle(salt, texts)
    assert person_hashes.salted_sha256(salt, texts, engine="numpy").tobytes() == oracle(salt, texts)


@settings(deadline=None)
@given(SALTS, INTEGERS)
def test_compiled_hashes_of_integers_are_hashlibs_of_their_digits(salt, values):
    array = np.array(values, dtype=np.int64)
    expected = oracle(salt, [str(v) for v in values])
    assert person_hashes.salted_sha256_integers(salt, array, engine="numba").tobytes() == expected
    assert person_hashes.salted_sha256_integers(salt, array, engine="numpy").tobytes() == expected


def test_every_padding_length_around_the_block_edges():
    salt = bytes(range(16))
    texts = ["x" * n for n in range(140)] + ["é" * n for n in range(70)]
    assert person_hashes.salted_sha256(salt, texts, engine="numba").tobytes() == oracle(salt, texts)


def test_a_text_holding_nul_is_hashed_as_it_is():
    salt = b"s" * 16
    texts = ["a\x00b", "", "\x00"]
    assert person_hashes.salted_sha256(salt, texts, engine="numba").tobytes() == oracle(salt, texts)


@settings(deadline=None)
@given(INTEGERS)
def test_integer_array_texts_are_the_digits_array_in_reads(values):
    assert person_hashes._kernels(0, "numba") is not None      # written by the kernel
    array = np.array(values, dtype=np.int64)
    expected = "{" + ",".join(str(v) for v in values) + "}"
    assert person_hashes.int_array_text(array) == expected
