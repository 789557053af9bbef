"""Attribute priorities and predicate cut points learned from a SQL workload (Xiong & Rangachari, section 4.2).

Counting. Every statement that reads the target table contributes, multiplied by its frequency,
one count per ``(column, clause)`` it uses (see :mod:`plpy_anon.querylog.resolve`):
``projection`` (SELECT list), ``selection`` (WHERE / JOIN ON / HAVING), ``group_by``,
``order_by``. The four counts are kept apart and reported.

Weight formula (the paper: "weight = normalized frequency", projection and selection kept apart)::

    P_c = projection count of column c      S_c = selection count of column c
    w_c = α · P_c / Σ_d P_d  +  (1 − α) · S_c / Σ_d S_d          α = projection_share

so the weights sum to 1, α (default 0.5) is the configurable split, and a workload without any
projection (or without any selection) use puts all the weight on the other kind. GROUP BY and
ORDER BY uses are reported but do not enter the weight: a grouped or sorted column almost always
appears in the SELECT list too, and counting it again would let the query shape, not the
analysts' interest, decide.

Cut points (the paper's future work: min-term predicates). For each numeric column, each
constant the analysts compare it with is turned into the cut ``left = {x <= t}`` or
``left = {x < t}`` that makes a partition boundary coincide with the predicate:

    x > t, x <= t           ->  (t, left_inclusive=True)
    x >= t, x < t           ->  (t, left_inclusive=False)
    x = t, x IN (.., t, ..) ->  both (t, False) and (t, True): t isolated between two cuts
    x BETWEEN lo AND hi     ->  (lo, False) and (hi, True)

A categorical column's equality constants are cut points too (``x = 'F'``, ``x IN ('F', 'M')``:
``('F', False)`` and ``('F', True)``), read against the order of its released codes: the value is
isolated in classes of its own where k allows, so a class never mixes it with others.

Cut points carry the summed frequency of the predicates that produced them.
"""

from __future__ import annotations

import gc
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from contextlib import contextmanager

import numpy as np
import pandas as pd
from sqlglot import exp
from sqlglot.schema import ensure_schema

from plpy_anon.core.errors import InsufficientData, InvalidParameter, UndefinedObject
from plpy_anon.core.interrupts import check as check_interrupts
from plpy_anon.core.workload import AllOf, AnyOf, Condition, is_number
from plpy_anon.querylog.parse import (
    DIALECT,
    MAX_STATEMENT_BYTES,
    ParsedStatement,
    count_statements,
    group_by_shape,
    parse_counts,
    parse_statement,
)
from plpy_anon.querylog.resolve import (
    CLAUSES,
    GROUP_BY,
    ORDER_BY,
    PROJECTION,
    SELECTION,
    NotAQuery,
    ResolveError,
    literal_nodes,
    resolve_shape,
    resolve_statement,
)

NUMERIC_TYPES = frozenset(
    {
        "smallint", "integer", "int", "bigint", "int2", "int4", "int8", "real", "float4",
        "float8", "double precision", "float", "numeric", "decimal", "smallserial", "serial",
        "bigserial",
    }
)
MAX_REPORTED_ERRORS = 10


def is_numeric_type(type_name: str) -> bool:
    """True for PostgreSQL numeric types (``numeric(10,2)`` included)."""
    return type_name.split("(")[0].strip().lower() in NUMERIC_TYPES


def split_table_name(table: str, default_schema: str = "public") -> tuple[str, str]:
    """``'clinic.patients'`` -> ``('clinic', 'patients')``; ``'patients'`` -> default schema."""
    schema, _, name = table.rpartition(".")
    return (schema or default_schema).strip('"'), name.strip('"')


