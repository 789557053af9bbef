"""Adversarial: the stable refresh region by region beyond plpy_anon.build_memory
(db/stable_regions.py: plan_refresh, RegionRefresh), attacked by an analyst who keeps every
version and by the source's writer, who chooses the churn and when it commits (people moved
across boxes stay in the region remembering them). Checked from the released rows of every
version: k, l, no person an analyst who kept every version narrows below l or pins by
differencing two versions, every person's candidates as the check remembers them no wider than
what the analyst intersects (the check sees what the analyst sees), every person remembered in
one region, the one that remembered them before; a refused refresh keeps the published rows.
A tiny budget stands in for a large table (32 regions of ~94 rows)."""
from __future__ import annotations

import datetime

import psycopg
import pytest

from tests.db.test_interrupts import Running
from tests.db.test_stable_over_budget_regions import ROWS, catalog, people, stable
from tests.db.test_stable_refresh_over_budget import (
    TINY,
    analyst_keeps,
    boxes,
    churn,
    in_box,
    parse,
    remembered_regions,
    row_regions,
)
from tests.helpers import (
    budget,
    class_sizes,
    distinct_sensitive_per_class,
    intersected_candidates,
    pinned_by_difference,
)
from tests.waits import HANG

QIS = ["a", "b", "c"]


def regions_of_rows(db, stored: list, table: str = "t") -> dict:
    """Each region's rows now: {region: [(id, a, b, c), ...]}, by the stored boxes."""
    out: dict = {}
    for row in db.execute(f"SELECT id, a, b, c FROM {table} ORDER BY id").fetchall():
        inside = [i for i, box in enumerate(stored)
                  if in_box(box, {"a": [row[1]], "b": [row[2]], "c": [row[3]]})]
        assert len(inside) == 1, row
        out.setdefault(inside[0], []).append(row)
    return out


def movers_between_late_regions(db, stored: list, late: int, each: int = 6) -> list:
    """(id, a, b, c): ``each`` people of every one of the last ``late`` regions given the QIs of
    someone in the next of them (the last's go to the first), so each crosses a box."""
    rows = regions_of_rows(db, stored)
    last = sorted(r for r in rows if r >= len(stored) - late)
    assert len(last) >= 2
    moves = []
    for i, region in enumerate(last):
        target = rows[last[(i + 1) % len(last)]][0]
        moves += [(person[0], *target[1:]) for person in rows[region][1:1 + each]]
    return moves


def remembered(db, rel: str, table: str = "t") -> dict:
    """Each person of ``table``'s candidate values as the check remembered them
    (anon.release_people), keyed by id."""
    release_id = catalog(db, rel)[0]
    rows = db.execute(f"""
        SELECT p.id, x.candidates -> 's'
        FROM {table} p CROSS JOIN anon.release_secrets k
        JOIN anon.release_people x
          ON x.release_id = k.release_id
         AND x.person = sha256(decode(k.person_salt, 'hex') || convert_to(p.id::text, 'UTF8'))
        WHERE k.release_id = %s""", (release_id,)).fetchall()
    out: dict = {}
    for key, values in rows:
        assert key not in out, f"person {key} remembered twice"
        out[key] = set(values or [])
    return out


def safe_across_versions(db, rel: str, kept: list, table: str = "t") -> None:
    """k and l of the newest version from its rows; nobody the analyst who kept every version
    narrows below l; nobody pinned by differencing any two versions kept; nobody narrowed more
    than the check remembers."""
    assert min(class_sizes(db, rel, QIS)) >= 10
    assert min(distinct_sensitive_per_class(db, rel, QIS, "s")) >= 2
    analyst = intersected_candidates(kept)
    below = {p: sorted(v) for p, v in analyst.items() if len(v) < 2}
    assert below == {}, f"{len(below)} people below l = 2 across the versions: {below}"
    pinned = {p: v for j in range(1, len(kept)) for i in range(j)
              for p, v in pinned_by_difference(kept[i], kept[j]).items()}
    assert pinned == {}, f"{len(pinned)} people pinned by differencing two versions: {pinned}"
    check = remembered(db, rel, table)
    narrower = {p: (sorted(analyst[p]), sorted(v)) for p, v in check.items()
                if p in analyst and not v <= analyst[p]}
    assert narrower == {}, f"{len(narrower)} people the analyst narrows more than the check: " \
        f"{dict(list(narrower.items())[:5])}"


