"""Privacy models of Mondrian-family releases (issue 15): entropy and recursive (c,l)
l-diversity, t-closeness, and split, through anon.mondrian_view (plain and prioritized).

Every released class is checked here from the released rows, read with psycopg and counted in
pandas with the textbook formulas (no plpy_anon code); the release's own verification (verify.py)
is shown to refuse a release whose partition ignored the model (partitioning function tampered);
refusals of bad parameters and of a table failing the model are 22023 naming the fix."""
from __future__ import annotations

import json
import math

import pandas as pd
import psycopg
import pytest
from psycopg import sql

from tests.db.test_verification import catalog, mondrian_tampered
from tests.helpers import release_schema_of

# income depends on age: the young mostly 'low', the old mostly 'high' -- classes cut by age are
# skewed, so distinct 2-diversity (any second value) accepts classes whose entropy is < ln 2
PEOPLE = """
CREATE TABLE people (id int PRIMARY KEY, age int, zip text, income text, salary int);
INSERT INTO people
SELECT i, 20 + i % 45, (ARRAY['13000', '13500', '14000', '22000'])[1 + (i * 3) % 4],
       CASE WHEN (i * 37) % 100 < 100 - 2 * (i % 45) THEN 'low'
            WHEN (i * 37) % 100 < 100 - (i % 45) THEN 'mid' ELSE 'high' END,
       1000 * (1 + (i * 13) % 9) + 500 * (i % 45 / 15)
FROM generate_series(1, 600) i;
SELECT anon.set_column_role('people', 'income', 'sensitive');
"""
QIS = ["age", "zip"]


@pytest.fixture
def people(db, schema):
    db.execute(PEOPLE)
    return f"{schema}.people"


# the releases several tests read, made once: an l-diverse release of PEOPLE takes seconds
SHARED = {"d": {"l": 2}, "e": {"l": 2, "l_diversity": "entropy"},
          "r": {"l": 2, "l_diversity": "recursive", "c": 3}, "t": {"t": 0.2}}


class SharedReleases(dict):
    """Name -> released relation of SHARED's releases of PEOPLE at k = 5 and the default (median)
    split, each made when a test first reads it (so no one test waits for all four)."""

    def __init__(self, db, schema):
        super().__init__()
        self.db, self.schema = db, schema

    def __missing__(self, name):
        self.db.execute(sql.SQL("SET search_path = {}, public").format(sql.Identifier(self.schema)))
        try:
            self[name] = release(self.db, self.schema, name, k=5, **SHARED[name])
        finally:
            self.db.execute("RESET search_path")
        return self[name]


@pytest.fixture(scope="module")
def shared(db, module_schema):
    """(the schema of PEOPLE, its SharedReleases)."""
    db.execute(sql.SQL("SET search_path = {}, public").format(sql.Identifier(module_schema)))
    db.execute(PEOPLE)
    db.execute("RESET search_path")
    return module_schema, SharedReleases(db, module_schema)


def parameters(db, schema, name):
    return db.execute("SELECT parameters FROM anon.releases WHERE release_schema = %s "
                      "AND release_name = %s", (release_schema_of(schema), name)).fetchone()[0]


def release(db, schema, name, **kwargs):
    args = ", ".join(f"{k} => %({k})s" for k in kwargs)
    return db.execute(
        f"SELECT anon.mondrian_view('people', identifiers => ARRAY['id'], release_name => "
        f"%(name)s, release_schema => %(rs)s, {args})",
        {"name": name, "rs": release_schema_of(schema), **kwargs}).fetchone()[0]


def classes(db, relation, sensitive="income"):
    """The released rows' classes (QI columns as text) -> value counts of ``sensitive``."""
    rows = db.execute(f"SELECT age::text, zip::text, {sensitive} FROM {relation}").fetchall()
    frame = pd.DataFrame(rows, columns=["age", "zip", "s"])
    return frame, [g["s"].value_counts() for _, g in frame.groupby(["age", "zip"], dropna=False)]


def entropy(counts):
    n = counts.sum()
    return -sum(x / n * math.log(x / n) for x in counts)


