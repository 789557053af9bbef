"""A custodian's trap for a DBA's routine work: ANALYZE (a DBA's, or autovacuum's, with no one
asking), CREATE INDEX and REFRESH MATERIALIZED VIEW evaluate a table's index expressions and a
materialized view's query as its owner, in a security-restricted operation, while session_user
stays the superuser who logged in. The intruder's code then tries each of its ``attempts`` on a
victim's catalog rows and keeps what it got in its own table ``loot``."""
from __future__ import annotations

import re

from psycopg import sql

DBA_RUNS = ["ANALYZE {s}.t", "CREATE INDEX ON {s}.t ({s}.f(a))", "REFRESH MATERIALIZED VIEW {s}.m"]


def plant(conn, schema: str, attempts: dict[str, str], victim: int) -> None:
    """The intruder's table whose expression index runs ``grab`` (an IMMUTABLE function may call
    a VOLATILE one that writes), and its own materialized view whose query runs it too. Each
    attempt (SQL; ``{s}`` the intruder's schema, ``{v}`` the victim's release id) runs in its own
    block: what it inserts into ``loot`` stays, then a row ``'<what> rows <n>'`` (its row count)
    or ``'<what> refused'`` with the SQLSTATE."""
    s = sql.Identifier(schema)
    conn.execute(sql.SQL("CREATE TABLE {}.loot (what text, cu text, su text, got text)").format(s))
    blocks = "".join(
        f"""BEGIN
                {attempt};
                GET DIAGNOSTICS n = ROW_COUNT;
                INSERT INTO {{s}}.loot VALUES ('{what} rows ' || n, current_user, session_user, NULL);
            EXCEPTION WHEN OTHERS THEN
                INSERT INTO {{s}}.loot VALUES ('{what} refused', current_user, session_user, SQLSTATE);
            END;
        """ for what, attempt in attempts.items())
    conn.execute(sql.SQL("CREATE FUNCTION {s}.grab() RETURNS int LANGUAGE plpgsql VOLATILE AS $$ "
                         "DECLARE n bigint; BEGIN " + blocks + " RETURN 0; END $$")
                 .format(s=s, v=sql.Literal(victim)))
    conn.execute(sql.SQL("CREATE FUNCTION {s}.f(int) RETURNS int LANGUAGE plpgsql IMMUTABLE "
                         "AS $$ BEGIN RETURN {s}.grab() + $1; END $$").format(s=s))
    conn.execute(sql.SQL("CREATE TABLE {s}.t (a int)").format(s=s))
    conn.execute(sql.SQL("INSERT INTO {s}.t SELECT generate_series(1, 3)").format(s=s))
    conn.execute(sql.SQL("CREATE MATERIALIZED VIEW {s}.m AS SELECT {s}.grab() AS g WITH NO DATA")
                 .format(s=s))


def sprung(db, connect, intruder, dba_runs: str, attempts: dict[str, str], victim: int) -> list:
    """The loot (what, current_user, session_user, got) after the intruder planted its trap and
    the superuser ``db`` ran ``dba_runs`` on the intruder's objects; checks that the intruder's
    code did run, as the intruder, inside the superuser's session."""
    role, own = intruder
    s = sql.Identifier(own)
    with connect(user=role) as conn:
        plant(conn, own, attempts, victim)
        if "ANALYZE" in dba_runs:
            conn.execute(sql.SQL("CREATE INDEX ON {s}.t ({s}.f(a))").format(s=s))
        conn.execute(sql.SQL("TRUNCATE {}.loot").format(s))
    db.execute(sql.SQL(dba_runs).format(s=s))
    loot = db.execute(sql.SQL("SELECT what, cu, su, got FROM {}.loot").format(s)).fetchall()
    assert loot and {(cu, su) for _, cu, su, _ in loot} == {(role, db.info.user)}, loot
    return loot


def plans_by_guess(conn, query: str, arguments: dict) -> dict[str, str]:
    """Each guess's plan text (``query`` run with ``arguments[guess]``), literals masked: a view
    that leaks nothing gives one plan for a true guess and a false one."""
    return {guess: re.sub(r"'(?:[^']|'')*'", "?", "\n".join(
                r[0] for r in conn.execute(query, params).fetchall()))
            for guess, params in arguments.items()}
