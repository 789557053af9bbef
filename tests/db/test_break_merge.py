"""Break-Merge releases, dependency detection and breach reports against the real extension.

The invariants are checked with SQL written here, independently of the extension's code.
"""

from itertools import combinations

import numpy as np
import pandas as pd
import psycopg
import pytest
from psycopg import sql

from plpy_anon.core.breach import attack_break_merge, attack_plain
from tests.helpers import class_sizes, release_schema_of

QIS = ["age", "sex", "zip"]
SENSITIVE = ["workclass", "marital_status", "income"]


def _people(n, seed=0):
    """Synthetic people with planted dependencies: young -> never married; workclass decides
    income exactly (Gov -> <=50K, Self -> >50K, Private by marital status)."""
    rng = np.random.default_rng(seed)
    age = rng.integers(18, 70, n)
    sex = rng.choice(["F", "M"], n)
    zip_code = rng.choice(["13000", "13500", "14000", "22000", "23000"], n)
    workclass = rng.choice(["Private", "Gov", "Self"], n, p=[0.6, 0.25, 0.15])
    marital = np.where(
        age < 26, "Never-married", rng.choice(["Married", "Divorced", "Never-married"], n)
    )
    income = np.where(
        workclass == "Gov",
        "<=50K",
        np.where(workclass == "Self", ">50K", np.where(marital == "Married", ">50K", "<=50K")),
    )
    return pd.DataFrame(
        {
            "id": np.arange(n),
            "age": age,
            "sex": sex,
            "zip": zip_code,
            "workclass": workclass,
            "marital_status": marital,
            "income": income,
        }
    )


def _load(db, schema, frame, name="people"):
    db.execute(
        sql.SQL(
            "CREATE TABLE {}.{} (id int PRIMARY KEY, age int, sex text, zip text, workclass text, "
            "marital_status text, income text)"
        ).format(sql.Identifier(schema), sql.Identifier(name))
    )
    with db.cursor().copy(
        sql.SQL("COPY {}.{} FROM STDIN").format(sql.Identifier(schema), sql.Identifier(name))
    ) as copy:
        for row in frame.itertuples(index=False):
            copy.write_row(tuple(v.item() if hasattr(v, "item") else v for v in row))
    return f"{schema}.{name}"


def _break(db, schema, source, k=5, l=2, name="people_bm"):
    return db.execute(
        "SELECT anon.break_merge(%s, k => %s, l => %s, sensitive => %s, quasi_identifiers => %s, "
        "identifiers => ARRAY['id'], release_name => %s, release_schema => %s)",
        (source, k, l, SENSITIVE, QIS, name, release_schema_of(schema)),
    ).fetchone()[0]


@pytest.fixture
def people(db, schema):
    source = _load(db, schema, _people(600))
    _break(db, schema, source)
    return schema, source


def _rel(schema, name):
    return f"{release_schema_of(schema)}.{name}"


def check_invariants(db, schema, source, k, l, name="people_bm"):
    qit = _rel(schema, f"{name}_qit")
    (n_source,) = db.execute(f"SELECT count(*) FROM {source}").fetchone()
    (n_qit,) = db.execute(f"SELECT count(*) FROM {qit}").fetchone()
    assert n_qit == n_source
    # the QIT carries the QIs and gid only
    cols = [
        r[0]
        for r in db.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
            "ORDER BY attnum",
            (qit,),
        ).fetchall()
    ]
    assert cols == QIS + ["gid"]
    assert min(class_sizes(db, qit, QIS)) >= k
    for attribute in SENSITIVE:
        st = _rel(schema, f"{name}_st_{attribute}")
        mismatched = db.execute(f"""
            SELECT count(*) FROM (SELECT gid, count(*) AS n FROM {qit} GROUP BY gid) q
            FULL JOIN (SELECT gid, sum(count) AS n FROM {st} GROUP BY gid) s USING (gid)
            WHERE q.n IS DISTINCT FROM s.n""").fetchone()[0]
        assert mismatched == 0, attribute
        (total,) = db.execute(f"SELECT sum(count) FROM {st}").fetchone()
        assert total == n_source
        (least,) = db.execute(
            f"SELECT min(c) FROM (SELECT count(DISTINCT value) c FROM {st} GROUP BY gid) x"
        ).fetchone()
        assert least >= l, attribute
        # the ST is the true histogram: join the QIT's gid back to the rows through the classes
    return n_source