def recursive_ok(counts, c, l):
    r = sorted(counts.tolist(), reverse=True) + [0] * l
    return r[0] < c * sum(r[l - 1:])


def emd_equal(counts, table):
    n, t = counts.sum(), table.sum()
    return sum(abs(counts.get(v, 0) / n - table[v] / t) for v in table.index) / 2


def emd_ordered(counts, table):
    values = sorted(table.index)
    n, t, run, total = counts.sum(), table.sum(), 0.0, 0.0
    for v in values[:-1]:
        run += counts.get(v, 0) / n - table[v] / t
        total += abs(run)
    return total / (len(values) - 1)


def test_entropy_release_merges_what_distinct_accepts(db, shared):
    schema, made = shared
    _, d_classes = classes(db, made["d"])
    assert min(len(c) for c in d_classes) >= 2
    assert min(entropy(c) for c in d_classes) < math.log(2)      # the test table is meaningful
    rel = made["e"]
    frame, e_classes = classes(db, rel)
    assert len(frame) == 600
    assert min(c.sum() for c in e_classes) >= 5
    assert min(entropy(c) for c in e_classes) >= math.log(2) - 1e-9
    assert len(e_classes) < len(d_classes)
    _, verified, figures, _ = catalog(db, rel)
    assert verified is True
    income = figures["models"]["by_column"]["income"]
    assert income["failing_classes"] == 0
    assert income["min_entropy"] == pytest.approx(min(entropy(c) for c in e_classes), abs=1e-6)
    params = parameters(db, schema, "e")
    assert (params["l_diversity"], params["c"], params["t"], params["split"]) == \
        ("entropy", None, None, "median")


def check_recursive_and_t_closeness(db, recursive, t_close):
    _, found = classes(db, recursive)
    assert all(recursive_ok(c, 3, 2) for c in found) and min(c.sum() for c in found) >= 5
    frame, found = classes(db, t_close)
    table = frame["s"].value_counts()
    assert max(emd_equal(c, table) for c in found) <= 0.2 + 1e-9
    assert catalog(db, t_close)[1] is True


def test_recursive_and_t_closeness_hold_on_released_rows_split_at_the_median(db, shared):
    _, made = shared
    check_recursive_and_t_closeness(db, made["r"], made["t"])


def test_recursive_and_t_closeness_hold_on_released_rows_split_for_utility(db, schema, people):
    check_recursive_and_t_closeness(
        db, release(db, schema, "r", k=5, l=2, l_diversity="recursive", c=3, split="utility"),
        release(db, schema, "t", k=5, t=0.2, split="utility"))


def test_t_closeness_on_a_numeric_sensitive_column_uses_ordered_distance(db, schema, people):
    rel = db.execute(
        "SELECT anon.mondrian_view('people', k => 5, t => 0.1, sensitive => ARRAY['salary'], "
        "identifiers => ARRAY['id', 'income'], release_name => 'ts', release_schema => %s)",
        (release_schema_of(schema),)).fetchone()[0]
    frame, found = classes(db, rel, sensitive="salary")
    table = frame["s"].value_counts()
    assert max(emd_ordered(c, table) for c in found) <= 0.1 + 1e-9
    assert len(found) > 1
    params = db.execute("SELECT parameters FROM anon.releases WHERE release_name = 'ts'").fetchone()[0]
    assert params["ordered_sensitive"] == ["salary"]


def test_prioritized_release_keeps_the_models_and_refresh_rebuilds_with_them(db, schema, people):
    rel = db.execute(
        "SELECT anon.mondrian_view('people', k => 5, priorities => '{\"zip\": 1}'::jsonb, l => 2, "
        "l_diversity => 'entropy', t => 0.3, identifiers => ARRAY['id'], release_name => 'p', "
        "release_schema => %s)", (release_schema_of(schema),)).fetchone()[0]
    db.execute("INSERT INTO people SELECT i, 30, '13000', 'low', 1000 FROM generate_series(601, 640) i")
    db.execute("SELECT anon.refresh(%s)", (rel,))
    frame, found = classes(db, rel)
    assert len(frame) == 640
    table = frame["s"].value_counts()
    assert min(entropy(c) for c in found) >= math.log(2) - 1e-9
    assert max(emd_equal(c, table) for c in found) <= 0.3 + 1e-9


