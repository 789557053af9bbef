"""Adversarial: a table owner against a custodian who is not a superuser and releases its table.

Without the superuser's locks, the owner could add an index calling its own function (or swap in
another table by renaming schemas) between plpy_anon's check and the custodian's read, and the
function would run with the custodian's rights: every table it may read, its catalog rows. So a
custodian reads only tables it may lock against new indexes (it owns them, or holds UPDATE, DELETE
or TRUNCATE) in a schema only it or a superuser may rename (guards.guard_source). Each test
FAILS while the rule is missing.
"""
from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from tests.helpers import PAYLOAD_FUNCTION, notices

CALLS = {
    "build": "SELECT anon.mondrian_view('{s}.t', k => 5, quasi_identifiers => '{{age,zip}}', "
             "sensitive => '{{dx}}', release_schema => '{r}')",
    "detect": "SELECT count(*) FROM anon.detect_identifiers('{s}.t')",
    "report": "SELECT count(*) FROM anon.risk_report('{s}.t', quasi_identifiers => '{{age,zip}}')",
}

TABLE = PAYLOAD_FUNCTION + """
CREATE TABLE {s}.t (id int PRIMARY KEY, age int, zip text, dx text);
INSERT INTO {s}.t SELECT g, 20 + g % 40, 'z' || g % 5, 'd' || g % 4 FROM generate_series(1, 300) g;
"""


@pytest.mark.parametrize("call", list(CALLS))
@pytest.mark.parametrize("setting", ["owner's schema, UPDATE granted", "superuser's schema, SELECT only"])
def test_a_custodian_does_not_read_a_table_it_cannot_keep_as_checked(db, connect, custodian, schema,
                                                                     release_schema, call, setting):
    role = f"{schema[:40]}_o"
    own = f"{schema[:40]}_os"
    r, s = sql.Identifier(role), sql.Identifier(own)
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(r))
    try:
        if setting.startswith("owner's"):
            db.execute(sql.SQL("CREATE SCHEMA {} AUTHORIZATION {}").format(s, r))
        else:
            db.execute(sql.SQL("CREATE SCHEMA {}").format(s))
            db.execute(sql.SQL("GRANT USAGE, CREATE ON SCHEMA {} TO {}").format(s, r))
        with connect(user=role) as a:
            a.execute(TABLE.format(s=own, owner=sql.Literal(role).as_string(a)))
            if setting.startswith("owner's"):
                a.execute(sql.SQL("GRANT UPDATE ON {}.t TO {}").format(s, sql.Identifier(custodian.role)))
        db.execute(f"SELECT anon.set_column_role('{own}.t', 'id', 'identifier')")
        with custodian() as c:
            seen = notices(c)
            with pytest.raises(psycopg.errors.InsufficientPrivilege,
                               match="cannot be kept as checked while this call reads it") as error:
                c.execute(CALLS[call].format(s=own, r=release_schema))
            assert "CREATE TABLE ... AS SELECT" in error.value.diag.message_hint
        assert not [m for m in seen if m.startswith("evil")]
        assert db.execute("SELECT count(*) FROM anon.releases WHERE release_schema = %s",
                          (release_schema,)).fetchone()[0] == 0
    finally:
        db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(s))
        db.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(r))
        db.execute(sql.SQL("DROP ROLE {}").format(r))


def test_a_custodian_releases_its_own_table_in_a_schema_of_the_database_owner(db, custodian, release_schema):
    """public belongs to pg_database_owner; the database's owner here is a superuser, so only a
    superuser may rename it: the custodian's own table there is released."""
    table = f"{release_schema[:40]}_own_t"
    db.execute(sql.SQL("GRANT CREATE ON SCHEMA public TO {}").format(sql.Identifier(custodian.role)))
    try:
        with custodian() as c:
            c.execute(sql.SQL("CREATE TABLE public.{} (id int, age int, zip text)").format(sql.Identifier(table)))
            c.execute(sql.SQL("INSERT INTO public.{} SELECT g, 20 + g % 40, 'z' || g % 5 "
                              "FROM generate_series(1, 100) g").format(sql.Identifier(table)))
            c.execute("SELECT anon.set_column_role(%s, 'id', 'identifier')", (f"public.{table}",))
            name = c.execute("SELECT anon.mondrian_view(%s, k => 5, release_schema => %s)",
                             (f"public.{table}", release_schema)).fetchone()[0]
            assert c.execute(f"SELECT count(*) FROM {name}").fetchone()[0] == 100
            c.execute("SELECT anon.drop_release(%s)", (name,))
    finally:
        db.execute(sql.SQL("DROP TABLE IF EXISTS public.{}").format(sql.Identifier(table)))
        db.execute(sql.SQL("REVOKE CREATE ON SCHEMA public FROM {}").format(sql.Identifier(custodian.role)))