def test_release_objects_and_invariants(db, people):
    schema, source = people
    check_invariants(db, schema, source, k=5, l=2)
    row = db.execute(
        "SELECT method, row_count, achieved_k, metrics FROM anon.releases "
        "WHERE release_schema = %s AND release_name = 'people_bm'",
        (release_schema_of(schema),),
    ).fetchone()
    assert row[0] == "break_merge" and row[1] == 600 and row[2] >= 5
    assert row[3]["n_groups"] <= row[3]["n_classes"]


def test_qit_shows_the_mondrian_generalization(db, people):
    schema, source = people
    db.execute(
        "SELECT anon.mondrian_view(%s, k => 5, quasi_identifiers => %s, sensitive => %s, "
        "identifiers => ARRAY['id'], release_name => 'people_k5', release_schema => %s)",
        (source, QIS, SENSITIVE, release_schema_of(schema)),
    )
    cols = ", ".join(QIS)
    diff = db.execute(f"""
        (SELECT {cols} FROM {release_schema_of(schema)}.people_bm_qit EXCEPT ALL SELECT {cols} FROM {release_schema_of(schema)}.people_k5)
        UNION ALL
        (SELECT {cols} FROM {release_schema_of(schema)}.people_k5 EXCEPT ALL SELECT {cols} FROM {release_schema_of(schema)}.people_bm_qit)
    """).fetchall()
    assert diff == []
    types = db.execute(
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
        "%s::regclass AND attnum > 0 ORDER BY attnum",
        (f"{release_schema_of(schema)}.people_bm_qit",),
    ).fetchall()
    assert [t[0] for t in types] == ["int4range", "text[]", "text[]", "integer"]


def test_sensitive_tables_are_the_group_histograms(db, people):
    schema, source = people
    # every individual lies in exactly one QIT class (bounding boxes are disjoint), so the class's
    # gid can be joined back to the source; the STs must equal the histograms of those rows
    for attribute in SENSITIVE:
        diff = db.execute(f"""
            WITH classes AS (SELECT DISTINCT age, sex, zip, gid FROM {release_schema_of(schema)}.people_bm_qit),
            truth AS (SELECT c.gid, s.{attribute} AS value, count(*) AS count FROM {source} s
                      JOIN classes c ON s.age <@ c.age AND s.sex = ANY (c.sex) AND s.zip = ANY (c.zip)
                      GROUP BY 1, 2)
            (SELECT * FROM truth EXCEPT SELECT * FROM {release_schema_of(schema)}.people_bm_st_{attribute})
            UNION ALL
            (SELECT * FROM {release_schema_of(schema)}.people_bm_st_{attribute} EXCEPT SELECT * FROM truth)""").fetchall()
        assert diff == [], attribute


def test_merged_view_weights(db, people):
    schema, _ = people
    bad = db.execute(f"""
        SELECT count(*) FROM (SELECT gid, sum(weight) w FROM {release_schema_of(schema)}.people_bm_merged GROUP BY gid) m
        JOIN (SELECT gid, count(*) n FROM {release_schema_of(schema)}.people_bm_qit GROUP BY gid) q USING (gid)
        WHERE abs(m.w - q.n) > 1e-9""").fetchone()[0]
    assert bad == 0
    # the income margin of the merge equals the income ST
    bad = db.execute(f"""
        SELECT count(*) FROM (SELECT gid, income, sum(weight) w FROM {release_schema_of(schema)}.people_bm_merged
                              GROUP BY 1, 2) m
        JOIN {release_schema_of(schema)}.people_bm_st_income s ON s.gid = m.gid AND s.value = m.income
        WHERE abs(m.w - s.count) > 1e-9""").fetchone()[0]
    assert bad == 0


