"""A cancel or a statement_timeout inside an out-of-core build (plpy_anon.build_memory below the
table's estimate) lands within a second of the backend's CPU at every phase the build announces
(SET plpy_anon.progress = on): the top's passes, a region's read, fit and write, the check of the
released rows, and a stable creation's check region by region (reading a region's people,
matching its classes, remembering them). Each stop is sent once the phase's notice is seen
(pg_cancel_backend), or set to fall in it (statement_timeout at the time the phase began in a
build of the same table measured in the same test, plus half its length). Each must end in a
clean 57014, with the release it was replacing unchanged (its rows, the catalog's row, its
remembered state and versions, the release schema's relations) and readable; the backend then
builds the release again. How late a stop lands is the backend's CPU between it and the end
(/proc/<pid>/stat, tests/waits.py): a loaded machine spreads it over more wall time, it does not
make it larger."""
from __future__ import annotations

import os
import threading
import time

import pytest
from psycopg import sql

from tests.db.test_interrupts import WITHIN, Running, canceled
from tests.helpers import release_schema_of
from tests.waits import cpu_seconds

#: rows of the table, and the budget of each mode that sends it out of core in 8-16 regions (a
#: stable creation's regions hold fewer rows: it keeps each person's state besides). Larger
#: regions for a measurement: PLPY_ANON_CANCEL_ROWS=1000000 PLPY_ANON_CANCEL_BUDGETS=64MB,100MB
ROWS = int(os.environ.get("PLPY_ANON_CANCEL_ROWS", "60000"))
BUDGET = dict(zip(["fresh", "stable"],
                  os.environ.get("PLPY_ANON_CANCEL_BUDGETS", "2MB,7MB").split(",")))

#: the phases of a fresh build (the notice each begins with), in their order; a region's from
#: the second region on, so that the previous region's work is behind
FRESH_PHASES = ["creating", "region 2 of", "region 2 of {n}: fitting", "region 2 of {n}: writing",
                "checking the released rows"]
#: the phases of a stable creation's check region by region
STABLE_PHASES = ["checking region 2 of {n}: reading", "checking region 2 of {n}: matching",
                 "checking region 2 of {n}: remembering"]


def build(schema: str, mode: str) -> str:
    stable = "l => 2, refresh_mode => 'stable'" if mode == "stable" else "refresh_mode => 'fresh'"
    return (f"SELECT anon.mondrian_view('big', k => 5, quasi_identifiers => '{{a,b,c}}', "
            f"sensitive => '{{s}}', {stable}, release_name => 'big_{mode}', replace => true, "
            f"release_schema => '{release_schema_of(schema)}')")


def settings(mode: str) -> list[str]:
    return [f"SET plpy_anon.build_memory = '{BUDGET[mode]}'", "SET plpy_anon.progress = on",
            "SELECT anon.versions()"]          # numpy and pandas imported before the statement


def snapshot(db, schema: str, mode: str) -> tuple:
    """What a stopped replacement must leave as it was: the release's rows, its catalog row, its
    remembered state, people and versions, the release schema's relations."""
    rel_schema = release_schema_of(schema)
    digest = db.execute(sql.SQL("SELECT count(*), md5(string_agg(r::text, ';' ORDER BY r::text)) "
                                "FROM {}.{} r").format(sql.Identifier(rel_schema),
                                                       sql.Identifier(f"big_{mode}"))).fetchone()
    relations = db.execute("SELECT array_agg(relname::text ORDER BY relname) FROM pg_class "
                           "WHERE relnamespace = %s::regnamespace", (rel_schema,)).fetchone()[0]
    catalog = db.execute("SELECT release_id, created_at::text, row_count, metrics::text "
                         "FROM anon.releases WHERE release_schema = %s ORDER BY release_id",
                         (rel_schema,)).fetchall()
    ids = [row[0] for row in catalog]
    remembered = db.execute(
        "SELECT (SELECT count(*) FROM anon.release_state WHERE release_id = ANY(%(r)s)), "
        "(SELECT count(*) FROM anon.release_people WHERE release_id = ANY(%(r)s)), "
        "(SELECT count(*) FROM anon.release_versions WHERE release_id = ANY(%(r)s)), "
        "(SELECT count(*) FROM anon.releases)", {"r": ids}).fetchone()
    return digest, relations, catalog, remembered


def notice_times(running: Running) -> list[tuple[float, str]]:
    """The notices of a statement, each with its seconds since the statement started."""
    return [(at - running.started, text) for at, text in running.notices]


def began(notices, words: str) -> float | None:
    return next((at for at, text in notices if words in text), None)


def regions_of(notices) -> int:
    """The regions the build announced (its 'out of core: N regions' notice)."""
    text = next(text for _, text in notices if "out of core:" in text)
    return int(text.split("out of core:")[1].split()[0])


class TimedOut(Running):
    """A statement stopped by statement_timeout: the backend's CPU read when the timeout fell due
    (``cpu_due``), by a thread sleeping until then."""

    def __init__(self, connect, schema, statement, timeout: float, *setup):
        self.cpu_due = None
        self.timeout = timeout
        super().__init__(connect, schema, statement, *setup,
                         f"SET statement_timeout = '{int(timeout * 1000)}ms'")
        threading.Thread(target=self._read_when_due, daemon=True).start()

    def _read_when_due(self):
        time.sleep(max(0.0, self.started + self.timeout - time.monotonic()))
        if self.running():
            self.cpu_due = cpu_seconds(self.pid)