@pytest.mark.parametrize("churn", ["movers", "joiners"])
def test_churn_committed_between_the_plan_and_the_regions_reads_is_refused_as_the_sources(
        db, schema, connect, churn):
    """READ COMMITTED: the writer commits, once the plan is made (nobody moved then) and before
    the late regions are read, people moved across those regions' boxes (or new people in them).
    The plan and the regions' reads run in one statement's snapshot (the slices' function is
    STABLE), so the run publishes nothing the plan did not see; the check, a later statement,
    reads the regions again and refuses (40001) with the source's change named, not another
    refresh's, and its hint (lock the table); the published version stays. The next refresh,
    alone, runs region by region (the movers read with the regions remembering them), safe
    across versions for the analyst who kept both."""
    people(db, "t")
    with budget(db, TINY):
        rel = stable(db, schema, "t", "raced")
    stored = boxes(db, catalog(db, rel)[0])
    late = 4
    moves = movers_between_late_regions(db, stored, late)
    kept = [analyst_keeps(db, rel)]
    before = db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3, 4").fetchall()
    running = Running(connect, schema, f"SELECT anon.refresh('{rel}')",
                      f"SET plpy_anon.build_memory = '{TINY}'", "SET plpy_anon.progress = on")
    running.wait_for_notice("out of core: a stable refresh of")
    with db.cursor() as cur:
        if churn == "movers":
            cur.executemany("UPDATE t SET a = %s, b = %s, c = %s WHERE id = %s",
                            [(a, b, c, key) for key, a, b, c in moves])
        else:
            cur.executemany("INSERT INTO t VALUES (%s, %s, %s, %s, 'flu')",
                            [(10 * ROWS + key, a, b, c) for key, a, b, c in moves])
    # committed before the late regions were read
    assert not running.saw(f"region {len(stored) - late + 1} of"), running.notices
    running.thread.join(HANG)
    assert not running.running()
    assert running.error is not None and running.error.sqlstate == "40001", running.error
    assert "changed while its stable release was refreshed region by region" in \
        running.error.diag.message_primary
    assert "LOCK it IN SHARE MODE" in running.error.diag.message_hint
    assert db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3, 4").fetchall() == before
    assert refreshed_as_the_rows_say(db, rel, kept, stored)
    assert catalog(db, rel)[1]["movers"] == (len(moves) if churn == "movers" else 0)


def test_movers_committed_during_a_repeatable_read_refresh_wait_for_the_next(db, schema, connect):
    """REPEATABLE READ: the plan, the regions' reads and the check see one snapshot, taken
    before the writer's movers committed: the refresh publishes the version of that snapshot
    (safe across versions for the analyst who knew the table then), and the next refresh,
    seeing the movers, publishes region by region, safe across the three versions."""
    people(db, "t")
    with budget(db, TINY):
        rel = stable(db, schema, "t", "snapshot")
    stored = boxes(db, catalog(db, rel)[0])
    moves = movers_between_late_regions(db, stored, 4)
    kept = [analyst_keeps(db, rel)]
    db.execute("CREATE TABLE t_seen AS SELECT * FROM t")
    running = Running(connect, schema, f"SELECT anon.refresh('{rel}')",
                      f"SET plpy_anon.build_memory = '{TINY}'", "SET plpy_anon.progress = on",
                      "SET default_transaction_isolation = 'repeatable read'")
    running.wait_for_notice("out of core: a stable refresh of")
    with db.cursor() as cur:
        cur.executemany("UPDATE t SET a = %s, b = %s, c = %s WHERE id = %s",
                        [(a, b, c, key) for key, a, b, c in moves])
    running.thread.join(HANG)
    assert running.error is None, running.error
    assert catalog(db, rel)[1]["refreshed_by_regions"]
    kept.append(analyst_keeps(db, rel, "t_seen"))
    safe_across_versions(db, rel, kept, "t_seen")
    assert db.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == ROWS
    assert refreshed_as_the_rows_say(db, rel, kept, stored)
    assert catalog(db, rel)[1]["movers"] == len(moves)


def at_the_cuts(db, stored: list) -> tuple[list, list]:
    """(stays, crossings): people set to a value at one of their box's cuts on a or c (the cut's
    value, or one step either side), as (id, QI, value), split by whether the point stays inside
    their box by the stored cut (x < v or x <= v): one person a cut value and side each."""
    steps = {"a": 1, "c": datetime.timedelta(days=1)}
    stays, crossings, used, seen = [], [], set(), set()
    for region, rows in sorted(regions_of_rows(db, stored).items()):
        for cut in stored[region]:
            if cut["name"] not in steps or cut.get("value") is None:
                continue
            v = parse(cut["name"], cut["value"])
            for x in (v - steps[cut["name"]], v, v + steps[cut["name"]]):
                for key, a, b, c in rows:
                    if key in used:
                        continue
                    point = {"a": [a], "b": [b], "c": [c], cut["name"]: [x]}
                    inside = in_box(stored[region], point)
                    if (cut["name"], x, inside) in seen:
                        break
                    seen.add((cut["name"], x, inside))
                    used.add(key)
                    (stays if inside else crossings).append((key, cut["name"], x))
                    break
    return stays, crossings


