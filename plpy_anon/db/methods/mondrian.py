"""Mondrian releases: ``anon.mondrian_view`` and the partitioning run behind every refresh.

The release is a materialized view over ``anon._mondrian_partition_slices``: the query, what
travels between SQL and Python, the sources it reads and how each QI is generalized are
described in generalization.py, which every Mondrian-family method shares.
"""
from __future__ import annotations

import numpy as np

from plpy_anon.core.mondrian import Mondrian
from plpy_anon.core.privacy_models import Models
from plpy_anon.core.republication import stable_partition
from plpy_anon.db import compact, method, republication
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
    republication.resolve_mode(values, roles, parameters)
    return release_plan(plpy, tbl, roles, parameters, f"{tbl.name}_k{k}" + model_suffix(l, models))


@sql_entry
def partition(plpy, GD, release_id: int):
    return method.run(RELEASE_METHOD, plpy, GD, release_id)


def read(ctx: method.Run) -> ReleaseRows:
    return load_release_rows(ctx.plpy, ctx.release, with_target=False)


def fit(rows: ReleaseRows, parameters: dict):
    if rows.people is not None and rows.people.history:
        return StableGroups(rows, parameters)
    sensitive, ordered, names = sensitive_for_models(rows, parameters)
    return Mondrian(k=rows.k, l=rows.l, **core_models(parameters)).fit(
        rows.encoded, sensitive, sensitive_ordered=ordered, sensitive_names=names)


class StableGroups:
    """A refresh in the stable mode after a first version: everyone's previous class kept,
    merged where needed (core.republication); ``groups_`` are the ids remembered."""

    def __init__(self, rows: ReleaseRows, parameters: dict):
        # each QI's codes scaled to [0, 1]: nearness for joining and merging groups
        points = np.column_stack([enc.codes / max(1, int(enc.codes.max())) for enc in rows.encoded])
        people = rows.people
        # grouped by the l model the release asks for, which its verification checks
        models = Models(l=rows.l, l_diversity=parameters["l_diversity"], c=parameters["c"])
        self.groups_ = stable_partition(people.groups, points, rows.sensitive, people.cohorts,
                                        people.cohort_values, rows.k, rows.l, models)
        ids, self.labels_ = np.unique(self.groups_, return_inverse=True)
        self.labels_ = self.labels_.ravel()
        self.n_classes_ = int(ids.size)


def publish_partition(ctx: method.Run, rows: ReleaseRows, model) -> tuple[dict, dict]:
    slices, stats = partition_output(ctx, rows, model.labels_, model.n_classes_)
    if rows.people is not None:        # what the record's cross-version check remembers
        groups = getattr(model, "groups_", model.labels_)
        stats["people"] = (rows.people.hashes, np.asarray(groups, dtype=np.int64).tolist(),
                           rows.people.qi_texts)
    return slices, stats


RELEASE_METHOD = ReleaseMethod(METHOD, resolve=resolve, read=read, fit=fit, publish=publish_partition,
                               check_relations=compact.check_view)
