"""Mondrian releases: ``anon.mondrian_view`` and the partitioning run behind every refresh.

The release is a materialized view whose query does the set work in SQL:

    WITH run AS MATERIALIZED (SELECT anon._mondrian_partition(<release_id>) AS p),  -- Python, once
    kept_rows AS MATERIALIZED (                     -- each kept row's class, joined back to the
        SELECT r.class_id, r.row_position, s."age" AS v0, s."sex" AS v1, s."diagnosis" AS s0
        FROM run CROSS JOIN LATERAL anon._partition_rows(run.p, '<source>'::regclass) AS r
        JOIN <source> AS s ON s.tableoid = r.row_tableoid AND s.ctid = r.row_ctid),
    bounds AS (SELECT class_id, min(v0) AS lo0, max(v0) AS hi0 FROM kept_rows GROUP BY class_id),
    classes AS MATERIALIZED (SELECT b.class_id, int4range(b.lo0, b.hi0, '[]') AS q0,
                                    x.q1::text[] AS q1                  -- once per class
        FROM bounds b JOIN (<p.classes -> 'q1' as rows, WITH ORDINALITY>) x USING (class_id))
    SELECT c.q0 AS "age", c.q1 AS "sex", rs.s0 AS "diagnosis"
    FROM kept_rows AS rs JOIN classes AS c ON c.class_id = rs.class_id
    WHERE (rs.v0 IS NULL OR c.q0 @> rs.v0::int4)                           -- containment filter
      AND array_position(c.q1, rs.v1::text) IS NOT NULL
    ORDER BY rs.row_position                        -- release order: by class, shuffled inside

so only the quasi-identifiers (and, for l-diversity, the sensitive columns) travel to Python, and
only a class id per row plus, for categorical QIs, one generalized value per class travel back
(sensitive values never leave SQL). The partitioning function is STABLE: it reads the source in
the query's own snapshot, so the ctids it returns are those the join sees.

Sources: ordinary tables, inheritance parents and partitioned tables, read without ONLY (every
row of every child / partition). ctids repeat across physical relations, so for a source with
children the run also returns each row's tableoid and the join uses (tableoid, ctid).

Generalized values: numeric, date and timestamp QIs become ranges with the tightest bounds of the
class's non-NULL values, computed IN SQL from the source rows in the column's own type (Python
partitions on a float8 approximation, which orders values but cannot write bounds: a bigint above
2^53, a 20-digit numeric or a timestamp's microseconds would be lost). Bounds are inclusive
(``[lo, hi]``); a discrete range whose upper bound is the type's maximum (2147483647, the largest
date) is released upper-unbounded (``[lo,)``), since ``[lo, max]`` canonicalizes to an overflowing
``[lo, max + 1)``. ±infinity (dates, timestamps, floats, numeric) and NaN (floats, numeric; a
numrange holds it as a bound above infinity) are released as they are; the partitioner sees them
as values just beyond the finite ones. A class of only NULLs gets NULL; a class mixing NULL and
values shows the range of its values (NCP counts such a cell as fully generalized). Categorical
QIs become the sorted set of values present (``text[]``, NULL an element of its own), or, with a
registered hierarchy, the lowest common ancestor (``text``).

Containment filter: a row is emitted only if each of its QI values lies inside its released class
value, tested with the column's own operators (``range @> value::element`` -- NULL values pass, as
above -- and ``array_position(set, value::text) IS NOT NULL``; hierarchy labels are not checked).
A row failing it is left out of the release instead of being published under a value that does not
contain it; the release's post-build verification, which compares the release's row count with
the source's, then fails the build, so a wrong range is never published.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from plpy_anon.core.encoding import encode_categorical, encode_numeric, finite_for_ordering
from plpy_anon.core.errors import InsufficientData, InvalidParameter
from plpy_anon.core.generalize import ClassIndex, class_bounds
from plpy_anon.core.metrics import release_metrics
from plpy_anon.core.mondrian import Mondrian
from plpy_anon.db import columns as catalog
from plpy_anon.db import releases
from plpy_anon.db.errors import sql_entry
from plpy_anon.db.reader import TableData, read_columns
from plpy_anon.db.sqltext import ident, jsonb, run

METHOD = "mondrian"
EPOCH_DATE = np.datetime64("2000-01-01", "D")


def check_k(k) -> int:
    if k is None:
        raise InvalidParameter("k must not be NULL", hint="Pass k => 5 (every class gets at least k rows).")
    if k < 2:
        raise InvalidParameter(f"k must be at least 2, got {k}",
                               hint="k = 1 would release every row as it is; use k => 2 or more.")
    return int(k)


def check_l(l, sensitive: list) -> int | None:
    if l is None:
        return None
    if l < 1:
        raise InvalidParameter(f"l must be at least 1, got {l}", hint="Pass l => 2 or more, or omit it.")
    if not sensitive:
        raise InvalidParameter(
            "l-diversity needs a sensitive column, and the table has none",
            hint="Declare one with anon.set_column_role(table, column, 'sensitive') or pass sensitive => ARRAY[...].")
    return int(l)


def resolve_release_columns(plpy, tbl, *, quasi_identifiers, sensitive, identifiers, l):
    """(roles, qis, sensitive columns, l) of a generalizing release, validated: at least one QI,
    every QI of a type that generalizes, l only with a sensitive column."""
    roles = catalog.resolve_roles(plpy, tbl, quasi_identifiers=quasi_identifiers,
                                  sensitive=sensitive, identifiers=identifiers)
    qis = [c for c, role in roles if role == "quasi_identifier"]
    sens = [c for c, role in roles if role == "sensitive"]
    if not qis:
        raise InvalidParameter(
            f"table {tbl.schema}.{tbl.name} has no quasi-identifier to generalize",
            hint="Declare some with anon.set_column_role(table, column, 'quasi_identifier') "
                 "or pass quasi_identifiers => ARRAY[...].")
    for col in qis:
        catalog.check_quasi_identifier(tbl, col)
    return roles, qis, sens, check_l(l, sens)


def base_parameters(plpy, tbl, roles, qis, sens, k, l) -> dict:
    """The catalog parameters every Mondrian-family release records."""
    hierarchical = set(catalog.hierarchy_columns(plpy, tbl))
    return {
        "k": k, "l": l,
        "quasi_identifiers": [c.name for c in qis],
        "sensitive": [c.name for c in sens],
        "hierarchies": [c.name for c in qis if c.name in hierarchical and c.kind == "categorical"],
        "released": [c.name for c, role in roles if role in ("quasi_identifier", "sensitive")],
        "dropped": [c.name for c, role in roles if role in ("identifier", "ignored")],
    }


@sql_entry
def mondrian_view(plpy, source, *, k, l, quasi_identifiers, sensitive, identifiers, release_name,
                  release_schema, replace, GD=None):
    tbl = catalog.table(plpy, source)
    k = check_k(k)
    roles, qis, sens, l = resolve_release_columns(
        plpy, tbl, quasi_identifiers=quasi_identifiers, sensitive=sensitive,
        identifiers=identifiers, l=l)
    parameters = base_parameters(plpy, tbl, roles, qis, sens, k, l)
    name = release_name or f"{tbl.name}_k{k}" + (f"_l{l}" if l else "")

    row = releases.create_view_release(
        plpy, GD, source=tbl, method=METHOD, release_schema=release_schema, release_name=name,
        replace=replace, parameters=parameters,
        query=lambda release_id: release_query(plpy, tbl, roles, parameters, release_id))
    return releases.qualified_name(plpy, row)


def output_type(col, hierarchical: bool) -> str:
    if col.kind == "numeric":
        return catalog.NUMERIC_TYPES[col.type_name][1]
    return "text" if hierarchical else "text[]"


def release_query(plpy, tbl, roles, parameters, release_id: int,
                  partition_function: str = "anon._mondrian_partition") -> str:
    """The materialized view's query of a Mondrian-family release."""
    hierarchical = set(parameters["hierarchies"])
    by_name = {col.name: col for col, _ in roles}
    qi_types = {name: output_type(by_name[name], name in hierarchical)
                for name in parameters["quasi_identifiers"]}
    return generalized_release_query(plpy, tbl, roles, qi_types,
                                     f"{partition_function}({int(release_id)})")


