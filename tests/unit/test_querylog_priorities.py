"""Priority weights, cut points, bad input and scale of the workload learner."""

import gc
import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core.errors import InsufficientData, InvalidParameter, UndefinedObject
from plpy_anon.core.workload import Condition
from plpy_anon.querylog.parse import normalize_statement, parse_workload
from plpy_anon.querylog.priorities import (
    PriorityLearner,
    combine_counts,
    cut_points,
    learn_priorities,
    split_table_name,
)
from tests.waits import HANG

CATALOG = {
    "public": {
        "patients": {"id": "integer", "age": "integer", "sex": "text", "zip": "integer"},
        "visits": {"pid": "integer", "cost": "numeric(10,2)"},
    },
    "clinic": {"patients": {"id": "integer", "age": "integer"}},
}


def test_weights_follow_the_documented_formula_on_a_hand_computed_workload():
    statements = [
        ("SELECT age FROM patients WHERE sex = 'F'", 3),  # P age 3, S sex 3
        ("SELECT zip, age FROM patients WHERE age > 50", 1),  # P zip 1 age 1, S age 1
    ]
    learner = learn_priorities(statements, CATALOG, "patients", projection_share=0.25)
    # P = {age: 4, zip: 1} / 5 ; S = {sex: 3, age: 1} / 4
    expected = {
        "age": 0.25 * 4 / 5 + 0.75 * 1 / 4,
        "sex": 0.75 * 3 / 4,
        "zip": 0.25 * 1 / 5,
        "id": 0.0,
    }
    assert learner.weights_.to_dict() == pytest.approx(expected)
    assert learner.counts_.loc["age", "projection"] == 4
    assert learner.counts_.loc["age", "selection"] == 1


def test_group_and_order_counts_are_reported_but_do_not_weigh():
    learner = learn_priorities(
        ["SELECT sex, count(*) FROM patients GROUP BY sex ORDER BY sex"], CATALOG, "patients"
    )
    assert learner.counts_.loc["sex"].to_dict() == {
        "projection": 1, "selection": 0, "group_by": 1, "order_by": 1}
    assert learner.weights_["sex"] == pytest.approx(1.0)


def test_repeated_statements_are_parsed_once_and_weighted_by_frequency():
    texts = ["SELECT age FROM patients;", "select age\n  FROM patients", ("SELECT age FROM patients", 5)]
    workload = parse_workload(texts)
    assert workload.n_distinct == 2  # case is not normalized, whitespace and ';' are
    assert workload.n_input == 7
    learner = learn_priorities(texts, CATALOG, "patients")
    assert learner.counts_.loc["age", "projection"] == 7


def test_normalization_keeps_whitespace_inside_literals():
    assert normalize_statement("SELECT  'a   b'  FROM\tt ;; ") == "SELECT 'a   b' FROM t"


def test_a_line_comment_does_not_swallow_the_next_lines():
    """Collapsed onto one line, a -- comment would comment out the rest of the statement: the
    WHERE clause below was lost and age never counted as a selection."""
    text = "SELECT age -- the age\nFROM patients\nWHERE age > 3 -- adults"
    assert normalize_statement(text) == "SELECT age FROM patients WHERE age > 3"
    assert normalize_statement("SELECT '--' FROM t") == "SELECT '--' FROM t"
    learner = learn_priorities([text], CATALOG, "patients")
    assert learner.counts_.loc["age", "selection"] == 1


_QUOTED_OR_SPACE = re.compile(r"('(?:[^']|'')*'|\"(?:[^\"]|\"\")*\")|(?:--[^\n]*|\s)+")


@settings(max_examples=500)
@given(st.lists(st.sampled_from([" ", "  ", "\t", "\n", ";", "'", '"', "''", "a", "x y", "\u00a0",
                                 "\u2003", "\x1c", "--", "-"]), max_size=14).map("".join))
