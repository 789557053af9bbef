"""anon.risk_report on a table, a view, a partitioned table, a materialized view and a release:
every figure equals an independent computation in pandas on the same rows read via psycopg; the
report stored in anon.releases.risk at creation and refresh; refusals."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import psycopg
import pytest
from psycopg import sql

from tests.helpers import release_schema_of

QIS = ["age", "sex", "zip"]
SENSITIVE = ["diagnosis", "salary"]


def rows(n=400, seed=7):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        out.append((i, int(rng.integers(20, 40)), str(rng.choice(["F", "M"])),
                    None if rng.random() < 0.05 else str(rng.choice(["1000", "1001", "1002"])),
                    str(rng.choice(["flu", "cold", "asthma", "ulcer"], p=[0.5, 0.3, 0.15, 0.05])),
                    None if rng.random() < 0.03 else int(rng.integers(1, 8)) * 1000))
    return out


def load(db, table="people", partitioned=False):
    columns = "id int, age int, sex text, zip text, diagnosis text, salary int"
    if partitioned:
        db.execute(f"CREATE TABLE {table} ({columns}) PARTITION BY RANGE (age)")
        db.execute(f"CREATE TABLE {table}_young PARTITION OF {table} FOR VALUES FROM (0) TO (30)")
        db.execute(f"CREATE TABLE {table}_old PARTITION OF {table} FOR VALUES FROM (30) TO (200)")
    else:
        db.execute(f"CREATE TABLE {table} ({columns})")
    with db.cursor().copy(f"COPY {table} FROM STDIN") as copy:
        for r in rows():
            copy.write_row(r)


def read(db, relation):
    cur = db.execute(sql.SQL("SELECT * FROM {}").format(sql.SQL(relation)))
    return pd.DataFrame(cur.fetchall(), columns=[d.name for d in cur.description])


def report(db, relation, **named):
    args = [sql.SQL("{}::regclass").format(sql.Placeholder())]
    params = [relation]
    for k, v in named.items():
        args.append(sql.SQL("{} => {}").format(sql.Identifier(k), sql.Placeholder()))
        params.append(v)
    q = sql.SQL("SELECT measure, column_name, value, detail FROM anon.risk_report({})").format(
        sql.SQL(", ").join(args))
    return {(m, c): (v, d) for m, c, v, d in db.execute(q, params).fetchall()}


def expected(df, qis, sensitive, ordered, population=None, threshold=0.2, c=3.0):
    """Record by record (class sizes broadcast to rows) and, per sensitive column, from the class x
    value crosstab in pandas (NULL: a value of its own in a quasi-identifier; in a sensitive column
    no value, its rows left out, a class of NULLs a row of zeros)."""
    df = df.astype(object).where(df.notna(), "<NULL>")
    df = df.apply(lambda col: col.map(lambda v: str(v) if isinstance(v, list) else v))
    size = df.groupby(qis)[qis[0]].transform("size")
    out = {("rows", None): len(df), ("classes", None): df.groupby(qis).ngroups,
           ("smallest_class", None): size.min(),
           ("prosecutor_risk_max", None): (1 / size).max(),
           ("prosecutor_risk_avg", None): (1 / size).mean(),
           ("prosecutor_records_at_risk", None): (1 / size > threshold).sum()}
    for x in (2, 5, 10):
        out[(f"records_in_classes_below_{x}", None)] = (size < x).sum()
    if population:
        big = size * population / len(df)
        out[("journalist_risk_max", None)] = (1 / big).max()
        out[("journalist_records_at_risk", None)] = (1 / big > threshold).sum()
        out[("marketer_risk", None)] = (1 / big).mean()
    key = df[qis].apply(lambda r: repr(tuple(r)), axis=1)
    for s in sensitive:
        values = sorted(v for v in df[s].unique() if v != "<NULL>")
        known = df[s] != "<NULL>"
        counts = (pd.crosstab(key[known], df[s][known])
                  .reindex(index=key.unique(), columns=values, fill_value=0).to_numpy(float))
        totals = counts.sum(axis=1, keepdims=True)
        p = np.divide(counts, totals, out=np.zeros_like(counts), where=totals > 0)
        q = df[s][known].value_counts(normalize=True).reindex(values).to_numpy()
        with np.errstate(divide="ignore", invalid="ignore"):
            entropy = -np.where(p > 0, p * np.log(p), 0).sum(axis=1)
        r = -np.sort(-counts, axis=1)                                  # r_1 >= r_2 >= ...
        tails = np.cumsum(r[:, ::-1], axis=1)[:, ::-1]                 # r_l + ... + r_m
        if ordered[s]:
            emd = np.abs(np.cumsum(p - q, axis=1)).sum(axis=1) / max(len(values) - 1, 1)
        else:
            emd = np.abs(p - q).sum(axis=1) / 2
        out[("distinct_l", s)] = (counts > 0).sum(axis=1).min()
        out[("entropy_l", s)] = math.exp(entropy.min())
        out[("recursive_cl_l", s)] = (r[:, :1] < c * tails).sum(axis=1).min()
        out[("t_closeness", s)] = emd.max()
    return out


def assert_report(got, want):
    for key, value in want.items():
        assert key in got, key
        assert got[key][0] == pytest.approx(float(value), rel=1e-9, abs=1e-12), (key, got[key])


ORDERED = {"diagnosis": False, "salary": True}


@pytest.mark.parametrize("kind", ["table", "view", "partitioned", "matview"])
def test_each_figure_equals_pandas(db, schema, kind):
    load(db, "people", partitioned=kind == "partitioned")
    relation = "people"
    if kind == "view":
        db.execute("CREATE VIEW people_v AS SELECT * FROM people WHERE id % 3 <> 0")
        relation = "people_v"
    elif kind == "matview":
        db.execute("CREATE MATERIALIZED VIEW people_m AS SELECT * FROM people WHERE id < 300")
        relation = "people_m"
    got = report(db, relation, quasi_identifiers=QIS, sensitive=SENSITIVE, population=5000)
    df = read(db, relation)
    assert_report(got, expected(df, QIS, SENSITIVE, ORDERED, population=5000))
    assert got[("journalist_risk_max", None)][1].startswith("max over classes of 1 / F_j")
    assert "f_j * N / n" in got[("marketer_risk", None)][1]
    assert "ordered EMD" in got[("t_closeness", "salary")][1]
    assert "equal-distance EMD" in got[("t_closeness", "diagnosis")][1]


@pytest.mark.parametrize("kind", ["table", "view", "partitioned"])
def test_a_relation_over_the_build_budget_is_reported_within_it_to_the_same_figures(
        db, schema, kind):
    """Rows that would not fit plpy_anon.build_memory (a tiny one stands in for a large
    relation) are counted by the bounded pass, which keeps each class's figures as it reads
    instead of the class x value tables: every figure as pandas computes it, with a c other than
    the check's, and the class-size histogram."""
    load(db, "people", partitioned=kind == "partitioned")
    relation = "people"
    if kind == "view":
        db.execute("CREATE VIEW people_v AS SELECT * FROM people WHERE id % 3 <> 0")
        relation = "people_v"
    df = read(db, relation)
    sizes = df.astype(object).where(df.notna(), "<NULL>").groupby(QIS).size().value_counts()
    db.execute("SET plpy_anon.build_memory = '16kB'")
    try:
        got = report(db, relation, quasi_identifiers=QIS, sensitive=SENSITIVE, population=5000,
                     recursive_c=1.5)
        histogram = db.execute("SELECT class_size, classes FROM anon.class_sizes(%s::regclass, "
                               "%s)", (relation, QIS)).fetchall()
    finally:
        db.execute("RESET plpy_anon.build_memory")
    assert_report(got, expected(df, QIS, SENSITIVE, ORDERED, population=5000, c=1.5))
    assert dict(histogram) == {int(size): int(n) for size, n in sizes.items()}


