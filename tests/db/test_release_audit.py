"""anon.release_audit: a privacy officer's one row per release, each figure checked here against
the released rows and the catalogs (counted with SQL of this test's own), and its verdict
against those counts."""
from __future__ import annotations

import itertools

import psycopg
import pytest
from psycopg import sql

from tests.helpers import class_sizes, distinct_sensitive_per_class, release_schema_of

# diagnosis is 'flu' for everyone under 30: the classes of the young hold one value
PATIENTS = """
CREATE TABLE patients (id int PRIMARY KEY, age int, zip text, sex text, diagnosis text);
INSERT INTO patients
SELECT i, 20 + (i * 7) % 50, (ARRAY['13000', '13500', '14000', '22000'])[1 + (i * 3) % 4],
       CASE WHEN i % 2 = 0 THEN 'F' ELSE 'M' END,
       CASE WHEN 20 + (i * 7) % 50 < 30 THEN 'flu'
            ELSE (ARRAY['flu', 'cold', 'asthma', 'diabetes', 'gastritis'])[1 + (i * 11) % 5] END
FROM generate_series(1, 300) i;
SELECT anon.set_column_role('patients', 'diagnosis', 'sensitive');
"""
QIS = ["age", "zip", "sex"]
_roles = itertools.count()


@pytest.fixture
def patients(db, schema):
    db.execute(PATIENTS)
    return f"{schema}.patients"


@pytest.fixture
def reader(db):
    role = f"audit_reader_{next(_roles)}"
    db.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(role)))
    yield role
    db.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
    db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def release(db, schema, name, **arguments):
    named = "".join(f", {key} => %({key})s" for key in arguments)
    return db.execute(
        f"SELECT anon.mondrian_view('patients', identifiers => ARRAY['id'], release_name => %(name)s, "
        f"release_schema => %(schema)s{named})",
        dict(arguments, name=name, schema=release_schema_of(schema))).fetchone()[0]


def audit(db, relation):
    cursor = db.execute("SELECT * FROM anon.release_audit(%s)", (relation,))
    names = [d.name for d in cursor.description]
    rows = [dict(zip(names, r)) for r in cursor.fetchall()]
    assert len(rows) == 1
    return rows[0]


def test_a_stable_l_diverse_release_is_audited_from_its_rows_and_catalogs(db, schema, patients, reader):
    relation = release(db, schema, "stable", k=5, l=2)
    row = audit(db, relation)
    sizes = class_sizes(db, relation, QIS)
    diversity = distinct_sensitive_per_class(db, relation, QIS, "diagnosis")
    assert row["release"] == relation and row["method"] == "mondrian"
    assert row["refresh_mode"] == "stable" and (row["k"], row["l"], row["t"]) == (5, 2, None)
    assert row["achieved_k"] == min(sizes) >= 5
    assert row["distinct_l"] == min(diversity) >= 2
    assert row["prosecutor_risk_max"] == pytest.approx(1 / min(sizes))
    assert row["verified"] is True and row["versions"] == 1
    assert row["owner"] == db.execute("SELECT current_user").fetchone()[0]
    assert reader not in row["readers"]
    assert row["safe"] is True and not row["why"].startswith("fails")
    assert f"k 5 asked, smallest class {min(sizes)}" in row["why"]
    assert f"diagnosis has {min(diversity)}" in row["why"]

    db.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(sql.SQL(relation), sql.Identifier(reader)))
    db.execute(f"INSERT INTO {patients} SELECT id + 1000, age, zip, sex, diagnosis FROM {patients} "
               "WHERE id <= 40")
    db.execute("SELECT anon.refresh(%s)", (relation,))
    row = audit(db, relation)
    grantees = db.execute(
        "SELECT array_agg(DISTINCT grantee::regrole::text ORDER BY grantee::regrole::text) "
        "FROM pg_class c, aclexplode(c.relacl) a WHERE c.oid = %s::regclass "
        "AND a.privilege_type = 'SELECT' AND a.grantee <> c.relowner", (relation,)).fetchone()[0]
    assert reader in row["readers"] and row["readers"] == grantees
    refreshes = db.execute(
        "SELECT count(*) FROM anon.refresh_history h JOIN anon.releases r USING (release_id) "
        "WHERE format('%%I.%%I', r.release_schema, r.release_name) = %s AND h.succeeded",
        (relation,)).fetchone()[0]
    assert row["versions"] == 1 + refreshes == 2
    held_back, counterfeit = db.execute(
        "SELECT v.held_back, v.counterfeit FROM anon.release_versions v JOIN anon.releases r USING (release_id) "
        "WHERE format('%%I.%%I', r.release_schema, r.release_name) = %s ORDER BY v.version DESC LIMIT 1",
        (relation,)).fetchone()
    assert (row["held_back"], row["counterfeit"]) == (held_back, counterfeit)
    released = db.execute(f"SELECT count(*) FROM {relation}").fetchone()[0]
    assert released + held_back - counterfeit == 340
    assert row["distinct_l"] == min(distinct_sensitive_per_class(db, relation, QIS, "diagnosis")) >= 2
    assert "against 1 earlier version:" in row["why"] and row["safe"] is True