class PriorityLearner:
    """Learn column priorities, predicate constants and cut points of one table from a workload.

    Parameters
    ----------
    table : ``'name'`` or ``'schema.name'`` of the table whose columns get priorities.
    projection_share : α in the weight formula (module docstring), in [0, 1].
    default_schema : schema of unqualified table names in the statements.
    by_shape : parse and resolve once per literal-free statement shape and bind each statement's
        constants onto it (:mod:`plpy_anon.querylog.parse`); False parses every distinct text
        (the reference path, same results, kept for tests).
    max_statement_bytes : statements longer than this (UTF-8 bytes) are counted in the report
        (``too_long``), never parsed; None: no bound.

    Attributes set by :meth:`fit`
    -----------------------------
    counts_ : DataFrame, one row per column of the table, columns projection / selection /
        group_by / order_by (frequency-weighted statement counts).
    weights_ : Series, the normalized weight per column (sums to 1).
    constants_ : dict column -> Counter {(op, values): frequency} of the predicates seen.
    cut_points_ : dict column -> DataFrame (threshold, left_inclusive, frequency); thresholds
        are numbers on numeric columns, the compared strings on the others.
    no_constants_ : numeric columns the workload filters on without a numeric constant (e.g.
        pg_stat_statements' ``$1`` placeholders): no cut point can be learned for them.
    queries_ : list of (predicate tree over column names, frequency), one per distinct statement
        with a bounded WHERE on the table -- the workload of :func:`workload_precision`.
    query_texts_ : the normalized statement text of each entry of ``queries_``.
    n_shapes_ : number of statement shapes parsed and resolved (distinct texts when
        ``by_shape`` is False).
    report_ : dict of what happened to the statements (parsed, failed, other tables, ...).
    elapsed_seconds_ : time fit took.
    """

    def __init__(self, table, *, projection_share=0.5, default_schema="public", by_shape=True,
                 max_statement_bytes=MAX_STATEMENT_BYTES):
        self.table = table
        self.projection_share = projection_share
        self.default_schema = default_schema
        self.by_shape = by_shape
        self.max_statement_bytes = max_statement_bytes

    # ------------------------------------------------------------------------------------
    def fit(self, statements: Iterable, catalog: dict) -> PriorityLearner:
        """``statements``: texts or ``(text, frequency)`` pairs; ``catalog``:
        ``{schema: {table: {column: type}}}`` (every table the statements may read)."""
        started = time.perf_counter()
        alpha = self._check_projection_share()
        schema, table = split_table_name(self.table, self.default_schema)
        columns = self._table_columns(catalog, schema, table)
        too_long: Counter = Counter()
        counts = count_statements(statements, self.max_statement_bytes, too_long)
        n_input = sum(counts.values()) + too_long["statements"]
        if n_input == 0:
            raise InsufficientData(
                "the workload is empty: there is no statement to learn priorities from",
                hint="store queries first (pg_stat_statements, anon.workload, or the client's "
                "load-queries), or pass explicit priorities",
            )
        accumulator = _Accumulator(schema, table, columns, self.default_schema)
        catalog = ensure_schema(catalog, dialect=DIALECT)  # built once, not per statement
        with _young_collections_only():
            if self.by_shape:
                groups = group_by_shape(counts)
                self.n_shapes_ = len(groups)
                groups.reverse()
                collected = time.monotonic()
                while groups:
                    check_interrupts()
                    accumulator.add_shape(groups.pop(), catalog)  # its tokens freed with it
                    if time.monotonic() - collected > FULL_COLLECTION_EVERY:
                        gc.collect()
                        gc.freeze()     # what survived is not walked again while parsing
                        collected = time.monotonic()
            else:
                for index, statement in enumerate(parse_counts(counts).statements):
                    check_interrupts()
                    accumulator.add(statement, catalog, index)
                self.n_shapes_ = len(counts)
        report = accumulator.report(n_input, len(counts), too_long["statements"])
        if accumulator.n_used == 0:
            raise InsufficientData(
                f"none of the {n_input} statements of the workload reads "
                f"{schema}.{table}",
                hint="load queries that read this table, or pass explicit priorities",
                detail=_report_detail(report),
            )
        self.counts_ = accumulator.counts_frame()
        self.weights_ = combine_counts(
            self.counts_[PROJECTION], self.counts_[SELECTION], alpha
        )
        self.constants_ = dict(accumulator.constants)
        numeric = [c for c, t in columns.items() if is_numeric_type(t)]
        self.cut_points_ = {
            c: (check_interrupts(), cut_points(self.constants_[c], numeric=c in numeric))[1]
            for c in columns if c in self.constants_
        }
        self.cut_points_ = {c: f for c, f in self.cut_points_.items() if not f.empty}
        selected = self.counts_[SELECTION]
        self.no_constants_ = [c for c in numeric if selected.get(c, 0) > 0
                              and (c not in self.cut_points_ or self.cut_points_[c].empty)]
        self.queries_, self.query_texts_ = accumulator.workload_queries()
        self.report_ = report
        self.elapsed_seconds_ = time.perf_counter() - started
        return self

    def summary(self) -> pd.DataFrame:
        """One row per column: the four counts and the weight, heaviest first."""
        frame = self.counts_.copy()
        frame["weight"] = self.weights_
        return frame.sort_values(["weight"], ascending=False, kind="stable")

    # ------------------------------------------------------------------------------------
    def _check_projection_share(self):
        alpha = self.projection_share
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha <= 1:
            raise InvalidParameter(
                f"projection_share must be a number in [0, 1], got {alpha!r}",
                hint="0 weighs WHERE use only, 1 SELECT-list use only, 0.5 both equally",
            )
        return float(alpha)

    @staticmethod
    def _table_columns(catalog, schema, table):
        columns = catalog.get(schema, {}).get(table)
        if not columns:
            raise UndefinedObject(
                f"table {schema}.{table} is not in the catalog given to the priority learner",
                hint="check the table name (schema-qualify it if it is not in public)",
            )
        return dict(columns)


