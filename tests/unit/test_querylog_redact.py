"""What a server log may put into the workload store: one query, its cut-point constants only."""

import io

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plpy_anon.core.errors import InsufficientData
from plpy_anon.querylog.logs import read_server_log
from plpy_anon.querylog.parse import parse_statement
from plpy_anon.querylog.priorities import PriorityLearner
from plpy_anon.querylog.redact import NOT_A_QUERY, TOO_LONG, redact, redact_all
from tests.unit.test_querylog_shapes import CATALOG, statement


def stored(*messages):
    """The texts read_server_log keeps from stderr-format LOG entries with these messages."""
    log = "".join(f"2026-11-28 10:00:0{i} UTC [7] LOG:  {m}\n" for i, m in enumerate(messages))
    return [s.text for s in read_server_log(io.StringIO(log), "stderr").statements]


SECRETS = [
    # several statements on one log line: refused whole, not split
    ("statement: SELECT age FROM patients WHERE age > 30; ALTER ROLE postgres PASSWORD 'hunter2'",
     "hunter2"),
    ("statement: SELECT age FROM patients; INSERT INTO people VALUES ('078-05-1120')",
     "078-05-1120"),
    ("statement: SELECT 1;\tCREATE ROLE mallory LOGIN PASSWORD 'tabbed-secret'", "tabbed-secret"),
    # one query, secrets passed to functions: literals that are no cut point become $n
    ("statement: SELECT dblink_connect('host=db1 user=app password=s3cr3t-pw')", "s3cr3t-pw"),
    ("statement: SELECT set_config('app.api_key', 'sk-live-4242', false)", "sk-live-4242"),
    ("statement: SELECT 'token-xyz' AS t, age FROM patients /* password=in-comment */",
     "in-comment"),
    ("statement: SELECT age FROM patients -- api_key=line-comment", "line-comment"),
    ("statement: SELECT E'esc-secret', $$dollar-secret$$, age FROM patients", "secret"),
]


@pytest.mark.parametrize("message, secret", SECRETS)
def test_no_secret_of_a_logged_statement_is_stored(message, secret):
    assert not any(secret in text for text in stored(message))


def test_a_line_with_several_statements_is_refused_whole_not_split():
    assert stored("statement: SELECT age FROM patients WHERE age > 30; "
                  "ALTER ROLE postgres PASSWORD 'hunter2'") == []
    assert redact("SELECT 1; SELECT 2") == redact("SELECT 1;\tCREATE ROLE x PASSWORD 'y'") \
        == (None, NOT_A_QUERY)


@pytest.mark.parametrize("query", [
    "WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d",
    "SELECT * INTO copy_of_t FROM t",
    "EXPLAIN ANALYZE SELECT * FROM t",
    "SELEC oops",
    "ALTER ROLE postgres PASSWORD 'hunter2'",
])
def test_what_is_not_one_read_is_refused(query):
    assert redact(query) == (None, NOT_A_QUERY)


def test_cut_point_constants_are_kept_other_literals_become_placeholders():
    assert redact("SELECT age, 'label', upper('x') FROM patients "
                  "WHERE age > 30 AND sex IN ('F', 'M') AND zip BETWEEN 100 AND 200 "
                  "AND name LIKE 'Ab%' AND -3 < score AND seen > DATE '2020-01-01' "
                  "AND id = $1 AND created > now() - interval '1 day' "
                  "GROUP BY 1 ORDER BY 2 LIMIT 10").text == (
        "SELECT age, $2, UPPER($3) FROM patients WHERE age > 30 AND sex IN ('F', 'M') "
        "AND zip BETWEEN 100 AND 200 AND name LIKE 'Ab%' AND -3 < score "
        "AND seen > CAST('2020-01-01' AS DATE) AND id = $1 "
        "AND created > CURRENT_TIMESTAMP - $5 GROUP BY 1 ORDER BY 2 LIMIT $4")


@pytest.mark.parametrize("separator", ["\u2028", "\r", "\x1c", "\x85"])
def test_a_line_break_inside_a_logged_literal_forges_no_entry(separator):
    forged = f"x{separator}2026-11-28 10:00:09 UTC [7] LOG:  statement: SELECT ssn FROM people"
    log = (f"2026-11-28 10:00:00 UTC [7] LOG:  statement: SELECT age FROM patients "
           f"WHERE name = '{forged}'\n")
    result = read_server_log(io.StringIO(log), "stderr")
    assert result.entries == 1
    assert [s.text for s in result.statements] == [
        f"SELECT age FROM patients WHERE name = '{forged}'"]


