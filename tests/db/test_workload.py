"""Issue 3 against a real PostgreSQL: workload store, learn_priorities, prioritized mondrian_view,
release_report and workload_precision. Properties are checked from released rows with SQL
(tests/helpers.py) or recomputed by hand in the test."""
from __future__ import annotations

import os

import psycopg
import pytest
from psycopg import sql

from tests.helpers import class_sizes, distinct_sensitive_per_class, release_schema_of

PATIENTS = """
CREATE TABLE patients (id int PRIMARY KEY, age int, sex text, zip int, diagnosis text);
INSERT INTO patients
SELECT i, 18 + (i * 37) % 70, CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END,
       53700 + (i * 13) % 100, (ARRAY['flu', 'hiv', 'cancer', 'asthma', 'gout'])[1 + (i * 7) % 5]
FROM generate_series(1, 400) i;
"""
QIS = ["age", "sex", "zip"]


@pytest.fixture
def patients(db, schema):
    db.execute(PATIENTS)
    db.execute("SELECT anon.set_column_role('patients', 'diagnosis', 'sensitive')")
    db.execute("DELETE FROM anon.workload")
    yield "patients"
    db.execute("DELETE FROM anon.workload")


def add(db, *queries, frequencies=None):
    return db.execute("SELECT anon.add_queries(%s, %s)", (list(queries), frequencies)).fetchone()[0]


def learn(db, table="patients", **kwargs):
    args = "".join(f", {k} => {v!r}" for k, v in kwargs.items())
    rows = db.execute(f"SELECT * FROM anon.learn_priorities(%s{args})", (table,)).fetchall()
    return {r[0]: r[1:] for r in rows}


def view(db, schema, **kwargs):
    args = [sql.SQL("{} => {}").format(sql.Identifier(k), sql.Literal(v)) for k, v in kwargs.items()]
    args.append(sql.SQL("release_schema => {}").format(sql.Literal(release_schema_of(schema))))
    return db.execute(sql.SQL("SELECT anon.mondrian_view('patients', {})").format(
        sql.SQL(", ").join(args))).fetchone()[0]


def test_learn_priorities_counts_clauses_and_weighs_by_formula(db, schema, patients):
    add(db, "SELECT age FROM patients WHERE sex = 'F'",
        "SELECT p.zip, count(*) FROM patients p WHERE p.age > $1 GROUP BY p.zip",
        frequencies=[3, 1])
    got = learn(db, projection_share=0.5)
    # projection: age 3, zip 1 (of 4); selection: sex 3, age 1 (of 4)
    assert got["age"] == (3, 1, 0, 0, pytest.approx(0.5 * 3 / 4 + 0.5 * 1 / 4))
    assert got["sex"] == (0, 3, 0, 0, pytest.approx(0.5 * 3 / 4))
    assert got["zip"] == (1, 0, 1, 0, pytest.approx(0.5 * 1 / 4))
    stored = db.execute("SELECT column_name::text, weight FROM anon.priorities "
                        "WHERE source = 'patients'::regclass").fetchall()
    assert {c: pytest.approx(w) for c, w in stored} == {c: v[4] for c, v in got.items()}


def test_bad_statements_are_reported_in_a_notice_not_fatal(db, schema, patients):
    add(db, "SELECT age FROM patients", "SELEC oops", "SELECT nosuch FROM patients")
    notices = []

    def collect(diagnostic):
        notices.append(diagnostic.message_primary)

    db.add_notice_handler(collect)
    try:
        learn(db)
    finally:
        db.remove_notice_handler(collect)
    text = " ".join(notices)
    assert "1 read the table" in text and "1 did not parse" in text and "1 did not resolve" in text


def test_empty_workload_is_an_error_and_keeps_previous_priorities(db, schema, patients):
    add(db, "SELECT age FROM patients")
    learn(db)
    db.execute("DELETE FROM anon.workload")
    with pytest.raises(psycopg.errors.DataException, match="empty"):
        learn(db, use_pg_stat_statements=False)
    # the failed call stored nothing: the previous weights are intact
    assert db.execute("SELECT weight FROM anon.priorities WHERE source = 'patients'::regclass "
                      "AND column_name = 'age'").fetchone()[0] == pytest.approx(1.0)


