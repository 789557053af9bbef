"""Adversarial: another custodian reads a stable release's state through the planner. Row
security hides rows, not their values: a leakproof comparison (``bytea >=``) in the intruder's
WHERE runs below the policy's qual, and whether the policy's subplan ran (EXPLAIN ANALYZE) tells
whether the hidden value is at least a guess; bisecting reads the state's record fingerprints
byte by byte, and under a public key a fingerprint gives away the sensitive value of every person
whose quasi-identifiers the intruder knows. So custodians select only the key columns of
anon.release_state and anon.release_versions and read values through the barrier views
anon.readable_release_state / _versions, whose rows are fenced (OFFSET 0) from the querying role's
conditions."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd
import psycopg
import pytest
from psycopg import sql

PLAN = "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) "
#: the record fingerprint's combining multiplier (a record is its QIs' and value's hashes, folded)
FOLD = 0x100000001B3
VALUES = ("d0", "d1", "d2", "d3")


def plan(conn, relation: str, release_id: int, column: str, guess) -> str:
    """EXPLAIN ANALYZE of the intruder's probe: the rows of ``relation`` of the release whose
    ``column`` is at least ``guess``, with the guess's literal blanked out."""
    text = "\n".join(r[0] for r in conn.execute(
        sql.SQL(PLAN + "SELECT 1 FROM anon.{} WHERE release_id = %s AND {} >= %s")
        .format(sql.Identifier(relation), sql.Identifier(column)), (release_id, guess)).fetchall())
    return re.sub(r"'[^']*'", "''", text)


def at_least(conn, relation: str, release_id: int, column: str, guess: bytes) -> bool:
    """Whether the hidden ``column`` of the release's row is >= ``guess``, as the probe tells it:
    under row security alone, the policy's subplan ran only for rows the leakproof comparison
    kept."""
    return "never executed" not in plan(conn, relation, release_id, column, guess)


def bisected(conn, relation: str, release_id: int, column: str, limit: int) -> bytes:
    """The hidden bytea, read a byte at a time by bisection (at most ``limit`` bytes)."""
    known = b""
    while len(known) < limit and at_least(conn, relation, release_id, column, known + b"\x00"):
        lo, hi = 0, 255                       # the largest byte b with value >= known + b
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if at_least(conn, relation, release_id, column, known + bytes([mid])):
                lo = mid
            else:
                hi = mid - 1
        known += bytes([lo])
    return known


def fingerprint(age: int, zip_code: str, value: str) -> int:
    """A record's fingerprint computed from its texts with pandas alone."""
    out = 0
    for text in (str(age), zip_code, value):
        hashed = int(pd.util.hash_array(np.array([text], dtype=object), categorize=False)[0])
        out = (out * FOLD) % 2**64 ^ hashed
    return out


def test_another_custodian_cannot_read_a_stable_states_fingerprints_to_learn_sensitive_values(
        db, connect, owner, intruder):
    role, own = owner
    with connect(user=role) as conn:
        table = sql.SQL("{}.pat").format(sql.Identifier(own))
        conn.execute(sql.SQL("DELETE FROM {} WHERE id > 18").format(table))
        name = conn.execute(
            "SELECT anon.mondrian_view(%s, k => 3, l => 2, quasi_identifiers => '{age,zip}', "
            "sensitive => '{dx}', identifiers => '{id}', refresh_mode => 'stable', "
            "release_schema => %s)", (f"{own}.pat", f"{own}_rel")).fetchone()[0]
        conn.execute("SELECT anon.refresh(%s)", (name,))
        release_id = conn.execute("SELECT release_id FROM anon.releases WHERE format('%%I.%%I', "
                                  "release_schema, release_name) = %s", (name,)).fetchone()[0]
        people = conn.execute(sql.SQL("SELECT age, zip, dx FROM {}").format(table)).fetchall()
        # the owner reads its own state's values through the view
        assert conn.execute("SELECT octet_length(records) FROM anon.readable_release_state "
                            "WHERE release_id = %s", (release_id,)).fetchone() == (8 * len(people),)
    # what the state and versions hold, as the superuser reads them (the true answers)
    records, persons = db.execute("SELECT records, persons FROM anon.release_state "
                                  "WHERE release_id = %s AND chunk = 0", (release_id,)).fetchone()
    held_back, counterfeit = db.execute(
        "SELECT held_back, counterfeit FROM anon.release_versions WHERE release_id = %s "
        "ORDER BY version DESC LIMIT 1", (release_id,)).fetchone()
    probes = [("release_state", "records", bytes(records), b"\xff"),
              ("release_state", "persons", bytes(persons), b"\xff"),
              ("release_versions", "held_back", held_back, held_back + 1),
              ("release_versions", "counterfeit", counterfeit, counterfeit + 1)]
    with connect(user=intruder[0]) as conn:
        assert conn.execute("SELECT count(*) FROM anon.release_state WHERE release_id = %s",
                            (release_id,)).fetchone() == (0,)       # row security hides the row
        for relation, column, _, _ in probes:               # the values are not the intruder's
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match=relation):
                plan(conn, relation, release_id, column, b"\x00" if column in (
                    "records", "persons") else 0)
            conn.rollback()
        # through the views, a true guess and a false one run the same plan
        through_views = [(f"readable_{relation}", *probe) for relation, *probe in probes]
        through_views.append(("release_people", "person", bytes(persons[:32]), b"\xff"))
        for view, column, true, false in through_views:
            assert plan(conn, view, release_id, column, true) == \
                plan(conn, view, release_id, column, false), (view, column)
        stolen = bisected(conn, "readable_release_state", release_id, "records",
                          8 * len(people) + 8)
    # every guess answered alike: the bisection reads nothing, or bytes that are not the state's
    assert len(stolen) < 8 or not bytes(records).startswith(stolen[:8]), stolen[:8]
    fingerprints = set(np.frombuffer(stolen[:len(stolen) // 8 * 8], dtype="<u8").tolist())
    # the intruder knows each person's quasi-identifiers; a value whose fingerprint the stolen
    # bytes held would be theirs
    learned = [[v for v in VALUES if fingerprint(age, zip_code, v) in fingerprints]
               for age, zip_code, _ in people]
    pinned = sum(guess == [dx] for guess, (_, _, dx) in zip(learned, people))
    assert pinned == 0, f"{pinned} of {len(people)} people's sensitive values read from the state"
