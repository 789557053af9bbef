"""Adversarial: the boxes of a stable release created region by region (anon.release_regions:
values of its quasi-identifiers at which its creation cut the table) attacked by another
custodian as the salts were (test_stable_salt_in_restricted_operations.py): its code run by a
superuser's ANALYZE, CREATE INDEX or REFRESH MATERIALIZED VIEW, as the intruder inside the
superuser's session, and its leakproof conditions under EXPLAIN ANALYZE through
anon.readable_release_regions. A probe that found nothing, kept: the view answers as
current_user and its OFFSET 0 fence keeps the intruder's conditions above the owner's test."""
from __future__ import annotations

import pytest
from psycopg import sql

from tests.adversarial.restricted_operations import DBA_RUNS, plans_by_guess, sprung


def regions_release(connect, role: str, own: str) -> int:
    """The owner's stable release of its 3,000 rows, created beyond a one-byte budget (regions
    stored): its release id."""
    with connect(user=role) as conn:
        conn.execute(sql.SQL("INSERT INTO {}.pat SELECT g, 20 + g % 40, 'z' || g % 5, 'd' || g % 4 "
                             "FROM generate_series(201, 3000) g").format(sql.Identifier(own)))
        conn.execute("SET plpy_anon.build_memory = '1'")
        name = conn.execute(
            "SELECT anon.mondrian_view(%s, k => 5, l => 2, quasi_identifiers => '{age,zip}', "
            "sensitive => '{dx}', identifiers => '{id}', refresh_mode => 'stable', "
            "release_schema => %s)::text", (f"{own}.pat", f"{own}_rel")).fetchone()[0]
        return conn.execute("SELECT release_id FROM anon.releases WHERE format('%%I.%%I', "
                            "release_schema, release_name) = %s", (name,)).fetchone()[0]


ATTEMPTS = {
    "view": "INSERT INTO {s}.loot SELECT 'view', current_user, session_user, x.bounds::text "
            "FROM anon.readable_release_regions x WHERE x.release_id = {v}",
    "table": "INSERT INTO {s}.loot SELECT 'table', current_user, session_user, x.bounds::text "
             "FROM anon.release_regions x WHERE x.release_id = {v}",
    "update": "UPDATE anon.release_regions SET bounds = '[]' WHERE release_id = {v}",
    "delete": "DELETE FROM anon.release_regions WHERE release_id = {v}",
}


@pytest.mark.parametrize("dba_runs", DBA_RUNS)
def test_a_custodians_code_run_in_a_superusers_session_reaches_no_other_releases_regions(
        db, connect, owner, intruder, dba_runs):
    victim = regions_release(connect, *owner)
    boxes = db.execute("SELECT region, bounds::text FROM anon.release_regions WHERE release_id = %s "
                       "ORDER BY 1", (victim,)).fetchall()
    assert len(boxes) > 1
    loot = sprung(db, connect, intruder, dba_runs, ATTEMPTS, victim)
    seen = {what for what, *_ in loot}
    assert {"view rows 0", "table refused", "update rows 0", "delete rows 0"} <= seen, loot
    assert not {got for what, *_, got in loot if what in ("view", "table")}, loot
    assert db.execute("SELECT region, bounds::text FROM anon.release_regions WHERE release_id = %s "
                      "ORDER BY 1", (victim,)).fetchall() == boxes


def test_through_the_regions_view_a_true_guess_and_a_false_one_run_the_same_plan(
        db, connect, owner, intruder):
    """A leakproof comparison on a box's text (texteq, starts_with) would run below a plain
    security_barrier view's row test, and EXPLAIN ANALYZE would count what it matched; the
    planner's estimate of an equality would read the column's statistics."""
    victim = regions_release(connect, *owner)
    cut = db.execute("SELECT bounds::text FROM anon.release_regions WHERE release_id = %s "
                     "ORDER BY region LIMIT 1", (victim,)).fetchone()[0]
    query = ("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT 1 FROM "
             "anon.readable_release_regions WHERE release_id = %s AND region >= 0 "
             "AND starts_with(bounds::text, %s)")
    with connect(user=intruder[0]) as conn:
        plans = plans_by_guess(conn, query, {g: (victim, g) for g in (cut[:1], cut[:12], "x")})
    assert len(set(plans.values())) == 1, plans
    assert "rows=0" in next(iter(plans.values()))
    # the planner's estimates, from the statistics a superuser's ANALYZE gathered: the same too
    db.execute("ANALYZE anon.release_regions")
    estimate = ("EXPLAIN SELECT 1 FROM anon.readable_release_regions WHERE release_id = %s "
                "AND bounds::text = %s")
    with connect(user=intruder[0]) as conn:
        estimates = plans_by_guess(conn, estimate, {g: (victim, g) for g in (cut, "x")})
    assert len(set(estimates.values())) == 1, estimates
