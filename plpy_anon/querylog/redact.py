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

Many statements (:func:`redact_all`) are redacted once per *shape* (tokens equal but for their
string and number values, :func:`plpy_anon.querylog.parse.group_by_shape`): the first statement
of a shape gives a template, its kept constants as markers, and each other statement of the shape
fills the markers with its own values of those tokens. Statements whose other literals differ
where they are structure (``GROUP BY 1`` / ``2``, type modifiers), whose ``LIKE`` pattern is no
constant learning uses, or whose shape's first statement is refused, are redacted on their own.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import NamedTuple

from sqlglot import exp

from plpy_anon.core.interrupts import check as check_interrupts
from plpy_anon.querylog.parse import (
    DIALECT,
    MAX_STATEMENT_BYTES,
    _masked,
    group_by_shape,
    oversized,
    parse_statement,
)
from plpy_anon.querylog.resolve import (
    _by_start,
    _comparison_sides,
    _like_condition,
    _make_condition,
    _unwrap,
)

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
    tree = _one_query(text)
    if tree is None:
        return Redacted(None, NOT_A_QUERY)
    return _written(tree, _cut_point_literals(tree))


def redact_all(texts: Iterable[str], max_bytes: int | None = MAX_STATEMENT_BYTES) -> dict:
    """``{text: Redacted}`` of distinct texts, one parse per shape (module docstring)."""
    out: dict = {}
    bounded: Counter = Counter()
    for text in texts:
        if text in out or text in bounded:
            continue
        if max_bytes is not None and oversized(text, max_bytes):
            out[text] = Redacted(None, TOO_LONG)
        else:
            bounded[text] = 1
    for group in group_by_shape(bounded):
        # a shape folds the case of unquoted names, which the stored text keeps as written: one
        # template per spelling (the text with its literals masked)
        spellings: dict = {}
        for member in group:
            masked = _masked(member.text)
            spellings.setdefault(member.text if masked is None else masked[0], []).append(member)
        for members in spellings.values():
            check_interrupts()
            template = _template(members[0])
            for member in members:
                check_interrupts()
                filled = None if template is None else template.fill(member.literals)
                out[member.text] = filled if filled is not None else redact(member.text, None)
    return out


class _Template(NamedTuple):
    """The stored text of a shape's first statement with its kept constants as markers."""

    text: str
    kept: dict          # marker -> (literal slot, is a LIKE pattern)
    structural: dict    # literal slot -> value every statement filled must have
    patterns: tuple = ()    # slots of LIKE patterns replaced: learning did not use the first's

    def fill(self, literals) -> Redacted | None:
        """This statement's stored form (its values at the markers), or None when the template
        does not apply to it."""
        if any(literals[slot][1] != value for slot, value in self.structural.items()):
            return None
        if any(_like_condition(None, literals[slot][1]) is not None for slot in self.patterns):
            return None              # a pattern learning uses is kept: this statement on its own
        text = self.text
        for marker, (slot, like) in self.kept.items():
            value = literals[slot][1]
            if "\x00" in value or like and _like_condition(None, value) is None:
                return None          # a marker's character, or a pattern learning does not use
            written = value if _MARKER_NUMBER in marker else "'" + value.replace("'", "''") + "'"
            text = text.replace(marker, written, 1)
        return Redacted(text)


_MARKER_NUMBER, _MARKER_STRING = "n\x00", "s\x00"


def _template(first) -> _Template | None:
    """The template of a shape from its first statement (a ``Shaped``), or None (each statement
    of the shape then on its own)."""
    tree = _one_query(first.text)
    if tree is None or not first.literals:
        return None
    kept_nodes = _cut_point_literals(tree)
    slot_of = {start: slot for slot, (start, _) in enumerate(first.literals)}
    nodes = _by_start(tree.find_all(exp.Literal))
    if any(len(found) != 1 or start not in slot_of for start, found in nodes.items()):
        return None                    # a literal the tokens do not place: no template
    kept, structural, patterns = {}, {}, []
    for start, (node,) in nodes.items():
        slot = slot_of[start]
        if id(node) in kept_nodes:
            marker = f"\x00{len(kept)}{_MARKER_STRING if node.is_string else _MARKER_NUMBER}"
            like = isinstance(node.parent, exp.Like)
            kept[marker] = (slot, like)
            node.replace(exp.Var(this=marker))
        elif _structural(node) and not node.find_ancestor(exp.Interval):
            structural[slot] = first.literals[slot][1]
        elif isinstance(node.parent, exp.Like):
            patterns.append(slot)
    placed = {slot_of[start] for start in nodes}
    structural.update({slot: value for slot, (_, value) in enumerate(first.literals)
                       if slot not in placed})      # read as keywords: date_trunc('month', ...)
    written = _written(tree, set())
    if written.text is None or any(written.text.count(m) != 1 for m in kept):
        return None
    return _Template(written.text, kept, structural, tuple(patterns))


def _one_query(text: str):
    """The statement's tree if it is exactly one query that writes nothing, else None."""
    expressions, error = parse_statement(text)
    if error is not None or len(expressions) != 1:
        return None
    tree = expressions[0]
    if not isinstance(tree, (exp.Query, exp.Values)) or tree.find(*_WRITES) is not None:
        return None
    return tree


def _written(tree, kept) -> Redacted:
    """``tree`` written back with its literals but ``kept`` replaced, checked to read back as
    one statement (else learning would count it an error)."""
    try:
        _replace_literals(tree, kept)
        stored = tree.sql(dialect=DIALECT, comments=False)
    except (ValueError, RecursionError, AttributeError):
        return Redacted(None, NOT_A_QUERY)
    again, error = parse_statement(stored.replace("\x00", "_"))
    if error is not None or len(again) != 1:
        return Redacted(None, NOT_A_QUERY)
    return Redacted(stored)


def _replace_literals(tree, kept) -> None:
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
