"""Client side of the workload store: load a PostgreSQL server log into ``anon.workload``.

``load_queries(conn, path, table=...)`` is what ``plpy-anon load-queries --table patients
postgresql.csv`` runs. The log is read here, on the client (the server may not be allowed to read
its own log directory, and the file may come from another machine), with
:mod:`plpy_anon.querylog.logs`; repeated statements are counted locally, so a 100,000-line log
becomes a few hundred ``(query, frequency)`` rows sent in ONE call of ``anon.add_queries``. With
``table`` the priorities of that table are learned in the same transaction: if learning fails
(nothing in the log reads the table), nothing is stored.
"""
from __future__ import annotations

import datetime as dt
import os
from collections import Counter
from dataclasses import dataclass, field

from psycopg import sql

from plpy_anon.core.errors import InsufficientData, UndefinedObject
from plpy_anon.querylog.logs import read_server_log
from plpy_anon.querylog.parse import normalize_statement

UTC_NAMES = ("UTC", "GMT", "+00", "+0000", "+00:00")


@dataclass
class LoadResult:
    statements: int  # executed statements found in the log
    distinct: int  # distinct normalized statements sent to the server
    skipped_entries: int  # log entries that were not executed statements
    priorities: list = field(default_factory=list)  # learn_priorities rows, when table was given


def parse_log_timestamp(text: str | None):
    """A ``log_line_prefix`` timestamp (``2026-11-21 10:00:00.123 UTC``) as a datetime; a zone
    abbreviation other than UTC/GMT is dropped (the server reads the value in its TimeZone);
    None when the text is not a timestamp."""
    parts = (text or "").split()
    if not parts:
        return None
    has_time = len(parts) > 1 and parts[1][:1].isdigit()
    stamp = " ".join(parts[:2]) if has_time else parts[0]
    zone = parts[2 if has_time else 1] if len(parts) > (2 if has_time else 1) else ""
    try:
        value = dt.datetime.fromisoformat(stamp)
    except ValueError:
        return None
    if zone in UTC_NAMES and value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value


def aggregate_statements(statements):
    """``[(normalized text, frequency, last timestamp)]`` of logged statements."""
    counts: Counter = Counter()
    last_seen: dict = {}
    for statement in statements:
        text = normalize_statement(statement.text)
        if not text:
            continue
        counts[text] += 1
        when = parse_log_timestamp(statement.timestamp)
        if when is not None and (text not in last_seen or _later(when, last_seen[text])):
            last_seen[text] = when
    return [(text, n, last_seen.get(text)) for text, n in counts.items()]


def _later(a, b) -> bool:
    try:
        return a > b
    except TypeError:  # one aware, one naive: keep the first
        return False


def load_queries(conn, path, *, table=None, log_format="auto", projection_share=0.5,
                 origin=None, schema="anon") -> LoadResult:
    """Load the statements of a server log into ``anon.workload`` (and learn ``table``'s
    priorities when given). ``conn``: a psycopg connection; ``schema``: the extension's."""
    if not os.path.exists(path):
        raise UndefinedObject(f"log file {path} does not exist",
                              hint="Pass the path of a PostgreSQL server log (csvlog or stderr).")
    log = read_server_log(path, log_format)
    if not log.statements:
        raise InsufficientData(
            f"no executed statement found in {path} ({log.entries} log entries)",
            hint="Log statements with log_statement = 'all' or log_min_duration_statement = 0, "
                 "and pass the csvlog or stderr file.")
    rows = aggregate_statements(log.statements)
    result = LoadResult(statements=len(log.statements), distinct=len(rows),
                        skipped_entries=log.skipped)
    with conn.transaction():
        conn.execute(
            sql.SQL("SELECT {}.add_queries(%s::text[], %s::int8[], %s::timestamptz[], %s)").format(
                sql.Identifier(schema)),
            ([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows],
             origin or f"log:{os.path.basename(path)}"))
        if table is not None:
            cursor = conn.execute(
                sql.SQL("SELECT * FROM {}.learn_priorities(%s, projection_share => %s)").format(
                    sql.Identifier(schema)),
                (table, projection_share))
            names = [d.name for d in cursor.description]
            result.priorities = [dict(zip(names, row)) for row in cursor.fetchall()]
    return result
