"""Learning by statement shape (parse and resolve once per literal-free shape) gives exactly what
parsing every distinct statement gives (``by_shape=False``, the reference path)."""

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plpy_anon.core.errors import InsufficientData
from plpy_anon.querylog.parse import count_statements, group_by_shape, statement_shape
from plpy_anon.querylog.priorities import PriorityLearner

CATALOG = {
    "public": {
        "patients": {"id": "integer", "age": "integer", "sex": "text", "zip": "integer",
                     "seen": "date", "Score": "integer", "\u00c2ge": "integer"},
        "visits": {"pid": "integer", "cost": "numeric(10,2)"},
    },
}


def both(statements, table="patients"):
    by_shape = PriorityLearner(table).fit(statements, CATALOG)
    reference = PriorityLearner(table, by_shape=False).fit(statements, CATALOG)
    return by_shape, reference


def assert_same(a, b):
    pd.testing.assert_frame_equal(a.counts_, b.counts_)
    pd.testing.assert_series_equal(a.weights_, b.weights_)
    assert a.constants_ == b.constants_
    assert a.cut_points_.keys() == b.cut_points_.keys()
    for column in a.cut_points_:
        pd.testing.assert_frame_equal(a.cut_points_[column], b.cut_points_[column])
    assert a.queries_ == b.queries_
    assert a.query_texts_ == b.query_texts_
    assert a.report_ == b.report_


def key(text):
    return statement_shape(text)[0]


# -- the shape key -------------------------------------------------------------------------
def test_literals_keyword_case_and_comments_do_not_change_the_shape():
    assert key("SELECT age FROM patients WHERE age > 30 AND sex = 'F'") == key(
        "select AGE from Patients /* why */ where age>41 and sex='M' -- x")


def test_literals_are_read_from_the_tokens():
    _, literals = statement_shape("SELECT 1 FROM t WHERE a = -5 AND b = 'it''s' AND c = 1e3")
    assert [text for _, text in literals] == ["1", "5", "it's", "1e3"]


def test_quoted_identifiers_are_not_folded():
    assert key('SELECT "Score" FROM patients') != key('SELECT "score" FROM patients')
    assert key('SELECT "Score" FROM patients') != key("SELECT Score FROM patients")
    assert key("SELECT Score FROM patients") == key("SELECT score FROM patients")


def test_negative_numbers_strings_and_numbers_are_distinct_shapes():
    assert key("SELECT 1 FROM t WHERE a > -5") != key("SELECT 1 FROM t WHERE a > 5")
    assert key("SELECT 1 FROM t WHERE a > '5'") != key("SELECT 1 FROM t WHERE a > 5")


def test_in_list_lengths_are_part_of_the_shape():
    assert key("SELECT 1 FROM t WHERE a IN (1, 2)") == key("SELECT 1 FROM t WHERE a IN (3, 4)")
    assert key("SELECT 1 FROM t WHERE a IN (1, 2)") != key("SELECT 1 FROM t WHERE a IN (1, 2, 3)")


def test_special_strings_and_intervals_stay_in_the_key():
    assert key("SELECT $$a$$") != key("SELECT $$b$$")
    assert key("SELECT 1 WHERE x > interval '1 day'") != key("SELECT 1 WHERE x > interval '2 days'")


def test_statements_are_grouped_by_shape_in_workload_order():
    counts = count_statements(["SELECT age FROM patients WHERE age > 3",
                               ("SELECT age FROM patients WHERE age > 4", 5),
                               "SELECT sex FROM patients"])
    groups = group_by_shape(counts)
    assert [[(m.index, m.frequency) for m in g] for g in groups] == [[(0, 1), (1, 5)], [(2, 1)]]


