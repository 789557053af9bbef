"""Adversarial: the separator of a slice's packed class literals. The joined literals
(generalization.pack_literals given a list) choose it among the characters the slice's own
literals do not hold; the compiled writer (class_sets.ClassSets) among those its column's whole
table of elements does not hold. A column whose values, all slices together, hold every
character a server encoding other than UTF-8 may be separated by (ASCII 1-127) while each slice
leaves some free, is then refused (54000) by the compiled writer where the joined literals of
the very same slice pack. In a database, a slice of a release is 2^20 rows in memory and 2^18
rows of an out-of-core region, so the refusal needs a column over that many rows."""
from __future__ import annotations

import numpy as np
import pytest

from plpy_anon.core import mondrian_jit
from plpy_anon.db import class_sets, stored_classes
from plpy_anon.db.generalization import pack_literals


def _two_classes_splitting_ascii():
    """Elements of ASCII 1-127 (each once), class 0 the first half, class 1 the rest."""
    entries = [chr(c) for c in range(1, 128)]
    elements = stored_classes.array_elements(entries)
    codes = np.arange(len(entries), dtype=np.int64)
    order = np.arange(len(entries), dtype=np.int64)
    bounds = np.array([0, 63, len(entries)], dtype=np.int64)
    return elements, codes, order, bounds


@pytest.mark.xfail(strict=True, reason="the compiled writer's separator is chosen among the "
                   "characters of the column's whole element table, not the slice's literals: "
                   "a slice the joined literals pack is refused (NoSeparator, 54000)")
def test_compiled_literals_of_a_slice_pack_wherever_the_joined_literals_do():
    kernels = mondrian_jit.kernels()
    if kernels is None:
        pytest.skip("numba cannot be imported")
    elements, codes, order, bounds = _two_classes_splitting_ascii()
    table = class_sets.EntryTable(elements, kernels.write_class_sets)
    for first, last in [(0, 1), (1, 2)]:          # each class its own slice
        joined = stored_classes.array_literals(codes, elements, order, bounds, first, last)
        packed, marks = pack_literals(joined, any_character=False)   # the joined ones pack
        assert packed.decode().split(marks[0])[1:] == joined
        assert all(marks[0] not in literal for literal in joined)
        written = stored_classes.array_literals(codes, table, order, bounds, first, last)
        packed_written, marks_written = pack_literals(written, any_character=False)
        assert packed_written.decode().split(marks_written[0])[1:] == joined