def test_add_queries_rejects_mismatched_arrays(db, schema, patients):
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="frequencies"):
        add(db, "SELECT 1", "SELECT 2", frequencies=[1])


def test_learned_release_is_k_anonymous_l_diverse_and_snaps_to_predicates(db, schema, patients):
    add(db, *[f"SELECT age, sex FROM patients WHERE age > {t}" for t in (40, 60)],
        frequencies=[5, 5])
    learn(db)
    release = view(db, schema, k=10, l=2, priorities="learned")
    assert release == f"{release_schema_of(schema)}.patients_k10_l2_prioritized"
    sizes = class_sizes(db, release, QIS)
    assert min(sizes) >= 10 and sum(sizes) == 400
    assert min(distinct_sensitive_per_class(db, release, QIS, "diagnosis")) >= 2
    # no released age range straddles the analysts' cut at 40 < age or 60 < age
    straddling = db.execute(f"SELECT count(*) FROM {release} WHERE (age @> 40 AND age @> 41) "
                            "OR (age @> 60 AND age @> 61)").fetchone()[0]
    assert straddling == 0
    params = db.execute("SELECT method, parameters FROM anon.releases WHERE release_schema = %s",
                        (release_schema_of(schema),)).fetchone()
    assert params[0] == "prioritized_mondrian"
    assert params[1]["priorities_origin"] == "learned"
    assert params[1]["cut_points"]["age"]


def test_explicit_priorities_make_the_favoured_attribute_finer(db, schema, patients):
    plain = db.execute("SELECT anon.mondrian_view('patients', k => 8, release_schema => %s)",
                       (release_schema_of(schema),)).fetchone()[0]
    favoured = db.execute(sql.SQL(
        "SELECT anon.mondrian_view('patients', k => 8, priorities => '{{\"zip\": 1}}'::jsonb, "
        "release_schema => {}, release_name => 'zipped')").format(sql.Literal(release_schema_of(schema)))).fetchone()[0]
    def zip_width(release):
        return db.execute(f"SELECT avg(upper(zip) - lower(zip)) FROM {release}").fetchone()[0]
    assert zip_width(favoured) < zip_width(plain)
    assert min(class_sizes(db, favoured, QIS)) >= 8


def test_bad_priorities_fail_cleanly_and_create_nothing(db, schema, patients):
    cases = [
        ('{"salary": 1}', psycopg.errors.UndefinedObject, "salary"),
        ('{"age": -1}', psycopg.errors.InvalidParameterValue, ">= 0"),
        ('{"age": 0, "sex": 0}', psycopg.errors.InvalidParameterValue, "zero"),
        ("sometimes", psycopg.errors.InvalidParameterValue, "not understood"),
        ("learned", psycopg.errors.UndefinedObject, "learn_priorities"),
    ]
    for value, error, message in cases:
        with pytest.raises(error, match=message):
            view(db, schema, k=5, priorities=value)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="unknown metric"):
        view(db, schema, k=5, priorities="none", metric_weights='{"entropy": 1}')
    assert db.execute("SELECT count(*) FROM anon.releases WHERE release_schema = %s",
                      (release_schema_of(schema),)).fetchone()[0] == 0


@pytest.mark.parametrize("value", ['{"age": 1e400}', '{"age": -1e400, "sex": 1}', '{"age": 1e400, "sex": 1e400}'])
@pytest.mark.parametrize("sql_type", ["text", "jsonb"])
def test_priorities_beyond_double_precision_are_refused_cleanly(db, schema, patients, value, sql_type):
    """jsonb keeps 1e400 exactly (PL/Python hands it over as a 401-digit int): a clear 22023,
    not a Python traceback (38000)."""
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="must be finite"):
        db.execute(f"SELECT anon.mondrian_view('patients', k => 5, priorities => %s::{sql_type}, "
                   "release_schema => %s)", (value, release_schema_of(schema)))
    assert db.execute("SELECT count(*) FROM anon.releases WHERE release_schema = %s",
                      (release_schema_of(schema),)).fetchone()[0] == 0