def test_a_class_that_gives_a_value_away_is_not_safe_though_k_is_kept(db, schema, patients):
    relation = release(db, schema, "plain", k=5)
    row = audit(db, relation)
    diversity = distinct_sensitive_per_class(db, relation, QIS, "diagnosis")
    assert min(diversity) == 1          # the young's classes hold only 'flu'
    assert row["achieved_k"] == min(class_sizes(db, relation, QIS)) >= 5 and row["verified"] is True
    assert row["distinct_l"] == 1 and row["refresh_mode"] == "fresh" and row["held_back"] is None
    assert row["safe"] is False
    assert row["why"].startswith("fails: some class gives its diagnosis value away (distinct l 1).")


def test_an_unverified_release_and_a_failed_refresh_are_told(db, schema, patients):
    relation = release(db, schema, "told", k=5, l=2)
    db.execute("UPDATE anon.releases SET verified = false "
               "WHERE format('%%I.%%I', release_schema, release_name) = %s", (relation,))
    row = audit(db, relation)
    assert row["safe"] is False and row["why"].startswith("fails: not verified from its released rows")

    db.execute("UPDATE anon.releases SET verified = true "
               "WHERE format('%%I.%%I', release_schema, release_name) = %s", (relation,))
    db.execute(f"ALTER TABLE {patients} RENAME COLUMN zip TO postcode")
    with pytest.raises(psycopg.Error):
        db.execute("SELECT anon.refresh(%s)", (relation,))
    row = audit(db, relation)
    assert row["last_error"] and row["safe"] is True
    assert "its last refresh failed (last_error): the version before it is still published" in row["why"]


def test_every_release_without_a_name_and_a_clear_error_for_an_unknown_one(db, schema, patients):
    first = release(db, schema, "first", k=5)
    second = release(db, schema, "second", k=10)
    every = [r[0] for r in db.execute("SELECT release FROM anon.release_audit()").fetchall()]
    status = [r[0] for r in db.execute("SELECT release FROM anon.release_status()").fetchall()]
    assert first in every and second in every and sorted(every) == sorted(status)
    db.execute("SELECT anon.set_column_role('patients', 'diagnosis', 'ignored')")
    bare = release(db, schema, "bare", k=5)
    row = audit(db, bare)
    assert row["distinct_l"] is None and row["safe"] is True
    assert "no sensitive column declared: attribute disclosure is not checked" in row["why"]
    assert "no sensitive column" not in audit(db, first)["why"]
    with pytest.raises(psycopg.errors.UndefinedObject) as raised:
        db.execute("SELECT * FROM anon.release_audit('no_such_release')")
    assert 'release "no_such_release" does not exist' in raised.value.diag.message_primary
    assert "anon.releases" in raised.value.diag.message_hint