def test_threshold_and_c_and_without_population(db, schema):
    load(db)
    got = report(db, "people", quasi_identifiers=["age", "sex"], sensitive=["diagnosis"],
                 risk_threshold=0.05, recursive_c=1.5)
    assert_report(got, expected(read(db, "people"), ["age", "sex"], ["diagnosis"], ORDERED,
                                threshold=0.05, c=1.5))
    value, detail = got[("marketer_risk", None)]
    assert value is None and "pass population" in detail


def test_declared_roles_are_the_default(db, schema):
    load(db)
    for col, role in [("age", "quasi_identifier"), ("zip", "quasi_identifier"), ("diagnosis", "sensitive")]:
        db.execute("SELECT anon.set_column_role('people', %s, %s)", [col, role])
    got = report(db, "people")
    assert_report(got, expected(read(db, "people"), ["age", "zip"], ["diagnosis"], ORDERED))
    assert ("t_closeness", "salary") not in got


def test_report_and_check_put_back_the_settings_they_change(db, schema):
    """The report and the verification raise work_mem and turn sorts / JIT off for their own
    queries; the caller's transaction gets its values back afterwards."""
    load(db)
    names = ("work_mem", "enable_sort", "jit")
    with db.transaction():
        db.execute("SET LOCAL work_mem = '3MB'")
        db.execute("SET LOCAL enable_sort = on")
        db.execute("SET LOCAL jit = on")
        db.execute("SELECT anon.mondrian_view('people', 5, quasi_identifiers => %s, "
                   "sensitive => ARRAY['diagnosis'], release_schema => %s)",
                   [QIS, release_schema_of(schema)])
        assert report(db, "people", quasi_identifiers=QIS, sensitive=["diagnosis"])
        assert [db.execute(f"SHOW {name}").fetchone()[0] for name in names] == ["3MB", "on", "on"]


