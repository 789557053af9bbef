"""Re-identification and attribute-disclosure risk of a relation: the figures of anon.risk_report
(whose entry, choosing the relation and columns, is ``risk_report.py``) and the report every
release stores in its catalog row (``anon.releases.risk``) at creation and refresh.

The counting is SQL, so it scales with the relation: one ``GROUP BY`` over the quasi-identifiers
(``class_counts.py``; a build's check and its stored report share that pass) gives the
class-size histogram (size, number of classes: a few hundred rows whatever the table size) and,
per sensitive column, the class x value table (class and value as dense ranks), whose formulas
(entropy, recursive (c,l), EMD) are numpy
(``plpy_anon/core/risk.py``). NULL is a value of its own in a quasi-identifier (rows with NULL
there form their own class, as GROUP BY groups them); in a sensitive column it is no value an
attacker is unsure between: its rows are left out of the diversity and closeness figures (a class
whose sensitive values are all NULL has 0 distinct values).

Runs as the caller (SECURITY INVOKER): a role that may not read the relation gets 42501 from
PostgreSQL itself.

The result is long, one figure a row: ``(measure, column_name, value, detail)``; column_name is
NULL for figures of the whole relation, the sensitive column otherwise; value is NULL where a
figure is not applicable or not defined, and detail says why.
"""
from __future__ import annotations

import json
import numbers

from plpy_anon.core import risk as core
from plpy_anon.core.errors import AnonError, InvalidParameter
from plpy_anon.core.regions import row_bytes
from plpy_anon.db import columns
from plpy_anon.db.class_counts import Counter, orderable
from plpy_anon.db.sqltext import build_memory, jsonb, run
from plpy_anon.spec import Promise

ORDERED_CATEGORIES = {"N", "D"}       # numbers, dates and times: ordered EMD; the rest: equal distance
READABLE_RELKINDS = {"r": "table", "p": "partitioned table", "v": "view", "m": "materialized view",
                     "f": "foreign table"}


class UndefinedColumn(AnonError):
    sqlstate = "42703"


RELATION_QUERY = """
SELECT c.oid::int8 AS oid, n.nspname::text AS schema, c.relname::text AS name, c.relkind::text AS relkind
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = $1::pg_catalog.regclass
"""

def describe(measure, column, value, detail=None):
    # counts stay integers in the stored JSON (exports and reports print them exactly)
    exact = None if value is None else int(value) if isinstance(value, numbers.Integral) else float(value)
    return {"measure": measure, "column_name": column, "value": exact, "detail": detail}


# ---------------------------------------------------------------------------- what to count

class Target:
    """The relation to count and its quasi-identifier / sensitive columns."""

    def __init__(self, relation: str, label: str, qis: list[str], sensitive: list[str],
                 ordered: dict[str, bool], notes: dict[str, str]):
        self.relation, self.label, self.qis, self.sensitive = relation, label, qis, sensitive
        self.ordered, self.notes = ordered, notes
        self.skipped: dict[str, str] = {}     # sensitive column -> why its figures are NULL
        #: (the relation, its class_counts.Storage) when the relation is a compact release's view
        #: whose stored classes the caller may read: counted from them (one row per class)
        self.stored = None


def release_target(plpy, release: dict, spec, quasi_identifiers, sensitive) -> Target:
    """A release's released relation, its QIs (the released, generalized columns an analyst links
    on: the class key of ``spec``, what its verification reads, a ``verify.Spec`` the caller got
    from verify.spec_for) and sensitive columns from the catalog, unless given."""
    params = jsonb(release["parameters"])
    notes = {}
    qis = list(quasi_identifiers) if quasi_identifiers is not None else list(spec.class_key)
    if not qis:
        notes["classes"] = (f"not applicable: a {release['method']} release has no classes "
                            "(it perturbs values instead of generalizing them)")
    if sensitive is not None:
        sens = list(sensitive)
    elif spec.count_tables:
        sens = []
    else:
        sens = list(Promise.of(params).sensitive or ())      # fusion names one, as text
    name = f"{release['release_schema']}.{release['release_name']}"
    label = f"release {name} ({release['method']})"
    target = Target(spec.relation, label, qis, sens, {}, notes)
    if sensitive is None:
        for attr in spec.count_tables:
            target.skipped[attr] = ("not applicable: Break-Merge publishes each sensitive column in "
                                    "a table of its own, per group (see the catalog's verification)")
    return target


