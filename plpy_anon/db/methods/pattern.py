"""Pattern-preserving releases (localities and random walks): ``anon.pattern_view`` and ``anon.distortion``.

The release is a materialized view whose query joins the substituted values back to the source:

    SELECT r.c0::numeric AS "age", r.c1::float8 AS "score", s."salary"
    FROM anon._pattern_run(<release_id>) AS p                        -- Python, once per refresh
    CROSS JOIN LATERAL unnest(p.row_ctids::tid[], p.released[1]::numeric[],
                              p.released[2]::float8[]) AS r(row_ctid, c0, c1)
    JOIN <source> AS s ON s.ctid = r.row_ctid                   -- kept columns stay in SQL
    ORDER BY r.c0, r.c1                                              -- no trace of source order

Only the substituted columns travel to Python, and only their new values (as array literals
parsed by ``array_in``) travel back.  ``_pattern_run`` is STABLE, so it reads the source in the
snapshot of the query that joins its ctids.  Each refresh walks with a new random seed unless
the release was created with ``seed => ...``.

Column roles: the substituted ``columns`` are released with new values; ``sensitive`` columns
are kept as they are; every other column (identifiers, ignored columns and quasi-identifiers not
listed in ``columns``) is dropped -- nothing undeclared is published as is.  Substituted
integer and numeric columns come out as ``numeric`` (integers whenever every sampled locality
survives rounding to integers, otherwise with the decimals they need), float columns as
``float8``.
"""
from __future__ import annotations

import math
import os
import time

import numpy as np
import pandas as pd

from plpy_anon.core.errors import InsufficientData, InvalidParameter, UnsupportedType
from plpy_anon.core.pattern import (
    PatternPreservingRelease,
    distortion,
    distortion_per_column,
    rank_correlation,
    unchanged_fraction,
)
from plpy_anon.core.pattern.release import column_bounds
from plpy_anon.db import columns as catalog
from plpy_anon.db import guards, method, release_rows
from plpy_anon.db.errors import sql_entry
from plpy_anon.db.method import ReleaseMethod
from plpy_anon.db.reader import non_finite_error, read_columns, refuse_non_finite
from plpy_anon.db.sqltext import ident, jsonb
from plpy_anon.parameters import SURFACES
from plpy_anon.spec import ReleaseSpec

METHOD = "pattern"


class UnchangedValues(InsufficientData):
    """Too many values came out of the walk as they went in (22000, data_exception)."""

# source type -> the type the substituted values are released as
RELEASED_TYPES = {"int2": "numeric", "int4": "numeric", "int8": "numeric", "numeric": "numeric",
                  "float4": "float8", "float8": "float8"}
# threads walking segments inside the backend (process pools do not work there)
MAX_THREADS = 4
# a release made before these parameters existed: their declared defaults
DEFAULT_DELTA = SURFACES[METHOD].by_name["delta"].python_default
DEFAULT_MAX_UNCHANGED = SURFACES[METHOD].by_name["max_unchanged"].python_default


def _check_max_unchanged(value):
    if (value is None or isinstance(value, bool) or not isinstance(value, (int, float))
            or not 0.0 <= float(value) <= 1.0):
        raise InvalidParameter(f"max_unchanged must be a share in [0, 1], got {value!r}",
                               hint="e.g. max_unchanged => 0.10 refuses a release in which more "
                                    "than 10% of a column's values are published unchanged")
    return float(value)


def resolve(plpy, tbl, spec: ReleaseSpec) -> method.Plan:
    settings = spec.settings
    cols = catalog.table_columns(plpy, tbl)
    substituted = _substituted_columns(tbl, cols, list(settings.columns))
    # no identifier detection: pattern releases only the substituted and sensitive columns
    roles = catalog.resolve_roles(plpy, tbl, sensitive=spec.promise.sensitive,
                                  identifiers=spec.promise.identifiers, cols=cols)
    names = [c.name for c in substituted]
    kept = [c.name for c, role in roles if role == "sensitive" and c.name not in names]
    walk = {name: getattr(settings, name) for name in ("segment", "sample", "iterations", "seed",
                                                       "delta")}
    bounds = _parse_bounds(settings.bounds, names)
    parameters = {
        "columns": names, **walk,
        "max_unchanged": _check_max_unchanged(settings.max_unchanged),
        "bounds": bounds,
        "sensitive": kept,
        "released": names + kept,
        "dropped": [c.name for c in cols if c.name not in names and c.name not in kept],
    }
    # fail fast with clean errors, before any view exists (the run checks again on its data)
    PatternPreservingRelease(**walk).check_parameters()
    _check_columns(plpy, tbl, substituted, bounds)
    return method.Plan(
        parameters, default_name=f"{tbl.name}_pp",
        query=lambda release_id: release_query(plpy, tbl, substituted, kept, release_id))


