"""The session's catalog additions attacked by roles that do not own a release: a second custodian
(in plpy_anon_custodian, without pg_read_all_data), an analyst (SELECT on the released view only)
and a plain login. The victim is a superuser's stable release, one created region by region
(anon.release_regions rows) and one with a recorded last error quoting a value.

What each role may see is what the catalog's grants let it read before: anon.release_audit,
the salts (anon.release_secrets, its invoker-rights functions), the regions' boxes, the bounded
risk report."""
from __future__ import annotations

import contextlib
import uuid

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from plpy_anon.cli import main
from tests.helpers import release_schema_of

SECRET_VALUE = "hiv_of_patient_4217"


def _role(db, *grants):
    role = f"atk_{uuid.uuid4().hex[:8]}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    for grant in grants:
        db.execute(sql.SQL(grant).format(sql.Identifier(role)))
    return role


def _drop(db, role):
    db.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(role)))
    db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@pytest.fixture
def victim(db, schema):
    """A superuser's stable release of 3,000 rows created beyond a tiny budget (regions stored),
    whose catalog row records a failed refresh quoting a sensitive value. Returns (relation, id)."""
    db.execute("CREATE TABLE pt (id int PRIMARY KEY, a int, b text, s text)")
    db.execute("""INSERT INTO pt SELECT i, 18 + (i * 37) % 70, (ARRAY['n', 's', 'e', 'w'])[1 + (i * 7) % 4],
                                  (ARRAY['flu', 'hiv', 'cancer', 'asthma', 'ok'])[1 + (i * 11) % 5]
                  FROM generate_series(1, 3000) i""")
    db.execute("SELECT set_config('plpy_anon.build_memory', '1', false)")
    try:
        relation = db.execute(
            "SELECT anon.mondrian_view('pt', k => 10, l => 2, quasi_identifiers => ARRAY['a', 'b'], "
            "sensitive => ARRAY['s'], identifiers => ARRAY['id'], release_schema => %s, "
            "release_name => 'pt_anon', refresh_mode => 'stable')::text",
            (release_schema_of(schema),)).fetchone()[0]
    finally:
        db.execute("RESET plpy_anon.build_memory")
    release_id = db.execute("SELECT release_id FROM anon.releases WHERE format('%%I.%%I', release_schema, "
                            "release_name) = %s", (relation,)).fetchone()[0]
    db.execute("UPDATE anon.releases SET last_error = %s, last_error_at = now() WHERE release_id = %s",
               (f"value {SECRET_VALUE} refused", release_id))
    assert db.execute("SELECT count(*) FROM anon.release_regions WHERE release_id = %s",
                      (release_id,)).fetchone()[0] > 1
    assert db.execute("SELECT count(*) FROM anon.release_secrets WHERE release_id = %s",
                      (release_id,)).fetchone()[0] == 1
    return relation, release_id


@pytest.fixture
def roles(db, connect, victim):
    """{'custodian', 'analyst', 'plain'} -> an open connection as that role."""
    relation, _ = victim
    release_schema = relation.split(".")[0]
    made = {
        "custodian": _role(db, "GRANT plpy_anon_custodian TO {}"),
        "analyst": _role(db),
        "plain": _role(db),
    }
    db.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.SQL(release_schema),
                                                                 sql.Identifier(made["analyst"])))
    db.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(sql.SQL(relation), sql.Identifier(made["analyst"])))
    with contextlib.ExitStack() as stack:
        conns = {k: stack.enter_context(connect(user=r)) for k, r in made.items()}
        yield conns
    for role in made.values():
        _drop(db, role)


def refused(conn, query, params=(), sqlstate="42501") -> psycopg.Error:
    with pytest.raises(psycopg.Error) as caught:
        conn.execute(query, params)
    assert caught.value.sqlstate == sqlstate, caught.value
    assert SECRET_VALUE not in str(caught.value) + str(caught.value.diag.message_detail)
    return caught.value


# ------------------------------------------------------------------------------ release_audit

@pytest.mark.parametrize("who", ["analyst", "plain"])
def test_release_audit_is_refused_to_a_role_that_is_no_custodian(roles, victim, who):
    relation, _ = victim
    refused(roles[who], "SELECT * FROM anon.release_audit(%s)", (relation,))
    refused(roles[who], "SELECT * FROM anon.release_audit()")


