"""Break-Merge releases (``anon.break_merge``), dependency detection (``anon.detect_dependencies``,
``anon.dependency_network``) and knowledge-breach reports (``anon.breach_report``).

Objects of a Break-Merge release ``<name>`` (all in the release schema):

* ``<name>``: the release's storage, ONE materialized view holding both the QIT classes
  (generalized QIs, ``_gid``, ``_count`` rows, ``_attribute`` NULL) and every ST row
  (``_gid``, ``_attribute``, ``_value``, ``_count``). Because the QIT and the STs come out of the
  same statement, a refresh (``anon.refresh`` builds a new storage beside the old and swaps it in;
  a plain ``REFRESH MATERIALIZED VIEW`` works in place) rebuilds them from one snapshot in one
  transaction: they cannot drift apart. It holds exactly what the QIT and the
  STs hold together, nothing more.
* ``<name>_qit``: view, one row per individual: the generalized QIs exactly as ``anon.mondrian_view``
  shows them (same types, same literals) plus ``gid``. No sensitive value, no identifier.
* ``<name>_st_<attribute>``: view per sensitive attribute, rows ``(gid, value, count)``.
* ``<name>_merged``: the analyst's merge, a view joining QIT classes and STs on ``gid`` with a
  ``weight`` = individuals the combination stands for when the STs are read as independent inside
  the group (``rows * prod count / size^A``; weights of a group sum to its size).

The partition is strict Mondrian with the release's ``k`` on the QIs; ``l`` is enforced by merging
ST groups (see :mod:`plpy_anon.core.breakmerge`), which keeps the QIs as precise as the k-anonymous
partition makes them.

Released QI values: Python partitions on a float8 reading of numeric, date and timestamp QIs
(±infinity and NaN ordered as PostgreSQL orders them) but never writes their bounds: the run
returns each source row's (tableoid, ctid) and class, and the storage query joins them back to the
source (same snapshot: the run is STABLE and called by that query) and takes ``min``/``max`` per
class in the column's own type, with Mondrian's ``range_expression`` (inclusive bounds,
upper-unbounded at a discrete type's maximum, ±infinity and NaN released as they are). Categorical
value sets and hierarchy labels come from the run. A class's QIT count is the number of its rows
inside its released values (Mondrian's ``containment_test``); the STs count the rows the run
partitioned, so a row outside its class's values makes the QIT and the STs disagree, and the
post-build verification refuses the release.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from itertools import combinations

import numpy as np
import pandas as pd

from plpy_anon.core.bayesnet import BayesNet
from plpy_anon.core.breach import break_merge_breach, plain_breach
from plpy_anon.core.breakmerge import (
    MAX_ANTECEDENTS,
    BreakMerge,
    antecedent_sizes,
    check_categories,
    check_diversity_feasible,
    describe_rule,
    relabel_in_order,
    validate_attribute_roles,
)
from plpy_anon.core.encoding import encode_factorized, encode_numeric, finite_for_ordering
from plpy_anon.core.errors import InsufficientData, InvalidParameter
from plpy_anon.core.generalize import class_bounds, class_code_range
from plpy_anon.core.k_anonymity import check_k
from plpy_anon.core.mondrian import Mondrian
from plpy_anon.db import columns as catalog
from plpy_anon.db import compact, guards, method, publish, release_rows, verify
from plpy_anon.db.class_counts import orderable
from plpy_anon.db.errors import sql_entry
from plpy_anon.db.generalization import (
    check_float_digits,
    class_literals,
    column_for,
    containment_test,
    int_array_literal,
    qi_value,
    range_expression,
)
from plpy_anon.db.identifiers import release_roles
from plpy_anon.db.method import ReleaseMethod
from plpy_anon.db.reader import (
    CANONICAL_TYPES,
    merge_equal_spellings,
    nondeterministic_collations,
    read_columns,
)
from plpy_anon.db.sqltext import columns_as_text, ident, jsonb, run
from plpy_anon.spec import ReleaseSpec

METHOD = "break_merge"
RESERVED = ("gid", "weight", "_gid", "_attribute", "_value", "_count")
SCOPES = ("qi", "sensitive", "all")


# ---------------------------------------------------------------------------- anon.break_merge


def resolve(plpy, tbl, spec: ReleaseSpec) -> method.Plan:
    promise, settings = spec.promise, spec.settings
    k, l, max_rule_probability = promise.k, promise.l, settings.max_rule_probability
    quasi_identifiers, sensitive = promise.quasi_identifiers, promise.sensitive
    if quasi_identifiers is not None and sensitive is not None:
        validate_attribute_roles(list(quasi_identifiers), list(sensitive))
    roles = release_roles(plpy, tbl, quasi_identifiers=quasi_identifiers, sensitive=sensitive,
                          identifiers=promise.identifiers)
    qis = [c for c, role in roles if role == "quasi_identifier"]
    sens = [c for c, role in roles if role == "sensitive"]
    if not qis:
        raise InvalidParameter(
            f"table {tbl.label} has no quasi-identifier for the QIT",
            hint="Pass quasi_identifiers => ARRAY[...] or declare them with anon.set_column_role.",
        )
    validate_attribute_roles([c.name for c in qis], [c.name for c in sens])
    for col in qis:
        catalog.check_quasi_identifier(tbl, col)
    _check_reserved([c.name for c in qis + sens])
    _check_alpha(max_rule_probability)
    max_categories = int(settings.max_categories)
    precheck_source(plpy, tbl, sens, k=k, l=l, max_categories=max_categories)
    hierarchical = set(catalog.hierarchy_columns(plpy, tbl))
    parameters = {
        "k": k,
        "l": l,
        "max_categories": max_categories,
        # QI -> SA rule check (None: none), re-applied by every refresh
        "max_rule_probability": max_rule_probability,
        "max_rule_antecedents": settings.max_rule_antecedents,
        "quasi_identifiers": [c.name for c in qis],
        "sensitive": [c.name for c in sens],
        "hierarchies": [c.name for c in qis if c.name in hierarchical and c.kind == "categorical"],
    }

    def build(release_id, qualified, name):
        release = release_rows.by_id(plpy, release_id)
        stored = _spec(release)
        release_rows.create_frozen_view(plpy, qualified, storage_query(plpy, tbl, qis, stored, release_id))
        index_and_analyze(plpy, qualified, create_index=True)
        create_views(plpy, release["release_schema"], name, stored)
        check_released_rules(plpy, release)

    return method.Plan(parameters, default_name=f"{tbl.name}_bm", build=build,
                       objects=lambda name: _objects(name, [c.name for c in sens]))


def precheck_source(plpy, tbl, sens, *, k, l, max_categories):
    """Refuse, before building anything, what the run would refuse: fewer rows than k, a sensitive
    column with too many values or with fewer than l. WHY here: inside the storage view's query an
    error reaches the user wrapped in the outer function's SPI exception; one aggregate query is
    cheap next to the run."""
    selects = ["count(*) AS n"]
    for i, col in enumerate(sens):
        name = ident(plpy, col.name)
        # json has no equality: its documents counted as jsonb (as the run and the check do)
        value = f"{name}::pg_catalog.jsonb" if col.builtin and col.type_name == "json" else name
        selects.append(f"count(DISTINCT {value}) AS d{i}, bool_or({name} IS NULL) AS z{i}")
    row = plpy.execute(f"SELECT {', '.join(selects)} FROM {tbl.quoted(plpy)}")[0]
    check_k(k, row["n"], f"table {tbl.label}")
    # a NULL takes a category of the sensitive table, but is no value for l
    known = {col.name: int(row[f"d{i}"] or 0) for i, col in enumerate(sens)}
    check_categories({c: n + bool(row[f"z{i}"]) for i, (c, n) in enumerate(known.items())},
                     max_categories)
    if l is not None and l > 1:
        check_diversity_feasible(known, l)


def _check_alpha(alpha):
    if alpha is not None and not 0 < alpha < 1:
        raise InvalidParameter(
            f"max_rule_probability must be in (0, 1), got {alpha}",
            hint="Pass e.g. max_rule_probability => 0.9, or omit it (no rule check).",
        )


def check_released_rules(plpy, release):
    """The guarantee, counted in SQL on what analysts read: for every antecedent of up to
    max_rule_antecedents released QI values or all of them (every QI class: what an attacker who
    knows a target's QI group reads) with at least k QIT rows, and every sensitive value,
    the share of the value among those rows whose value is known (each row standing for its
    gid's ST shares) stays below max_rule_probability. The run merged groups until its count had no such rule; this
    counts again on the released views, so that a release (or a refresh) whose published rows
    still show one is refused, not published."""
    spec = _spec(release)
    alpha = spec.settings.max_rule_probability
    if alpha is None:
        return
    rules = counted_rules(plpy, release, spec, threshold=alpha)
    if rules:
        raise InsufficientData(
            f"release {release['release_schema']}.{release['release_name']} would still show "
            f"{len(rules)} QI -> sensitive rule(s) at max_rule_probability = {alpha}, the strongest "
            + "; ".join(describe_rule(r) for r in rules[:3]),
            hint="Raise max_rule_probability, or release fewer sensitive attributes; nothing was "
                 "published.",
        )


def counted_rules(plpy, release, spec, *, threshold) -> list[dict]:
    """The rules a reader counts in the released QIT and STs (see check_released_rules) whose
    probability reaches ``threshold``, strongest first: one query per set of QI columns and
    sensitive attribute, each grouping the QIT by those columns and gid and joining the ST."""
    schema = release["release_schema"]
    qit = ident(plpy, schema, spec.settings.qit)
    qis = spec.promise.quasi_identifiers
    most = int(spec.settings.max_rule_antecedents or MAX_ANTECEDENTS)
    found = []
    for attribute, table in spec.settings.sensitive_tables.items():
        st = ident(plpy, schema, table)
        for r in antecedent_sizes(len(qis), most):
            for columns in combinations(qis, r):
                found += _count_rules(plpy, qit, st, list(columns), attribute, spec.promise.k,
                                      threshold)
    return sorted(found, key=lambda rule: (-rule["probability"], -rule["parent_support"]))


def _count_rules(plpy, qit, st, columns, attribute, k, threshold):
    keys = ", ".join(f"q.{ident(plpy, c)}" for c in columns)
    texts = ", ".join(f"a.{ident(plpy, c)}::text" for c in columns)
    same = " AND ".join(f"w.{ident(plpy, c)} IS NOT DISTINCT FROM a.{ident(plpy, c)}"
                        for c in columns)
    # a NULL is no value: the share of a value among the rows whose value is known
    rows = plpy.execute(plpy.prepare(f"""
        WITH q AS (SELECT {keys}, q.gid, count(*)::float8 AS n FROM {qit} AS q GROUP BY {keys}, q.gid),
             s AS (SELECT s.gid, s.value, s.count::float8 / sum(s.count) OVER (PARTITION BY s.gid)
                          AS share
                   FROM {st} AS s),
             g AS (SELECT s.gid, sum(s.share) FILTER (WHERE s.value IS NOT NULL) AS known
                   FROM s GROUP BY s.gid),
             a AS (SELECT {keys}, sum(q.n) AS support, sum(q.n * coalesce(g.known, 0)) AS known
                   FROM q LEFT JOIN g ON g.gid = q.gid GROUP BY {keys}),
             w AS (SELECT {keys}, s.value, sum(q.n * s.share) AS hits
                   FROM q JOIN s ON s.gid = q.gid WHERE s.value IS NOT NULL
                   GROUP BY {keys}, s.value)
        SELECT ARRAY[{texts}] AS parent_values, w.value::text AS child_value,
               w.hits / a.known AS probability, w.hits AS support, a.support AS parent_support
        FROM w JOIN a ON {same}
        WHERE a.support >= $1 AND a.known > 0 AND w.hits / a.known >= $2""", ["float8", "float8"]),
        [float(k), float(threshold)])
    return [{"parents": columns, "parent_values": list(r["parent_values"]), "child": attribute,
             "child_value": r["child_value"], "probability": float(r["probability"]),
             "support": float(r["support"]), "parent_support": float(r["parent_support"])}
            for r in rows]


def _check_reserved(names):
    clash = [n for n in names if n in RESERVED]
    if clash:
        raise InvalidParameter(
            f"column(s) {clash} use a name the Break-Merge views reserve ({', '.join(RESERVED)})",
            hint="Release from a view that renames them.",
        )


def _objects(name, sensitive):
    """The parameters naming a release's views, from its name (each checked as a name)."""
    objects = {
        "qit": f"{name}_qit",
        "merged": f"{name}_merged",
        "sensitive_tables": {s: f"{name}_st_{s}" for s in sensitive},
    }
    for obj in [objects["qit"], objects["merged"], *objects["sensitive_tables"].values()]:
        publish.check_name(obj, "release object name")
    # dependents first: the merge view reads the ST views, all views read the storage
    objects["objects"] = [objects["merged"], *objects["sensitive_tables"].values(), objects["qit"]]
    return objects


def storage_query(plpy, tbl, qis, spec, release_id):
    """QIT classes UNION ALL ST rows, from one call of the run function (MATERIALIZED CTE).

    The run returns each source row's (tableoid, ctid) and Mondrian class, and per class its gid
    and categorical values; the numeric/date/timestamp ranges are computed here, in SQL, as the
    ``min``/``max`` of the class's rows in the column's own type (joined back to the source read
    in the same snapshot), exactly as ``generalized_release_query`` does (shared helpers:
    ``range_expression``, ``containment_test``). A class's ``_count`` is its rows that lie inside
    its released values: a row outside them is not counted, so the QIT then disagrees with the
    STs (counted by the run) and the post-build verification refuses the release."""
    hierarchical = set(spec.built.hierarchies)
    n = len(qis)
    qi_types = [catalog.output_type(c, c.name in hierarchical) for c in qis]
    ranged = [i for i, t in enumerate(qi_types) if t in catalog.RANGE_ELEMENTS]
    listed = [i for i in range(n) if i not in ranged]
    checked = [i for i, t in enumerate(qi_types) if i in ranged or t == "text[]"]
    source = tbl.quoted(plpy)
    kept = "".join(f", {qi_value(plpy, qis[i])} AS v{i}" for i in checked)
    aggregates = "".join(f", min(rs.v{i}) AS lo{i}, max(rs.v{i}) AS hi{i}" for i in ranged)
    generalized = [
        f"{range_expression(t, i, False)} AS q{i}" if i in ranged else f"x.q{i}::{t} AS q{i}"
        for i, t in enumerate(qi_types)
    ]
    elements = ", ".join(
        f"pg_catalog.jsonb_array_elements_text(p.r -> 'classes' -> '{c}')"
        for c in ["gid"] + [f"q{i}" for i in listed]
    )
    aliases = ", ".join(["gid"] + [f"q{i}" for i in listed])
    filters = " AND ".join(containment_test(qi_types[i], i) for i in checked) or "true"
    st_cols = [
        f"pg_catalog.jsonb_array_elements_text(p.r -> 'st' -> '{c}')"
        for c in ("gid", "attribute", "value", "count")
    ]
    qit_select = [f"c.q{i} AS {ident(plpy, col.name)}" for i, col in enumerate(qis)]
    st_select = [f"NULL::{t}" for t in qi_types]
    # p: the run, once. rs: each row's class and QI values, joined to the source by
    # (tableoid, ctid); scanned for the bounds and for the counts, so materialized. classes: one
    # row per class, ranges built once. counted: per class, its rows inside its released values.
    return (
        f"WITH p AS MATERIALIZED (SELECT anon._break_merge_run({int(release_id)}) AS r),\n"
        f"rs AS MATERIALIZED (\n"
        f"    SELECT r.class_id{kept}\n"
        f"    FROM p CROSS JOIN LATERAL anon._partition_rows(\n"
        f"        ROW(p.r ->> 'row_ctids', p.r ->> 'class_ids', NULL, NULL,\n"
        f"            p.r ->> 'row_tableoids')::anon.partition,\n"
        f"        {plpy.quote_literal(source)}::pg_catalog.regclass) AS r\n"
        f"    JOIN {source} AS s ON s.tableoid = r.row_tableoid AND s.ctid = r.row_ctid),\n"
        f"bounds AS (SELECT rs.class_id{aggregates} FROM rs GROUP BY rs.class_id),\n"
        f"classes AS MATERIALIZED (\n"
        f"    SELECT b.class_id, x.gid, {', '.join(generalized)}\n"
        f"    FROM bounds AS b\n"
        f"    JOIN (SELECT x.class_no - 1 AS class_id, {aliases} FROM p,\n"
        f"          ROWS FROM ({elements}) WITH ORDINALITY AS x({aliases}, class_no)) AS x\n"
        f"      ON x.class_id = b.class_id),\n"
        f"counted AS (\n"
        f"    SELECT rs.class_id, count(*) AS n FROM rs JOIN classes AS c ON c.class_id = rs.class_id\n"
        f"    WHERE {filters} GROUP BY rs.class_id)\n"
        f"SELECT {', '.join(qit_select)}, c.gid::int4 AS _gid, NULL::text AS _attribute,\n"
        f"       NULL::text AS _value, n.n::int8 AS _count\n"
        f"FROM classes AS c JOIN counted AS n ON n.class_id = c.class_id\n"
        f"UNION ALL\n"
        f"SELECT {', '.join(st_select)}, s.gid::int4, s.attribute, s.value, s.count::int8\n"
        f"FROM p CROSS JOIN LATERAL ROWS FROM ({', '.join(st_cols)}) AS s(gid, attribute, value, count)"
    )


def index_and_analyze(plpy, qualified, create_index=False):
    """The views look ST rows up by (attribute, gid): index them, and give the planner statistics
    (without them it estimates a handful of rows and nests loops over sequential scans: seconds
    instead of milliseconds for the merge view)."""
    if create_index:
        plpy.execute(f"CREATE INDEX ON {qualified} (_attribute, _gid)")
    plpy.execute(f"ANALYZE {qualified}")


def refresh_release(plpy, GD, release, rebuild):
    """anon.refresh: rebuild the storage from one snapshot beside the old one, analyze it, and swap
    it in with the QIT/ST/merge views recreated over it (``rebuild``: refreshing.rebuild_view for
    this release, which the refresh hands in): readers keep the old release during the build,
    then see the new one whole -- at every isolation level, the new storage's rows are frozen --
    and the swap never queues in front of them for long. When other objects depend on the views,
    the storage is refreshed in place instead."""


    rebuild(analyze=True)
    # same guarantee as the first build; failing here rolls the refresh back (old release kept)
    check_released_rules(plpy, release_rows.by_id(plpy, release["release_id"]))


def verification_spec(plpy, release, stats) -> verify.Spec:
    """What verify.py checks, on the views analysts read: the QIT holds every source row, its
    classes (identical generalized QIs) at least k rows; every sensitive table counts, group by
    group, the rows the QIT gives that group, with at least l distinct values when l was asked."""
    spec = _spec(release)
    schema = release["release_schema"]
    return verify.Spec(
        relation=ident(plpy, schema, spec.settings.qit),
        class_key=list(spec.promise.quasi_identifiers), k=spec.promise.k, l=spec.promise.l,
        expected_rows=verify.expected_rows(stats), group_column="gid",
        count_tables={a: ident(plpy, schema, spec.settings.sensitive_tables[a])
                      for a in spec.promise.sensitive},
        count_values=compared_values(plpy, release, spec.promise.sensitive))


#: each column's type with every domain taken off (domains over domains, arrays of domains):
#: the built-in type its values are compared in, its array when the column is an array, and
#: whether that is pg_catalog's. Casting text to a domain would run the domain's CHECK (its
#: owner's code); casting to the type under it runs none.
BASE_TYPES = """
WITH RECURSIVE flat(name, type, depth, is_array) AS (
    SELECT a.attname::text, a.atttypid, 0, false
    FROM pg_catalog.pg_attribute a
    WHERE a.attrelid = $1 AND a.attname = ANY($2) AND NOT a.attisdropped
    UNION ALL
    SELECT f.name, CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.typelem END, f.depth + 1,
           f.is_array OR t.typtype <> 'd'
    FROM flat f JOIN pg_catalog.pg_type t ON t.oid = f.type
    WHERE t.typtype = 'd' OR (t.typcategory = 'A' AND t.typelem <> 0 AND NOT f.is_array))
SELECT DISTINCT ON (f.name) f.name, f.type::pg_catalog.regtype::text
       || CASE WHEN f.is_array THEN '[]' ELSE '' END AS base_type,
       t.typname::text AS base_name,
       t.typnamespace = 'pg_catalog'::pg_catalog.regnamespace AS builtin
FROM flat f JOIN pg_catalog.pg_type t ON t.oid = f.type
ORDER BY f.name, f.depth DESC
"""


def compared_values(plpy, release, sensitive: list[str]) -> dict[str, str]:
    """How the check compares each sensitive table's text values: as the source column's type
    (built-in types whose text may spell a value several ways: see reader.CANONICAL_TYPES; json
    as jsonb) or under its nondeterministic collation, so that two spellings of one value count
    once -- the check counts values as an analyst who knows the column's type would, not as the
    build did. A type without an ordering (xml, point) is compared by its text."""
    tbl = guards.table_in_query(plpy, release["source"])
    cols = {c.name: c for c in catalog.table_columns(plpy, tbl)}
    collated = nondeterministic_collations(plpy, tbl.oid, sensitive)
    # the search path is pg_catalog's: a built-in type's name means the built-in type
    base = {r["name"]: r for r in run(plpy, BASE_TYPES, ["oid", "text[]"],
                                      [tbl.oid, list(sensitive)])}
    out = {}
    for name in sensitive:
        col, flat = cols.get(name), base.get(name)
        if name in collated:
            out[name] = f"(value COLLATE {collated[name]})"
        elif col is None or flat is None or not flat["builtin"] or col.category in ("S", "E"):
            continue       # composite types: casting text to one checks its fields' domains
        elif flat["base_name"] in CANONICAL_TYPES:
            continue
        elif flat["base_type"] == "json":
            out[name] = "(value::pg_catalog.jsonb)"
        elif orderable(plpy, flat["base_type"]):
            out[name] = f"(value::{flat['base_type']})"
    return out


def view_definitions(plpy, schema, name, spec) -> dict[str, str]:
    """The release's plain views over its storage and their queries, in creation order (the QIT
    and the sensitive tables before the merge that reads them)."""
    storage = ident(plpy, schema, name)
    qis = ", ".join(ident(plpy, q) for q in spec.promise.quasi_identifiers)
    views = {spec.settings.qit: (f"SELECT {qis}, m._gid AS gid FROM {storage} AS m "
                                 f"CROSS JOIN LATERAL pg_catalog.generate_series(1, m._count) "
                                 f"WHERE m._attribute IS NULL")}
    for attribute in spec.promise.sensitive:
        views[spec.settings.sensitive_tables[attribute]] = (
            f"SELECT _gid AS gid, _value AS value, _count AS count FROM {storage} "
            f"WHERE _attribute = {plpy.quote_literal(attribute)}")
    views[spec.settings.merged] = merged_query(plpy, schema, storage, spec)
    return views


def create_views(plpy, schema, name, spec):
    for view, query in view_definitions(plpy, schema, name, spec).items():
        plpy.execute(f"CREATE VIEW {ident(plpy, schema, view)} AS {query}")


def check_views(plpy, release) -> None:
    """Refuse (42501) a release whose plain views are not the queries plpy_anon writes for them.
    Reading a view runs the functions in it with the reader's rights, and the release's owner may
    redefine its views (CREATE OR REPLACE VIEW ... query_to_xml('SELECT its_function()'), code no
    catalog dependency shows). Each view's text is compared with a temporary view of the expected query, both
    printed by pg_get_viewdef under the same search_path (pg_catalog: every other name qualified)."""
    spec = _spec(release)
    schema = release["release_schema"]
    expected = view_definitions(plpy, schema, release["release_name"], spec)
    changed = sorted(set(spec.built.objects) ^ set(expected))
    for view, query in expected.items():
        if not compact.view_prints_as(plpy, release, view, query):   # missing, or another query
            changed.append(view)
    if changed:
        q = release_rows.qualified_name(plpy, release)
        raise release_rows.UnsafeRelease(
            f"release {q}'s views {', '.join(changed)} are not the queries plpy_anon wrote for them",
            detail="Reading a view runs its functions with the reader's rights; plpy_anon reads only "
                   "the views it would write itself.",
            hint=f"Drop the release with SELECT anon.drop_release({plpy.quote_literal(q)}) and create it again.")


def merged_query(plpy, schema, storage, spec):
    sensitive = [(a, spec.settings.sensitive_tables[a]) for a in spec.promise.sensitive]
    qis = [ident(plpy, q) for q in spec.promise.quasi_identifiers]
    values = [f"s{i}.value AS {ident(plpy, a)}" for i, (a, _) in enumerate(sensitive)]
    counts = " * ".join(f"s{i}.count" for i in range(len(sensitive)))
    joins = "\n".join(
        f"JOIN {ident(plpy, schema, st)} AS s{i} ON s{i}.gid = q.gid"
        for i, (_, st) in enumerate(sensitive)
    )
    return (
        f"SELECT {', '.join('q.' + q for q in qis)}, q.gid, {', '.join(values)},\n"
        f"       q.n::float8 * {counts} / pg_catalog.power(g.size, {len(sensitive)}) AS weight\n"
        f"FROM (SELECT {', '.join(qis)}, _gid AS gid, _count AS n FROM {storage}"
        f" WHERE _attribute IS NULL) AS q\n"
        f"JOIN (SELECT _gid AS gid, sum(_count)::float8 AS size FROM {storage}"
        f" WHERE _attribute IS NULL GROUP BY _gid) AS g ON g.gid = q.gid\n"
        f"{joins}"
    )


# ---------------------------------------------------------------------------- the run


@sql_entry
def run_release(plpy, GD, release_id: int):
    """Partition the source, break it, return QIT classes and ST rows as one JSON document."""
    return method.run(RELEASE_METHOD, plpy, GD, release_id)


def read(ctx: method.Run) -> SourcePartition:
    return partition_source(ctx.plpy, ctx.release, ctx.spec)


def fit(part: SourcePartition, spec: ReleaseSpec) -> BreakMerge:
    alpha = spec.settings.max_rule_probability
    return BreakMerge(
        l=spec.promise.l, k=spec.promise.k, max_categories=spec.settings.max_categories,
        max_rule_probability=alpha, max_antecedents=spec.settings.max_rule_antecedents,
    ).fit(part.ordered_labels, part.sensitive,
          part.released_qis if alpha is not None else None)


def publish_run(ctx: method.Run, part: SourcePartition, broken) -> tuple[str, dict]:
    class_gid = broken.group_map_["gid"].to_numpy()[part.order_of_class]
    # per class: gid and categorical values; ranges and counts are computed in SQL from the rows
    classes = {f"q{i}": lits for i, lits in part.literals.items()}
    classes["gid"] = class_gid.tolist()
    st = _st_columns(broken.sensitive_tables_)
    metrics = {
        "n_classes": int(part.class_sizes.size),
        "n_groups": int(broken.group_sizes_.size),
        "n_merged": broken.n_merged_,
        "largest_group": int(broken.group_sizes_.max()),
        "mean_group_size": round(float(broken.group_sizes_.mean()), 3),
        "rule_check": broken.rule_check_,
        "seconds": {
            "partition": round(part.seconds, 4),
            "break": round(ctx.fit_s, 4),
            "python_total": round(ctx.elapsed(), 4),
        },
    }
    output = json.dumps({"classes": classes, "st": st, "row_ctids": part.row_ctids,
                         "row_tableoids": part.row_tableoids,
                         "class_ids": int_array_literal(part.labels)})
    return output, {"row_count": part.n_rows, "achieved_k": int(part.class_sizes.min()),
                    "metrics": metrics}


def _st_columns(tables):
    out = {"gid": [], "attribute": [], "value": [], "count": []}
    for attribute, table in tables.items():
        out["gid"] += table["gid"].tolist()
        out["attribute"] += [attribute] * len(table)
        out["value"] += [None if pd.isna(v) else str(v) for v in table["value"].tolist()]
        out["count"] += table["count"].tolist()
    return out


def _spec(release) -> ReleaseSpec:
    """A release's specification as stored (unchecked: the checks read what was promised)."""
    return ReleaseSpec.decode(release["method"], jsonb(release["parameters"]), checked=False)


@dataclass
class SourcePartition:
    """What one Mondrian run over the source gives Break-Merge and the breach report."""

    n_rows: int
    labels: np.ndarray  # Mondrian class of every row (numbered by first row)
    ordered_labels: np.ndarray  # the same classes numbered along the QIs
    order_of_class: np.ndarray  # Mondrian class -> its number along the QIs
    class_sizes: np.ndarray
    literals: dict  # categorical QI's index -> one SQL literal per class (as mondrian_view's)
    sensitive: pd.DataFrame
    seconds: float
    row_ctids: str  # the rows' ctids (read order, as labels), an array literal for SQL
    row_tableoids: str | None  # and their tableoids when the source has several relations
    released_qis: pd.DataFrame  # per row, its class's released QI values (by identity: the
    # numeric ranges as their (min, max) codes, categorical values as their literals)


def partition_source(plpy, release, spec) -> SourcePartition:
    """Read the source once, partition it with Mondrian(k), number classes along the QIs."""
    started = time.monotonic()
    tbl = guards.table_in_query(plpy, release["source"])
    cols = {c.name: c for c in catalog.columns_as_built(plpy, tbl, spec.built.hierarchies)}
    qis = [column_for(tbl, cols, n) for n in spec.promise.quasi_identifiers]
    sens = [column_for(tbl, cols, n) for n in spec.promise.sensitive]
    check_float_digits(plpy, tbl, qis)
    numeric = [c for c in qis if c.kind == "numeric"]
    # a hierarchical date's text as its hierarchy's leaves are, whatever the caller's session
    with catalog.hierarchy_text_settings(plpy):
        data = read_columns(plpy, tbl, numeric, [c for c in qis if c.kind == "categorical"] + sens)
        merge_equal_spellings(plpy, tbl, data, sens)     # l counts values, not spellings
    k = int(spec.promise.k)
    check_k(k, data.n_rows, f"table {tbl.label}")
    encoded = [_encode(plpy, tbl, col, data, spec) for col in qis]
    model = Mondrian(k=k).fit(encoded)
    labels, n_classes = model.labels_, model.n_classes_
    # numeric QIs: ranges come from SQL (storage_query); categorical ones from here
    listed = {i: col for i, col in enumerate(qis) if col.kind == "categorical"}
    bounds = class_bounds([encoded[i] for i in listed], labels, n_classes)
    # Number classes along the QIs (lowest code first) so that ST merges pool neighbours.
    lows = {col.name: class_code_range(col.codes, labels, n_classes)[0][labels] for col in encoded}
    ordered = relabel_in_order(labels, pd.DataFrame(lows))
    order_of_class = np.empty(n_classes, dtype=np.int64)
    order_of_class[labels] = ordered
    sensitive = pd.DataFrame({c.name: data.columns[c.name].values for c in sens})
    literals = {i: class_literals(col, bounds[col.name]) for i, col in listed.items()}
    return SourcePartition(
        n_rows=data.n_rows,
        labels=labels,
        ordered_labels=ordered,
        order_of_class=order_of_class,
        class_sizes=np.bincount(labels, minlength=n_classes),
        literals=literals,
        sensitive=sensitive,
        seconds=time.monotonic() - started,
        row_ctids=data.row_ctids,
        row_tableoids=data.row_tableoids,
        released_qis=_released_qis(qis, encoded, labels, n_classes, literals),
    )


def _released_qis(qis, encoded, labels, n_classes, literals):
    """Per row, a value standing for its class's released QI, one-to-one with the text an
    analyst reads: a numeric/date range is the class's min and max (storage_query), i.e. its
    (lowest, highest) code; a categorical value is the class's literal."""
    out = {}
    for i, col in enumerate(qis):
        if i in literals:
            out[col.name] = np.asarray(literals[i], dtype=object)[labels]
        else:
            lo, hi = class_code_range(encoded[i].codes, labels, n_classes)
            out[col.name] = np.char.add(np.char.add(lo.astype(str), ":"), hi.astype(str))[labels]
    return pd.DataFrame(out)


def _encode(plpy, tbl, col, data, spec):
    values = data.columns[col.name]
    if col.kind == "numeric":  # ±inf, NaN: ordered as PostgreSQL does, released as they are
        ordered = finite_for_ordering(values.values, values.null_mask)
        return encode_numeric(col.name, ordered, values.null_mask)
    hierarchy = (
        catalog.load_hierarchy(plpy, tbl, col.name) if col.name in spec.built.hierarchies else None
    )
    return encode_factorized(col.name, values.codes, values.dictionary, hierarchy)


# ---------------------------------------------------------------------------- reading releases


RELEASED_COLUMNS = """
    SELECT attname::text AS name FROM pg_catalog.pg_attribute
    WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum"""


def _release_roles(plpy, release):
    """(quasi-identifiers, sensitive) column names of a released relation, from the roles the
    release recorded; a method that records none releases every column as a QI."""
    spec = _spec(release)
    qis, sens = list(spec.promise.quasi_identifiers or ()), list(spec.promise.sensitive or ())
    if release["method"] == METHOD:  # the sensitive columns live in the STs, not in the storage
        return qis, sens
    relation = ident(plpy, release["release_schema"], release["release_name"])
    columns = [r["name"] for r in run(plpy, RELEASED_COLUMNS, ["text"], [relation])]
    qis, sens = [c for c in qis if c in columns], [c for c in sens if c in columns]
    if not qis and not sens:
        qis = columns
    return qis, sens


def _grouped_frame(plpy, relation, columns, weight_expr, where=""):
    """``SELECT col-as-text ..., weight FROM relation GROUP BY ...``: the weighted distinct rows
    (text without casts of a type's owner: ``sqltext.columns_as_text``)."""
    cols = ", ".join(f"{text} AS {ident(plpy, c)}"
                     for c, text in zip(columns, columns_as_text(plpy, relation, columns)))
    rows = plpy.execute(
        f"SELECT {cols}, {weight_expr} AS __w FROM {relation} {where} "
        f"GROUP BY {', '.join(str(i + 1) for i in range(len(columns)))}"
    )
    frame = pd.DataFrame({c: [r[c] for r in rows] for c in columns})
    return frame, np.array([float(r["__w"]) for r in rows])


def _released_table(plpy, release, scope):
    """The released attributes of ``release`` for ``scope``, as weighted distinct rows, and the
    (QI, SA) tiers. Break-Merge releases are read through their merge view (the analyst's view):
    QIs come from the QIT, the SAs from the STs, linked only through ``gid``."""
    qis, sens = _release_roles(plpy, release)
    wanted = {"qi": qis, "sensitive": sens, "all": qis + sens}[scope]
    if len(wanted) < 2:
        raise InvalidParameter(
            f"scope '{scope}' of release {release['release_name']} has {len(wanted)} column(s); "
            "a dependency needs at least two",
            hint="Use scope => 'all', or declare more columns with that role.",
        )
    schema = release["release_schema"]
    if release["method"] == METHOD:
        spec = _spec(release)
        if scope == "qi":
            relation, weight = ident(plpy, schema, release["release_name"]), "sum(_count)"
            frame, w = _grouped_frame(plpy, relation, wanted, weight, "WHERE _attribute IS NULL")
        else:
            frame, w = _grouped_frame(
                plpy, ident(plpy, schema, spec.settings.merged), wanted, "sum(weight)"
            )
    else:
        frame, w = _grouped_frame(
            plpy, ident(plpy, schema, release["release_name"]), wanted, "count(*)"
        )
    return frame, w, [[c for c in wanted if c in qis], [c for c in wanted if c in sens]]


def _learn(plpy, release, scope, max_parents):
    if scope not in SCOPES:
        raise InvalidParameter(f"unknown scope '{scope}'", hint="Use 'qi', 'sensitive' or 'all'.")
    frame, weights, tiers = _released_table(plpy, release, scope)
    if weights.sum() == 0:
        raise InsufficientData(
            f"release {release['release_name']} has no rows",
            hint="Refresh it after loading the source.",
        )
    return BayesNet(max_parents=max_parents, tiers=tiers).fit(frame, sample_weight=weights)


@sql_entry
def detect_dependencies(plpy, release, *, risk, scope, min_support, max_parents):
    row = release_rows.find(plpy, release)
    guards.refuse_foreign_release(plpy, row)     # read with the caller's rights
    bn = _learn(plpy, row, scope, max_parents)
    if min_support is None:
        min_support = _spec(row).promise.k or 1
    rules = bn.dependency_rules(risk, min_support=min_support)
    return [
        {
            "parents": list(r.parents),
            "parent_values": [None if pd.isna(v) else str(v) for v in r.parent_values],
            "child": r.child,
            "child_value": None if pd.isna(r.child_value) else str(r.child_value),
            "probability": float(r.probability),
            "support": float(r.support),
            "parent_support": float(r.parent_support),
        }
        for r in rules.itertuples()
    ]


@sql_entry
def dependency_network(plpy, release, *, scope, max_parents):
    row = release_rows.find(plpy, release)
    guards.refuse_foreign_release(plpy, row)     # read with the caller's rights
    bn = _learn(plpy, row, scope, max_parents)
    return [{"parent": p, "child": c} for p, c in bn.edges_]


# ---------------------------------------------------------------------------- breach report


@sql_entry
def breach_report(plpy, release, *, threshold):
    row = release_rows.find(plpy, release)
    guards.refuse_foreign_release(plpy, row)     # read with the caller's rights
    spec = _spec(row)
    if row["method"] == METHOD:
        guards.table(plpy, row["source"])             # guarded before the source is read again
        plain = plain_breach(*_plain_from_source(plpy, row, spec), threshold=threshold)
        broken = break_merge_breach(*_sensitive_tables(plpy, row, spec), threshold=threshold)
        reports = [("plain", plain), ("break_merge", broken)]
    else:
        reports = [("plain", plain_breach(*_plain_from_release(plpy, row), threshold=threshold))]
    return [
        {
            "release_kind": kind,
            "target": r.target,
            "known": None if pd.isna(r.known) else r.known,
            "max_probability": r.max_probability,
            "mean_probability": r.mean_probability,
            "n_above": int(r.n_above),
        }
        for kind, report in reports
        for r in report.itertuples()
    ]


def _plain_from_source(plpy, release, spec):
    """The plain generalized release of the same partition: re-run it on the source."""
    part = partition_source(plpy, release, spec)
    return part.labels, part.sensitive


def _plain_from_release(plpy, release):
    qis, sens = _release_roles(plpy, release)
    if not qis or not sens:
        raise InvalidParameter(
            f"release {release['release_name']} records no quasi-identifier/sensitive roles",
            hint="A breach report needs the QIs (to form groups) and at least one sensitive column.",
        )
    frame, weights = _grouped_frame(
        plpy,
        ident(plpy, release["release_schema"], release["release_name"]),
        qis + sens,
        "count(*)",
    )
    repeat = weights.astype(np.int64)
    rows = frame.loc[frame.index.repeat(repeat)].reset_index(drop=True)
    groups = rows.groupby(qis, dropna=False, sort=False).ngroup().to_numpy()
    return groups, rows[sens]


def _sensitive_tables(plpy, release, spec):
    """Group sizes and STs exactly as an analyst reads them (from the ST views)."""
    schema = release["release_schema"]
    qit = ident(plpy, schema, spec.settings.qit)
    size_rows = plpy.execute(f"SELECT gid, count(*) AS n FROM {qit} GROUP BY gid")
    gids = np.array([r["gid"] for r in size_rows], dtype=np.int64)
    sizes = np.zeros(gids.max() + 1 if gids.size else 0, dtype=np.int64)
    sizes[gids] = [r["n"] for r in size_rows]
    tables = {}
    for attribute in spec.promise.sensitive:  # jsonb does not keep key order: follow the list
        st = spec.settings.sensitive_tables[attribute]
        rows = plpy.execute(f"SELECT gid, value, count FROM {ident(plpy, schema, st)}")
        tables[attribute] = pd.DataFrame(
            {
                "gid": [r["gid"] for r in rows],
                "value": [r["value"] for r in rows],
                "count": [r["count"] for r in rows],
            }
        )
    return sizes, tables


# the contract (plpy_anon/db/method.py), registered in plpy_anon/db/methods/registry.py
RELEASE_METHOD = ReleaseMethod(METHOD, resolve=resolve,
                               refresh_release=refresh_release,
                               verification_spec=verification_spec, check_relations=check_views,
                               read=read, fit=fit, publish=publish_run)
