"""The workload store, ``anon.learn_priorities``, ``anon.release_report``, ``anon.workload_precision``.

Sources of statements, read in one query each:

* ``anon.workload`` (query text, frequency): filled by SQL (``anon.add_queries``, INSERT) or by
  the client from server logs (``plpy_anon.client.querylog.load_queries``);
* ``pg_stat_statements`` when that extension is installed (its normalized ``$1`` texts, ``calls``
  as the frequency, this database only, rows of roles that may SELECT the source only). When the
  view exists but the library is not preloaded, a WARNING says so and the store alone is used.

Unqualified table names in the statements are resolved in the schema of the source table (the
analysts' search_path is not known inside the server); the catalog given to the resolver holds
every ordinary table, view and materialized view outside the system schemas.

Learning replaces the source's rows in ``anon.priorities`` and its ``anon.workload_profiles`` row
in the calling transaction: an error (empty workload, nothing reading the table) stores nothing.
"""
from __future__ import annotations

import io
import json
import os
from collections import Counter

from plpy_anon.core.errors import InvalidParameter
from plpy_anon.core.metrics import release_metrics
from plpy_anon.core.workload import (
    ClassRegions,
    discernibility,
    normalize_weights,
    weighted_discernibility,
)
from plpy_anon.core.workload import (
    workload_precision as core_workload_precision,
)
from plpy_anon.db import guards, release_rows
from plpy_anon.db.errors import sql_entry
from plpy_anon.db.methods import mondrian_family, prioritized_mondrian
from plpy_anon.db.sqltext import jsonb, jsonb_text, run
from plpy_anon.db.workload_statements import (
    SIZE_SETTING,
    fit_learner,
    max_statement_bytes,
    qi_workload,
    stored_statements,
)
from plpy_anon.spec import ReleaseSpec

MONDRIAN_METHODS = ("mondrian", "prioritized_mondrian")

@sql_entry
def add_queries_from_log(plpy, log_file, *, log_format):
    """Statements of a server log into anon.workload; the file is read by pg_read_file, whose
    privilege checks (superuser, pg_read_server_files) decide who may read it."""
    text = run(plpy, "SELECT pg_catalog.pg_read_file($1) AS t", ["text"], [log_file])[0]["t"]
    from plpy_anon.querylog.logs import read_server_log  # sqlglot: only logs need it
    result = read_server_log(io.StringIO(text or ""), log_format, max_statement_bytes(plpy))
    counted = Counter(s.text for s in result.statements)
    added = run(plpy, "SELECT anon.add_queries($1, $2, NULL, $3) AS n",
                ["text[]", "int8[]", "text"],
                [list(counted), list(counted.values()), "log:" + os.path.basename(log_file)]
                )[0]["n"] if counted else 0
    plpy.notice(f"{log_file}: {result.entries} log entries, {len(result.statements)} statements "
                f"({len(counted)} distinct) added to anon.workload, {result.skipped} skipped "
                f"({result.not_single_query} not a single query, {result.too_long} longer than "
                f"{SIZE_SETTING})")
    return added


