"""Adversarial: the SQL_ASCII check (db/encodings.py) run by a custodian on a superuser's table.
Its refusal quotes PostgreSQL's message, which names the offending bytes: it must read only what
the caller may read -- a column it is not granted is refused for its rights (42501) before any
byte is quoted, and the rows its row security hides are not checked (their bytes are neither
refused nor quoted): a custodian builds from no table whose row security applies to it
(guards.guard_source refuses it first, 42501)."""
from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import sql

from tests.helpers import encoded_database

#: a LATIN1 'é' after 'hid': not UTF-8
HIDDEN = "convert_from('\\x686964e9'::bytea, 'SQL_ASCII')"


@pytest.fixture(scope="module")
def ascii_db(connect):
    with encoded_database(connect, "SQL_ASCII") as name, connect(dbname=name) as conn:
        conn.execute("SET client_encoding = 'SQL_ASCII'")
        yield name, conn


@pytest.fixture
def custodian(ascii_db, connect):
    """(connection as a new custodian, its role, the superuser's table src.t it may lock): t's
    row 17 has bytes that are not UTF-8 in w, every other row plain ones."""
    name, db = ascii_db
    role = f"cust_{uuid.uuid4().hex[:8]}"
    r = sql.Identifier(role)
    db.execute("DROP SCHEMA IF EXISTS src CASCADE")
    db.execute("CREATE SCHEMA src")
    db.execute("CREATE TABLE src.t (id int, n int, s text, w text)")
    db.execute(f"INSERT INTO src.t SELECT i, i % 40, 's' || i % 3, CASE WHEN i = 17 THEN {HIDDEN} "
               "ELSE 'w' || i % 4 END FROM generate_series(1, 600) i")
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(r))
    db.execute(sql.SQL("GRANT plpy_anon_custodian TO {}").format(r))
    db.execute(sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(sql.Identifier(name), r))
    db.execute(sql.SQL("GRANT USAGE ON SCHEMA src TO {}").format(r))
    try:
        with connect(dbname=name, user=role) as conn:
            conn.execute("SET client_encoding = 'SQL_ASCII'")
            yield conn, r, db
    finally:
        for (rel,) in db.execute("SELECT format('%%I.%%I', release_schema, release_name) FROM anon.releases "
                                 "WHERE release_owner = %s::regrole", (role,)).fetchall():
            db.execute("SELECT anon.drop_release(%s, if_exists => true)", (rel,))
        db.execute("DROP SCHEMA src CASCADE")
        db.execute(sql.SQL("REVOKE CREATE ON DATABASE {} FROM {}").format(sql.Identifier(name), r))
        db.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(r))
        db.execute(sql.SQL("DROP ROLE {}").format(r))


def run(conn, column):
    return conn.execute(f"SELECT anon.mondrian_view('src.t', 5, quasi_identifiers => ARRAY['n'], "
                        f"sensitive => ARRAY['{column}'], release_schema => 'rel_c', release_name => 'x')")


def test_a_column_the_caller_is_not_granted_is_refused_for_its_rights_not_its_bytes(custodian):
    conn, r, db = custodian
    db.execute(sql.SQL("GRANT SELECT (id, n, s), UPDATE ON src.t TO {}").format(r))
    with pytest.raises(psycopg.Error) as caught:
        run(conn, "w")
    assert caught.value.sqlstate == "42501", str(caught.value)
    assert "0xe9" not in str(caught.value) + str(caught.value.diag.message_detail)


def test_rows_hidden_by_row_security_are_refused_for_the_policy_not_checked(custodian):
    conn, r, db = custodian
    db.execute(sql.SQL("GRANT SELECT, UPDATE ON src.t TO {}").format(r))
    db.execute("ALTER TABLE src.t ENABLE ROW LEVEL SECURITY")
    db.execute(sql.SQL("CREATE POLICY not_17 ON src.t TO {} USING (id <> 17)").format(r))
    with pytest.raises(psycopg.Error) as caught:
        run(conn, "w")
    assert caught.value.sqlstate == "42501", str(caught.value)
    assert "row security" in caught.value.diag.message_primary
    assert "0xe9" not in str(caught.value) + str(caught.value.diag.message_detail)
    # without the policy the same call is refused for row 17's bytes (the check is not idle)
    db.execute("ALTER TABLE src.t DISABLE ROW LEVEL SECURITY")
    with pytest.raises(psycopg.Error) as caught:
        run(conn, "w")
    assert caught.value.sqlstate == "22021", str(caught.value)
    assert 'column "w"' in caught.value.diag.message_primary


def test_a_refresh_refused_for_such_bytes_records_no_byte_for_other_custodians(custodian):
    """The refusal's detail quotes the bytes; anon.releases.last_error, anon.refresh_history.error and
    anon.release_audit (which every custodian reads) keep its message, which names the column only."""
    conn, _, db = custodian
    db.execute("UPDATE src.t SET w = 'w1' WHERE id = 17")
    relation = db.execute("SELECT anon.mondrian_view('src.t', 5, quasi_identifiers => ARRAY['n'], "
                          "sensitive => ARRAY['w'], release_schema => 'rel_s', release_name => 'z')::text"
                          ).fetchone()[0]
    relation = relation.decode() if isinstance(relation, bytes) else relation
    db.execute(f"UPDATE src.t SET w = {HIDDEN} WHERE id = 17")
    with pytest.raises(psycopg.Error) as caught:
        db.execute(sql.SQL("SELECT anon.refresh({})").format(sql.Literal(relation)))
    assert caught.value.sqlstate == "22021" and "0xe9" in str(caught.value.diag.message_detail), str(caught.value)
    try:
        [(last_error,)] = conn.execute(sql.SQL("SELECT last_error FROM anon.release_audit({})").format(sql.Literal(relation))).fetchall()
        errors = [e for (e,) in conn.execute(sql.SQL("SELECT error FROM anon.refresh_history h JOIN anon.releases r "
                                             "USING (release_id) WHERE format('%I.%I', r.release_schema, "
                                             "r.release_name) = {}").format(sql.Literal(relation))).fetchall()]
        last_error = bytes(last_error).decode("latin1")  # SQL_ASCII: the session reads bytes
        errors = [bytes(e).decode("latin1") for e in errors]
        assert 'column "w"' in last_error and errors
        for text in [last_error, *errors]:
            assert "0xe9" not in text and "hid" not in text, text
    finally:
        db.execute(sql.SQL("SELECT anon.drop_release({})").format(sql.Literal(relation)))
        db.execute("DROP SCHEMA IF EXISTS rel_s CASCADE")