def test_release_report_from_catalog_and_stored(db, schema):
    load(db)
    rs = release_schema_of(schema)
    db.execute("SELECT anon.mondrian_view('people', 5, quasi_identifiers => %s, sensitive => %s, "
               "identifiers => ARRAY['id'], release_name => 'people_k5', release_schema => %s)",
               [QIS, ["diagnosis"], rs])
    relation = f"{rs}.people_k5"
    got = report(db, relation)
    df = read(db, relation)
    ordered = {"diagnosis": False}
    assert_report(got, expected(df, QIS, ["diagnosis"], ordered))
    assert got[("smallest_class", None)][0] >= 5
    assert "mondrian" in got[("rows", None)][1]
    stored = db.execute("SELECT risk FROM anon.releases WHERE release_schema = %s AND "
                        "release_name = 'people_k5'", [rs]).fetchone()[0]
    assert {(r["measure"], r["column_name"]): r["value"] for r in stored} == {k: v[0] for k, v in got.items()}
    # the query of docs/operations.md
    doc = dict(db.execute("""
        SELECT r->>'measure' AS measure, (r->>'value')::float8 AS value
        FROM anon.releases, jsonb_array_elements(risk) AS r
        WHERE release_schema = %s AND r->>'measure' IN ('smallest_class', 'prosecutor_risk_max',
                                                        'prosecutor_records_at_risk')""", [rs]).fetchall())
    assert doc == {m: got[(m, None)][0] for m in doc} and len(doc) == 3
    # refresh: stored again, from the new rows
    db.execute("INSERT INTO people SELECT id + 1000, age, sex, zip, 'ulcer', salary FROM people")
    db.execute("SELECT anon.refresh(%s)", [relation])
    stored = db.execute("SELECT risk FROM anon.releases WHERE release_schema = %s AND "
                        "release_name = 'people_k5'", [rs]).fetchone()[0]
    after = {(r["measure"], r["column_name"]): r["value"] for r in stored}
    assert after[("rows", None)] == 800
    assert_report({k: (v, None) for k, v in after.items()}, expected(read(db, relation), QIS, ["diagnosis"], ordered))


def test_pattern_release_has_no_classes(db, schema):
    load(db)
    rs = release_schema_of(schema)
    db.execute("SELECT anon.pattern_view('people', ARRAY['age', 'salary'], "
               "identifiers => ARRAY['id'], release_name => 'people_p', release_schema => %s)", [rs])
    got = report(db, f"{rs}.people_p")
    assert got[("rows", None)][0] == 400
    value, detail = got[("smallest_class", None)]
    assert value is None and detail.startswith("not applicable")


