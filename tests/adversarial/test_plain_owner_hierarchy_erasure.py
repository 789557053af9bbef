"""Adversarial: the DBA (a superuser) declares hierarchies on tables owned by plain login roles --
the usual case (docs/operations.md: the DBA or a custodian builds from other roles' tables). The
hierarchy's leaves are the column's values. When that plain owner drops or renames the column to
erase its values, the event triggers (run with the dropper's rights) return early, since a plain
role has no DELETE on anon.hierarchies. The rows stay in the catalog and in every dump, and are
handed to the next column of the old name: a custodian granted that new column reads them
through anon.readable_hierarchies.

Reproduction (psql, as a superuser):
    CREATE ROLE plain LOGIN; CREATE SCHEMA s AUTHORIZATION plain;
    SET ROLE plain; CREATE TABLE s.pay (id int, salary int); INSERT ... ; RESET ROLE;
    SELECT anon.set_hierarchy_intervals('s.pay', 'salary', ARRAY[1000, 10000]);
    SET ROLE plain; ALTER TABLE s.pay DROP COLUMN salary;     -- or RENAME COLUMN salary TO x
    ALTER TABLE s.pay ADD COLUMN salary int; RESET ROLE;
    SELECT leaf FROM anon.hierarchies WHERE source = 's.pay'::regclass;  -- the erased salaries
"""
from __future__ import annotations

import uuid

import pytest
from psycopg import sql

SALARIES = {str(30000 + i * 37) for i in range(1, 31)}


@pytest.fixture
def plain_owner(db):
    """A plain login role (no membership in plpy_anon_custodian) with its own schema."""
    role = f"own_{uuid.uuid4().hex[:8]}"
    r = sql.Identifier(role)
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(r))
    db.execute(sql.SQL("CREATE SCHEMA {} AUTHORIZATION {}").format(r, r))
    yield role
    db.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(r))
    db.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(r))
    db.execute(sql.SQL("DROP ROLE {}").format(r))


def _declare(db, connect, role: str) -> int:
    with connect(user=role) as c:
        c.execute(sql.SQL("CREATE TABLE {}.pay (id int, salary int)").format(sql.Identifier(role)))
        c.execute(sql.SQL("INSERT INTO {}.pay SELECT i, 30000 + i * 37 FROM generate_series(1, 30) i")
                  .format(sql.Identifier(role)))
    source = f"{role}.pay"
    db.execute("SELECT anon.set_hierarchy_intervals(%s, 'salary', ARRAY[1000, 10000])", (source,))
    oid = db.execute("SELECT %s::regclass::oid", (source,)).fetchone()[0]
    assert {leaf for (leaf,) in db.execute(
        "SELECT leaf FROM anon.hierarchies WHERE source::oid = %s", (oid,))} == SALARIES
    return oid


@pytest.mark.parametrize("erase", ["DROP COLUMN salary", "RENAME COLUMN salary TO withdrawn"])
def test_a_plain_owners_erased_column_leaves_no_values_to_a_new_column_of_its_name(
        db, connect, plain_owner, erase):
    oid = _declare(db, connect, plain_owner)
    table = sql.SQL("{}.pay").format(sql.Identifier(plain_owner))
    grantee = f"grt_{uuid.uuid4().hex[:8]}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE plpy_anon_custodian").format(sql.Identifier(grantee)))
    try:
        with connect(user=plain_owner) as c:
            c.execute(sql.SQL("ALTER TABLE {} " + erase).format(table))
            c.execute(sql.SQL("ALTER TABLE {} ADD COLUMN salary int").format(table))
            c.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(
                sql.Identifier(plain_owner), sql.Identifier(grantee)))
            c.execute(sql.SQL("GRANT SELECT (salary) ON {} TO {}").format(table, sql.Identifier(grantee)))
        kept = {leaf for (leaf,) in db.execute(
            "SELECT leaf FROM anon.hierarchies WHERE source::oid = %s AND column_name = 'salary'",
            (oid,))}
        with connect(user=grantee) as c:
            read = {p for (path,) in c.execute(
                "SELECT path FROM anon.readable_hierarchies WHERE source = %s::oid::regclass "
                "AND column_name = 'salary'", (oid,)) for p in path}
    finally:
        db.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(grantee)))
        db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(grantee)))
    assert not read & SALARIES, f"{len(read & SALARIES)} erased salaries read by a grantee of the new column"
    assert not kept & SALARIES, f"{len(kept & SALARIES)} erased salaries kept in anon.hierarchies"
