"""Compiled (numba) kernels of the people's salted hashes (SHA-256, FIPS 180-4); imported only
through :func:`plpy_anon.core.person_hashes._kernels`, which points numba's cache where the Mondrian
kernels' is (:mod:`.mondrian_jit`). hashlib is their oracle (tests/unit/test_person_hashes.py).

Words are held in int64 (each below 2**32, masked after every sum): numba types unsigned
arithmetic mixed with signed as floats, and no sum of five words reaches 2**63."""
from __future__ import annotations

import numpy as np
from numba import njit

#: the first 32 bits of the fractional parts of the cube roots of the first 64 primes
ROUND_CONSTANTS = np.array([
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
], dtype=np.int64)
#: the first 32 bits of the fractional parts of the square roots of the first 8 primes
INITIAL = np.array([0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c,
                    0x1f83d9ab, 0x5be0cd19], dtype=np.int64)
MASK = 0xFFFFFFFF


@njit(cache=True, nogil=True)
def _rotr(x, n):
    return ((x >> n) | (x << (32 - n))) & MASK


@njit(cache=True, nogil=True)
def _compress(h, message, at, w, k):
    """The 64-byte block of ``message`` from ``at`` into the state ``h`` (8 words); ``w``: 64
    words of scratch."""
    for t in range(16):
        j = at + 4 * t
        w[t] = (np.int64(message[j]) << 24) | (np.int64(message[j + 1]) << 16) \
            | (np.int64(message[j + 2]) << 8) | np.int64(message[j + 3])
    for t in range(16, 64):
        x, y = w[t - 15], w[t - 2]
        s0 = _rotr(x, 7) ^ _rotr(x, 18) ^ (x >> 3)
        s1 = _rotr(y, 17) ^ _rotr(y, 19) ^ (y >> 10)
        w[t] = (w[t - 16] + s0 + w[t - 7] + s1) & MASK
    a, b, c, d, e, f, g, hh = h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]
    for t in range(64):
        s1 = _rotr(e, 6) ^ _rotr(e, 11) ^ _rotr(e, 25)
        ch = (e & f) ^ ((e ^ MASK) & g)
        t1 = (hh + s1 + ch + k[t] + w[t]) & MASK
        s0 = _rotr(a, 2) ^ _rotr(a, 13) ^ _rotr(a, 22)
        maj = (a & b) ^ (a & c) ^ (b & c)
        t2 = (s0 + maj) & MASK
        hh, g, f, e, d, c, b, a = g, f, e, (d + t1) & MASK, c, b, a, (t1 + t2) & MASK
    h[0] = (h[0] + a) & MASK
    h[1] = (h[1] + b) & MASK
    h[2] = (h[2] + c) & MASK
    h[3] = (h[3] + d) & MASK
    h[4] = (h[4] + e) & MASK
    h[5] = (h[5] + f) & MASK
    h[6] = (h[6] + g) & MASK
    h[7] = (h[7] + hh) & MASK


@njit(cache=True, nogil=True)
def salted_sha256(prefix, blob, offsets, first, last, out):
    """SHA-256 of ``prefix`` followed by text ``i`` (``blob[offsets[i]:offsets[i + 1]]``), for
    ``i`` in [first, last), into row ``i`` of ``out`` ((n, 32) uint8)."""
    k, initial = ROUND_CONSTANTS, INITIAL
    p = prefix.size
    longest = 0
    for i in range(first, last):
        longest = max(longest, offsets[i + 1] - offsets[i])
    message = np.zeros(p + longest + 72, dtype=np.uint8)
    message[:p] = prefix
    w = np.zeros(64, dtype=np.int64)
    h = np.zeros(8, dtype=np.int64)
    for i in range(first, last):
        start = offsets[i]
        length = p + offsets[i + 1] - start
        # the message, a one bit (0x80), zeros, and its length in bits (8 bytes, big-endian)
        message[p:length] = blob[start:offsets[i + 1]]
        end = (length + 9 + 63) // 64 * 64
        message[length] = 0x80
        message[length + 1:end - 8] = 0
        bits = length * 8
        for j in range(8):
            message[end - 1 - j] = (bits >> (8 * j)) & 0xFF
        h[:] = initial
        for at in range(0, end, 64):
            _compress(h, message, at, w, k)
        for j in range(8):
            out[i, 4 * j] = (h[j] >> 24) & 0xFF
            out[i, 4 * j + 1] = (h[j] >> 16) & 0xFF
            out[i, 4 * j + 2] = (h[j] >> 8) & 0xFF
            out[i, 4 * j + 3] = h[j] & 0xFF


@njit(cache=True, nogil=True)
def decimal_texts(values, offsets, blob):
    """Each integer's decimal digits (a minus sign first below zero), as Python and PostgreSQL
    print it: ``offsets`` (n + 1) filled, then ``blob`` (at least 20 bytes a value) written;
    returns the bytes written."""
    digits = np.zeros(20, dtype=np.uint8)
    at = 0
    offsets[0] = 0
    for i in range(values.size):
        v = values[i]
        if v < 0:
            blob[at] = 45                       # "-"
            at += 1
            # the magnitude, without negating the smallest int64
            m = np.uint64(-(v + 1)) + np.uint64(1)
        else:
            m = np.uint64(v)
        n = 0
        while True:
            digits[n] = np.uint8(48 + m % np.uint64(10))
            m = m // np.uint64(10)
            n += 1
            if m == np.uint64(0):
                break
        for j in range(n):
            blob[at + j] = digits[n - 1 - j]
        at += n
        offsets[i + 1] = at
    return at


@njit(cache=True, nogil=True)
def array_text(values, out):
    """An integer array's SQL text, ``{1,-2,3}``, into ``out`` (at least 21 bytes a value and
    2); returns the bytes written."""
    digits = np.zeros(20, dtype=np.uint8)
    out[0] = 123                                # "{"
    at = 1
    for i in range(values.size):
        if i:
            out[at] = 44                        # ","
            at += 1
        v = values[i]
        if v < 0:
            out[at] = 45                        # "-"
            at += 1
            m = np.uint64(-(v + 1)) + np.uint64(1)
        else:
            m = np.uint64(v)
        n = 0
        while True:
            digits[n] = np.uint8(48 + m % np.uint64(10))
            m = m // np.uint64(10)
            n += 1
            if m == np.uint64(0):
                break
        for j in range(n):
            out[at + j] = digits[n - 1 - j]
        at += n
    out[at] = 125                               # "}"
    return at + 1