def movers_now(db, release_id: int, stored: list) -> int:
    """Known people (remembered by the state, present or absent) whose row lies now in another
    box than the region that remembers them, from the source, the boxes and the state."""
    return sum(1 for now, before in row_regions(db, "t", release_id, stored).values()
               if before is not None and before != now)


def refreshed_as_the_rows_say(db, rel: str, kept: list, stored: list) -> bool:
    """A refresh beyond the budget, published region by region: each known person (published
    or held back) still remembered by the region that remembered them, wherever their row lies
    now (the movers counted as the source, the boxes and the state say), each joiner by their
    box's region, nobody by two; safe across every version kept. True when published."""
    release_id = catalog(db, rel)[0]
    before = row_regions(db, "t", release_id, stored)
    movers = sum(1 for now, was in before.values() if was is not None and was != now)
    with budget(db, TINY):
        db.execute("SELECT anon.refresh(%s)", (rel,))
    ooc = catalog(db, rel)[1]
    assert ooc["refreshed_by_regions"] and ooc["movers"] == movers, (ooc, movers)
    assert boxes(db, release_id) == stored
    after = row_regions(db, "t", release_id, stored)       # refuses a person in two regions
    for person, (now, was) in before.items():
        assert after[person][1] in (now if was is None else was, None), (person, now, was)
    assert all(was is not None for _, was in after.values())
    kept.append(analyst_keeps(db, rel))
    safe_across_versions(db, rel, kept)
    return True


@pytest.mark.parametrize("layout", ["compact", "flat"])
def test_values_at_the_cuts_comebacks_and_new_texts_refresh_as_the_boxes_say(db, schema, layout):
    """Churn the plan may misjudge, applied in turn, each refresh beyond the budget judged from
    the source, the stored boxes and the state (who lies outside the box of the region that
    remembers them: read with that region all the same) and from the released rows of every
    version: people set to their boxes' cut values (x < v against x <= v, on an integer and a
    date) that stay inside, then that cross; people who left coming back in another box; a text
    of b in no cut; people whose identifier changed; a region thinned to k rows."""
    people(db, "t")
    with budget(db, TINY):
        rel = stable(db, schema, "t", "cuts", layout=layout)
    release_id = catalog(db, rel)[0]
    stored = boxes(db, release_id)
    kept = [analyst_keeps(db, rel)]
    stays, crossings = at_the_cuts(db, stored)
    assert len(stays) >= 10 and len(crossings) >= 10, (len(stays), len(crossings))

    def set_values(changes):
        with db.cursor() as cur:
            for key, name, x in changes:
                cur.execute(f"UPDATE t SET {name} = %s WHERE id = %s", (x, key))

    # at the cuts, inside: nobody moved
    set_values(stays)
    assert refreshed_as_the_rows_say(db, rel, kept, stored)
    # one step across: movers, kept by the regions remembering them
    saved = db.execute("SELECT id, a, c FROM t WHERE id = ANY(%s)",
                       ([key for key, _, _ in crossings],)).fetchall()
    set_values(crossings)
    assert movers_now(db, release_id, stored) == len(crossings)
    assert refreshed_as_the_rows_say(db, rel, kept, stored)
    with db.cursor() as cur:
        cur.executemany("UPDATE t SET a = %s, c = %s WHERE id = %s",
                        [(a, c, key) for key, a, c in saved])
    # people who leave, then come back in another region's box
    db.execute("CREATE TABLE gone AS SELECT * FROM t WHERE id % 53 = 1")
    db.execute("DELETE FROM t WHERE id % 53 = 1")
    assert refreshed_as_the_rows_say(db, rel, kept, stored)
    db.execute("INSERT INTO t SELECT id, 105 - a, b, c, s FROM gone")
    assert movers_now(db, release_id, stored) > 0
    assert refreshed_as_the_rows_say(db, rel, kept, stored)
    db.execute("DELETE FROM t WHERE id IN (SELECT id FROM gone)")
    db.execute("INSERT INTO t SELECT * FROM gone")            # back in their own box
    assert refreshed_as_the_rows_say(db, rel, kept, stored)
    # a text of b that no cut names: the side of each cut on b that lists no text
    db.execute("UPDATE t SET b = 'northeast' WHERE id % 61 = 2")
    assert movers_now(db, release_id, stored) > 0
    assert refreshed_as_the_rows_say(db, rel, kept, stored)
    db.execute("UPDATE t SET b = (ARRAY['north', 'south', 'east', 'west'])[1 + (id * 7) % 4] "
               "WHERE id % 61 = 2")
    # a changed identifier: a leaver and a joiner in the same box
    db.execute(f"UPDATE t SET id = id + {10 * ROWS} WHERE id % 67 = 3")
    assert refreshed_as_the_rows_say(db, rel, kept, stored)
    # a region thinned to k rows
    thin = max(regions_of_rows(db, stored).items(), key=lambda item: len(item[1]))[1]
    db.execute("DELETE FROM t WHERE id = ANY(%s)", ([row[0] for row in thin[10:]],))
    assert refreshed_as_the_rows_say(db, rel, kept, stored)
    # and in memory at the end: the same history checked whole
    db.execute("SELECT anon.refresh(%s)", (rel,))
    assert catalog(db, rel)[2]["below_l"] == 0
    kept.append(analyst_keeps(db, rel))
    safe_across_versions(db, rel, kept)