@sql_entry
def learn_priorities(plpy, source, *, projection_share, use_pg_stat_statements):
    tbl = guards.table(plpy, source)
    if projection_share is None:
        raise InvalidParameter("projection_share must not be NULL",
                               hint="Pass a number in [0, 1]; 0.5 weighs SELECT and WHERE equally.")
    statements = stored_statements(plpy, tbl, use_pg_stat_statements is not False)
    learner = fit_learner(plpy, tbl, statements, projection_share)
    store(plpy, tbl, learner)
    report = learner.report_
    if report["too_long"]:
        plpy.notice(
            f"{report['too_long']} statements longer than {max_statement_bytes(plpy)} bytes were "
            "skipped, not parsed",
            hint=f"Raise {SIZE_SETTING} (SET {SIZE_SETTING} = '1MB') to learn from them: parsing "
                 "a long statement is one uninterruptible step of seconds or more.")
    if learner.no_constants_:
        plpy.notice(
            f"no cut points learned for {', '.join(learner.no_constants_)} of {tbl.label}: the "
            "workload filters on them without numeric constants (pg_stat_statements keeps $1 "
            "placeholders, not values)",
            hint="Add statements with their constants (SELECT anon.add_queries(...), or the "
                 "client's load-queries from a server log), then learn again; cut_points => "
                 "true releases these columns without cut points.")
    plpy.notice(
        f"learned priorities of {tbl.label} from {report['statements']} statements "
        f"({report['distinct_statements']} distinct): {report['used']} read the table, "
        f"{report['parse_errors']} did not parse, {report['unresolved']} did not resolve, "
        f"{report['other_tables']} read other tables, {report['not_queries']} were not queries "
        f"({learner.elapsed_seconds_:.2f} s)")
    summary = learner.summary()
    return [
        {"column_name": name, "projection": int(row.projection), "selection": int(row.selection),
         "group_by": int(row.group_by), "order_by": int(row.order_by), "weight": float(row.weight)}
        for name, row in summary.iterrows()
    ]


def store(plpy, tbl, learner):
    run(plpy, "DELETE FROM anon.priorities WHERE source = $1::oid::regclass", ["oid"], [tbl.oid])
    counts = learner.counts_
    run(plpy, """
        INSERT INTO anon.priorities (source, column_name, projection, selection, group_by,
                                     order_by, weight)
        SELECT $1::oid::regclass, c, p, s, g, o, w
        FROM unnest($2::text[], $3::int8[], $4::int8[], $5::int8[], $6::int8[], $7::float8[])
             AS u(c, p, s, g, o, w)""",
        ["oid", "text[]", "int8[]", "int8[]", "int8[]", "int8[]", "float8[]"],
        [tbl.oid, list(counts.index), counts["projection"].tolist(), counts["selection"].tolist(),
         counts["group_by"].tolist(), counts["order_by"].tolist(),
         [float(learner.weights_[c]) for c in counts.index]])
    # thresholds: numbers on numeric columns, the compared strings on the others
    cut_points = {c: [[r.threshold if isinstance(r.threshold, str) else float(r.threshold),
                       bool(r.left_inclusive)] for r in frame.itertuples()]
                  for c, frame in learner.cut_points_.items()}
    constants = {c: [{"op": op, "values": list(values), "frequency": int(f)}
                     for (op, values), f in counter.most_common()]
                 for c, counter in learner.constants_.items()}
    run(plpy, """
        INSERT INTO anon.workload_profiles (source, projection_share, report, cut_points, constants)
        VALUES ($1::oid::regclass, $2, $3, $4, $5)
        ON CONFLICT (source) DO UPDATE SET learned_at = pg_catalog.now(),
            projection_share = EXCLUDED.projection_share, report = EXCLUDED.report,
            cut_points = EXCLUDED.cut_points, constants = EXCLUDED.constants""",
        ["oid", "float8", "jsonb", "jsonb", "jsonb"],
        [tbl.oid, float(learner.projection_share),
         json.dumps({**learner.report_, "no_constants": learner.no_constants_}),
         json.dumps(cut_points), json.dumps(constants, default=str)])


# ---------------------------------------------------------------------------- release report

