"""People's salted hashes (SHA-256 of a salt followed by each identifier's text) for many
identifiers at once, with a check for interrupts between chunks; and the stable state's integer
array texts. Both are written by compiled kernels (:mod:`._person_kernels`) where numba is loaded;
hashlib and Python's join are their oracles (tests/unit/test_person_hashes.py) and the fallback."""
from __future__ import annotations

import hashlib
import itertools

import numpy as np

from plpy_anon.core.interrupts import check as check_interrupts

#: identifiers hashed between two checks for interrupts
CHUNK = 1 << 18


def salted_sha256(prefix: bytes, texts: list[str], engine: str = "auto") -> np.ndarray:
    """(n,) ``S32``: the SHA-256 of ``prefix`` and each text's UTF-8 (``engine``: "numpy" for
    hashlib)."""
    kern = _kernels(len(texts), engine)
    if kern is not None and texts:
        # the texts joined, each ended by a zero byte (PostgreSQL's texts hold none)
        data = np.frombuffer(("\x00".join(texts) + "\x00").encode(), dtype=np.uint8)
        ends = np.flatnonzero(data == 0)
        if ends.size == len(texts):
            return _compiled(kern, prefix, data, np.r_[0, ends[:-1] + 1], ends)
    return _hashlib(prefix, (t.encode() for t in texts), len(texts))


def salted_sha256_integers(prefix: bytes, values: np.ndarray, engine: str = "auto") -> np.ndarray:
    """(n,) ``S32``: :func:`salted_sha256` of integers' texts, their decimal digits as
    PostgreSQL prints an integer column (``engine``: "numpy" for hashlib)."""
    values = np.asarray(values, dtype=np.int64)
    kern = _kernels(values.size, engine)
    if kern is None:
        # every text at once: one join and one split, no format call per value
        texts = ",".join(map(str, values.tolist())).encode().split(b",") if values.size else []
        return _hashlib(prefix, texts, values.size)
    data = np.empty(20 * values.size, dtype=np.uint8)      # int64's longest text: 20 characters
    ends = np.empty(values.size, dtype=np.int64)
    kern.integer_texts(np.ascontiguousarray(values), data, ends)
    return _compiled(kern, prefix, data, np.arange(0, data.size, 20, dtype=np.int64), ends)


def _compiled(kern, prefix: bytes, data: np.ndarray, starts: np.ndarray,
              ends: np.ndarray) -> np.ndarray:
    """(n,) ``S32``: the kernels' SHA-256 of ``prefix`` and each text ``data[starts:ends]``, the
    texts of each number of blocks together, CHUNK a call."""
    n = ends.size
    out = np.empty((n, 32), dtype=np.uint8)
    salt = np.frombuffer(prefix, dtype=np.uint8)
    # SHA-256 pads a message with at least 9 bytes to a multiple of 64
    blocks = (len(prefix) + (ends - starts) + 9 + 63) // 64
    lanes = kern.LANES
    w = np.empty((64, lanes), dtype=np.uint32)
    state, work = np.empty((8, lanes), dtype=np.uint32), np.empty((8, lanes), dtype=np.uint32)
    for count in np.unique(blocks).tolist():
        rows = np.arange(n, dtype=np.int64) if count == blocks[0] and (blocks == count).all() \
            else np.flatnonzero(blocks == count)
        message = np.empty((lanes, 64 * count), dtype=np.uint8)
        for first in range(0, rows.size, CHUNK):
            check_interrupts()
            kern.salted_sha256(salt, data, starts, ends, rows[first:first + CHUNK], count, out,
                               message, w, state, work)
    return out.view("S32").ravel()


def int_array_text(values: np.ndarray, engine: str = "auto") -> str:
    """An integer array's SQL text (``{1,2}``; array_in reads it), written by the kernels when
    they are loaded, else by numpy (``engine``: "numpy" never the kernels)."""
    values = np.require(values, dtype=np.int64, requirements=["C", "W"])
    kern = _kernels(values.size, engine)
    if kern is None:
        return _digits_text(values)
    out = np.empty(21 * values.size + 2, dtype=np.uint8)
    return out[:kern.array_text(values, out)].tobytes().decode("ascii")


