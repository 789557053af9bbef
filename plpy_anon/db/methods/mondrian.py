"""Mondrian releases: ``anon.mondrian_view`` and the partitioning run behind every refresh.

The release is a materialized view over ``anon._mondrian_partition_slices``: the query, what
travels between SQL and Python, the sources it reads and how each QI is generalized are
described in generalization.py, which every Mondrian-family method shares.
"""
from __future__ import annotations

import functools
import itertools

import numpy as np

from plpy_anon.core import mondrian_jit, republish
from plpy_anon.core.errors import InsufficientData, InvalidParameter
from plpy_anon.core.mondrian import Mondrian
from plpy_anon.core.privacy_models import Models
from plpy_anon.core.republication import CannotKeepCandidates, point_codes, stable_partition
from plpy_anon.db import (
    compact,
    method,
    out_of_core,
    republication,
    stable_regions,
    stored_classes,
    timing,
)
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
    read_region,
    release_plan,
    resolve_release_columns,
    sensitive_for_models,
)
from plpy_anon.spec import ReleaseSpec

METHOD = "mondrian"


def resolve(plpy, tbl, spec: ReleaseSpec) -> method.Plan:
    k = spec.promise.k
    roles, qis, sens, l = resolve_release_columns(plpy, tbl, spec.promise)
    models = check_models(l, sens, spec)
    parameters = base_parameters(plpy, tbl, roles, qis, sens, k, l, models)
    parameters["layout"] = spec.promise.layout
    plan = release_plan(plpy, tbl, roles, parameters, f"{tbl.name}_k{k}" + model_suffix(l, models))
    republication.resolve_mode(spec.promise, roles, parameters)
    return plan


@sql_entry
def partition(plpy, GD, release_id: int):
    return method.run(RELEASE_METHOD, plpy, GD, release_id)


def read(ctx: method.Run) -> ReleaseRows:
    return load_release_rows(ctx.plpy, ctx.release, ctx.spec, with_target=False)


def publish_region(ctx: method.Run, rows: ReleaseRows, model):
    return partition_output(ctx, rows, model.labels_, model.n_classes_,
                            slice_rows=out_of_core.SLICE_ROWS)


def fit(rows: ReleaseRows, spec: ReleaseSpec):
    if rows.people is not None and rows.people.history:
        return StableGroups(rows, spec)
    sensitive, ordered, names = sensitive_for_models(rows, spec)
    if spec.settings.split == "median" and mondrian_jit.worth_loading(rows.data.n_rows):
        # a fresh backend imports numba and loads the compiled fit here (~0.2 s at any size):
        # recorded apart from the fit itself
        with timing.phase("load_kernels"):
            mondrian_jit.kernels()
    return Mondrian(k=rows.k, l=rows.l, **core_models(spec)).fit(
        rows.encoded, sensitive, sensitive_ordered=ordered, sensitive_names=names)


class StableGroups:
    """A refresh in the stable mode after a first version: everyone's previous class kept,
    merged where needed (core.republication), and each group's published multiset chosen so
    that no pair of versions pins anyone by difference (core.republish); ``groups_`` are the
    ids remembered, ``published_`` the publication."""

    def __init__(self, rows: ReleaseRows, spec: ReleaseSpec):
        # each QI's codes scaled to [0, 1]: nearness for joining and merging groups
        points = np.column_stack([enc.codes / max(1, int(enc.codes.max())) for enc in rows.encoded])
        people = rows.people
        # grouped by the l model the release asks for, which its verification checks
        models = Models(l=rows.l, l_diversity=spec.promise.l_diversity, c=spec.promise.c)
        qi_codes, ranged = republication.qi_boxes(rows.encoded)
        with timing.phase("stable_groups"):
            # the set QIs' codes of ``points``, for every join and merge of the run
            codes_of_points = point_codes(points, ranged)
            acceptable = None
            if rows.sensitive is not None and people.versions:
                acceptable = republish.merge_keeps_an_option(
                    people.groups, people.codes(rows.sensitive[:, 0]), people.versions,
                    people.lineage, people.roots, rows.k, models)
            try:
                self.groups_ = stable_partition(people.joined, points, rows.sensitive,
                                                people.cohorts, people.cohort_values, rows.k,
                                                rows.l, models, ranged, acceptable,
                                                codes_of_points)
                withdraw = False
            except CannotKeepCandidates:
                if acceptable is None:
                    raise
                # no grouping keeps everyone's candidates: a version of no rows, not the last
                # one left published (core.republish.withdrawn)
                self.groups_ = republish.joined_groups(people.joined, points, people.lineage,
                                                       ranged, _fresh_classes(rows, spec, people))
                withdraw = True
        self.published_ = None
        if rows.sensitive is not None and people.versions and rows.read is None:
            raise InvalidParameter(
                "refresh_mode => 'stable' publishes each class's values from what earlier "
                "versions showed, and this release joins its rows back to the source",
                hint="Recreate the release with replace => true (without plpy_anon.join_back), "
                     "or with refresh_mode => 'fresh'.")
        if withdraw:
            self.published_ = republish.withdrawn(self.groups_, people.groups, people.versions,
                                                  people.lineage, people.roots, people.joined)
        elif rows.sensitive is not None and people.versions:
            with timing.phase("stable_multisets"):
                # people back with candidates, and those candidates over the run's codes
                bound = (people.groups < 0) & (people.cohorts >= 0)
                self.published_ = republish.publish(
                    self.groups_, people.groups, people.codes(rows.sensitive[:, 0]), points,
                    people.versions, people.lineage, people.roots, rows.k, models, qi_codes,
                    ranged, held_in=people.joined, bound=bound, point_codes=codes_of_points,
                    candidates=people.cohort_values[0][people.cohorts[bound]])
            self.groups_ = self.published_.labels
        ids, self.labels_ = np.unique(self.groups_, return_inverse=True)
        self.labels_ = self.labels_.ravel()
        self.n_classes_ = int(ids.size)