def generalized_release_query(plpy, tbl, roles, qi_types: dict[str, str], partition_call: str,
                               *, literal_ranges: bool = False) -> str:
    """The query of a release whose partitioning function returns an ``anon.partition`` (see the
    module docstring for its shape and why). ``qi_types``: released SQL type of each QI, in the
    order of the ``q0, q1, ...`` class columns. Rows whose class id is negative are suppressed.

    Range-typed QIs get their bounds from the class's rows in SQL (``min``/``max`` in the
    column's own type). With ``literal_ranges`` the partition also carries a range literal per
    class (trust's hierarchy intervals) and the released range is the smallest one holding both
    that literal and the class's values. Every row passes the containment filter."""
    qi_names = list(qi_types)
    by_name = {col.name: col for col, _ in roles}
    sensitive = [col for col, role in roles if role == "sensitive"]
    ranged = [i for i, name in enumerate(qi_names) if qi_types[name] in catalog.RANGE_ELEMENTS]
    literal = [i for i, name in enumerate(qi_names) if i not in ranged or literal_ranges]
    checked = [i for i in range(len(qi_names)) if i in ranged or qi_types[qi_names[i]] == "text[]"]
    selects = []
    for col, role in roles:
        if role == "quasi_identifier":
            selects.append(f"c.q{qi_names.index(col.name)} AS {ident(plpy, col.name)}")
        elif role == "sensitive":
            selects.append(f"rs.s{sensitive.index(col)} AS {ident(plpy, col.name)}")
    kept = "".join(f", {qi_value(plpy, by_name[qi_names[i]])} AS v{i}" for i in checked)
    kept += "".join(f", s.{ident(plpy, col.name)} AS s{i}" for i, col in enumerate(sensitive))
    aggregates = "".join(f", min(rs.v{i}) AS lo{i}, max(rs.v{i}) AS hi{i}" for i in ranged)
    generalized = []
    for i, name in enumerate(qi_names):
        if i in ranged:
            generalized.append(f"{range_expression(qi_types[name], i, literal_ranges)} AS q{i}")
        else:
            generalized.append(f"x.q{i}::{qi_types[name]} AS q{i}")
    if literal:
        elements = ", ".join(f"pg_catalog.jsonb_array_elements_text((run.p).classes -> 'q{i}')"
                             for i in literal)
        aliases = ", ".join(f"q{i}" for i in literal)
        class_source = (
            f"    FROM bounds AS b\n"
            f"    JOIN (SELECT x.class_no - 1 AS class_id, {aliases} FROM run,\n"
            f"          ROWS FROM ({elements}) WITH ORDINALITY AS x({aliases}, class_no)) AS x\n"
            f"      ON x.class_id = b.class_id")
    else:
        class_source = "    FROM bounds AS b"
    filters = [containment_test(qi_types[qi_names[i]], i) for i in checked]
    where = f"WHERE {' AND '.join(filters)}" if filters else ""
    # run: the partitioning call, once. kept_rows: each kept row's class and the values the
    # release needs, joined to the source by (tableoid, ctid); scanned twice (bounds, output), so
    # materialized. classes: one row per class, ranges built once per class. The release order
    # (by class, shuffled inside it: see release_positions) is imposed by the final ORDER BY.
    source = tbl.quoted(plpy)
    return (
        f"WITH run AS MATERIALIZED (SELECT {partition_call} AS p),\n"
        f"kept_rows AS MATERIALIZED (\n"
        f"    SELECT r.class_id, r.row_position{kept}\n"
        f"    FROM run CROSS JOIN LATERAL anon._partition_rows(run.p, "
        f"{plpy.quote_literal(source)}::pg_catalog.regclass) AS r\n"
        f"    JOIN {source} AS s ON s.tableoid = r.row_tableoid AND s.ctid = r.row_ctid),\n"
        f"bounds AS (SELECT rs.class_id{aggregates} FROM kept_rows AS rs GROUP BY rs.class_id),\n"
        f"classes AS MATERIALIZED (\n"
        f"    SELECT b.class_id, {', '.join(generalized)}\n"
        f"{class_source})\n"
        f"SELECT {', '.join(selects)}\n"
        f"FROM kept_rows AS rs\n"
        f"JOIN classes AS c ON c.class_id = rs.class_id\n"
        f"{where}\n"
        f"ORDER BY rs.row_position")