# -- learning by shape = learning per statement, on each tricky case ------------------------
TRICKY = {
    "negative numbers": ["SELECT age FROM patients WHERE age > -5",
                         "SELECT age FROM patients WHERE age > -12",
                         "SELECT age FROM patients WHERE -3 < age"],
    "casts": ["SELECT id FROM patients WHERE seen > '2020-01-01'::date",
              "SELECT id FROM patients WHERE seen > '2021-06-30'::date",
              "SELECT id FROM patients WHERE zip = '75001'::integer",
              "SELECT id FROM patients WHERE zip = '13002'::integer",
              "SELECT id FROM patients WHERE seen = DATE '2020-01-02'",
              "SELECT id FROM patients WHERE seen = DATE '2022-03-04'",
              "SELECT id FROM patients WHERE seen > CAST('2020-01-01' AS date)"],
    "between": ["SELECT age FROM patients WHERE age BETWEEN 10 AND 20",
                "SELECT age FROM patients WHERE age BETWEEN 30 AND 35 AND zip > 7"],
    "in lists": ["SELECT sex FROM patients WHERE zip IN (1, 2)",
                 "SELECT sex FROM patients WHERE zip IN (5, 6)",
                 "SELECT sex FROM patients WHERE zip IN (1, 2, 3)",
                 "SELECT sex FROM patients WHERE sex IN ('F')"],
    "parameters": ["SELECT age FROM patients WHERE age > $1",
                   "SELECT age FROM patients WHERE age > $2",
                   "SELECT age FROM patients WHERE age > 4"],
    "comments and case": ["SELECT age FROM patients /* a */ WHERE age > 4",
                          "select AGE from PATIENTS where AGE > 9 -- b"],
    "quoted identifiers": ['SELECT "age" FROM patients WHERE "age" > 3',
                           'SELECT "age" FROM patients WHERE "age" > 8',
                           'SELECT age FROM "PATIENTS" WHERE age > 8',
                           'SELECT age FROM PATIENTS WHERE age > 9'],
    "positional group by": ["SELECT age, sex, count(*) FROM patients WHERE zip > 1 GROUP BY 1, 2",
                            "SELECT age, sex, count(*) FROM patients WHERE zip > 2 GROUP BY 2",
                            "SELECT age, sex, count(*) FROM patients WHERE zip > 3 GROUP BY 1",
                            "SELECT age, sex FROM patients WHERE zip > 4 ORDER BY 2",
                            "SELECT age, sex FROM patients WHERE zip > 5 ORDER BY 1"],
    "like patterns": ["SELECT id FROM patients WHERE sex LIKE 'ab%'",
                      "SELECT id FROM patients WHERE sex LIKE 'a_b%'",
                      "SELECT id FROM patients WHERE sex LIKE 'abc'",
                      "SELECT id FROM patients WHERE sex LIKE '%'"],
    "or with an unbounded branch": [
        "SELECT id FROM patients WHERE age > 3 OR sex LIKE 'a%'",
        "SELECT id FROM patients WHERE age > 4 OR sex LIKE '%a'"],
    "intervals": ["SELECT id FROM patients WHERE seen > now() - interval '1 day' AND age > 3",
                  "SELECT id FROM patients WHERE seen > now() - interval '2 years' AND age > 4"],
    "subqueries and ctes": [
        "SELECT sex FROM patients WHERE id IN (SELECT pid FROM visits WHERE cost > 10)",
        "SELECT sex FROM patients WHERE id IN (SELECT pid FROM visits WHERE cost > 99)",
        "WITH c AS (SELECT * FROM patients WHERE age < 40) SELECT sex FROM c WHERE c.zip = 5",
        "WITH c AS (SELECT * FROM patients WHERE age < 50) SELECT sex FROM c WHERE c.zip = 6"],
    "positions qualify leaves in place": [
        "SELECT 5, zip FROM patients GROUP BY 1", "SELECT 5, zip FROM patients GROUP BY 2",
        "SELECT age, zip FROM patients GROUP BY 1, 3", "SELECT age, zip FROM patients GROUP BY 1, 2",
        "SELECT age, age FROM patients ORDER BY 1", "SELECT age, age FROM patients ORDER BY 2"],
    "non-ascii capitals": ["SELECT \u00c2GE FROM patients WHERE \u00c2GE > 3",
                           "SELECT \u00e2ge FROM patients WHERE \u00e2ge > 4",
                           "SELECT age FROM patients WHERE age > 1"],
    "a star beside an unknown table": ["SELECT * FROM patients JOIN nosuch ON true ORDER BY 1",
                                       "SELECT * FROM patients JOIN nosuch ON true ORDER BY 2",
                                       "SELECT age FROM patients WHERE age > 1"],
    "errors and other statements": [
        "SELECT nope FROM patients WHERE age > 1", "SELECT nope FROM patients WHERE age > 2",
        "SELECT cost FROM visits WHERE cost > 1", "SELECT cost FROM visits WHERE cost > 2",
        "DELETE FROM patients WHERE age > 1", "DELETE FROM patients WHERE age > 2",
        "SELEC oops 1", "SELEC oops 2", "SELECT age FROM patients WHERE age > 1; SELECT 2"],
}


@pytest.mark.parametrize("case", list(TRICKY))
def test_by_shape_equals_per_statement(case):
    by_shape, reference = both(TRICKY[case])
    assert_same(by_shape, reference)


def test_statements_differing_in_literals_are_resolved_once():
    statements = [f"SELECT age FROM patients WHERE age > {v} AND sex = 'x{v}'" for v in range(50)]
    learner, reference = both(statements)
    assert learner.n_shapes_ == 1 and reference.n_shapes_ == 50
    assert learner.constants_["age"] == {(">", (v,)): 1 for v in range(50)}
    assert list(learner.cut_points_["age"].threshold) == [float(v) for v in range(50)]


