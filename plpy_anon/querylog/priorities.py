"""Attribute priorities and predicate cut points learned from a SQL workload (paper 000, 4.2).

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

Cut points carry the summed frequency of the predicates that produced them.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Iterable

import numpy as np
import pandas as pd
from sqlglot import exp

from plpy_anon.core.errors import InsufficientData, InvalidParameter, UndefinedObject
from plpy_anon.core.workload import AllOf, AnyOf, Condition
from plpy_anon.querylog.parse import parse_workload
from plpy_anon.querylog.resolve import (
    CLAUSES,
    GROUP_BY,
    ORDER_BY,
    PROJECTION,
    SELECTION,
    NotAQuery,
    ResolveError,
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

    Attributes set by :meth:`fit`
    -----------------------------
    counts_ : DataFrame, one row per column of the table, columns projection / selection /
        group_by / order_by (frequency-weighted statement counts).
    weights_ : Series, the normalized weight per column (sums to 1).
    constants_ : dict column -> Counter {(op, values): frequency} of the predicates seen.
    cut_points_ : dict numeric column -> DataFrame (threshold, left_inclusive, frequency).
    queries_ : list of (predicate tree over column names, frequency), one per distinct statement
        with a bounded WHERE on the table -- the workload of :func:`workload_precision`.
    query_texts_ : the normalized statement text of each entry of ``queries_``.
    report_ : dict of what happened to the statements (parsed, failed, other tables, ...).
    elapsed_seconds_ : time fit took.
    """

    def __init__(self, table, *, projection_share=0.5, default_schema="public"):
        self.table = table
        self.projection_share = projection_share
        self.default_schema = default_schema

    # ------------------------------------------------------------------------------------
    def fit(self, statements: Iterable, catalog: dict) -> PriorityLearner:
        """``statements``: texts or ``(text, frequency)`` pairs; ``catalog``:
        ``{schema: {table: {column: type}}}`` (every table the statements may read)."""
        started = time.perf_counter()
        alpha = self._check_projection_share()
        schema, table = split_table_name(self.table, self.default_schema)
        columns = self._table_columns(catalog, schema, table)
        workload = parse_workload(statements)
        if workload.n_input == 0:
            raise InsufficientData(
                "the workload is empty: there is no statement to learn priorities from",
                hint="store queries first (pg_stat_statements, anon.workload, or the client's "
                "load-queries), or pass explicit priorities",
            )
        accumulator = _Accumulator(schema, table, columns, self.default_schema)
        for statement in workload.statements:
            accumulator.add(statement, catalog)
        report = accumulator.report(workload)
        if accumulator.n_used == 0:
            raise InsufficientData(
                f"none of the {workload.n_input} statements of the workload reads "
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
            c: cut_points(self.constants_[c]) for c in numeric if c in self.constants_
        }
        self.queries_ = accumulator.queries
        self.query_texts_ = accumulator.query_texts
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


def cut_points(constants: Counter) -> pd.DataFrame:
    """Cut points of one numeric column from its predicate constants (module docstring)."""
    cuts: Counter = Counter()
    for (op, values), frequency in constants.items():
        if not all(_is_number(v) for v in values):
            continue
        for threshold, left_inclusive in _cuts_of(op, values):
            cuts[(float(threshold), left_inclusive)] += frequency
    frame = pd.DataFrame(
        [(t, inc, f) for (t, inc), f in cuts.items()],
        columns=["threshold", "left_inclusive", "frequency"],
    )
    return frame.sort_values(["threshold", "left_inclusive"], ignore_index=True)


def _is_number(value) -> bool:
    return isinstance(value, (int, float, np.number)) and not isinstance(value, bool)


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


class _Accumulator:
    """Sums the resolved statements of a workload for one target table."""

    def __init__(self, schema, table, columns, default_schema):
        self.schema, self.table, self.columns = schema, table, columns
        self.default_schema = default_schema
        self.counts = {clause: Counter() for clause in CLAUSES}
        self.constants = defaultdict(Counter)
        self.queries = []
        self.query_texts = []
        self.outcomes = Counter()
        self.errors = []
        self.n_used = 0

    def add(self, statement, catalog):
        if not statement.ok:
            self._fail("parse_errors", statement, statement.error)
            return
        for expression in statement.expressions:
            self._add_expression(statement, expression, catalog)

    def _add_expression(self, statement, expression, catalog):
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
            self._fail("unresolved", statement, str(error))
            return
        if (self.schema, self.table) not in resolved.tables:
            self.outcomes["other_tables"] += frequency
            return
        self.n_used += frequency
        self.outcomes["used"] += frequency
        for use in resolved.uses:
            if (use.ref.schema, use.ref.table) == (self.schema, self.table):
                self.counts[use.clause][use.ref.column] += frequency
        for condition in resolved.conditions:
            ref = condition.column
            if (ref.schema, ref.table) == (self.schema, self.table):
                self.constants[ref.column][(condition.op, condition.values)] += frequency
        predicate = localize_predicate(resolved.where, self.schema, self.table)
        if predicate is not None:
            self.queries.append((predicate, frequency))
            self.query_texts.append(statement.text)

    def _mentions_table(self, expression) -> bool:
        """Cheap pre-filter on the raw parse: skip qualification of statements that cannot
        read the table (most of a shared workload)."""
        return any(
            t.name == self.table and (t.db or self.default_schema) == self.schema
            for t in expression.find_all(exp.Table)
        )

    def _fail(self, kind, statement, message):
        self.outcomes[kind] += statement.frequency
        if len(self.errors) < MAX_REPORTED_ERRORS:
            self.errors.append({"kind": kind, "statement": statement.text[:200], "error": message})

    def counts_frame(self) -> pd.DataFrame:
        return pd.DataFrame(
            {clause: [self.counts[clause][c] for c in self.columns] for clause in CLAUSES},
            index=pd.Index(list(self.columns), name="column"),
        ).astype(np.int64)

    def report(self, workload) -> dict:
        return {
            "statements": workload.n_input,
            "distinct_statements": workload.n_distinct,
            "used": self.outcomes["used"],
            "parse_errors": self.outcomes["parse_errors"],
            "unresolved": self.outcomes["unresolved"],
            "not_queries": self.outcomes["not_queries"],
            "other_tables": self.outcomes["other_tables"],
            "queries_with_predicates": len(self.queries),
            "errors": list(self.errors),
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