def test_target_adds_information_gain_and_refresh_rebuilds(db, schema, patients):
    release = view(db, schema, k=20, priorities="none", target="sex",
                   metric_weights='{"spread": 1, "infogain": 5}')
    assert min(class_sizes(db, release, QIS)) >= 20
    db.execute("INSERT INTO patients SELECT i, 30, 'F', 53750, 'flu' FROM generate_series(401, 440) i")
    db.execute("SELECT anon.refresh(%s)", (release,))
    assert sum(class_sizes(db, release, QIS)) == 440


def test_release_report_and_workload_precision(db, schema, patients):
    add(db, "SELECT sex FROM patients WHERE age > 50", "SELECT age FROM patients WHERE sex = 'F'",
        "SELECT age FROM patients WHERE zip BETWEEN 53710 AND 53730 AND age < 30")
    learn(db)
    release = view(db, schema, k=10, priorities="learned")
    report = db.execute("SELECT * FROM anon.release_report(%s)", (release,)).fetchone()
    cols = [d.name for d in db.execute("SELECT * FROM anon.release_report(%s)", (release,)).description]
    report = dict(zip(cols, report))
    sizes = class_sizes(db, release, QIS)
    assert report["k"] == 10 and report["achieved_k"] == min(sizes)
    assert report["c_dm"] == sum(s * s for s in sizes)
    assert report["workload_queries"] == 3
    assert report["mean_recall"] == pytest.approx(1.0)
    assert 0 < report["mean_precision"] <= 1
    per_query = db.execute("SELECT query, true_rows, released_rows, answer_precision "
                           "FROM anon.workload_precision(%s)", (release,)).fetchall()
    assert len(per_query) == 3
    for query, true_rows, released_rows, precision in per_query:
        where = query.split(" WHERE ", 1)[1]
        # true answer counted by PostgreSQL itself on the source
        assert true_rows == db.execute(f"SELECT count(*) FROM patients WHERE {where}").fetchone()[0]
        assert released_rows >= true_rows
        assert precision == pytest.approx(true_rows / released_rows if released_rows else 1.0)
    # released answer of "age > 50" counted on the release with range semantics
    age_rows = next(r for r in per_query if r[0].endswith("age > 50"))
    assert age_rows[2] == db.execute(
        f"SELECT count(*) FROM {release} WHERE upper(age) - 1 > 50").fetchone()[0]
    stored = db.execute("SELECT metrics FROM anon.releases WHERE release_schema = %s",
                        (release_schema_of(schema),)).fetchone()[0]
    assert stored["workload"]["queries"] == 3 and stored["c_wdm"] == pytest.approx(report["c_wdm"])


def test_release_report_of_a_plain_mondrian_release(db, schema, patients):
    release = db.execute("SELECT anon.mondrian_view('patients', k => 5, release_schema => %s)",
                         (release_schema_of(schema),)).fetchone()[0]
    row = db.execute("SELECT k, c_dm, workload_queries, weights FROM anon.release_report(%s)",
                     (release,)).fetchone()
    sizes = class_sizes(db, release, QIS)
    assert row[0] == 5 and row[1] == sum(s * s for s in sizes) and row[2] == 0
    assert row[3] == {"age": pytest.approx(1 / 3), "sex": pytest.approx(1 / 3),
                      "zip": pytest.approx(1 / 3)}


STDERR_LOG = """\
2026-11-21 10:00:00.123 UTC [7] LOG:  statement: SELECT age FROM patients WHERE sex = 'F'
2026-11-21 10:00:01.000 UTC [7] LOG:  duration: 1.5 ms  statement: SELECT age
\tFROM patients WHERE sex = 'F';
2026-11-21 10:00:02.000 UTC [7] LOG:  statement: SELECT zip FROM patients WHERE age > 30
2026-11-21 10:00:03.000 UTC [7] LOG:  checkpoint starting: time
"""


