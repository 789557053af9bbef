"""Prioritized Mondrian releases: ``anon.mondrian_view(..., priorities => ...)``.

The release is built exactly like a plain Mondrian release (same materialized-view query, same
released column types, refresh by ``REFRESH MATERIALIZED VIEW``); only the partitioning run
differs: ``anon._prioritized_mondrian_partition_slices`` runs
:class:`~plpy_anon.core.prioritized.PrioritizedMondrian` with the parameters recorded in the
catalog. Learned priorities and cut points are copied into the release's parameters when it is
created, so a refresh re-anonymizes current data with the priorities the release was made with
(learn again and recreate with ``replace => true`` to follow a changed workload).

``priorities``: ``'learned'`` (anon.priorities of the source), a JSON object of column weights,
``'none'`` / NULL (no priority metric; useful with ``target``). ``cut_points``: NULL means "yes
with learned priorities, no otherwise"; true takes the cut points of the source's stored workload
profile (``anon.learn_priorities`` first).

A release with learned priorities or cut points is guarded before its relations are built
(:func:`guard_learned_release`): on the stored workload's queries, it keeps only the learned
priorities and cut points under which every queried column's gain over plain Mondrian's precision
clears a standard error of it (core ``guard_learned``, with this release's own fit); its
parameters then hold what was kept and, under ``guard``, the per-column precision of plain
Mondrian and of the release.
"""
from __future__ import annotations

import dataclasses
import functools
import time

from plpy_anon.core.errors import InvalidParameter, UndefinedObject
from plpy_anon.core.prioritized import PrioritizedMondrian, guard_learned
from plpy_anon.core.workload import normalize_weights, weighted_discernibility
from plpy_anon.db import columns as catalog
from plpy_anon.db import compact, method, out_of_core, release_rows
from plpy_anon.db.errors import sql_entry
from plpy_anon.db.method import ReleaseMethod
from plpy_anon.db.methods import mondrian_family
from plpy_anon.db.sqltext import jsonb, jsonb_text, run
from plpy_anon.db.workload_statements import qi_workload
from plpy_anon.parameters import SURFACES
from plpy_anon.spec import ReleaseSpec

METHOD = "prioritized_mondrian"
CUT_TOLERANCE = SURFACES[METHOD].by_name["cut_tolerance"]
#: how far below plain Mondrian's precision a queried column of the training workload may fall
#: in a guarded learned release (the search keeps plain Mondrian itself when nothing else holds)
GUARD_TOLERANCE = 0.0
#: how many standard errors of a column's mean gain over plain Mondrian (over the stored queries
#: using it) the gain must clear: a gain within the noise between queries is not one that
#: queries not yet seen keep
GUARD_STANDARD_ERRORS = 1.0


def resolve(plpy, tbl, spec: ReleaseSpec) -> method.Plan:
    settings = spec.settings
    k, cut_points, cut_tolerance = spec.promise.k, settings.cut_points, settings.cut_tolerance
    roles, qis, sens, l = mondrian_family.resolve_release_columns(plpy, tbl, spec.promise)
    models = mondrian_family.check_models(l, sens, spec)
    qi_names = [col.name for col in qis]
    weights, origin = resolve_priorities(plpy, tbl, settings.priorities, qi_names)
    use_cuts = (origin == "learned") if cut_points is None else bool(cut_points)
    cuts, unlearned = learned_cut_points(plpy, tbl, qi_names) if use_cuts else ({}, [])
    if unlearned:
        plpy.notice(f"no cut points for {', '.join(unlearned)}: the stored workload filters on "
                    "them without numeric constants (pg_stat_statements keeps $1 placeholders)",
                    hint="Learn from statements with their constants (anon.add_queries) for "
                         "cut points there; the release records them in cut_points_unlearned.")
    if settings.target is not None:
        catalog.column_named(tbl, catalog.table_columns(plpy, tbl), settings.target)
    parameters = mondrian_family.base_parameters(plpy, tbl, roles, qis, sens, k, l, models)
    parameters.update({
        "priorities": weights, "priorities_origin": origin, "target": settings.target,
        "metric_weights": settings.metric_weights, "cut_points": cuts,
        "cut_tolerance": cut_tolerance, "cut_points_unlearned": unlearned,
    })
    # validate what the partitioning run will use now: its errors would surface wrapped in the
    # view's CREATE, and nothing must be created for bad parameters
    PrioritizedMondrian(k=k, l=l, priorities=weights, metric_weights=settings.metric_weights,
                        cut_tolerance=cut_tolerance, **mondrian_family.core_models(spec)
                        ).check_parameters(qi_names, settings.target is not None)
    parameters["layout"] = spec.promise.layout
    plan = mondrian_family.release_plan(
        plpy, tbl, roles, parameters,
        f"{tbl.name}_k{k}" + mondrian_family.model_suffix(l, models) + "_prioritized",
        partition_function="anon._prioritized_mondrian_partition_slices")
    return guarded(plpy, plan) if origin == "learned" or cuts else plan


