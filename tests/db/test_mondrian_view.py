"""anon.mondrian_view against a real PostgreSQL: every property is checked from the released rows
with SQL that shares no code with the extension (tests/helpers.py)."""
from __future__ import annotations

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from tests.helpers import (
    class_sizes,
    distinct_sensitive_per_class,
    matview,
    release_columns,
    release_schema_of,
)

PATIENTS = """
CREATE TABLE patients (id int PRIMARY KEY, name text, age int, sex text, zip text,
                       born date, weight numeric, seen timestamp, diagnosis text);
INSERT INTO patients
SELECT i, 'name ' || i, 18 + (i * 37) % 70, CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END,
       (53700 + (i * 13) % 40)::text, DATE '1950-01-01' + (i * 97) % 20000,
       40 + ((i * 53) % 600) / 10.0, TIMESTAMP '2024-01-01' + make_interval(hours => (i * 7) % 5000),
       (ARRAY['flu', 'hiv', 'cancer', 'asthma', 'gout'])[1 + (i * 7) % 5]
FROM generate_series(1, 300) i;
"""


def mondrian(db, schema, table="patients", **kwargs):
    args = [sql.SQL("{} => {}").format(sql.Identifier(k), sql.Literal(v)) for k, v in kwargs.items()]
    args.append(sql.SQL("release_schema => {}").format(sql.Literal(release_schema_of(schema))))
    query = sql.SQL("SELECT anon.mondrian_view({}, {})").format(
        sql.Literal(f'"{schema}".{table}'), sql.SQL(", ").join(args))
    return db.execute(query).fetchone()[0]


@pytest.fixture
def patients(db, schema):
    db.execute(PATIENTS)
    db.execute("SELECT anon.set_column_role('patients', 'name', 'identifier')")
    db.execute("SELECT anon.set_column_role('patients', 'diagnosis', 'sensitive')")
    return "patients"


def catalog_row(db, release):
    """(row_count, achieved_k, refreshed_at) of a release."""
    return db.execute("SELECT row_count, achieved_k, refreshed_at FROM anon.releases "
                      "WHERE format('%%I.%%I', release_schema, release_name) = %s", (release,)).fetchone()


QIS = ["age", "sex", "zip", "born", "weight", "seen"]


def test_release_is_k_anonymous_and_keeps_every_row(db, schema, patients):
    release = mondrian(db, schema, k=5)
    assert release == f"{release_schema_of(schema)}.patients_k5"
    sizes = class_sizes(db, release, QIS)
    assert min(sizes) >= 5
    assert sum(sizes) == 300
    row = db.execute("SELECT row_count, achieved_k, metrics FROM anon.releases "
                     "WHERE release_schema = %s", (release_schema_of(schema),)).fetchone()
    assert row[0] == 300
    assert row[1] == min(sizes)                       # the catalog's k is the released k
    assert row[2]["n_classes"] == len(sizes)
    assert row[2]["c_dm"] == sum(s * s for s in sizes)
    assert 0 < row[2]["ncp_percent"] < 100


def test_columns_are_dropped_generalized_or_kept_by_role(db, schema, patients):
    release = mondrian(db, schema, k=5)
    assert release_columns(db, release) == [
        ("age", "int4range"), ("sex", "text[]"), ("zip", "text[]"), ("born", "daterange"),
        ("weight", "numrange"), ("seen", "tsrange"), ("diagnosis", "text")]
    # id (primary key: identifier by default) and name (declared identifier) are gone
    released = {r[0] for r in db.execute(f"SELECT DISTINCT diagnosis FROM {release}").fetchall()}
    assert released == {"flu", "hiv", "cancer", "asthma", "gout"}


