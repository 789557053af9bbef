"""Statements from PostgreSQL server logs: ``csvlog`` and the default ``stderr`` format.

What is taken: queries only, as :func:`plpy_anon.querylog.redact.redact` stores them (one
query per entry, a text holding several statements refused whole; only the constants compared with
columns kept, other literals ``$n``; comments dropped): a log of ``log_statement = 'all'`` also
holds ``ALTER ROLE ... PASSWORD`` and ``INSERT`` statements with row values, connection strings
and keys passed to functions, which must not reach the workload store. Of those, ``LOG`` entries whose message is ``statement: <sql>`` (``log_statement``),
``duration: <ms> ms  statement: <sql>`` (``log_min_duration_statement``), and their
extended-protocol forms ``execute <name>: <sql>`` / ``duration: <ms> ms  execute <name>: <sql>``.
``parse``/``bind`` entries are skipped (the same statement is logged again at ``execute``), and so
are ``STATEMENT:`` lines following an ``ERROR`` (the statement failed, the analyst saw no answer).
Everything else is counted as skipped.

stderr format: an entry starts with ``<log_line_prefix><SEVERITY>:  <message>``; the server
writes the continuation lines of a multi-line message with a leading tab, which is removed. The
prefix is free-form (``log_line_prefix``); a leading timestamp in it is kept when present.
Lines end at ``\n`` only: a carriage return or U+2028 inside a logged string literal is part of
the statement, not the start of another entry.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from plpy_anon.core.errors import InvalidParameter
from plpy_anon.core.interrupts import check as check_interrupts
from plpy_anon.querylog.parse import MAX_STATEMENT_BYTES
from plpy_anon.querylog.redact import NOT_A_QUERY, TOO_LONG, redact_all

CSV_LOG_TIME, CSV_SEVERITY, CSV_MESSAGE = 0, 11, 13
# a logged statement may be longer than csv's default field limit (128 KiB: a long IN list)
csv.field_size_limit(1 << 30)

_STATEMENT = re.compile(
    r"\A(?:duration: (?P<ms>[0-9.]+) ms\s+)?(?:statement|execute [^:]*): (?P<sql>.*)\Z", re.DOTALL
)
_SEVERITIES = (
    r"LOG|ERROR|WARNING|NOTICE|INFO|DEBUG[1-5]?|FATAL|PANIC|DETAIL|HINT|CONTEXT|STATEMENT|QUERY"
    r"|LOCATION"
)
_STDERR_ENTRY = re.compile(rf"\A(?P<prefix>.*?)\b(?P<severity>{_SEVERITIES}):  (?P<message>.*)\Z")
_TIMESTAMP = re.compile(
    r"\A\s*(?P<ts>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d+)?(?: ?(?:[A-Z]{2,5}|[+-]\d\d(?::?\d\d)?))?)"
)


@dataclass(frozen=True)
class LoggedStatement:
    text: str
    timestamp: str | None = None
    duration_ms: float | None = None


@dataclass
class LogReadResult:
    statements: list = field(default_factory=list)
    entries: int = 0  # log entries seen
    skipped: int = 0  # entries not stored (the next two included)
    too_long: int = 0  # statements over the size bound, never parsed
    not_single_query: int = 0  # statements that are not exactly one query (refused whole)
    max_statement_bytes: int | None = MAX_STATEMENT_BYTES
    _logged: list = field(default_factory=list, repr=False)  # statements before redaction

    def as_pairs(self):
        """``(text, 1)`` per statement: the input the priority learner takes."""
        return [(s.text, 1) for s in self.statements]


def statement_of_message(message: str):
    """``(sql, duration_ms)`` when ``message`` logs an executed statement, else None."""
    match = _STATEMENT.match(message.strip("\n"))
    if match is None or not match.group("sql").strip():
        return None
    ms = match.group("ms")
    return match.group("sql").strip(), float(ms) if ms else None


def read_csvlog(lines: Iterable[str], result: LogReadResult | None = None) -> LogReadResult:
    """Statements of a ``csvlog`` file (PostgreSQL 13-17 column layouts)."""
    result = LogReadResult() if result is None else result
    for record in csv.reader(lines):
        check_interrupts()
        if not record:
            continue
        result.entries += 1
        if len(record) <= CSV_MESSAGE or record[CSV_SEVERITY] != "LOG":
            result.skipped += 1
            continue
        _append(result, record[CSV_MESSAGE], record[CSV_LOG_TIME] or None)
    return _redacted(result)


def read_stderr_log(lines: Iterable[str], result: LogReadResult | None = None) -> LogReadResult:
    """Statements of a log in the default ``stderr`` format, multi-line statements included
    (``lines`` split at ``\n`` only)."""
    result = LogReadResult() if result is None else result
    for severity, timestamp, message in _stderr_entries(lines):
        check_interrupts()
        result.entries += 1
        if severity != "LOG":
            result.skipped += 1
            continue
        _append(result, message, timestamp)
    return _redacted(result)


_QUERY_START = re.compile(r"\A(?:\s|--[^\n]*\n|/\*.*?\*/)*(SELECT|WITH|TABLE|VALUES)\b",
                          re.IGNORECASE | re.DOTALL)
_MODIFIES = re.compile(r"\b(INSERT|UPDATE|DELETE|MERGE)\b", re.IGNORECASE)


def is_query(sql: str) -> bool:
    """A read: SELECT / WITH / TABLE / VALUES first, and a WITH that modifies nothing (its
    statements may carry the values they write)."""
    start = _QUERY_START.match(sql)
    if start is None:
        return False
    return start.group(1).upper() != "WITH" or _MODIFIES.search(sql) is None


def _append(result: LogReadResult, message: str, timestamp):
    found = statement_of_message(message)
    if found is None or not is_query(found[0]):
        result.skipped += 1
        return
    sql, duration = found
    result._logged.append(LoggedStatement(sql, timestamp, duration))


def _redacted(result: LogReadResult) -> LogReadResult:
    """The statements read, as they may be stored (one parse per shape of their texts)."""
    stored = redact_all((s.text for s in result._logged), result.max_statement_bytes)
    for logged in result._logged:
        redacted = stored[logged.text]
        if redacted.text is None:
            result.skipped += 1
            result.too_long += redacted.refused == TOO_LONG
            result.not_single_query += redacted.refused == NOT_A_QUERY
        else:
            result.statements.append(LoggedStatement(redacted.text, logged.timestamp,
                                                     logged.duration_ms))
    result._logged = []
    return result


def _stderr_entries(lines: Iterable[str]) -> Iterator[tuple[str, str | None, str]]:
    severity = timestamp = None
    message_lines: list[str] = []
    for raw in lines:
        line = raw.removesuffix("\n").removesuffix("\r")
        header = None if line.startswith("\t") else _STDERR_ENTRY.match(line)
        if header is None:
            if severity is not None:  # continuation of the current entry
                message_lines.append(line.removeprefix("\t"))
            continue
        if severity is not None:
            yield severity, timestamp, "\n".join(message_lines)
        severity = header.group("severity")
        stamp = _TIMESTAMP.match(header.group("prefix"))
        timestamp = stamp.group("ts") if stamp else None
        message_lines = [header.group("message")]
    if severity is not None:
        yield severity, timestamp, "\n".join(message_lines)


def detect_format(first_line: str) -> str:
    """``'csvlog'`` when the first line is a CSV record with a severity column, else ``'stderr'``."""
    try:
        record = next(csv.reader([first_line]))
    except (csv.Error, StopIteration):
        return "stderr"
    return "csvlog" if len(record) > CSV_SEVERITY and record[CSV_SEVERITY].isupper() else "stderr"


def read_server_log(source, log_format: str = "auto",
                    max_statement_bytes: int | None = MAX_STATEMENT_BYTES) -> LogReadResult:
    """Read a server log from a path or a text stream; ``log_format``: auto, csvlog, stderr;
    statements over ``max_statement_bytes`` (UTF-8) are counted, never parsed."""
    if log_format not in ("auto", "csvlog", "stderr"):
        raise InvalidParameter(
            f"unknown log format {log_format!r}", hint="use 'auto', 'csvlog' or 'stderr'"
        )
    if isinstance(source, (str, bytes)) or hasattr(source, "__fspath__"):
        with open(source, encoding="utf-8", errors="replace", newline="") as stream:
            return read_server_log(stream, log_format, max_statement_bytes)
    text = source.read()
    if log_format == "auto":
        log_format = detect_format(text.split("\n", 1)[0])
    result = LogReadResult(max_statement_bytes=max_statement_bytes)
    if log_format == "csvlog":
        return read_csvlog(io.StringIO(text, newline=""), result)
    # str.splitlines would also end a line at \r, U+2028, \x1c...: inside a logged literal
    return read_stderr_log(text.split("\n"), result)