FLOAT_TYPES = ("float4", "float8")


def qi_value(plpy, col) -> str:
    """Source row ``s``'s value of QI ``col`` as the release bounds and tests it. Floats go
    through their text form, which is exact (the shortest digits that read back as the same
    float): a direct float-to-numeric cast keeps only 15 (float8) or 6 (float4) significant
    digits and would publish ranges that miss the row's value. See check_float_digits."""
    value = f"s.{ident(plpy, col.name)}"
    return f"{value}::text::numeric" if col.type_name in FLOAT_TYPES else value


def check_float_digits(plpy, tbl, qis) -> None:
    """The text form of a float is exact only with extra_float_digits >= 1 (the default): with
    fewer, PostgreSQL rounds it, and so would the released ranges. Refuse instead of publishing
    rounded bounds (called by every build, inside the release's own query)."""
    floats = [c.name for c in qis if c.type_name in FLOAT_TYPES]
    if floats and int(run(plpy, "SELECT pg_catalog.current_setting('extra_float_digits') AS d")[0]["d"]) < 1:
        raise InvalidParameter(
            f"extra_float_digits is below 1 in this session, so the floating-point column(s) "
            f"{', '.join(map(repr, floats))} of {tbl.schema}.{tbl.name} would be released with "
            "rounded range bounds",
            hint="RESET extra_float_digits (the default, 1, writes floats exactly) and run it again.")