def _substituted_columns(tbl, cols, names):
    if not names:
        raise InvalidParameter("columns must name at least one numeric column",
                               hint="e.g. columns => ARRAY['age', 'fnlwgt']")
    if len(set(names)) != len(names):
        raise InvalidParameter("columns lists a column twice", hint="name each column once")
    chosen = []
    for name in names:
        if name is None:
            raise InvalidParameter("columns contains NULL", hint="Remove the NULL.")
        col = catalog.column_named(tbl, cols, name)
        if col.type_name not in RELEASED_TYPES:
            raise UnsupportedType(
                f'column "{name}" of {tbl.label} has type {col.display_type}; '
                "pattern_view substitutes numbers only",
                hint="List only integer, numeric or floating-point columns; declare the others "
                     "sensitive (kept) or leave them out (dropped).")
        chosen.append(col)
    return chosen


def _check_columns(plpy, tbl, substituted, bounds):
    """Count, min and max of every substituted column in one query: a NULL-only or constant
    column, or bounds that exclude data, are refused before the view is built."""
    selects = ", ".join(f"count({q}) AS n{i}, min({q})::float8 AS lo{i}, max({q})::float8 AS hi{i}, "
                        f"count(*) FILTER (WHERE {q}::float8 = 'NaN') AS nan{i}, "
                        f"count(*) FILTER (WHERE abs({q}::float8) = 'Infinity') AS inf{i}"
                        for i, q in enumerate(ident(plpy, c.name) for c in substituted))
    row = plpy.execute(f"SELECT {selects} FROM {tbl.quoted(plpy)}")[0]
    for i, col in enumerate(substituted):
        for what in ("nan", "inf"):
            if row[f"{what}{i}"]:
                raise non_finite_error(tbl, col.name, "NaN" if what == "nan" else "infinity",
                                       "pattern_view")
        column_bounds(col.name, row[f"n{i}"], row[f"lo{i}"], row[f"hi{i}"],
                      *bounds.get(col.name, (None, None)))


def _parse_bounds(bounds, names):
    """``{"age": [1, 120]}`` (jsonb, arriving as text) -> the same dict, checked."""
    if bounds is None:
        return {}
    parsed = jsonb(bounds)
    if not isinstance(parsed, dict):
        raise InvalidParameter("bounds must be a JSON object of column -> [low, high]",
                               hint='e.g. bounds => \'{"age": [1, 120]}\'')
    for name, pair in parsed.items():
        if name not in names:
            raise InvalidParameter(f'bounds names column "{name}", which is not substituted',
                                   hint=f"give bounds for columns among {names}")
        if (not isinstance(pair, list) or len(pair) != 2
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                           for v in pair)):
            raise InvalidParameter(f'bounds of "{name}" must be [low, high] numbers, got {pair}',
                                   hint='e.g. {"age": [1, 120]}')
    return parsed


def release_query(plpy, tbl, substituted, kept, release_id: int) -> str:
    selects = [f"r.c{i}::{RELEASED_TYPES[c.type_name]} AS {ident(plpy, c.name)}"
               for i, c in enumerate(substituted)]
    selects += [f"s.{ident(plpy, name)}" for name in kept]
    arrays = ", ".join(f"p.released[{i + 1}]::{RELEASED_TYPES[c.type_name]}[]"
                       for i, c in enumerate(substituted))
    aliases = ", ".join(f"c{i}" for i in range(len(substituted)))
    return (
        f"SELECT {', '.join(selects)}\n"
        f"FROM anon._pattern_run({int(release_id)}) AS p\n"
        f"CROSS JOIN LATERAL unnest(p.row_tableoids::oid[], p.row_ctids::tid[], {arrays})\n"
        f"  AS r(row_tableoid, row_ctid, {aliases})\n"
        f"JOIN {tbl.quoted(plpy)} AS s\n"
        f"  ON s.ctid = r.row_ctid AND (r.row_tableoid IS NULL OR s.tableoid = r.row_tableoid)\n"
        f"ORDER BY {aliases}")


