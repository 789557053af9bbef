"""People's salted hashes: SHA-256 of a salt followed by each identifier's text, for many
identifiers at once. On the compiled kernels (:mod:`._person_kernels`: no Python object per
identifier, integers' digits written there too); hashlib, one call per text, is their oracle and
the fallback without numba or for tables too small to load it for."""
from __future__ import annotations

import hashlib

import numpy as np

from plpy_anon.core.interrupts import check as check_interrupts

#: identifiers hashed per kernel call (interrupts are checked between calls)
CHUNK = 1 << 18


def salted_sha256(prefix: bytes, texts: list[str], engine: str = "auto") -> np.ndarray:
    """(n,) ``S32``: the SHA-256 of ``prefix`` and each text's UTF-8 (``engine``: "auto",
    "numba" or "numpy", the latter hashlib)."""
    kern = _kernels(len(texts), engine)
    if kern is None:
        return _hashlib(prefix, (t.encode() for t in texts), len(texts))
    blob = "\x00".join(texts).encode()
    ends = np.flatnonzero(np.frombuffer(blob, dtype=np.uint8) == 0)
    if ends.size != max(len(texts) - 1, 0):
        # a text holding NUL (PostgreSQL's text never does): each encoded apart
        encoded = [t.encode() for t in texts]
        blob = b"".join(encoded)
        offsets = np.zeros(len(texts) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(texts)),
                  out=offsets[1:])
    else:
        # each text's start: after the NUL before it (its offset minus the NULs before it)
        offsets = np.empty(len(texts) + 1, dtype=np.int64)
        offsets[0] = 0
        offsets[1:-1] = ends - np.arange(ends.size)
        offsets[-1] = len(blob) - ends.size
        blob = blob.replace(b"\x00", b"")
    # writeable, as the kernel is compiled for (a read-only array is another signature)
    return _run(kern, prefix, np.frombuffer(bytearray(blob), dtype=np.uint8), offsets)


def salted_sha256_integers(prefix: bytes, values: np.ndarray, engine: str = "auto") -> np.ndarray:
    """(n,) ``S32``: :func:`salted_sha256` of integers' texts, their decimal digits as
    PostgreSQL prints an integer column."""
    values = np.require(values, dtype=np.int64, requirements=["C", "W"])
    kern = _kernels(values.size, engine)
    if kern is None:
        return _hashlib(prefix, (str(v).encode() for v in values.tolist()), values.size)
    offsets = np.empty(values.size + 1, dtype=np.int64)
    blob = np.empty(20 * values.size, dtype=np.uint8)
    used = kern.decimal_texts(values, offsets, blob)
    return _run(kern, prefix, blob[:used], offsets)


def int_array_text(values: np.ndarray) -> str:
    """An integer array's SQL text (``{1,2}``; array_in reads it), written by the kernels when
    they are loaded."""
    values = np.require(values, dtype=np.int64, requirements=["C", "W"])
    kern = _kernels(values.size)
    if kern is None:
        return "{" + ",".join(map(str, values.tolist())) + "}"
    out = np.empty(21 * values.size + 2, dtype=np.uint8)
    return out[:kern.array_text(values, out)].tobytes().decode("ascii")


def _run(kern, prefix: bytes, blob: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    n = offsets.size - 1
    out = np.empty((n, 32), dtype=np.uint8)
    salt = np.frombuffer(prefix, dtype=np.uint8).copy()
    for first in range(0, n, CHUNK):
        check_interrupts()
        kern.salted_sha256(salt, blob, offsets, first, min(n, first + CHUNK), out)
    return out.view("S32").reshape(n)


def _hashlib(prefix: bytes, encoded, n: int) -> np.ndarray:
    sha256 = hashlib.sha256
    return np.frombuffer(b"".join(sha256(prefix + e).digest() for e in encoded),
                         dtype="S32").reshape(n)


_person_kernels = None


def _kernels(n_rows: int, engine: str = "auto"):
    """The compiled kernels, or None (hashlib then): without numba, with ``engine="numpy"``, or
    for ``n_rows`` too few to load numba for (core.mondrian_jit.worth_loading) with "auto"."""
    global _person_kernels
    if engine == "numpy":
        return None
    if _person_kernels is None:
        from plpy_anon.core import mondrian_jit
        if engine == "auto" and not mondrian_jit.worth_loading(n_rows):
            return None
        if mondrian_jit.kernels() is None:
            return None
        from plpy_anon.core import _person_kernels as kern
        mondrian_jit.load_cached(kern)
        _person_kernels = kern
    return _person_kernels


def warm_kernels() -> None:
    """Compile (or load) the kernels once (core.mondrian_warm, at install)."""
    if _kernels(0, "numba") is None:
        return
    salted_sha256(b"salt", ["1", "é", "x" * 70], engine="numba")
    salted_sha256_integers(b"salt", np.array([0, -5, 12]), engine="numba")
    _person_kernels.array_text(np.array([0, -5, 12]), np.empty(70, dtype=np.uint8))
