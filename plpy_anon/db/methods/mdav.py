"""MDAV releases: ``anon.mdav_view``, k-anonymous classes by microaggregation.

MDAV (Domingo-Ferrer & Mateo-Sanz, "Practical data-oriented microaggregation for statistical
disclosure control", IEEE TKDE 2002; plpy_anon.core.mdav) groups records by nearness on the
standardized numeric quasi-identifiers, k..2k-1 per group. Each group is published as a
Mondrian-family class: each quasi-identifier as the range [min, max] of its members' values, so
what analysts read is truthful (every member's value lies in its range) and the class sizes, hence
k, are counted from the released rows by the same verification as Mondrian's. Publishing the
centroid instead would be neither: a mean is no member's value, and equal means need not mean
one class.

A plug-in: declared in sql/functions/120-mdav.toml alone (its SQL function, its run
``anon._mdav_partition_slices``, its parameters, the client's ``mdav_view`` and the CLI's
``mdav-view`` follow from that declaration); this module is its code.
"""
from __future__ import annotations

import numpy as np

from plpy_anon.core.errors import UnsupportedType
from plpy_anon.core.mdav import MDAV
from plpy_anon.db import compact, method
from plpy_anon.db.errors import sql_entry
from plpy_anon.db.method import ReleaseMethod
from plpy_anon.db.methods.mondrian_family import (
    ReleaseRows,
    base_parameters,
    load_release_rows,
    partition_output,
    release_plan,
    resolve_release_columns,
)
from plpy_anon.spec import ReleaseSpec

METHOD = "mdav"
# the types whose values MDAV measures distances on
NUMBER_TYPES = ("int2", "int4", "int8", "numeric", "float4", "float8")


def resolve(plpy, tbl, spec: ReleaseSpec) -> method.Plan:
    k = spec.promise.k
    roles, qis, sens, _ = resolve_release_columns(plpy, tbl, spec.promise)
    other = [c for c in qis if c.type_name not in NUMBER_TYPES]
    if other:
        raise UnsupportedType(
            f"mdav_view groups by numeric quasi-identifiers; {tbl.label} has "
            + ", ".join(f'"{c.name}" ({c.display_type})' for c in other),
            hint="Pass quasi_identifiers => ARRAY[...] naming integer, numeric or floating-point "
                 "columns only, or use anon.mondrian_view for the others.")
    parameters = {**base_parameters(plpy, tbl, roles, qis, sens, k, None),
                  "layout": spec.promise.layout}
    return release_plan(plpy, tbl, roles, parameters, f"{tbl.name}_mdav_k{k}",
                        partition_function="anon._mdav_partition_slices")


@sql_entry
def partition(plpy, GD, release_id: int):
    return method.run(RELEASE_METHOD, plpy, GD, release_id)


def read(ctx: method.Run) -> ReleaseRows:
    return load_release_rows(ctx.plpy, ctx.release, ctx.spec, with_target=False)


def distance_values(frame) -> np.ndarray:
    """The QIs as numbers for MDAV's distances; a NULL sits one spread below its column's
    smallest value, near the other NULLs and the smallest values (not farther: the column's
    z-scores would shrink every other distance on it)."""
    values = frame.to_numpy(dtype=np.float64, copy=True)
    for j in range(values.shape[1]):
        column = values[:, j]
        missing = np.isnan(column)
        if missing.any():
            present = column[~missing]
            low, high = (present.min(), present.max()) if present.size else (0.0, 0.0)
            column[missing] = low - max(high - low, 1.0)
    return values


def fit(rows: ReleaseRows, spec: ReleaseSpec) -> MDAV:
    model = MDAV(k=rows.k).fit(distance_values(rows.frame))
    model.n_classes_ = int(model.group_sizes_.size)
    return model


def publish(ctx: method.Run, rows: ReleaseRows, model: MDAV):
    return partition_output(ctx, rows, model.labels_, model.n_classes_)


RELEASE_METHOD = ReleaseMethod(METHOD, resolve=resolve, read=read, fit=fit, publish=publish,
                               check_relations=compact.check_view)
