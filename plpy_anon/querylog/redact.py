"""What of a logged statement the workload store may keep: one query, and its cut-point constants.

A server log holds whatever the server executed: ``SELECT 1; ALTER ROLE ... PASSWORD '...'`` on
one line, ``dblink_connect('... password=...')``, ``set_config('app.key', '...', false)``,
comments. ``anon.workload`` is read by every custodian, so a logged statement is stored only as

* a **single query**: it parses (sqlglot, PostgreSQL dialect) as exactly one ``SELECT`` / set
  operation / ``VALUES``, writing nothing (no data-modifying ``WITH``, no ``SELECT INTO``); a text
  holding several statements is refused whole, never split;
* with the **constants learning uses**: a literal compared with a column in a predicate
  (``=``, ``<>``, ``<``, ``<=``, ``>``, ``>=``, ``BETWEEN``, ``IN (...)``, ``LIKE``, as
  :mod:`plpy_anon.querylog.resolve` reads them) keeps its value; every other literal (function
  arguments, the SELECT list, ``LIMIT``, intervals, ``E'...'`` strings, ...) becomes a ``$n``
  placeholder, which learning reads as "no constant"; ``GROUP BY 1`` / ``ORDER BY 1`` positions
  and type modifiers (``numeric(10, 2)``) are structure and stay;
* **as sqlglot writes it back**: comments dropped, one line, keywords upper-cased.

Statements longer than the size bound are refused before tokenizing (see
:data:`plpy_anon.querylog.parse.MAX_STATEMENT_BYTES`).
"""
from __future__ import annotations

from typing import NamedTuple

from sqlglot import exp

from plpy_anon.querylog.parse import DIALECT, MAX_STATEMENT_BYTES, oversized, parse_statement
from plpy_anon.querylog.resolve import _comparison_sides, _make_condition, _unwrap

#: nodes holding a value written in the statement
_LITERALS = (exp.Literal, exp.ByteString, exp.HexString, exp.BitString, exp.National,
             exp.RawString, exp.UnicodeString)
#: nodes that make a statement more than a read
_WRITES = (exp.Insert, exp.Update, exp.Delete, exp.Merge, exp.Command, exp.Into, exp.Create,
           exp.Drop, exp.Alter, exp.Copy)
_PREDICATES = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE, exp.Between, exp.In, exp.Like)
_PREDICATE_CLAUSES = (exp.Where, exp.Having, exp.Join)

TOO_LONG, NOT_A_QUERY = "too_long", "not_a_query"


class Redacted(NamedTuple):
    """The text to store (None when refused) and, when refused, why (:data:`TOO_LONG` or
    :data:`NOT_A_QUERY`)."""

    text: str | None
    refused: str | None = None


def redact(text: str, max_bytes: int | None = MAX_STATEMENT_BYTES) -> Redacted:
    """The storable form of a logged statement (module docstring), or why there is none."""
    if max_bytes is not None and oversized(text, max_bytes):
        return Redacted(None, TOO_LONG)
    expressions, error = parse_statement(text)
    if error is not None or len(expressions) != 1:
        return Redacted(None, NOT_A_QUERY)
    tree = expressions[0]
    if not isinstance(tree, (exp.Query, exp.Values)) or tree.find(*_WRITES) is not None:
        return Redacted(None, NOT_A_QUERY)
    try:
        _replace_literals(tree)
        stored = tree.sql(dialect=DIALECT, comments=False)
    except (ValueError, RecursionError, AttributeError):
        return Redacted(None, NOT_A_QUERY)
    # what is stored must itself read back as one query, or learning would count it as an error
    again, error = parse_statement(stored)
    if error is not None or len(again) != 1:
        return Redacted(None, NOT_A_QUERY)
    return Redacted(stored)


def _replace_literals(tree) -> None:
    kept = _cut_point_literals(tree)
    numbers = [int(p.name) for p in tree.find_all(exp.Parameter) if p.name.isdigit()]
    next_number = max(numbers, default=0) + 1
    replaced = [n for n in tree.walk(bfs=False)       # numbered in tree order
                if isinstance(n, exp.Interval)
                or isinstance(n, _LITERALS) and id(n) not in kept and not _structural(n)]
    for node in replaced:
        node.replace(exp.Parameter(this=exp.Var(this=str(next_number))))
        next_number += 1


def _structural(node) -> bool:
    """Literals that are part of the statement's structure, not values: a ``$n``'s number, a type
    modifier, a ``GROUP BY`` / ``ORDER BY`` position, and literals inside an interval (replaced
    whole)."""
    parent = node.parent
    if isinstance(parent, exp.Parameter) or node.find_ancestor(exp.DataType, exp.Interval):
        return True
    return isinstance(node, exp.Literal) and not node.is_string and (
        isinstance(parent, exp.Group) or isinstance(parent, exp.Ordered) and parent.this is node)


def _cut_point_literals(tree) -> set:
    """ids of the literal nodes a predicate of the statement compares a column with, where
    learning takes them as constants."""
    kept: set = set()
    for node in tree.find_all(*_PREDICATES):
        if node.find_ancestor(*_PREDICATE_CLAUSES) is None:
            continue
        for column, const_side, flipped in _comparison_sides(node):
            if _make_condition(column, node, const_side, flipped) is None:
                continue
            if isinstance(node, exp.Between):
                sides = [node.args["low"], node.args["high"]]
            elif isinstance(node, exp.In):
                sides = list(node.expressions)
            elif isinstance(node, exp.Like):
                sides = [node.expression]
            else:
                sides = [const_side]
            kept.update(id(literal) for literal in map(_literal_of, sides) if literal is not None)
    return kept


def _literal_of(node):
    """The literal node under casts, parentheses and a minus sign (as constant_value reads it)."""
    node = _unwrap(node)
    if isinstance(node, exp.Neg):
        node = _unwrap(node.this)
    return node if isinstance(node, exp.Literal) else None
