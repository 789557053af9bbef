"""The wall clock of a call that creates or refreshes a release, and the phases it spent it in.

A call's clock starts when its SQL function's body starts (``entering``, from the body the build
generates, before its imports; ``errors.sql_entry`` takes it up), so the recorded duration is the
caller's: imports, lock waits, the build, the check of the released rows, the swap. The code
below marks its phases with ``phase(name)``; time is charged to the innermost phase running, so
phases never overlap, and with ``prepare`` (time in no marked phase) they add up to the total.
``phase`` does nothing when no clock runs (a method's run outside a create or refresh call).

Standard library only: the generated bodies import it before anything else.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

_pending: float | None = None       # set by a generated body, taken by its sql_entry
_entries: list[float] = []          # start of each SQL entry running, innermost last
_clocks: list[Clock] = []           # clocks of the calls running, innermost last


class Clock:
    """Seconds since ``started`` (time.monotonic()), charged to phases."""

    def __init__(self, started: float | None = None, first: str = "prepare"):
        self.started = time.monotonic() if started is None else started
        self.phases: dict[str, float] = {}
        self._running = [first]
        self._mark = self.started

    def _charge(self, now: float) -> None:
        name = self._running[-1]
        self.phases[name] = self.phases.get(name, 0.0) + (now - self._mark)
        self._mark = now

    def enter(self, name: str) -> None:
        self._charge(time.monotonic())
        self._running.append(name)

    def leave(self) -> None:
        self._charge(time.monotonic())
        self._running.pop()

    def switch_at(self, when: float, name: str) -> None:
        """Charge the running phase up to ``when`` (a time.monotonic() already past, not before
        the last mark) and what follows it to ``name``."""
        self._charge(max(when, self._mark))
        self._running[-1] = name

    def figures(self) -> dict:
        """``{"seconds": total, "phases": {name: seconds}}`` now; the phases add up to the total
        (each rounded to 0.1 ms)."""
        now = time.monotonic()
        self._charge(now)
        return {"seconds": now - self.started,
                "phases": {name: round(s, 4) for name, s in self.phases.items() if s > 0}}


def entering(started: float) -> None:
    """Called first by a generated SQL function body: when its call started."""
    global _pending
    _pending = started


@contextlib.contextmanager
def entry() -> Iterator[None]:
    """Around a Python function called from SQL (errors.sql_entry): its call's start."""
    global _pending
    started, _pending = _pending or time.monotonic(), None
    _entries.append(started)
    try:
        yield
    finally:
        _entries.pop()


def entry_started() -> float | None:
    """When the innermost SQL call running started (None outside one)."""
    return _entries[-1] if _entries else None


@contextlib.contextmanager
def call(started: float | None = None, first: str = "prepare") -> Iterator[Clock]:
    """A clock for one create or refresh, current until the block ends."""
    clock = Clock(started, first)
    _clocks.append(clock)
    try:
        yield clock
    finally:
        _clocks.remove(clock)


def current() -> Clock | None:
    return _clocks[-1] if _clocks else None


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Charge the block's time to ``name`` in the current call's clock (if any)."""
    clock = current()
    if clock is None:
        yield
        return
    clock.enter(name)
    try:
        yield
    finally:
        clock.leave()
