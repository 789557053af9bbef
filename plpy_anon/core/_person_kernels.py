"""Compiled (numba) kernel of the stable state's integer array texts; imported only through
:func:`plpy_anon.core.person_hashes._kernels`, which points numba's cache where the Mondrian
kernels' is (:mod:`.mondrian_jit`)."""
from __future__ import annotations

import numpy as np
from numba import njit


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



# SHA-256 (FIPS 180-4) of a salt followed by each identifier's text, as hashlib gives it, for
# LANES messages at once: each step of the algorithm runs over the lanes in an inner loop, which
# the compiler turns into vector instructions (multi-buffer hashing)
LANES = 16
_K = np.array([
    0x428A2F98, 0x71374491, 0xB5C0FBCF, 0xE9B5DBA5, 0x3956C25B, 0x59F111F1, 0x923F82A4, 0xAB1C5ED5,
    0xD807AA98, 0x12835B01, 0x243185BE, 0x550C7DC3, 0x72BE5D74, 0x80DEB1FE, 0x9BDC06A7, 0xC19BF174,
    0xE49B69C1, 0xEFBE4786, 0x0FC19DC6, 0x240CA1CC, 0x2DE92C6F, 0x4A7484AA, 0x5CB0A9DC, 0x76F988DA,
    0x983E5152, 0xA831C66D, 0xB00327C8, 0xBF597FC7, 0xC6E00BF3, 0xD5A79147, 0x06CA6351, 0x14292967,
    0x27B70A85, 0x2E1B2138, 0x4D2C6DFC, 0x53380D13, 0x650A7354, 0x766A0ABB, 0x81C2C92E, 0x92722C85,
    0xA2BFE8A1, 0xA81A664B, 0xC24B8B70, 0xC76C51A3, 0xD192E819, 0xD6990624, 0xF40E3585, 0x106AA070,
    0x19A4C116, 0x1E376C08, 0x2748774C, 0x34B0BCB5, 0x391C0CB3, 0x4ED8AA4A, 0x5B9CCA4F, 0x682E6FF3,
    0x748F82EE, 0x78A5636F, 0x84C87814, 0x8CC70208, 0x90BEFFFA, 0xA4506CEB, 0xBEF9A3F7, 0xC67178F2],
    dtype=np.uint32)
_H0 = np.array([0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C,
                0x1F83D9AB, 0x5BE0CD19], dtype=np.uint32)


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _rotr(x, n):
    return np.uint32((x >> np.uint32(n)) | (x << np.uint32(32 - n)))


@njit(cache=True, nogil=True, _nrt=False)
def _compress_lanes(w, state, work):
    """One block of each lane (``w[:16]``: its big-endian words; ``w``: 64 x LANES) into
    ``state`` (8 x LANES); ``work``: 8 x LANES."""
    for t in range(16, 64):
        for j in range(LANES):
            x, y = w[t - 15, j], w[t - 2, j]
            s0 = _rotr(x, 7) ^ _rotr(x, 18) ^ (x >> np.uint32(3))
            s1 = _rotr(y, 17) ^ _rotr(y, 19) ^ (y >> np.uint32(10))
            w[t, j] = np.uint32(w[t - 16, j] + s0 + w[t - 7, j] + s1)
    for i in range(8):
        for j in range(LANES):
            work[i, j] = state[i, j]
    for t in range(64):
        k = _K[t]
        for j in range(LANES):
            a, b, c, d = work[0, j], work[1, j], work[2, j], work[3, j]
            e, f, g, h = work[4, j], work[5, j], work[6, j], work[7, j]
            t1 = np.uint32(h + (_rotr(e, 6) ^ _rotr(e, 11) ^ _rotr(e, 25)) + ((e & f) ^ (~e & g))
                           + k + w[t, j])
            t2 = np.uint32((_rotr(a, 2) ^ _rotr(a, 13) ^ _rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c)))
            work[7, j], work[6, j], work[5, j], work[4, j] = g, f, e, np.uint32(d + t1)
            work[3, j], work[2, j], work[1, j], work[0, j] = c, b, a, np.uint32(t1 + t2)
    for i in range(8):
        for j in range(LANES):
            state[i, j] = np.uint32(state[i, j] + work[i, j])