def test_refresh_keeps_invariants(db, people):
    schema, source = people
    extra = _people(150, seed=7)
    extra["id"] += 10_000
    db.execute(f"DELETE FROM {source} WHERE id % 7 = 0")
    with db.cursor().copy(f"COPY {source} FROM STDIN") as copy:
        for row in extra.itertuples(index=False):
            copy.write_row(tuple(v.item() if hasattr(v, "item") else v for v in row))
    row = db.execute(f"SELECT row_count FROM anon.refresh('{release_schema_of(schema)}.people_bm')").fetchone()
    n = check_invariants(db, schema, source, k=5, l=2)
    assert row[0] == n == 600 - 86 + 150


def test_refresh_is_one_transaction(db, people):
    schema, source = people
    before = db.execute(f"SELECT count(*) FROM {release_schema_of(schema)}.people_bm_qit").fetchone()
    db.execute(f"UPDATE {source} SET income = 'unknown' WHERE id = 1")  # income: 3 values now
    db.execute(f"DELETE FROM {source} WHERE id >= 3")  # 3 rows < k = 5: refresh must fail
    with pytest.raises(psycopg.errors.DataException):
        db.execute(f"SELECT anon.refresh('{release_schema_of(schema)}.people_bm')")
    after = db.execute(f"SELECT count(*) FROM {release_schema_of(schema)}.people_bm_qit").fetchone()
    assert before == after


def test_drop_removes_every_object(db, people):
    schema, _ = people
    db.execute("SELECT anon.drop_release(%s)", (f"{release_schema_of(schema)}.people_bm",))
    left = db.execute(
        "SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid = relnamespace "
        "WHERE nspname = %s AND relname LIKE 'people_bm%%'",
        (release_schema_of(schema),),
    ).fetchall()
    assert left == []


# ---------------------------------------------------------------------------- dependencies


def _rules(db, release, **kwargs):
    args = ", ".join(f"{k} => %s" for k in kwargs)
    return pd.DataFrame(
        db.execute(
            f"SELECT * FROM anon.detect_dependencies(%s{', ' if args else ''}{args})",
            (release, *kwargs.values()),
        ).fetchall(),
        columns=[
            "parents",
            "parent_values",
            "child",
            "child_value",
            "probability",
            "support",
            "parent_support",
        ],
    )


def test_dependencies_found_in_plain_release_and_blurred_by_break_merge(db, people):
    schema, source = people
    db.execute(
        "SELECT anon.mondrian_view(%s, k => 5, quasi_identifiers => %s, sensitive => %s, "
        "identifiers => ARRAY['id'], release_name => 'people_k5', release_schema => %s)",
        (source, QIS, SENSITIVE, release_schema_of(schema)),
    )
    plain = _rules(db, f"{release_schema_of(schema)}.people_k5", risk=0.99, scope="sensitive")
    # workclass decides income in the data: Gov -> <=50K and Self -> >50K with probability 1
    planted = plain[(plain["child"] == "income") & plain["parents"].map(lambda p: "workclass" in p)]
    assert len(planted) > 0 and (planted["probability"] >= 0.99).all()
    # the rules are what the released rows say (checked in SQL)
    for r in plain.itertuples():
        cond = " AND ".join(f"{p}::text = %s" for p in r.parents)
        n_parent, n_both = db.execute(
            f"SELECT count(*), count(*) FILTER (WHERE {r.child}::text = %s) FROM {release_schema_of(schema)}.people_k5 WHERE {cond}",
            (r.child_value, *r.parent_values),
        ).fetchone()
        assert (n_parent, n_both) == (r.parent_support, r.support)
        assert r.probability == pytest.approx(n_both / n_parent)
    # in the Break-Merge release the STs are unlinked: no rule workclass -> income reaches 0.99
    broken = _rules(db, f"{release_schema_of(schema)}.people_bm", risk=0.99, scope="sensitive")
    assert not (
        (broken["child"] == "income") & broken["parents"].map(lambda p: "workclass" in p)
    ).any()