def test_normalization_is_the_regex_definition(text):
    """The quick path (no whitespace to collapse) gives what collapsing every run of whitespace
    and -- comments outside quoted strings and identifiers, then stripping trailing ';' and
    whitespace, gives."""
    collapsed = _QUOTED_OR_SPACE.sub(lambda m: m.group(1) or " ", text)
    assert normalize_statement(text) == re.sub(r"[\s;]+$", "", collapsed).strip()


def test_bad_statements_are_counted_not_fatal():
    learner = learn_priorities(
        ["SELECT age FROM patients", "SELEC oops", "SELECT nosuch FROM patients",
         "SELECT pid FROM visits", "DELETE FROM patients WHERE id = 1"],
        CATALOG, "patients",
    )
    report = learner.report_
    assert (report["used"], report["parse_errors"], report["unresolved"],
            report["other_tables"], report["not_queries"]) == (1, 1, 1, 1, 1)
    assert {e["kind"] for e in report["errors"]} == {"parse_errors", "unresolved"}


def test_schema_qualified_target_is_kept_apart_from_public():
    learner = learn_priorities(
        ["SELECT age FROM clinic.patients", "SELECT id FROM patients"], CATALOG, "clinic.patients"
    )
    assert learner.counts_["projection"].to_dict() == {"id": 0, "age": 1}


def test_queries_keep_only_the_target_tables_predicates():
    learner = learn_priorities(
        ["SELECT 1 FROM patients p JOIN visits v ON v.pid = p.id WHERE v.cost > 3 AND p.age < 9"],
        CATALOG, "patients",
    )
    assert learner.queries_ == [(Condition("age", "<", (9,)), 1)]


def test_cut_points_follow_the_operator_rules():
    constants = {(">", (50,)): 2, ("<", (18,)): 1, ("between", (30, 40)): 1, ("=", (7,)): 1,
                 ("<>", (3,)): 4, ("in", ("a",)): 1}
    frame = cut_points(constants)
    got = {(row.threshold, row.left_inclusive): row.frequency for row in frame.itertuples()}
    assert got == {(50.0, True): 2, (18.0, False): 1, (30.0, False): 1, (40.0, True): 1,
                   (7.0, False): 1, (7.0, True): 1}


def test_cut_points_of_numeric_columns_and_of_equalities_on_the_others():
    learner = learn_priorities(
        ["SELECT 1 FROM patients WHERE age > 5 AND sex = 'F' AND zip IN (1, 2)",
         "SELECT 1 FROM patients WHERE sex <> 'M'"],
        CATALOG, "patients",
    )
    assert set(learner.cut_points_) == {"age", "zip", "sex"}
    assert learner.constants_["sex"] == {("=", ("F",)): 1, ("<>", ("M",)): 1}
    sex = learner.cut_points_["sex"]
    # 'F' isolated between two cuts; <> bounds no set, so 'M' gives none
    assert list(zip(sex["threshold"], sex["left_inclusive"])) == [("F", False), ("F", True)]


@pytest.mark.parametrize("statements", [[], [""], [("SELECT 1 FROM patients", 0)]])
def test_empty_workload_is_a_clear_error(statements):
    with pytest.raises(InsufficientData, match="empty"):
        learn_priorities(statements, CATALOG, "patients")


def test_full_collections_come_back_after_learning_even_on_error():
    before = gc.get_threshold()
    learn_priorities(["SELECT age FROM patients WHERE age > 3"], CATALOG, "patients")
    assert gc.get_threshold() == before
    with pytest.raises(InsufficientData):
        learn_priorities(["SELECT pid FROM visits"], CATALOG, "patients")
    assert gc.get_threshold() == before


def test_workload_not_reading_the_table_is_a_clear_error():
    with pytest.raises(InsufficientData, match="reads public.patients") as info:
        learn_priorities(["SELECT pid FROM visits", "garbage ("], CATALOG, "patients")
    assert "parse_errors: 1" in info.value.detail


def test_unknown_table_and_bad_share():
    with pytest.raises(UndefinedObject):
        learn_priorities(["SELECT 1"], CATALOG, "nosuch")
    with pytest.raises(InvalidParameter):
        PriorityLearner("patients", projection_share=1.5).fit(["SELECT age FROM patients"], CATALOG)