def test_generalized_values_contain_originals_with_tightest_bounds(db, schema, patients):
    # keep id as a "sensitive" column so each released row can be joined back to its source row
    release = mondrian(db, schema, k=4, sensitive=["id", "diagnosis"])
    bad = db.execute(f"""
        SELECT count(*) FROM {release} r JOIN patients p USING (id)
        WHERE NOT (r.age @> p.age AND p.sex = ANY(r.sex) AND p.zip = ANY(r.zip)
                   AND r.born @> p.born AND r.weight @> p.weight AND r.seen @> p.seen)""").fetchone()[0]
    assert bad == 0
    loose = db.execute(f"""
        SELECT count(*) FROM (
            SELECT r.age, r.sex, min(p.age) lo, max(p.age) hi, array_agg(DISTINCT p.sex ORDER BY p.sex) sexes
            FROM {release} r JOIN patients p USING (id) GROUP BY r.age, r.sex, r.zip, r.born, r.weight, r.seen) c
        WHERE lower(c.age) <> c.lo OR upper(c.age) <> c.hi + 1 OR c.sex <> c.sexes""").fetchone()[0]
    assert loose == 0


def test_release_order_keeps_no_trace_of_source_order(db, schema):
    # ages rise with insertion order: classes are ordered in the source, so an ordered release
    # would let row position point at a person.
    db.execute("CREATE TABLE seq (id int, age int, s text)")
    db.execute("INSERT INTO seq SELECT i, i / 3, 'v' || i % 4 FROM generate_series(1, 3000) i")
    release = mondrian(db, schema, table="seq", k=5, quasi_identifiers=["age"], sensitive=["id", "s"])
    ids = [r[0] for r in db.execute(f"SELECT id FROM {release}").fetchall()]   # physical order
    n = len(ids)
    rank_of = {v: i for i, v in enumerate(sorted(ids))}
    d2 = sum((i - rank_of[v]) ** 2 for i, v in enumerate(ids))
    spearman = 1 - 6 * d2 / (n * (n * n - 1))
    assert abs(spearman) < 0.2, spearman         # ~600 classes: |rho| > 0.2 is a 5-sigma event


def test_release_rows_come_grouped_by_class(db, schema, patients):
    """The Mondrian family hands SQL the rows in release order and only each class's size
    (anon.partition_slice's class_sizes): the released rows of a class are consecutive, so
    the class sizes were decoded in step with the ctids (an off-by-one would split classes)."""
    release = mondrian(db, schema, k=5)
    cols = ", ".join(QIS)
    runs, classes = db.execute(f"""
        WITH r AS (SELECT row_number() OVER () AS i, ROW({cols})::text AS class FROM {release}),
        starts AS (SELECT class, i, lag(class) OVER (ORDER BY i) IS DISTINCT FROM class AS new FROM r)
        SELECT count(*) FILTER (WHERE new), count(DISTINCT class) FROM starts""").fetchone()
    assert classes > 10
    assert runs == classes


def test_release_metrics_record_the_backend_memory_of_each_phase(db, schema, patients):
    release = mondrian(db, schema, k=5)
    memory = db.execute("SELECT metrics->'memory_mib' FROM anon.releases "
                        "WHERE format('%%I.%%I', release_schema, release_name) = %s",
                        (release,)).fetchone()[0]
    assert set(memory) == {"start", "read", "fit", "publish"}
    for phase in memory.values():
        assert 0 < phase["rss"] <= phase["peak"]
    assert memory["start"]["peak"] <= memory["publish"]["peak"]


def test_analysts_query_ranges_and_sets(db, schema, patients):
    release = mondrian(db, schema, k=5)
    n = db.execute(f"SELECT count(*) FROM {release} WHERE age @> 42 AND 'F' = ANY(sex)").fetchone()[0]
    upper = db.execute("SELECT count(*) FROM patients WHERE sex = 'F'").fetchone()[0]
    assert 0 < n <= upper


@pytest.mark.parametrize("l", [2, 3, 4])
def test_l_diversity(db, schema, patients, l):
    release = mondrian(db, schema, k=5, l=l)
    assert min(distinct_sensitive_per_class(db, release, QIS, "diagnosis")) >= l
    assert min(class_sizes(db, release, QIS)) >= 5


