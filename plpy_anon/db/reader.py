"""Reading a source table's columns into numpy in one round trip.

One query aggregates every needed column with ``array_agg`` -- all aggregates of one query see the
rows in the same order -- plus ``array_agg(ctid)`` rendered as text. The ctids are never parsed in
Python: they go back to SQL unchanged, where ``::tid[]`` (array_in, in C) turns them into the
join key that brings each row's class back to it. Numeric columns are read as numbers with a
separate NULL mask (only for nullable columns), so PL/Python converts plain ints and floats.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from plpy_anon.db.columns import NUMERIC_TYPES, Column, Table
from plpy_anon.db.sqltext import ident


@dataclass
class ColumnData:
    values: np.ndarray
    null_mask: np.ndarray | None


@dataclass
class TableData:
    n_rows: int
    row_ctids: str                       # '{"(0,1)","(0,2)",...}' in read order
    columns: dict[str, ColumnData] = field(default_factory=dict)


def read_columns(plpy, tbl: Table, numeric: list[Column], categorical: list[Column]) -> TableData:
    """Read ``numeric`` columns as numbers and ``categorical`` columns as text, in one query."""
    selects = ["count(*) AS n", "array_agg(ctid)::text AS row_ctids"]
    for i, col in enumerate(numeric):
        expr = NUMERIC_TYPES[col.type_name][0] % ident(plpy, col.name)
        selects.append(f"array_agg(coalesce({expr}, 0)) AS n{i}")
        if not col.not_null:
            selects.append(f"array_agg({ident(plpy, col.name)} IS NULL) AS z{i}")
    for i, col in enumerate(categorical):
        selects.append(f"array_agg({ident(plpy, col.name)}::text) AS c{i}")
    row = plpy.execute(f"SELECT {', '.join(selects)} FROM ONLY {tbl.quoted(plpy)}")[0]
    data = TableData(int(row["n"]), row["row_ctids"] or "{}")
    if data.n_rows == 0:
        return data
    for i, col in enumerate(numeric):
        dtype = np.int64 if NUMERIC_TYPES[col.type_name][2] in ("int", "date") else np.float64
        mask = np.array(row[f"z{i}"], dtype=bool) if f"z{i}" in row else None
        data.columns[col.name] = ColumnData(np.array(row[f"n{i}"], dtype=dtype), mask)
    for i, col in enumerate(categorical):
        data.columns[col.name] = ColumnData(np.array(row[f"c{i}"], dtype=object), None)
    return data
