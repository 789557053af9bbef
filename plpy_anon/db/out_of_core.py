"""Mondrian releases of tables larger than a build's memory: the top cuts from SQL aggregates,
the regions below them fitted in memory one at a time.

When the estimated memory of the in-memory read and fit (core.regions.row_bytes per row) exceeds
``plpy_anon.build_memory`` (any role may set it, like ``work_mem``; default 1GB), the release's
partitioning run (``anon._mondrian_partition_slices``) becomes:

1. **Top of the tree from a sample.** One pass samples the source (TABLESAMPLE BERNOULLI,
   seeded: a rebuild samples the same rows); the whole top of the tree is chosen on it in
   memory by the in-memory fit's rules (core.regions.sample_tree); one pass counts each of its
   leaves exactly (a nested ``CASE`` gives a row's leaf, grouped by it), and a cut is kept only
   when both sides, counted exactly, keep k (and distinct l): core.regions.counted_regions.
   Regions still too large, and sources with foreign members (which TABLESAMPLE cannot read),
   are cut level by level: per level, three queries over the source, each grouping all regions
   of the level at once by a ``CASE`` of their predicates (a region is a conjunction of cuts
   ``x < v`` / ``x <= v``, NULL ordered lowest): rows, non-NULL counts and spreads per QI; the
   median of each QI (``percentile_disc``, exact); the exact sizes of both candidate cuts (and
   with l, ``count(DISTINCT)`` of each sensitive column per side). Nothing but these aggregates
   and the sample's ranks reaches Python; the queries are plain SQL over the source relation,
   so any relation PostgreSQL can aggregate (a partitioned table, postgres_fdw foreign tables,
   whose aggregates it pushes down) works the same.
2. **Leaves in memory.** A region that fits the budget (or has no allowable cut) is read (its
   rows routed with every region's in one pass over the source by the first region's read:
   region_spill.py; a source with foreign members by its predicate, pushed down to the shards:
   mondrian_family.load_release_rows) and fitted by the ordinary estimator; its
   classes become the run's next slices (anon.partition_slice), its positions and class ids
   offset by the regions before it. The slices are made when PostgreSQL asks for them, so
   one region's rows are in memory at a time.

The run's statistics are stashed before the first leaf (its row count is the regions' sum, its
metrics dictionary filled as the leaves are fitted: core.regions.ReleaseFigures). The release
is verified from its rows as every other one (verify.py).

Prioritized Mondrian ranks the sampled tree's QIs by its own score (ranking_of); entropy and
recursive l and t-closeness (categorical or numeric) are checked on each leaf's exact value
counts (value_counts; level by level, on a sharded source and in the regions a sample leaves
too large, each side's: side_value_counts, the values numbered alike: numbered_as_levels; with
t each region fitted within the room its distance to the table leaves below t:
core.regions.region_t), and the utility split cuts the sampled tree by its own rule (level by
level, by the median rule, its regions fitted by it). Categorical QIs are cut in the in-memory
fit's order (by frequency) at the top and level by level (categorical_orders). Not taken (the
in-memory path runs, whatever the size): prioritized Mondrian with the utility split,
information gain or workload cut points, whose cuts the counts here do not decide. A release in
the stable refresh mode is created region by region (stable_regions.py: each region's people
grouped, checked and remembered in turn, each region's box stored), and refreshed region by
region where its plan links no region (:func:`refresh_stable_by_regions`); any other refresh of
it beyond the budget is refused (54000) before anything is written, and one of a release whose
state is one region before anything is read (:func:`refuse_stable_refresh_over_budget`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import time

import numpy as np

from plpy_anon.core import mondrian_jit
from plpy_anon.core import regions as core
from plpy_anon.core.errors import AnonError
from plpy_anon.core.privacy_models import Models
from plpy_anon.db import columns as catalog
from plpy_anon.db import guards, interrupts, method, release_rows, republication, timing
from plpy_anon.db.class_counts import orderable
from plpy_anon.db.generalization import column_for
from plpy_anon.db.reader import (
    DATE_NULL,
    TextDictionary,
    chunk_blocks,
    read_expression,
    server_is_utf8,
)
from plpy_anon.db.region_spill import RegionSpill, RoutedRegion
from plpy_anon.db.sqltext import build_memory, jsonb, progress, run, text_of
from plpy_anon.spec import PrioritizedSettings, Promise, ReleaseSpec

SETTING = "plpy_anon.build_memory"
DEFAULT_BUDGET = "1GB"
#: the name of the region label in the level queries (a column of the source could not clash
#: with a name no one gives a column)
REGION = '"plpy_anon region"'
MAX_LEVELS = 40
#: a region of at most 1/MAX_REGIONS of the table is a leaf whatever the budget: any role may set
#: a tiny budget in its session, and each level's query grows with rows x regions
MAX_REGIONS = 64

class Steps:
    """Wall and CPU seconds of a run's steps (this backend's CPU: SQL it runs included, parallel
    workers' not), summed per step name: where an out-of-core build's time goes."""

    def __init__(self):
        self.figures: dict[str, list[float]] = {}

    @contextlib.contextmanager
    def step(self, name: str):
        wall, cpu = time.monotonic(), time.process_time()
        try:
            yield
        finally:
            held = self.figures.setdefault(name, [0.0, 0.0])
            held[0] += time.monotonic() - wall
            held[1] += time.process_time() - cpu

    def metrics(self) -> dict:
        return {name: {"seconds": round(w, 3), "cpu": round(c, 3)}
                for name, (w, c) in self.figures.items()}


#: the leaf members of a source's tree (itself when it has none), named as regclass prints
#: them, and whether each is a foreign table
FOREIGN_MEMBERS = """
WITH RECURSIVE tree(oid) AS (
    SELECT $1::pg_catalog.oid
    UNION ALL
    SELECT i.inhrelid FROM pg_catalog.pg_inherits i JOIN tree ON i.inhparent = tree.oid)
SELECT c.oid::pg_catalog.regclass::text AS name, c.relkind = 'f' AS foreign
FROM tree JOIN pg_catalog.pg_class c ON c.oid = tree.oid
WHERE c.relkind IN ('r', 'f')
ORDER BY c.oid"""


#: the release methods whose partitioning run may go out of core
METHODS = ("mondrian", "prioritized_mondrian")


def takes_path(spec: ReleaseSpec) -> bool:
    """Whether a release's cuts are all counted by the aggregates here (see the module doc): a
    prioritized release's when its ranking is its priorities and spreads alone (no information
    gain, which needs a target's counts per cut, and no workload cut points, which the top
    cuts do not snap to)."""
    settings = spec.settings
    return not (isinstance(settings, PrioritizedSettings) and (
        settings.target is not None or settings.cut_points or settings.split != "median"
        or float((settings.metric_weights or {}).get("infogain", 0) or 0) > 0))


#: the top's t-closeness is checked this much below t: a region's fit then keeps each class
#: within ``t - EMD(region, table)`` of its region (region_spec), so within t of the table
T_MARGIN = 2e-9


def models_of(spec: ReleaseSpec):
    """None for distinct l alone (counted by distinct values everywhere), else ``check(tables)``:
    given the table's rows per sensitive value (an array per column), whether a side's counts
    (the same form) hold the release's entropy or recursive (c, l)-diversity and t-closeness
    (core.privacy_models, as its fit and its verification check them; t a margin below)."""
    promise = spec.promise
    distinct = not promise.l or (promise.l_diversity or "distinct") == "distinct"
    if distinct and promise.t is None:
        return None

    ordered = ordered_columns(spec)

    def check(tables: list):
        models = [Models(l=None if distinct else promise.l, l_diversity=promise.l_diversity,
                         c=promise.c, t=None if promise.t is None else promise.t - T_MARGIN,
                         table=table / max(table.sum(), 1), ordered=o)
                  for table, o in zip(tables, ordered)]
        return lambda counts: all(bool(m.satisfied(c)[0]) for m, c in zip(models, counts))
    return check


def ordered_columns(spec: ReleaseSpec) -> list[bool]:
    """Per sensitive column, whether t measures it by the ordered distance (a numeric column,
    its values counted in value order: value_counts, sample)."""
    ordered = set(spec.built.ordered_sensitive) if spec.promise.t is not None else set()
    return [name in ordered for name in spec.promise.sensitive or ()]


def region_spec(spec: ReleaseSpec, region, tables: list | None) -> ReleaseSpec:
    """The specification a region is fitted with: with t, each class within the room its region
    leaves below t (core.regions.region_t; equal ground distance: ``t - EMD(region, table)``),
    a numeric column of one value in the region measured by the equal distance there."""
    if spec.promise.t is None or tables is None or region.counts is None:
        return spec
    fitted = [core.region_t(table, counts, spec.promise.t, o, T_MARGIN, region.rows)
              for table, counts, o in zip(tables, region.counts, ordered_columns(spec))]
    t = min(max(min(room for room, _ in fitted), 1e-12), 1.0)   # no distance exceeds 1
    ordered = tuple(name for name, (_, o) in zip(spec.promise.sensitive, fitted) if o)
    return dataclasses.replace(spec, promise=dataclasses.replace(spec.promise, t=t),
                               built=dataclasses.replace(spec.built, ordered_sensitive=ordered))


def ranking_of(spec: ReleaseSpec, names: list[str]):
    """How a release's fit ranks QIs (core.regions.ranking, or for a prioritized release its
    weighted ranking, as its in-memory fit resolves priorities and metric weights)."""
    settings = spec.settings
    if not isinstance(settings, PrioritizedSettings):
        return core.ranking
    # a prioritized release's own module (it loads pandas, which no other build needs)
    from plpy_anon.core.prioritized import PrioritizedMondrian
    model = PrioritizedMondrian(k=spec.promise.k, priorities=settings.priorities,
                                metric_weights=settings.metric_weights).check_parameters(names)
    weights = model.metric_weights_
    if model.priorities_ is None or weights["priority"] == 0:
        return core.ranking
    priority = np.array([model.priorities_[n] for n in names], dtype=float)
    return core.weighted_ranking(list(priority / priority.max()), weights["spread"],
                                 weights["priority"], sum(weights.values()))


class Source:
    """The relation a release reads and its columns as the level queries use them."""

    def __init__(self, plpy, tbl, qis: list, sensitive: list, members: list[str],
                 sampled: bool = False, rank=core.ranking, models=None, split: str = "median"):
        self.plpy = plpy
        self.rank = rank                   # the order the release's fit tries QIs in
        self.models = models               # entropy or recursive l of a side's value counts
        self.split = split                 # the release's split rule (median, utility)
        self.tables: list | None = None    # the table's rows per sensitive value (with models)
        self.value_index: list | None = None   # per sensitive column {text: number} (level by level)
        self.members = members
        self.sampled = sampled             # TABLESAMPLE applies (no foreign member)
        self.member_rows: dict = {}        # (member, region) -> rows, of the last level's stats
        self.steps = Steps()               # where the run's time goes
        self.qis = qis
        self.sensitive = sensitive
        hierarchical = set(catalog.hierarchy_columns(plpy, tbl))
        self.numeric = [c.kind == "numeric" for c in qis]
        # QIs cut at the top: numbers, and categorical columns of an ordered type without a
        # hierarchy
        self.cuttable = [c.kind == "numeric" or (c.name not in hierarchical
                                                 and orderable(plpy, c.display_type)) for c in qis]
        self.names = [catalog_ident(plpy, c.name) for c in qis]
        self.whole: list = [None] * len(qis)     # the table's QIStats (the first level's)
        # per categorical QI cut at the top in the whole table's fit's order: its texts in it
        self.by_frequency: dict[int, list] = {}
        self.order_values = ORDER_VALUES    # the most distinct values of such a QI (order_values)
        self.region_budget = 0              # the bytes a region's read and fit may take
        self.counted_rows: int | None = None    # the source's rows, once counted
        self.order_rows: int | None = None      # the rows a categorical QI's order counted
        self.orders: dict | None = None         # categorical_orders, once read

    def literal(self, a: int, value: str) -> str:
        """A cut value as a constant of the column's base type (a cast to a domain would run
        its CHECK, the owner's code, for every row a predicate tests)."""
        qi = self.qis[a]
        return f"CAST({self.plpy.quote_literal(value)} AS {qi.base_display_type or qi.display_type})"

    def left(self, a: int, value: str | int | None, strict: bool) -> str:
        """SQL true on the left side of a cut (NULL lowest; never NULL itself). An int ``value``
        is a position in the QI's order of the whole table's fit (``self.by_frequency[a]``): the
        left side is the values before it (``strict``) or up to it, NULL where its rows put it,
        tested on their texts (C collation: the reader's texts, compared as bytes)."""
        c = self.names[a]
        if isinstance(value, int):
            order = self.by_frequency[a]
            left = order[:value if strict else value + 1]
            null_left = None in left
            if 2 * len(left) <= len(order):
                held = self._member(a, [t for t in left if t is not None])
                return f"({c} IS NULL OR {held})" if null_left else held
            held = self._member(a, [t for t in order[len(left):] if t is not None])
            return f"(NOT {held})" if null_left else f"({c} IS NOT NULL AND NOT {held})"
        if value is None:
            return f"({c} IS NULL)"
        operator = "OPERATOR(pg_catalog.<)" if strict else "OPERATOR(pg_catalog.<=)"
        return f"({c} IS NULL OR {c} {operator} {self.literal(a, value)})"

    def _member(self, a: int, texts: list) -> str:
        """SQL true when QI ``a``'s text is one of ``texts`` (false for NULL)."""
        elements = ",".join('"' + t.replace("\\", "\\\\").replace('"', '\\"') + '"' for t in texts)
        text = text_of(self.names[a], self.qis[a].builtin)
        return (f"coalesce(({text}) COLLATE \"C\" OPERATOR(pg_catalog.=) ANY "
                f"(CAST({self.plpy.quote_literal('{' + elements + '}')} AS pg_catalog.text[])), false)")

    def predicate(self, bounds) -> str:
        parts = []
        for b in bounds:
            side = self.left(b.qi, b.value, b.strict)
            parts.append(side if b.left else f"(NOT {side})")
        return " AND ".join(parts) if parts else "true"

    def each(self, query) -> list[list]:
        """The rows of ``query(relation)`` for each member of the source."""
        return each_member(self.plpy, self.members, query)


    def labelled(self, active: list, columns: list[str], relation: str) -> str:
        """A subquery of the rows of ``relation`` in the ``active`` regions: each row's region
        number (REGION) and ``columns``."""
        if len(active) == 1:
            label = "0"
        else:
            label = "CASE " + " ".join(f"WHEN {self.predicate(r.bounds)} THEN {i}"
                                       for i, r in enumerate(active)) + " END"
        where = f" WHERE {self.predicate(active[0].bounds)}" if len(active) == 1 and active[0].bounds else ""
        inner = f"SELECT {label} AS {REGION}{''.join(', ' + c for c in columns)} FROM {relation}{where}"
        if len(active) == 1:
            return f"({inner}) AS s"
        return f"({inner}) AS s WHERE {REGION} IS NOT NULL"

    def read_columns(self, with_sensitive: bool) -> list[str]:
        cols = list(dict.fromkeys(self.names))
        if with_sensitive:
            cols += [catalog_ident(self.plpy, c.name) for c in self.sensitive
                     if catalog_ident(self.plpy, c.name) not in cols]
        return cols