def test_init_only_stores_parameters():
    learner = PriorityLearner("patients", projection_share=0.3)
    assert vars(learner) == {"table": "patients", "projection_share": 0.3,
                             "default_schema": "public", "by_shape": True,
                             "max_statement_bytes": 32768}


def test_split_table_name():
    assert split_table_name("patients") == ("public", "patients")
    assert split_table_name('clinic."patients"') == ("clinic", "patients")


counts = st.lists(st.integers(0, 50), min_size=3, max_size=3)


@settings(max_examples=60, deadline=None)
@given(counts, counts, st.floats(0, 1))
def test_combined_weights_are_a_distribution_monotone_in_each_count(p, s, alpha):
    if sum(p) == 0 and sum(s) == 0:
        return
    index = ["a", "b", "c"]
    weights = combine_counts(pd.Series(p, index=index), pd.Series(s, index=index), alpha)
    assert weights.sum() == pytest.approx(1.0)
    assert (weights >= 0).all()
    # a column dominating another in both counts never gets less weight
    for i in range(3):
        for j in range(3):
            if p[i] >= p[j] and s[i] >= s[j]:
                assert weights.iloc[i] >= weights.iloc[j] - 1e-12


def test_a_hundred_thousand_logged_statements_are_all_read_and_used():
    """(The time they take is a benchmark's: tests/bench/bench_workload.py.)"""
    rng = np.random.default_rng(0)
    templates = [
        "SELECT {c} FROM patients WHERE age > {v}",
        "SELECT sex, count(*) FROM patients WHERE zip BETWEEN {v} AND {w} GROUP BY sex",
        "SELECT p.{c}, v.cost FROM patients p JOIN visits v ON v.pid = p.id WHERE p.sex = 'F'",
        "WITH t AS (SELECT * FROM patients WHERE age < {v}) SELECT {c} FROM t",
    ]
    distinct = [
        t.format(c=c, v=v, w=v + 10)
        for t in templates for c in ("age", "sex", "zip", "id") for v in range(0, 100, 1)
    ][:400]
    statements = [distinct[i] for i in rng.integers(0, len(distinct), 100_000)]
    learner = learn_priorities(statements, CATALOG, "patients")
    assert learner.report_["statements"] == 100_000
    assert learner.report_["used"] == 100_000


def test_unquoted_table_names_fold_to_lower_case_quoted_ones_do_not():
    learner = learn_priorities(["SELECT age FROM PATIENTS WHERE AGE > 3",
                                'SELECT age FROM "PATIENTS"'], CATALOG, "patients")
    assert learner.report_["used"] == 1 and learner.report_["other_tables"] == 1
    assert learner.constants_["age"] == {(">", (3,)): 1}


def test_full_collections_come_back_when_overlapping_fits_end_in_any_order(monkeypatch):
    """Fit A (another thread) starts, then fit B (this thread); A ends while B parses, then B:
    the thresholds come back when the last fit ends (B restored what A had set: off for good)."""
    import threading

    from plpy_anon.querylog import priorities

    before = gc.get_threshold()
    started, release = threading.Event(), threading.Event()
    group_by_shape = priorities.group_by_shape

    def paused(counts):
        if threading.current_thread() is not threading.main_thread():
            started.set()
            release.wait(HANG)                    # A waits for B to start parsing
        else:
            release.set()
            worker.join(HANG)                     # B waits for A to end
            assert gc.get_threshold()[2] > before[2]   # B still parses: full collections off
        return group_by_shape(counts)

    monkeypatch.setattr(priorities, "group_by_shape", paused)
    worker = threading.Thread(target=learn_priorities,
                              args=(["SELECT age FROM patients WHERE age > 3"], CATALOG, "patients"))
    worker.start()
    assert started.wait(HANG)
    learn_priorities(["SELECT age FROM patients"], CATALOG, "patients")
    assert gc.get_threshold() == before
