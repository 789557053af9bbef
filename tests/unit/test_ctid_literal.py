"""The ``tid[]`` literal a partitioning run hands back to SQL, across slice boundaries."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.db import reader
from plpy_anon.db.reader import TID_DTYPE, TableData


def table(pairs) -> TableData:
    tids = np.array(pairs, dtype=[("block", "u4"), ("offset", "u2")]).astype(TID_DTYPE)
    return TableData(len(pairs), tids)


@settings(max_examples=60, deadline=None)
@given(pairs=st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 2**16 - 1)),
                      max_size=40),
       slice_size=st.integers(1, 7), reverse=st.booleans())
def test_literal_lists_every_ctid_in_order_whatever_the_slices(pairs, slice_size, reverse):
    data = table(pairs)
    order = np.arange(len(pairs))[::-1] if reverse else None
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reader, "LITERAL_SLICE", slice_size)
        literal = data.ctid_literal(order)
        as_bytes = data.ctid_literal_bytes(order)
    expected = pairs[::-1] if reverse else pairs
    assert literal == "{" + ",".join(f'"({b},{o})"' for b, o in expected) + "}"
    assert as_bytes == literal.encode("ascii")      # the bytea field's content, the same text


@pytest.mark.parametrize("n", [0, 1, 3])
def test_literal_of_few_rows(n):
    data = table([(7, i + 1) for i in range(n)])
    assert data.ctid_literal() == "{" + ",".join(f'"(7,{i + 1})"' for i in range(n)) + "}"
    assert data.ctid_literal_bytes() == data.ctid_literal().encode("ascii")
