"""64-bit hashes of texts in numpy: the values ``pandas.util.hash_array`` gives an object array of
texts (SipHash-2-4 of each text's UTF-8 bytes under pandas' default key, then mixed), without
importing pandas (294 modules, 0.15-0.2 s of CPU in a new backend); by a compiled kernel
(core._person_kernels) where numba is loaded. Stored states hold these values keyed by the
release's salt (:func:`keyed_fingerprints`), so they must stay those of pandas
(tests/unit/test_text_hashes.py).

SipHash: J.-P. Aumasson and D. J. Bernstein, "SipHash: a fast short-input PRF", 2012."""
from __future__ import annotations

import numpy as np

from plpy_anon.core import person_hashes

#: pandas' default hash key (pandas.core.util.hashing._default_hash_key)
PANDAS_KEY = b"0123456789123456"
#: what pandas gives a missing value in a categorized array (lib.u8max)
NULL_HASH = np.uint64(np.iinfo(np.uint64).max)


def _rotl(x: np.ndarray, b: int) -> np.ndarray:
    return (x << np.uint64(b)) | (x >> np.uint64(64 - b))


def _round(v0, v1, v2, v3):
    v0 += v1
    v1 = _rotl(v1, 13)
    v1 ^= v0
    v0 = _rotl(v0, 32)
    v2 += v3
    v3 = _rotl(v3, 16)
    v3 ^= v2
    v0 += v3
    v3 = _rotl(v3, 21)
    v3 ^= v0
    v2 += v1
    v1 = _rotl(v1, 17)
    v1 ^= v2
    v2 = _rotl(v2, 32)
    return v0, v1, v2, v3


def siphash24(values: list[bytes], key: bytes = PANDAS_KEY) -> np.ndarray:
    """SipHash-2-4 of each byte string (uint64), all strings at once: those of the same number
    of 8-byte words together, zero-padded to them (numpy's fixed-width bytes), the length's low
    byte in the last word's top byte, as the algorithm reads them."""
    n = len(values)
    out = np.zeros(n, dtype=np.uint64)
    if not n:
        return out
    lengths = np.fromiter(map(len, values), dtype=np.int64, count=n)
    words = lengths // 8 + 1
    k0, k1 = (np.uint64(int.from_bytes(key[i:i + 8], "little")) for i in (0, 8))
    for count in np.unique(words).tolist():
        rows = np.flatnonzero(words == count)
        block = np.array([values[i] for i in rows.tolist()], dtype=f"S{8 * count}")
        block = block.view("<u8").reshape(rows.size, count).astype(np.uint64)
        block[:, -1] |= (lengths[rows] & 0xFF).astype(np.uint64) << np.uint64(56)
        v0 = np.full(rows.size, k0 ^ np.uint64(0x736F6D6570736575), dtype=np.uint64)
        v1 = np.full(rows.size, k1 ^ np.uint64(0x646F72616E646F6D), dtype=np.uint64)
        v2 = np.full(rows.size, k0 ^ np.uint64(0x6C7967656E657261), dtype=np.uint64)
        v3 = np.full(rows.size, k1 ^ np.uint64(0x7465646279746573), dtype=np.uint64)
        for j in range(count):
            word = block[:, j]
            v3 ^= word
            v0, v1, v2, v3 = _round(*_round(v0, v1, v2, v3))
            v0 ^= word
        v2 ^= np.uint64(0xFF)
        for _ in range(4):
            v0, v1, v2, v3 = _round(v0, v1, v2, v3)
        out[rows] = v0 ^ v1 ^ v2 ^ v3
    return out


def _mixed(hashed: np.ndarray) -> np.ndarray:
    """pandas' redistribution of 64-bit hashes (a splitmix64 finalizer)."""
    hashed ^= hashed >> np.uint64(30)
    hashed *= np.uint64(0xBF58476D1CE4E5B9)
    hashed ^= hashed >> np.uint64(27)
    hashed *= np.uint64(0x94D049BB133111EB)
    hashed ^= hashed >> np.uint64(31)
    return hashed


def distinct_text_hashes(texts, engine: str = "auto") -> np.ndarray:
    """``pandas.util.hash_array(np.asarray(texts, dtype=object), categorize=False)`` of texts
    (no None); by a compiled kernel where numba is loaded (``engine``: "numpy" never)."""
    kern = person_hashes._kernels(len(texts), engine)
    if kern is not None and len(texts):
        # the texts joined, each ended by a zero byte (PostgreSQL's texts hold none)
        data = np.frombuffer(("\x00".join(texts) + "\x00").encode("utf-8"), dtype=np.uint8)
        ends = np.flatnonzero(data == 0)
        if ends.size == len(texts):
            out = np.empty(ends.size, dtype=np.uint64)
            k0, k1 = (np.uint64(int.from_bytes(PANDAS_KEY[i:i + 8], "little")) for i in (0, 8))
            kern.siphash24(data, np.r_[0, ends[:-1] + 1], ends, k0, k1, out)
            return _mixed(out)
    return _mixed(siphash24([t.encode("utf-8") for t in texts]))


def text_hashes(texts) -> np.ndarray:
    """``pandas.util.hash_array(np.asarray(texts, dtype=object))`` of texts and None (NULL,
    :data:`NULL_HASH`): each distinct text hashed once."""
    position: dict = {}
    codes = np.fromiter((-1 if t is None else position.setdefault(t, len(position))
                         for t in texts), dtype=np.int64)
    return np.r_[distinct_text_hashes(list(position)), NULL_HASH].astype(np.uint64)[codes]


def keyed_fingerprints(values: np.ndarray, key: bytes, engine: str = "auto") -> np.ndarray:
    """SipHash-2-4 under ``key`` (16 bytes) of each 64-bit value's 8 little-endian bytes: a
    fingerprint made with a public key (:func:`text_hashes`) turned into one that nobody without
    ``key`` can compute from a guess; by a compiled kernel where numba is loaded (``engine``:
    "numpy" never)."""
    values = np.asarray(values, dtype=np.uint64)
    k0, k1 = (np.uint64(int.from_bytes(key[i:i + 8], "little")) for i in (0, 8))
    kern = person_hashes._kernels(values.size, engine)
    if kern is not None and values.size:
        data = values.astype("<u8").view(np.uint8)          # a copy: writable, contiguous
        starts = np.arange(0, data.size, 8, dtype=np.int64)
        out = np.empty(values.size, dtype=np.uint64)
        kern.siphash24(data, starts, starts + 8, k0, k1, out)
        return out
    # one word (the value), then the last word: no byte left, the length (8) on top
    v0 = np.full(values.size, k0 ^ np.uint64(0x736F6D6570736575), dtype=np.uint64)
    v1 = np.full(values.size, k1 ^ np.uint64(0x646F72616E646F6D), dtype=np.uint64)
    v2 = np.full(values.size, k0 ^ np.uint64(0x6C7967656E657261), dtype=np.uint64)
    v3 = np.full(values.size, k1 ^ np.uint64(0x7465646279746573), dtype=np.uint64)
    for word in (values.astype("<u8").astype(np.uint64), np.uint64(8 << 56)):
        v3 ^= word
        v0, v1, v2, v3 = _round(*_round(v0, v1, v2, v3))
        v0 ^= word
    v2 ^= np.uint64(0xFF)
    for _ in range(4):
        v0, v1, v2, v3 = _round(v0, v1, v2, v3)
    return v0 ^ v1 ^ v2 ^ v3