def source_members(plpy, tbl) -> list[str]:
    """The relations the level queries read: the source itself, or each of its leaf members
    (``ONLY``) when some are foreign tables. PostgreSQL 15 pushes an aggregate over a
    partitioned table down to its foreign partitions only when grouped by the partition key, so
    the root's GROUP BY region would pull every row here."""
    found = run(plpy, FOREIGN_MEMBERS, ["oid"], [tbl.oid])
    # row security on the root filters what the reader sees through it, which asking each
    # member would not: such a source is asked through its root (aggregated here)
    secured = run(plpy, "SELECT c.relrowsecurity AS rls FROM pg_catalog.pg_class c WHERE c.oid = $1",
                  ["oid"], [tbl.oid])[0]["rls"]
    if any(r["foreign"] for r in found) and not secured:
        return [f"ONLY {r['name']}" for r in found]
    return [tbl.quoted(plpy)]


def has_foreign_members(plpy, tbl) -> bool:
    """Whether any member of the source is a foreign table (which TABLESAMPLE cannot read)."""
    return any(r["foreign"] for r in run(plpy, FOREIGN_MEMBERS, ["oid"], [tbl.oid]))


def each_member(plpy, members: list[str], query) -> list[list]:
    # a level query's CASE over the regions is costed high enough for the JIT, whose compilation
    # (seconds to minutes for many regions) no cancel or timeout interrupts; aggregates gain little
    jit = run(plpy, "SELECT pg_catalog.current_setting('jit') AS j")[0]["j"]
    run(plpy, "SELECT pg_catalog.set_config('jit', 'off', true)")
    found = [list(plpy.execute(query(member))) for member in members]
    run(plpy, "SELECT pg_catalog.set_config('jit', $1, true)", ["text"], [jit])
    return found


def catalog_ident(plpy, name: str) -> str:
    return plpy.quote_ident(name)


def extreme_expression(plpy, col, value: str | None = None) -> str:
    """SQL of a numeric QI's value for its extremes (core.QIStats low, high): an integer type's
    as its int8 read (exact: float8 rounds 2^63 - 1 up to 2^63, out of int8's range, which the
    regions' encodings are widened to), another's as float8; ``value``: of that SQL value of the
    column's type instead of the column."""
    expr = (read_expression(plpy, col) if value is None
            else catalog.NUMERIC_TYPES[col.type_name][0] % {"c": value})
    return expr if catalog.NUMERIC_TYPES[col.type_name][2] == "int" else f"({expr})::float8"


def level_stats(src: Source, active: list) -> list[tuple[int, list]]:
    """(rows, [QIStats or None per QI]) of each active region: one pass for the counts and
    extremes, one for the categorical QIs' distinct values (hashed grouping sets: a sort per
    column cost ~2 s per million rows each). Members' figures merge exactly (sums, min, max),
    but for distinct values: the largest member's, a lower bound that only ranks the QIs."""
    selects = [f"{REGION} AS r", "count(*) AS n"]
    categorical = []
    for a, col in enumerate(src.qis):
        if not src.cuttable[a]:
            continue
        c = src.names[a]
        selects.append(f"count({c}) AS nn{a}")
        if src.numeric[a]:
            expr = extreme_expression(src.plpy, col)
            selects.append(f"min({expr}) AS lo{a}, max({expr}) AS hi{a}")
        elif len(src.members) > 1:
            # members' aggregates are pushed down whole; grouping sets are not (their rows
            # would come here)
            selects.append(f"count(DISTINCT {c}) + (bool_or({c} IS NULL))::int AS d{a}")
        else:
            categorical.append(a)
    columns = src.read_columns(False)
    by_region: dict = {}
    src.member_rows = {}
    for m, rows in enumerate(src.each(lambda rel: f"SELECT {', '.join(selects)} FROM "
                                                  f"{src.labelled(active, columns, rel)} GROUP BY 1")):
        for r in rows:
            i = int(r["r"])
            src.member_rows[(m, i)] = int(r["n"])
            merged = by_region.setdefault(i, {"n": 0})
            merged["n"] += int(r["n"])
            for a in range(len(src.qis)):
                if not src.cuttable[a]:
                    continue
                merged[f"nn{a}"] = merged.get(f"nn{a}", 0) + int(r[f"nn{a}"])
                if src.numeric[a]:
                    for key, pick in ((f"lo{a}", min), (f"hi{a}", max)):
                        values = [v for v in (merged.get(key), r[key]) if v is not None]
                        merged[key] = pick(values) if values else None
                elif f"d{a}" in r:
                    merged[f"d{a}"] = max(merged.get(f"d{a}", 0), int(r[f"d{a}"]))
    if categorical:
        # GROUPING(...) of the set (region, column j of m): every bit but j's set
        m = len(categorical)
        counts = ", ".join(f"count(*) FILTER (WHERE g = {(1 << m) - 1 - (1 << (m - 1 - j))}) AS d{a}"
                           for j, a in enumerate(categorical))
        names = ", ".join(src.names[a] for a in categorical)
        sets = ", ".join(f"({REGION}, {src.names[a]})" for a in categorical)
        for rows in src.each(lambda rel: f"SELECT r, {counts} FROM (SELECT {REGION} AS r, GROUPING({names}) AS g "
                                         f"FROM {src.labelled(active, columns, rel)} "
                                         f"GROUP BY GROUPING SETS ({sets})) AS x GROUP BY r"):
            for r in rows:
                merged = by_region[int(r["r"])]
                for a in categorical:
                    merged[f"d{a}"] = max(merged.get(f"d{a}", 0), int(r[f"d{a}"]))
    out = []
    for i in range(len(active)):
        r = by_region.get(i)
        if r is None:
            out.append((0, [None] * len(src.qis)))
            continue
        stats = []
        for a in range(len(src.qis)):
            if not src.cuttable[a]:
                stats.append(None)
            elif src.numeric[a]:
                stats.append(core.QIStats(int(r[f"nn{a}"]), r[f"lo{a}"], r[f"hi{a}"],
                                          has_null=int(r[f"nn{a}"]) < int(r["n"])))
            else:
                stats.append(core.QIStats(int(r[f"nn{a}"]), distinct=int(r[f"d{a}"])))
        out.append((int(r["n"]), stats))
    return out


def medians(src: Source, active: list, fractions: dict, counted: dict,
            positional: dict | None = None) -> dict:
    """{(region, qi): the value (text) at the fraction asked, by percentile_disc}; of a source
    in members, the value of the member holding most of the region's rows (an estimate: the
    cut is still decided on exact counts). ``counted``: {(region, qi): (index among the
    non-NULL values, distinct values)} of the categorical QIs, whose value is found in their
    counts per value instead (:func:`histogram_medians`); ``positional``: {(region, qi): index
    among all its rows} of the QIs cut in the whole table's fit's order, whose median is a
    position in it (:func:`frequency_medians`)."""
    out = frequency_medians(src, active, positional or {})
    if len(src.members) == 1:
        out.update(histogram_medians(src, active, counted))
    fractions = {key: f for key, f in fractions.items() if key not in out}
    qis = sorted({a for _, a in fractions})
    if not qis:
        return out
    selects = [f"{REGION} AS r"]
    for a in qis:
        cases = " ".join(f"WHEN {i} THEN {fractions[(i, a)]!r}::float8"
                         for i in range(len(active)) if (i, a) in fractions)
        selects.append(f"(percentile_disc(CASE {REGION} {cases} ELSE 0.5::float8 END) "
                       f"WITHIN GROUP (ORDER BY {src.names[a]}))::text AS m{a}")
    columns = src.read_columns(False)
    weight = {}
    for m, rows in enumerate(src.each(lambda rel: f"SELECT {', '.join(selects)} FROM "
                                                  f"{src.labelled(active, columns, rel)} GROUP BY 1")):
        for r in rows:
            i = int(r["r"])
            rows_here = src.member_rows.get((m, i), 0)
            for a in qis:
                if (i, a) in fractions and rows_here > weight.get((i, a), -1):
                    out[(i, a)], weight[(i, a)] = r[f"m{a}"], rows_here
    return out


#: the most distinct values a region's QI may have for its median to be found in its counts per
#: value (rows handed to Python) rather than by percentile_disc
HISTOGRAM_VALUES = 50_000