def test_positional_group_by_is_resolved_per_position():
    learner, _ = both(TRICKY["positional group by"])
    assert learner.counts_.loc["age", "group_by"] == 2
    assert learner.counts_.loc["sex", "group_by"] == 2
    assert learner.counts_.loc["sex", "order_by"] == 1


# -- property: generated workloads ---------------------------------------------------------
numbers = st.integers(-99, 999).map(str) | st.sampled_from(["1.5", "0.25", "1e3", "2.0"])
strings = st.text("aAb_%' ", max_size=5).map(lambda s: "'" + s.replace("'", "''") + "'")
columns = st.sampled_from(["age", "AGE", "zip", "id", '"zip"', "sex", "p.age"])


@st.composite
def predicate(draw):
    column = draw(columns)
    kind = draw(st.integers(0, 8))
    if kind == 0:
        return f"{column} {draw(st.sampled_from(['=', '<>', '<', '<=', '>', '>=']))} {draw(numbers)}"
    if kind == 1:
        return f"{draw(numbers)} < {column}"
    if kind == 2:
        return f"{column} BETWEEN {draw(numbers)} AND {draw(numbers)}"
    if kind == 3:
        items = draw(st.lists(numbers | strings, min_size=1, max_size=3))
        return f"{column} IN ({', '.join(items)})"
    if kind == 4:
        return f"{column} LIKE {draw(strings)}"
    if kind == 5:
        return f"{column} = {draw(strings)}"
    if kind == 6:
        return f"{column} > $1"
    if kind == 7:
        return f"seen > '{draw(st.integers(2000, 2030))}-01-01'::date"
    return f"{column} = '{draw(st.integers(0, 99))}'::integer"


@st.composite
def statement(draw):
    preds = draw(st.lists(predicate(), min_size=1, max_size=3))
    joiner = draw(st.sampled_from([" AND ", " OR ", " and "]))
    where = joiner.join(preds)
    form = draw(st.integers(0, 4))
    if form == 0:
        return f"SELECT p.age, p.sex FROM patients p WHERE {where}"
    if form == 1:
        group = draw(st.sampled_from(["1", "2", "1, 2"]))
        return f"select p.sex, p.zip, count(*) from patients p where {where} group by {group}"
    if form == 2:
        return (f"SELECT p.id FROM patients p JOIN visits v ON v.pid = p.id "
                f"AND v.cost > {draw(numbers)} WHERE {where}")
    if form == 3:
        return f"WITH p AS (SELECT * FROM patients WHERE {where}) SELECT p.zip FROM p /* c */"
    return f"SELECT p.zip FROM patients p WHERE {where} ORDER BY {draw(st.sampled_from('12'))}"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(statement(), min_size=1, max_size=12), st.data())
def test_generated_workloads_learn_the_same_by_shape(base, data):
    # repeat the shapes with other literals so that shapes really hold several statements
    extra = data.draw(st.lists(statement(), max_size=6))
    statements = [(s, data.draw(st.integers(1, 3))) for s in base + extra + base[:3]]
    try:
        reference = PriorityLearner("patients", by_shape=False).fit(statements, CATALOG)
    except InsufficientData as error:  # the same refusal either way
        with pytest.raises(type(error)):
            PriorityLearner("patients").fit(statements, CATALOG)
        return
    assert_same(PriorityLearner("patients").fit(statements, CATALOG), reference)


@settings(max_examples=80, deadline=None)
@given(st.lists(statement(), min_size=1, max_size=10),
       st.lists(st.sampled_from(["'it''s'", "'a\\b'", "E'x'", "1e3", "5.", "$2", "''", "7"]),
                max_size=3))
def test_masked_texts_read_the_literals_the_tokenizer_reads(texts, odd):
    # the regex cache in front of the tokenizer: every text gets the tokenizer's key and literals
    texts = texts + [t.replace("1", o, 1) for t, o in zip(texts, odd)]
    texts += [t.replace("2", "3") for t in texts]
    for group in group_by_shape(count_statements(texts)):
        for member in group:
            expected = statement_shape(member.text)
            if expected is None:  # does not tokenize: alone, no literals
                assert group == [member] and member.literals == ()
                continue
            assert member.literals == expected[1]
            assert statement_shape(group[0].text)[0] == expected[0]


def test_masked_cache_does_not_hide_an_interval():
    texts = ["SELECT 1 FROM t WHERE x > interval '1 day'", "SELECT 1 FROM t WHERE x > interval '2 h'"]
    assert len(group_by_shape(count_statements(texts))) == 2
