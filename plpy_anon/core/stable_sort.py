"""Stable argsort of integer codes by 16-bit radix passes, interruptible: the sort both Mondrian
fits (numpy, :mod:`.mondrian`; compiled, :mod:`.mondrian_jit`) order rows by."""
from __future__ import annotations

import numpy as np

from plpy_anon.core.interrupts import check as check_interrupts

SORT_CHUNK = 1 << 20   # keys per chunk of a large sort (argsort16)


def stable_argsort(codes):
    """Stable argsort as int32 by 16-bit radix passes (numpy radix-sorts 16-bit keys, and two
    passes over int32 codes beat its merge sort by ~2.5x)."""
    if codes.dtype == np.uint16:
        return argsort16(codes)
    order = argsort16((codes & 0xFFFF).astype(np.uint16))
    check_interrupts()
    high = (codes >> 16).astype(np.uint16)
    return order[argsort16(high[order])]


def argsort16(keys):
    """Stable argsort (int32) of uint16 keys; above ``SORT_CHUNK`` keys a counting sort over
    chunks, each sorted by numpy, checking for interrupts between chunks (one numpy sort of 10M
    keys is seconds that nothing interrupts)."""
    n = keys.size
    if n <= SORT_CHUNK:
        return np.argsort(keys, kind="stable").astype(np.int32)
    offset = np.zeros(1 << 16, dtype=np.int64)
    for lo in range(0, n, SORT_CHUNK):
        offset += np.bincount(keys[lo:lo + SORT_CHUNK], minlength=1 << 16)
    offset = np.cumsum(offset) - offset          # first position of each key
    out = np.empty(n, dtype=np.int32)
    for lo in range(0, n, SORT_CHUNK):
        check_interrupts()
        chunk = keys[lo:lo + SORT_CHUNK]
        order = np.argsort(chunk, kind="stable")
        ordered = chunk[order]
        start = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        rank = np.arange(ordered.size) - np.repeat(start, np.diff(np.r_[start, ordered.size]))
        out[offset[ordered] + rank] = order + lo
        offset += np.bincount(chunk, minlength=1 << 16)
    return out