def test_nulls_and_duplicated_identifiers_are_refused_or_kept_apart(db, schema):
    """The source's writer adds rows the plan must not take for a region's own: a NULL in a QI
    released as a range (in every class's range to an analyst), a NULL identifier; each refused
    (54000, the published rows kept, recorded in last_error). A NULL in the QI released as a set
    (a value of its sets) and a second row of a known identifier, in the same box or another
    (read with the region remembering them either way), are the region's own: refused likewise
    or published safe across versions."""
    db.execute("CREATE TABLE t (id int, a int, b text, c date, s text)")
    db.execute(f"""INSERT INTO t
        SELECT i, 18 + (i * 37) % 70, (ARRAY['north', 'south', 'east', 'west'])[1 + (i * 7) % 4],
               DATE '2000-01-01' + (i * 13) % 500,
               (ARRAY['flu', 'hiv', 'cancer', 'asthma', 'ok'])[1 + (i * 11) % 5]
        FROM generate_series(1, {ROWS}) i""")
    with budget(db, TINY):
        rel = stable(db, schema, "t", "dupes", identifiers=["id"])
    release_id = catalog(db, rel)[0]
    stored = boxes(db, release_id)
    kept = [analyst_keeps(db, rel)]
    rows = regions_of_rows(db, stored)
    first, other = rows[0][0], rows[len(stored) - 1][0]
    before = db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3, 4").fetchall()

    def refused(words: str) -> None:
        with budget(db, TINY), pytest.raises(psycopg.Error) as error:
            db.execute("SELECT anon.refresh(%s)", (rel,))
        assert error.value.sqlstate == "54000", error.value
        assert words in error.value.diag.message_primary, error.value
        assert db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3, 4").fetchall() == before
        assert db.execute("SELECT last_error FROM anon.releases WHERE release_id = %s",
                          (release_id,)).fetchone()[0]

    db.execute("INSERT INTO t VALUES (%s, NULL, %s, %s, 'flu')", (10 * ROWS, first[2], first[3]))
    refused("NULL in a QI released as a range")
    db.execute("DELETE FROM t WHERE id = %s", (10 * ROWS,))
    db.execute("INSERT INTO t VALUES (NULL, %s, %s, %s, 'flu')", first[1:])
    with budget(db, TINY), pytest.raises(psycopg.Error) as error:
        db.execute("SELECT anon.refresh(%s)", (rel,))
    assert error.value.sqlstate in ("54000", "22023"), error.value
    assert error.value.diag.message_hint, error.value
    assert db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3, 4").fetchall() == before
    db.execute("DELETE FROM t WHERE id IS NULL")
    # NULL in b only where the box's side on b holds NULL: nobody leaves their box
    null_b = [row[0] for region, held in rows.items() for row in held
              if row[0] % 59 == 4 and in_box(stored[region], {"a": [row[1]], "b": [None],
                                                               "c": [row[3]]})]
    assert null_b
    for change in (
            ("INSERT INTO t VALUES (%s, %s, %s, %s, 'ok')", (first[0], *other[1:])),
            ("INSERT INTO t VALUES (%s, %s, %s, %s, 'ok')", (first[0], *first[1:])),
            ("UPDATE t SET b = NULL WHERE id = ANY(%s)", (null_b,))):
        db.execute("DELETE FROM t WHERE id = %s AND s = 'ok' AND ctid <> "
                   "(SELECT min(ctid) FROM t WHERE id = %s)", (first[0], first[0]))
        db.execute(*change)
        if change[1][1:] != other[1:]:
            assert movers_now(db, release_id, stored) == 0
        before = db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3, 4").fetchall()
        try:
            with budget(db, TINY):
                db.execute("SELECT anon.refresh(%s)", (rel,))
        except psycopg.Error as error:
            assert error.sqlstate in ("54000", "22023", "23505"), error
            assert error.diag.message_hint, error
            assert db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3, 4").fetchall() == before
            continue
        assert catalog(db, rel)[1]["refreshed_by_regions"]
        kept.append(analyst_keeps(db, rel))
        safe_across_versions(db, rel, kept)