def test_dependency_network_and_scopes(db, people):
    schema, _ = people
    edges = db.execute(
        "SELECT parent, child FROM anon.dependency_network(%s, scope => 'qi')",
        (f"{release_schema_of(schema)}.people_bm",),
    ).fetchall()
    assert all(p in QIS and c in QIS for p, c in edges)
    edges = db.execute(
        "SELECT parent, child FROM anon.dependency_network(%s)", (f"{release_schema_of(schema)}.people_bm",)
    ).fetchall()
    assert not any(p in SENSITIVE and c in QIS for p, c in edges)  # QIs come first
    rules = _rules(db, f"{release_schema_of(schema)}.people_bm", risk=0.5)
    assert (rules["probability"] >= 0.5).all() and (rules["parent_support"] >= 5).all()


# ---------------------------------------------------------------------------- breach


def test_breach_report(db, people):
    schema, source = people
    report = pd.DataFrame(
        db.execute(
            "SELECT * FROM anon.breach_report(%s, threshold => 0.9)", (f"{release_schema_of(schema)}.people_bm",)
        ).fetchall(),
        columns=["release_kind", "target", "known", "max", "mean", "n_above"],
    )
    plain = report[report["release_kind"] == "plain"].set_index(["target", "known"])
    bm = report[report["release_kind"] == "break_merge"].set_index(["target", "known"])
    single = [i for i in plain.index if "," not in i[0] and i[1] is not None]
    assert (bm.loc[single, "mean"] <= plain.loc[single, "mean"] + 1e-12).all()
    # plain, group only, recomputed in SQL on the Mondrian release of the same partition
    db.execute(
        "SELECT anon.mondrian_view(%s, k => 5, quasi_identifiers => %s, sensitive => %s, "
        "identifiers => ARRAY['id'], release_name => 'people_k5', release_schema => %s)",
        (source, QIS, SENSITIVE, release_schema_of(schema)),
    )
    mx, mean = db.execute(f"""
        WITH cells AS (SELECT age, sex, zip, income, count(*) AS n FROM {release_schema_of(schema)}.people_k5 GROUP BY 1, 2, 3, 4),
        classes AS (SELECT max(n)::float8 / sum(n) AS p, sum(n) AS size FROM cells GROUP BY age, sex, zip)
        SELECT max(p), sum(p * size) / sum(size) FROM classes""").fetchone()
    income = report[
        (report["release_kind"] == "plain")
        & (report["target"] == "income")
        & report["known"].isna()
    ]
    assert income["max"].item() == pytest.approx(mx) and income["mean"].item() == pytest.approx(
        mean
    )
    # Break-Merge rows come from the STs: with l = 2 no group is certain of income
    bm_income = report[
        (report["release_kind"] == "break_merge")
        & (report["target"] == "income")
        & report["known"].isna()
    ]
    assert bm_income["max"].item() < 1