def test_client_load_queries_stores_counts_and_learns_in_one_transaction(db, schema, patients,
                                                                         tmp_path):
    from plpy_anon.client.querylog import load_queries

    log = tmp_path / "postgresql.log"
    log.write_text(STDERR_LOG)
    result = load_queries(db, str(log), table=f"{schema}.patients")
    assert (result.statements, result.distinct, result.skipped_entries) == (3, 2, 1)
    stored = dict(db.execute("SELECT query, frequency FROM anon.workload").fetchall())
    assert stored == {"SELECT age FROM patients WHERE sex = 'F'": 2,
                      "SELECT zip FROM patients WHERE age > 30": 1}
    last = db.execute("SELECT executed_at AT TIME ZONE 'UTC' FROM anon.workload "
                      "WHERE frequency = 2").fetchone()[0]
    assert str(last) == "2026-11-21 10:00:01"
    weights = {r["column_name"]: r["weight"] for r in result.priorities}
    # projection age 2 / zip 1, selection sex 2 / age 1 (of 3 each), share 0.5
    assert weights["age"] == pytest.approx(0.5 * 2 / 3 + 0.5 * 1 / 3)


def test_client_load_queries_rolls_back_when_learning_fails(db, schema, patients, tmp_path):
    from plpy_anon.client.querylog import load_queries

    log = tmp_path / "other.log"
    log.write_text("2026-11-21 10:00:00 UTC [7] LOG:  statement: SELECT 1\n")
    with pytest.raises(psycopg.errors.DataException, match="reads"):
        load_queries(db, str(log), table=f"{schema}.patients")
    assert db.execute("SELECT count(*) FROM anon.workload").fetchone()[0] == 0


def test_pg_stat_statements_without_preload_warns_and_uses_the_store(db, schema, patients):
    available = db.execute("SELECT count(*) FROM pg_available_extensions "
                           "WHERE name = 'pg_stat_statements'").fetchone()[0]
    if not available:
        pytest.skip("pg_stat_statements is not installed on this server")
    db.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    warnings = []

    def collect(diagnostic):
        warnings.append((diagnostic.severity_nonlocalized, diagnostic.message_primary))

    db.add_notice_handler(collect)
    try:
        add(db, "SELECT age FROM patients")
        assert learn(db)["age"][4] == pytest.approx(1.0)
    finally:
        db.remove_notice_handler(collect)
        db.execute("DROP EXTENSION pg_stat_statements")
    assert any(sev == "WARNING" and "pg_stat_statements" in msg for sev, msg in warnings)


def sql_wdm(db, release, weights):
    """C_WDM recomputed by PostgreSQL from the released rows: each released row is charged, per
    QI, the source rows whose value lies in its released range (age, zip) or set (sex)."""
    total = sum(weights.values())
    charged = db.execute(
        f"SELECT sum((SELECT count(*) FROM patients p WHERE r.age @> p.age)), "
        f"sum((SELECT count(*) FROM patients p WHERE p.sex = ANY (r.sex))), "
        f"sum((SELECT count(*) FROM patients p WHERE r.zip @> p.zip)) FROM {release} r").fetchone()
    return sum(weights[c] / total * float(n) for c, n in zip(("age", "sex", "zip"), charged))


