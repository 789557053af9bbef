"""Errors of a plain REFRESH MATERIALIZED VIEW come as PostgreSQL's own: the message alone, its
SQLSTATE, no "plpy.Error: " / "spiexceptions." prefix and no Python traceback (issue 27, point 7;
a source shrunk below k is a contract check, test_contract.check_failed_plain_refresh_*)."""
from __future__ import annotations

import time

import psycopg
import pytest

from tests.helpers import load_python_stack, matview


def assert_clean(error: psycopg.Error) -> None:
    diag = error.diag
    for field in (diag.message_primary or "", diag.context or ""):
        assert "plpy." not in field and "spiexceptions." not in field and "Traceback" not in field, field


@pytest.fixture
def big_release(db, schema, release_schema):
    db.execute("CREATE TABLE big (id int PRIMARY KEY, age int, zip text, dx text)")
    db.execute("INSERT INTO big SELECT g, 20 + g % 60, 'z' || g % 50, 'd' || g % 4 FROM generate_series(1, 150000) g")
    return db.execute("SELECT anon.mondrian_view('big', k => 5, quasi_identifiers => '{age,zip}', "
                      "sensitive => '{dx}', release_schema => %s)", (release_schema,)).fetchone()[0]


def test_a_cancelled_refresh_reports_the_cancel_alone_and_keeps_the_old_rows(connect, schema, big_release):
    """statement_timeout cancels the refresh at different points (inside the Python run and in the
    SQL after it: fractions of this machine's own refresh); each cancel reads as PostgreSQL's,
    57014."""
    cancels = 0
    with connect() as conn:
        conn.execute(f"SET search_path = {schema}, public")
        load_python_stack(conn)
        started = time.monotonic()
        conn.execute(f"SELECT anon.refresh('{big_release}')")
        took = time.monotonic() - started
        for fraction in (0.05, 0.1, 0.25, 0.5, 0.8):
            conn.execute(f"SET statement_timeout = '{max(1, int(took * fraction * 1000))}ms'")
            for statement in (f"REFRESH MATERIALIZED VIEW {matview(conn, big_release)}",
                              f"SELECT anon.refresh('{big_release}')"):
                try:
                    conn.execute(statement)
                except psycopg.errors.QueryCanceled as exc:
                    cancels += 1
                    assert_clean(exc)
        conn.execute("RESET statement_timeout")
        assert conn.execute(f"SELECT count(*) FROM {big_release}").fetchone()[0] == 150000
    assert cancels >= 4


def test_a_refresh_of_a_release_dropped_meanwhile_fails_cleanly(db, connect, schema, big_release):
    """The run finds its release gone from the catalog (a drop committed after the REFRESH began
    planning): the error names it, without a prefix."""
    with connect() as conn, conn.transaction(force_rollback=True):
            conn.execute("DELETE FROM anon.releases WHERE format('%%I.%%I', release_schema, release_name) = %s",
                         (big_release,))
            with pytest.raises(psycopg.Error) as info, conn.transaction():   # (a savepoint)
                conn.execute(f"REFRESH MATERIALIZED VIEW {matview(conn, big_release)}")
            assert_clean(info.value)
            assert info.value.sqlstate not in ("38000", "XX000")
    assert db.execute(f"SELECT count(*) FROM {big_release}").fetchone()[0] == 150000


@pytest.mark.parametrize("arg", ["NULL", "12345"])
def test_the_owner_check_called_by_hand_fails_with_the_message_alone(db, arg):
    """anon._check_as_owner is what a custodian's throwaway check view calls; called otherwise it
    refuses, with no 'plpy.Error:' prefix or traceback in the message."""
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as error:
        db.execute(f"SELECT anon._check_as_owner({arg})")
    assert error.value.diag.message_primary.startswith("plpy_anon: no check is pending in this session")
    assert "plpy.Error" not in str(error.value) and "Traceback" not in str(error.value)
