"""An integer identifier read as a number hashes as its text does (the digits PostgreSQL prints,
int64's ends included), and the state's integer array texts are what array_in reads."""
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