#: seconds of parsing between two full collections: the trees of a long statement outlive the
#: young collections, and one full collection of a whole workload's trees takes seconds that
#: nothing interrupts; what survives one is frozen (gc.freeze) until the parse ends, so each
#: walks only what the last 0.25 s made, not the constants collected so far
FULL_COLLECTION_EVERY = 0.25


@contextmanager
def _young_collections_only():
    """No full garbage collection while statements are parsed: their trees (cycles, through
    parent links) die young and young collections free them, but each full collection walks
    every object of the process; on 20,000 statements they took a third of the time."""
    with _FITS_LOCK:                # fits overlapping in threads: the last one out restores
        if not _FITS:
            _SAVED_THRESHOLDS[:] = gc.get_threshold()
            gc.set_threshold(_SAVED_THRESHOLDS[0], _SAVED_THRESHOLDS[1], 2**30)
        _FITS.append(None)
    try:
        yield
    finally:
        with _FITS_LOCK:
            _FITS.pop()
            if not _FITS:
                gc.unfreeze()
                gc.set_threshold(*_SAVED_THRESHOLDS)


_FITS_LOCK = threading.Lock()
_FITS: list = []
_SAVED_THRESHOLDS: list = []


def learn_priorities(statements, catalog, table, **params) -> PriorityLearner:
    """Functional wrapper: ``PriorityLearner(table, **params).fit(statements, catalog)``."""
    return PriorityLearner(table, **params).fit(statements, catalog)


def combine_counts(projection: pd.Series, selection: pd.Series, alpha: float) -> pd.Series:
    """``w = α·P/ΣP + (1−α)·S/ΣS`` (a side with no use at all gives its share to the other)."""
    p_total, s_total = float(projection.sum()), float(selection.sum())
    if p_total == 0 and s_total == 0:
        raise InsufficientData(
            "the statements read the table but use none of its columns by name",
            hint="queries such as SELECT count(*) carry no priority; pass explicit priorities",
        )
    if p_total == 0:
        alpha = 0.0
    elif s_total == 0:
        alpha = 1.0
    p_part = projection / p_total if p_total else 0.0 * projection
    s_part = selection / s_total if s_total else 0.0 * selection
    return (alpha * p_part + (1 - alpha) * s_part).rename("weight")


def cut_points(constants: Counter, numeric: bool = True) -> pd.DataFrame:
    """Cut points of one column from its predicate constants (module docstring): numbers of any
    comparison on a numeric column, the strings of ``=`` and ``IN`` on another. Summed in pandas:
    a workload of long IN lists holds ~10^6 constants, and each (op, values) is one check."""
    thresholds: list = []
    inclusive: list = []
    frequencies: list = []
    for (op, values), frequency in constants.items():
        check_interrupts()
        if numeric and not all(is_number(v) for v in values):
            continue
        if not numeric and (op not in ("=", "in") or not all(isinstance(v, str) for v in values)):
            continue
        cuts = _cuts_of(op, values)
        thresholds.extend(t for t, _ in cuts)
        inclusive.extend(i for _, i in cuts)
        frequencies.extend([frequency] * len(cuts))
    frame = pd.DataFrame({
        "threshold": np.asarray(thresholds, dtype=float) if numeric
        else np.asarray(thresholds, dtype=object),
        "left_inclusive": np.asarray(inclusive, dtype=bool),
        "frequency": np.asarray(frequencies, dtype=np.int64)})
    check_interrupts()
    frame = frame.groupby(["threshold", "left_inclusive"], sort=True, as_index=False)["frequency"]
    return frame.sum()