class _ReleaseEvaluation:
    """A Mondrian-family release re-derived from its source's current rows (what a refresh
    would publish): labels, original QI values and the workload restricted to the QIs."""

    def __init__(self, plpy, name):
        self.release = release_rows.find(plpy, name)
        if self.release["method"] not in MONDRIAN_METHODS:
            raise InvalidParameter(
                f"release {name} was made by method {self.release['method']!r}; the report "
                "re-derives Mondrian classes",
                hint=f"Use it on releases of {', '.join(MONDRIAN_METHODS)}.")
        # a plain Mondrian release is a prioritized one without priorities
        self.spec = ReleaseSpec.decode("prioritized_mondrian", jsonb(self.release["parameters"]))
        guards.table(plpy, self.release["source"])      # guarded before the rows are read
        rows = mondrian_family.load_release_rows(plpy, self.release, self.spec)
        self.tbl, self.qis, self.encoded, self.frame = rows.tbl, rows.qis, rows.encoded, rows.frame
        model = prioritized_mondrian.model_for(self.spec).fit(
            self.encoded, rows.sensitive, target=rows.target)
        self.labels = model.labels_
        self.n_classes = model.n_classes_
        self.plpy = plpy

    def weights(self, given=None):
        """The C_WDM weights: ``given`` (a JSON object column -> weight), else the learned
        priorities of the source, else equal weights. Never the release's own priorities: the
        weights depend on the source only, so that a plain and a prioritized release of the same
        source are scored on the same scale (a release judged by its own favourite attributes
        would always look best)."""
        names = [c.name for c in self.qis]
        if given is not None:
            given = jsonb(given)
            if not isinstance(given, dict):
                raise InvalidParameter(
                    "weights must be a JSON object mapping quasi-identifiers to numbers",
                    hint='e.g. wdm_weights => \'{"age": 1, "sex": 0.1}\'::jsonb, or NULL for the '
                         "learned priorities (else equal weights)")
            return normalize_weights(given, names), "given"
        rows = run(self.plpy, "SELECT column_name::text AS c, weight FROM anon.priorities "
                              "WHERE source = $1::oid::regclass", ["oid"], [self.tbl.oid])
        learned = {r["c"]: float(r["weight"]) for r in rows if r["c"] in names}
        if learned and any(learned.values()):
            return normalize_weights(learned, names), "learned"
        return normalize_weights({n: 1.0 for n in names}, names), "equal"

    def workload(self):
        """(texts, predicates, frequencies) of stored statements bounding the QIs."""
        return qi_workload(self.plpy, self.tbl, self.qis)

    def precision(self):
        texts, predicates, frequencies = self.workload()
        if not predicates:
            return texts, None
        regions = ClassRegions.from_rows(self.frame, self.labels)
        return texts, core_workload_precision(self.frame, self.labels, predicates, frequencies,
                                              regions=regions)


@sql_entry
def release_report(plpy, name, weights=None):
    ev = _ReleaseEvaluation(plpy, name)
    k = ev.spec.promise.k
    metrics = release_metrics(ev.encoded, ev.labels, k)
    weights, weights_origin = ev.weights(weights)
    c_wdm = weighted_discernibility(ev.frame, ev.labels, weights)
    _texts, precision = ev.precision()
    workload = precision.as_dict() if precision is not None else {"queries": 0}
    stored = {"c_wdm": c_wdm, "c_wdm_weights": weights, "c_wdm_weights_origin": weights_origin,
              "workload": workload}
    run(plpy, "UPDATE anon.releases SET metrics = metrics || $2 WHERE release_id = $1",
        ["int4", "jsonb"], [ev.release["release_id"], jsonb_text(stored)])
    return [{
        "release_name": f"{ev.release['release_schema']}.{ev.release['release_name']}",
        "method": ev.release["method"], "k": k, "achieved_k": metrics["achieved_k"],
        "classes": metrics["n_classes"], "row_count": int(ev.labels.size),
        "c_dm": discernibility(ev.labels), "c_wdm": c_wdm,
        "ncp_percent": metrics["ncp_percent"],
        "ncp_per_attribute": jsonb_text(metrics["ncp_per_attribute"]),
        "weights": jsonb_text(weights), "workload_queries": workload["queries"],
        "mean_precision": workload.get("mean_precision"),
        "mean_recall": workload.get("mean_recall"),
        "weighted_precision": workload.get("weighted_precision"),
        "weighted_recall": workload.get("weighted_recall"),
    }]


@sql_entry
def workload_precision(plpy, name):
    ev = _ReleaseEvaluation(plpy, name)
    texts, precision = ev.precision()
    if precision is None:
        return []
    table = precision.per_query
    return [
        {"query": text, "frequency": int(row.frequency), "true_rows": int(row.true_rows),
         "released_rows": int(row.released_rows), "answer_precision": float(row.precision),
         "answer_recall": float(row.recall)}
        for text, row in zip(texts, table.itertuples())
    ]