def test_a_policy_on_a_superusers_table_is_not_run_by_a_custodian(db, custodian, schema, release_schema):
    """A seventh review: a superuser's policy may call or read what another role owns (a table
    whose index runs that role's function); no check follows a policy, so a custodian to whom row
    security applies does not read the table. Its own table (row security not forced) it does."""
    db.execute("CREATE TABLE guarded (id int, age int, zip text)")
    db.execute("INSERT INTO guarded SELECT g, 20 + g % 40, 'z' || g % 5 FROM generate_series(1, 100) g")
    db.execute("CREATE POLICY everyone ON guarded USING (true)")
    db.execute("ALTER TABLE guarded ENABLE ROW LEVEL SECURITY")
    db.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), sql.Identifier(custodian.role)))
    db.execute(sql.SQL("GRANT SELECT ON guarded TO {}").format(sql.Identifier(custodian.role)))
    db.execute("SELECT anon.set_column_role('guarded', 'id', 'identifier')")
    with custodian() as c:
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row security policies would run"):
            c.execute("SELECT anon.mondrian_view(%s, k => 5, release_schema => %s)",
                      (f"{schema}.guarded", release_schema))
        own = f"{release_schema[:40]}_data"
        c.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(own)))
        c.execute(sql.SQL("CREATE TABLE {}.mine AS SELECT * FROM {}.guarded").format(
            sql.Identifier(own), sql.Identifier(schema)))
        c.execute(sql.SQL("CREATE POLICY p ON {}.mine USING (false)").format(sql.Identifier(own)))
        c.execute(sql.SQL("ALTER TABLE {}.mine ENABLE ROW LEVEL SECURITY").format(sql.Identifier(own)))
        c.execute("SELECT anon.set_column_role(%s, 'id', 'identifier')", (f"{own}.mine",))
        name = c.execute("SELECT anon.mondrian_view(%s, k => 5, release_schema => %s)",
                         (f"{own}.mine", release_schema)).fetchone()[0]
        assert c.execute(f"SELECT count(*) FROM {name}").fetchone()[0] == 100   # the owner's rows
        c.execute("SELECT anon.drop_release(%s)", (name,))
        c.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(own)))


def test_a_custodian_granted_update_on_a_partitioned_parent_only_releases_it(db, custodian, schema, release_schema):
    """A seventh review: the guard named each partition to lock it, and LOCK checks privileges on
    the table it names: UPDATE on the parent alone (enough to lock the tree) made builds fail."""
    db.execute("CREATE TABLE parted (id int, age int, zip text) PARTITION BY RANGE (age)")
    db.execute("CREATE TABLE parted_young PARTITION OF parted FOR VALUES FROM (0) TO (40)")
    db.execute("CREATE TABLE parted_old PARTITION OF parted FOR VALUES FROM (40) TO (200)")
    db.execute("INSERT INTO parted SELECT g, 20 + g % 40, 'z' || g % 5 FROM generate_series(1, 120) g")
    db.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), sql.Identifier(custodian.role)))
    db.execute(sql.SQL("GRANT SELECT, UPDATE ON parted TO {}").format(sql.Identifier(custodian.role)))
    db.execute("SELECT anon.set_column_role('parted', 'id', 'identifier')")
    with custodian() as c:
        name = c.execute("SELECT anon.mondrian_view(%s, k => 5, release_schema => %s)",
                         (f"{schema}.parted", release_schema)).fetchone()[0]
        assert c.execute("SELECT row_count, verified FROM anon.refresh(%s)", (name,)).fetchone() == (120, True)