def test_unreachable_l_names_the_sensitive_column(db, schema, patients):
    """Five diagnoses cannot make l = 6: the refusal says which column (it said "sensitive
    column 0"), and nothing is created."""
    with pytest.raises(psycopg.errors.DataException,
                       match="sensitive column 'diagnosis' has 5 distinct values that are not NULL; l = 6") as error:
        mondrian(db, schema, k=5, l=6)
    assert "l <= 5" in error.value.diag.message_hint
    assert db.execute("SELECT count(*) FROM anon.releases WHERE source = 'patients'::regclass"
                      ).fetchone()[0] == 0


def test_default_roles_without_declarations(db, schema):
    db.execute("CREATE TABLE people (id serial PRIMARY KEY, email text UNIQUE, age int, city text)")
    db.execute("INSERT INTO people (email, age, city) SELECT 'u' || i || '@x', 20 + i % 50, "
               "(ARRAY['Oslo','Bergen','Molde'])[1 + i % 3] FROM generate_series(1, 60) i")
    roles = dict(db.execute("SELECT column_name, role FROM anon.column_roles('people')").fetchall())
    assert roles == {"id": "identifier", "email": "identifier", "age": "quasi_identifier",
                     "city": "quasi_identifier"}
    release = mondrian(db, schema, table="people", k=3)
    assert [c for c, _ in release_columns(db, release)] == ["age", "city"]
    assert min(class_sizes(db, release, ["age", "city"])) >= 3


def test_call_arguments_override_declarations(db, schema, patients):
    release = mondrian(db, schema, k=5, quasi_identifiers=["age", "sex"], sensitive=["diagnosis"],
                       release_name="two_qis")
    assert [c for c, _ in release_columns(db, release)] == ["age", "sex", "diagnosis"]
    assert min(class_sizes(db, release, ["age", "sex"])) >= 5


def test_null_quasi_identifiers_are_values_of_their_own(db, schema):
    db.execute("CREATE TABLE t (a int, b text, s text)")
    db.execute("INSERT INTO t SELECT CASE WHEN i % 4 = 0 THEN NULL ELSE i % 30 END, "
               "CASE WHEN i % 5 = 0 THEN NULL ELSE 'v' || (i % 3) END, 'x' || (i % 4) "
               "FROM generate_series(1, 120) i")
    release = mondrian(db, schema, table="t", k=4, sensitive=["s"])
    sizes = class_sizes(db, release, ["a", "b"])
    assert min(sizes) >= 4 and sum(sizes) == 120
    with_null = db.execute(f"SELECT count(*) FROM {release} WHERE array_position(b, NULL) IS NOT NULL").fetchone()[0]
    assert with_null >= 24                            # the 24 NULL b values are released as NULL members


def test_hierarchy_generalizes_to_common_ancestors(db, schema):
    db.execute("CREATE TABLE w (id int, job text, age int)")
    db.execute("INSERT INTO w SELECT i, (ARRAY['Private','Self-emp-inc','Self-emp-not-inc','Federal-gov',"
               "'Local-gov','State-gov'])[1 + (i * 7) % 6], 20 + i % 40 FROM generate_series(1, 240) i")
    csv = ("Private;Private;*\nSelf-emp-inc;Self-employ;*\nSelf-emp-not-inc;Self-employ;*\n"
           "Federal-gov;Government;*\nLocal-gov;Government;*\nState-gov;Government;*\n")
    assert db.execute("SELECT anon.set_hierarchy_csv('w', 'job', %s)", (csv,)).fetchone()[0] == 6
    release = mondrian(db, schema, table="w", k=10, quasi_identifiers=["job", "age"], sensitive=["id"])
    assert dict(release_columns(db, release))["job"] == "text"
    nodes = {r[0] for r in db.execute(f"SELECT DISTINCT job FROM {release}").fetchall()}
    allowed = {"Private", "Self-emp-inc", "Self-emp-not-inc", "Federal-gov", "Local-gov",
               "State-gov", "Self-employ", "Government", "*"}
    assert nodes <= allowed
    children = {"Self-employ": {"Self-emp-inc", "Self-emp-not-inc"},
                "Government": {"Federal-gov", "Local-gov", "State-gov"}}
    for released, original in db.execute(f"SELECT r.job, w.job FROM {release} r JOIN w USING (id)").fetchall():
        assert released in ("*", original) or original in children.get(released, ())


