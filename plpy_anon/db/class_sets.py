"""Class literals ``{e,e,...}`` (a sensitive column's arrays, a QI's value sets) written by a
compiled kernel straight into the packed bytes a release's slice hands SQL
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

    def write(self, separator: str) -> bytes:
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
