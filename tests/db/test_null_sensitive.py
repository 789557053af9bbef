"""A NULL sensitive value is no value an attacker is unsure between (issue 29, point 1): l,
entropy, (c,l) and t count only the values that are not NULL, in the build, in the check from the
released rows and in the risk report. Every figure here is recomputed from the released rows in
SQL, as a reader of the release would (count(DISTINCT) leaves NULL out)."""
from __future__ import annotations

import psycopg
import pytest

from tests.helpers import distinct_sensitive_per_class, release_schema_of

# 50 patients: 40 with dx 'hiv', 10 with dx NULL. The l = 2 release the old code published told
# every reader the diagnosis of everyone who has one.
ONE_KNOWN_VALUE = """
CREATE TABLE patients (id int PRIMARY KEY, age int NOT NULL, zip text NOT NULL, dx text);
INSERT INTO patients SELECT i, 20 + i % 40, (ARRAY['13000', '14000'])[1 + i % 2],
                            CASE WHEN i % 5 = 0 THEN NULL ELSE 'hiv' END
FROM generate_series(1, 50) i;
SELECT anon.set_column_role('patients', 'dx', 'sensitive');
"""

# 600 rows, three diagnoses and many NULLs, NULLs clustered among the old: a cut by age that
# kept NULL as a second value would leave classes with one known value
NULL_HEAVY = """
CREATE TABLE visits (id int PRIMARY KEY, age int NOT NULL, zip text NOT NULL, dx text);
INSERT INTO visits SELECT i, 20 + i % 60, (ARRAY['13000', '13500', '14000'])[1 + i % 3],
       CASE WHEN i % 60 >= 40 AND i % 3 <> 0 THEN NULL
            ELSE (ARRAY['flu', 'asthma', 'diabetes'])[1 + (i * 7) % 3] END
FROM generate_series(1, 600) i;
SELECT anon.set_column_role('visits', 'dx', 'sensitive');
"""


def failure(db, query, params=None) -> psycopg.Error:
    with pytest.raises(psycopg.Error) as info:
        db.execute(query, params)
    return info.value


@pytest.mark.parametrize("priorities", [None, '{"age": 1, "zip": 1}'])
def test_a_table_with_one_known_value_is_refused_for_l_2(db, schema, priorities):
    db.execute(ONE_KNOWN_VALUE)
    extra = "" if priorities is None else f", priorities => '{priorities}'::jsonb"
    err = failure(db, f"SELECT anon.mondrian_view('patients', k => 5, l => 2, "
                      f"quasi_identifiers => ARRAY['age', 'zip'], "
                      f"release_schema => '{release_schema_of(schema)}'{extra})")
    assert err.sqlstate == "22000" and "1 distinct values" in str(err), str(err)
    assert db.execute("SELECT count(*) FROM anon.releases WHERE source = 'patients'::regclass"
                      ).fetchone()[0] == 0


def test_break_merge_refuses_a_table_with_one_known_value(db, schema):
    db.execute(ONE_KNOWN_VALUE)
    err = failure(db, "SELECT anon.break_merge('patients', k => 5, l => 2, "
                      "quasi_identifiers => ARRAY['age', 'zip'], "
                      f"release_schema => '{release_schema_of(schema)}')")
    assert err.sqlstate == "22000" and "l=2 is impossible" in str(err), str(err)


@pytest.mark.parametrize("l_diversity", ["distinct", "entropy", "recursive"])
def test_every_class_has_l_known_values_in_the_released_rows(db, schema, l_diversity):
    db.execute(NULL_HEAVY)
    extra = ", c => 3" if l_diversity == "recursive" else ""
    rel = db.execute(f"SELECT anon.mondrian_view('visits', k => 4, l => 2, "
                     f"l_diversity => '{l_diversity}'{extra}, "
                     f"quasi_identifiers => ARRAY['age', 'zip'], "
                     f"release_schema => '{release_schema_of(schema)}')").fetchone()[0]
    known = distinct_sensitive_per_class(db, rel, ["age", "zip"], "dx")
    assert min(known) >= 2, sorted(known)[:5]
    nulls = db.execute(f"SELECT count(*) FROM {rel} WHERE dx IS NULL").fetchone()[0]
    assert nulls > 0                          # the NULL rows are released, just not counted
    # the figures the catalog and the risk report give are the attacker's, not NULL-inflated
    figures = db.execute("SELECT verification->'l_by_column'->>'dx' FROM anon.releases "
                         "WHERE format('%%I.%%I', release_schema, release_name) = %s",
                         (rel,)).fetchone()[0]
    if l_diversity == "distinct":
        assert int(figures) == min(known)
    report = db.execute("SELECT value FROM anon.risk_report(%s) "
                        "WHERE measure = 'distinct_l' AND column_name = 'dx'", (rel,)).fetchone()[0]
    assert report == min(known)


def test_break_merge_groups_have_l_known_values(db, schema):
    db.execute(NULL_HEAVY)
    rel = db.execute(f"SELECT anon.break_merge('visits', k => 4, l => 2, "
                     f"quasi_identifiers => ARRAY['age', 'zip'], identifiers => ARRAY['id'], "
                     f"release_schema => '{release_schema_of(schema)}')").fetchone()[0]
    st = rel.rsplit(".", 1)[0] + ".visits_bm_st_dx"
    per_group = [r[0] for r in db.execute(
        f"SELECT count(DISTINCT value) FROM {st} GROUP BY gid").fetchall()]
    assert per_group and min(per_group) >= 2
    assert db.execute(f"SELECT count(*) FROM {st} WHERE value IS NULL").fetchone()[0] > 0


def test_the_risk_report_counts_a_class_of_nulls_as_no_value(db, schema):
    db.execute("CREATE TABLE r (zip text, dx text)")
    db.execute("INSERT INTO r VALUES ('1', 'a'), ('1', 'b'), ('2', NULL), ('2', NULL)")
    rows = dict(db.execute("SELECT measure, value FROM anon.risk_report('r', "
                           "quasi_identifiers => ARRAY['zip'], sensitive => ARRAY['dx'])"
                           " WHERE column_name = 'dx'").fetchall())
    assert rows["distinct_l"] == 0 and rows["recursive_cl_l"] == 0, rows


def test_a_value_the_ranking_misses_is_not_taken_for_null(db, schema):
    """citext: GROUP BY counts 'HIV' and 'hiv' as one value, while = under the check's
    search_path (pg_catalog) compares them as text; a value the ranking's join misses is still a
    value, never a NULL (it made a class of one known value count 0)."""
    db.execute(f'CREATE EXTENSION citext SCHEMA "{schema}"')
    db.execute("CREATE TABLE c (zip text, dx citext)")
    db.execute("INSERT INTO c VALUES ('1', 'HIV'), ('1', 'hiv'), ('1', 'hiv'), "
               "('2', 'flu'), ('2', 'HIV'), ('3', NULL), ('3', 'flu')")
    rows = dict(db.execute("SELECT measure, value FROM anon.risk_report('c', "
                           "quasi_identifiers => ARRAY['zip'], sensitive => ARRAY['dx'])"
                           " WHERE column_name = 'dx'").fetchall())
    per_class = sorted(distinct_sensitive_per_class(db, "c", ["zip"], "dx"))
    assert per_class == [1, 1, 2]
    assert rows["distinct_l"] == min(per_class) == 1