@njit(cache=True, nogil=True, _nrt=False)
def salted_sha256(prefix, data, starts, ends, rows, blocks, out, message, w, state, work):
    """``out[r]``: SHA-256 of ``prefix`` and ``data[starts[r]:ends[r]]`` for each ``r`` of
    ``rows``, every one of which pads to ``blocks`` blocks of 64 bytes (``message``: LANES x
    64 * ``blocks`` bytes; ``w``: 64 x LANES words; ``state``, ``work``: 8 x LANES)."""
    p = prefix.size
    size = 64 * blocks
    for first in range(0, rows.size, LANES):
        lanes = min(LANES, rows.size - first)
        for j in range(LANES):
            r = rows[first + min(j, lanes - 1)]        # idle lanes repeat the last message
            n = p + ends[r] - starts[r]
            for i in range(p):
                message[j, i] = prefix[i]
            for i in range(ends[r] - starts[r]):
                message[j, p + i] = data[starts[r] + i]
            message[j, n] = 0x80
            for i in range(n + 1, size - 8):
                message[j, i] = 0
            bits = np.uint64(n) * np.uint64(8)
            for i in range(8):
                message[j, size - 1 - i] = np.uint8((bits >> np.uint64(8 * i)) & np.uint64(0xFF))
            for i in range(8):
                state[i, j] = _H0[i]
        for block in range(blocks):
            for j in range(LANES):
                for t in range(16):
                    at = 64 * block + 4 * t
                    w[t, j] = (np.uint32(message[j, at]) << np.uint32(24)) \
                        | (np.uint32(message[j, at + 1]) << np.uint32(16)) \
                        | (np.uint32(message[j, at + 2]) << np.uint32(8)) | np.uint32(message[j, at + 3])
            _compress_lanes(w, state, work)
        for j in range(lanes):
            r = rows[first + j]
            for i in range(8):
                x = state[i, j]
                out[r, 4 * i] = np.uint8(x >> np.uint32(24))
                out[r, 4 * i + 1] = np.uint8((x >> np.uint32(16)) & np.uint32(0xFF))
                out[r, 4 * i + 2] = np.uint8((x >> np.uint32(8)) & np.uint32(0xFF))
                out[r, 4 * i + 3] = np.uint8(x & np.uint32(0xFF))


@njit(cache=True, nogil=True, _nrt=False)
def integer_texts(values, data, ends):
    """Each integer's decimal digits (as PostgreSQL prints it, "-" first when negative) into
    ``data``, 20 bytes a value from ``20 * i`` on; ``ends[i]``: where value ``i``'s end."""
    for row in range(values.size):
        v = values[row]
        at = 20 * row
        if v < 0:
            data[at] = 45                       # "-"
            at += 1
            m = np.uint64(-(v + 1)) + np.uint64(1)
        else:
            m = np.uint64(v)
        n = 0                                   # the digits, last first, then turned around
        while True:
            data[at + n] = np.uint8(48 + m % np.uint64(10))
            m = m // np.uint64(10)
            n += 1
            if m == np.uint64(0):
                break
        for j in range(n // 2):
            data[at + j], data[at + n - 1 - j] = data[at + n - 1 - j], data[at + j]
        ends[row] = at + n


# SipHash-2-4 (J.-P. Aumasson and D. J. Bernstein, "SipHash: a fast short-input PRF", 2012) of
# texts, the hash core.text_hashes computes in numpy for records' fingerprints


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _rotl(x, b):
    return (x << np.uint64(b)) | (x >> np.uint64(64 - b))


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _sip_rounds(v0, v1, v2, v3, rounds):
    for _ in range(rounds):
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


@njit(cache=True, nogil=True, _nrt=False)
def siphash24(data, starts, ends, k0, k1, out):
    """``out[i]``: SipHash-2-4 under the key (``k0``, ``k1``) of ``data[starts[i]:ends[i]]``."""
    for row in range(ends.size):
        v0 = k0 ^ np.uint64(0x736F6D6570736575)
        v1 = k1 ^ np.uint64(0x646F72616E646F6D)
        v2 = k0 ^ np.uint64(0x6C7967656E657261)
        v3 = k1 ^ np.uint64(0x7465646279746573)
        start, n = starts[row], ends[row] - starts[row]
        full = n // 8
        for i in range(full + 1):
            word = np.uint64(0)
            if i < full:
                for j in range(8):
                    word |= np.uint64(data[start + 8 * i + j]) << np.uint64(8 * j)
            else:                   # the last bytes, the length's low byte on top
                for j in range(n - 8 * full):
                    word |= np.uint64(data[start + 8 * i + j]) << np.uint64(8 * j)
                word |= np.uint64(n & 0xFF) << np.uint64(56)
            v3 ^= word
            v0, v1, v2, v3 = _sip_rounds(v0, v1, v2, v3, 2)
            v0 ^= word
        v2 ^= np.uint64(0xFF)
        v0, v1, v2, v3 = _sip_rounds(v0, v1, v2, v3, 4)
        out[row] = v0 ^ v1 ^ v2 ^ v3


# people found by their hashes in a stored state (sorted): SHA-256 spreads hashes evenly, so
# their first 8 bytes' top bits pick a bucket of a few stored hashes


@njit(cache=True, nogil=True, _nrt=False)
def find_sorted(stored_first, stored_words, starts, shift, asked_first, asked_words, out):
    """``out[i]``: the position in the stored hashes (``stored_first``: their first 8 bytes as
    big-endian integers, ascending; ``stored_words``: each hash as 4 words) of asked hash ``i``
    (likewise), -1 where it is not stored; ``starts[b]``: the first stored hash whose first
    integer's top bits (``>> shift``) are ``b`` or more."""
    for i in range(asked_first.size):
        key = asked_first[i]
        bucket = key >> np.uint64(shift)
        out[i] = -1
        for j in range(starts[bucket], starts[bucket + 1]):
            if stored_first[j] > key:
                break
            if stored_first[j] == key and stored_words[j, 0] == asked_words[i, 0] \
                    and stored_words[j, 1] == asked_words[i, 1] \
                    and stored_words[j, 2] == asked_words[i, 2] \
                    and stored_words[j, 3] == asked_words[i, 3]:
                out[i] = j
                break
