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

import psycopg
import pytest

from tests.adversarial.restricted_operations import DBA_RUNS, plans_by_guess, sprung
from tests.adversarial.test_release_state_and_history import stable_release

ATTEMPTS = {
    "read": "INSERT INTO {s}.loot SELECT 'read', current_user, session_user, anon._release_salt({v})",
    "view": "INSERT INTO {s}.loot SELECT 'view', current_user, session_user, x.person_salt "
            "FROM anon.readable_release_secrets x WHERE x.release_id = {v}",
    "delete": "PERFORM anon._store_release_salt({v}, NULL)",
}


@pytest.mark.parametrize("dba_runs", DBA_RUNS)
def test_a_custodians_code_run_in_a_superusers_session_reaches_no_other_releases_salt(
        db, connect, owner, intruder, dba_runs):
    name, victim = stable_release(connect, *owner)
    salt = db.execute("SELECT person_salt FROM anon.release_secrets WHERE release_id = %s",
                      (victim,)).fetchone()[0]
    # as itself, the intruder is refused (the session is not the owner's)
    with connect(user=intruder[0]) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("SELECT anon._release_salt(%s)", (victim,))
    # routine work of the DBA (or autovacuum) on the intruder's objects
    loot = sprung(db, connect, intruder, dba_runs, ATTEMPTS, victim)
    assert {"read refused", "view rows 0", "delete refused"} <= {what for what, *_ in loot}, loot
    assert salt not in {got for *_, got in loot}, loot
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
        plans = plans_by_guess(conn, query, {g: (victim, g) for g in (salt[:1], salt[:8], "x")})
    assert len(set(plans.values())) == 1, plans
