"""PostgreSQL server logs (csvlog and stderr) -> statements."""

import csv
import io

import pytest

from plpy_anon.core.errors import InvalidParameter
from plpy_anon.querylog import redact as redact_module
from plpy_anon.querylog.logs import (
    detect_format,
    read_csvlog,
    read_server_log,
    read_stderr_log,
    statement_of_message,
)

STDERR_LOG = (
    "2026-11-21 10:00:00.123 UTC [101] LOG:  statement: SELECT age FROM patients\n"
    "2026-11-21 10:00:01.000 UTC [101] LOG:  statement: SELECT sex,\n"
    "\t       zip\n"
    "\tFROM patients\n"
    "\tWHERE age > 50;\n"
    "2026-11-21 10:00:02.500 UTC [102] LOG:  duration: 12.5 ms  statement: SELECT 1\n"
    "2026-11-21 10:00:03 UTC [102] ERROR:  relation \"nosuch\" does not exist at character 15\n"
    "2026-11-21 10:00:03 UTC [102] STATEMENT:  SELECT * FROM nosuch\n"
    "2026-11-21 10:00:04 UTC [103] LOG:  checkpoint starting: time\n"
    "2026-11-21 10:00:05 UTC [104] LOG:  execute <unnamed>: SELECT age FROM patients WHERE id = $1\n"
    "2026-11-21 10:00:05 UTC [104] DETAIL:  parameters: $1 = '7'\n"
    "2026-11-21 10:00:06 UTC [104] LOG:  duration: 0.1 ms  parse <unnamed>: SELECT 2\n"
)


def test_stderr_log_statements_multiline_durations_and_skips():
    result = read_stderr_log(STDERR_LOG.splitlines())
    texts = [s.text for s in result.statements]
    assert texts == [
        "SELECT age FROM patients",
        "SELECT sex, zip FROM patients WHERE age > 50",
        "SELECT $1",
        "SELECT age FROM patients WHERE id = $1",
    ]
    assert [s.duration_ms for s in result.statements] == [None, None, 12.5, None]
    assert result.statements[0].timestamp == "2026-11-21 10:00:00.123 UTC"
    assert result.entries == 9
    assert result.skipped == 5  # ERROR, STATEMENT, checkpoint, DETAIL, parse


def csv_line(severity, message, when="2026-11-21 10:00:00.000 UTC"):
    record = [when, "ana", "db", "101", "[local]", "s1", "1", "SELECT", when, "3/4", "0",
              severity, "00000", message, "", "", "", "", "", "", "", "", "psql",
              "client backend", "", "0"]
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow(record)
    return buffer.getvalue()


def test_csvlog_quoted_multiline_messages():
    text = (
        csv_line("LOG", 'statement: SELECT "sex"\nFROM patients WHERE zip = \'5,3\'')
        + csv_line("LOG", "duration: 3.000 ms  statement: SELECT age FROM patients")
        + csv_line("ERROR", "syntax error at or near \"SELEC\"")
        + csv_line("LOG", "connection authorized: user=ana")
    )
    result = read_server_log(io.StringIO(text))
    assert [s.text for s in result.statements] == [
        "SELECT \"sex\" FROM patients WHERE zip = '5,3'",
        "SELECT age FROM patients",
    ]
    assert result.statements[1].duration_ms == 3.0
    assert (result.entries, result.skipped) == (4, 2)
    assert read_csvlog(io.StringIO(text)).as_pairs()[1] == ("SELECT age FROM patients", 1)


def test_format_detection_and_file_paths(tmp_path):
    assert detect_format(csv_line("LOG", "statement: SELECT 1").strip()) == "csvlog"
    assert detect_format(STDERR_LOG.splitlines()[0]) == "stderr"
    path = tmp_path / "postgresql.log"
    path.write_text(STDERR_LOG)
    assert len(read_server_log(path).statements) == 4
    assert len(read_server_log(str(path), "stderr").statements) == 4


@pytest.mark.parametrize(
    "message, expected",
    [
        ("statement: SELECT 1", ("SELECT 1", None)),
        ("duration: 1.25 ms  statement: SELECT 1", ("SELECT 1", 1.25)),
        ("duration: 1.25 ms", None),  # log_duration without the statement
        ("execute S_1: SELECT $1", ("SELECT $1", None)),
        ("statement: ", None),
        ("connection received: host=[local]", None),
    ],
)
def test_statement_of_message(message, expected):
    assert statement_of_message(message) == expected


def test_unknown_format_is_rejected():
    with pytest.raises(InvalidParameter, match="unknown log format"):
        read_server_log(io.StringIO(""), "jsonlog")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2026-11-21 10:00:00.123 UTC", "2026-11-21 10:00:00.123000+00:00"),
        ("2026-11-21 10:00:00 CET", "2026-11-21 10:00:00"),  # zone left to the server
        ("2026-11-21T10:00:00+02:00", "2026-11-21 10:00:00+02:00"),
        ("[101]", None),
        (None, None),
    ],
)
def test_log_timestamps(text, expected):
    from plpy_anon.client.querylog import parse_log_timestamp

    value = parse_log_timestamp(text)
    assert (None if value is None else str(value)) == expected


def test_only_queries_are_taken_from_a_log():
    """A log of log_statement = 'all' holds passwords and written values: only reads are taken
    (a data-modifying WITH is a write), the rest counted as skipped."""
    log = (
        "2026-11-27 10:00:01 UTC [1] LOG:  statement: SELECT * FROM t WHERE a > 1\n"
        "2026-11-27 10:00:02 UTC [1] LOG:  statement: ALTER ROLE carol PASSWORD 'secret'\n"
        "2026-11-27 10:00:03 UTC [1] LOG:  statement: INSERT INTO t VALUES (1, 'ssn')\n"
        "2026-11-27 10:00:04 UTC [1] LOG:  statement: WITH d AS (DELETE FROM t RETURNING *) SELECT 1\n"
        "2026-11-27 10:00:05 UTC [1] LOG:  statement: /* app */ WITH x AS (SELECT 1) SELECT * FROM x\n"
    )
    result = read_server_log(io.StringIO(log))
    assert [s.text for s in result.statements] == [
        "SELECT * FROM t WHERE a > 1", "WITH x AS (SELECT $1) SELECT * FROM x"]
    assert result.skipped == 3


def test_a_csvlog_statement_longer_than_csv_s_default_field_limit():
    # one long literal: as long as a long IN list for the csv reader, one token for the parser
    query = "SELECT * FROM t WHERE a = '" + "x" * 140_000 + "'"
    record = ['2026-11-27 10:00:01.000 UTC'] + [''] * 10 + ['LOG', '', f'statement: {query}']
    text = io.StringIO()
    csv.writer(text).writerow(record)
    result = read_server_log(io.StringIO(text.getvalue()), max_statement_bytes=None)
    assert len(query) > 131072 and [s.text for s in result.statements] == [query]


def test_a_statement_over_the_size_bound_is_counted_never_parsed(monkeypatch):
    query = "SELECT * FROM t WHERE a IN (" + ", ".join(map(str, range(40_000))) + ")"
    log = f"2026-11-27 10:00:01 UTC [1] LOG:  statement: {query}\n"
    monkeypatch.setattr(redact_module, "parse_statement", None)    # any parse would fail
    result = read_server_log(io.StringIO(log), max_statement_bytes=len(query) - 1)
    assert (result.statements, result.too_long, result.skipped) == ([], 1, 1)