def containment_test(qi_type: str, i: int) -> str:
    """True when row value ``rs.v<i>`` lies inside its class's released value ``c.q<i>``, tested
    with the column's own operators: ``range @> value`` (a NULL value passes: it may sit in any
    class) or, for a value set (``text[]``), membership (NULL an element of its own)."""
    if qi_type in catalog.RANGE_ELEMENTS:
        element = catalog.RANGE_ELEMENTS[qi_type][0]
        return f"(rs.v{i} IS NULL OR c.q{i} @> rs.v{i}::{element})"
    return f"pg_catalog.array_position(c.q{i}, rs.v{i}::text) IS NOT NULL"


def range_expression(range_type: str, i: int, literal_ranges: bool) -> str:
    """The released range of QI ``i`` from its class's bounds ``b.lo<i>``/``b.hi<i>`` (column
    type): inclusive ``[lo, hi]``; NULL when the class holds only NULLs; upper-unbounded when
    ``hi`` is the maximum of a discrete type (``[lo, max]`` would canonicalize to an overflowing
    ``[lo, max + 1)``). With ``literal_ranges``, merged with the class's range literal ``x.q<i>``."""
    element, maximum = catalog.RANGE_ELEMENTS[range_type]
    fn = f"pg_catalog.{range_type}"
    lo, hi = f"b.lo{i}::{element}", f"b.hi{i}::{element}"
    unbounded = f"WHEN {hi} = {maximum} THEN {fn}({lo}, NULL, '[)') " if maximum else ""
    exact = f"CASE WHEN b.lo{i} IS NULL THEN NULL::{range_type} {unbounded}ELSE {fn}({lo}, {hi}, '[]') END"
    if not literal_ranges:
        return exact
    return (f"CASE WHEN b.lo{i} IS NULL THEN x.q{i}::{range_type} "
            f"ELSE pg_catalog.range_merge(x.q{i}::{range_type}, {exact}) END")


# ---------------------------------------------------------------------------- partitioning run

@sql_entry
def partition(plpy, GD, release_id: int):
    started = time.monotonic()
    release = releases.by_id(plpy, release_id)
    rows = load_release_rows(plpy, release, with_target=False)
    read_s = time.monotonic() - started
    t0 = time.monotonic()
    model = Mondrian(k=rows.k, l=rows.l).fit(rows.encoded, rows.sensitive)
    return partition_result(plpy, GD, release_id, rows, model.labels_, model.n_classes_,
                            started=started, read_s=read_s, partition_s=time.monotonic() - t0)