@pytest.fixture
def session_time_zone(db):
    """The shared connection, its TimeZone reset afterwards (the connection serves later tests)."""
    yield db
    db.execute("RESET TimeZone")


@pytest.mark.parametrize("path", ["regions", "in_memory"])
def test_an_identifier_whose_text_follows_the_session_keeps_its_people(session_time_zone, schema,
                                                                     path):
    """A timestamptz identifier's text follows the session's TimeZone: in Europe/London a
    summer instant reads '... 01:00:00+01' where UTC read '... 00:00:00+00', a winter one the
    same. Created in UTC, refreshed in Europe/London after summer people moved across boxes:
    the refresh must still follow them (read with the regions remembering them beyond the
    budget, or checked as movers in memory), never take them for new people whose earlier
    classes the check forgets while an analyst who kept the last version intersects them."""
    db = session_time_zone
    db.execute("SET TimeZone = 'UTC'")
    db.execute("CREATE TABLE t (id timestamptz PRIMARY KEY, a int, b text, c date, s text)")
    db.execute(f"""INSERT INTO t
        SELECT TIMESTAMPTZ '2020-01-01 00:00+00' + i * INTERVAL '2 hours', 18 + (i * 37) % 70,
               (ARRAY['north', 'south', 'east', 'west'])[1 + (i * 7) % 4],
               DATE '2000-01-01' + (i * 13) % 500,
               (ARRAY['flu', 'hiv', 'cancer', 'asthma', 'ok'])[1 + (i * 11) % 5]
        FROM generate_series(1, {ROWS}) i""")
    with budget(db, TINY):
        rel = stable(db, schema, "t", "zoned", identifiers=["id"])
    stored = boxes(db, catalog(db, rel)[0])
    rows = regions_of_rows(db, stored)
    summer = {r: [row for row in held if row[0].month in (6, 7, 8)] for r, held in rows.items()}
    late = sorted(r for r, held in summer.items() if len(held) > 6)[-4:]
    assert len(late) == 4
    moves = [(person[0], *summer[late[(i + 1) % 4]][0][1:])
             for i, region in enumerate(late) for person in summer[region][1:7]]
    kept = [analyst_keeps(db, rel)]
    with db.cursor() as cur:
        cur.executemany("UPDATE t SET a = %s, b = %s, c = %s WHERE id = %s",
                        [(a, b, c, key) for key, a, b, c in moves])
    before = db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3, 4").fetchall()
    db.execute("SET TimeZone = 'Europe/London'")
    assert db.execute("SELECT count(*) FROM t WHERE id::text <> (id AT TIME ZONE 'UTC')::text "
                      "|| '+00'").fetchone()[0] > len(moves)
    if path == "regions":
        with budget(db, TINY):
            db.execute("SELECT anon.refresh(%s)", (rel,))
        ooc = catalog(db, rel)[1]
        assert ooc["refreshed_by_regions"] and ooc["movers"] == len(moves), ooc
    else:
        db.execute("SELECT anon.refresh(%s)", (rel,))
    assert db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3, 4").fetchall() != before
    kept.append(analyst_keeps(db, rel))
    assert catalog(db, rel)[2]["seen_before"] == ROWS
    safe_across_versions(db, rel, kept)


def kept_of(db, rel: str) -> tuple:
    """The release's published rows, state rows, stored versions and boxes as they are."""
    release_id = catalog(db, rel)[0]
    return (db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3, 4").fetchall(),
            db.execute("SELECT md5(string_agg(s::text, '|' ORDER BY s.chunk)) "
                       "FROM anon.release_state s WHERE release_id = %s", (release_id,)).fetchone(),
            db.execute("SELECT md5(string_agg(v::text, '|' ORDER BY v.version)) "
                       "FROM anon.release_versions v WHERE release_id = %s",
                       (release_id,)).fetchone(),
            boxes(db, release_id))