@pytest.mark.parametrize("who", ["analyst", "plain"])
def test_plpy_anon_release_audit_is_refused_to_a_role_that_is_no_custodian(pg_server, roles, victim, who):
    relation, _ = victim
    dsn = " ".join(f"{k}={v}" for k, v in dict(pg_server, user=roles[who].info.user).items())
    for args in (["release-audit", relation], ["release-audit"]):
        result = CliRunner().invoke(main, ["--dsn", dsn, "--format", "json", *args])
        assert result.exit_code != 0 and "permission denied" in result.stderr, result.output
        assert SECRET_VALUE not in result.output and relation not in result.stdout


def test_release_audit_shows_a_second_custodian_only_what_its_catalog_grants_show(db, roles, victim):
    """The audit reads anon.releases and anon.refresh_history (which custodians select whole), never
    the value columns of anon.release_state / _versions / _regions, which this custodian may not
    select: it answers, and its last_error, held_back and counterfeit are the catalog's."""
    relation, release_id = victim
    b = roles["custodian"]
    for column in ("person", "bounds"):
        table = "anon.release_state" if column == "person" else "anon.release_regions"
        refused(b, f"SELECT * FROM {table}")
    row = b.execute("SELECT last_error, held_back, counterfeit, versions FROM anon.release_audit(%s)",
                    (relation,)).fetchone()
    catalog = b.execute("SELECT last_error, (verification -> 'across_versions' ->> 'held_back')::int, "
                        "(verification -> 'across_versions' ->> 'counterfeit')::int, "
                        "1 + (SELECT count(*) FROM anon.refresh_history h WHERE h.release_id = r.release_id "
                        "     AND h.succeeded) FROM anon.releases r WHERE release_id = %s",
                        (release_id,)).fetchone()
    assert row == catalog
    everyone = [r[0] for r in b.execute("SELECT release FROM anon.release_audit()").fetchall()]
    assert relation in everyone
    assert len(everyone) == b.execute("SELECT count(*) FROM anon.releases").fetchone()[0]


def test_release_audit_odd_names(db, schema, roles, victim):
    relation, release_id = victim
    b = roles["custodian"]
    rs = release_schema_of(schema)
    db.execute(sql.SQL("ALTER VIEW {} RENAME TO {}").format(sql.SQL(relation), sql.Identifier("Pt Anon")))
    db.execute("UPDATE anon.releases SET release_name = 'Pt Anon' WHERE release_id = %s", (release_id,))
    for name in ('"Pt Anon"', f'"{rs}"."Pt Anon"', f'{rs}."Pt Anon"'):
        assert b.execute("SELECT release FROM anon.release_audit(%s)", (name,)).fetchone()[0] == \
            f'{rs}."Pt Anon"', name
    for name, state in [("", "22023"), ("   ", "22023"), ("pt_anon", "42704"), ("Pt Anon", "22023"),
                        (f"{rs}.nope", "42704"), ("a.b.c", "42704"), ('"a b', "22023"),
                        ('"a b"', "42704"), (f'{rs}."pt anon"', "42704")]:
        error = refused(b, "SELECT * FROM anon.release_audit(%s)", (name,), sqlstate=state)
        assert error.diag.message_hint, name


# ------------------------------------------------------------------------------ salts