def test_prefix_hierarchy_masks_codes_truthfully(db, schema):
    """anon.set_hierarchy_prefix: each released code is its own value masked from the right."""
    db.execute("CREATE TABLE z (id int, zip text, age int)")
    db.execute("INSERT INTO z SELECT i, (ARRAY['53706','53711','53715','53001','60601','60614',"
               "'606'])[1 + (i * 5) % 7], 20 + i % 30 FROM generate_series(1, 210) i")
    assert db.execute("SELECT anon.set_hierarchy_prefix('z', 'zip')").fetchone()[0] == 7
    paths = dict(db.execute("SELECT leaf, path FROM anon.hierarchies WHERE source = 'z'::regclass")
                 .fetchall())
    assert paths["53706"] == ["53706", "5370*", "537**", "53***", "5****", "*****", "*"]
    assert paths["606"] == ["606", "60*", "6**", "***", "*"]
    release = mondrian(db, schema, table="z", k=10, quasi_identifiers=["zip", "age"],
                       sensitive=["id"])
    assert min(class_sizes(db, release, ["zip", "age"])) >= 10
    released = db.execute(f"SELECT r.zip, z.zip FROM {release} r JOIN z USING (id)").fetchall()
    assert len(released) == 210
    for label, original in released:
        kept = label.rstrip("*")
        assert label == "*" or (len(label) == len(original) and original.startswith(kept)), label
    assert any(label != original for label, original in released)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="not one character"):
        db.execute("SELECT anon.set_hierarchy_prefix('z', 'zip', mask => '**')")


def test_a_file_name_given_as_hierarchy_csv_is_a_clear_error(db, schema):
    db.execute("CREATE TABLE w (job text)")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="not a file name") as info:
        db.execute("SELECT anon.set_hierarchy_csv('w', 'job', 'missing.csv')")
    assert "pg_read_file" in info.value.diag.message_hint


def test_hierarchy_that_misses_a_value_is_refused(db, schema):
    db.execute("CREATE TABLE w (job text)")
    db.execute("INSERT INTO w VALUES ('Private'), ('Never-worked')")
    with pytest.raises(psycopg.errors.UndefinedObject, match="Never-worked"):
        db.execute("SELECT anon.set_hierarchy('w', 'job', ARRAY[['Private', '*']])")
    assert db.execute("SELECT count(*) FROM anon.hierarchies WHERE source = 'w'::regclass").fetchone()[0] == 0


def test_refresh_reanonymizes_current_data(db, schema, patients):
    release = mondrian(db, schema, k=5)
    db.execute("INSERT INTO patients SELECT id + 1000, name, age, sex, zip, born, weight, seen, diagnosis "
               "FROM patients WHERE id <= 100")
    db.execute(f"REFRESH MATERIALIZED VIEW {matview(db, release)}")
    sizes = class_sizes(db, release, QIS)
    assert sum(sizes) == 400 and min(sizes) >= 5
    assert catalog_row(db, release)[0] == 400         # row_count followed the plain REFRESH
    row = db.execute("SELECT (anon.refresh(%s)).row_count", (release,)).fetchone()
    assert row[0] == 400