def _fresh_classes(rows: ReleaseRows, spec: ReleaseSpec, people) -> np.ndarray | None:
    """An ordinary partition of the rows when nobody of the last version is left (everyone new
    waits in a version of no rows, grouped so; core.republish.joined_groups), else None."""
    if people.joined.size < rows.k or (people.joined >= 0).any():
        return None
    sensitive, ordered, names = sensitive_for_models(rows, spec)
    try:
        return Mondrian(k=rows.k, l=rows.l, **core_models(spec)).fit(
            rows.encoded, sensitive, sensitive_ordered=ordered, sensitive_names=names).labels_
    except InsufficientData:
        return None


def publish_partition(ctx: method.Run, rows: ReleaseRows, model) -> tuple[dict, dict]:
    published = getattr(model, "published_", None)
    groups = np.asarray(getattr(model, "groups_", model.labels_), dtype=np.int64)
    # what the record's cross-version checks remember (stable mode)
    people = None if rows.people is None else republication.run_people(rows, groups, published)
    version = None if people is None else people["version"]
    arrays = None
    if version is not None and rows.read is not None:
        # each class's array: the multiset its group publishes (core.republish)
        # listed by value, never by code: codes follow the order people entered the table, so
        # a class's order would tell which joiner brought which new value
        elements = stored_classes.array_elements(version["values"][:-1])
        by_value = np.argsort(elements.astype(str), kind="stable")
        arrays = functools.partial(published_arrays, np.asarray(version["counts"])[:, by_value],
                                   elements[by_value])
    slices, stats = partition_output(ctx, rows, model.labels_, model.n_classes_, class_arrays=arrays)
    if people is not None:
        stats["people"] = people
    if version is not None:
        stats["row_count"] = stats["source_rows"] = int(version["counts"].sum())
    return slices, stats


def published_arrays(counts: np.ndarray, elements: np.ndarray, labels: np.ndarray) -> list[str]:
    """Array literals of the classes whose labels are ``labels``: each value repeated as many
    times as its group publishes it (``elements``: stored_classes.array_elements); the
    classes' values listed at once, then cut per class."""
    rows = counts[np.asarray(labels)]
    texts = elements[np.repeat(np.tile(np.arange(elements.size), rows.shape[0]), rows.ravel())].tolist()
    edges = np.concatenate([[0], np.cumsum(rows.sum(axis=1))]).tolist()
    return ["{" + ",".join(texts[a:b]) + "}" for a, b in itertools.pairwise(edges)]


RELEASE_METHOD = ReleaseMethod(
    METHOD, resolve=resolve, read=read, fit=fit, publish=publish_partition,
    check_relations=compact.check_view,
    # a release larger than plpy_anon.build_memory: top cuts by SQL aggregates
    out_of_core=functools.partial(out_of_core.run_out_of_core, read=read_region, fit=fit,
                                  publish=publish_region, stable_run=stable_regions,
                                  publish_stable=publish_partition))
