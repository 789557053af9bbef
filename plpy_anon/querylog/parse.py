"""Parse a workload of SQL statements with sqlglot (PostgreSQL dialect), once per distinct text.

sqlglot is the whole cost of learning priorities (milliseconds per statement), and real workloads
repeat the same few hundred statements (pg_stat_statements is already normalized to ``$1``
placeholders; server logs repeat application queries). So statements are first *normalized*
(whitespace collapsed outside string literals and quoted identifiers, trailing ``;`` removed) and
counted, and each distinct normalized text is parsed exactly once.

A statement that does not parse is recorded with its error and its frequency, never raised.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

DIALECT = "postgres"

# quoted strings / identifiers are kept verbatim; runs of whitespace elsewhere become one space
_TOKENS = re.compile(r"('(?:[^']|'')*'|\"(?:[^\"]|\"\")*\")|\s+")
_TRAILING_SEMICOLONS = re.compile(r"[\s;]+$")


def normalize_statement(text: str) -> str:
    """The text a statement is deduplicated on: collapsed whitespace, no trailing ``;``."""
    collapsed = _TOKENS.sub(lambda m: m.group(1) or " ", text)
    return _TRAILING_SEMICOLONS.sub("", collapsed).strip()


@dataclass
class ParsedStatement:
    """One distinct normalized statement, its total frequency and its parse (or error)."""

    text: str
    frequency: int
    expressions: tuple = ()
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class ParsedWorkload:
    """The distinct statements of a workload with counts of what happened to them."""

    statements: list = field(default_factory=list)
    n_input: int = 0  # statements received, counting repetitions and frequencies

    @property
    def n_distinct(self) -> int:
        return len(self.statements)

    @property
    def failures(self) -> list:
        return [s for s in self.statements if not s.ok]

    @property
    def n_failed(self) -> int:
        """Statements (with their frequencies) that did not parse."""
        return sum(s.frequency for s in self.failures)


def _as_pairs(statements: Iterable) -> Iterable[tuple[str, int]]:
    for item in statements:
        if isinstance(item, str):
            yield item, 1
        else:
            text, frequency = item
            yield text, int(frequency)


def count_statements(statements: Iterable) -> Counter:
    """Frequencies per normalized text; items are texts or ``(text, frequency)`` pairs."""
    counts: Counter = Counter()
    for text, frequency in _as_pairs(statements):
        if frequency <= 0 or text is None:
            continue
        normalized = normalize_statement(text)
        if normalized:
            counts[normalized] += frequency
    return counts


def parse_statement(text: str) -> tuple[tuple, str | None]:
    """``(expressions, None)`` or ``((), error message)``; one text may hold several statements."""
    try:
        parsed = sqlglot.parse(text, dialect=DIALECT)
    except SqlglotError as error:
        return (), _first_line(str(error))
    except (ValueError, RecursionError) as error:  # sqlglot raises these on a few odd inputs
        return (), _first_line(f"{type(error).__name__}: {error}")
    expressions = tuple(e for e in parsed if e is not None)
    if not expressions:
        return (), "empty statement"
    if any(isinstance(e, _BARE_EXPRESSIONS) for e in expressions):
        # sqlglot accepts a lone expression ("SELEC oops" is a column with an alias): that is a
        # typo, not a statement
        return (), "not a SQL statement (a bare expression; misspelt keyword?)"
    return expressions, None


_BARE_EXPRESSIONS = (exp.Condition, exp.Alias, exp.Identifier, exp.Star)


def _first_line(message: str) -> str:
    return message.strip().splitlines()[0] if message.strip() else "parse error"


def parse_workload(statements: Iterable) -> ParsedWorkload:
    """Normalize, count and parse each distinct statement once."""
    counts = count_statements(statements)
    workload = ParsedWorkload(n_input=sum(counts.values()))
    for text, frequency in counts.items():
        expressions, error = parse_statement(text)
        workload.statements.append(ParsedStatement(text, frequency, expressions, error))
    return workload
