"""Waiting for what another session is doing, observed rather than guessed from the time it takes:
a backend waiting for a lock, a notice seen, a backend that has spent some CPU. A test that
sleeps a fixed time before acting depends on the machine's speed (a quick one finishes first, a
loaded one has not started yet); these wait for the state itself. Their deadlines only turn a hang
into a failure: they are long, and reaching one is a failure, never a pass."""
from __future__ import annotations

import os
import time
from collections.abc import Callable

#: how long a state may take to appear before the test fails instead of hanging (not a bound on
#: any speed: a loaded machine reaches every state well within it)
HANG = 300.0


def wait_until(condition: Callable[[], object], what: str, timeout: float = HANG,
               every: float = 0.01) -> object:
    """Poll ``condition`` until it returns a true value (returned); fail naming ``what`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened within {timeout:.0f} s: {what}")
        time.sleep(every)


def blocked(conn, pid: int) -> bool:
    """Whether backend ``pid`` waits for a lock another backend holds (pg_blocking_pids reads the
    lock table live, also inside a transaction, unlike pg_stat_activity's snapshot)."""
    return conn.execute("SELECT cardinality(pg_catalog.pg_blocking_pids(%s)) > 0",
                        (pid,)).fetchone()[0]


def wait_until_blocked(conn, pid: int, what: str = "") -> None:
    """Until backend ``pid`` waits for a lock (read through ``conn``, another session)."""
    wait_until(lambda: blocked(conn, pid), what or f"backend {pid} waiting for a lock")


def waits_for_lock_or_retries(conn, pid: int) -> bool:
    """Whether backend ``pid`` waits for a lock, or sleeps between two attempts at one (a swap's
    bounded lock attempts back off in pg_sleep)."""
    return blocked(conn, pid) or backs_off(conn, pid)


def backs_off(conn, pid: int) -> bool:
    """Whether backend ``pid`` sleeps in pg_sleep: a swap's lock attempts back off so between a
    failed attempt and the next."""
    return conn.execute("SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity WHERE pid = %s "
                        "AND wait_event = 'PgSleep')", (pid,)).fetchone()[0]


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system, every thread) process ``pid`` has used: a backend's work,
    which a loaded machine spreads over more wall time but does not make larger."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_for_cpu(pid: int, seconds: float, still: Callable[[], bool], what: str) -> None:
    """Until backend ``pid`` has used ``seconds`` more CPU, while ``still()`` holds (a failure
    naming ``what`` when it stops holding first)."""
    start = cpu_seconds(pid)

    def spent():
        assert still(), f"ended before using {seconds} s of CPU: {what}"
        return cpu_seconds(pid) - start >= seconds
    wait_until(spent, what)
