"""The clock of a create or refresh call: phases never overlap and add up to the call's total."""
from __future__ import annotations

import time

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


def test_time_goes_to_the_innermost_phase_and_phase_is_a_no_op_without_a_clock():
    with timing.phase("read"):            # no call running: nothing to charge, no error
        pass
    assert timing.current() is None
    with timing.call(first="prepare") as clock:
        with timing.phase("build"):
            time.sleep(0.02)
            with timing.phase("read"):
                time.sleep(0.05)
        phases = clock.figures()["phases"]
    assert phases["read"] >= 0.05 and 0.02 <= phases["build"] < 0.05, phases
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
