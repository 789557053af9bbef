"""Class literals ``{e,e,...}`` (a sensitive column's arrays, a QI's value sets) and range
literals ``[lo,hi]`` (a ranged QI's) written by a compiled kernel straight into the packed bytes a release's slice hands SQL
(generalization.pack_literals), instead of one Python join per class (~0.05 s per million
elements). Used where the Mondrian kernels run the release's fit (core.mondrian_jit); elsewhere
the literals are joined in Python, to the same bytes."""
from __future__ import annotations

import itertools

import numpy as np

from plpy_anon.core import mondrian_jit


class EntryTable:
    """The elements of a column's class literals (``entries``: texts, as array_in reads them)
    as one UTF-8 buffer, for the compiled writer of :class:`ClassSets` (``kernel``)."""

    def __init__(self, entries, kernel):
        self.entries = np.asarray(entries, dtype=object)
        encoded = [e.encode() for e in self.entries.tolist()]
        self.lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        self.offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum(self.lengths, out=self.offsets[1:])
        # writable, C-ordered int64 / uint8 arrays: the one signature the install compiles
        self.table = np.frombuffer(b"".join(encoded) or b"\0", dtype=np.uint8).copy()
        self.kernel = kernel


def entry_table(entries, n_rows: int):
    """An :class:`EntryTable` of ``entries`` when the compiled kernels run this release's fit
    (loaded, or worth loading for ``n_rows``: core.mondrian_jit), else ``entries`` as they are
    (the literals are then joined in Python)."""
    kern = mondrian_jit.kernels() if mondrian_jit.worth_loading(n_rows) else None
    return entries if kern is None else EntryTable(entries, kern.write_class_sets)


def range_writer(n_rows: int):
    """The compiled writer of range literals (:class:`ClassRanges`) when the kernels run this
    release's fit (as :func:`entry_table`), else None (the literals are then joined in
    Python)."""
    kern = mondrian_jit.kernels() if mondrian_jit.worth_loading(n_rows) else None
    return None if kern is None else kern.write_range_literals


class ClassSets:
    """The literals of classes ``first`` to ``last`` (exclusive) of a slice, class ``c`` the
    entries ``tokens[bounds[c] - bounds[first]:bounds[c + 1] - bounds[first]]`` of ``table``:
    ``held`` and ``write(separator)`` for generalization.pack_literals; iterating gives them as
    texts."""

    def __init__(self, table: EntryTable, tokens, bounds, first: int, last: int):
        # entry -1 (a NULL) is the table's last, as numpy's indexing reads it
        self.tokens = np.where(tokens < 0, table.offsets.size - 2, tokens).astype(np.int64)
        self.table, self.bounds = table, np.ascontiguousarray(bounds, dtype=np.int64)
        self.first, self.last = first, last
        # the characters of this slice's entries only, as the joined literals see them (a
        # region's table also holds labels of values it does not hold)
        used = np.zeros(table.offsets.size - 1, dtype=bool)
        used[self.tokens] = True
        self.held = "".join(table.entries[used].tolist()) + "{},"

    def write(self, separator: str, null: str | None = None) -> bytes:
        """The packed literals after ``separator`` (``null``: unused, a set is never NULL)."""
        sep = np.frombuffer(separator.encode(), dtype=np.uint8).copy()
        sizes = np.diff(self.bounds[self.first:self.last + 1])
        size = (int(sizes.size) * (sep.size + 2) + int(self.table.lengths[self.tokens].sum())
                + int(self.tokens.size) - int(np.count_nonzero(sizes)))
        out = np.empty(size, dtype=np.uint8)
        written = self.table.kernel(self.tokens, self.bounds, self.first, self.last,
                                    self.table.table, self.table.offsets, sep, out)
        assert written == size, (written, size)
        return out.tobytes()

    def __iter__(self):
        texts = self.table.entries[self.tokens].tolist()
        edges = (self.bounds[self.first:self.last + 1] - self.bounds[self.first]).tolist()
        return ("{" + ",".join(texts[a:b]) + "}" for a, b in itertools.pairwise(edges))



#: the kinds of range literal (core._mondrian_kernels.write_range_literals)
RANGE_CLOSED, RANGE_OPEN, RANGE_NULL = 0, 1, 2
#: the longest bound spelled in digits: int8's minimum
_DIGITS_MAX = len(str(np.iinfo(np.int64).min))


class RangeBounds:
    """Every class's range literal as stored_classes.range_literals spells it, for the compiled
    writer of :class:`ClassRanges` (``kernel``: ``write_range_literals``): ``low`` and ``high``
    the bounds, int64 numbers written in digits (``texts`` None) or numbers of their texts in
    ``texts``; ``kinds`` RANGE_CLOSED ``[lo,hi]``, RANGE_OPEN ``[lo,)`` or RANGE_NULL."""

    def __init__(self, kernel, low, high, kinds, texts=None):
        self.kernel = kernel
        self.low, self.high = (np.ascontiguousarray(b, dtype=np.int64) for b in (low, high))
        self.kinds = np.ascontiguousarray(kinds, dtype=np.int64)
        self.texts = texts
        if texts is None:
            self.table, self.offsets = np.zeros(1, dtype=np.uint8), np.zeros(1, dtype=np.int64)
            self.widest, self.held = _DIGITS_MAX, "0123456789-[],)"
        else:
            encoded = [t.encode() for t in texts]
            self.offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
            np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)),
                      out=self.offsets[1:])
            self.table = np.frombuffer(b"".join(encoded) or b"\0", dtype=np.uint8).copy()
            self.widest = max(map(len, encoded), default=0)
            self.held = "".join(texts) + "[],)"

    def bound(self, value: int) -> str:
        return str(value) if self.texts is None else self.texts[value]


class ClassRanges:
    """The range literals of classes ``first`` to ``last`` (exclusive) of a slice
    (:class:`RangeBounds`): ``held`` and ``write(separator, null)`` for
    generalization.pack_literals; iterating gives them as texts (None: NULL)."""

    def __init__(self, bounds: RangeBounds, first: int, last: int):
        self.bounds, self.first, self.last = bounds, first, last
        self.held = bounds.held

    def write(self, separator: str, null: str) -> bytes:
        b = self.bounds
        sep = np.frombuffer(separator.encode(), dtype=np.uint8).copy()
        mark = np.frombuffer(null.encode(), dtype=np.uint8).copy()
        size = (self.last - self.first) * (sep.size + max(mark.size, 3 + 2 * b.widest))
        out = np.empty(size, dtype=np.uint8)
        written = b.kernel(b.low, b.high, b.kinds, self.first, self.last, int(b.texts is None),
                           b.table, b.offsets, sep, mark, out)
        return out[:written].tobytes()

    def __iter__(self):
        b = self.bounds
        for c in range(self.first, self.last):
            kind = int(b.kinds[c])
            if kind == RANGE_NULL:
                yield None
            elif kind == RANGE_OPEN:
                yield f"[{b.bound(int(b.low[c]))},)"
            else:
                yield f"[{b.bound(int(b.low[c]))},{b.bound(int(b.high[c]))}]"
