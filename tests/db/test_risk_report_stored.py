"""anon.risk_report of a compact release counts its stored classes (one row per class, as the
build's check does) instead of grouping its view's rows: every figure equals the report of a
plain view over the release, which only grouping its rows can count, on several shapes (NULL
QIs and sensitive values, categorical and numeric sensitive columns, t-closeness, a QI subset
whose stored classes merge, within plpy_anon.build_memory and beyond it), and a caller who may
read the view but not the storage gets the same report through the view."""
from __future__ import annotations

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from tests.db.test_risk_report import load, report
from tests.helpers import create_release, release_schema_of

QIS = ["age", "sex", "zip"]

#: whether anon.risk_report would count ``relation`` from a compact release's stored classes, as
#: the calling role (risk_report.resolve; NULL qis / sensitive: the release's own)
READS_STORED = """
CREATE OR REPLACE FUNCTION pg_temp.reads_stored(relation text, qis text[], sensitive text[])
RETURNS boolean AS $fn$
from plpy_anon.db import risk_report
return risk_report.resolve(plpy, relation, qis, sensitive).stored is not None
$fn$ LANGUAGE plpython3u"""


def plain_view(db, release: str) -> str:
    """A plain view of every row of ``release``: anon.risk_report groups its rows."""
    name = release.split(".")[-1].strip('"') + "_plain"
    db.execute(sql.SQL("CREATE OR REPLACE VIEW {} AS SELECT * FROM {}").format(
        sql.Identifier(name), sql.SQL(release)))
    return name


def reads_stored(conn, relation: str, qis=None, sensitive=None, role=None) -> bool:
    """Whether anon.risk_report of ``relation`` reads stored classes, as ``role`` (SET ROLE:
    only a superuser may create the PL/Python function that tells)."""
    conn.execute(READS_STORED)
    if role:
        conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
    try:
        return conn.execute("SELECT pg_temp.reads_stored(%s, %s, %s)",
                            (relation, qis, sensitive)).fetchone()[0]
    finally:
        conn.execute("RESET ROLE")


def assert_same_report(db, release: str, qis, sensitive, budget=None, *,
                       released=("diagnosis", "salary"), **named):
    """The report of ``release`` equals the plain view's, figure by figure and detail by detail
    (but the label naming the relation); whether the release's was read from its stored classes.
    ``qis``, ``sensitive``: the report's (None: the release's own, QIS and ``released``)."""
    plain = plain_view(db, release)
    given = {} if qis is None else {"quasi_identifiers": qis}
    if sensitive is not None:
        given["sensitive"] = sensitive
    stored = reads_stored(db, release, qis, sensitive)
    if budget:
        db.execute("SELECT set_config('plpy_anon.build_memory', %s, false)", (budget,))
    try:
        got = report(db, release, **given, **named)
        want = report(db, plain, quasi_identifiers=qis or QIS, sensitive=list(released if sensitive is None else sensitive), **named)
    finally:
        db.execute("RESET plpy_anon.build_memory")
        db.execute(sql.SQL("DROP VIEW {}").format(sql.Identifier(plain)))
    got.pop(("rows", None))
    want.pop(("rows", None))
    assert got.keys() == want.keys()
    for key, (value, detail) in got.items():
        # integers exactly; a ratio may differ in its last bit (summed in another order)
        assert value == (want[key][0] if isinstance(value, int) or value is None
                         else pytest.approx(want[key][0], rel=1e-12, abs=0)), key
        assert detail == want[key][1], key
    return stored


@pytest.fixture
def people(db, schema):
    load(db)
    # NULLs in both sensitive columns and in a QI (zip), a class of NULL diagnoses
    db.execute("UPDATE people SET diagnosis = NULL WHERE id % 17 = 0 OR (age = 21 AND sex = 'F')")
    db.execute("ANALYZE people")
    return "people"


@pytest.mark.parametrize("budget", [None, "16kB"])
@pytest.mark.parametrize("models", [{}, {"t": 0.6}, {"l": 2, "refresh_mode": "fresh"}])
def test_a_compact_release_reads_its_stored_classes_to_the_same_figures(db, schema, people,
                                                                       budget, models):
    """Categorical and numeric sensitive columns with NULLs, NULL QIs, with and without t and l
    (the t-closeness figure, the recursive (c,l) with another c), within the build's memory and
    beyond it (the bounded pass's figures)."""
    release = create_release(db, "mondrian_view", schema, people, k=5, quasi_identifiers=QIS,
                             sensitive=["diagnosis", "salary"], identifiers=["id"],
                             layout="compact", **models)
    assert assert_same_report(db, release, None, None, budget, population=5000, recursive_c=1.5)
    assert assert_same_report(db, release, QIS, ["salary"], budget)
    # grouped by fewer QIs, stored classes merge: counted through the view, the same figures
    assert assert_same_report(db, release, ["sex"], ["diagnosis"], budget)
    sizes = db.execute("SELECT class_size, classes FROM anon.class_sizes(%s::regclass)",
                       (release,)).fetchall()
    plain = plain_view(db, release)
    grouped = db.execute("SELECT class_size, classes FROM anon.class_sizes(%s::regclass, %s)",
                         (plain, QIS)).fetchall()
    db.execute(sql.SQL("DROP VIEW {}").format(sql.Identifier(plain)))
    assert sorted(sizes) == sorted(grouped) and sum(s * n for s, n in sizes) == 400