def _in_regions(active: list, indexes) -> str:
    """The condition that follows :meth:`Source.labelled`, keeping the regions ``indexes``."""
    return (f"{'AND' if len(active) > 1 else 'WHERE'} {REGION} IN "
            f"({', '.join(str(i) for i in sorted(indexes))})")


def histogram_medians(src: Source, active: list, counted: dict) -> dict:
    """{(region, qi): median (text)} of categorical QIs of few distinct values, from their rows
    per value in the type's order (a hashed count, then a sort of the distinct values): the
    same value percentile_disc gives, without sorting every row by a collation (~3 s per
    million rows for a text QI)."""
    out = {}
    wanted: dict = {}
    for (i, a), (index, distinct) in counted.items():
        if distinct is not None and distinct <= HISTOGRAM_VALUES:
            wanted.setdefault(a, {})[i] = index
    for a, indexes in sorted(wanted.items()):
        c = src.names[a]
        relation = src.labelled(active, src.read_columns(False), src.members[0])
        rows = run(src.plpy, f"SELECT {REGION} AS r, {c}::text AS v, count(*) AS n FROM {relation} "
                             f"{_in_regions(active, indexes)} "
                             f"AND {c} IS NOT NULL GROUP BY 1, {c} ORDER BY 1, {c}")
        by_region: dict = {}
        for r in rows:
            by_region.setdefault(int(r["r"]), []).append((r["v"], int(r["n"])))
        for i, index in indexes.items():
            value = core.value_at(by_region.get(i, []), index)
            if value is not None:
                out[(i, a)] = value
    return out


#: rows per fetch of the passes whose rows grow with the distinct values of a QI
FETCH_ROWS = 10_000


def frequency_medians(src: Source, active: list, positional: dict) -> dict:
    """{(region, qi): the position (in the whole table's fit's order, ``src.by_frequency``) of
    the value at index ``positional[(region, qi)]`` of the region's rows in that order}: the
    region's rows per text (NULL counted at its own position), summed over the members (exact
    on a sharded source), in one pass per QI and member, read FETCH_ROWS rows at a time into
    one count per value of the order and region (8 bytes each)."""
    out = {}
    wanted: dict = {}
    for (i, a), index in positional.items():
        wanted.setdefault(a, {})[i] = index
    for a, indexes in sorted(wanted.items()):
        order = src.by_frequency[a]
        position = {t: p for p, t in enumerate(order)}
        text = text_of(src.names[a], src.qis[a].builtin)
        counts = {i: np.zeros(len(order), dtype=np.int64) for i in indexes}
        head = f"SELECT {REGION} AS r, {text} AS v, pg_catalog.count(*) AS n FROM "
        tail = f" {_in_regions(active, indexes)} GROUP BY 1, 2"
        for rows in each_member_fetched(src.plpy, src.members, lambda rel, head=head, tail=tail:
                                        head + src.labelled(active, src.read_columns(False), rel) + tail):
            for r in rows:
                p = position.get(r["v"])      # None: a value written since the order was read
                if p is not None:
                    counts[int(r["r"])][p] += int(r["n"])
        del position
        for i, index in indexes.items():
            held = counts.pop(i)
            seen = np.cumsum(held)
            p = int(np.searchsorted(seen, index, side="right"))
            if p < held.size:
                out[(i, a)] = p
    return out


def each_member_fetched(plpy, members: list[str], query):
    """The rows of ``query(relation)`` for each member of the source, FETCH_ROWS at a time
    (a cursor each; the JIT off as in :func:`each_member`)."""
    jit = run(plpy, "SELECT pg_catalog.current_setting('jit') AS j")[0]["j"]
    run(plpy, "SELECT pg_catalog.set_config('jit', 'off', true)")
    try:
        for member in members:
            cursor = plpy.cursor(query(member))
            while True:
                rows = cursor.fetch(FETCH_ROWS)
                if not rows:
                    break
                yield rows
            cursor.close()
    finally:
        run(plpy, "SELECT pg_catalog.set_config('jit', $1, true)", ["text"], [jit])


def side_conditions(src: Source, active: list, cuts: dict) -> dict:
    """{(qi, strict): SQL true on the left side of each region's candidate cut on that QI}
    (``cuts``: {(region, qi): value, None for NULL}; false in other regions)."""
    out = {}
    for a in sorted({a for _, a in cuts}):
        for strict in (True, False):
            cases = []
            for i in range(len(active)):
                if (i, a) not in cuts:
                    continue
                value = cuts[(i, a)]
                cases.append(f"WHEN {i} THEN {'false' if value is None and strict else src.left(a, value, strict)}")
            out[(a, strict)] = f"CASE {REGION} {' '.join(cases)} ELSE false END"
    return out


def candidate_counts(src: Source, active: list, cuts: dict, with_l: bool) -> dict:
    """{(region, qi): (strict Candidate or None, inclusive Candidate)} of the candidate cuts
    ``cuts`` ({(region, qi): median value or None for NULL}): exact over the members (sums of
    counts; with l, the union of each member's distinct sensitive values per side)."""
    qis = sorted({a for _, a in cuts})
    several = len(src.members) > 1
    selects = [f"{REGION} AS r"]
    for (a, strict), cond in side_conditions(src, active, cuts).items():
        name = f"{'lt' if strict else 'le'}{a}"
        selects.append(f"count(*) FILTER (WHERE {cond}) AS {name}")
        if with_l:
            for j, col in enumerate(src.sensitive):
                s = catalog_ident(src.plpy, col.name)
                agg = f"array_agg(DISTINCT {s}::text)" if several else f"count(DISTINCT {s})"
                selects.append(f"{agg} FILTER (WHERE {cond} AND {s} IS NOT NULL) AS {name}_l{j}")
                selects.append(f"{agg} FILTER (WHERE NOT ({cond}) AND {s} IS NOT NULL) AS {name}_r{j}")
    columns = src.read_columns(with_l)
    merged: dict = {}
    for rows in src.each(lambda rel: f"SELECT {', '.join(selects)} FROM "
                                     f"{src.labelled(active, columns, rel)} GROUP BY 1"):
        for r in rows:
            into = merged.setdefault(int(r["r"]), {})
            for key, value in r.items():
                if key == "r":
                    continue
                if several and "_" in key:       # distinct values: their union
                    into[key] = into.get(key, set()) | set(value or [])
                else:
                    into[key] = into.get(key, 0) + int(value or 0)
    n_sens = len(src.sensitive) if with_l else 0
    size = len if several else int
    out = {}
    for i, r in merged.items():
        for a in qis:
            if (i, a) not in cuts:
                continue
            pair = []
            for strict in (True, False):
                name = f"{'lt' if strict else 'le'}{a}"
                if strict and cuts[(i, a)] is None:
                    pair.append(None)
                    continue
                pair.append(core.Candidate(int(r[name]),
                                           tuple(size(r[f"{name}_l{j}"]) for j in range(n_sens)),
                                           tuple(size(r[f"{name}_r{j}"]) for j in range(n_sens))))
            out[(i, a)] = tuple(pair)
    return out


def side_value_counts(src: Source, active: list, cuts: dict) -> tuple[dict, dict]:
    """({region: its rows per sensitive value, an array per column}, {(region, qi): (strict
    counts or None, inclusive counts)} of each candidate cut's left side, in the same form) of
    the level's regions: one pass per sensitive column and member grouped by region and value
    text (``count(*) FILTER`` of each candidate's left side), summed over the members (exact).
    The values are numbered once, on the first call (the whole table's values, as
    :func:`number_values` numbers them), and ``src.tables`` set to the table's rows per value."""
    conditions = side_conditions(src, active, cuts)
    columns = src.read_columns(True)
    first = src.value_index is None
    if first:
        src.value_index = []
    found = []
    for j, col in enumerate(src.sensitive):
        s = catalog_ident(src.plpy, col.name)
        selects = [f"{REGION} AS r", f"{text_of(s, col.builtin)} AS v", "pg_catalog.count(*) AS n"]
        selects += [f"pg_catalog.count(*) FILTER (WHERE {cond}) AS {'lt' if strict else 'le'}{a}"
                    for (a, strict), cond in conditions.items()]
        head = f"SELECT {', '.join(selects)} FROM "
        tail = f" {'AND' if len(active) > 1 else 'WHERE'} {s} IS NOT NULL GROUP BY 1, 2"
        rows = [r for member in src.each(
            lambda rel, head=head, tail=tail: head + src.labelled(active, columns, rel) + tail)
            for r in member]
        if first:
            src.value_index.append(number_values(src.plpy, col, {r["v"] for r in rows}))
        found.append(rows)
    width = [max(index.values(), default=-1) + 1 for index in src.value_index]
    totals: dict = {}
    sides: dict = {}
    for j, rows in enumerate(found):
        index = src.value_index[j]
        for r in rows:
            i, v = int(r["r"]), index.get(r["v"])
            if v is None:
                raise RuntimeError(f"out-of-core run: a value of {src.sensitive[j].name} appeared "
                                   "after the table's values were numbered")
            totals.setdefault(i, [np.zeros(w, dtype=np.int64) for w in width])[j][v] += int(r["n"])
            for (a, strict) in conditions:
                if (i, a) in cuts:
                    held = sides.setdefault((i, a, strict), [np.zeros(w, dtype=np.int64) for w in width])
                    held[j][v] += int(r[f"{'lt' if strict else 'le'}{a}"])
    if first:
        src.tables = [sum((t[j] for t in totals.values()), np.zeros(w, dtype=np.int64))
                      for j, w in enumerate(width)]
    out = {}
    for (i, a), value in cuts.items():
        out[(i, a)] = tuple(None if strict and value is None else
                            sides.get((i, a, strict), [np.zeros(w, dtype=np.int64) for w in width])
                            for strict in (True, False))
    return totals, out


def number_values(plpy, col, texts) -> dict:
    """{text: number} of a sensitive column's values as value_counts numbers them: by
    ``dense_rank`` over the typed values (a built-in type's texts cast back on this server, so
    its equality and order: the ordered distance's), another type's by its texts."""
    texts = sorted(texts)
    order = (f"CAST(v AS {col.base_display_type or col.display_type})" if col.builtin
             else 'v COLLATE "C"')
    ranked = run(plpy, f"SELECT o, pg_catalog.dense_rank() OVER (ORDER BY {order}) AS r "
                       f"FROM pg_catalog.unnest($1::pg_catalog.text[]) WITH ORDINALITY AS u(v, o)",
                 ["text[]"], [texts])
    return {texts[int(r["o"]) - 1]: int(r["r"]) - 1 for r in ranked}


#: the top cuts are chosen on a sample of about this many rows of the source (all of a smaller
#: one), at most one per SAMPLE_BUDGET_BYTES of the budget (it is held as 4-byte ranks per column,
#: with the tree's row numbers) and at least SAMPLE_FLOOR
SAMPLE_ROWS = 200_000
SAMPLE_BUDGET_BYTES = 128
SAMPLE_FLOOR = 20_000
#: the sample's seed (TABLESAMPLE ... REPEATABLE): a rebuild of an unchanged table samples the
#: same rows, so it gives the same release
SAMPLE_SEED = 1.0