@pytest.mark.parametrize("phase", [
    "out of core: a stable refresh of",            # the plan made, region 1 being read
    "region 17 of 32: fitting",
    "checking region 1 of 32: reading its people",
    "checking region 31 of 32: matching its classes",
    "checking region 32 of 32: remembering its people",
])
def test_a_cancel_at_any_phase_of_the_refresh_by_regions_keeps_the_release(db, schema, connect,
                                                                           phase):
    """pg_cancel_backend once a phase's notice is seen, from the plan to the last region's
    check: 57014 with the released rows, state, versions and boxes as they were (or, when the
    statement ended before the cancel landed, a version safe across versions); the next refresh
    publishes region by region."""
    people(db, "t")
    with budget(db, TINY):
        rel = stable(db, schema, "t", "stopped")
    kept = [analyst_keeps(db, rel)]
    db.execute("DELETE FROM t WHERE id % 29 = 0")
    db.execute("UPDATE t SET s = 'ok' WHERE id % 31 = 1")
    before = kept_of(db, rel)
    running = Running(connect, schema, f"SELECT anon.refresh('{rel}')",
                      f"SET plpy_anon.build_memory = '{TINY}'", "SET plpy_anon.progress = on")
    running.wait_for_notice(phase)
    db.execute("SELECT pg_cancel_backend(%s)", (running.pid,))
    running.thread.join(HANG)
    assert not running.running()
    if running.error is None:                  # ended before the cancel landed
        assert phase.startswith("checking region 32"), running.notices
        kept.append(analyst_keeps(db, rel))
    else:
        assert running.error.sqlstate == "57014", running.error
        assert kept_of(db, rel) == before
    with budget(db, TINY):
        db.execute("SELECT anon.refresh(%s)", (rel,))
    assert catalog(db, rel)[1]["refreshed_by_regions"]
    kept.append(analyst_keeps(db, rel))
    safe_across_versions(db, rel, kept)


def waiting_ids(db, rel: str) -> list:
    """The ids of the people the state holds back, from the state and the source."""
    release_id = catalog(db, rel)[0]
    return [key for (key,) in db.execute("""
        SELECT t.id FROM t CROSS JOIN anon.release_secrets k
        WHERE k.release_id = %(r)s
          AND sha256(decode(k.person_salt, 'hex') || convert_to(t.id::text, 'UTF8')) IN (
              SELECT substr(s.waiting_persons, 32 * (g - 1) + 1, 32) FROM anon.release_state s,
                     generate_series(1, octet_length(s.waiting_persons) / 32) g
              WHERE s.release_id = %(r)s)
        ORDER BY 1""", {"r": release_id}).fetchall()]


