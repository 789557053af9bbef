"""anon.fusion_scan / anon.fusion_resilient_view / anon.fusion_scan_of against a real PostgreSQL.

Released rows are checked with SQL that shares no code with the extension (tests/helpers.py);
the scan is compared with the pure core run in the test process on the same rows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import psycopg
import pytest
from psycopg import sql

from plpy_anon.core import fusion as core
from plpy_anon.core.synthetic import make_enterprise, make_fusion_case
from tests.helpers import class_sizes, release_columns, release_schema_of

PERF = ["perf_1", "perf_2", "perf_3"]
N_EMPLOYEES, N_STRANGERS = 150, 6


@pytest.fixture(scope="module")
def frames():
    return make_enterprise(n_employees=N_EMPLOYEES, web_coverage=0.8, n_strangers=N_STRANGERS,
                           random_state=2)


def load(db, table, frame, types):
    db.execute(sql.SQL("CREATE TABLE {} ({})").format(
        sql.Identifier(table),
        sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(types[c]))
                           for c in frame.columns)))
    with db.cursor().copy(sql.SQL("COPY {} FROM STDIN").format(sql.Identifier(table))) as copy:
        for row in frame.itertuples(index=False):
            copy.write_row([None if isinstance(v, float) and np.isnan(v) else v for v in row])


@pytest.fixture
def enterprise(db, schema, frames):
    employees, web = frames
    load(db, "employees", employees, {"name": "text PRIMARY KEY", "perf_1": "int", "perf_2": "int",
                                      "perf_3": "int", "salary": "numeric(10,2)"})
    load(db, "web_facts", web, {"name": "text", "title": "text", "holdings": "float8"})
    return employees, web


def call(db, function, **kwargs):
    args = [sql.SQL("{} => {}").format(sql.Identifier(k), sql.Literal(v)) for k, v in kwargs.items()]
    query = sql.SQL("SELECT * FROM anon.{}({})").format(sql.Identifier(function),
                                                         sql.SQL(", ").join(args))
    return db.execute(query).fetchall()


# The tests of the SQL wiring, the catalog and the verdict's paths run one simulation per k
# (repeats => 1), the scenarios they were written on; test_repeated_simulations_* the default.
def scan(db, **kwargs):
    options = {"source": "employees", "sensitive": "salary", "identifier": "name",
               "auxiliary": "web_facts", "k_from": 2, "k_to": 6, "known_fraction": 0.2,
               "repeats": 1}
    return call(db, "fusion_scan", **{**options, **kwargs})


def resilient_view(db, schema, **kwargs):
    options = {"source": "employees", "sensitive": "salary", "identifier": "name",
               "auxiliary": "web_facts", "k_from": 2, "k_to": 6, "known_fraction": 0.2,
               "repeats": 1, "release_schema": release_schema_of(schema)}
    return call(db, "fusion_resilient_view", **{**options, **kwargs})[0][0]


def test_scan_matches_the_core_on_the_same_rows(db, schema, enterprise):
    employees, web = enterprise
    rows = scan(db)
    expected = core.fusion_scan(employees, web, identifier="name", sensitive="salary",
                                k_from=2, k_to=6, known_fraction=0.2, repeats=1).table
    got = pd.DataFrame(rows, columns=list(core.SCAN_COLUMNS + core.VERDICT_COLUMNS))
    verdict = core.protection_verdict(expected)
    assert set(got["verdict"]) == {verdict["verdict"]}
    np.testing.assert_allclose(got["protection_change"], verdict["protection_change"], rtol=1e-9)
    np.testing.assert_allclose(got["attacker_r2"], verdict["attacker_r2"], rtol=1e-9)
    assert got["k"].tolist() == [2, 3, 4, 5, 6]
    assert got["n_groups"].tolist() == [N_EMPLOYEES // k for k in range(2, 7)]
    for column in ("protection", "protection_no_fusion", "gain", "utility", "h"):
        np.testing.assert_allclose(got[column], expected[column], rtol=1e-9)


def test_unmatched_auxiliary_rows_are_ignored_and_counted(db, schema, enterprise):
    notices = []

    def collect(diagnostic):
        notices.append(diagnostic.message_primary)

    db.add_notice_handler(collect)
    try:
        scan(db, k_to=2)
    finally:
        db.remove_notice_handler(collect)
    assert any(f"{N_STRANGERS} of the" in n and "were ignored" in n for n in notices)


def test_resilient_view_releases_identifier_and_k_anonymous_attributes(db, schema, enterprise):
    employees, _ = enterprise
    rows = scan(db, min_protection=0.0, min_utility=0.25)
    admissible = [r for r in rows if r[9]]
    best_h = max(r[8] for r in admissible)
    expected_k = max(r[0] for r in admissible if r[8] == best_h)

    release = resilient_view(db, schema, min_protection=0.0, min_utility=0.25)
    assert release == f"{release_schema_of(schema)}.employees_fusion_k{expected_k}"
    assert release_columns(db, release) == [("name", "text")] + [(c, "double precision")
                                                                for c in PERF]
    assert min(class_sizes(db, release, PERF)) >= expected_k
    names = [r[0] for r in db.execute(f"SELECT name FROM {release}").fetchall()]
    assert sorted(names) == sorted(employees["name"])
    # Microaggregation keeps each attribute's total: the means per group times the sizes.
    totals = db.execute(f"SELECT sum(perf_1), sum(perf_2), sum(perf_3) FROM {release}").fetchone()
    np.testing.assert_allclose(totals, employees[PERF].sum().to_numpy())


def test_catalog_stores_the_whole_scan(db, schema, enterprise):
    release = resilient_view(db, schema, w_protection=0.0, w_utility=1.0)
    # Utility alone: |D|/C_DM is largest for the smallest k.
    assert release.endswith("_k2")
    method, params, achieved_k, row_count = db.execute(
        "SELECT method, parameters, achieved_k, row_count FROM anon.releases "
        "WHERE release_schema = %s", (release_schema_of(schema),)).fetchone()
    assert (method, params["k"], achieved_k, row_count) == ("fusion", 2, 2, N_EMPLOYEES)
    assert [r["k"] for r in params["scan"]] == [2, 3, 4, 5, 6]
    assert params["auxiliary_unmatched"] == N_STRANGERS
    assert "salary" not in params["released"]
    stored = call(db, "fusion_scan_of", release=release)
    assert [r[0] for r in stored if r[11]] == [2]
    assert [r[:11] + r[12:15] for r in stored] == [
        tuple(r) for r in scan(db, w_protection=0.0, w_utility=1.0)]
    assert params["verdict"]["verdict"] == stored[0][12] == "protected"
    assert params["accept_unprotected"] is False and stored[0][15] is False
    assert next(r["k"] for r in params["scan"] if r["saturated"]) == params["saturation"]["k"]


def test_refresh_microaggregates_current_data_at_the_chosen_k(db, schema, enterprise):
    release = resilient_view(db, schema, k_from=4, k_to=4)
    db.execute("INSERT INTO employees SELECT name || '-bis', perf_1, perf_2, perf_3, salary "
               "FROM employees LIMIT 10")
    db.execute("SELECT anon.refresh(%s)", (release,))
    assert db.execute(f"SELECT count(*) FROM {release}").fetchone()[0] == N_EMPLOYEES + 10
    assert min(class_sizes(db, release, PERF)) >= 4
    assert db.execute("SELECT row_count FROM anon.releases WHERE release_schema = %s",
                      (release_schema_of(schema),)).fetchone()[0] == N_EMPLOYEES + 10


def test_fuzzy_attacker_with_a_rule_table(db, schema, enterprise):
    rules = ('[{"if": {"title": "director"}, "then": "high"},'
             ' {"if": {"title": "assistant"}, "then": "low"},'
             ' {"if": {"holdings": "medium"}, "then": "medium", "weight": 0.5}]')
    rows = scan(db, attacker="fuzzy", rules=rules, k_to=3)
    assert all(r[2] < r[4] for r in rows)  # the rules about Q help the attacker


# ---------------------------------------------------------------------------- the verdict

@pytest.fixture
def fusion_case(db, schema, request):
    """employees / web_facts where the auxiliary data or the release alone drives the salary."""
    employees, web = make_fusion_case(request.param, n_employees=120, random_state=0)
    load(db, "employees", employees, {"name": "text PRIMARY KEY", "perf_1": "int", "perf_2": "int",
                                      "perf_3": "int", "salary": "numeric(10,2)"})
    load(db, "web_facts", web, {"name": "text", "holdings": "float8"})
    return request.param


def _verdict_in_sql(db, **kwargs):
    return db.execute(
        "SELECT DISTINCT verdict, protection_change, attacker_r2, "
        "       max(protection) FILTER (WHERE k = 2) OVER (), "
        "       max(protection) OVER () "
        "FROM anon.fusion_scan('employees', sensitive => 'salary', identifier => 'name', "
        "auxiliary => 'web_facts', k_from => 2, k_to => 20, known_fraction => 0.2, "
        "attacker => %s, repeats => 1)", (kwargs.get("attacker", "regression"),)).fetchall()


@pytest.mark.parametrize("fusion_case", ["auxiliary"], indirect=True)
@pytest.mark.parametrize("attacker", ["regression", "fuzzy"])
def test_auxiliary_data_alone_predicts_no_k_protects_view_refused(db, schema, fusion_case,
                                                                  attacker):
    (verdict, change, r2, at_k_from, best), = _verdict_in_sql(db, attacker=attacker)
    assert verdict == "unprotected"
    # The figures are the released scan's own: best protection minus protection at k_from.
    assert change == pytest.approx(min(best, 1) - min(at_k_from, 1)) and change < 0.05
    assert r2 == pytest.approx(1 - min(best, 1)) and r2 >= 0.25
    with pytest.raises(psycopg.errors.DataException,
                       match="no k protects against this auxiliary data") as info:
        resilient_view(db, schema, k_to=20, attacker=attacker)
    assert info.value.sqlstate == "22000"
    message = info.value.diag.message_primary
    assert "at k=2 and" in message and "at k=20" in message
    assert f"{change:+.3f}" in message and f"R^2 stays {r2:.3f}" in message
    assert "accept_unprotected => true" in info.value.diag.message_hint
    assert db.execute("SELECT count(*) FROM anon.releases WHERE release_schema = %s",
                      (release_schema_of(schema),)).fetchone()[0] == 0


@pytest.mark.parametrize("fusion_case", ["auxiliary"], indirect=True)
def test_accept_unprotected_publishes_with_a_warning_recorded_in_the_catalog(db, schema,
                                                                             fusion_case):
    notices = []

    def collect(diagnostic):
        notices.append((diagnostic.severity_nonlocalized, diagnostic.message_primary))

    db.add_notice_handler(collect)
    try:
        release = resilient_view(db, schema, k_to=20, accept_unprotected=True)
    finally:
        db.remove_notice_handler(collect)
    assert any(severity == "WARNING" and "no k protects" in message
               for severity, message in notices)
    params = db.execute("SELECT parameters FROM anon.releases WHERE release_schema = %s",
                        (release_schema_of(schema),)).fetchone()[0]
    assert params["accept_unprotected"] is True
    assert params["verdict"]["verdict"] == "unprotected"
    stored = call(db, "fusion_scan_of", release=release)
    assert {(r[12], r[15]) for r in stored} == {("unprotected", True)}
    assert db.execute(f"SELECT count(*) FROM {release}").fetchone()[0] == 120


@pytest.mark.parametrize("fusion_case", ["release"], indirect=True)
def test_generalization_helps_verdict_protected_view_published(db, schema, fusion_case):
    (verdict, change, _, _, _), = _verdict_in_sql(db)
    assert verdict == "protected" and change >= 0.05
    release = resilient_view(db, schema, k_to=20, w_protection=0.95, w_utility=0.05)
    params = db.execute("SELECT parameters FROM anon.releases WHERE release_schema = %s",
                        (release_schema_of(schema),)).fetchone()[0]
    assert params["verdict"]["verdict"] == "protected" and params["accept_unprotected"] is False
    k = params["k"]
    assert k > 2  # protection weighed at 95% and growing with k: not the smallest k
    assert min(class_sizes(db, release, PERF)) >= k
    # The chosen k keeps (almost) the best protection of the scan: checked from the stored scan.
    protection = {r["k"]: min(r["protection"], 1) for r in params["scan"]}
    spread = max(protection.values()) - min(protection.values())
    assert protection[k] >= max(protection.values()) - 0.05 / 0.95 * spread - 1e-9


@pytest.mark.parametrize("driven_by, expected", [("release", "protected"),
                                                 ("auxiliary", "unprotected")])
def test_fuzzy_attacker_refused_only_when_the_auxiliary_data_adds(db, schema, driven_by,
                                                                   expected):
    """300 employees, k = 2..30, 10% known, fuzzy attacker. Release-driven: the attacker's
    protection is nearly flat across k but the auxiliary data adds nothing to him (fusion gain
    < 0.05), so that is no refusal and the view is published. The auxiliary-driven table is
    refused, its gain figure in the message."""
    employees, web = make_fusion_case(driven_by, n_employees=300, random_state=0)
    load(db, "employees", employees, {"name": "text PRIMARY KEY", "perf_1": "int",
                                      "perf_2": "int", "perf_3": "int",
                                      "salary": "numeric(10,2)"})
    load(db, "web_facts", web, {"name": "text", "holdings": "float8"})
    options = {"k_to": 30, "known_fraction": 0.1, "attacker": "fuzzy"}
    verdicts = {r[0] for r in db.execute(
        "SELECT DISTINCT verdict FROM anon.fusion_scan('employees', sensitive => 'salary', "
        "identifier => 'name', auxiliary => 'web_facts', k_from => 2, k_to => 30, "
        "known_fraction => 0.1, attacker => 'fuzzy', repeats => 1)").fetchall()}
    assert verdicts == {expected}
    if expected == "unprotected":
        with pytest.raises(psycopg.errors.DataException,
                           match="no k protects against this auxiliary data") as info:
            resilient_view(db, schema, **options)
        assert info.value.sqlstate == "22000"
        assert "of which the auxiliary data adds" in info.value.diag.message_primary
        return
    release = resilient_view(db, schema, **options)
    verdict = db.execute("SELECT parameters->'verdict' FROM anon.releases "
                         "WHERE release_schema = %s", (release_schema_of(schema),)).fetchone()[0]
    assert verdict["verdict"] == "protected"
    # nearly flat (within about one simulation's spread) and a quarter of the variance explained
    assert verdict["protection_change"] < 0.1 and verdict["attacker_r2"] >= 0.25
    assert verdict["fusion_gain"] < 0.05
    assert db.execute(f"SELECT count(*) FROM {release}").fetchone()[0] == 300


@pytest.mark.parametrize("fusion_case", ["release"], indirect=True)
def test_repeated_simulations_choose_k_on_the_line_of_protection(db, schema, fusion_case):
    """With repeats (default 5), each k's protection is the mean of five simulations and the
    scan shows their spread and which ks are saturated (past the half-gain point); the
    chosen k is, recomputed here from the stored scan alone (numpy's least squares, not the
    product's), the admissible k of best H on the line of protection on log k over the ks up to
    the first saturated admissible k (all of them when the whole scan's line is flat within two
    standard errors). The release records the slope, its standard error and the saturation."""
    release = resilient_view(db, schema, k_to=20, w_protection=0.95, w_utility=0.05, repeats=5)
    params = db.execute("SELECT parameters FROM anon.releases WHERE release_schema = %s",
                        (release_schema_of(schema),)).fetchone()[0]
    rows = params["scan"]
    assert params["repeats"] == 5 and all(r["protection_sd"] > 0 for r in rows)
    ks = np.array([r["k"] for r in rows])
    protection = np.minimum([r["protection"] for r in rows], 1.0)

    def line_of(upto):
        (slope, intercept), residual, *_ = np.linalg.lstsq(
            np.column_stack([np.log(ks[:upto]), np.ones(upto)]), protection[:upto], rcond=None)
        spread = np.log(ks[:upto]) - np.log(ks[:upto]).mean()
        se = np.sqrt(residual[0] / (upto - 2) / (spread @ spread)) if upto > 2 else 0.0
        return slope, intercept, se

    slope, _, se = line_of(ks.size)
    assert params["protection_trend"]["slope"] == pytest.approx(slope)
    assert params["protection_trend"]["standard_error"] == pytest.approx(se)
    admissible = np.array([r["admissible"] for r in rows])
    saturated = np.array([r["saturated"] for r in rows])
    # saturated from where protection averaged over the ks within 0.25 in log k has bought half
    # of what the range buys over k_from (unless the line is flat)
    over = admissible if admissible.any() else np.ones_like(admissible)
    log_k = np.log(ks)
    smooth = np.array([protection[np.abs(log_k - x) <= 0.25 + 1e-12].mean() for x in log_k])
    if not params["saturation"]["flat"]:
        start, plateau = smooth[np.flatnonzero(over)[0]], smooth[over].max()
        assert params["saturation"]["plateau"] == pytest.approx(plateau)
        reached = np.flatnonzero(over & (smooth >= start + (plateau - start) / 2 - 1e-9))[0]
        assert saturated.tolist() == (np.arange(ks.size) >= reached).tolist()
    if abs(slope) <= 2 * se:
        assert saturated.all() and params["saturation"]["flat"]
    upto = int(np.flatnonzero(admissible & saturated)[0]) + 1
    assert params["saturation"]["k"] == ks[upto - 1]
    # the band of ks the point could fall on: two standard errors of the smoothed curve (the ks'
    # scatter around it over the root of the ks averaged) either side of the half-gain threshold
    band, determined = params["saturation"]["k_band"], params["saturation"]["determined"]
    if params["saturation"]["flat"]:
        assert band == [ks[upto - 1]] * 2 and determined
    else:
        near = (np.abs(log_k[:, None] - log_k[None, :]) <= 0.25 + 1e-12).sum(axis=1)
        residual = protection - smooth
        noise = 2 * np.sqrt(residual @ residual / (ks.size - 1)) / np.sqrt(near)
        threshold = start + (plateau - start) / 2
        early = np.flatnonzero(over & (smooth + noise >= threshold - 1e-9))[0]
        late = np.flatnonzero(over & (smooth - noise >= threshold - 1e-9))
        late = late[0] if late.size else np.flatnonzero(over)[-1]
        assert band == [ks[min(early, upto - 1)], ks[max(late, upto - 1)]]
        point = ks[upto - 1]
        assert determined == (max(np.log(band[1] / point), np.log(point / band[0])) <= 0.5 + 1e-12)
    utility = np.array([r["utility_normalized"] for r in rows])[:upto]
    candidates = admissible[:upto]

    def scaled(v):
        spread = np.ptp(v[candidates])
        return (v - v[candidates].min()) / spread if spread > 0 else 0 * v

    line = protection[:upto]      # two ks: the line through them is their own protections
    if upto > 2:
        slope, intercept, _ = line_of(upto)
        line = intercept + slope * np.log(ks[:upto])
    h = 0.95 * scaled(line) + 0.05 * scaled(utility)
    best = max(np.flatnonzero(candidates), key=lambda i: (h[i], ks[i]))
    assert params["k"] == ks[best] <= params["saturation"]["k"]
    assert release.endswith(f"_k{params['k']}")
    # the SQL scan shows the same figures
    columns = [c.name for c in db.execute(
        "SELECT * FROM anon.fusion_scan_of(%s) LIMIT 0", (release,)).description]
    assert columns[:5] == ["k", "n_groups", "protection", "protection_sd", "protection_no_fusion"]
    assert columns[10:12] == ["saturated", "chosen"]
    flags = db.execute("SELECT k, saturated FROM anon.fusion_scan_of(%s) ORDER BY k",
                       (release,)).fetchall()
    assert [f for _, f in flags] == saturated.tolist()


# ---------------------------------------------------------------------------- bad input

def test_identifier_not_unique(db, schema, enterprise):
    db.execute("CREATE TABLE twice AS SELECT * FROM employees UNION ALL "
               "SELECT * FROM employees LIMIT 160")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="is not unique") as info:
        scan(db, source="twice")
    assert "unique column" in info.value.diag.message_hint


def test_sensitive_column_not_numeric(db, schema, enterprise):
    db.execute("ALTER TABLE employees ADD COLUMN grade text DEFAULT 'B'")
    with pytest.raises(psycopg.errors.DatatypeMismatch, match='"grade" has type text'):
        scan(db, sensitive="grade")


def test_k_range_beyond_the_row_count(db, schema, enterprise):
    with pytest.raises(psycopg.errors.DataException, match=f"exceeds the {N_EMPLOYEES} rows"):
        scan(db, k_to=500)


def test_thresholds_no_k_can_meet(db, schema, enterprise):
    with pytest.raises(psycopg.errors.DataException, match="closest: k=") as info:
        resilient_view(db, schema, min_protection=0.99, min_utility=0.9)
    assert "Lower min_protection" in info.value.diag.message_hint
    assert db.execute("SELECT count(*) FROM anon.releases WHERE release_schema = %s",
                      (release_schema_of(schema),)).fetchone()[0] == 0


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"identifier": "nom"}, psycopg.errors.UndefinedObject, 'column "nom" does not exist'),
        ({"auxiliary_identifier": "who"}, psycopg.errors.UndefinedObject, '"who" does not exist'),
        ({"k_from": 1}, psycopg.errors.InvalidParameterValue, "k_from must be at least 2, got 1"),
        ({"known_fraction": 1.5}, psycopg.errors.InvalidParameterValue, "known_fraction"),
        ({"attacker": "oracle"}, psycopg.errors.InvalidParameterValue, "unknown attacker"),
        ({"attributes": ["name"]}, psycopg.errors.DatatypeMismatch, '"name" has type text'),
        ({"rules": '{"if": 1}', "attacker": "fuzzy"}, psycopg.errors.InvalidParameterValue,
         "JSON array"),
    ],
)
def test_bad_parameters(db, schema, enterprise, kwargs, error, message):
    with pytest.raises(error, match=message) as info:
        scan(db, **kwargs)
    assert info.value.diag.message_hint


def test_null_sensitive_values(db, schema, enterprise):
    db.execute("UPDATE employees SET salary = NULL WHERE perf_1 = 5")
    with pytest.raises(psycopg.errors.DataException, match="NULL values"):
        scan(db)