def test_columns_that_are_not_stored_as_asked_group_the_view(db, schema, people):
    """A sensitive column asked for as a QI (its stored array is no value of a row), or a
    released QI asked for as sensitive: the view's rows are grouped, as for any relation."""
    release = create_release(db, "mondrian_view", schema, people, k=5, quasi_identifiers=QIS,
                             sensitive=["diagnosis", "salary"], identifiers=["id"], layout="compact")
    assert not assert_same_report(db, release, ["age", "salary"], ["diagnosis"])
    assert not assert_same_report(db, release, ["age", "sex"], ["zip"])


def test_a_flat_release_and_a_changed_view_group_the_view(db, schema, people):
    rs = release_schema_of(schema)
    flat = create_release(db, "mondrian_view", schema, people, k=5, quasi_identifiers=QIS,
                          sensitive=["diagnosis"], layout="flat", release_name="flat_k5")
    assert not reads_stored(db, flat)
    release = create_release(db, "mondrian_view", schema, people, k=5, quasi_identifiers=QIS,
                             sensitive=["diagnosis"], layout="compact", release_name="compact_k5")
    assert reads_stored(db, release)
    # the view no longer unfolds its storage (its owner redefined it): what it shows is counted
    definition = db.execute("SELECT pg_get_viewdef(%s::regclass)", (release,)).fetchone()[0]
    db.execute(sql.SQL("CREATE OR REPLACE VIEW {}.compact_k5 AS SELECT * FROM ({}) AS v "
                       "WHERE v.sex IS NULL").format(sql.Identifier(rs),
                                                     sql.SQL(definition.rstrip().rstrip(";"))))
    assert not reads_stored(db, release)
    assert report(db, release)[("classes", None)][0] == 0


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=st.lists(st.tuples(st.integers(0, 6), st.sampled_from(["a", "b", None]),
                               st.sampled_from(["x", "y", "z", "", None]),
                               st.one_of(st.none(), st.integers(-3, 3)),
                               st.one_of(st.none(), st.floats(-2, 2, width=32))),
                     min_size=4, max_size=60),
       k=st.integers(2, 4))
def test_random_compact_releases_read_stored_to_the_figures_of_their_rows(db, schema, rows, k):
    db.execute("DROP TABLE IF EXISTS drawn CASCADE")
    db.execute("CREATE TABLE drawn (a int, b text, s text, n int, f float8)")
    with db.cursor().copy("COPY drawn FROM STDIN") as copy:
        for r in rows:
            copy.write_row(r)
    release = create_release(db, "mondrian_view", schema, "drawn", k=k,
                             quasi_identifiers=["a", "b"], sensitive=["s", "n", "f"],
                             layout="compact", replace=True, release_name="drawn_k")
    for budget in (None, "16kB"):
        assert assert_same_report(db, release, ["a", "b"], ["s", "n", "f"], budget)


def test_an_analyst_who_reads_only_the_view_gets_the_same_report(db, schema, people, connect):
    """Counted with the caller's rights: a role that may select the view (and read the catalog)
    alone gets the view's rows grouped; with the storage's columns too, the stored classes; both
    the owner's report. Without the view, a permission error, even if the storage is readable."""
    rs = release_schema_of(schema)
    release = create_release(db, "mondrian_view", schema, people, k=5, quasi_identifiers=QIS,
                             sensitive=["diagnosis", "salary"], identifiers=["id"],
                             layout="compact", t=0.6)
    owners = report(db, release, population=5000)
    db.execute("DROP ROLE IF EXISTS risk_analyst")
    db.execute("CREATE ROLE risk_analyst LOGIN")
    try:
        db.execute("GRANT USAGE ON SCHEMA anon TO risk_analyst")
        db.execute("GRANT EXECUTE ON FUNCTION anon.risk_report(regclass, text[], text[], bigint, "
                   "double precision, double precision) TO risk_analyst")
        db.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO risk_analyst").format(sql.Identifier(rs)))
        db.execute(sql.SQL("GRANT SELECT ON {} TO risk_analyst").format(sql.SQL(release)))
        # no catalog to read: the view is a view, its columns named
        with connect(user="risk_analyst") as conn:
            named = report(conn, release, quasi_identifiers=QIS,
                           sensitive=["diagnosis", "salary"], population=5000)
        assert named.pop(("rows", None))[0] == owners[("rows", None)][0] == 400
        assert named == {k: v for k, v in owners.items() if k != ("rows", None)}
        db.execute("GRANT SELECT ON anon.releases, anon.column_roles TO risk_analyst")
        grants = {"none": None, "some columns": "age, sex, zip, diagnosis",
                  "its columns, not its blocks' tuple ids": "salary", "the columns read": "ctid"}
        for storage, columns in grants.items():
            if columns:
                db.execute(sql.SQL("GRANT SELECT ({}) ON {}_classes TO risk_analyst").format(
                    sql.SQL(columns), sql.SQL(release)))
            assert reads_stored(db, release, role="risk_analyst") == (
                storage == "the columns read"), storage
            with connect(user="risk_analyst") as conn:
                assert report(conn, release, population=5000) == owners, storage
        db.execute(sql.SQL("REVOKE SELECT ON {} FROM risk_analyst").format(sql.SQL(release)))
        with connect(user="risk_analyst") as conn:
            with pytest.raises(psycopg.Error) as info:
                report(conn, release)
            assert info.value.sqlstate == "42501"
            assert "permission denied for view" in str(info.value)
    finally:
        db.execute("DROP OWNED BY risk_analyst")
        db.execute("DROP ROLE risk_analyst")