def guarded(plpy, plan: method.Plan) -> method.Plan:
    """``plan`` whose build first keeps only the learned priorities and cut points that cost no
    queried column of the stored workload precision against plain Mondrian
    (:func:`guard_learned_release`, which rewrites the release's parameters); the relations are
    then built, and refreshed, from what it kept."""
    build, query = plan.build, plan.query

    def guarded_build(release_id, qualified, name):
        guard_learned_release(plpy, release_id)
        if build is not None:
            build(release_id, qualified, name)
        else:
            release_rows.create_frozen_view(plpy, qualified, query(release_id))

    return dataclasses.replace(plan, build=guarded_build, query=None)


def guard_learned_release(plpy, release_id: int) -> dict:
    """Keep a release's learned priorities and cut points only where no column the stored
    workload queries loses precision against plain Mondrian (core ``guard_learned``, with the
    release's own fit on its source's rows), before its relations are built; the release's
    parameters then hold what was kept and, under ``guard``, what was measured. Returns that
    record."""
    started, cpu_started = time.monotonic(), time.process_time()
    release = release_rows.by_id(plpy, release_id)
    spec = RELEASE_METHOD.spec_of(jsonb(release["parameters"]))
    rows = mondrian_family.load_release_rows(plpy, release, spec)
    _texts, predicates, frequencies = qi_workload(plpy, rows.tbl, rows.qis)
    record = {"queries": len(predicates), "tolerance": GUARD_TOLERANCE,
              "standard_errors": GUARD_STANDARD_ERRORS}
    update = {}
    if not predicates:
        plpy.notice(f"no stored query filters on a quasi-identifier of {rows.tbl.label}: the "
                    "learned priorities and cut points are released unguarded",
                    hint="Load the analysts' queries (anon.add_queries) and recreate the release.")
        record["applied"] = False
    else:
        def fit_labels(weights, cuts):
            trial = dataclasses.replace(spec.settings, priorities=weights, cut_points=cuts)
            return fit(rows, dataclasses.replace(spec, settings=trial)).labels_

        kept = guard_learned(None, rows.frame, predicates, frequencies=frequencies,
                             priorities=spec.settings.priorities,
                             cut_points=spec.settings.cut_points or {}, k=int(spec.promise.k),
                             tolerance=GUARD_TOLERANCE, standard_errors=GUARD_STANDARD_ERRORS,
                             fit=fit_labels)
        record.update({
            "applied": True, "dropped_priorities": kept.dropped_priorities,
            "dropped_cut_points": kept.dropped_cut_points,
            "plain_precision": {c: round(float(v), 6) for c, v in kept.plain_precision.items()},
            "precision": {c: round(float(v), 6) for c, v in kept.precision.items()},
            "standard_error": {c: round(float(v), 6) for c, v in kept.standard_error.items()},
            "fits": kept.fits,
            "plain_mean": round(kept.plain_mean, 6), "mean": round(kept.mean, 6)})
        update = {"priorities": kept.priorities, "cut_points": kept.cut_points}
        dropped = ([f"the cut points of {', '.join(kept.dropped_cut_points)}"]
                   if kept.dropped_cut_points else []) + \
            (["the priorities"] if kept.dropped_priorities else [])
        plpy.notice(
            f"learned release of {rows.tbl.label}: "
            f"{'left out ' + ' and '.join(dropped) if dropped else 'everything learned kept'} "
            f"(workload precision {kept.mean:.3f}, plain Mondrian {kept.plain_mean:.3f}; on the "
            f"{len(predicates)} stored queries every queried column's gain over plain Mondrian "
            f"clears {GUARD_STANDARD_ERRORS:g} standard error of it)")
    record["seconds"] = round(time.monotonic() - started, 3)
    record["cpu_seconds"] = round(time.process_time() - cpu_started, 3)
    update["guard"] = record
    run(plpy, "UPDATE anon.releases SET parameters = parameters || $2 WHERE release_id = $1",
        ["int4", "jsonb"], [release_id, jsonb_text(update)])
    return record


def resolve_priorities(plpy, tbl, priorities, qi_names):
    """(normalized weights over the QIs or None, origin) from the ``priorities`` argument."""
    value = jsonb(priorities) if isinstance(priorities, str) and priorities.strip()[:1] in "{[" \
        else priorities
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None, None
    if isinstance(value, str):
        if value.strip().lower() != "learned":
            raise InvalidParameter(
                f"priorities => {value!r} is not understood",
                hint="Pass 'learned', 'none', or a JSON object such as '{\"age\": 1, \"sex\": 0}'.")
        return learned_priorities(plpy, tbl, qi_names), "learned"
    if not isinstance(value, dict):
        raise InvalidParameter(
            "priorities must be a JSON object of column weights",
            hint='e.g. priorities => \'{"age": 1, "sex": 0.5}\'::jsonb')
    return normalize_weights(value, qi_names), "explicit"