def test_release_report_scores_plain_and_prioritized_with_the_same_weights(db, schema, patients):
    target = release_schema_of(schema)
    plain = db.execute("SELECT anon.mondrian_view('patients', k => 8, release_schema => %s)",
                       (target,)).fetchone()[0]
    favoured = db.execute(
        "SELECT anon.mondrian_view('patients', k => 8, priorities => %s::jsonb, "
        "release_schema => %s, release_name => 'aged')",
        ('{"age": 1, "sex": 0.1, "zip": 0.1}', target)).fetchone()[0]
    query = "SELECT c_dm, c_wdm, weights FROM anon.release_report(%s, wdm_weights => %s::jsonb)"
    weights = {"age": 1, "sex": 0.1, "zip": 0.1}
    reports = {r: db.execute(query, (r, '{"age": 1, "sex": 0.1, "zip": 0.1}')).fetchone()
               for r in (plain, favoured)}
    for release, (_c_dm, c_wdm, used) in reports.items():
        assert used == {c: pytest.approx(w / 1.2) for c, w in weights.items()}
        assert c_wdm == pytest.approx(sql_wdm(db, release, weights))
    # the release that keeps age finest scores better on an age-weighted C_WDM
    assert reports[favoured][1] < reports[plain][1]
    # with no weights given and none learned, both are scored with the same (equal) weights,
    # not the prioritized release with its own
    default = {r: db.execute("SELECT c_wdm, weights FROM anon.release_report(%s)", (r,)).fetchone()
               for r in (plain, favoured)}
    assert default[plain][1] == default[favoured][1] == {
        c: pytest.approx(1 / 3) for c in ("age", "sex", "zip")}
    for release, (c_wdm, _used) in default.items():
        assert c_wdm == pytest.approx(sql_wdm(db, release, {"age": 1, "sex": 1, "zip": 1}))
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="JSON object"):
        db.execute(query, (plain, "[1, 2]"))
    with pytest.raises(psycopg.errors.UndefinedObject, match="salary"):
        db.execute(query, (plain, '{"salary": 1}'))


@pytest.mark.parametrize("column_type", ["text", "float8", "date"])
def test_prioritized_release_with_an_all_null_quasi_identifier(db, schema, column_type):
    """A quasi-identifier whose values are all NULL (issue 29, point 6: IndexError and a
    traceback for text): published, every released class of at least k rows, the NULL column
    released as NULL or {NULL} and C_WDM computed."""
    db.execute(f"CREATE TABLE n (id int PRIMARY KEY, age int NOT NULL, x {column_type})")
    db.execute("INSERT INTO n SELECT i, 20 + i % 40, NULL FROM generate_series(1, 100) i")
    rel = db.execute(
        "SELECT anon.mondrian_view('n', k => 5, priorities => '{\"age\": 1, \"x\": 1}'::jsonb, "
        "quasi_identifiers => ARRAY['age', 'x'], release_schema => %s)",
        (release_schema_of(schema),)).fetchone()[0]
    assert min(class_sizes(db, rel, ["age", "x"])) >= 5
    assert db.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == 100
    c_wdm = db.execute("SELECT metrics->>'c_wdm' FROM anon.releases WHERE "
                       "format('%%I.%%I', release_schema, release_name) = %s", (rel,)).fetchone()[0]
    assert c_wdm is not None and float(c_wdm) > 0


def test_placeholders_learn_no_cut_points_and_say_so(db, schema, patients):
    """Statements as pg_stat_statements keeps them ($1 for every constant) give no cut point
    (issue 29, point 5): learning says which columns, in a NOTICE, and a release asking for cut
    points says so again and records them (cut_points_unlearned); with the constants given,
    neither."""
    notices = []

    def collect(diagnostic):
        notices.append(diagnostic.message_primary or "")

    db.add_notice_handler(collect)
    try:
        add(db, "SELECT * FROM patients WHERE age > $1 AND sex = $2", frequencies=[5])
        learn(db)
        assert any("no cut points learned for age of" in n for n in notices), notices
        notices.clear()
        rel = view(db, schema, k=5, priorities="learned", cut_points=True)
        assert any("no cut points for age" in n for n in notices), notices
        params = db.execute("SELECT parameters FROM anon.releases WHERE "
                            "format('%%I.%%I', release_schema, release_name) = %s",
                            (rel,)).fetchone()[0]
        assert params["cut_points_unlearned"] == ["age"] and params["cut_points"] == {}
        db.execute("DELETE FROM anon.workload")
        notices.clear()
        add(db, "SELECT * FROM patients WHERE age > 40 AND sex = 'F'", frequencies=[5])
        learn(db)
        assert not any("no cut points" in n for n in notices), notices
        rel = view(db, schema, k=5, priorities="learned", cut_points=True, replace=True)
        params = db.execute("SELECT parameters FROM anon.releases WHERE "
                            "format('%%I.%%I', release_schema, release_name) = %s",
                            (rel,)).fetchone()[0]
        assert params["cut_points_unlearned"] == [] and "age" in params["cut_points"]
    finally:
        db.remove_notice_handler(collect)