def _cuts_of(op, values):
    if op in (">", "<="):
        return [(values[0], True)]
    if op in (">=", "<"):
        return [(values[0], False)]
    if op in ("=", "in"):
        return [(v, inclusive) for v in values for inclusive in (False, True)]
    if op == "between":
        return [(values[0], False), (values[1], True)]
    return []  # <> and prefix bound no interval


def localize_predicate(tree, schema, table):
    """The part of a resolved predicate tree on ``schema.table``, with bare column names."""
    if tree is None:
        return None
    if isinstance(tree, Condition):
        ref = tree.column
        if (ref.schema, ref.table) != (schema, table):
            return None
        return Condition(ref.column, tree.op, tree.values)
    parts = [localize_predicate(p, schema, table) for p in tree.parts]
    if isinstance(tree, AllOf):
        kept = tuple(p for p in parts if p is not None)
        return None if not kept else kept[0] if len(kept) == 1 else AllOf(kept)
    return None if any(p is None for p in parts) else AnyOf(tuple(parts))


def _report_detail(report) -> str:
    return ", ".join(f"{k}: {v}" for k, v in report.items() if k != "errors")


def _folded(identifier):
    """An identifier's name as PostgreSQL reads it: unquoted names fold to lower case."""
    if not isinstance(identifier, exp.Identifier):
        return identifier.name if identifier is not None else ""
    return identifier.this if identifier.quoted else identifier.this.lower()