def test_failed_refresh_keeps_previous_release(db, schema, patients):
    release = mondrian(db, schema, k=5)
    before = db.execute(f"SELECT count(*) FROM {release}").fetchone()[0]
    db.execute("DELETE FROM patients WHERE id > 3")
    with pytest.raises(psycopg.errors.DataException, match="fewer than k = 5"):
        db.execute(f"REFRESH MATERIALIZED VIEW {matview(db, release)}")
    assert db.execute(f"SELECT count(*) FROM {release}").fetchone()[0] == before


@pytest.mark.parametrize("k, error, message", [
    (None, psycopg.errors.InvalidParameterValue, "k must not be NULL"),
    (1, psycopg.errors.InvalidParameterValue, "at least 2"),
    (0, psycopg.errors.InvalidParameterValue, "at least 2"),
    (301, psycopg.errors.DataException, "300 rows, fewer than k = 301"),
])
def test_bad_k_is_refused_and_leaves_nothing(db, schema, patients, k, error, message):
    with pytest.raises(error, match=message):
        mondrian(db, schema, k=k)
    assert_nothing_left(db, schema)


def assert_nothing_left(db, schema):
    assert db.execute("SELECT count(*) FROM anon.releases WHERE release_schema = %s", (release_schema_of(schema),)).fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM pg_matviews WHERE schemaname = %s", (schema,)).fetchone()[0] == 0


def test_unknown_table_and_column(db, schema, patients):
    with pytest.raises(psycopg.errors.UndefinedTable):
        db.execute("SELECT anon.mondrian_view('no_such_table', k => 5)")
    with pytest.raises(psycopg.errors.UndefinedObject, match='column "agee" does not exist'):
        mondrian(db, schema, k=5, quasi_identifiers=["agee"])
    assert_nothing_left(db, schema)


def test_empty_table(db, schema):
    db.execute("CREATE TABLE e (a int, b text)")
    with pytest.raises(psycopg.errors.DataException, match="is empty"):
        mondrian(db, schema, table="e", k=2)
    assert_nothing_left(db, schema)


def test_column_that_cannot_be_generalized(db, schema):
    db.execute("CREATE TABLE j (a int, doc jsonb)")
    db.execute("INSERT INTO j SELECT i, '{}' FROM generate_series(1, 10) i")
    with pytest.raises(psycopg.errors.DatatypeMismatch, match='"doc" .* type jsonb') as info:
        mondrian(db, schema, table="j", k=2)
    assert "set_column_role" in info.value.diag.message_hint
    assert_nothing_left(db, schema)
    assert mondrian(db, schema, table="j", k=2, quasi_identifiers=["a"])


def test_existing_name_needs_replace(db, schema, patients):
    release = mondrian(db, schema, k=5)
    with pytest.raises(psycopg.errors.DuplicateObject, match="already exists") as info:
        mondrian(db, schema, k=5)
    assert "replace => true" in info.value.diag.message_hint
    assert mondrian(db, schema, k=5, replace=True, quasi_identifiers=["age"]) == release
    assert [c for c, _ in release_columns(db, release)] == ["age", "diagnosis"]
    assert db.execute("SELECT count(*) FROM anon.releases WHERE release_schema = %s", (release_schema_of(schema),)).fetchone()[0] == 1


def test_never_replaces_a_relation_it_did_not_create(db, schema, patients):
    mondrian(db, schema, k=5)                      # plpy_anon creates the release schema
    precious = f"{release_schema_of(schema)}.precious"
    db.execute(f"CREATE TABLE {precious} (x int)")
    for replace in (False, True):
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="holds table .*precious"):
            mondrian(db, schema, k=5, release_name="precious", replace=replace)
    assert db.execute("SELECT to_regclass(%s) IS NOT NULL", (precious,)).fetchone()[0]