def test_attack_break_merge_does_not_help_the_adversary(db, connect, people):
    """The paper's adversary: knows a target's QIs and workclass, reads only what an analyst can
    read (the plain Mondrian release, or the QIT and the STs), guesses income / marital status."""
    schema, source = people
    db.execute(
        "SELECT anon.mondrian_view(%s, k => 5, quasi_identifiers => %s, sensitive => %s, "
        "identifiers => ARRAY['id'], release_name => 'people_k5', release_schema => %s)",
        (source, QIS, SENSITIVE, release_schema_of(schema)),
    )
    role = f"{schema}_analyst"[:63]
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        db.execute("SELECT anon.grant_analyst(%s)", (role,))  # what every analyst gets
        # background knowledge of the adversary: each target's QIs and workclass
        knowledge = db.execute(
            f"SELECT id, age, sex, zip, workclass FROM {source} ORDER BY id"
        ).fetchall()
        truth = pd.DataFrame(
            db.execute(f"SELECT income, marital_status FROM {source} ORDER BY id").fetchall(),
            columns=["income", "marital_status"],
        )
        with connect(user=role) as analyst:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                analyst.execute(f"SELECT * FROM {source}")
            targets, plain, qit, sts = _adversary_view(analyst, schema, knowledge)
        targets = pd.concat([targets.sort_values("id").reset_index(drop=True), truth], axis=1)
        for target in ("income", "marital_status"):
            plain_rate = attack_plain(plain, targets, QIS, "workclass", target).mean()
            bm_rate = attack_break_merge(qit, sts, targets, QIS, "workclass", target).mean()
            assert bm_rate <= plain_rate + 1e-12
        # income is a function of workclass for 40% of the people: plain cracks them, BM cannot
        assert (
            attack_plain(plain, targets, QIS, "workclass", "income").mean()
            > attack_break_merge(qit, sts, targets, QIS, "workclass", "income").mean() + 0.05
        )
    finally:
        db.execute("SELECT anon.revoke_analyst(%s)", (role,))
        db.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def _adversary_view(analyst, schema, knowledge):
    """Everything read as the analyst: locate each target's class by containment of its QIs."""
    analyst.execute(
        "CREATE TEMP TABLE knowledge (id int, age int, sex text, zip text, workclass text)"
    )
    with analyst.cursor().copy("COPY knowledge FROM STDIN") as copy:
        for row in knowledge:
            copy.write_row(row)
    as_text = "age::text AS age, sex::text AS sex, zip::text AS zip"
    targets = pd.DataFrame(
        analyst.execute(f"""
        SELECT k.id, c.age::text, c.sex::text, c.zip::text, k.workclass
        FROM knowledge k JOIN (SELECT DISTINCT age, sex, zip FROM {release_schema_of(schema)}.people_k5) c
          ON k.age <@ c.age AND k.sex = ANY (c.sex) AND k.zip = ANY (c.zip)""").fetchall(),
        columns=["id", *QIS, "workclass"],
    )
    plain = pd.DataFrame(
        analyst.execute(
            f"SELECT {as_text}, workclass, marital_status, income FROM {release_schema_of(schema)}.people_k5"
        ).fetchall(),
        columns=[*QIS, *SENSITIVE],
    )
    qit = pd.DataFrame(
        analyst.execute(f"SELECT {as_text}, gid FROM {release_schema_of(schema)}.people_bm_qit").fetchall(),
        columns=[*QIS, "gid"],
    )
    sts = {
        a: pd.DataFrame(
            analyst.execute(f"SELECT gid, value, count FROM {release_schema_of(schema)}.people_bm_st_{a}").fetchall(),
            columns=["gid", "value", "count"],
        )
        for a in SENSITIVE
    }
    return targets, plain, qit, sts


# ---------------------------------------------------------------------------- bad input


def test_sensitive_column_that_is_also_a_qi(db, schema):
    source = _load(db, schema, _people(50))
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="both"):
        db.execute(
            "SELECT anon.break_merge(%s, k => 5, sensitive => ARRAY['sex','income'], "
            "quasi_identifiers => ARRAY['age','sex'], release_schema => %s)",
            (source, release_schema_of(schema)),
        )


def test_l_larger_than_distinct_values(db, schema):
    source = _load(db, schema, _people(50))
    with pytest.raises(psycopg.errors.DataException, match="income") as error:
        _break(db, schema, source, l=3)
    assert "l <= 2" in error.value.diag.message_hint
    assert "spiexceptions" not in error.value.diag.message_primary  # refused before building


def test_release_that_does_not_exist(db, schema):
    for call in (
        "anon.detect_dependencies(%s)",
        "anon.breach_report(%s)",
        "anon.dependency_network(%s)",
    ):
        with pytest.raises(psycopg.errors.UndefinedObject, match="does not exist"):
            db.execute(f"SELECT * FROM {call}", ("no_such_release",))


