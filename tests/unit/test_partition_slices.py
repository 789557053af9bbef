"""The Mondrian family's result in slices (plpy_anon.db.methods.mondrian_family.partition_slices): whole classes,
in release order, every row once, offsets that add up."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.db.methods import mondrian_family
from plpy_anon.db.reader import TID_DTYPE, TableData


def ints(literal: str) -> list[int]:
    return [int(x) for x in literal.strip("{}").split(",") if x]


def unpacked(piece: dict) -> dict[str, list]:
    """A slice's literals as SQL reads them (generalization.literal_rows): each column's text
    split at its separator, the first field left out, the NULL marker NULL."""
    out = {}
    for n, key in enumerate(["q1"]):
        separator, null = piece["separators"][2 * n:2 * n + 2]
        fields = piece["literals"][n].decode().split(separator)
        assert fields[0] == ""
        out[key] = [None if f == null else f for f in fields[1:]]
    return out


@settings(max_examples=80, deadline=None)
@given(sizes=st.lists(st.integers(1, 9), min_size=0, max_size=25),
       slice_rows=st.integers(1, 20), several=st.booleans(), seed=st.integers(0, 2**16),
       given_size=st.booleans())
def test_slices_hold_whole_classes_in_order_and_every_row_once(sizes, slice_rows, several, seed,
                                                               given_size):
    """Of SLICE_ROWS rows, or of the size a caller gives (an out-of-core region's)."""
    n = sum(sizes)
    rng = np.random.default_rng(seed)
    tids = np.zeros(n, dtype=TID_DTYPE)
    tids["block"], tids["offset"] = np.arange(n) // 7, np.arange(n) % 7 + 1
    relations = rng.integers(16000, 16010, n).astype(np.uint32) if several else None
    data = TableData(n, tids, row_relations=relations)
    order = rng.permutation(n)
    literals = {"q1": [f"{{c{i}}}" for i in range(len(sizes))]}
    with pytest.MonkeyPatch.context() as patch:
        if not given_size:
            patch.setattr(mondrian_family, "SLICE_ROWS", slice_rows)
        bounds = np.concatenate([[0], np.cumsum(np.array(sizes, dtype=np.int64))])
        slices = list(mondrian_family.partition_slices(data, order, bounds, literals,
                                                       slice_rows if given_size else None))
    position, next_class, seen = 0, 0, []
    for s in slices:
        own = ints(s["class_sizes"])
        assert s["first_class"] == next_class and s["first_position"] == position
        assert own == sizes[next_class:next_class + len(own)] and own       # whole classes
        assert sum(own) <= slice_rows or len(own) == 1      # a bigger class makes its own slice
        assert unpacked(s) == {"q1": literals["q1"][next_class:next_class + len(own)]}
        ctids = s["ctids_utf8"].decode("ascii")
        rows = order[position:position + sum(own)]
        assert ctids == data.ctid_literal(rows)
        assert s["row_tableoids"] == data.tableoid_literal(rows)
        seen.extend(rows.tolist())
        position, next_class = position + sum(own), next_class + len(own)
    assert next_class == len(sizes) and seen == order.tolist()     # every class, every row, once