# ---------------------------------------------------------------------------- the counts

def count_rows(plpy, relation: str) -> int:
    return int(plpy.execute(f"SELECT count(*)::int8 AS n FROM {relation}")[0]["n"])


def estimated_rows(plpy, relation: str) -> float:
    """The planner's estimate of ``relation``'s rows (a table, a view, a partitioned table)."""
    plan = plpy.execute(f"EXPLAIN (FORMAT JSON) SELECT FROM {relation}")[0]["QUERY PLAN"]
    return float((json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]["Plan Rows"])


def report_budget(plpy, target: Target) -> int | None:
    """plpy_anon.build_memory where ``target``'s rows would not fit it as a build counts them
    (core.regions.row_bytes of its columns a row, the planner's rows): its report's pass is then
    bounded by it (class_counts.pass_settings) and keeps figures, not class x value tables, as
    the check of an out-of-core release does; None below it."""
    budget = build_memory(plpy)
    wanted = estimated_rows(plpy, target.relation) * row_bytes(len(target.qis) + len(target.sensitive))
    return budget if wanted > budget else None


# ---------------------------------------------------------------------------- the report

def compute(plpy, target: Target, *, population=None, risk_threshold=0.2, recursive_c=3.0,
            counter: Counter | None = None) -> list[dict]:
    """The report's rows for ``target``; its counts from ``counter`` when given (a build's
    check has counted them already, class_counts.py)."""
    if not 0 < risk_threshold <= 1:
        raise InvalidParameter(f"risk_threshold {risk_threshold:g} is not in (0, 1]",
                               hint="A record is at risk when its re-identification probability "
                                    "exceeds risk_threshold, e.g. 0.2 (classes below 5 rows).")
    if population is not None and population <= 0:
        raise InvalidParameter(f"population {population} is not positive",
                               hint="Pass the number of records in the population, or omit it.")
    if not recursive_c > 0:
        raise InvalidParameter(f"recursive_c {recursive_c:g} is not positive",
                               hint="Recursive (c,l)-diversity needs c > 0, e.g. 3.")
    if target.qis:
        if counter is None:
            counter = Counter(plpy, budget=report_budget(plpy, target), c=recursive_c,
                              stored=target.stored)
            counter.expect(target.relation, target.qis, target.sensitive, target.ordered)
        counts = counter.get(target.relation, target.qis, target.sensitive)
        figures = core.class_figures(counts.sizes, counts.classes,
                                     risk_threshold=risk_threshold, population=population)
        # a NULL is no value (ClassCounts.known)
        by_column = {s: counts.sensitive_figures(s, ordered=target.ordered[s], c=recursive_c)
                     for s in target.sensitive}
    else:
        figures = {"rows": count_rows(plpy, target.relation)}
        by_column = {}
    return describe_all(target, figures, by_column, population=population,
                        risk_threshold=risk_threshold, recursive_c=recursive_c)