def test_a_second_custodian_can_neither_read_nor_write_another_releases_salt(db, roles, victim):
    _, release_id = victim
    b = roles["custodian"]
    salt = db.execute("SELECT person_salt FROM anon.release_secrets WHERE release_id = %s",
                      (release_id,)).fetchone()[0]
    refused(b, "SELECT person_salt FROM anon.release_secrets")
    refused(b, "SELECT 1 FROM anon.release_secrets WHERE person_salt = %s", (salt,))
    refused(b, "UPDATE anon.release_secrets SET release_id = release_id WHERE person_salt = %s", (salt,))
    refused(b, "DELETE FROM anon.release_secrets WHERE release_id = %s RETURNING person_salt", (release_id,))
    assert b.execute("SELECT count(*) FROM anon.readable_release_secrets").fetchone()[0] == 0
    refused(b, "INSERT INTO anon.release_secrets (release_id, person_salt) VALUES (%s, 'mine')", (release_id,))
    assert b.execute("UPDATE anon.release_secrets SET person_salt = 'mine' WHERE release_id = %s",
                     (release_id,)).rowcount == 0
    assert b.execute("DELETE FROM anon.release_secrets WHERE release_id = %s", (release_id,)).rowcount == 0
    refused(b, "SELECT anon._release_salt(%s)", (release_id,))
    refused(b, "SELECT anon._store_release_salt(%s, 'mine')", (release_id,))
    refused(b, "SELECT anon._store_release_salt(%s, NULL)", (release_id,))
    # a salt for a release id no release holds yet (the next one drawn): refused
    nobody = db.execute("SELECT max(release_id) + 1000 FROM anon.releases").fetchone()[0]
    refused(b, "INSERT INTO anon.release_secrets (release_id, person_salt) VALUES (%s, 'planted')", (nobody,))
    for who in ("analyst", "plain"):
        refused(roles[who], "SELECT release_id FROM anon.release_secrets")
        refused(roles[who], "SELECT * FROM anon.readable_release_secrets")
    assert db.execute("SELECT person_salt FROM anon.release_secrets WHERE release_id = %s",
                      (release_id,)).fetchone()[0] == salt


# ------------------------------------------------------------------------------ regions

def test_a_second_custodian_can_neither_read_nor_write_another_releases_regions(db, roles, victim):
    _, release_id = victim
    b = roles["custodian"]
    before = db.execute("SELECT region, bounds FROM anon.release_regions WHERE release_id = %s ORDER BY 1",
                        (release_id,)).fetchall()
    refused(b, "SELECT bounds FROM anon.release_regions")
    refused(b, "SELECT region FROM anon.release_regions WHERE bounds::text LIKE '%%hiv%%'")
    for view in ("readable_release_regions", "readable_release_state", "readable_release_versions",
                 "release_people"):
        assert db.execute(f"SELECT count(*) FROM anon.{view} WHERE release_id = %s",
                          (release_id,)).fetchone()[0] > 0, view
        assert b.execute(f"SELECT count(*) FROM anon.{view}").fetchone()[0] == 0, view
    refused(b, "INSERT INTO anon.release_regions (release_id, region, bounds) VALUES (%s, 999, '[]')",
            (release_id,))
    assert b.execute("UPDATE anon.release_regions SET bounds = '[]' WHERE release_id = %s",
                     (release_id,)).rowcount == 0
    assert b.execute("DELETE FROM anon.release_regions WHERE release_id = %s", (release_id,)).rowcount == 0
    for who in ("analyst", "plain"):
        refused(roles[who], "SELECT release_id FROM anon.release_regions")
        refused(roles[who], "SELECT * FROM anon.readable_release_regions")
    assert db.execute("SELECT region, bounds FROM anon.release_regions WHERE release_id = %s ORDER BY 1",
                      (release_id,)).fetchall() == before


# ------------------------------------------------------------------------------ the risk report

@pytest.mark.parametrize("memory", ["1", None])
def test_the_risk_report_refuses_a_relation_its_caller_may_not_read(db, schema, roles, victim, memory):
    relation, _ = victim
    b = roles["custodian"]
    if memory:
        b.execute("SELECT set_config('plpy_anon.build_memory', %s, false)", (memory,))
    for target in (relation, f'"{schema}".pt'):
        refused(b, "SELECT * FROM anon.risk_report(%s)", (target,))
        refused(b, "SELECT * FROM anon.risk_report(%s, ARRAY['a', 'b'], ARRAY['s'])", (target,))
        refused(b, "SELECT * FROM anon.class_sizes(%s, ARRAY['a', 'b'])", (target,))
    for who in ("analyst", "plain"):
        refused(roles[who], "SELECT * FROM anon.risk_report(%s)", (relation,))


def test_the_risk_report_of_a_custodian_granted_only_the_quasi_identifiers(db, schema, roles, victim):
    b = roles["custodian"]
    db.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), sql.SQL(b.info.user)))
    db.execute(sql.SQL("GRANT SELECT (a, b) ON {}.pt TO {}").format(sql.Identifier(schema), sql.SQL(b.info.user)))
    b.execute("SELECT set_config('plpy_anon.build_memory', '1', false)")
    refused(b, "SELECT * FROM anon.risk_report(%s, ARRAY['a', 'b'], ARRAY['s'])", (f'"{schema}".pt',))

