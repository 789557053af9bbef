"""Adversarial: the stable refresh region by region beyond plpy_anon.build_memory
(db/stable_regions.py: plan_refresh, RegionRefresh), attacked by an analyst who keeps every
version and by the source's writer, who chooses the churn and when it commits. Checked from the
released rows of every version: k, l, no person an analyst who kept every version narrows below
l, and every person's candidates as the check remembers them no wider than what the analyst
intersects (the check sees what the analyst sees); a refused refresh keeps the published rows.
A tiny budget stands in for a large table (32 regions of ~94 rows)."""
from __future__ import annotations

import psycopg
import pytest

from tests.db.test_interrupts import Running
from tests.db.test_stable_over_budget_regions import ROWS, catalog, people, stable
from tests.db.test_stable_refresh_over_budget import TINY, analyst_keeps, boxes, in_box
from tests.helpers import budget, class_sizes, distinct_sensitive_per_class, intersected_candidates
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
    narrows below l; nobody narrowed more than the check remembers."""
    assert min(class_sizes(db, rel, QIS)) >= 10
    assert min(distinct_sensitive_per_class(db, rel, QIS, "s")) >= 2
    analyst = intersected_candidates(kept)
    below = {p: sorted(v) for p, v in analyst.items() if len(v) < 2}
    assert below == {}, f"{len(below)} people below l = 2 across the versions: {below}"
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
    alone, is refused beyond the budget for the movers, and runs region by region for the
    joiners, safe across versions for the analyst who kept both."""
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
    if churn == "movers":
        with budget(db, TINY), pytest.raises(psycopg.Error) as refused:
            db.execute("SELECT anon.refresh(%s)", (rel,))
        assert refused.value.sqlstate == "54000"
        assert f"{len(moves):,} known people's quasi-identifiers left their region's box" in \
            refused.value.diag.message_primary
        assert db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3, 4").fetchall() == before
        return
    with budget(db, TINY):
        db.execute("SELECT anon.refresh(%s)", (rel,))
    assert catalog(db, rel)[1]["refreshed_by_regions"]
    kept.append(analyst_keeps(db, rel))
    safe_across_versions(db, rel, kept)


def test_movers_committed_during_a_repeatable_read_refresh_wait_for_the_next(db, schema, connect):
    """REPEATABLE READ: the plan, the regions' reads and the check see one snapshot, taken
    before the writer's movers committed: the refresh publishes the version of that snapshot
    (safe across versions for the analyst who knew the table then), and the next refresh,
    seeing the movers, is refused beyond the budget with that version kept."""
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
    published = db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3, 4").fetchall()
    with budget(db, TINY), pytest.raises(psycopg.Error) as refused:
        db.execute("SELECT anon.refresh(%s)", (rel,))
    assert refused.value.sqlstate == "54000"
    assert "left their region's box" in refused.value.diag.message_primary
    assert db.execute(f"SELECT * FROM {rel} ORDER BY 1, 2, 3, 4").fetchall() == published
    assert db.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == ROWS
