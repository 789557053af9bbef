"""The stable mode against an analyst who subtracts versions: classes whose released ranges
overlap (a person there could be in either) are linked, and so are the classes a person is in
across versions; the values a linked union gained or lost, when all one value and as many as
the people who joined or left it, are theirs (tests.helpers.pinned_by_difference, from the
released rows and the table's membership alone)."""
from __future__ import annotations

import numpy as np
import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import create_release, keep_released_version, pinned_by_difference

QIS = {"age": "range", "zip": "range"}
VALUES = ["flu", "hiv", "cold", "ok", "gout"]


def person(rng, i: int) -> tuple:
    return (i, int(rng.integers(20, 40)), int(rng.integers(0, 12)), VALUES[int(rng.integers(0, len(VALUES)))])


def pinned_over_pairs(versions: list[dict]) -> dict:
    pinned = {}
    for j in range(1, len(versions)):
        for i in range(j):
            pinned.update(pinned_by_difference(versions[i], versions[j]))
    return pinned


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), churn=st.integers(2, 8), refreshes=st.integers(2, 4))
def test_no_pair_of_versions_pins_anyone_from_the_released_rows(db, schema, seed, churn, refreshes):
    rng = np.random.default_rng(seed)
    db.execute("CREATE TABLE pt (id int PRIMARY KEY, age int, zip int, dx text)")
    rows = [person(rng, i) for i in range(60)]
    with db.cursor() as cur:
        cur.executemany("INSERT INTO pt VALUES (%s, %s, %s, %s)", rows)
    release = create_release(db, "mondrian_view", schema, "pt", k=3, l=2, quasi_identifiers=list(QIS),
                             sensitive=["dx"], identifiers=["id"], refresh_mode="stable")
    try:
        versions = run_versions(db, release, rng, churn, refreshes)
    finally:
        db.execute("SELECT anon.drop_release(%s)", (release,))
        db.execute("DROP TABLE pt")
    assert pinned_over_pairs(versions) == {}


def run_versions(db, release: str, rng, churn: int, refreshes: int) -> list[dict]:
    """What the analyst keeps of the first version and of each refresh (``churn`` people leave
    and as many join before each)."""
    versions = [keep_released_version(db, release, "pt", "id", QIS, "dx")]
    next_id = 60
    for _ in range(refreshes):
        ids = [r[0] for r in db.execute("SELECT id FROM pt ORDER BY id").fetchall()]
        gone = rng.choice(ids, size=min(churn, len(ids) - 10), replace=False).tolist()
        db.execute("DELETE FROM pt WHERE id = ANY(%s)", (gone,))
        with db.cursor() as cur:
            cur.executemany("INSERT INTO pt VALUES (%s, %s, %s, %s)",
                            [person(rng, next_id + j) for j in range(churn)])
        next_id += churn
        try:
            db.execute("SELECT anon.refresh(%s)", (release,))
        except psycopg.errors.DataException as refused:
            # refused: the published version stays; never for the run and the released rows
            # disagreeing (a fault, whose hint asks for a report)
            assert "Report this" not in (refused.diag.message_hint or ""), refused.diag.message_primary
        versions.append(keep_released_version(db, release, "pt", "id", QIS, "dx"))
    return versions


def stable_release_of_60(db, schema, rng):
    """``(release, release_id)``: a stable k = 3, l = 2 release of 60 people drawn from ``rng``."""
    db.execute("CREATE TABLE pt (id int PRIMARY KEY, age int, zip int, dx text)")
    with db.cursor() as cur:
        cur.executemany("INSERT INTO pt VALUES (%s, %s, %s, %s)", [person(rng, i) for i in range(60)])
    release = create_release(db, "mondrian_view", schema, "pt", k=3, l=2, quasi_identifiers=list(QIS),
                             sensitive=["dx"], identifiers=["id"], refresh_mode="stable")
    release_id = db.execute("SELECT release_id FROM anon.releases WHERE release_schema || '.' || "
                            "release_name = %s", (release,)).fetchone()[0]
    return release, release_id