def partition_result(plpy, GD, release_id: int, rows: ReleaseRows, labels, n_classes, *,
                     started: float, read_s: float, partition_s: float, extra_metrics=None) -> dict:
    """What a Mondrian-family partitioning function returns (an ``anon.partition``): class ids
    and release positions per row, generalized literals per class; the run's metrics are stashed
    for the catalog."""
    index = ClassIndex.of(labels, n_classes)
    # numeric QIs: bounds come from SQL (generalized_release_query); categorical ones from here
    listed = [(i, col, enc) for i, (col, enc) in enumerate(zip(rows.qis, rows.encoded))
              if col.kind == "categorical"]
    bounds = class_bounds([enc for _, _, enc in listed], labels, n_classes, index)
    classes = {f"q{i}": class_literals(col, bounds[col.name]) for i, col, _ in listed}
    metrics = release_metrics(rows.encoded, labels, rows.k, index)
    metrics.update(extra_metrics or {})
    result = {
        "row_ctids": rows.data.row_ctids,
        "class_ids": int_array_literal(labels),
        "row_positions": int_array_literal(release_positions(labels, seed=release_id)),
        "classes": json.dumps(classes),
        "row_tableoids": rows.data.row_tableoids,
    }
    metrics["seconds"] = {"read": round(read_s, 4), "partition": round(partition_s, 4),
                          "python_total": round(time.monotonic() - started, 4)}
    releases.stash_run(GD, release_id, row_count=rows.data.n_rows,
                       achieved_k=metrics["achieved_k"], metrics=metrics, started=started)
    return result


@dataclass
class ReleaseRows:
    """A Mondrian-family release's source, read once: the encoded QIs and what else it needs."""

    tbl: catalog.Table
    k: int
    l: int | None
    qis: list
    encoded: list
    frame: pd.DataFrame        # original QI values (numbers with NaN for NULL, text)
    sensitive: np.ndarray | None
    target: np.ndarray | None
    data: TableData


def load_release_rows(plpy, release, *, with_target=True) -> ReleaseRows:
    """Read the columns a Mondrian-family release needs in one query and encode its QIs."""
    params = jsonb(release["parameters"])
    tbl = catalog.table(plpy, release["source"])
    cols = {c.name: c for c in catalog.table_columns(plpy, tbl)}
    qis = [column_for(tbl, cols, name) for name in params["quasi_identifiers"]]
    l = params.get("l")
    sens = [column_for(tbl, cols, name) for name in params["sensitive"]] if l else []
    target_name = params.get("target") if with_target else None
    target_col = [column_for(tbl, cols, target_name)] if target_name else []
    check_float_digits(plpy, tbl, qis)
    numeric = [c for c in qis if c.kind == "numeric"]
    categorical = [c for c in qis if c.kind == "categorical"]
    extra = [c for c in sens + target_col if c.name not in {q.name for q in categorical}]
    data = read_columns(plpy, tbl, numeric, categorical + _unique(extra))
    k = int(params["k"])
    if data.n_rows == 0:
        raise InsufficientData(f"table {tbl.schema}.{tbl.name} is empty",
                               hint="Load rows first; a release of no rows protects nothing.")
    if data.n_rows < k:
        raise InsufficientData(
            f"table {tbl.schema}.{tbl.name} has {data.n_rows} rows, fewer than k = {k}",
            hint=f"Use k <= {data.n_rows}, or release a larger table.")
    hierarchical = set(params.get("hierarchies", []))
    encoded, frame = [], {}
    for col in qis:
        d = data.columns[col.name]
        if col.kind == "numeric":
            ordered = finite_for_ordering(d.values, d.null_mask)   # ±inf, NaN: released as is
            encoded.append(encode_numeric(col.name, ordered, d.null_mask))
            values = ordered.astype(float)
            if d.null_mask is not None:
                values[d.null_mask] = np.nan
            frame[col.name] = values
        else:
            hierarchy = (catalog.load_hierarchy(plpy, tbl, col.name)
                         if col.name in hierarchical else None)
            if col.name in hierarchical and hierarchy is None:
                raise InvalidParameter(
                    f'the hierarchy of column "{col.name}" was dropped after the release was '
                    "created",
                    hint="Register it again with anon.set_hierarchy, or recreate the release "
                         "with replace => true.")
            encoded.append(encode_categorical(col.name, d.values, hierarchy))
            frame[col.name] = d.values
    sensitive = None
    if sens:
        sensitive = np.column_stack([
            pd.factorize(data.columns[c.name].values, use_na_sentinel=False)[0] for c in sens])
    target = None
    if target_col:
        target = np.asarray([str(v) for v in data.columns[target_name].values], dtype=object)
    return ReleaseRows(tbl, k, l, qis, encoded, pd.DataFrame(frame), sensitive, target, data)