def test_held_back_people_who_move_stay_held_in_their_region(db, schema):
    """People a version held back (waiting in a group) who then move to another region's box
    stay with the region remembering them: the refresh publishes region by region, counting
    those 6 among the movers, safe across versions; back in their boxes likewise."""
    people(db, "t")
    with budget(db, TINY):
        rel = stable(db, schema, "t", "held")
    release_id = catalog(db, rel)[0]
    stored = boxes(db, release_id)
    kept = [analyst_keeps(db, rel)]
    for step in range(2):
        churn(db, step)
        assert refreshed_as_the_rows_say(db, rel, kept, stored)
    waiting = set(waiting_ids(db, rel))
    assert len(waiting) >= 6
    rows = regions_of_rows(db, stored)
    region_of = {row[0]: (region, row) for region, held in rows.items() for row in held}
    movers = sorted(waiting)[:6]
    moves = []
    for key in movers:
        region = region_of[key][0]
        target = rows[(region + len(stored) // 2) % len(stored)][0]
        moves.append((key, *target[1:]))
    with db.cursor() as cur:
        cur.executemany("UPDATE t SET a = %s, b = %s, c = %s WHERE id = %s",
                        [(a, b, c, key) for key, a, b, c in moves])
    assert movers_now(db, release_id, stored) == 6
    assert refreshed_as_the_rows_say(db, rel, kept, stored)
    # back in their boxes: refreshed region by region, safe
    with db.cursor() as cur:
        cur.executemany("UPDATE t SET a = %s, b = %s, c = %s WHERE id = %s",
                        [(row[1], row[2], row[3], key) for key in movers
                         for row in [region_of[key][1]]])
    assert refreshed_as_the_rows_say(db, rel, kept, stored)


def test_the_integers_ends_in_a_qi_refresh_as_the_boxes_say(db, schema):
    """a set to the integer's ends (-2147483648, 2147483647: a class holding the largest has no
    exclusive upper bound, [x,)): whoever that takes out of their box stays in their region (a
    class of movers found by its bounds, the largest one's unbounded); published region by
    region, safe across versions, as when it keeps them inside; then an in-memory refresh,
    after which the state is one region and the refresh beyond the budget is refused, the
    published version kept."""
    people(db, "t")
    with budget(db, TINY):
        rel = stable(db, schema, "t", "ends")
    release_id = catalog(db, rel)[0]
    stored = boxes(db, release_id)
    kept = [analyst_keeps(db, rel)]
    rows = regions_of_rows(db, stored)
    ends = [(key, x) for region, held in rows.items() for key, a, b, c in held if key % 37 == 5
            for x in [(-2147483648, 2147483647)[key % 2]]]
    inside = [(key, x) for key, x in ends for region, held in rows.items() for row in held
              if row[0] == key and in_box(stored[region], {"a": [x], "b": [row[2]], "c": [row[3]]})]
    assert inside and len(inside) < len(ends)
    saved = db.execute("SELECT id, a FROM t WHERE id = ANY(%s)", ([k for k, _ in ends],)).fetchall()
    with db.cursor() as cur:
        cur.executemany("UPDATE t SET a = %s WHERE id = %s", [(x, key) for key, x in ends])
        assert movers_now(db, release_id, stored) == len(ends) - len(inside)
        assert refreshed_as_the_rows_say(db, rel, kept, stored)
        cur.executemany("UPDATE t SET a = %s WHERE id = %s", [(a, key) for key, a in saved])
        cur.executemany("UPDATE t SET a = %s WHERE id = %s", [(x, key) for key, x in inside])
    assert refreshed_as_the_rows_say(db, rel, kept, stored)
    db.execute("SELECT anon.refresh(%s)", (rel,))
    kept.append(analyst_keeps(db, rel))
    safe_across_versions(db, rel, kept)
    assert boxes(db, release_id) == []
    before = db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3, 4").fetchall()
    with budget(db, TINY), pytest.raises(psycopg.Error) as error:
        db.execute("SELECT anon.refresh(%s)", (rel,))
    assert error.value.sqlstate == "54000"
    assert "region by region" in error.value.diag.message_detail
    assert db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3, 4").fetchall() == before


def test_a_region_whose_people_all_left_and_others_joined_is_refused(db, schema):
    """Every person of one region leaves and as many new people join inside its box: the region
    keeps nobody of the last version, whose groups its joiners would need new ids for; refused
    (54000, naming the region), the published rows kept; with one of them back it publishes
    region by region, safe across versions."""
    people(db, "t")
    with budget(db, TINY):
        rel = stable(db, schema, "t", "replaced")
    release_id = catalog(db, rel)[0]
    stored = boxes(db, release_id)
    kept = [analyst_keeps(db, rel)]
    region, held = max(regions_of_rows(db, stored).items(), key=lambda item: len(item[1]))
    db.execute("CREATE TABLE gone AS SELECT * FROM t WHERE id = ANY(%s)", ([r[0] for r in held],))
    db.execute("DELETE FROM t WHERE id IN (SELECT id FROM gone)")
    db.execute(f"INSERT INTO t SELECT id + {10 * ROWS}, a, b, c, s FROM gone")
    assert movers_now(db, release_id, stored) == 0
    before = db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3, 4").fetchall()
    with budget(db, TINY), pytest.raises(psycopg.Error) as error:
        db.execute("SELECT anon.refresh(%s)", (rel,))
    assert error.value.sqlstate == "54000", error.value
    assert f"region {region} of" in error.value.diag.message_primary
    assert "keeps nobody of the last version" in error.value.diag.message_primary
    assert db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3, 4").fetchall() == before
    db.execute("INSERT INTO t SELECT * FROM gone ORDER BY id LIMIT 1")
    assert refreshed_as_the_rows_say(db, rel, kept, stored)


def test_two_plain_refreshes_at_once_region_by_region_publish_checked_versions(db, schema, connect):
    """Two sessions run REFRESH MATERIALIZED VIEW of the release's storage at once beyond the
    budget (each takes its snapshot before it waits for the release's lock): each publishes a
    version checked against the state the other left, or is refused (40001: region by region the
    waiting one is not run again as in memory) with nothing published; at least one publishes,
    and every version published is safe across versions."""
    from tests.helpers import matview
    people(db, "t")
    with budget(db, TINY):
        rel = stable(db, schema, "t", "twice")
    kept = [analyst_keeps(db, rel)]
    db.execute("DELETE FROM t WHERE id % 43 = 0")
    db.execute("UPDATE t SET s = 'ok' WHERE id % 47 = 1")
    storage = matview(db, rel)
    runs = [Running(connect, schema, f"REFRESH MATERIALIZED VIEW {storage}",
                    f"SET plpy_anon.build_memory = '{TINY}'") for _ in range(2)]
    for running in runs:
        running.thread.join(HANG)
        assert not running.running()
    # a REFRESH returns no rows: Running's fetchall fails without a SQLSTATE once it succeeded
    errors = [r.error for r in runs if r.error is not None and r.error.sqlstate is not None]
    assert all(e.sqlstate == "40001" for e in errors), errors
    assert len(errors) < 2
    assert catalog(db, rel)[1]["refreshed_by_regions"]
    kept.append(analyst_keeps(db, rel))
    safe_across_versions(db, rel, kept)
    versions = db.execute("SELECT count(*) FROM anon.release_versions WHERE release_id = %s",
                          (catalog(db, rel)[0],)).fetchone()[0]
    assert versions == 1 + len(runs) - len(errors)


def remembered_once(db, release_id: int, before: dict) -> dict:
    """Every person the state remembers (present, absent or held back) -> their one region;
    refuses a person in two regions, or one remembered ``before`` now in another region."""
    now = remembered_regions(db, release_id)
    # a person may be both remembered and held back, in one region's rows
    twice = {p: r for p, r in now.items() if len(set(r)) > 1}
    assert twice == {}, f"{len(twice)} people remembered in several regions"
    moved = {p: (before[p], r[0]) for p, r in now.items() if p in before and before[p] != r[0]}
    assert moved == {}, f"{len(moved)} people remembered by another region than before"
    return {p: r[0] for p, r in now.items()}


@pytest.mark.parametrize("layout", ["compact", "flat"])
def test_movers_across_boxes_stay_in_the_region_remembering_them(db, schema, layout):
    """Churn that moves known people across boxes, each refresh beyond the budget region by
    region: everyone's age + 1; a few people to a far box; some of those movers leaving; people
    who left coming back in another box; a mover back in their own box. After each, from the
    released rows of every version kept: k, l, nobody an analyst narrows below l or pins by
    differencing two versions, nobody narrowed more than the check remembers; the movers as
    the source, the boxes and the state say; every person remembered (present, absent or held
    back) in exactly one region, the one remembering them before. Then a refresh in memory
    of the state written, safe across all versions."""
    people(db, "t")
    with budget(db, TINY):
        rel = stable(db, schema, "t", "movers", layout=layout)
    release_id = catalog(db, rel)[0]
    stored = boxes(db, release_id)
    kept = [analyst_keeps(db, rel)]
    known = remembered_once(db, release_id, {})
    assert len(known) == ROWS
    shapes = [
        "UPDATE t SET a = a + 1",
        ("UPDATE t SET a = 105 - a, b = (ARRAY['north', 'south', 'east', 'west'])[1 + (id + 1) % 4] "
         "WHERE id % 41 = 0"),
        "DELETE FROM t WHERE id % 82 = 0",
        "CREATE TABLE gone AS SELECT * FROM t WHERE id % 59 = 3; DELETE FROM t WHERE id % 59 = 3",
        "INSERT INTO t SELECT id, 105 - a, b, c + 250, s FROM gone",
        "UPDATE t SET a = 105 - a WHERE id % 82 = 41",
    ]
    movers = []
    for shape in shapes:
        for statement in shape.split("; "):
            db.execute(statement)
        movers.append(movers_now(db, release_id, stored))
        assert refreshed_as_the_rows_say(db, rel, kept, stored)
        known = remembered_once(db, release_id, known)
        assert catalog(db, rel)[2]["below_l"] == 0
    # everyone's age moved some across a cut on a; the far movers many more
    assert movers[0] > 0 and movers[1] > movers[0] and movers[4] > movers[3], movers
    # the leavers stay remembered (absent) by their region
    assert len(known) == ROWS
    db.execute("SELECT anon.refresh(%s)", (rel,))
    kept.append(analyst_keeps(db, rel))
    safe_across_versions(db, rel, kept)
    across = catalog(db, rel)[2]
    assert across["people"] + across["held_back"] == \
        db.execute("SELECT count(*) FROM t").fetchone()[0], across
    assert across["below_l"] == 0 and across["seen_before"] > 0.99 * across["people"]