SERVER_LOG = """2026-11-27 10:00:01.123 UTC [4242] LOG:  statement: SELECT * FROM patients WHERE age >= 40
2026-11-27 10:00:02.456 UTC [4242] LOG:  duration: 1.2 ms  statement: SELECT sex FROM patients WHERE age < 30 AND sex = 'F'
2026-11-27 10:00:03.000 UTC [4242] ERROR:  column "nope" does not exist
2026-11-27 10:00:03.000 UTC [4242] STATEMENT:  SELECT nope FROM patients
2026-11-27 10:00:04.789 UTC [4242] LOG:  statement: SELECT * FROM patients WHERE age >= 40
2026-11-27 10:00:05.000 UTC [4242] LOG:  statement: ALTER ROLE carol PASSWORD 'Sup3rS3cret'
2026-11-27 10:00:06.000 UTC [4242] LOG:  statement: INSERT INTO patients VALUES (9, 40, 'F', 1, 'hiv')
2026-11-27 10:00:07.000 UTC [4242] LOG:  statement: WITH x AS (DELETE FROM patients RETURNING *) SELECT 1
"""


def test_a_server_log_read_in_the_database_gives_cut_points(db, schema, patients, connect):
    """Issue 29, point 5: the statements of a server log, with their constants, reach the workload
    without a client step (anon.add_queries_from_log reads the file with pg_read_file), and the
    cut points they carry are learned; pg_read_file's own check refuses a role that may not read
    server files."""
    data_directory = db.execute("SHOW data_directory").fetchone()[0]
    name = f"plpy_anon_test_{schema}.log"
    path = os.path.join(data_directory, name)
    with open(path, "w") as log:
        log.write(SERVER_LOG)
    os.chmod(path, 0o644)
    try:
        assert db.execute("SELECT anon.add_queries_from_log(%s)", (name,)).fetchone()[0] == 2
        rows = db.execute("SELECT query, frequency, origin FROM anon.workload ORDER BY query"
                          ).fetchall()
        # only queries: the password and the written values are not stored
        assert rows == [("SELECT * FROM patients WHERE age >= 40", 2, f"log:{name}"),
                        ("SELECT sex FROM patients WHERE age < 30 AND sex = 'F'", 1, f"log:{name}")]
        learn(db)
        cuts = db.execute("SELECT cut_points FROM anon.workload_profiles "
                          "WHERE source = 'patients'::regclass").fetchone()[0]
        assert sorted(map(tuple, cuts["age"])) == [(30.0, False), (40.0, False)]
        assert sorted(map(tuple, cuts["sex"])) == [("F", False), ("F", True)]
        role = f"log_reader_{schema}"[:60]
        db.execute(f'CREATE ROLE "{role}" LOGIN')
        db.execute(f'GRANT USAGE ON SCHEMA anon TO "{role}"')
        db.execute(f'GRANT EXECUTE ON FUNCTION anon.add_queries_from_log(text, text) TO "{role}"')
        try:
            with connect(user=role) as conn, pytest.raises(psycopg.Error) as err:
                conn.execute("SELECT anon.add_queries_from_log(%s)", (name,))
            assert err.value.sqlstate == "42501", err.value
        finally:
            db.execute(f'DROP OWNED BY "{role}"')
            db.execute(f'DROP ROLE "{role}"')
    finally:
        os.remove(path)