def test_empty_relation_reports_zero_rows(db, schema):
    db.execute("CREATE TABLE empty (a int, s text)")
    got = report(db, "empty", quasi_identifiers=["a"], sensitive=["s"], population=10)
    assert got[("rows", None)][0] == 0 and got[("classes", None)][0] == 0
    for key in [("smallest_class", None), ("prosecutor_risk_max", None), ("journalist_risk_max", None),
                ("t_closeness", "s")]:
        value, detail = got[key]
        assert value is None and detail == "not defined: the relation has no rows", key


def test_refusals(db, schema):
    load(db)
    cases = [
        ("SELECT * FROM anon.risk_report(NULL)", [], "22023", "argument relation must not be NULL"),
        ("SELECT * FROM anon.risk_report('people', ARRAY['age', 'nope'])", [], "42703",
         'column "nope" does not exist'),
        ("SELECT * FROM anon.risk_report('people')", [], "22023", "quasi_identifiers =>"),
        ("SELECT * FROM anon.risk_report('people', ARRAY['age'], population => 10)", [], "22023",
         "population 10 is smaller"),
        ("SELECT * FROM anon.risk_report('people', ARRAY['age'], ARRAY['age'])", [], "22023",
         "both as quasi-identifier and sensitive"),
        ("SELECT * FROM anon.risk_report('people', ARRAY['age'], risk_threshold => 0)", [], "22023",
         "risk_threshold 0 is not in (0, 1]"),
        ("SELECT * FROM anon.risk_report('people_id_seq', ARRAY['age'])", [], "42804", "sequence"),
    ]
    db.execute("CREATE SEQUENCE people_id_seq")
    for query, params, state, text in cases:
        with pytest.raises(psycopg.Error) as info:
            db.execute(query, params)
        assert info.value.sqlstate == state, (query, info.value)
        err = str(info.value) + " " + (info.value.diag.message_hint or "")
        assert text in err, (query, err)


def test_runs_as_the_caller(db, schema, connect):
    load(db)
    db.execute("DROP ROLE IF EXISTS risk_reader")
    db.execute("CREATE ROLE risk_reader LOGIN")
    try:
        db.execute("GRANT USAGE ON SCHEMA anon TO risk_reader")
        db.execute("GRANT EXECUTE ON FUNCTION anon.risk_report(regclass, text[], text[], bigint, "
                   "double precision, double precision) TO risk_reader")
        db.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO risk_reader").format(sql.Identifier(schema)))
        with connect(user="risk_reader") as conn:
            with pytest.raises(psycopg.Error) as info:
                conn.execute(sql.SQL("SELECT * FROM anon.risk_report({}, ARRAY['age'])").format(
                    sql.Literal(f"{schema}.people"))).fetchall()
            assert info.value.sqlstate == "42501"
            assert "permission denied for table people" in str(info.value)
        db.execute("GRANT SELECT ON people TO risk_reader")
        with connect(user="risk_reader") as conn:
            got = {(m, c): v for m, c, v, _ in conn.execute(sql.SQL(
                "SELECT * FROM anon.risk_report({}, ARRAY['age'])").format(
                    sql.Literal(f"{schema}.people"))).fetchall()}
        assert got[("rows", None)] == 400
    finally:
        db.execute("DROP OWNED BY risk_reader")
        db.execute("DROP ROLE risk_reader")


