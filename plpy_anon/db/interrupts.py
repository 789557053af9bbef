"""The backend's pending cancels, timeouts and terminations, raised inside Python loops.

PL/Python runs Python with PostgreSQL's signals only *recorded*: a ``pg_cancel_backend``, a
``statement_timeout`` or a ``pg_terminate_backend`` acts at the next ``CHECK_FOR_INTERRUPTS`` of
the C code, which pure Python never reaches. Executing a saved plan of ``SELECT 1`` reaches one
(the executor checks before producing a row), and the pending cancel is raised there as
``plpy.spiexceptions.QueryCanceled`` (a termination ends the backend). :func:`honoured` installs
such a check, at most every :data:`INTERVAL` seconds by the clock, as
:func:`plpy_anon.core.interrupts.check` for the duration of a call from SQL.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager

from plpy_anon.core import interrupts

#: seconds between two visits to the executor: a cancel is honoured within this (plus the longest
#: stretch between two calls of check), and the visits cost ~0.1 % of a loop's time
INTERVAL = 0.05

_PLANS: dict = {}


def backend_check(plpy, interval: float = INTERVAL):
    """A function that, called often, raises the backend's pending interrupt within ``interval``
    seconds of the clock; from any other thread than this one it does nothing."""
    plan = _PLANS.get("ping")
    if plan is None:
        plan = _PLANS["ping"] = plpy.prepare("SELECT 1")
    owner = threading.get_ident()
    monotonic = time.monotonic
    due = [monotonic() + interval]

    def check():
        now = monotonic()
        if now >= due[0] and threading.get_ident() == owner:
            plpy.execute(plan)
            due[0] = now + interval

    return check


@contextmanager
def honoured(plpy):
    """Run the block with the core's long loops raising the backend's pending interrupts."""
    with interrupts.checking(backend_check(plpy)):
        yield