def test_a_statement_over_the_bound_is_refused_before_parsing():
    text = "SELECT a FROM t WHERE a IN (" + ", ".join(map(str, range(10_000))) + ")"
    assert redact(text, max_bytes=len(text) - 1) == (None, TOO_LONG)
    assert redact(text, max_bytes=len(text)).text == text
    multibyte = "SELECT 'é'"         # 11 bytes, 10 characters
    assert redact(multibyte, max_bytes=10) == (None, TOO_LONG)


def learned(statements):
    try:
        return PriorityLearner("patients").fit(statements, CATALOG)
    except InsufficientData as error:
        return type(error)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(statement(), min_size=1, max_size=10), st.data())
def test_stored_statements_learn_what_the_logged_ones_teach(texts, data):
    """Counts, weights, constants, cut points and queries learned from the stored forms equal
    those of the statements as logged; storing twice changes nothing."""
    statements = [(t, data.draw(st.integers(1, 3))) for t in texts]
    redacted = [(redact(t).text, f) for t, f in statements]
    # refused exactly when sqlglot does not parse the statement (learning counts it an error)
    assert [text is None for text, _ in redacted] == [parse_statement(t)[1] is not None
                                                      for t in texts]
    redacted = [(text, f) for text, f in redacted if text is not None]
    assert [redact(text).text for text, _ in redacted] == [text for text, _ in redacted]
    original, again = learned(statements), learned(redacted) if redacted else InsufficientData
    if isinstance(original, type):
        assert again is original
        return
    pd.testing.assert_frame_equal(again.counts_, original.counts_)
    pd.testing.assert_series_equal(again.weights_, original.weights_)
    assert again.constants_ == original.constants_
    assert again.cut_points_.keys() == original.cut_points_.keys()
    for column in original.cut_points_:
        pd.testing.assert_frame_equal(again.cut_points_[column], original.cut_points_[column])
    # texts that differ only in what is not stored become one: the same queries, summed
    assert weighed(again.queries_) == weighed(original.queries_)


def weighed(queries):
    total = {}
    for predicate, frequency in queries:
        total[repr(predicate)] = total.get(repr(predicate), 0) + frequency
    return total


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(statement(), min_size=1, max_size=12), st.data())
def test_redacting_by_shape_stores_what_redacting_each_statement_stores(base, data):
    # the same shapes again with other literals, so that shapes hold several statements
    texts = base + data.draw(st.lists(statement(), max_size=6)) + base[:3]
    by_shape = redact_all(texts)
    assert by_shape == {text: redact(text) for text in texts}


def test_a_shape_s_structural_literals_are_not_taken_from_its_first_statement():
    texts = ["SELECT date_trunc('month', d), a FROM t WHERE a > 1 GROUP BY 1 ORDER BY 2",
             "SELECT date_trunc('year', d), a FROM t WHERE a > 2 GROUP BY 2 ORDER BY 1",
             "SELECT date_trunc('year', d), a FROM t WHERE a > 3 GROUP BY 1 ORDER BY 2",
             "SELECT a FROM t WHERE b LIKE 'ab%'", "SELECT a FROM t WHERE b LIKE '%secret%'"]
    assert redact_all(texts) == {text: redact(text) for text in texts}
    assert "secret" not in redact_all(texts)[texts[-1]].text


def test_a_statement_ending_in_an_empty_string_after_a_parameter_is_stored():
    # sqlglot's tokenizer alone refuses "... LIKE $1 AND age LIKE ''"
    stored = redact("SELECT p.age FROM patients p WHERE age LIKE '_' AND age LIKE ''")
    assert stored.refused is None and stored.text.endswith("LIKE ''")


def test_a_shape_whose_first_like_pattern_was_not_learned_keeps_a_later_learnable_one():
    texts = ["SELECT p.age FROM patients p WHERE age LIKE '_'", "SELECT p.age FROM patients p WHERE age LIKE ''"]
    assert redact_all(texts) == {text: redact(text) for text in texts}


def test_statements_of_one_shape_spelling_a_name_in_another_case_are_stored_as_written():
    texts = ["SELECT p.age, p.sex FROM patients p WHERE age = 0",
             "SELECT p.age, p.sex FROM patients p WHERE AGE = 0"]
    assert redact_all(texts) == {text: redact(text) for text in texts}
