"""The clock of a create or refresh call: phases never overlap and add up to the call's total."""
from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.db import timing

# a program: ("enter", name) / ("leave",) steps, each after a tiny pause
STEPS = st.lists(st.one_of(st.tuples(st.just("enter"), st.sampled_from(["read", "fit", "verify"])),
                           st.tuples(st.just("leave"))), max_size=12)


@settings(max_examples=60, deadline=None)
@given(STEPS)
def test_phases_add_up_to_the_total_however_they_nest(steps):
    with timing.call() as clock:
        depth = 0
        for step in steps:
            time.sleep(0.0005)
            if step[0] == "enter":
                clock.enter(step[1])
                depth += 1
            elif depth:
                clock.leave()
                depth -= 1
        figures = clock.figures()
    assert abs(sum(figures["phases"].values()) - figures["seconds"]) < 1e-3
    assert figures["seconds"] >= 0.0005 * len(steps)


class SteppedTime:
    """The ``time`` plpy_anon.db.timing reads: monotonic() stands still until sleep() moves it, so
    the phases are exact however busy the machine is."""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_time_goes_to_the_innermost_phase_and_phase_is_a_no_op_without_a_clock(monkeypatch):
    clock_time = SteppedTime()
    monkeypatch.setattr(timing, "time", clock_time)
    with timing.phase("read"):            # no call running: nothing to charge, no error
        pass
    assert timing.current() is None
    with timing.call(first="prepare") as clock:
        with timing.phase("build"):
            clock_time.sleep(0.02)
            with timing.phase("read"):
                clock_time.sleep(0.05)
        figures = clock.figures()
    assert figures["phases"]["read"] == pytest.approx(0.05), figures
    assert figures["phases"]["build"] == pytest.approx(0.02), figures
    assert figures["seconds"] == pytest.approx(0.07), figures
    assert timing.current() is None


def test_a_call_starts_when_its_sql_body_started():
    started = time.monotonic() - 2.0       # the body began 2 s ago (imports, checks)
    timing.entering(started)
    with timing.entry():
        assert timing.entry_started() == started
        with timing.entry():               # a nested call without a generated body: now
            assert timing.entry_started() > started + 1.9
        with timing.call(timing.entry_started()) as clock:
            assert clock.figures()["seconds"] >= 2.0
    assert timing.entry_started() is None


def test_a_clock_switched_at_a_past_time_charges_the_first_phase_up_to_it(monkeypatch):
    clock_time = SteppedTime()
    monkeypatch.setattr(timing, "time", clock_time)
    with timing.call(first="locks") as clock:     # a plain REFRESH: waited, then built
        clock_time.sleep(3.0)
        run_started = clock_time.monotonic()
        clock_time.sleep(0.4)
        clock.switch_at(run_started, "build")
        clock.switch_at(run_started - 10, "build")   # a time before the last mark charges nothing
        figures = clock.figures()
    assert figures["phases"] == {"locks": pytest.approx(3.0), "build": pytest.approx(0.4)}
    assert figures["seconds"] == pytest.approx(3.4)