@pytest.fixture(scope="module")
def big(db, connect, module_schema):
    """The table, and a first release of each mode built over the budget: ``(schema, {mode: its
    notices timed})``."""
    db.execute(sql.SQL("""
        CREATE TABLE {}.big AS
        SELECT g AS id, (g * 7919) % 100003 AS a, (g * 104729) % 50021 AS b, (g * 31) % 997 AS c,
               (ARRAY['flu', 'hiv', 'cold', 'ok', 'gout'])[1 + g % 5] AS s
        FROM generate_series(1::int8, {}) g""").format(sql.Identifier(module_schema),
                                                        sql.Literal(ROWS)))
    db.execute(sql.SQL("ALTER TABLE {}.big ADD PRIMARY KEY (id)").format(
        sql.Identifier(module_schema)))
    db.execute(sql.SQL("ANALYZE {}.big").format(sql.Identifier(module_schema)))
    return module_schema, {mode: first_build(db, connect, module_schema, mode)
                           for mode in ("fresh", "stable")}


def first_build(db, connect, schema: str, mode: str) -> list[tuple[float, str]]:
    """The release built (or built again) over the budget, uninterrupted: its notices timed."""
    running = Running(connect, schema, build(schema, mode), *settings(mode))
    running.join()
    assert running.error is None, running.error
    notices = notice_times(running)
    assert regions_of(notices) >= 3, notices
    metrics = db.execute("SELECT metrics -> 'out_of_core' FROM anon.releases "
                         "WHERE release_schema = %s AND release_name = %s",
                         (release_schema_of(schema), f"big_{mode}")).fetchone()[0]
    assert metrics["regions"] == regions_of(notices)
    assert bool(metrics.get("stable_regions")) == (mode == "stable")
    return notices


def phases(mode: str, notices) -> list[str]:
    n = regions_of(notices)
    return [p.format(n=n) for p in (FRESH_PHASES if mode == "fresh" else STABLE_PHASES)]


def cancel_at(db, connect, big, mode: str, aimed: list[str]) -> None:
    """The release of ``mode`` built again and canceled at each phase of ``aimed``, then built
    again to the end."""
    big, notices = big[0], big[1][mode]
    before = snapshot(db, big, mode)
    landed = {}
    for phase in [p for p in phases(mode, notices) if p in aimed]:
        running = Running(connect, big, build(big, mode), *settings(mode))
        running.wait_for_notice(phase)
        late = running.cancel(db)
        canceled(running)
        landed[phase] = (round(late, 3), running.notices[-1][1])
        assert late < WITHIN, (phase, late, running.notices[-3:])
        assert not running.saw("plpy_anon: done"), "the build had ended"
        assert snapshot(db, big, mode) == before, phase
    assert len(landed) == len(aimed), (landed, aimed)
    print(f"\n{mode}: CPU after the cancel, and the last notice, per phase: {landed}")
    assert any(text.startswith("plpy_anon: done") for _, text in first_build(db, connect, big, mode))


@pytest.mark.parametrize("mode", ["fresh", "stable"])
def test_a_cancel_inside_a_region_lands_within_a_second(db, connect, big, mode):
    """The fit of a fresh build's second region; a stable creation's check of its second
    region's people against the released classes."""
    aimed = "region 2 of {n}: fitting" if mode == "fresh" else "checking region 2 of {n}: matching"
    cancel_at(db, connect, big, mode, [aimed.format(n=regions_of(big[1][mode]))])


@pytest.mark.slow                       # a build canceled at each of 8 phases: ~1-2 min
@pytest.mark.parametrize("mode", ["fresh", "stable"])
def test_a_cancel_lands_within_a_second_at_every_phase_of_an_out_of_core_build(
        db, connect, big, mode):
    cancel_at(db, connect, big, mode, phases(mode, big[1][mode]))


@pytest.mark.slow                       # ~10 builds of 60,000 rows over the budget: ~1-2 min
@pytest.mark.parametrize("mode", ["fresh", "stable"])
def test_statement_timeout_lands_within_a_second_at_the_phases_of_an_out_of_core_build(
        db, connect, big, mode):
    """A timeout set to fall halfway through each phase as the first build timed it: on a loaded
    machine it may fall in a neighbouring phase (the last notice says which; all are reported).
    A build that ended within its timeout is tried again with the timeout shorter by a third, one
    whose timeout fell before the build began its release with it half as long again."""
    big, notices = big[0], big[1][mode]
    before = snapshot(db, big, mode)
    landed = []
    for phase in phases(mode, notices):
        start = began(notices, phase)
        following = [at for at, _ in notices if at > start]
        timeout = start + ((following[0] - start) / 2 if following else 0.05)
        for _ in range(5):
            running = TimedOut(connect, big, build(big, mode), timeout, *settings(mode))
            running.join()
            if running.error is None:           # the whole build within the timeout
                before = snapshot(db, big, mode)
                timeout *= 2 / 3
            elif not running.saw("plpy_anon: creating"):
                timeout *= 1.5
            else:
                break
        canceled(running)
        assert "statement timeout" in str(running.error)
        assert running.saw("plpy_anon: creating"), "no timeout fell in the build in five tries"
        assert not running.saw("plpy_anon: done")
        assert running.cpu_due is not None
        late = running.cpu_ended - running.cpu_due
        landed.append((phase, round(timeout, 2), round(late, 3), running.notices[-1][1]))
        assert late < WITHIN, (phase, late, running.notices[-3:])
        assert snapshot(db, big, mode) == before, phase
    print(f"\n{mode}: per phase aimed at, the timeout, the CPU after it fell due, the last "
          f"notice: {landed}")