def test_release_parameters_made_before_the_models_refresh_as_distinct_median(db, schema, people):
    rel = release(db, schema, "old", k=5, l=2)
    db.execute("UPDATE anon.releases SET parameters = parameters - 'l_diversity' - 'c' - 't' "
               "- 'split' - 'ordered_sensitive' WHERE release_name = 'old'")
    before = db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3").fetchall()
    db.execute("SELECT anon.refresh(%s)", (rel,))
    assert db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3").fetchall() == before


IGNORE_MODELS = """
_models = mondrian.core_models
mondrian.core_models = lambda p: {"l_diversity": "distinct", "c": None, "t": None, "split": "median"}
try:
    return mondrian.partition(plpy, GD, release_id)
finally:
    mondrian.core_models = _models
"""


def test_verification_refuses_a_release_whose_classes_fail_the_model(db, schema, people):
    with mondrian_tampered(db, IGNORE_MODELS), pytest.raises(psycopg.errors.DataException) as err:
        release(db, schema, "bad", k=5, l=2, l_diversity="entropy")
    diag = err.value.diag
    assert diag.sqlstate == "22000"
    assert "class(es) fail the privacy model asked" in diag.message_primary
    assert '"income" in a class entropy is' in diag.message_primary
    figures = json.loads(diag.message_detail.removeprefix("figures: "))
    assert figures["models"]["by_column"]["income"]["failing_classes"] > 0
    assert db.execute("SELECT count(*) FROM anon.releases WHERE release_name = 'bad'").fetchone()[0] == 0


@pytest.mark.parametrize(("kwargs", "message", "hint"), [
    ({"k": 5, "l": 2, "l_diversity": "shannon"},
     "l_diversity must be one of distinct, entropy, recursive", "l_diversity =>"),
    ({"k": 5, "l": 2, "l_diversity": "recursive"}, "needs c", "c =>"),
    ({"k": 5, "l": 2, "c": 2.0}, "c applies to recursive", "l_diversity => 'recursive'"),
    ({"k": 5, "l": 2, "l_diversity": "recursive", "c": 0.0}, "c must be greater than 0", "c =>"),
    ({"k": 5, "t": 0.0}, "t must be greater than 0", "t =>"),
    ({"k": 5, "t": 1.5}, "t must be at most 1", "t =>"),
    ({"k": 5, "split": "best"}, "split must be one of median, utility", "split =>"),
    ({"k": 5, "l": 3, "l_diversity": "entropy"},
     "the table's income entropy is 0.9814 < ln(3)", "Choose l <= 2.668"),
])
def test_refusals_are_22023_naming_the_fix(db, schema, people, kwargs, message, hint):
    with pytest.raises(psycopg.errors.InvalidParameterValue) as err:
        release(db, schema, "x", **kwargs)
    assert message in err.value.diag.message_primary
    assert hint in err.value.diag.message_hint
    assert db.execute("SELECT count(*) FROM anon.releases WHERE release_name = 'x'").fetchone()[0] == 0


def test_the_stored_risk_report_confirms_each_model(db, shared):
    """The risk report each release stores (anon.releases.risk, counted in SQL by db/risk.py)
    confirms the model the partition was asked for, on the released rows."""
    schema, made = shared
    assert all(made[name] for name in SHARED)      # each made, unless a test before made it
    reports = {name: {(r["measure"], r["column_name"]): r["value"] for r in risk}
               for name, risk in db.execute("SELECT release_name, risk FROM anon.releases "
                                            "WHERE release_schema = %s AND release_name IN "
                                            "('d', 'e', 'r', 't')", (release_schema_of(schema),))}
    assert reports["e"][("entropy_l", "income")] >= 2 - 1e-9
    assert reports["e"][("smallest_class", None)] >= 5
    # recursive_cl_l is reported at the default c = 3, the c asked for here
    assert reports["r"][("recursive_cl_l", "income")] >= 2
    assert reports["t"][("t_closeness", "income")] <= 0.2 + 1e-9
    # the report is not a copy of the request: the distinct release of the same table fails entropy
    assert reports["d"][("entropy_l", "income")] < 2