def test_many_valued_sensitive_column_is_refused(db, schema):
    db.execute(
        f"CREATE TABLE {schema}.pay AS SELECT g AS id, 20 + g % 50 AS age, "
        f"(g * 37) % 5000 AS salary FROM generate_series(1, 6000) g"
    )
    with pytest.raises(psycopg.errors.DatatypeMismatch, match="distinct values") as error:
        db.execute(
            "SELECT anon.break_merge(%s, k => 5, sensitive => ARRAY['salary'], "
            "quasi_identifiers => ARRAY['age'], identifiers => ARRAY['id'], release_schema => %s)",
            (f"{schema}.pay", release_schema_of(schema)),
        )
    assert "bucket" in error.value.diag.message_hint
    assert "spiexceptions" not in error.value.diag.message_primary


def test_unknown_scope(db, people):
    schema, _ = people
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="scope"):
        db.execute(
            "SELECT * FROM anon.detect_dependencies(%s, scope => 'everything')",
            (f"{release_schema_of(schema)}.people_bm",),
        )


def test_breach_report_of_a_mondrian_release_matches_the_plain_rows(db, people):
    """Two independent paths: the Mondrian release's rows grouped by their QIs, and Break-Merge's
    re-partition of the source; same partition, so the same plain figures."""
    schema, source = people
    db.execute(
        "SELECT anon.mondrian_view(%s, k => 5, quasi_identifiers => %s, sensitive => %s, "
        "identifiers => ARRAY['id'], release_name => 'people_k5', release_schema => %s)",
        (source, QIS, SENSITIVE, release_schema_of(schema)),
    )
    query = "SELECT * FROM anon.breach_report(%s) ORDER BY target, known NULLS FIRST"
    from_mondrian = db.execute(query, (f"{release_schema_of(schema)}.people_k5",)).fetchall()
    from_bm = [r for r in db.execute(query, (f"{release_schema_of(schema)}.people_bm",)).fetchall() if r[0] == "plain"]
    assert {r[0] for r in from_mondrian} == {"plain"}
    assert len(from_mondrian) == len(from_bm) == 12
    for a, b in zip(from_mondrian, from_bm):
        assert a[:3] == b[:3] and a[5] == b[5]
        assert a[3] == pytest.approx(b[3]) and a[4] == pytest.approx(b[4])


# ---------------------------------------------------------------------------- max_rule_probability

ALPHA = 0.9


def _readable_rules(db, schema, name, alpha, k=5, most=2):
    """The rules a reader counts, computed here from the release's merge view (a path the
    product's check does not take: it joins the QIT and the STs): for every antecedent of 1..most
    released QI values with at least k rows and every sensitive value that is not NULL, the
    value's share of the antecedent's weight whose value is known. Those reaching alpha,
    strongest first."""
    merged = _rel(schema, f"{name}_merged")
    found = []
    for r in range(1, most + 1):
        for columns in combinations(QIS, r):
            keys = ", ".join(f'"{c}"' for c in columns)
            for attribute in SENSITIVE:
                rows = db.execute(
                    f'SELECT {keys}, "{attribute}", sum(weight) / nullif(sum(sum(weight)) '
                    f'FILTER (WHERE "{attribute}" IS NOT NULL) OVER w, 0), '
                    f"sum(sum(weight)) OVER w FROM {merged} GROUP BY {keys}, \"{attribute}\" "
                    f"WINDOW w AS (PARTITION BY {keys})").fetchall()
                found += [(columns, row[:r], attribute, row[r], float(row[r + 1]))
                          for row in rows
                          if row[r] is not None and row[r + 1] is not None
                          and row[r + 1] >= alpha - 1e-12
                          and row[r + 2] >= k - 1e-9]
    return sorted(found, key=lambda f: -f[4])


def _planted(n=800, seed=3):
    """The issue's leak, planted on a QI a network can read with few rows: zip 13000 -> income
    '<=50K' always (a fifth of the rows)."""
    frame = _people(n, seed)
    frame.loc[frame["zip"] == "13000", "income"] = "<=50K"
    return frame