def sample_size(budget: int) -> int:
    return min(SAMPLE_ROWS, max(SAMPLE_FLOOR, budget // SAMPLE_BUDGET_BYTES))


#: the QI types whose sample ranks are computed from their values in the backend rather than by
#: a window in SQL: integers read exactly as int8, dates as their days (NULL: reader.DATE_NULL)
RANKED_AS_NUMBERS = ("int2", "int4", "date")
#: an integer QI's NULL in the sample's values (no int2 or int4 value)
SAMPLE_INT_NULL = -2**63


def sample(src: Source, percent: float, with_l: bool, by_text=frozenset()):
    """([SampleColumn or None per QI], [ranks per sensitive column, 0 for NULL], rows) of a
    BERNOULLI sample of the source (one pass): each cut QI's ranks in its type's order (so a
    categorical QI is cut in the order its comparisons in the predicates use) and the values
    of its ranks. The QIs ``by_text`` (categorical QIs cut in the whole table's order, which
    :func:`by_frequency` maps their texts to) are ranked by their texts' bytes instead: a sort
    without the collation, ~a third of the pass at 200,000 rows of text. An integer or date QI,
    and a ``by_text`` QI of a UTF-8 database, is read as its values and ranked here, its
    distinct values found here too but a date's texts (a window per QI sorted the sample's rows
    once each: the query took the backend 2.1-2.9 s of CPU at 6 QIs and 200,000 rows, 0.55 s
    so); a text holding the reader's separator reads the sample again with a window per QI."""
    by_value = {}
    utf8 = server_is_utf8(src.plpy)
    for a in range(len(src.qis)):
        if not src.cuttable[a]:
            continue
        if a in by_text:
            if utf8:
                by_value[a] = "text"
        elif src.numeric[a] and src.qis[a].type_name in RANKED_AS_NUMBERS:
            by_value[a] = src.qis[a].type_name
    found = _sampled(src, percent, with_l, by_text, by_value)
    if found is None:
        found = _sampled(src, percent, with_l, by_text, {})
    return found


def _sampled(src: Source, percent: float, with_l: bool, by_text, by_value: dict):
    """:func:`sample` with the QIs of ``by_value`` ({QI: "text", "date" or an integer type})
    read as values and ranked here; None when a text of one holds the reader's separator or
    NULL stand-in."""
    cut = [a for a in range(len(src.qis)) if src.cuttable[a]]
    sens = [catalog_ident(src.plpy, c.name) for c in src.sensitive] if with_l else []
    keys = {a: (f"({text_of(src.names[a], src.qis[a].builtin)})" if a in by_text
                else src.names[a]) for a in cut}
    bytewise = {a: ' COLLATE "C"' if a in by_text else "" for a in cut}

    def ranked(a):
        kind = by_value.get(a)
        if kind == "text":
            return f"coalesce({keys[a]}, E'\\x02')"
        if kind == "date":
            return f"coalesce(pg_catalog.date_send({keys[a]}), '\\x{DATE_NULL:08x}'::bytea)"
        if kind is not None:
            return f"coalesce(({keys[a]})::int8, ({SAMPLE_INT_NULL})::int8)"
        return f"dense_rank() OVER (ORDER BY {keys[a]}{bytewise[a]} NULLS FIRST)"

    def packed_ranks(a):
        kind = by_value.get(a)
        if kind == "text":
            return (f"string_agg(q{a}, E'\\x01') AS b{a}, "
                    f"count(*) FILTER (WHERE h{a}) AS nulls{a}")
        if kind == "date":
            return f"string_agg(q{a}, ''::bytea) AS b{a}"
        if kind is not None:
            return f"string_agg(int8send(q{a}), ''::bytea) AS b{a}"
        return f"string_agg(int4send(q{a}::int4), ''::bytea) AS b{a}"

    ranks = [f"{ranked(a)} AS q{a}, {keys[a]} IS NULL AS h{a}" for a in cut]
    # a number's ranks in value order, which the ordered distance of t measures
    ranks += [f"CASE WHEN {s} IS NULL THEN 0 ELSE dense_rank() OVER (ORDER BY {s}"
              f"{'' if c.kind == 'numeric' else '::text'}) END AS z{j}"
              for j, (s, c) in enumerate(zip(sens, src.sensitive))]
    packed = ["count(*) AS n"] + [f"{packed_ranks(a)}, bool_or(h{a}) AS h{a}" for a in cut]
    packed += [f"string_agg(int4send(z{j}::int4), ''::bytea) AS z{j}" for j in range(len(sens))]
    # each QI's distinct values, in its ranks' order, from one pass over the sample
    labels = []
    for a in cut:
        c = src.names[a]
        if by_value.get(a, "date") != "date":
            continue                # its labels are its distinct values, found here
        if a in by_text:
            labels.append(f"(SELECT array_agg(t ORDER BY t COLLATE \"C\") AS t{a} FROM (SELECT "
                          f"DISTINCT {keys[a]} AS t FROM s) AS d WHERE t IS NOT NULL) AS l{a}")
            continue
        values = [f"array_agg({c}::text ORDER BY {c}) AS t{a}"]
        if src.numeric[a]:
            expr = read_expression(src.plpy, src.qis[a])
            values.append(f"array_agg(({expr})::float8 ORDER BY {c}) AS v{a}")
        labels.append(f"(SELECT {', '.join(values)} FROM (SELECT DISTINCT {c} FROM s "
                      f"WHERE {c} IS NOT NULL) AS d) AS l{a}")
    columns = ", ".join(src.read_columns(with_l))
    query = (f"WITH s AS MATERIALIZED (SELECT {columns} FROM {src.members[0]} TABLESAMPLE "
             f"BERNOULLI ({percent!r}) REPEATABLE ({SAMPLE_SEED!r})) "
             f"SELECT * FROM (SELECT {', '.join(packed)} FROM "
             f"(SELECT {', '.join(ranks)} FROM s) AS r) AS x{''.join(', ' + x for x in labels)}")
    row = src.each(lambda rel: query)[0][0]
    n = int(row["n"])

    def unpacked(raw):
        return np.frombuffer(bytes(raw or b""), dtype=">i4").astype(np.int32)

    out = [None] * len(src.qis)
    for a in cut:
        has_null = bool(row[f"h{a}"])
        kind = by_value.get(a)
        numbers = np.asarray(row.get(f"v{a}") or [], dtype=float) if src.numeric[a] else None
        if kind == "text":
            found = _text_ranks(row[f"b{a}"] or "", n, int(row[f"nulls{a}"] or 0), has_null)
            if found is None:
                return None
            ranks_a, texts = found
        elif kind == "date":
            texts = list(row[f"t{a}"] or [])
            ranks_a, distinct = _number_ranks(row[f"b{a}"], kind, has_null)
            if distinct.size != len(texts):
                raise RuntimeError(f"sample: {distinct.size} distinct dates against "
                                   f"{len(texts)} labels")
        elif kind is not None:
            ranks_a, distinct = _number_ranks(row[f"b{a}"], kind, has_null)
            texts, numbers = [str(v) for v in distinct.tolist()], distinct.astype(float)
        else:
            texts = list(row[f"t{a}"] or [])
            ranks_a = unpacked(row[f"b{a}"])
        out[a] = core.SampleColumn(ranks_a, has_null, texts, numbers)
    return out, [unpacked(row[f"z{j}"]) for j in range(len(sens))], n


def _number_ranks(raw, kind: str, has_null: bool) -> tuple[np.ndarray, np.ndarray]:
    """(the dense ranks, NULL lowest, of a sample's integer or date values packed by
    :func:`_sampled`; its distinct values but NULL, in order)."""
    if kind == "date":
        values = np.frombuffer(bytes(raw or b""), dtype=">i4").astype(np.int64)
        values[values == DATE_NULL] = SAMPLE_INT_NULL
    else:
        values = np.frombuffer(bytes(raw or b""), dtype=">i8").astype(np.int64)
    distinct, inverse = np.unique(values, return_inverse=True)
    return (inverse.reshape(-1) + 1).astype(np.int32), distinct[1:] if has_null else distinct


def _text_ranks(packed: str, n: int, nulls: int, has_null: bool):
    """(the dense ranks, NULL lowest, of a sample's texts aggregated by :func:`_sampled`, in
    the order of their UTF-8 bytes, which COLLATE "C" compares; its distinct texts in it), or
    None when a text holds the reader's separator or NULL stand-in."""
    split = TextDictionary.split_text(packed, n, nulls)
    if split is None:
        return None
    uniques, indices, null = split
    labels = sorted(u[:-1] for u in uniques if u != null)
    position = {text: i + 1 + has_null for i, text in enumerate(labels)}
    ranks = np.fromiter((1 if u == null else position[u[:-1]] for u in uniques),
                        dtype=np.int32, count=len(uniques))
    return ranks[np.asarray(indices)], [t.decode("utf-8") for t in labels]


def leaf_case(src: Source, node) -> str:
    """SQL of the leaf number of a row of a sampled tree: one comparison per level."""
    if node.children is None:
        return str(node.leaf)
    b = node.children[0].bounds[-1]
    return (f"CASE WHEN {src.left(b.qi, b.value, b.strict)} THEN {leaf_case(src, node.children[0])} "
            f"ELSE {leaf_case(src, node.children[1])} END")


#: a categorical QI of at most this many distinct values (or order_values of the budget, if
#: more) is coded in each region in the whole table's order (its values' texts and rows held
#: once: core.regions.in_table_order)
ORDER_VALUES = 50_000
#: the backend's bytes per distinct value of a categorical QI cut in that order: its text and
#: place in the order held through the run (~72 bytes at 6 characters), the counts read and
#: sorted once (~150 at their peak), the regions' codes and the cuts' texts in the passes' SQL
ORDER_VALUE_BYTES = 512


#: what a value of a categorical QI cut in that order holds through the regions' fits (measured
#: with tracemalloc at 6 characters: its text and place in the order ~72 bytes, a region's codes
#: in it ~133 at their peak, the release figures' labels ~100), taken off the region budget
ORDER_HELD_BYTES = 320


def less_the_orders(budget: int, categorical: dict) -> int:
    """The region budget less what the categorical QIs' orders (:func:`categorical_orders`) hold
    through the regions' fits, ORDER_HELD_BYTES a value; at least half of it."""
    values = sum(len(order) for _, order in categorical.values() if order is not None)
    return max(budget // 2, budget - values * ORDER_HELD_BYTES)


def order_values(budget: int) -> int:
    """The most distinct values of a categorical QI whose order (the whole table's fit's) a run
    of ``budget`` bytes reads: ORDER_VALUES, or more where ORDER_VALUE_BYTES a value fit it."""
    return max(ORDER_VALUES, budget // ORDER_VALUE_BYTES)


def categorical_orders(src: Source) -> dict:
    """{QI: (the table's distinct values, NULL counted; its texts in the whole table's fit's
    order, core.regions.frequency_order, or None above ``src.order_values``)} of each
    categorical QI cut at the top: one pass each (per member of a sharded source, whose counts
    per text are summed here), a hashed aggregate the planner may run in parallel workers. The
    order is the one the top cuts follow and the regions' codes take (the texts the reader
    reads). Above ``src.order_values`` in some member, the distinct values are the largest
    member's (a lower bound, which only ranks QIs)."""
    out = {}
    limit = src.order_values
    for a in range(len(src.qis)):
        if not src.cuttable[a] or src.numeric[a]:
            continue
        c, text = src.names[a], text_of("x", src.qis[a].builtin)

        def query(rel, c=c, text=text):
            return (f"WITH g AS MATERIALIZED (SELECT {c} AS x, pg_catalog.count(*) AS n FROM {rel} "
                    f"GROUP BY {c}), d AS (SELECT pg_catalog.count(*) AS d FROM g) "
                    f"SELECT d.d, (SELECT pg_catalog.sum(n) FROM g)::int8 AS rows, "
                    f"CASE WHEN d.d <= {limit} THEN "
                    f"(SELECT pg_catalog.array_agg({text}) FROM g) END AS t, "
                    f"CASE WHEN d.d <= {limit} THEN (SELECT pg_catalog.array_agg(n) FROM g) "
                    f"END AS n FROM d")
        found = [rows[0] for rows in src.each(query)]
        src.order_rows = sum(int(r["rows"] or 0) for r in found)
        if any(r["t"] is None for r in found):
            out[a] = (max(int(r["d"]) for r in found), None)
            continue
        order = core.frequency_order((t, n) for r in found for t, n in zip(r["t"], r["n"]))
        if len(order) > limit:
            out[a] = (len(order), None)
            continue
        out[a] = (len(order), order)
    return out


def by_frequency(column, order: list):
    """A categorical QI's sample column ranked in the whole table's fit's order (``order``: its
    texts, None for NULL) instead of its type's: rank i + 1 is ``order[i]``, its label the
    position i (a cut's value: Source.left). None when the sample holds a text ``order`` lacks."""
    position = {text: i for i, text in enumerate(order)}
    texts = ([None] if column.has_null else []) + list(column.labels)
    if any(t not in position for t in texts):
        return None
    ranks = np.asarray([position[t] + 1 for t in texts], dtype=np.int32)
    # a range, not a list: the labels of a QI of many distinct values hold no number each
    return core.SampleColumn(ranks[column.ranks - 1], False, range(len(order)))


def counted_leaves(src: Source, root, with_l: bool, categorical: dict):
    """({leaf: rows}, {leaf: distinct values per sensitive column}, the table's QIStats per QI)
    of a sampled tree, exact: ONE pass grouped by leaf (rows, non-NULL counts, numeric
    extremes; with l, grouped by leaf and the first sensitive column's value first, whose
    groups per leaf are its distinct values), then, with more sensitive columns, one such pass
    per column (``categorical``: :func:`categorical_orders`, the table's figures of its
    categorical QIs). Each is a hashed aggregate the planner may run in parallel workers
    (grouping sets, which computed them in one pass, take no parallel plan: 11 s against 5 s at
    10M rows)."""
    cut = [a for a in range(len(src.qis)) if src.cuttable[a]]
    sens = [catalog_ident(src.plpy, c.name) for c in src.sensitive] if with_l else []
    columns = ", ".join(src.read_columns(with_l))
    labelled = (f"(SELECT {leaf_case(src, root)} AS {REGION}, {columns} FROM {src.members[0]}) AS x")
    inner = [f"{REGION} AS leaf", "count(*) AS n"]
    outer = ["leaf", "sum(n) AS n"]
    for a in cut:
        inner.append(f"count({src.names[a]}) AS nn{a}")
        outer.append(f"sum(nn{a}) AS nn{a}")
        if src.numeric[a]:
            # the extremes of the values, read once per leaf: the read is monotone in the
            # type's order (NaN, infinities included), so it maps the extremes to the read's
            c = src.names[a]
            inner.append(f"min({c}) AS lo{a}, max({c}) AS hi{a}")
            outer.append(f"min({extreme_expression(src.plpy, src.qis[a], f'lo{a}')}) AS lo{a}, "
                         f"max({extreme_expression(src.plpy, src.qis[a], f'hi{a}')}) AS hi{a}")
    if sens:
        inner.append(f"{sens[0]} AS s")
        outer.append("count(s) AS sd0")
    query = (f"SELECT {', '.join(outer)} FROM (SELECT {', '.join(inner)} FROM {labelled} "
             f"GROUP BY {REGION}{', ' + sens[0] if sens else ''}) AS y GROUP BY leaf")
    rows, distinct, figures = {}, {}, {}
    for r in src.each(lambda rel: query)[0]:
        leaf = int(r["leaf"])
        rows[leaf] = int(r["n"])
        if sens:
            distinct[leaf] = [int(r["sd0"])] + [0] * (len(sens) - 1)
        for a in cut:
            figures[f"nn{a}"] = figures.get(f"nn{a}", 0) + int(r[f"nn{a}"])
            if src.numeric[a]:
                for key, pick in ((f"lo{a}", min), (f"hi{a}", max)):
                    values = [v for v in (figures.get(key), r[key]) if v is not None]
                    figures[key] = pick(values) if values else None
    for j, s in enumerate(sens[1:], start=1):
        query = (f"SELECT leaf, count(s) AS d FROM (SELECT {REGION} AS leaf, {s} AS s FROM {labelled} "
                 f"GROUP BY 1, 2) AS y GROUP BY leaf")
        for r in src.each(lambda rel, query=query: query)[0]:
            distinct.setdefault(int(r["leaf"]), [0] * len(sens))[j] = int(r["d"])
    for a, (d, order) in categorical.items():
        figures[f"d{a}"] = d
        figures[f"o{a}"] = order
    whole = []
    for a in range(len(src.qis)):
        if not src.cuttable[a]:
            whole.append(None)
        elif src.numeric[a]:
            whole.append(core.QIStats(figures.get(f"nn{a}", 0), figures.get(f"lo{a}"), figures.get(f"hi{a}")))
        else:
            whole.append(core.QIStats(figures.get(f"nn{a}", 0), distinct=figures.get(f"d{a}", 0),
                                      order=figures.get(f"o{a}")))
    return rows, {leaf: tuple(d) for leaf, d in distinct.items()}, whole


def value_counts(src: Source, root) -> tuple[dict, list]:
    """({leaf: its rows per value of each sensitive column (NULL left out), an array per column
    over the column's values in the same order for every leaf}, per column the text of each
    numbered value): one pass per column grouped by leaf and value (bounded by leaves x
    values), the values numbered across leaves by their type's order and equality (dense_rank
    over the typed values)."""
    columns = ", ".join(src.read_columns(True))
    labelled = (f"(SELECT {leaf_case(src, root)} AS {REGION}, {columns} FROM {src.members[0]}) AS x")
    out: dict = {}
    texts = []
    sens = [catalog_ident(src.plpy, c.name) for c in src.sensitive]
    for j, s in enumerate(sens):
        text = text_of("s", src.sensitive[j].builtin)
        query = (f"WITH g AS (SELECT {REGION} AS leaf, {s} AS s, pg_catalog.count(*) AS n "
                 f"FROM {labelled} WHERE {s} IS NOT NULL GROUP BY 1, 2), "
                 f"r AS MATERIALIZED (SELECT leaf, n, s, pg_catalog.dense_rank() OVER (ORDER BY s) AS v "
                 f"FROM g) "
                 f"SELECT leaf, pg_catalog.array_agg(v) AS v, pg_catalog.array_agg(n) AS n, "
                 f"NULL::pg_catalog.text[] AS t FROM r GROUP BY leaf "
                 f"UNION ALL SELECT NULL, NULL, NULL, pg_catalog.array_agg(t ORDER BY v) FROM "
                 f"(SELECT DISTINCT ON (v) v, {text} AS t FROM r ORDER BY v) AS d")
        rows = src.each(lambda rel, q=query: q)[0]
        texts.append(next((list(r["t"] or []) for r in rows if r["leaf"] is None), []))
        found = [(int(r["leaf"]), r["v"], r["n"]) for r in rows if r["leaf"] is not None]
        width = max((max(v) for _, v, _ in found if v), default=0)
        for leaf in {leaf for leaf, _, _ in found} - set(out):
            out[leaf] = [np.zeros(0, dtype=np.int64)] * len(sens)
        for leaf, v, n in found:
            held = np.zeros(width, dtype=np.int64)
            held[np.asarray(v, dtype=np.int64) - 1] = np.asarray(n, dtype=np.int64)
            out[leaf][j] = held
        for leaf, held in out.items():          # a leaf whose values of this column are NULL
            if held[j].size != width:
                held[j] = np.zeros(width, dtype=np.int64)
    return out, texts


def numbered_as_levels(src: Source, regions: list, texts: list) -> None:
    """Renumber the sampled regions' rows per sensitive value (and ``src.tables``), numbered by
    :func:`value_counts` (``texts``: the text of each of its numbers), as the level queries
    number them (:func:`number_values` over every text of the column in the table: one more
    pass per sensitive column), and set ``src.value_index``: the regions the sample left too
    large are then cut level by level with counts of the same values."""
    src.value_index = []
    for j, col in enumerate(src.sensitive):
        s = catalog_ident(src.plpy, col.name)
        query = (f"SELECT DISTINCT {text_of(s, col.builtin)} AS v FROM {src.members[0]} "
                 f"WHERE {s} IS NOT NULL")
        index = number_values(src.plpy, col, {r["v"] for r in src.each(lambda rel, q=query: q)[0]})
        src.value_index.append(index)
        width = max(index.values(), default=-1) + 1
        to = np.asarray([index[t] for t in texts[j]], dtype=np.int64)

        def moved(held, to=to, width=width):
            out = np.zeros(width, dtype=np.int64)
            np.add.at(out, to[:held.size], held)
            return out
        src.tables[j] = moved(src.tables[j])
        for region in regions:
            if region.counts is not None:
                region.counts = [moved(c) if i == j else c for i, c in enumerate(region.counts)]


def sampled_top(src: Source, k: int, l: int | None, budget: int, bytes_per_row: int, n: int):
    """(regions, the table's QIStats, the rows below which a region is not cut, figures) of the
    top cuts chosen on a sample (core.regions.sample_tree) and kept where the exact counts of
    one pass allow them (core.regions.counted_regions): two passes over the source for the
    whole top of the tree. A region that does not fit the budget is cut further level by level."""
    t0 = time.monotonic()
    if src.orders is None:
        with src.steps.step("categorical_orders"):
            src.orders = categorical_orders(src)
    categorical = src.orders
    # the sample's rate from the exact rows, so a rebuild of an unchanged table samples the same
    # rows whatever its statistics say: counted before the run, or by a categorical QI's order
    # (its rows per value add up to the table's), else here
    counting = src.counted_rows is None and src.order_rows is None
    if src.counted_rows is None:
        src.counted_rows = src.order_rows if src.order_rows is not None else sum(
            int(rows[0]["n"]) for rows in src.each(lambda rel: f"SELECT count(*) AS n FROM {rel}"))
    n = src.counted_rows
    percent = min(100.0, 100.0 * sample_size(budget) / max(n, 1))
    with_sensitive = bool(l) or src.models is not None
    ordered = frozenset(a for a, (_, order) in categorical.items() if order is not None)
    with src.steps.step("sample"):
        columns, sensitive, sampled = sample(src, percent, with_sensitive, ordered)
    budget = src.region_budget = less_the_orders(budget, categorical)
    for a in ordered:
        order = categorical[a][1]
        # None: the sample holds a text written since the order was counted; its ranks, by
        # bytes, are no order the predicates cut in, so the QI is left to the regions' fits
        columns[a] = by_frequency(columns[a], order)
        if columns[a] is not None:
            src.by_frequency[a] = order
    t1 = time.monotonic()
    scale = n / max(sampled, 1)
    smallest = n // MAX_REGIONS

    def stop(rows: int) -> bool:
        estimate = round(rows * scale)
        return core.fits(estimate, bytes_per_row, budget) or estimate < max(2 * k, smallest)

    guide = None if src.models is None else src.models([np.bincount(z)[1:] for z in sensitive])
    with src.steps.step("sample_tree"):
        root = core.sample_tree(columns, sensitive, k, l, stop, MAX_LEVELS, src.rank, guide,
                                src.split)
    del columns, sensitive
    t2 = time.monotonic()
    with src.steps.step("counted_leaves"):
        rows, distinct, whole = counted_leaves(src, root, bool(l), categorical)
    counts, exact, texts = None, None, None
    if src.models is not None:
        counts, texts = value_counts(src, root)
        src.tables = [sum(held[j] for held in counts.values()) for j in range(len(src.sensitive))]
        exact = src.models(src.tables)
    regions, undone = core.counted_regions(root, rows, distinct, k, l, len(src.sensitive) if l else 0,
                                           counts, exact)
    smallest = sum(rows.values()) // MAX_REGIONS
    renumbered = src.models is not None and any(
        not (core.fits(r.rows, bytes_per_row, budget) or r.rows < max(2 * k, smallest))
        for r in regions)
    if renumbered:
        # a region left too large is cut level by level, whose queries number the values so
        numbered_as_levels(src, regions, texts)
    # the sample, the leaves' counts, and one more per other sensitive column and categorical QI
    # (and per sensitive column, its values' counts per leaf for entropy or recursive l)
    passes = 2 + counting + (len(src.sensitive) - 1 if l else 0) + sum(
        1 for a in range(len(src.qis)) if src.cuttable[a] and not src.numeric[a]) + (
        len(src.sensitive) if src.models is not None else 0) + (len(src.sensitive) if renumbered else 0)
    figures = {"regions": 1, "cuts": len(regions) - 1, "passes": passes,
               "sample": {"rows": sampled, "percent": round(percent, 6), "seed": SAMPLE_SEED,
                          "leaves": len(core.sample_leaves(root)), "cuts_undone": undone,
                          "seconds": {"sample": round(t1 - t0, 3), "tree": round(t2 - t1, 3),
                                      "counts": round(time.monotonic() - t2, 3)}},
               "seconds": round(time.monotonic() - t0, 3)}
    progress(src.plpy, f"out-of-core sample of {sampled:,} rows: {len(regions)} regions")
    return regions, whole, smallest, figures


def top_regions(src: Source, k: int, l: int | None, budget: int, bytes_per_row: int,
                n: int | None = None):
    """(leaf regions, figures of the top levels): the regions the leaves are fitted on, each of
    at most ``budget`` bytes of rows (a region's budget: core.leaf_budget). With ``n``, the
    source's rows, and a source that can be sampled: the top of the tree from a sample
    (:func:`sampled_top`), then level by level the regions that still do not fit."""
    leaves = []
    active = [core.Region((), 0)]
    whole = None
    levels = []
    smallest = 0  # the rows below which a region is not cut (known after the first level)
    if n is not None and len(src.members) == 1 and src.sampled:
        active, whole, smallest, figures = sampled_top(src, k, l, budget, bytes_per_row, n)
        budget = src.region_budget
        src.whole = whole
        levels.append(figures)
    check = None        # with models: whether a side's value counts hold them (the table's known)
    for _ in range(MAX_LEVELS):
        # a cut's sides were counted exactly: those that are leaves already need no pass
        settled = [r for r in active if r.bounds and (core.fits(r.rows, bytes_per_row, budget)
                                                       or r.rows < max(2 * k, smallest))]
        leaves.extend(settled)
        active = [r for r in active if not any(r is x for x in settled)]
        if not active:
            break
        t0 = time.monotonic()
        # each pass of a level announced, so that a cancel can be aimed at it (the tests')
        level = f"out-of-core level {len(levels) + 1}"
        progress(src.plpy, f"{level}: counting {len(active)} regions")
        stats = level_stats(src, active)
        if whole is None:
            progress(src.plpy, f"{level}: ordering the categorical values")
            whole = src.whole = stats[0][1]
            smallest = stats[0][0] // MAX_REGIONS
            # categorical QIs cut in the whole table's fit's order (by frequency), as the sampled
            # top cuts them, and the regions coded in it (core.regions.widened)
            orders = categorical_orders(src)
            budget = src.region_budget = less_the_orders(budget, orders)
            for a, (d, order) in orders.items():
                whole[a] = core.QIStats(whole[a].non_null, distinct=d, order=order)
                if order is not None:
                    src.by_frequency[a] = order
        to_cut = []
        for i, (region, (rows, qstats)) in enumerate(zip(active, stats)):
            region.rows = rows
            if core.fits(rows, bytes_per_row, budget) or rows < max(2 * k, smallest):
                leaves.append(region)
                continue
            spreads = [0.0 if s is None else core.spread(s, whole[a], src.numeric[a])
                       for a, s in enumerate(qstats)]
            ranked = src.rank(spreads)
            if not ranked:
                leaves.append(region)
                continue
            to_cut.append((i, region, qstats, ranked))
        if not to_cut:
            active = []
            break
        # the ranked QIs tried one at a time for all regions at once: the first allowable cut is
        # usually on the first QI, so one pass of medians and counts per level is the rule
        following, made, passes = [], 0, 0
        pending = to_cut
        while pending:
            passes += 1
            fractions, nulls, counted, positional = {}, set(), {}, {}
            for i, region, qstats, ranked in pending:
                a = ranked[0]
                if a in src.by_frequency:       # NULL at its own position in that order
                    positional[(i, a)] = region.rows // 2
                    continue
                f = core.median_fraction(region.rows, qstats[a].non_null)
                if f is None:
                    nulls.add((i, a))
                else:
                    fractions[(i, a)] = f
                    if not src.numeric[a]:
                        counted[(i, a)] = (core.median_index(region.rows, qstats[a].non_null),
                                           qstats[a].distinct)
            progress(src.plpy, f"{level}: medians of {len(pending)} regions")
            values = medians(src, active, fractions, counted, positional)
            cuts = {key: values.get(key) for key in fractions}
            cuts.update({key: values[key] for key in positional if key in values})
            cuts.update({key: None for key in nulls})
            progress(src.plpy, f"{level}: counting the cuts' sides")
            counted = candidate_counts(src, active, cuts, bool(l))
            sides = {}
            if src.models is not None:
                progress(src.plpy, f"{level}: counting the sides' sensitive values")
                totals, sides = side_value_counts(src, active, cuts)
                check = check or src.models(src.tables)
                for i, region, _, _ in pending:
                    region.counts = totals.get(i, region.counts or [np.zeros_like(t) for t in src.tables])
            untried = []
            for i, region, qstats, ranked in pending:
                a = ranked[0]
                strict_c, inclusive_c = counted.get((i, a), (None, None))
                if (i, a) in sides:
                    # a candidate whose sides do not hold the models is not allowable
                    strict_c, inclusive_c = (
                        c if c is not None and core.held_by(check, held, region.counts) else None
                        for c, held in zip((strict_c, inclusive_c), sides[(i, a)]))
                chosen = core.choose(region.rows, k, l, strict_c, inclusive_c)
                if chosen is None:
                    if len(ranked) > 1:
                        untried.append((i, region, qstats, ranked[1:]))
                    else:
                        leaves.append(region)           # no allowable cut: fitted as it is
                    continue
                value = cuts[(i, a)]
                left_rows = (strict_c if chosen else inclusive_c).left_rows
                left_counts = right_counts = None
                if (i, a) in sides:
                    left_counts = sides[(i, a)][0 if chosen else 1]
                    right_counts = [t - x for t, x in zip(region.counts, left_counts)]
                following.append(core.Region(region.bounds + (core.Bound(a, value, chosen, True),),
                                             left_rows, left_counts))
                following.append(core.Region(region.bounds + (core.Bound(a, value, chosen, False),),
                                             region.rows - left_rows, right_counts))
                made += 1
            pending = untried
        levels.append({"regions": len(active), "cuts": made, "passes": passes,
                       "seconds": round(time.monotonic() - t0, 3)})
        progress(src.plpy, f"{level}: {len(active)} regions, {made} cut")
        active = following
    leaves.extend(active)     # past MAX_LEVELS: fitted as they are
    return leaves, levels


def release_columns(plpy, release: dict, promise: Promise):
    tbl = guards.table_in_query(plpy, release["source"])
    cols = {c.name: c for c in catalog.table_columns(plpy, tbl)}
    qis = [column_for(tbl, cols, name) for name in promise.quasi_identifiers]
    sens = [column_for(tbl, cols, name) for name in promise.sensitive]
    return tbl, qis, sens


#: rows per slice of a region (anon.partition_slice): PostgreSQL converts each slice (its ctids'
#: and classes' texts) while the region's arrays are held, ~90 bytes a row at 2.5M rows
SLICE_ROWS = 1 << 18

#: the write of an out-of-core release (its run's rows held in materialized CTEs, sorted into
#: release order) runs with work_mem at this fraction of the budget: it holds about four such
#: nodes while the regions are fitted, which with the build's 256MB grew by ~250 MB at 10M rows
WRITE_FRACTION = 16


def resident_bytes(fields: tuple = ("RssAnon", "RssFile")) -> int:
    """This backend's own resident memory (RssAnon + RssFile: private memory and the libraries
    it maps; not the shared buffers it touched), 0 where /proc has no such figures."""
    try:
        with open("/proc/self/status") as f:
            found = dict(line.split(":", 1) for line in f if line.startswith(fields))
        return sum(int(v.split()[0]) * 1024 for v in found.values())
    except (OSError, ValueError):
        return 0


def orders_count(plpy, tbl, qis: list) -> bool:
    """Whether a run over ``tbl`` reads a categorical QI's order (:func:`categorical_orders`,
    one pass of the source whose rows per value add up to its rows): a source that is sampled,
    in one relation, with a categorical QI of an ordered type and no hierarchy."""
    if has_foreign_members(plpy, tbl) or len(source_members(plpy, tbl)) != 1:
        return False
    hierarchical = set(catalog.hierarchy_columns(plpy, tbl))
    return any(c.kind != "numeric" and c.name not in hierarchical
               and orderable(plpy, c.display_type) for c in qis)


def source_rows(plpy, tbl) -> int:
    return sum(int(rows[0]["n"]) for rows in each_member(
        plpy, source_members(plpy, tbl), lambda rel: f"SELECT count(*) AS n FROM {rel}"))


def planned(plpy, release: dict, spec: ReleaseSpec, estimated: bool = False,
            counted_near: bool = False):
    """(spec, tbl, QIs, sensitive columns, budget, estimated bytes, rows, whether they were
    counted) of a release of specification ``spec``, or None when it is fitted in memory (it
    fits the budget, or its models are not counted here); ``estimated``: rows as the planner's
    statistics have them when they have any (no count); ``counted_near``: counted unless that
    estimate is UNCOUNTED_ABOVE times the budget or more."""
    if not takes_path(spec):
        return None
    return sized(plpy, release, spec, estimated, counted_near)


#: a source the planner's statistics put at this many times the budget or more is built out of
#: core without a count(*) first (~0.5 s at 10M rows, a tenth of a copy): out of core every
#: region is counted exactly, whatever the source's rows. Nearer the budget, and below it, the
#: rows are counted, so the in-memory path is only ever taken on an exact count or on
#: :data:`MOST_ROWS`, a bound no snapshot's rows can exceed.
UNCOUNTED_ABOVE = 2

#: the most rows the source's tree can hold, from its pages now: a heap page holds at most
#: PostgreSQL's MaxHeapTuplesPerPage tuples (a line pointer and the smallest tuple header
#: each), and the rows a snapshot sees lie on pages the relation has now (it only loses pages
#: that hold none); -1 with a foreign member (no pages to bound it)
MOST_ROWS = f"""
WITH RECURSIVE {guards.INHERITANCE_TREE}
SELECT CASE WHEN pg_catalog.bool_or(c.relkind NOT IN ('r', 'm', 'p')) THEN -1
            ELSE pg_catalog.sum(pg_catalog.pg_relation_size(c.oid)
                                / pg_catalog.current_setting('block_size')::int8
                                * ((pg_catalog.current_setting('block_size')::int8 - 24) / 28))
       END::int8 AS n
FROM pg_catalog.pg_class c JOIN tree USING (oid)"""

#: the rows of a source's tree as the planner estimates them: each member's rows per page at its
#: last ANALYZE times the pages it has now (the planner's rule, so a table loaded or truncated
#: since is scaled by its size); -1 when a member was never analyzed
ESTIMATED_ROWS = f"""
WITH RECURSIVE {guards.INHERITANCE_TREE}
SELECT CASE WHEN pg_catalog.bool_or(c.reltuples < 0 AND c.relkind <> 'p') THEN -1
            ELSE pg_catalog.sum(CASE WHEN c.relpages > 0 AND c.relkind IN ('r', 'm')
                THEN c.reltuples / c.relpages * (pg_catalog.pg_relation_size(c.oid)
                     / pg_catalog.current_setting('block_size')::int8)
                ELSE GREATEST(c.reltuples, 0) END) END::int8 AS n
FROM pg_catalog.pg_class c JOIN tree USING (oid) WHERE c.relkind <> 'p'"""


def sized(plpy, release: dict, spec: ReleaseSpec, estimated: bool = False,
          counted_near: bool = False):
    """:func:`planned`'s tuple of a release whose estimated read and fit exceed the budget, else
    None (whatever its method and refresh mode); its rows counted but as :func:`planned` says."""
    tbl, qis, sens = release_columns(plpy, release, spec.promise)
    budget = build_memory(plpy)
    bytes_per_row = core.row_bytes(len(qis) + len(sens))
    n, counted = -1, False
    if estimated or counted_near:
        # the whole tree: an inheritance parent's or a partition's rows are its descendants'
        n = run(plpy, ESTIMATED_ROWS, ["oid"], [tbl.oid])[0]["n"]
        n = -1 if n is None else n
        if counted_near and not estimated and n * bytes_per_row < UNCOUNTED_ABOVE * budget:
            n = -1
    if n < 0:
        # a source whose pages cannot hold more rows than the budget takes is read in memory
        # without a count(*) (a tenth of a copy)
        most = run(plpy, MOST_ROWS, ["oid"], [tbl.oid])[0]["n"]
        if most is not None and 0 <= most and core.fits(most, bytes_per_row, budget):
            return None
        n, counted = source_rows(plpy, tbl), True
    if core.fits(n, bytes_per_row, budget):
        return None
    return spec, tbl, qis, sens, budget, bytes_per_row, n, counted


# The stable refresh mode over the budget.

#: the stable mode's in-memory run per row, in multiples of core.regions.row_bytes: its VmHWM at
#: 1M rows of 6 QIs, 1 sensitive column and an identifier was ~1,350 MiB at a refresh
#: (docs/out-of-core.md), ~7 times the estimate of a fresh read and fit of the same rows
STABLE_ROW_FACTOR = 7


class StableOverBudget(AnonError):
    """A stable release whose rows exceed ``plpy_anon.build_memory`` (program_limit_exceeded)."""

    sqlstate = "54000"


def refuse_stable_refresh_over_budget(plan) -> None:
    """Refuse a stable release's refresh where a fresh one would go out of core (``plan``:
    :func:`sized`'s) and its state is one region (no stored boxes): the stable refresh follows
    people, groups and checks them in one backend (republication.py); a release created region
    by region is refreshed so (:func:`refresh_stable_by_regions`). Nothing is read or written
    before; a refused refresh keeps the published version."""
    _, tbl, _, _, budget, bytes_per_row, n, _ = plan
    needed = resident_bytes() + n * STABLE_ROW_FACTOR * bytes_per_row
    raise StableOverBudget(
        f"refresh_mode => 'stable' refreshes a release holding every row of its source in one "
        f"backend, and {tbl.label} ({n:,} rows, about {_size_text(n * bytes_per_row)} to read and "
        f"fit) exceeds {SETTING} ({_size_text(budget)})",
        detail="Above the budget a stable release is created region by region and refreshed "
               "so while its state is its regions'; this release's state is one region (created "
               "or refreshed in memory). refresh_mode => 'fresh' is built out of core.",
        hint=f"Raise the budget for this build, to what the stable run holds (SET {SETTING} = "
             f"'{_size_text(needed)}', or ALTER ROLE ... SET for scheduled refreshes), or create "
             "the release again with refresh_mode => 'fresh' and replace => true (its versions "
             "can then be intersected: docs/republication.md).")


def refresh_stable_by_regions(plpy, GD, release: dict, spec, plan, boxes: list, started: float,
                              hooks, stable_run):
    """The slices of a stable refresh beyond the budget, region by region
    (``stable_run.RegionRefresh``: db/stable_regions.py), once its plan
    (``stable_run.plan_refresh``) holds every region apart, each holds k rows and the largest
    one's stable run fits the budget; else refused (54000) before anything is written.
    ``plan``: :func:`sized`'s; ``hooks``: the method's read, fit and publish of one region."""
    _, tbl, qis, sens, budget, bytes_per_row, n, _ = plan
    rid = release["release_id"]
    src = Source(plpy, tbl, qis, sens, source_members(plpy, tbl))
    cols = {c.name: c for c in catalog.table_columns(plpy, tbl)}
    identifiers = [cols[name] for name in spec.promise.identifiers or ()]
    with release_rows.owner_state(plpy):
        committed = run(plpy, republication.COMMITTED_VERSIONS, ["int4"], [rid])[0]
        with timing.phase("refresh_plan"):
            planned = stable_run.plan_refresh(plpy, release, src, identifiers)
    refuse_unless_apart(planned, plan, release, stable_run.NotByRegions)
    read, fit, publish = hooks
    ctx = method.Run(plpy, GD, rid, release, spec, started)
    refresh = stable_run.RegionRefresh(ctx, src, read, region_read, tbl.label, budget, boxes,
                                       planned, committed)
    metrics = {"out_of_core": {"budget_bytes": budget, "estimated_bytes": n * bytes_per_row,
                               "regions": len(boxes), "stable_regions": True,
                               "refreshed_by_regions": True,
                               "largest_region_rows": max(planned.rows),
                               "movers": planned.movers, "joiners": planned.joiners}}
    release_rows.stash_run(GD, rid, started=started, row_count=sum(planned.rows),
                           achieved_k=None, metrics=metrics, people={"check": refresh.check})
    progress(plpy, f"out of core: a stable refresh of {len(boxes)} regions of at most "
                   f"{max(planned.rows):,} rows, one at a time")
    return refresh.slices(plpy, ctx, fit, publish, metrics)


def refuse_unless_apart(planned, plan, release: dict, refused) -> None:
    """Refuse (``refused``: 54000) a refresh whose plan (stable_regions.RefreshPlan) links
    regions (their run together is not built), leaves a region below k rows, or whose largest
    region's stable run exceeds the budget's room for a region."""
    budget, bytes_per_row, n = plan[4], plan[5], plan[6]
    name = f"{release['release_schema']}.{release['release_name']}"
    regions, rows = planned.largest()
    room = core.leaf_budget(budget, resident_bytes())
    whole = resident_bytes() + n * STABLE_ROW_FACTOR * bytes_per_row
    figures = {"regions": planned.regions, "groups": len(planned.groups.group_rows),
               "largest_group": regions, "largest_group_rows": rows, "movers": planned.movers,
               "waiting": planned.waiting, "joiners": planned.joiners,
               "spread_groups": planned.spread_groups, "remembered_twice": planned.twice,
               "closure_rounds": planned.groups.rounds}
    in_memory = (f"Raise the budget for this build to what the stable run holds in one backend "
                 f"(SET {SETTING} = '{_size_text(whole)}', or ALTER ROLE "
                 "... SET for scheduled refreshes), or create the release again with "
                 "refresh_mode => 'fresh' and replace => true (its versions can then be "
                 "intersected: docs/republication.md).")
    if planned.everything is not None or len(regions) > 1:
        links = [text for count, text in (
            (planned.twice, f"{planned.twice:,} rows' people are remembered by two regions"),
            (planned.waiting, (f"{planned.waiting:,} held back people wait in another "
                               "region's group")),
            (planned.spread_groups, f"{planned.spread_groups:,} groups span regions")) if count]
        why = planned.everything or (", ".join(links) + "; the regions whose boxes meet the "
                                     "hull of the regions they link join them")
        raise refused(
            f"a stable refresh of {name} beyond {SETTING} "
            f"({_size_text(budget)}) is built region by region where no region is "
            f"linked to another, and {len(regions)} of its {planned.regions} regions "
            f"({rows:,} rows) would have to be refreshed together: {why}",
            detail=json.dumps(figures), hint=in_memory)
    if planned.movers > len(planned.moved):
        raise refused(
            f"a stable refresh of {name} region by region reads each known person with the "
            f"region remembering them, listing those whose quasi-identifiers left its box, and "
            f"{planned.movers:,} did (at most {len(planned.moved):,} are listed)",
            detail=json.dumps(figures), hint=in_memory)
    k = int(Promise.of(jsonb(release["parameters"])).k)
    few = [r for r, count in enumerate(planned.rows) if count < k]
    if few:
        raise refused(
            f"a stable refresh of {name} region by region refreshes each region as a release "
            f"of its own, and {len(few)} of its {planned.regions} regions hold fewer than k = "
            f"{k} rows now (region {few[0]}: {planned.rows[few[0]]:,})",
            detail=json.dumps(figures), hint=in_memory)
    held = rows * STABLE_ROW_FACTOR * bytes_per_row
    if held > room:
        need = budget + held - room
        raise refused(
            f"a stable refresh of {name} region by region holds its largest region ({rows:,} "
            f"rows, about {_size_text(held)} in the stable run) in one backend, "
            f"which exceeds {SETTING} ({_size_text(budget)})",
            detail=json.dumps(figures),
            hint=f"Raise the budget to SET {SETTING} = "
                 f"'{_size_text(max(need, 2 * held))}' for this refresh; or: "
                 + in_memory)


def _size_text(size: int) -> str:
    """``size`` bytes rounded up to whole kilobytes below a megabyte, else megabytes, as
    pg_size_bytes reads them."""
    if size < 2**20:
        return f"{-(-size // 2**10)}kB"
    return f"{-(-size // 2**20)}MB"


def write_settings(plpy, release_method, release_id: int) -> dict:
    """The settings the build of release ``release_id`` runs with beside the build's work_mem:
    for a release that will run out of core, work_mem capped at a sixteenth of the budget and
    hash_mem_multiplier at 1 (the run's rows spill to temporary files rather than grow beside the
    regions' fits); none for any other."""
    if release_method is None or release_method.name not in METHODS:
        return {}
    # a setting, not a guarantee: the planner's row estimate decides (no scan of the source)
    release = release_rows.by_id(plpy, release_id)
    plan = planned(plpy, release, release_method.spec_of(jsonb(release["parameters"])),
                   estimated=True)
    if plan is None:
        return {}
    return {"work_mem": f"{max(64, plan[4] // WRITE_FRACTION // 1024)}kB", "hash_mem_multiplier": "1"}


def run_out_of_core(release_method, plpy, GD, release: dict, spec: ReleaseSpec, *, read, fit,
                    publish, stable_run=None, publish_stable=None):
    """The partitioning run of a plain Mondrian release out of core, or None when the
    in-memory run applies (the release fits the budget, or its models are not counted here); a
    stable release is created region by region (stable_regions.py), and refreshed so where no
    region is linked to another (:func:`refresh_stable_by_regions`). The method's hooks for one region: ``read(ctx, where, whole)`` its rows (``whole``: the
    table's QIStats per QI, which the region's encodings are widened to: core.regions.widened), ``fit(rows, spec)``
    the in-memory fit, ``publish(ctx, rows, model) -> (slices, stats)`` its classes;
    ``stable_run``: the module that builds a stable release's first version region by region
    and refreshes it so where no region is linked to another (db/stable_regions.py; None: such
    a release is refused too); ``publish_stable``: the publish hook of a stable refresh's
    region (its groups' published multisets). ``release``: its catalog row, ``spec`` its
    specification, whose texts method.run checked."""
    started = time.monotonic()
    release_id = release["release_id"]
    # over the budget by the planner's estimate, but within UNCOUNTED_ABOVE times it: the rows
    # are counted before the path is final, by the categorical orders' pass where one runs
    plan = planned(plpy, release, spec, estimated=True)
    near = plan is not None and not plan[7] and plan[6] * plan[5] < UNCOUNTED_ABOVE * plan[4]
    if plan is None or (near and not orders_count(plpy, plan[1], plan[2])):
        plan, near = planned(plpy, release, spec, counted_near=True), False
    if plan is None:
        return None
    spec, tbl, qis, sens, budget, bytes_per_row, n, counted = plan
    stable = republication.is_stable(spec.stored)
    if stable:
        # refused before the secrets or the source are read: a refused scheduled refresh costs
        # nothing, and a non-owner gets the budget's error, not the salt's
        if stable_run is None or publish_stable is None:
            refuse_stable_refresh_over_budget(plan)
        first = stable_run.first_version(plpy, release_id)
        boxes = None if first else stable_run.boxes_of(plpy, release_id)
        if not first and not boxes:
            refuse_stable_refresh_over_budget(plan)
        release, spec, read = stable_run.with_secrets(release_method, plpy, release, read)
        if not first:
            return refresh_stable_by_regions(plpy, GD, release, spec, plan, boxes, started,
                                             (read, fit, publish_stable), stable_run)
    # the stable run holds its people's hashes and texts beside a region's rows
    region_row_bytes = bytes_per_row * (STABLE_ROW_FACTOR if stable else 1)
    l = spec.promise.l
    members = source_members(plpy, tbl)
    src = Source(plpy, tbl, qis, sens if l or spec.promise.t is not None else [], members,
                 not has_foreign_members(plpy, tbl),
                 ranking_of(spec, [c.name for c in qis]), models_of(spec),
                 getattr(spec.settings, "split", "median"))
    src.counted_rows = n if counted else None
    src.order_values = order_values(budget)
    if near:
        with timing.phase("top_levels"), src.steps.step("categorical_orders"):
            src.orders = categorical_orders(src)
        n = src.counted_rows = src.order_rows
        counted = True
        if core.fits(n, bytes_per_row, budget):
            return None             # the estimate was stale: the in-memory run, on exact rows
    # what the regions' read and fit map (pyarrow, the compiled kernels: ~110 MiB of libraries)
    # is in the backend before its memory is read, so the regions are sized without it
    import pyarrow  # noqa: F401
    mondrian_jit.kernels()
    # what the backend holds before the regions (its private part apart: the regions' peak less
    # it is what a region's rows took, which the estimate per row is checked against)
    resident, resident_anon = resident_bytes(), resident_bytes(("RssAnon",))
    leaf_budget = src.region_budget = core.leaf_budget(budget, resident)
    with timing.phase("top_levels"):
        leaves, levels = top_regions(src, int(spec.promise.k), l, leaf_budget, region_row_bytes, n)
    leaf_budget = src.region_budget         # less what the categorical orders hold
    ctx = method.Run(plpy, GD, release_id, release, spec, started)
    ctx.read_s = ctx.elapsed()
    figures = core.ReleaseFigures()
    # the write's work_mem as the build's query sees it (write_settings)
    work_mem = run(plpy, "SELECT pg_catalog.current_setting('work_mem') AS w")[0]["w"]
    metrics = {"out_of_core": {"budget_bytes": budget, "estimated_bytes": n * bytes_per_row,
                               # the path chosen on counted rows, or on the planner's estimate
                               # far above the budget (UNCOUNTED_ABOVE)
                               "rows_counted": counted,
                               "region_budget_bytes": leaf_budget, "resident_bytes": resident,
                               "resident_anon_bytes": resident_anon,
                               "largest_region_rows": max(r.rows for r in leaves),
                               "write_work_mem": work_mem,
                               "levels": levels, "regions": len(leaves)}}
    checks = None
    if stable:
        # the first version's people grouped, checked and remembered region by region
        checks = stable_run.RegionChecks(ctx, src, read, region_read, tbl.label, budget)
        metrics["out_of_core"]["stable_regions"] = True
    release_rows.stash_run(GD, release_id, started=started, row_count=sum(r.rows for r in leaves),
                           achieved_k=None, metrics=metrics,
                           people=None if checks is None else {"check": checks.check})
    progress(plpy, f"out of core: {len(leaves)} regions of at most "
                   f"{max(r.rows for r in leaves):,} rows, fitted one at a time")
    return _leaf_slices(plpy, GD, ctx, src, leaves, (read, fit, publish), figures, metrics,
                        None if checks is None else checks.add)


#: the settings of a region's read. Read by its own scan (no pass: region_pass), a region's rows
#: are read by ONE sequential scan of the source filtered by its predicate (the
#: reader's chunk as large as any table, TID range scans off): a sequential scan of a table
#: larger than a quarter of shared_buffers reads through a small ring of buffers (PostgreSQL's
#: BAS_BULKREAD strategy), where TID range scans, which take no strategy, evict through every
#: buffer, and the backend's VmHWM counts each one it touched (2.5M rows, 182 MiB table,
#: shared_buffers 512MB: RssShmem 191 MiB by 2048-block TID ranges, 24 by one scan). The
#: region's packed columns are then held in the backend at once rather than a chunk at a time.
#: That scan tests every row of the source for a region's few: with the tuple transfer costed at
#: a tenth of the default, the planner runs it in parallel workers (Gather under the backend's
#: aggregate; 4 regions of 10M rows: the backend's CPU 6.2 s serial, 4.2-4.8 s so).
#: The output styles are the run function's (sql/build.py, OUTPUT_STYLES): a stable release's
#: check reads each region again after the run, in the caller's session, and must read the
#: QIs' texts (a timestamptz's UTC offset) as the run read them.
REGION_READ = {"plpy_anon.read_chunk_blocks": str(2**31 - 1), "enable_tidscan": "off",
               "parallel_tuple_cost": "0.01", "DateStyle": "ISO, YMD",
               "IntervalStyle": "iso_8601", "TimeZone": "UTC", "bytea_output": "hex"}


@contextlib.contextmanager
def region_read(plpy):
    """:data:`REGION_READ` for this transaction, the previous values (unset: '') put back."""
    previous = {name: run(plpy, "SELECT pg_catalog.current_setting($1, true) AS v", ["text"],
                          [name])[0]["v"] or "" for name in REGION_READ}
    try:
        for name, value in REGION_READ.items():
            run(plpy, "SELECT pg_catalog.set_config($1, $2, true)", ["text", "text"], [name, value])
        yield
    finally:
        for name, value in previous.items():
            run(plpy, "SELECT pg_catalog.set_config($1, $2, true)", ["text", "text"], [name, value])


#: the setting that reads each region by its own filtered scan of the source ('off'), where its
#: regions' rows would be routed to spill files in one pass (default 'on': region_spill.py)
ONE_PASS_SETTING = "plpy_anon.regions_in_one_pass"


def route_case(src: Source, leaves: list) -> str:
    """SQL of a row's region number among ``leaves`` (the leaves of one tree of cuts, each
    region's bounds from the root down): a nested ``CASE``, one comparison per level; where the
    bounds are not such a tree, a ``CASE`` over the regions' predicates (a row in none: NULL)."""
    def node(members: list, depth: int) -> str | None:
        if len(members) == 1:
            return str(members[0][0])
        if any(len(bounds) <= depth for _, bounds in members):
            return None
        b = members[0][1][depth]
        if any((c.qi, c.value, c.strict) != (b.qi, b.value, b.strict)
               for _, bounds in members for c in [bounds[depth]]):
            return None
        left = [m for m in members if m[1][depth].left]
        right = [m for m in members if not m[1][depth].left]
        if not left or not right:
            return None
        inner = node(left, depth + 1), node(right, depth + 1)
        if None in inner:
            return None
        return f"CASE WHEN {src.left(b.qi, b.value, b.strict)} THEN {inner[0]} ELSE {inner[1]} END"

    tree = node([(i, tuple(r.bounds)) for i, r in enumerate(leaves)], 0)
    if tree is not None:
        return tree
    return "CASE " + " ".join(f"WHEN {src.predicate(r.bounds)} THEN {i}"
                              for i, r in enumerate(leaves)) + " END"


def region_pass(plpy, src: Source, leaves: list) -> RegionSpill | None:
    """The pass routing the regions' rows to spill files, or None where each region is read by
    its own scan: one region, a source with foreign members (postgres_fdw pushes each region's
    predicate down to its server: a pass would pull every row here), or the setting off."""
    if len(leaves) < 2 or not src.sampled:
        return None
    setting = run(plpy, "SELECT pg_catalog.current_setting($1, true) AS v", ["text"],
                  [ONE_PASS_SETTING])[0]["v"]
    if (setting or "on").strip().lower() in ("off", "false", "0", "no"):
        return None
    return RegionSpill(route_case(src, leaves), len(leaves), chunk_blocks(plpy))


def _leaf_slices(plpy, GD, ctx, src, leaves, hooks, figures, metrics, fitted=None):
    """The run's slices, region by region, each region read and fitted when PostgreSQL asks for
    its first slice. The partitioning run returns them through errors.sql_entry, which reports
    a core error raised while they are fetched as at the call (SQLSTATE, detail, hint).
    ``fitted(region, rows, model, first_class)``: told of each region once fitted (a stable
    release's run keeps what its check needs)."""
    spill = region_pass(plpy, src, leaves)
    try:
        yield from _region_slices(plpy, GD, ctx, src, leaves, hooks, figures, metrics, fitted,
                                  spill)
    finally:
        if spill is not None:
            spill.close()


def _region_slices(plpy, GD, ctx, src, leaves, hooks, figures, metrics, fitted, spill):
    read, fit, publish = hooks
    position = first_class = 0
    k = int(ctx.spec.promise.k)
    for number, region in enumerate(leaves, 1):
        # each step announced as it starts: a client sees where a cancel lands
        step = f"region {number} of {len(leaves)}"
        with interrupts.honoured(plpy):
            progress(plpy, f"{step}: reading {region.rows:,} rows")
            t0 = time.monotonic()
            with timing.phase("region_read"), src.steps.step("region_read"), region_read(plpy):
                where = src.predicate(region.bounds) if region.bounds else None
                rows = read(ctx, where if spill is None else RoutedRegion(spill, number - 1, where),
                            src.whole)
            t1 = time.monotonic()
            ctx.read_s += t1 - t0
            progress(plpy, f"{step}: fitting")
            with timing.phase("region_fit"), src.steps.step("region_fit"):
                model = fit(rows, region_spec(ctx.spec, region, src.tables))
            ctx.fit_s += time.monotonic() - t1
            with timing.phase("region_publish"), src.steps.step("region_publish"):
                slices, stats = publish(ctx, rows, model)
            slices = iter(slices)
            figures.add(rows.encoded, stats["metrics"], rows.data.n_rows)
            if fitted is not None:
                fitted(region, rows, model, first_class)
            n_rows, n_classes = rows.data.n_rows, model.n_classes_
            del rows, model
            progress(plpy, f"{step}: writing")
        while True:
            with src.steps.step("region_slices"):          # a slice's literals made
                piece = next(slices, None)
            if piece is None:
                break
            piece["first_position"] += position
            piece["first_class"] += first_class
            # the storage's SQL runs on the slice until the next one is asked for
            with src.steps.step("region_write"):
                yield piece
        del slices
        position += n_rows
        first_class += n_classes
        method.return_free_memory()
        ctx.note_memory("regions")         # after the last region: its peak is the run's
    metrics.update(figures.metrics(k))
    metrics["out_of_core"]["steps"] = src.steps.metrics()
    if spill is not None:
        # the pass is part of the first region's read (region_read)
        metrics["out_of_core"]["region_pass"] = {
            "served": spill.key is not None, "seconds": round(spill.seconds, 3),
            "cpu": round(spill.cpu, 3), "bytes": spill.bytes, "directory": spill.place}
    metrics["seconds"] = {"read": round(ctx.read_s, 4), "partition": round(ctx.fit_s, 4),
                          "python_total": round(ctx.elapsed(), 4)}
    if ctx.memory_mib:
        metrics["memory_mib"] = ctx.memory_mib
    stash = GD.get(release_rows.RUNS_KEY, {}).get(ctx.release_id)
    if stash is not None:
        stash["achieved_k"] = figures.achieved_k
        stash["seconds"] = ctx.elapsed()
        if position != stash["row_count"]:
            raise RuntimeError(f"out-of-core run: regions of {stash['row_count']} rows released "
                               f"{position}")