def test_a_read_only_transaction_groups_the_view_to_the_same_report(db, schema, people):
    """The view's check makes a temporary view, which a read-only transaction may not: the
    view's rows are grouped instead, to the same report."""
    release = create_release(db, "mondrian_view", schema, people, k=5, quasi_identifiers=QIS,
                             sensitive=["diagnosis", "salary"], identifiers=["id"], layout="compact")
    stored = report(db, release, population=5000)
    db.execute(READS_STORED)
    with db.transaction():
        db.execute("SET TRANSACTION READ ONLY")
        assert not db.execute("SELECT pg_temp.reads_stored(%s, NULL, NULL)", (release,)).fetchone()[0]
        assert report(db, release, population=5000) == stored


def test_a_table_under_the_storages_name_groups_the_view(db, schema, people, connect):
    """A table its owner put under the storage's name, below the view plpy_anon wrote (the
    view's text unchanged): only a materialized view, as plpy_anon makes the storage, is read in
    the view's stead (a table may have row security, which would show the caller other rows
    than the view's owner; the guards refuse such a view anyway). The analyst's report groups
    the view's rows: the owner's figures."""
    rs = release_schema_of(schema)
    release = create_release(db, "mondrian_view", schema, people, k=5, quasi_identifiers=QIS,
                             sensitive=["diagnosis", "salary"], identifiers=["id"],
                             layout="compact", release_name="swapped")
    owners = report(db, release)
    definition = db.execute("SELECT pg_get_viewdef(%s::regclass)", (release,)).fetchone()[0]
    q = sql.Identifier(rs)
    db.execute(sql.SQL("ALTER MATERIALIZED VIEW {}.swapped_classes RENAME TO swapped_old").format(q))
    db.execute(sql.SQL("CREATE TABLE {}.swapped_classes AS SELECT * FROM {}.swapped_old").format(q, q))
    db.execute(sql.SQL("CREATE OR REPLACE VIEW {}.swapped AS {}").format(
        q, sql.SQL(definition.rstrip().rstrip(";").replace("swapped_old", "swapped_classes"))))
    db.execute("DROP ROLE IF EXISTS risk_analyst")
    db.execute("CREATE ROLE risk_analyst LOGIN")
    try:
        db.execute("GRANT USAGE ON SCHEMA anon TO risk_analyst")
        db.execute("GRANT EXECUTE ON FUNCTION anon.risk_report(regclass, text[], text[], bigint, "
                   "double precision, double precision) TO risk_analyst")
        db.execute("GRANT SELECT ON anon.releases, anon.column_roles TO risk_analyst")
        db.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO risk_analyst").format(q))
        db.execute(sql.SQL("GRANT SELECT ON {}.swapped, {}.swapped_classes TO risk_analyst")
                   .format(q, q))
        assert not reads_stored(db, release, role="risk_analyst")
        with connect(user="risk_analyst") as conn:
            assert report(conn, release) == owners
    finally:
        db.execute("DROP OWNED BY risk_analyst")
        db.execute("DROP ROLE risk_analyst")
        db.execute(sql.SQL("DROP VIEW {}.swapped").format(q))
        db.execute(sql.SQL("DROP TABLE {}.swapped_classes").format(q))
        db.execute(sql.SQL("ALTER MATERIALIZED VIEW {}.swapped_old RENAME TO swapped_classes").format(q))
        db.execute(sql.SQL("CREATE VIEW {}.swapped AS {}").format(q, sql.SQL(definition.rstrip().rstrip(";"))))