def _unique(cols):
    seen, out = set(), []
    for c in cols:
        if c.name not in seen:
            seen.add(c.name)
            out.append(c)
    return out


def release_positions(labels: np.ndarray, seed: int) -> np.ndarray:
    """Each row's position in the release: grouped by class, classes in random order and rows in
    random order inside a class, so the release keeps no trace of the source's physical row order
    (insertion order can identify a row)."""
    rng = np.random.default_rng([seed, labels.size])
    class_rank = rng.permutation(int(labels.max()) + 1).astype(np.int64)
    # one int64 sort key: class rank in the high bits, a random tie-breaker in the low 24
    key = (class_rank[labels] << 24) | rng.integers(0, 1 << 24, labels.size, dtype=np.int64)
    order = np.argsort(key)
    positions = np.empty(labels.size, dtype=np.int64)
    positions[order] = np.arange(labels.size)
    return positions


def int_array_literal(values) -> str:
    """An int[] literal of a 1-D integer array (parsed by array_in, in C, on the SQL side)."""
    return "{" + ",".join(map(str, values.tolist())) + "}"


def column_for(tbl, cols: dict, name: str):
    """The column ``name`` a release was made with; a clear error when the table lost it."""
    if name not in cols:
        raise InvalidParameter(
            f'column "{name}" of {tbl.schema}.{tbl.name} used by this release no longer exists',
            hint="Recreate the release with replace => true after changing the table.")
    return cols[name]


# ---------------------------------------------------------------------------- literals

def class_literals(col, bounds) -> list:
    """One SQL literal per class (text cast by the release query), None for SQL NULL."""
    if col.kind == "categorical":
        if bounds.dtype == object and len(bounds) and isinstance(bounds[0], tuple):
            quoted = {}                        # each distinct value quoted once, not per class
            for values in bounds:
                for v in values:
                    if v not in quoted:
                        quoted[v] = array_element(v)
            return ["{" + ",".join([quoted[v] for v in values]) + "}" for values in bounds]
        return [None if v is None else str(v) for v in bounds]
    texts = VALUE_FORMATS[catalog.NUMERIC_TYPES[col.type_name][2]]
    only_null = np.isnan(np.asarray(bounds.lo, dtype=np.float64))
    lo, hi = texts(np.where(only_null, 0, bounds.lo)), texts(np.where(only_null, 0, bounds.hi))
    return [None if null else f"[{a},{b}]" for a, b, null in zip(lo, hi, only_null.tolist())]


# Bound values (as read: ints, floats, days since 2000-01-01, epoch seconds) to literal text,
# a whole column at a time.
def _ints(values) -> list[str]:
    return [str(v) for v in np.asarray(values, dtype=np.int64).tolist()]


def _floats(values) -> list[str]:
    return [repr(v) for v in np.asarray(values, dtype=np.float64).tolist()]


def _dates(days) -> list[str]:
    return (EPOCH_DATE + np.asarray(days, dtype=np.int64).astype("timedelta64[D]")).astype(str).tolist()


def _timestamps(epoch, suffix="") -> list[str]:
    micros = np.round(np.asarray(epoch, dtype=np.float64) * 1e6).astype(np.int64)
    iso = micros.astype("datetime64[us]").astype(str)
    return [f'"{t.replace("T", " ")}{suffix}"' for t in iso.tolist()]


VALUE_FORMATS = {"int": _ints, "float": _floats, "date": _dates,
                 "timestamp": _timestamps, "timestamptz": lambda e: _timestamps(e, "+00")}


def array_element(value) -> str:
    """One element of a text[] literal: double-quoted with \\ and " escaped; None -> NULL."""
    if value is None:
        return "NULL"
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