# ---------------------------------------------------------------------------- the walk

@sql_entry
def run_release(plpy, GD, release_id: int):
    return method.run(RELEASE_METHOD, plpy, GD, release_id)


def read(ctx: method.Run):
    tbl = guards.table_in_query(ctx.plpy, ctx.release["source"])
    cols = {c.name: c for c in catalog.table_columns(ctx.plpy, tbl)}
    substituted = [_still_there(tbl, cols, name) for name in ctx.spec.settings.columns]
    data = read_columns(ctx.plpy, tbl, substituted, [])
    refuse_non_finite(tbl, data, substituted, "pattern_view")
    frame = pd.DataFrame({c.name: _with_nulls(data.columns[c.name]) for c in substituted}
                         if data.n_rows else {c.name: [] for c in substituted}, dtype=float)
    return tbl, substituted, data, frame


def fit(read_data, spec: ReleaseSpec) -> PatternPreservingRelease:
    frame = read_data[3]
    cpu0 = time.process_time()
    settings = spec.settings
    model = PatternPreservingRelease(
        segment=settings.segment, sample=settings.sample, iterations=settings.iterations,
        seed=settings.seed, bounds={k: tuple(v) for k, v in settings.bounds.items()},
        delta=settings.delta,
        n_jobs=min(MAX_THREADS, os.cpu_count() or 1)).fit(frame)
    # CPU seconds of the backend (all its threads): wall time on a loaded machine says more
    # about the neighbours than about the walk
    model.walk_cpu_ = time.process_time() - cpu0
    return model


def publish_walk(ctx: method.Run, read_data, model) -> tuple[dict, dict]:
    tbl, substituted, data, frame = read_data
    settings = ctx.spec.settings
    original = frame.to_numpy()
    metrics = _metrics(model, original, settings.seed is not None)
    released = [_array_literal(model.released_[:, i], model.decimals_[i])
                for i in range(len(substituted))]
    counted = count_unchanged(ctx.plpy, tbl, substituted, data, released)
    for name, (same, present) in counted.items():
        metrics["columns"][name]["unchanged_fraction"] = same / present if present else None
    refuse_unchanged(tbl, counted, settings.max_unchanged, settings.delta)
    metrics["seconds"] = {"read": round(ctx.read_s, 4), "walk": round(ctx.fit_s, 4),
                          "walk_cpu": round(model.walk_cpu_, 4),
                          "python_total": round(ctx.elapsed(), 4)}
    return ({"row_ctids": data.row_ctids, "row_tableoids": data.row_tableoids,
             "released": released},
            {"row_count": data.n_rows, "achieved_k": None, "metrics": metrics})


def count_unchanged(plpy, tbl, substituted, data, released):
    """Per column (values released unchanged, non-NULL values), counted in SQL: the very array
    literals the release is built from, joined to the source by ctid as the release query does,
    compared with the source's values (no Python arithmetic involved)."""
    types = [RELEASED_TYPES[c.type_name] for c in substituted]
    aliases = [f"c{i}" for i in range(len(substituted))]
    counts = ", ".join(
        f"count(s.{ident(plpy, c.name)}) AS n{i}, "
        f"count(*) FILTER (WHERE s.{ident(plpy, c.name)}::{types[i]} = r.c{i}) AS same{i}"
        for i, c in enumerate(substituted))
    arrays = ", ".join(f"${i + 3}::{t}[]" for i, t in enumerate(types))
    plan = plpy.prepare(
        f"SELECT {counts}\n"
        f"FROM unnest($1::tid[], $2::oid[], {arrays}) AS r(row_ctid, row_tableoid, "
        f"{', '.join(aliases)})\n"
        f"JOIN {tbl.quoted(plpy)} AS s\n"
        f"  ON s.ctid = r.row_ctid AND (r.row_tableoid IS NULL OR s.tableoid = r.row_tableoid)",
        ["text"] * (2 + len(substituted)))
    row = plpy.execute(plan, [data.row_ctids, data.row_tableoids, *released])[0]
    return {c.name: (int(row[f"same{i}"]), int(row[f"n{i}"])) for i, c in enumerate(substituted)}