def _break_alpha(db, schema, source, alpha, name="people_bm", l=None):
    return db.execute(
        "SELECT anon.break_merge(%s, k => 5, l => %s, sensitive => %s, quasi_identifiers => %s, "
        "identifiers => ARRAY['id'], max_rule_probability => %s, release_name => %s, "
        "release_schema => %s)",
        (source, l, SENSITIVE, QIS, alpha, name, release_schema_of(schema)),
    ).fetchone()[0]


def test_planted_rule_is_readable_without_max_rule_probability(db, schema):
    """Proves the test below can fail: the plain Break-Merge release leaks the planted rule."""
    source = _load(db, schema, _planted())
    _break_alpha(db, schema, source, None)
    rules = _readable_rules(db, schema, "people_bm", ALPHA)
    assert any(r[2] == "income" and r[3] == "<=50K" and "zip" in r[0] for r in rules), rules


def test_max_rule_probability_leaves_no_qi_to_sa_rule(db, schema):
    source = _load(db, schema, _planted())
    _break_alpha(db, schema, source, ALPHA)
    assert _readable_rules(db, schema, "people_bm", ALPHA, most=len(QIS)) == []
    check_invariants(db, schema, source, k=5, l=1)  # k still holds
    # the residual rules are in the catalog, all below alpha, and the merges are counted
    (check,) = db.execute(
        "SELECT metrics -> 'rule_check' FROM anon.releases WHERE release_schema = %s "
        "AND release_name = 'people_bm'", (release_schema_of(schema),)).fetchone()
    assert check["max_rule_probability"] == ALPHA
    assert check["rules_before"] >= 1 and check["gids_merged"] >= 1
    assert all(r["probability"] < ALPHA for r in check["residual_rules"])
    # the residual rules are the strongest a reader counts on the release
    found = _readable_rules(db, schema, "people_bm", 0.0, most=len(QIS))
    assert [round(f[4], 6) for f in found[:len(check["residual_rules"])]] == [
        round(r["probability"], 6) for r in check["residual_rules"]]


def _largest_class_shares(db, schema, name="people_bm"):
    """Per sensitive attribute, the largest share of one known value in any QI class, computed
    from the released QIT and STs alone: a class's rows in each gid stand for that gid's ST
    shares (what an attacker who knows a target's QI values, hence his class, can read)."""
    qit = _rel(schema, f"{name}_qit")
    key = "ROW(" + ", ".join(f'q."{c}"' for c in QIS) + ")::text"
    largest = {}
    for attribute in SENSITIVE:
        st = _rel(schema, f"{name}_st_{attribute}")
        (largest[attribute],) = db.execute(f"""
            WITH c AS (SELECT {key} AS class, q.gid, count(*)::float8 AS n
                       FROM {qit} AS q GROUP BY 1, 2),
                 g AS (SELECT gid, sum(count)::float8 AS total FROM {st} GROUP BY gid),
                 v AS (SELECT c.class, s.value, sum(c.n * s.count / g.total) AS rows
                       FROM c JOIN {st} AS s USING (gid) JOIN g USING (gid)
                       WHERE s.value IS NOT NULL GROUP BY 1, 2)
            SELECT max(rows / known) FROM v
            JOIN (SELECT class, sum(rows) AS known FROM v GROUP BY class) AS t USING (class)
            """).fetchone()
    return largest


