"""Parse a workload of SQL statements with sqlglot (PostgreSQL dialect), once per distinct text.

sqlglot is the whole cost of learning priorities (milliseconds per statement), and real workloads
repeat the same few hundred statements (pg_stat_statements is already normalized to ``$1``
placeholders; server logs repeat application queries). So statements are first *normalized*
(whitespace collapsed outside string literals and quoted identifiers, trailing ``;`` removed) and
counted, and each distinct normalized text is parsed exactly once.

A statement that does not parse is recorded with its error and its frequency, never raised.

Size bound. A statement longer than a bound (:data:`MAX_STATEMENT_BYTES` by default, in UTF-8
bytes) is never normalized, tokenized or parsed, only counted: sqlglot's parse and
qualification are single calls that nothing interrupts, and their time grows faster than the
text on some statements (learning a UNION chain: 0.85 s at 31 kB, 3.65 s at 76 kB).

Shapes. Statements that differ only in their constants (``age > 30`` / ``age > 41``) defeat that
de-duplication, so :func:`statement_shape` computes, from sqlglot's *tokenizer* (no parse), a key
in which every string and number literal is a placeholder (``?s`` / ``?n``), unquoted identifiers
and keywords are lower-cased (SQL folds them), quoted identifiers and every other token (``$$..$$``,
``E'..'``, ``B'..'``, ``X'..'`` strings, operators, the ``$`` of ``$n``) are kept exactly, and
comments are dropped. The number of items of an ``IN (...)`` list is part of the shape (``IN (?n, ?n)`` and
``IN (?n, ?n, ?n)`` are two shapes): exact, and applications issue a handful of list lengths.
The string after ``INTERVAL`` stays in the key (sqlglot splits ``'1 day'`` into value and unit).
:func:`group_by_shape` groups the distinct texts by shape; the priority learner parses and resolves
one representative per shape and binds each statement's literals (read from its tokens) onto it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlglot import exp
from sqlglot.dialects.postgres import Postgres
from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType

from plpy_anon.core.interrupts import check as check_interrupts

DIALECT = "postgres"

#: statements longer than this (UTF-8 bytes) are counted, never parsed: at this size the slowest
#: statement measured (a UNION chain) takes 0.85 s to learn, an IN list of 5,000 numbers 0.12 s
#: (tests/bench/bench_interrupts.py)
MAX_STATEMENT_BYTES = 32768


def oversized(text: str, max_bytes: int) -> bool:
    """Whether ``text`` holds more than ``max_bytes`` bytes in UTF-8 (encoded only when its
    length in characters leaves the answer open)."""
    return len(text) > max_bytes or (
        4 * len(text) > max_bytes
        and len(text.encode("utf-8", "surrogatepass")) > max_bytes)

# quoted strings / identifiers are kept verbatim; runs of whitespace elsewhere become one space,
# and a -- comment goes (its newline gone, it would comment out the rest of the statement)
_TOKENS = re.compile(r"('(?:[^']|'')*'|\"(?:[^\"]|\"\")*\")|(?:--[^\n]*|\s)+")
# whitespace that collapsing would change (a run, or a tab, newline...), or a -- comment
_UNCOLLAPSED = re.compile(r"\s\s|[^\S ]|--")


def normalize_statement(text: str) -> str:
    """The text a statement is deduplicated on: collapsed whitespace, no trailing ``;``."""
    if _UNCOLLAPSED.search(text):
        text = _TOKENS.sub(lambda m: m.group(1) or " ", text)
    end = len(text)
    while end and (text[end - 1] == ";" or text[end - 1].isspace()):
        end -= 1
    return text[:end].lstrip()


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


def count_statements(statements: Iterable, max_bytes: int | None = None,
                     too_long: Counter | None = None) -> Counter:
    """Frequencies per normalized text; items are texts or ``(text, frequency)`` pairs. A text
    over ``max_bytes`` is left out, its frequency added to ``too_long['statements']``."""
    counts: Counter = Counter()
    for text, frequency in _as_pairs(statements):
        check_interrupts()
        if frequency <= 0 or text is None:
            continue
        if max_bytes is not None and oversized(text, max_bytes):
            if too_long is not None:
                too_long["statements"] += frequency
            continue
        normalized = normalize_statement(text)
        if normalized:
            counts[normalized] += frequency
    return counts


def parse_statement(text: str) -> tuple[tuple, str | None]:
    """``(expressions, None)`` or ``((), error message)``; one text may hold several statements."""
    try:
        parsed = _PARSER.parse(_TOKENIZER.tokenize(text), text)
    except SqlglotError as error:
        if not text.endswith("\n"):
            # sqlglot's tokenizer fails on a text ending in an empty string after a $n parameter
            # ("... a = $1 AND b = ''"), and reads it with a line end after it
            return parse_statement(text + "\n")
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
    return parse_counts(count_statements(statements))


def parse_counts(counts: Counter) -> ParsedWorkload:
    """Parse each distinct text of ``counts`` (from :func:`count_statements`) once."""
    workload = ParsedWorkload(n_input=sum(counts.values()))
    for text, frequency in counts.items():
        check_interrupts()
        expressions, error = parse_statement(text)
        workload.statements.append(ParsedStatement(text, frequency, expressions, error))
    return workload


# -- shapes -------------------------------------------------------------------------------------
_PLACEHOLDERS = {TokenType.STRING: "?s", TokenType.NUMBER: "?n"}
#: PostgreSQL folds unquoted names to lower case in ASCII only (A-Z)
ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_KEYWORDS = frozenset(Postgres.Tokenizer.KEYWORDS)
_tokenizer = Postgres().tokenizer
# one tokenizer and parser for every statement (each resets itself per call), not a new pair
# and a dialect lookup per statement (a tenth of a workload's parsing time)
_TOKENIZER = _tokenizer()
_PARSER = Postgres().parser()
_UNSHAPED = object()  # key part of a text that does not tokenize: never equal to a shape


@dataclass(frozen=True)
class Shaped:
    """One distinct normalized text with its frequency, its position in the workload's order and
    its literal slots ``((start offset, token text), ...)`` in order of appearance."""

    index: int
    text: str
    frequency: int
    literals: tuple


def statement_shape(text: str):
    """``(shape key, literals)`` of a statement from its tokens, or None when it does not tokenize.

    ``literals`` are the ``(start, text)`` of the string and number tokens replaced by
    placeholders in the key (``text`` is the value as sqlglot's parser reads it: quotes removed,
    ``''`` unescaped; a leading ``-`` stays a token of the key)."""
    return _shape_of_text(text)


def _shape_of_text(text: str):
    """The shape of a text (:func:`statement_shape`), None when it does not tokenize. The tokens
    are not kept: a workload of long statements holds millions, and every full garbage
    collection while they live walks them all."""
    try:
        tokens = _TOKENIZER.tokenize(text)
    except (SqlglotError, ValueError, IndexError):
        return None
    return _shape_of_tokens(tokens)


def _shape_of_tokens(tokens):
    key, literals = [], []
    previous = None
    for token in tokens:
        kind = token.token_type
        placeholder = _PLACEHOLDERS.get(kind)
        if placeholder is not None and previous is not TokenType.INTERVAL:
            key.append(placeholder)
            literals.append((token.start, token.text))
        elif kind is TokenType.VAR or (
            kind is not TokenType.IDENTIFIER and token.text.upper() in _KEYWORDS
        ):
            key.append(token.text.translate(ASCII_LOWER))
        else:  # quoted identifiers, special strings, operators: exactly as written
            key.append((kind.name, token.text))
        previous = kind
    return tuple(key), tuple(literals)


# A cache in front of the tokenizer: texts equal once their plain string and number literals are
# masked share one tokenization. The masked texts' literals are read by this regex, and a masked
# text is trusted only if, on the first text seen with it, the regex finds exactly the literal
# tokens sqlglot's tokenizer finds (same offsets, same values); texts the regex could misread
# (backslashes, comments, prefixed or dollar-quoted strings) always go through the tokenizer.
_MASKABLE = re.compile(
    r'"(?:[^"]|"")*"'  # quoted identifier: kept (may hold quotes and digits)
    r"|'((?:[^']|'')*)'"  # plain string
    r"|(?<![\w.$])([0-9]+(?:\.[0-9]+)?)(?![\w.])"  # plain number, not in a name, not a $n
)
_UNMASKABLE = re.compile(r"[\\\x00]|--|/\*|\$(?!\d)|[A-Za-z_&]'")


def _masked(text: str):
    """``(masked text, literals)`` by the regex, or None when the text is not maskable."""
    if _UNMASKABLE.search(text):
        return None
    parts, literals, end = [], [], 0
    for match in _MASKABLE.finditer(text):
        string, number = match.group(1), match.group(2)
        if string is None and number is None:
            continue
        parts.append(text[end:match.start()])
        parts.append("\x00s" if string is not None else "\x00n")
        literals.append((match.start(), string.replace("''", "'") if number is None else number))
        end = match.end()
    parts.append(text[end:])
    return "".join(parts), tuple(literals)


def group_by_shape(counts: Counter) -> list:
    """The distinct texts of ``counts`` (from :func:`count_statements`) grouped by shape, each
    group a list of :class:`Shaped` in workload order; texts that do not tokenize are alone."""
    groups: dict = {}
    shapes_of_masks: dict = {}  # masked text -> shape key, or None when the regex misreads it
    for index, (text, frequency) in enumerate(counts.items()):
        check_interrupts()
        masked = _masked(text)
        shape = None
        if masked is not None:
            key = shapes_of_masks.get(masked[0], _UNSHAPED)
            if key is _UNSHAPED:  # first text with this mask: tokenize it and check the regex
                shape = _shape_of_text(text)
                key = shape[0] if shape is not None and shape[1] == masked[1] else None
                shapes_of_masks[masked[0]] = key
            elif key is not None:
                shape = (key, masked[1])
        if shape is None:
            shape = _shape_of_text(text)
        if shape is None:
            groups[(_UNSHAPED, text)] = [Shaped(index, text, frequency, ())]
            continue
        key, literals = shape
        group = groups.get(key)
        if group is None:
            groups[key] = [Shaped(index, text, frequency, literals)]
        else:
            group.append(Shaped(index, text, frequency, literals))
    return list(groups.values())