def refuse_unchanged(tbl, counted, max_unchanged, delta):
    """Refuse (22000) a release in which a column kept more than ``max_unchanged`` of its values."""
    over = [(name, same, present) for name, (same, present) in counted.items()
            if present and same / present > max_unchanged]
    if over:
        figures = "; ".join(f'{same / present:.1%} of column "{name}" ({same} of {present} '
                            "values)" for name, same, present in over)
        raise UnchangedValues(
            f"pattern release of {tbl.label} refused: {figures} released "
            f"unchanged, above max_unchanged = {max_unchanged:.0%}",
            hint=f"Give the walk more room: raise delta (now {delta:g}) or lower sample, or "
                 "leave the column out; max_unchanged => 1 publishes it knowingly.")


def _still_there(tbl, cols, name):
    if name not in cols or cols[name].type_name not in RELEASED_TYPES:
        raise InvalidParameter(
            f'column "{name}" of {tbl.label} used by this release no longer exists '
            "or is no longer numeric",
            hint="Recreate the release with replace => true after changing the table.")
    return cols[name]


def _with_nulls(column_data):
    values = column_data.values.astype(np.float64)
    if column_data.null_mask is not None:
        values[column_data.null_mask] = np.nan
    return values


def _metrics(model, original, seed_fixed):
    per_column = distortion_per_column(original, model.released_)
    spearman = rank_correlation(original, model.released_)
    unchanged = unchanged_fraction(original, model.released_)
    return {
        "distortion": _number(distortion(original, model.released_)),
        "seed": "fixed" if seed_fixed else "random per refresh",
        "columns": {
            name: {"distortion": _number(per_column[i]),
                   "rank_correlation": _number(spearman[i]),
                   "preserved_fraction": _number(model.preserved_fraction_[i]),
                   "strict_preserved_fraction": _number(model.strict_preserved_fraction_[i]),
                   "unchanged_fraction": _number(unchanged[i]),
                   "localities_extracted": int(model.n_extracted_[i]),
                   "localities_sampled": int(model.n_sampled_[i]),
                   "decimals": model.decimals_[i],
                   "bounds": [float(b) for b in model.bounds_[i]]}
            for i, name in enumerate(model.columns_)},
    }


def _number(value):
    """JSON has no NaN: a metric that is undefined (e.g. Dst of an all-zero column) is null."""
    value = float(value)
    return None if np.isnan(value) else value


def _array_literal(values, decimals):
    """A numeric array literal; NaN -> NULL; ``decimals`` digits (None: full float precision)."""
    missing = np.isnan(values)
    if decimals == 0 and not missing.any():
        # the common case (integer columns): int64 -> str in one pass, no per-value format
        return "{" + ",".join(map(str, np.rint(values).astype(np.int64).tolist())) + "}"

    def text(value):
        if math.isnan(value):
            return "NULL"
        return repr(value) if decimals is None else format(value, f".{decimals}f")

    return "{" + ",".join(map(text, values.tolist())) + "}"


# ---------------------------------------------------------------------------- metrics

@sql_entry
def distortion_report(plpy, source, release_name):
    """Rows (column_name, distortion, rank_correlation, preserved_fraction, preserved_strict) of
    a pattern release as measured by its last build or refresh; the row with column_name NULL is
    the overall Dst. preserved_strict is NULL for a release measured before it existed."""
    tbl = guards.table(plpy, source)
    release = release_rows.find(plpy, release_name)
    if release["method"] != METHOD:
        raise InvalidParameter(
            f'release "{release_name}" was made by {release["method"]}, not by pattern_view',
            hint="anon.distortion reports on releases made by anon.pattern_view.")
    made_from = guards.table(plpy, release["source"])
    if made_from.oid != tbl.oid:
        raise InvalidParameter(
            f'release "{release_name}" was made from {made_from.label}, not from {tbl.label}',
            hint=f"Call anon.distortion({plpy.quote_literal(made_from.label)}, ...).")
    metrics = release["metrics"]
    metrics = jsonb(metrics)
    rows = [(name, m["distortion"], m["rank_correlation"], m["preserved_fraction"],
             m.get("strict_preserved_fraction"))
            for name, m in metrics.get("columns", {}).items()]
    rows.append((None, metrics.get("distortion"), None, None, None))
    return rows


# the contract (plpy_anon/db/method.py), registered in plpy_anon/db/methods/registry.py
# the run reads the walked columns alone: the sensitive ones go from the source to the release in
# SQL, as their bytes, even a SQL_ASCII database's that are not UTF-8
RELEASE_METHOD = ReleaseMethod(METHOD, resolve=resolve, read=read, fit=fit, publish=publish_walk,
                               reads_text=lambda spec: spec.settings.columns)