def test_people_held_back_keep_the_group_whose_class_held_them(db, schema):
    """A person in the table links the classes that held them in each version, published or
    not: the newest version remembers whom it held back and in which group (their salted
    hashes, nobody else's, no earlier version's), and the next refresh publishes or holds them
    in the group holding that one now."""
    rng = np.random.default_rng(7)
    release, release_id = stable_release_of_60(db, schema, rng)
    newest = """SELECT version, held_back, waiting, waiting_groups FROM anon.release_versions
                WHERE release_id = %s ORDER BY version DESC LIMIT 1"""
    try:
        next_id, held, moved = 60, 0, {}
        waiting = groups = held_in = None
        for _ in range(REFRESHES_HELD):
            # leavers among the older half: the newer, held back more often, stay to be followed
            ids = [r[0] for r in db.execute("SELECT id FROM pt ORDER BY id").fetchall()]
            db.execute("DELETE FROM pt WHERE id = ANY(%s)",
                       (rng.choice(ids[:len(ids) // 2], size=8, replace=False).tolist(),))
            with db.cursor() as cur:
                cur.executemany("INSERT INTO pt VALUES (%s, %s, %s, %s)",
                                [person(rng, next_id + j) for j in range(8)])
            next_id += 8
            db.execute("SELECT anon.refresh(%s)", (release,))
            if waiting:
                roots = dict(zip(*db.execute("SELECT group_ids, roots FROM anon.release_versions "
                                             "WHERE release_id = %s AND version = %s",
                                             (release_id, held_in)).fetchone()))
                now = dict(db.execute("SELECT person, member_group FROM anon.release_people "
                                      "WHERE release_id = %s", (release_id,)).fetchall())
            held_in, held_back, new_waiting, new_groups = db.execute(newest, (release_id,)).fetchone()
            if waiting:
                now.update(zip(new_waiting or [], new_groups or []))
                moved.update({bytes(h): (roots[g], now[h]) for h, g in zip(waiting, groups)
                              if h in now and now[h] != roots[g]})
            waiting, groups = new_waiting, new_groups
            assert len(waiting or []) == len(groups or []) == held_back
            held += held_back
            assert db.execute("SELECT count(*) FROM anon.release_versions WHERE release_id = %s "
                              "AND waiting IS NOT NULL", (release_id,)).fetchone()[0] == (held_back > 0)
        assert held and moved == {}
    finally:
        db.execute("SELECT anon.drop_release(%s)", (release,))
        db.execute("DROP TABLE pt")


REFRESHES_HELD = 8


def unions_by_people(kept: dict) -> list:
    """The sorted multisets of the unions of several classes that some person in the table
    could be in at once (what an analyst links), from what he keeps of a version."""
    parent = {n: n for n in kept["classes"]}

    def find(x):
        while parent[x] != x:
            x = parent[x]
        return x

    for classes in kept["people"].values():
        for other in classes[1:]:
            parent[find(other)] = find(classes[0])
    unions: dict = {}
    for n, vals in kept["classes"].items():
        unions.setdefault(find(n), []).append(vals)
    return sorted(sorted(v for vals in parts for v in vals) for parts in unions.values() if len(parts) > 1)


def unions_of(linked: list, groups: list, multisets: dict) -> list:
    """The sorted multisets of the unions of several groups a stored version links."""
    unions: dict = {}
    for g, union in zip(groups, linked):
        unions.setdefault(union, []).append(multisets[g])
    return sorted(sorted(v for m in parts for v in m) for parts in unions.values() if len(parts) > 1)


def test_each_version_stores_the_classes_people_link(db, schema):
    """Every version stores, per group, its union of groups linked by the people in the table
    (held back ones too) and not by boxes that meet where nobody lies: as multisets, the
    unions the test links from the released rows and the table alone."""
    rng = np.random.default_rng(11)
    db.execute("CREATE TABLE pt (id int PRIMARY KEY, age int, zip int, dx text)")
    with db.cursor() as cur:
        cur.executemany("INSERT INTO pt VALUES (%s, %s, %s, %s)", [person(rng, i) for i in range(60)])
    release = create_release(db, "mondrian_view", schema, "pt", k=3, l=2, quasi_identifiers=list(QIS),
                             sensitive=["dx"], identifiers=["id"], refresh_mode="stable")
    stored = """SELECT group_ids, sizes, vals, people_linked, linked FROM anon.release_versions v
                JOIN anon.releases r USING (release_id)
                WHERE r.release_schema || '.' || r.release_name = %s ORDER BY version DESC LIMIT 1"""
    try:
        linked_somewhere = finer = 0
        for version in range(9):
            if version:
                ids = [r[0] for r in db.execute("SELECT id FROM pt ORDER BY id").fetchall()]
                db.execute("DELETE FROM pt WHERE id = ANY(%s)",
                           (rng.choice(ids, size=8, replace=False).tolist(),))
                with db.cursor() as cur:
                    cur.executemany("INSERT INTO pt VALUES (%s, %s, %s, %s)",
                                    [person(rng, 1000 * version + j) for j in range(8)])
                db.execute("SELECT anon.refresh(%s)", (release,))
            groups, sizes, vals, linked, boxes = db.execute(stored, (release,)).fetchone()
            assert linked is not None and len(linked) == len(groups)
            ends = np.cumsum(sizes)
            multisets = {g: [v for v in vals[end - size:end] if v is not None]
                         for g, size, end in zip(groups, sizes, ends)}
            claimed = unions_of(linked, groups, multisets)
            assert claimed == unions_by_people(keep_released_version(db, release, "pt", "id", QIS, "dx"))
            linked_somewhere += len(claimed)
            # boxes that meet where nobody lies link more groups than people do
            finer += len(unions_of(boxes or groups, groups, multisets)) > len(claimed)
        assert linked_somewhere > 0 and finer > 0
    finally:
        db.execute("SELECT anon.drop_release(%s)", (release,))
        db.execute("DROP TABLE pt")


def churned_table(db, schema, seed: int, k: int, l: int, refreshes: int, churn: int,
                  n: int = 120, span: int = 40, n_values: int = 4) -> list[dict]:
    """tests.unit.test_republish_bounds.churned_versions' sequence on a table (two QIs coded
    0..span-1, the same random draws): what the analyst keeps of the first version and of each
    refresh (a refused one keeps the version before)."""
    rng = np.random.default_rng(seed)
    people = {i: (rng.integers(0, span, 2), int(rng.integers(0, n_values))) for i in range(n)}
    db.execute("CREATE TABLE pq (id int PRIMARY KEY, q0 int, q1 int, dx text)")

    def insert(ids):
        with db.cursor() as cur:
            cur.executemany("INSERT INTO pq VALUES (%s, %s, %s, %s)",
                            [(i, int(people[i][0][0]), int(people[i][0][1]), f"v{people[i][1]}")
                             for i in ids])
    insert(sorted(people))
    qis = {"q0": "range", "q1": "range"}
    release = create_release(db, "mondrian_view", schema, "pq", k=k, l=l, quasi_identifiers=list(qis),
                             sensitive=["dx"], identifiers=["id"], refresh_mode="stable")
    versions = [keep_released_version(db, release, "pq", "id", qis, "dx")]
    try:
        next_id = n
        for _ in range(refreshes):
            gone = rng.choice(sorted(people), size=churn, replace=False).tolist()
            for i in gone:
                del people[i]
            db.execute("DELETE FROM pq WHERE id = ANY(%s)", (gone,))
            for i in range(next_id, next_id + churn):
                people[i] = (rng.integers(0, span, 2), int(rng.integers(0, n_values)))
            insert(range(next_id, next_id + churn))
            next_id += churn
            db.execute("SELECT anon.refresh(%s)", (release,))
            versions.append(keep_released_version(db, release, "pq", "id", qis, "dx"))
    finally:
        db.execute("SELECT anon.drop_release(%s)", (release,))
        db.execute("DROP TABLE pq")
    return versions


def test_an_earlier_class_whose_people_all_left_is_subtracted_apart(db, schema):
    """An analyst links a class of an earlier version to the classes now only through people in
    both: once its people have all left, it is a part of its own to him. The release follows
    each person's group through every stored version (their entry and each version's step),
    so it forms the parts as he does: following every earlier group to the group holding it
    now (a coarser part), it let the analyst who kept the third version and the eighth pin a
    joiner."""
    versions = churned_table(db, schema, 903, 3, 2, 7, 24)
    assert len(versions) == 8
    assert pinned_over_pairs(versions) == {}


def test_a_state_stored_without_entries_follows_people_from_its_newest_version(db, schema):
    """A release whose state was stored before entries were kept (no entries, no steps) is
    refreshed as before (every earlier group followed to the group holding it now); its first
    refresh gives its people the newest version and their group in it as their entry, and the
    next refreshes follow them from that version on."""
    rng = np.random.default_rng(3)
    release, release_id = stable_release_of_60(db, schema, rng)
    state = """SELECT version, entries_since, cardinality(entries) = cardinality(member_groups),
                      (SELECT array_agg(version ORDER BY version) FROM anon.release_versions v
                       WHERE v.release_id = s.release_id AND next_groups IS NOT NULL)
               FROM anon.release_state s WHERE release_id = %s"""
    versions = [keep_released_version(db, release, "pt", "id", QIS, "dx")]
    try:
        for version in range(1, 5):
            ids = [r[0] for r in db.execute("SELECT id FROM pt ORDER BY id").fetchall()]
            db.execute("DELETE FROM pt WHERE id = ANY(%s)", (rng.choice(ids, size=6, replace=False).tolist(),))
            with db.cursor() as cur:
                cur.executemany("INSERT INTO pt VALUES (%s, %s, %s, %s)",
                                [person(rng, 100 * version + j) for j in range(6)])
            if version == 2:
                # as a release stored before: no entries, no steps
                db.execute("UPDATE anon.release_state SET entries = NULL, entry_versions = NULL, "
                           "entry_groups = NULL, waiting_persons = NULL, waiting_entries = NULL, "
                           "version = NULL, entries_since = NULL WHERE release_id = %s", (release_id,))
                db.execute("UPDATE anon.release_versions SET next_groups = NULL WHERE release_id = %s",
                           (release_id,))
            db.execute("SELECT anon.refresh(%s)", (release,))
            versions.append(keep_released_version(db, release, "pt", "id", QIS, "dx"))
            expected = (version, 0, True, list(range(version))) if version < 2 else \
                (version, 1, True, list(range(1, version)))
            assert db.execute(state, (release_id,)).fetchone() == expected
    finally:
        db.execute("SELECT anon.drop_release(%s)", (release,))
        db.execute("DROP TABLE pt")
    assert pinned_over_pairs(versions) == {}
