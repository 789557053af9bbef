"""Adversarial: in a SQL_ASCII database a custodian writes bytes that are not UTF-8 into its own
catalog rows (anon.releases' last_error, risk, verification, metrics; a row of
anon.refresh_history): PostgreSQL stores them, and PL/Python reads no such text. Found by a
review: each write made the DBA's anon.release_audit(), anon.release_status(),
anon.refresh_all() and anon.grant_analyst() fail for every release (bare 22021), and
anon.drop_release of the custodian's release. The catalog
guard refuses such a write by a role that is not a superuser (22021, naming the table, with a
hint), so every function reading the catalog reads only UTF-8."""
from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import sql

from tests.helpers import encoded_database

#: 'h' and a LATIN1 'é': not UTF-8
NOT_UTF8 = "pg_catalog.convert_from('\\x68e9'::bytea, 'SQL_ASCII')"
OWN = "WHERE release_schema = 'rel_c'"
WRITES = {
    "last_error": f"UPDATE anon.releases SET last_error = {NOT_UTF8}, last_error_at = now() {OWN}",
    "risk": "UPDATE anon.releases SET risk = ('[{\"measure\": \"distinct_l\", \"column_name\": \"' || "
            f"{NOT_UTF8} || '\", \"value\": 2}}]')::jsonb {OWN}",
    "verification": f"UPDATE anon.releases SET verification = verification || pg_catalog.jsonb_build_object("
                    f"'note', {NOT_UTF8}) {OWN}",
    "metrics": f"UPDATE anon.releases SET metrics = pg_catalog.jsonb_build_object({NOT_UTF8}, 1) {OWN}",
    "history": "INSERT INTO anon.refresh_history (release_id, release_name, started_at, seconds, succeeded, "
               f"error) SELECT release_id, 'rel_c.x', now(), 1, false, {NOT_UTF8} FROM anon.releases {OWN}",
}


@pytest.fixture(scope="module")
def ascii_db(connect):
    """(the DBA's connection to a SQL_ASCII database holding its release, a custodian's connection
    holding one of its own)."""
    with encoded_database(connect, "SQL_ASCII") as name, connect(dbname=name) as db:
        db.execute("SET client_encoding = 'SQL_ASCII'")
        db.execute("CREATE TABLE t (id int, n int, s text)")
        db.execute("INSERT INTO t SELECT i, i % 40, 's' || i % 3 FROM generate_series(1, 300) i")
        db.execute("SELECT anon.mondrian_view('t', 5, quasi_identifiers => ARRAY['n'], sensitive => ARRAY['s'], "
                   "release_name => 'dba')")
        role = f"cust_{uuid.uuid4().hex[:8]}"
        r = sql.Identifier(role)
        db.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE plpy_anon_custodian").format(r))
        db.execute(sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(sql.Identifier(name), r))
        try:
            with connect(dbname=name, user=role) as c:
                c.execute("SET client_encoding = 'SQL_ASCII'")
                c.execute("CREATE SCHEMA mine")
                c.execute("CREATE TABLE mine.t (id int, n int, s text)")
                c.execute("INSERT INTO mine.t SELECT i, i % 40, 's' || i % 3 FROM generate_series(1, 300) i")
                c.execute("SELECT anon.mondrian_view('mine.t', 5, quasi_identifiers => ARRAY['n'], "
                          "sensitive => ARRAY['s'], release_schema => 'rel_c', release_name => 'x')")
                yield db, c
        finally:
            db.execute("SELECT anon.drop_release('rel_c.x', if_exists => true)")
            db.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(r))
            db.execute(sql.SQL("REVOKE CREATE ON DATABASE {} FROM {}").format(sql.Identifier(name), r))
            db.execute(sql.SQL("DROP ROLE {}").format(r))


def texts(rows) -> set:
    """The first column (a SQL_ASCII client reads texts as bytes)."""
    return {r[0].decode() if isinstance(r[0], bytes) else r[0] for r in rows}


def dba_reads_every_release(db) -> None:
    assert texts(db.execute("SELECT release FROM anon.release_audit()")) == {"release.dba", "rel_c.x"}
    assert texts(db.execute("SELECT release FROM anon.release_status()")) == {"release.dba", "rel_c.x"}
    db.execute("DROP ROLE IF EXISTS readers_probe")
    db.execute("CREATE ROLE readers_probe NOLOGIN")
    try:
        db.execute("SELECT anon.grant_analyst('readers_probe')")
        db.execute("SELECT anon.revoke_analyst('readers_probe')")
    finally:
        db.execute("DROP ROLE readers_probe")


@pytest.mark.parametrize("what", list(WRITES))
def test_a_custodians_bytes_that_are_not_utf8_in_its_catalog_rows_are_refused(ascii_db, what):
    db, c = ascii_db
    with pytest.raises(psycopg.errors.CharacterNotInRepertoire) as refused:
        c.execute(WRITES[what])
    assert "not UTF-8" in refused.value.diag.message_primary
    assert ("anon.refresh_history" if what == "history" else "anon.releases") in refused.value.diag.message_primary
    assert "UTF-8" in refused.value.diag.message_hint
    dba_reads_every_release(db)


def test_a_custodians_catalog_rows_of_utf8_texts_are_written(ascii_db):
    db, c = ascii_db
    utf8 = "pg_catalog.convert_from('\\x68c3a9'::bytea, 'SQL_ASCII')"       # 'hé' in UTF-8
    assert c.execute(f"UPDATE anon.releases SET last_error = {utf8}, last_error_at = now() " + OWN).rowcount == 1
    assert texts(db.execute("SELECT last_error FROM anon.release_audit('rel_c.x')")) == {"h\u00e9"}
    c.execute("UPDATE anon.releases SET last_error = NULL, last_error_at = NULL " + OWN)
    dba_reads_every_release(db)


def test_a_source_renamed_to_bytes_that_are_not_utf8_leaves_the_audit_readable(ascii_db):
    """A name is no catalog row: the custodian may rename its own source so. anon.release_audit
    reads no source name; anon.release_status, anon.refresh_all and anon.grant_analyst read it and
    fail for every release until it is renamed back (docs/security.md, the limit)."""
    db, c = ascii_db
    c.execute(f"DO $$ BEGIN EXECUTE pg_catalog.format('ALTER TABLE mine.t RENAME TO %I', {NOT_UTF8}); END $$")
    try:
        assert texts(db.execute("SELECT release FROM anon.release_audit()")) == {"release.dba", "rel_c.x"}
        with pytest.raises(psycopg.errors.CharacterNotInRepertoire):
            db.execute("SELECT * FROM anon.release_status()")
    finally:
        c.execute(f"DO $$ BEGIN EXECUTE pg_catalog.format('ALTER TABLE mine.%I RENAME TO t', {NOT_UTF8}); END $$")
    dba_reads_every_release(db)
