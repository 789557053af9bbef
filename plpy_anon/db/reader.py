"""Reading a source table's columns into numpy in one round trip.

One query aggregates every needed column with ``array_agg`` -- all aggregates of one query see the
rows in the same order -- plus ``array_agg(ctid)`` rendered as text. The ctids are never parsed in
Python: they go back to SQL unchanged, where ``::tid[]`` (array_in, in C) turns them into the
join key that brings each row's class back to it. Numeric columns are read as numbers with a
separate NULL mask (only for nullable columns), so PL/Python converts plain ints and floats.

The source is read WITHOUT ``ONLY``: a partitioned table or an inheritance parent contributes the
rows of all its partitions / children. A ctid is unique only inside one physical relation, so for
such sources the rows' ``tableoid`` is read too (``row_tableoids``) and the release joins back on
(tableoid, ctid); for a source that is one relation it is None (saves a million-element array).

Numbers are approximations used for ORDERING only (partitioning): int8 is exact, numeric and
timestamps go through float8, dates are days since 2000-01-01 (as float8 when the column holds
'infinity'). Released bounds are computed in SQL in the column's own type (see ``mondrian.py``).
Non-finite values arrive as they are (±inf, NaN); :func:`refuse_non_finite` is for methods that
cannot release them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from plpy_anon.core.errors import InvalidParameter
from plpy_anon.db.columns import NUMERIC_TYPES, Column, Table
from plpy_anon.db.sqltext import ident, run


@dataclass
class ColumnData:
    values: np.ndarray
    null_mask: np.ndarray | None


@dataclass
class TableData:
    n_rows: int
    row_ctids: str                       # '{"(0,1)","(0,2)",...}' in read order
    columns: dict[str, ColumnData] = field(default_factory=dict)
    row_tableoids: str | None = None     # '{16384,16390,...}' when the source has several relations


HAS_CHILDREN = """
SELECT c.relkind = 'p' OR c.relhassubclass AS has_children FROM pg_catalog.pg_class c WHERE c.oid = $1
"""


def has_children(plpy, tbl: Table) -> bool:
    """True for a partitioned table or a table with inheritance children (rows in several
    physical relations, so ctids alone do not identify them)."""
    return bool(run(plpy, HAS_CHILDREN, ["oid"], [tbl.oid])[0]["has_children"])


def read_expression(plpy, col: Column) -> str:
    """The SQL expression reading a numeric column as a number (see ``NUMERIC_TYPES``)."""
    return NUMERIC_TYPES[col.type_name][0] % {"c": ident(plpy, col.name)}


def read_columns(plpy, tbl: Table, numeric: list[Column], categorical: list[Column]) -> TableData:
    """Read ``numeric`` columns as numbers and ``categorical`` columns as text, in one query."""
    selects = ["count(*) AS n", "array_agg(ctid)::text AS row_ctids"]
    several = has_children(plpy, tbl)
    if several:
        selects.append("array_agg(tableoid)::text AS row_tableoids")
    for i, col in enumerate(numeric):
        selects.append(f"array_agg(coalesce({read_expression(plpy, col)}, 0)) AS n{i}")
        if not col.not_null:
            selects.append(f"array_agg({ident(plpy, col.name)} IS NULL) AS z{i}")
    for i, col in enumerate(categorical):
        selects.append(f"array_agg({ident(plpy, col.name)}::text) AS c{i}")
    row = plpy.execute(f"SELECT {', '.join(selects)} FROM {tbl.quoted(plpy)}")[0]
    data = TableData(int(row["n"]), row["row_ctids"] or "{}",
                     row_tableoids=(row["row_tableoids"] or "{}") if several else None)
    if data.n_rows == 0:
        return data
    for i, col in enumerate(numeric):
        mask = np.array(row[f"z{i}"], dtype=bool) if f"z{i}" in row else None
        values = np.array(row[f"n{i}"], dtype=np.float64 if NUMERIC_TYPES[col.type_name][2] != "int"
                          else np.int64)
        if values.dtype == np.float64 and NUMERIC_TYPES[col.type_name][2] == "date" \
                and np.isfinite(values).all():
            values = values.astype(np.int64)          # days: exact in float8, ints when finite
        data.columns[col.name] = ColumnData(values, mask)
    for i, col in enumerate(categorical):
        data.columns[col.name] = ColumnData(np.array(row[f"c{i}"], dtype=object), None)
    return data


def refuse_non_finite(tbl: Table, data: TableData, columns: list[Column], method: str) -> None:
    """A clear error naming the first numeric column holding NaN or ±infinity (read as such), for
    methods that compute with the numbers themselves."""
    for col in columns:
        d = data.columns.get(col.name)
        if d is None or d.values.dtype != np.float64:
            continue
        bad = ~np.isfinite(d.values)
        if d.null_mask is not None:
            bad &= ~d.null_mask
        if bad.any():
            raise non_finite_error(tbl, col.name, "NaN" if np.isnan(d.values[bad]).any()
                                   else "infinity", method)


def non_finite_error(tbl: Table, column: str, what: str, method: str) -> InvalidParameter:
    return InvalidParameter(
        f'column "{column}" of {tbl.schema}.{tbl.name} holds {what}, which {method} cannot release',
        hint=f'Replace it with NULL (UPDATE ... SET "{column}" = NULL WHERE "{column}" '
             "IN ('NaN', 'Infinity', '-Infinity')) or declare the column ignored or sensitive; "
             "anon.mondrian_view and anon.break_merge release such values.")
