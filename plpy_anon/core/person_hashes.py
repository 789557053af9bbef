"""People's salted hashes (SHA-256 of a salt followed by each identifier's text, by hashlib) for
many identifiers at once, with a check for interrupts between chunks; and the stable state's
integer array texts, written by a compiled kernel (:mod:`._person_kernels`) where numba is loaded."""
from __future__ import annotations

import hashlib
import itertools

import numpy as np

from plpy_anon.core.interrupts import check as check_interrupts

#: identifiers hashed between two checks for interrupts
CHUNK = 1 << 18


def salted_sha256(prefix: bytes, texts: list[str]) -> np.ndarray:
    """(n,) ``S32``: the SHA-256 of ``prefix`` and each text's UTF-8."""
    return _hashlib(prefix, (t.encode() for t in texts), len(texts))


def salted_sha256_integers(prefix: bytes, values: np.ndarray) -> np.ndarray:
    """(n,) ``S32``: :func:`salted_sha256` of integers' texts, their decimal digits as
    PostgreSQL prints an integer column."""
    values = np.asarray(values, dtype=np.int64)
    return _hashlib(prefix, (b"%d" % v for v in values.tolist()), values.size)


def int_array_text(values: np.ndarray) -> str:
    """An integer array's SQL text (``{1,2}``; array_in reads it), written by the kernels when
    they are loaded."""
    values = np.require(values, dtype=np.int64, requirements=["C", "W"])
    kern = _kernels(values.size)
    if kern is None:
        return "{" + ",".join(map(str, values.tolist())) + "}"
    out = np.empty(21 * values.size + 2, dtype=np.uint8)
    return out[:kern.array_text(values, out)].tobytes().decode("ascii")


def _hashlib(prefix: bytes, encoded, n: int) -> np.ndarray:
    sha256 = hashlib.sha256
    out = np.empty(n, dtype="S32")
    for first in range(0, n, CHUNK):
        check_interrupts()
        out[first:first + CHUNK] = np.frombuffer(
            b"".join(sha256(prefix + e).digest() for e in itertools.islice(encoded, CHUNK)),
            dtype="S32")
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
