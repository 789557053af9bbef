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
