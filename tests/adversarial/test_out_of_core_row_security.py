"""Adversarial: row security on the source of an out-of-core build, whose region reads are
one-shot queries that may run in parallel workers. A custodian who owns the table builds from
it: with row security enabled but not forced, its policies apply to no one building it, so
the release holds every row, as in memory; forced, they would run with the builder's rights
and the build is refused, as in memory. Checked from the released rows."""
from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import sql

from tests.helpers import class_sizes

PARALLEL = ["SET force_parallel_mode = on", "SET parallel_setup_cost = 0",
            "SET parallel_tuple_cost = 0", "SET min_parallel_table_scan_size = 0"]


@pytest.fixture
def owner(db, connect):
    role = f"own_{uuid.uuid4().hex[:8]}"
    r = sql.Identifier(role)
    db.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE plpy_anon_custodian").format(r))
    db.execute(sql.SQL("CREATE SCHEMA {} AUTHORIZATION {}").format(r, r))
    database = sql.Identifier(db.info.dbname)
    db.execute(sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(database, r))
    try:
        with connect(user=role) as conn:
            conn.execute(sql.SQL("SET search_path = {}").format(r))
            conn.execute("""CREATE TABLE src (id int, a int, s text);
                INSERT INTO src SELECT i, i % 40, 's' || i % 3 FROM generate_series(1, 400) i;
                ALTER TABLE src ENABLE ROW LEVEL SECURITY;
                CREATE POLICY half ON src USING (id % 2 = 0)""")
            yield role, conn
    finally:
        for (name,) in db.execute("SELECT format('%%I.%%I', release_schema, release_name) FROM "
                                  "anon.releases WHERE release_owner = %s::regrole", (role,)).fetchall():
            db.execute("SELECT anon.drop_release(%s, if_exists => true)", (name,))
        db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(f"{role}_rel")))
        db.execute("DELETE FROM anon.release_schemas WHERE schema_name = %s", (f"{role}_rel",))
        db.execute(sql.SQL("REVOKE CREATE ON DATABASE {} FROM {}").format(database, r))
        db.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(r))
        db.execute(sql.SQL("DROP ROLE {}").format(r))


def build(conn, role, name, memory):
    conn.execute("SELECT set_config('plpy_anon.build_memory', %s, false)", (memory,))
    return conn.execute("SELECT anon.mondrian_view(%s, 4, l => 2, quasi_identifiers => ARRAY['a'], "
                        "sensitive => ARRAY['id', 's'], release_schema => %s, release_name => %s)",
                        (f"{role}.src", f"{role}_rel", name)).fetchone()[0]


@pytest.mark.parametrize("parallel", [False, True])
def test_an_owners_unforced_policies_hide_no_row_out_of_core_as_in_memory(owner, parallel):
    role, conn = owner
    for statement in PARALLEL if parallel else ():
        conn.execute(statement)
    rels = {m: build(conn, role, f"r_{m}", size) for m, size in (("mem", "1GB"), ("ooc", "1kB"))}
    for rel in rels.values():
        assert conn.execute(f"SELECT count(*), count(DISTINCT id) FROM {rel}").fetchone() == (400, 400)
        assert conn.execute(f"SELECT count(*) FROM {rel} r JOIN src t USING (id) "
                            f"WHERE NOT r.a @> t.a").fetchone()[0] == 0
        assert min(class_sizes(conn, rel, ["a"])) >= 4
    metrics = conn.execute("SELECT metrics FROM anon.releases WHERE release_name = 'r_ooc' "
                           "AND release_schema = %s", (f"{role}_rel",)).fetchone()[0]
    assert metrics["out_of_core"]["regions"] > 1


@pytest.mark.parametrize("memory", ["1GB", "1kB"])
def test_an_owners_forced_policies_are_refused_out_of_core_as_in_memory(owner, memory):
    role, conn = owner
    conn.execute("ALTER TABLE src FORCE ROW LEVEL SECURITY")
    for statement in PARALLEL:
        conn.execute(statement)
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row security"):
        build(conn, role, "forced", memory)