def _decided_by_all_qis(n=800, seed=4):
    """Income decided by the parity of age decade, sex and zip together: every single QI value and
    every pair of them sees both incomes in shares of 0.4 to 0.6, but a class of one age, sex
    and zip (four ages: the classes are that fine) holds one income only."""
    frame = _people(n, seed)
    frame["age"] = np.random.default_rng(seed).choice([25, 35, 45, 55], n)
    zip_index = frame["zip"].map({"13000": 0, "13500": 1, "14000": 0, "22000": 1, "23000": 0})
    odd = (frame["age"] // 10 + (frame["sex"] == "F") + zip_index) % 2 == 1
    frame["income"] = np.where(odd, ">50K", "<=50K")
    return frame


def test_no_qi_class_shows_a_sensitive_value_at_max_rule_probability(db, schema):
    """The breach of an attacker who knows a target's QI class is bounded by alpha: in every class
    of the released QIT, no known sensitive value holds alpha of the rows, although no rule of one
    or two QI values reaches alpha."""
    source = _load(db, schema, _decided_by_all_qis())
    _break_alpha(db, schema, source, ALPHA)
    largest = _largest_class_shares(db, schema)
    assert all(share < ALPHA for share in largest.values()), largest
    breach = db.execute("SELECT target, max_probability FROM anon.breach_report(%s) "
                        "WHERE release_kind = 'break_merge' AND known IS NULL",
                        (_rel(schema, "people_bm"),)).fetchall()
    assert breach and all(p < ALPHA for _, p in breach), breach
    (check,) = db.execute(
        "SELECT metrics -> 'rule_check' FROM anon.releases WHERE release_schema = %s "
        "AND release_name = 'people_bm'", (release_schema_of(schema),)).fetchone()
    assert check["antecedent_sizes"] == [1, 2, 3]
    for attribute in SENSITIVE:  # the cost, as the share of the classes' own detail kept
        assert 0 <= check["class_detail_kept"][attribute] \
            <= check["class_detail_kept_before"][attribute] <= 1


def test_max_rule_probability_below_a_base_rate_is_refused(db, schema):
    frame = _planted()
    frame["workclass"] = np.where(np.arange(len(frame)) % 20 == 0, "Gov", "Private")  # 95%
    source = _load(db, schema, frame)
    with pytest.raises(psycopg.Error) as err:
        _break_alpha(db, schema, source, ALPHA)
    assert err.value.sqlstate == "22000"
    assert "workclass = 'Private'" in str(err.value) and "0.950" in str(err.value)
    assert "max_rule_probability above 0.950" in err.value.diag.message_hint
    (n,) = db.execute("SELECT count(*) FROM anon.releases WHERE release_schema = %s",
                      (release_schema_of(schema),)).fetchone()
    assert n == 0


def test_max_rule_probability_out_of_range(db, schema):
    source = _load(db, schema, _planted(100))
    with pytest.raises(psycopg.Error) as err:
        _break_alpha(db, schema, source, 1.0)
    assert err.value.sqlstate == "22023" and "max_rule_probability" in str(err.value)


def test_refresh_reapplies_max_rule_probability(db, schema):
    source = _load(db, schema, _planted())
    release = _break_alpha(db, schema, source, ALPHA)
    # new rows with a fresh planted rule: sex 'X' -> marital_status 'Widowed' always
    extra = _planted(300, seed=9)
    extra["id"] += 10_000
    extra["sex"], extra["marital_status"] = "X", "Widowed"
    added = _load(db, schema, extra, name="extra")
    db.execute(f"INSERT INTO {source} SELECT * FROM {added}")
    db.execute("SELECT anon.refresh(%s)", (release,))
    assert _readable_rules(db, schema, "people_bm", ALPHA) == []
    (n,) = db.execute(f"SELECT count(*) FROM {_rel(schema, 'people_bm_qit')}").fetchone()
    assert n == 1100


def test_refresh_that_cannot_honour_max_rule_probability_fails_and_keeps_the_release(db, schema):
    source = _load(db, schema, _planted())
    release = _break_alpha(db, schema, source, ALPHA)
    before = db.execute(f"SELECT * FROM {release} ORDER BY 1, 2, 3, 4, 5, 6, 7").fetchall()
    db.execute(f"UPDATE {source} SET workclass = 'Private' WHERE id % 20 <> 0")
    with pytest.raises(psycopg.Error) as err:
        db.execute("SELECT anon.refresh(%s)", (release,))
    assert err.value.sqlstate == "22000" and "max_rule_probability" in str(err.value)
    assert db.execute(f"SELECT * FROM {release} ORDER BY 1, 2, 3, 4, 5, 6, 7").fetchall() == before
    (last_error,) = db.execute(
        "SELECT last_error FROM anon.releases WHERE release_schema = %s AND release_name = "
        "'people_bm'", (release_schema_of(schema),)).fetchone()
    assert "max_rule_probability" in last_error