def _learned(plpy, query: str, tbl, missing: str, otherwise: str) -> list[dict]:
    """The rows of what anon.learn_priorities stored for the table ($1), or 42704 saying so."""
    rows = run(plpy, query, ["oid"], [tbl.oid])
    if not rows:
        raise UndefinedObject(missing,
                              hint="Run SELECT * FROM anon.learn_priorities('<table>') first, or "
                                   + otherwise)
    return rows


def learned_priorities(plpy, tbl, qi_names):
    rows = _learned(plpy, "SELECT column_name::text AS c, weight FROM anon.priorities "
                          "WHERE source = $1::oid::regclass", tbl, f"no learned priorities for {tbl.label}",
                    "pass explicit priorities.")
    learned = {r["c"]: float(r["weight"]) for r in rows if r["c"] in qi_names}
    if not any(learned.values()):
        raise InvalidParameter(
            f"the workload never uses a quasi-identifier of {tbl.label}",
            hint="All learned weights of the quasi-identifiers are 0; load queries that use them "
                 "or pass explicit priorities.")
    return normalize_weights(learned, qi_names)


def learned_cut_points(plpy, tbl, qi_names):
    """({column: [[threshold, left_inclusive], ...]} of the QIs, the QIs the workload filters
    on without constants, whose cut points could not be learned), from the stored profile."""
    rows = _learned(plpy, "SELECT cut_points, report->'no_constants' AS no_constants "
                          "FROM anon.workload_profiles WHERE source = $1::oid::regclass", tbl,
                    f"no workload profile for {tbl.label}: cut points are learned with it",
                    "pass cut_points => false.")
    stored = jsonb(rows[0]["cut_points"]) or {}
    unlearned = jsonb(rows[0]["no_constants"]) or []
    return ({c: cuts for c, cuts in stored.items() if c in qi_names},
            [c for c in unlearned if c in qi_names])


# ---------------------------------------------------------------------------- partitioning run

def model_for(spec: ReleaseSpec):
    """The core model a prioritized Mondrian release was made with (its specification)."""
    settings = spec.settings
    return PrioritizedMondrian(
        k=spec.promise.k, l=spec.promise.l, priorities=settings.priorities,
        metric_weights=settings.metric_weights,
        cut_points={c: [tuple(x) for x in cuts] for c, cuts in (settings.cut_points or {}).items()},
        cut_tolerance=settings.cut_tolerance, **mondrian_family.core_models(spec))


@sql_entry
def partition(plpy, GD, release_id: int):
    return method.run(RELEASE_METHOD, plpy, GD, release_id)


def publish_region(ctx: method.Run, rows: mondrian_family.ReleaseRows, model):
    return mondrian_family.partition_output(ctx, rows, model.labels_, model.n_classes_,
                                            slice_rows=out_of_core.SLICE_ROWS)


def read(ctx: method.Run) -> mondrian_family.ReleaseRows:
    return mondrian_family.load_release_rows(ctx.plpy, ctx.release, ctx.spec)


def fit(rows: mondrian_family.ReleaseRows, spec: ReleaseSpec) -> PrioritizedMondrian:
    sensitive, ordered, names = mondrian_family.sensitive_for_models(rows, spec)
    return model_for(spec).fit(rows.encoded, sensitive, target=rows.target,
                                     sensitive_ordered=ordered, sensitive_names=names)


def publish_partition(ctx: method.Run, rows: mondrian_family.ReleaseRows, model) -> tuple[dict, dict]:
    priorities = ctx.spec.settings.priorities
    extra = {}
    if priorities:
        names = [c.name for c in rows.qis]
        extra["c_wdm"] = weighted_discernibility(rows.frame, model.labels_, priorities)
        # scored with the release's own priorities; anon.release_report rescores it with
        # weights that do not depend on the release (comparable across releases)
        extra["c_wdm_weights"] = normalize_weights(priorities, names)
        extra["c_wdm_weights_origin"] = "release"
    return mondrian_family.partition_output(ctx, rows, model.labels_, model.n_classes_,
                                     extra_metrics=extra)


# the contract (plpy_anon/db/method.py), registered in plpy_anon/db/methods/registry.py
RELEASE_METHOD = ReleaseMethod(
    METHOD, resolve=resolve, read=read, fit=fit, publish=publish_partition,
    check_relations=compact.check_view,
    # a release larger than plpy_anon.build_memory: the top cuts by its own ranking on a sample,
    # kept on exact counts, each region fitted by this fit
    out_of_core=functools.partial(out_of_core.run_out_of_core, read=mondrian_family.read_region,
                                  fit=fit, publish=publish_region))