def test_adult_source_and_k10_release_equal_pandas(db, schema):
    """The worked example of docs/risk.md: each figure of the source and of its k = 10 Mondrian
    release equals pandas on the same rows."""
    from tests.bench.bench_risk import ADULT_QIS, POPULATION, load_adult
    load_adult(db)          # from ../shared/data, else the sample plpy_anon/data/samples ships
    got = report(db, "adult", quasi_identifiers=ADULT_QIS, sensitive=["income"], population=POPULATION)
    assert_report(got, expected(read(db, "adult"), ADULT_QIS, ["income"], {"income": False},
                                population=POPULATION))
    rs = release_schema_of(schema)
    release = db.execute("SELECT anon.mondrian_view('adult', k => 10, quasi_identifiers => %s, "
                         "sensitive => ARRAY['income'], release_schema => %s)", [ADULT_QIS, rs]).fetchone()[0]
    got = report(db, release, population=POPULATION)
    want = expected(read(db, release), ADULT_QIS, ["income"], {"income": False}, population=POPULATION)
    assert_report(got, want)
    assert want[("smallest_class", None)] >= 10 and want[("records_in_classes_below_10", None)] == 0


def test_break_merge_release_counts_its_qit(db, schema):
    load(db)
    rs = release_schema_of(schema)
    release = db.execute(
        "SELECT anon.break_merge('people', 5, sensitive => ARRAY['diagnosis'], quasi_identifiers => "
        "ARRAY['age', 'sex'], identifiers => ARRAY['id', 'zip', 'salary'], release_name => 'people_bm', "
        "release_schema => %s)", [rs]).fetchone()[0]
    got = report(db, release)
    assert_report(got, expected(read(db, f"{rs}.people_bm_qit"), ["age", "sex"], [], {}))
    value, detail = got[("t_closeness", "diagnosis")]
    assert value is None and detail.startswith("not applicable: Break-Merge")


def test_unorderable_columns(db, schema):
    """A json sensitive column: the release is still made and its report says why the column has
    no figures; named explicitly, anon.risk_report refuses it with 42804 and the fix."""
    db.execute("CREATE TABLE docs (id int, age int, sex text, payload json)")
    db.execute("""INSERT INTO docs SELECT i, 20 + i % 7, CASE WHEN i % 2 = 0 THEN 'F' ELSE 'M' END,
                  json_build_object('n', i) FROM generate_series(1, 60) i""")
    rs = release_schema_of(schema)
    release = db.execute("SELECT anon.mondrian_view('docs', 5, quasi_identifiers => ARRAY['age', 'sex'], "
                         "sensitive => ARRAY['payload'], identifiers => ARRAY['id'], release_schema => %s)",
                         [rs]).fetchone()[0]
    stored = db.execute("SELECT risk FROM anon.releases WHERE release_schema = %s", [rs]).fetchone()[0]
    rows = {(r["measure"], r["column_name"]): r for r in stored}
    assert rows[("t_closeness", "payload")]["value"] is None
    assert rows[("t_closeness", "payload")]["detail"] == "not computed: type json has no ordering"
    assert rows[("smallest_class", None)]["value"] >= 5
    assert report(db, release)[("entropy_l", "payload")] == (None, "not computed: type json has no ordering")
    with pytest.raises(psycopg.Error) as info:
        report(db, release, sensitive=["payload"])
    assert info.value.sqlstate == "42804" and "no ordering" in str(info.value)
    assert "casts it to text" in info.value.diag.message_hint


def test_array_valued_sensitive_column_counts_whole_arrays(db, schema):
    """A text[] sensitive column: each array is one value (not its elements, and arrays of
    different lengths do not break the count); NULL and '{}' are values of their own."""
    db.execute("CREATE TABLE tagged (a int, b text, s text[])")
    db.execute("""INSERT INTO tagged VALUES (1, 'x', '{p,q}'), (1, 'x', '{p}'), (1, 'x', NULL),
                  (2, 'y', '{r,s,t}'), (2, 'y', '{r,s,t}'), (2, 'y', '{}'),
                  (NULL, NULL, '{}'), (NULL, NULL, '{p}')""")
    got = report(db, "tagged", quasi_identifiers=["a", "b"], sensitive=["s"])
    df = read(db, "tagged")
    df["s"] = df["s"].map(lambda v: None if v is None else tuple(v))
    per_class = df.groupby(["a", "b"], dropna=False)["s"].apply(lambda s: s.astype(str).nunique())
    assert got[("distinct_l", "s")][0] == per_class.min() == 2
