"""Mondrian releases: ``anon.mondrian_view`` and the partitioning run behind every refresh.

The release is a materialized view over ``anon._mondrian_partition_slices``: the query, what
travels between SQL and Python, the sources it reads and how each QI is generalized are
described in generalization.py, which every Mondrian-family method shares.
"""
from __future__ import annotations

from plpy_anon.core.mondrian import Mondrian
from plpy_anon.db import compact, method
from plpy_anon.db.errors import sql_entry
from plpy_anon.db.method import ReleaseMethod
from plpy_anon.db.methods.mondrian_family import (
    ReleaseRows,
    base_parameters,
    check_models,
    core_models,
    load_release_rows,
    model_suffix,
    partition_output,
    release_plan,
    resolve_release_columns,
    sensitive_for_models,
)

METHOD = "mondrian"


def resolve(plpy, tbl, values: dict) -> method.Plan:
    k = values["k"]
    roles, qis, sens, l = resolve_release_columns(plpy, tbl, values)
    models = check_models(l, sens, values)
    parameters = base_parameters(plpy, tbl, roles, qis, sens, k, l, models)
    parameters["layout"] = values["layout"]
    return release_plan(plpy, tbl, roles, parameters, f"{tbl.name}_k{k}" + model_suffix(l, models))


@sql_entry
def partition(plpy, GD, release_id: int):
    return method.run(RELEASE_METHOD, plpy, GD, release_id)


def read(ctx: method.Run) -> ReleaseRows:
    return load_release_rows(ctx.plpy, ctx.release, with_target=False)


def fit(rows: ReleaseRows, parameters: dict) -> Mondrian:
    sensitive, ordered, names = sensitive_for_models(rows, parameters)
    return Mondrian(k=rows.k, l=rows.l, **core_models(parameters)).fit(
        rows.encoded, sensitive, sensitive_ordered=ordered, sensitive_names=names)


def publish_partition(ctx: method.Run, rows: ReleaseRows, model) -> tuple[dict, dict]:
    return partition_output(ctx, rows, model.labels_, model.n_classes_)


RELEASE_METHOD = ReleaseMethod(METHOD, resolve=resolve, read=read, fit=fit, publish=publish_partition,
                               check_relations=compact.check_view)