class _Accumulator:
    """Sums the resolved statements of a workload for one target table. ``index`` is a distinct
    text's position in the workload: queries and errors are reported in that order, whatever
    order the statements were resolved in."""

    def __init__(self, schema, table, columns, default_schema):
        self.schema, self.table, self.columns = schema, table, columns
        self.default_schema = default_schema
        self.counts = {clause: Counter() for clause in CLAUSES}
        self.constants = defaultdict(Counter)
        self.queries = []  # (index, predicate, frequency, text)
        self.outcomes = Counter()
        self.errors = []  # (index, error dict)
        self.n_used = 0

    # -- one distinct text (the reference path, and the fallback of a shape) ----------------
    def add(self, statement, catalog, index):
        if not statement.ok:
            self._fail("parse_errors", index, statement, statement.error)
            return
        for expression in statement.expressions:
            self._add_expression(statement, expression, catalog, index)

    def _add_expression(self, statement, expression, catalog, index):
        frequency = statement.frequency
        if not self._mentions_table(expression):
            self.outcomes["other_tables"] += frequency
            return
        try:
            resolved = resolve_statement(expression, catalog, self.default_schema)
        except NotAQuery:
            self.outcomes["not_queries"] += frequency
            return
        except ResolveError as error:
            self._fail("unresolved", index, statement, str(error))
            return
        self._add_resolved(resolved, statement.text, frequency, index)

    # -- one shape: parse and resolve a representative, bind the others' literals ------------
    def add_shape(self, members, catalog):
        """``members``: the :class:`~plpy_anon.querylog.parse.Shaped` texts of one shape.

        A literal is bound only where the resolved tree still holds it as the token read it;
        the others (``GROUP BY 1`` consumed by qualification, ``INTERVAL '1 day'`` split) are
        structural: members whose structural literals differ are resolved on their own."""
        pending = list(members)
        while pending:
            representative = pending[0]
            plans = self._plan(representative, catalog)
            if plans is None:  # no parse or no resolution: every text on its own, as before
                for member in pending:
                    check_interrupts()
                    expressions, error = parse_statement(member.text)
                    statement = ParsedStatement(member.text, member.frequency, expressions, error)
                    self.add(statement, catalog, member.index)
                return
            plans, bound = plans
            slots = [i for i, (start, _) in enumerate(representative.literals) if start in bound]
            bindable = set(slots)
            structural = [i for i in range(len(representative.literals)) if i not in bindable]

            def key(member, structural=structural):
                return tuple(member.literals[i][1] for i in structural)

            wanted = key(representative)
            same = [m for m in pending if key(m) == wanted]
            pending = [m for m in pending if key(m) != wanted]
            starts = [representative.literals[i][0] for i in slots]
            target = (self.schema, self.table)
            plans = [(outcome, shape, shape is not None and target in shape.tables,
                      [(u.clause, u.ref.column) for u in shape.uses
                       if (u.ref.schema, u.ref.table) == target] if shape is not None else [])
                     for outcome, shape in plans]
            for member in same:
                check_interrupts()
                values = {start: member.literals[i][1] for start, i in zip(starts, slots)}
                frequency = member.frequency
                for outcome, shape, reads, uses in plans:
                    if not reads:  # not a query, or reads other tables only
                        self.outcomes[outcome if shape is None else "other_tables"] += frequency
                        continue
                    self.n_used += frequency
                    self.outcomes["used"] += frequency
                    for clause, column in uses:
                        self.counts[clause][column] += frequency
                    self._add_predicates(shape.bind(values), member.text, frequency, member.index)

    def _plan(self, representative, catalog):
        """``([(outcome, ResolvedShape or None) per expression], bindable starts)`` or None."""
        expressions, error = parse_statement(representative.text)
        if error is not None:
            return None
        plans, bound = [], set()
        for expression in expressions:
            shape = None
            if not self._mentions_table(expression):
                outcome = "other_tables"
            else:
                try:
                    shape = resolve_shape(expression, catalog, self.default_schema)
                    outcome = "resolved"
                except NotAQuery:
                    outcome = "not_queries"
                except ResolveError:
                    return None
            if shape is None:  # literals that play no part: any value binds
                nodes = literal_nodes(expression)
                bound |= {s for s, t in representative.literals
                          if nodes.get(s) and all(n.this == t for n in nodes[s])}
            else:
                bound |= {s for s, t in representative.literals if shape.rebindable(s, t)}
            plans.append((outcome, shape))
        return plans, bound

    # -- shared ------------------------------------------------------------------------------
    def _add_resolved(self, resolved, text, frequency, index):
        if (self.schema, self.table) not in resolved.tables:
            self.outcomes["other_tables"] += frequency
            return
        self.n_used += frequency
        self.outcomes["used"] += frequency
        for use in resolved.uses:
            if (use.ref.schema, use.ref.table) == (self.schema, self.table):
                self.counts[use.clause][use.ref.column] += frequency
        self._add_predicates(resolved, text, frequency, index)

    def _add_predicates(self, resolved, text, frequency, index):
        for condition in resolved.conditions:
            ref = condition.column
            if (ref.schema, ref.table) == (self.schema, self.table):
                self.constants[ref.column][(condition.op, condition.values)] += frequency
        predicate = localize_predicate(resolved.where, self.schema, self.table)
        if predicate is not None:
            self.queries.append((index, predicate, frequency, text))

    def _mentions_table(self, expression) -> bool:
        """Cheap pre-filter on the raw parse: skip qualification of statements that cannot
        read the table (most of a shared workload)."""
        return any(
            _folded(t.args.get("this")) == self.table
            and (_folded(t.args.get("db")) or self.default_schema) == self.schema
            for t in expression.find_all(exp.Table)
        )

    def _fail(self, kind, index, statement, message):
        self.outcomes[kind] += statement.frequency
        self.errors.append(
            (index, {"kind": kind, "statement": statement.text[:200], "error": message})
        )

    def workload_queries(self):
        """``([(predicate, frequency)], [text])`` in workload order."""
        ordered = sorted(self.queries, key=lambda q: q[0])
        return [(p, f) for _, p, f, _ in ordered], [t for *_, t in ordered]

    def counts_frame(self) -> pd.DataFrame:
        return pd.DataFrame(
            {clause: [self.counts[clause][c] for c in self.columns] for clause in CLAUSES},
            index=pd.Index(list(self.columns), name="column"),
        ).astype(np.int64)

    def report(self, n_input, n_distinct, too_long=0) -> dict:
        errors = sorted(self.errors, key=lambda e: e[0])[:MAX_REPORTED_ERRORS]
        return {
            "statements": n_input,
            "distinct_statements": n_distinct,
            "used": self.outcomes["used"],
            "parse_errors": self.outcomes["parse_errors"],
            "unresolved": self.outcomes["unresolved"],
            "not_queries": self.outcomes["not_queries"],
            "other_tables": self.outcomes["other_tables"],
            "too_long": too_long,
            "queries_with_predicates": len(self.queries),
            "errors": [e for _, e in errors],
        }


__all__ = [
    "GROUP_BY",
    "ORDER_BY",
    "PriorityLearner",
    "combine_counts",
    "cut_points",
    "is_numeric_type",
    "learn_priorities",
    "localize_predicate",
    "split_table_name",
]