def test_names_needing_quotes_and_injection_attempts(db, schema):
    db.execute('CREATE TABLE "Patient ""Records""" ("Age Years" int, "Sex;--" text, "d\'x" text)')
    db.execute('INSERT INTO "Patient ""Records""" SELECT 20 + i % 30, CASE WHEN i % 2 = 0 THEN \'F\' '
               'ELSE \'M\' END, \'v\' || i % 3 FROM generate_series(1, 50) i')
    db.execute("CREATE TABLE canary (x int)")
    evil = 'x"; DROP TABLE canary; --'
    release = db.execute(
        "SELECT anon.mondrian_view(%s::regclass, k => 5, sensitive => ARRAY[%s], release_name => %s, "
        "release_schema => %s)", (f'"{schema}"."Patient ""Records"""', "d'x", evil, release_schema_of(schema))).fetchone()[0]
    assert db.execute("SELECT to_regclass('canary') IS NOT NULL").fetchone()[0]
    cols = [c for c, _ in release_columns(db, release)]
    assert cols == ["Age Years", "Sex;--", "d'x"]
    assert min(class_sizes(db, release, ["Age Years", "Sex;--"])) >= 5
    # messages name the table as SQL would (they printed Patient "Records", ambiguous)
    with pytest.raises(psycopg.errors.DataException) as error:
        db.execute("SELECT anon.mondrian_view(%s::regclass, k => 51, sensitive => ARRAY[%s])",
                   (f'"{schema}"."Patient ""Records"""', "d'x"))
    assert f'table {schema}."Patient ""Records""" has 50 rows, fewer than k = 51' \
        == error.value.diag.message_primary
    with pytest.raises(psycopg.errors.UndefinedObject):
        db.execute("SELECT anon.mondrian_view('canary', k => 2, quasi_identifiers => ARRAY['x); DROP TABLE canary; --'])")
    assert db.execute("SELECT to_regclass('canary') IS NOT NULL").fetchone()[0]


def test_views_are_not_sources(db, schema, patients):
    db.execute("CREATE VIEW v AS SELECT * FROM patients")
    with pytest.raises(psycopg.errors.DatatypeMismatch, match="is a view"):
        db.execute("SELECT anon.mondrian_view('v', k => 5)")


def test_drop_release(db, schema, patients):
    release = mondrian(db, schema, k=5)
    assert db.execute("SELECT anon.drop_release(%s)", (release,)).fetchone()[0] is True
    assert_nothing_left(db, schema)
    assert db.execute("SELECT anon.drop_release(%s, if_exists => true)", (release,)).fetchone()[0] is False


# ---------------------------------------------------------------- property-based, through the DB

rows_strategy = st.lists(
    st.tuples(st.one_of(st.none(), st.integers(0, 12)),          # skewed small ints with NULLs
              st.sampled_from(["a", "b", "b", "b", "c", None]),  # heavy skew
              st.sampled_from(["x", "y", "z"])),                   # sensitive
    min_size=2, max_size=80)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=rows_strategy, k=st.integers(2, 10), data=st.data())
def test_random_tables_give_k_anonymous_releases(db, schema, rows, k, data):
    k = min(k, len(rows))
    db.execute("DROP TABLE IF EXISTS r CASCADE")
    db.execute("DELETE FROM anon.releases WHERE release_schema = %s", (release_schema_of(schema),))
    db.execute("CREATE TABLE r (a int, b text, s text)")
    with db.cursor().copy("COPY r FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)
    l = data.draw(st.sampled_from([None, 2]))
    distinct_s = len({r[2] for r in rows})
    if l and distinct_s < l:
        l = None
    kwargs = {"k": k, "sensitive": ["s"]}
    if l:
        kwargs["l"] = l
    try:
        release = mondrian(db, schema, table="r", **kwargs)
    except psycopg.errors.DataException:
        assert l is not None                          # only l-diversity may be impossible
        return
    sizes = class_sizes(db, release, ["a", "b"])
    assert sum(sizes) == len(rows)
    assert min(sizes) >= k
    if l:
        assert min(distinct_sensitive_per_class(db, release, ["a", "b"], "s")) >= l