def describe_all(target, figures, by_column, *, population, risk_threshold, recursive_c) -> list[dict]:
    """The report's rows; ``by_column``: core.sensitive_figures of each sensitive column."""
    rows = figures["rows"]
    empty = "not defined: the relation has no rows" if rows == 0 else None
    na = target.notes.get("classes")
    qis = ", ".join(target.qis)
    out = [describe("rows", None, rows, target.label)]
    class_measures = [
        ("classes", f"equivalence classes over ({qis}); NULL is a value of its own"),
        ("smallest_class", "k: rows in the smallest class"),
        *[(f"records_in_classes_below_{x}", f"records in classes of fewer than {x} rows")
          for x in core.SMALL_CLASS_LIMITS],
        ("prosecutor_risk_max", "1 / smallest class"),
        ("prosecutor_risk_avg", "mean over records of 1 / class size = classes / rows"),
        ("prosecutor_records_at_risk", f"records whose prosecutor risk 1 / class size exceeds {risk_threshold:g}"),
    ]
    estimator = (f"population N = {population}; population class size estimated as "
                 f"F_j = f_j * N / n (uniform random sample, El Emam & Dankar 2008); "
                 f"not a population-uniqueness model: the prosecutor figure is the upper bound")
    pop_measures = [
        ("journalist_risk_max", "max over classes of 1 / F_j; " + estimator),
        ("journalist_records_at_risk", f"records with 1 / F_j above {risk_threshold:g}; " + estimator),
        ("marketer_risk", "(1/n) sum_j f_j / F_j = classes / N; " + estimator),
    ]
    for measure, detail in class_measures:
        if na:
            out.append(describe(measure, None, None, na))
        else:
            value = figures[measure]
            out.append(describe(measure, None, value, empty if value is None and measure != "classes" else detail))
    for measure, detail in pop_measures:
        if population is None:
            out.append(describe(measure, None, None, "not computed: pass population (the size of the "
                                                     "population the relation is a sample of)"))
        elif na:
            out.append(describe(measure, None, None, na))
        else:
            value = figures[measure]
            out.append(describe(measure, None, value, empty if value is None else detail))
    for s, why in target.skipped.items():
        for measure in ("distinct_l", "entropy_l", "recursive_cl_l", "t_closeness"):
            out.append(describe(measure, s, None, why))
    for s in target.sensitive:
        if na:
            for measure in ("distinct_l", "entropy_l", "recursive_cl_l", "t_closeness"):
                out.append(describe(measure, s, None, na))
            continue
        sf = by_column[s]
        emd = ("ordered EMD over the column's distinct values in order (NULL rows left out)"
               if target.ordered[s] else "equal-distance EMD")
        details = {
            "distinct_l": "min over classes of distinct values that are not NULL",
            "entropy_l": "exp(min over classes of -sum p ln p)",
            "recursive_cl_l": f"largest l with r_1 < c (r_l + ... + r_m) in every class, c = {recursive_c:g}",
            "t_closeness": f"max over classes of the {emd} to the relation's distribution",
        }
        for measure, detail in details.items():
            out.append(describe(measure, s, sf[measure], empty if sf[measure] is None else detail))
    return out


def stored_target(plpy, release: dict, spec) -> Target | None:
    """What the report stored with a release counts (its QIs and its orderable sensitive columns
    still released), from what its verification reads (``spec``, as for :func:`release_target`);
    None when there is nothing to read (``spec`` None: a view refreshed WITH NO DATA or a method
    plpy_anon does not know)."""
    if spec is None:
        return None
    target = release_target(plpy, release, spec, None, None)
    cols = {}
    if target.sensitive:
        oid = run(plpy, RELATION_QUERY, ["text"], [target.relation])[0]["oid"]
        cols = {c.name: c for c in columns.relation_columns(plpy, int(oid))}
    target.sensitive = [s for s in target.sensitive if s in cols]   # e.g. fusion hides it
    for s in [s for s in target.sensitive if not orderable(plpy, cols[s].display_type)]:
        target.sensitive.remove(s)      # a release keeps e.g. a json column as it is
        target.skipped[s] = f"not computed: type {cols[s].display_type} has no ordering"
    target.ordered = {s: cols[s].category in ORDERED_CATEGORIES for s in target.sensitive}
    return target


def store(plpy, release_id: int, target: Target | None, counter: Counter | None = None
          ) -> list[dict] | None:
    """The risk report of a release just built (``target``: :func:`stored_target`), written to
    anon.releases.risk (called by ``publish.record`` at creation and every refresh, with the
    counter its check used). NULL is stored when the target is None."""
    report = compute(plpy, target, counter=counter) if target is not None else None
    store_report(plpy, release_id, report)
    return report


def store_report(plpy, release_id: int, report: list[dict] | None) -> None:
    """Write a computed report (or NULL) to anon.releases.risk."""
    run(plpy, "UPDATE anon.releases SET risk = $2 WHERE release_id = $1", ["int4", "jsonb"],
        [release_id, json.dumps(report) if report is not None else None])
