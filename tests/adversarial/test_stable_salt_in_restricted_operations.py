"""Adversarial: a custodian's code run by PostgreSQL with the custodian's rights inside a
superuser's session reaches another custodian's stable release salt. ANALYZE (a DBA's, or
autovacuum's, with no one asking), VACUUM, CREATE INDEX and REFRESH MATERIALIZED VIEW evaluate
a table's index expressions and a materialized view's query as its owner, in a
security-restricted operation, while session_user stays the superuser who logged in. A test of
"a session of the release's owner" by session_user passes there for every release: the
intruder's index function read the victim's salt into its own table, and could delete or replace
it (the victim's next refresh then refused, its only way on a new history that analysts may
intersect with the old). Whoever reaches a salt must be a member of its owner as current_user,
the role the code runs as."""
from __future__ import annotations

import re

import psycopg
import pytest
from psycopg import sql

from tests.adversarial.test_release_state_and_history import stable_release


def plant(conn, schema: str, victim: int) -> None:
    """The intruder's table whose expression index runs ``grab`` (an IMMUTABLE function may call
    a VOLATILE one that writes), and its own materialized view whose query runs it too: each
    attempt on the victim's salt, through every way to it, is kept in ``loot``."""
    s = sql.Identifier(schema)
    conn.execute(sql.SQL("CREATE TABLE {}.loot (what text, cu text, su text, got text)").format(s))
    conn.execute(sql.SQL("""
        CREATE FUNCTION {s}.grab() RETURNS int LANGUAGE plpgsql VOLATILE AS $$
        BEGIN
            BEGIN
                INSERT INTO {s}.loot SELECT 'read', current_user, session_user, anon._release_salt({v});
            EXCEPTION WHEN OTHERS THEN
                INSERT INTO {s}.loot VALUES ('read refused', current_user, session_user, SQLSTATE);
            END;
            BEGIN
                INSERT INTO {s}.loot SELECT 'view', current_user, session_user, x.person_salt
                FROM anon.readable_release_secrets x WHERE x.release_id = {v};
            EXCEPTION WHEN OTHERS THEN
                INSERT INTO {s}.loot VALUES ('view refused', current_user, session_user, SQLSTATE);
            END;
            BEGIN
                PERFORM anon._store_release_salt({v}, NULL);
                INSERT INTO {s}.loot VALUES ('deleted', current_user, session_user, NULL);
            EXCEPTION WHEN OTHERS THEN
                INSERT INTO {s}.loot VALUES ('delete refused', current_user, session_user, SQLSTATE);
            END;
            RETURN 0;
        END $$""").format(s=s, v=sql.Literal(victim)))
    conn.execute(sql.SQL("CREATE FUNCTION {s}.f(int) RETURNS int LANGUAGE plpgsql IMMUTABLE "
                         "AS $$ BEGIN RETURN {s}.grab() + $1; END $$").format(s=s))
    conn.execute(sql.SQL("CREATE TABLE {s}.t (a int)").format(s=s))
    conn.execute(sql.SQL("INSERT INTO {s}.t SELECT generate_series(1, 3)").format(s=s))
    conn.execute(sql.SQL("CREATE MATERIALIZED VIEW {s}.m AS SELECT {s}.grab() AS g WITH NO DATA")
                 .format(s=s))


@pytest.mark.parametrize("dba_runs", ["ANALYZE {s}.t", "CREATE INDEX ON {s}.t ({s}.f(a))",
                                      "REFRESH MATERIALIZED VIEW {s}.m"])
def test_a_custodians_code_run_in_a_superusers_session_reaches_no_other_releases_salt(
        db, connect, owner, intruder, dba_runs):
    name, victim = stable_release(connect, *owner)
    salt = db.execute("SELECT person_salt FROM anon.release_secrets WHERE release_id = %s",
                      (victim,)).fetchone()[0]
    role, own = intruder
    s = sql.Identifier(own)
    with connect(user=role) as conn:
        plant(conn, own, victim)
        if "ANALYZE" in dba_runs:
            conn.execute(sql.SQL("CREATE INDEX ON {s}.t ({s}.f(a))").format(s=s))
        conn.execute(sql.SQL("TRUNCATE {}.loot").format(s))
        # as itself, the intruder is refused (the session is not the owner's)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT anon._release_salt(%s)", (victim,))
    # routine work of the DBA (or autovacuum) on the intruder's objects
    db.execute(sql.SQL(dba_runs).format(s=s))
    loot = db.execute(sql.SQL("SELECT what, cu, su, got FROM {}.loot").format(s)).fetchall()
    # the intruder's code did run, as the intruder, in the superuser's session
    assert loot and {(cu, su) for _, cu, su, _ in loot} == {(role, db.info.user)}, loot
    assert salt not in {got for *_, got in loot}, loot
    assert not [row for row in loot if row[0] == "deleted"], loot
    assert db.execute("SELECT person_salt FROM anon.release_secrets WHERE release_id = %s",
                      (victim,)).fetchone() == (salt,)
    with connect(user=owner[0]) as conn:      # the victim's release refreshes as before
        conn.execute("SELECT anon.refresh(%s)", (name,))
        assert len(conn.execute("SELECT anon._release_salt(%s)", (victim,)).fetchone()[0]) == 32


def test_through_the_salts_view_a_true_guess_and_a_false_one_run_the_same_plan(
        db, connect, owner, intruder):
    """anon.readable_release_secrets, as the state's views: the intruder's leakproof condition on
    the salt (starts_with) is evaluated only on the rows shown, so EXPLAIN ANALYZE tells nothing
    of another release's salt."""
    _, victim = stable_release(connect, *owner)
    salt = db.execute("SELECT person_salt FROM anon.release_secrets WHERE release_id = %s",
                      (victim,)).fetchone()[0]
    query = ("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT 1 FROM "
             "anon.readable_release_secrets WHERE release_id = %s AND starts_with(person_salt, %s)")
    with connect(user=intruder[0]) as conn:
        plans = {guess: re.sub(r"'(?:[^']|'')*'", "?", "\n".join(
                     r[0] for r in conn.execute(query, (victim, guess)).fetchall()))
                 for guess in (salt[:1], salt[:8], "x")}
    assert len(set(plans.values())) == 1, plans