def _digits_text(values: np.ndarray) -> str:
    """:func:`int_array_text` in numpy: each value's digits written a decimal place at a time
    for all values at once, right-aligned in a row of bytes whose unused leading bytes are
    dropped (a Python str per value costs ~10x more)."""
    if not values.size:
        return "{}"
    negative = values < 0
    magnitude = values.view(np.uint64).copy()
    magnitude[negative] = ~magnitude[negative] + np.uint64(1)     # int64's least included
    largest = int(magnitude.max())
    width = len(str(largest))
    if largest < 1 << 32:                   # a narrower type divides faster
        magnitude = magnitude.astype(np.uint32)
    # a row: a sign, the digits, a comma; 0 marks a byte left out
    rows = np.zeros((values.size, width + 2), dtype=np.uint8)
    length = np.zeros(values.size, dtype=np.int64)          # digits written so far
    rest, ten = magnitude, magnitude.dtype.type(10)
    for place in range(width):
        written = (rest > 0) | (place == 0)                  # 0 has one digit
        quotient = rest // ten
        rows[:, width - place] = np.where(written, 48 + (rest - quotient * ten).astype(np.uint8), 0)
        length += written
        rest = quotient
    signed = np.flatnonzero(negative)
    rows[signed, width - length[signed]] = 45                                 # "-"
    rows[:, width + 1] = 44                                                  # ","
    flat = rows.ravel()
    return "{" + flat[flat != 0].tobytes()[:-1].decode("ascii") + "}"


def _hashlib(prefix: bytes, encoded, n: int) -> np.ndarray:
    # each digest continues a copy of the salt's hash: a new hash object costs twice a copy
    salted = hashlib.sha256(prefix)
    out = np.empty(n, dtype="S32")
    encoded = iter(encoded)
    for first in range(0, n, CHUNK):
        check_interrupts()
        digests = []
        for e in itertools.islice(encoded, CHUNK):
            h = salted.copy()
            h.update(e)
            digests.append(h.digest())
        out[first:first + CHUNK] = np.frombuffer(b"".join(digests), dtype="S32")
    return out


def _kernels(n_rows: int, engine: str = "auto"):
    """The compiled kernels, or None (Python then): without numba, with ``engine="numpy"``, or
    for ``n_rows`` too few to load numba for (core.mondrian_jit.loaded) with "auto"."""
    if engine == "numpy":
        return None
    from plpy_anon.core import mondrian_jit
    return mondrian_jit.loaded("_person_kernels", n_rows if engine == "auto" else None)


def warm_kernels() -> None:
    """Compile (or load) the kernels once (core.mondrian_warm, at install)."""
    kern = _kernels(0, "numba")
    if kern is not None:
        kern.array_text(np.array([0, -5, 12]), np.empty(70, dtype=np.uint8))
        salted_sha256_integers(b"salt", np.array([0, -5, 12]), "numba")
        salted_sha256(b"salt", ["a", "b"], "numba")
        from plpy_anon.core import text_hashes
        text_hashes.distinct_text_hashes(["a", "bc"], "numba")
        # hashes read from a state's rows are read-only arrays, others writable: both compiled
        for stored_writable, asked_writable in itertools.product((True, False), repeat=2):
            stored, asked = np.zeros((1, 4), dtype=np.uint64), np.zeros((1, 4), dtype=np.uint64)
            stored.setflags(write=stored_writable)
            asked.setflags(write=asked_writable)
            kern.find_sorted(np.zeros(1, dtype=np.uint64), stored, np.array([0, 1, 1], dtype=np.int64),
                             63, np.zeros(1, dtype=np.uint64), asked, np.empty(1, dtype=np.int64))
