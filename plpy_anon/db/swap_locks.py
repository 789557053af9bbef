"""Bounded lock waits: the ACCESS EXCLUSIVE locks a refresh's swap or a drop takes on relations
that readers (and a plain REFRESH's check) also lock, taken together in attempts of
``plpy_anon.swap_lock_timeout`` each, backing off between attempts, for at most
``plpy_anon.swap_wait`` in all (then 55P03, lock_not_available). Each attempt is a subtransaction:
one that times out releases what it took, so whoever waits for one of its relations while holding
another (a reader of a compact release's view waiting for its storage; a plain REFRESH of the
storage whose check reads the view) goes on, and neither the wait nor a deadlock can last.
"""
from __future__ import annotations

import random
import re
import time

from plpy_anon.core.errors import AnonError, InvalidParameter
from plpy_anon.db import extschema
from plpy_anon.db.sqltext import progress, run


def qualified_text(release: dict) -> str:
    """The release as messages name it (user text: a release anon.versions keeps its name)."""
    return extschema.user(f"{release['release_schema']}.{release['release_name']}")


DEFAULT_ATTEMPT = 0.2        # plpy_anon.swap_lock_timeout: one lock attempt, seconds
DEFAULT_WAIT = 60.0          # plpy_anon.swap_wait: all attempts together, seconds
MAX_PAUSE = 2.0              # longest pause between attempts, seconds
DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(us|ms|s|min|h|d)?\s*$")
UNIT_SECONDS = {"us": 1e-6, "ms": 1e-3, None: 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


class LockNotAvailable(AnonError):
    """The swap could not take its lock within plpy_anon.swap_wait: long readers hold the release."""

    sqlstate = "55P03"


def parse_duration(setting: str, value: str | None, default: float) -> float:
    """A duration setting in seconds: '200ms', '30s', '5min', '1h'; a bare number is milliseconds
    (as for lock_timeout). Unset or empty: ``default``."""
    if value is None or not value.strip():
        return default
    match = DURATION.match(value.strip().lower())
    if match is None:
        raise InvalidParameter(f"{setting} = '{value}' is not a duration",
                               hint=f"Use e.g. SET {setting} = '200ms', '30s' or '5min' (a bare number is milliseconds).")
    return float(match.group(1)) * UNIT_SECONDS[match.group(2)]


class SwapWaits:
    """How long the swap may wait for readers: ``attempt`` seconds per lock attempt (readers that
    arrive meanwhile queue behind it for at most that long), ``total`` seconds in all."""

    def __init__(self, attempt: float, total: float):
        self.attempt, self.total = attempt, total

    @classmethod
    def from_settings(cls, plpy) -> SwapWaits:
        row = run(plpy, """
            SELECT pg_catalog.current_setting('plpy_anon.swap_lock_timeout', true) AS attempt,
                   pg_catalog.current_setting('plpy_anon.swap_wait', true) AS total""")[0]
        attempt = parse_duration("plpy_anon.swap_lock_timeout", row["attempt"], DEFAULT_ATTEMPT)
        total = parse_duration("plpy_anon.swap_wait", row["total"], DEFAULT_WAIT)
        if attempt < 0.001:
            raise InvalidParameter(f"plpy_anon.swap_lock_timeout must be at least 1ms, got '{row['attempt']}'",
                                   hint="Use e.g. SET plpy_anon.swap_lock_timeout = '200ms'.")
        return cls(attempt, total)


def lock_for_swap(plpy, release: dict, relations: list[tuple[str, str, str]], waits: SwapWaits,
                  action: str = "refresh") -> None:
    """ACCESS EXCLUSIVE locks on ``relations`` ((kind, schema, name): what the swap drops or the
    in-place REFRESH rewrites) without ever sitting in the lock queue in front of readers for
    more than ``waits.attempt``: each attempt runs in a subtransaction with a short lock_timeout;
    between attempts the queue is free (new readers pass) while we back off; after
    ``waits.total`` the refresh gives up with SQLSTATE 55P03 and the old release stays.

    The lock is taken with ``ALTER ... OWNER TO <its owner>``: a no-op that takes ACCESS
    EXCLUSIVE (LOCK TABLE refuses materialized views)."""
    targets = run(plpy, """
        SELECT c.oid, t.kind, pg_catalog.quote_ident(t.schema) || '.' || pg_catalog.quote_ident(t.name) AS qualified,
               pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(c.relowner)) AS owner
        FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), pg_catalog.unnest($3))
             WITH ORDINALITY AS t(kind, schema, name, i)
        JOIN pg_catalog.pg_namespace n ON n.nspname = t.schema
        JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = t.name
        ORDER BY t.i""", ["text[]", "text[]", "text[]"],
        [[r[0] for r in relations], [r[1] for r in relations], [r[2] for r in relations]])
    if not targets:
        return
    assert all(t["kind"] in ("VIEW", "MATERIALIZED VIEW") for t in targets)   # ours, never user text
    previous = run(plpy, "SELECT pg_catalog.current_setting('lock_timeout') AS v")[0]["v"]
    attempt_ms = max(1, round(waits.attempt * 1000))
    t0, pause, attempts = time.monotonic(), 0.05, 0
    while True:
        attempts += 1
        try:
            with plpy.subtransaction():
                run(plpy, "SELECT pg_catalog.set_config('lock_timeout', $1, true)", ["text"], [f"{attempt_ms}ms"])
                for t in targets:
                    plpy.execute(f"ALTER {t['kind']} {extschema.user(t['qualified'])} "
                                 f"OWNER TO {extschema.user(t['owner'])}")
        except plpy.spiexceptions.LockNotAvailable:
            waited = time.monotonic() - t0
            if waited >= waits.total:      # the whole budget spent, never less (no early give-up)
                raise gave_up(plpy, release, targets, waited, attempts, waits, action) from None
            run(plpy, "SELECT pg_catalog.pg_sleep($1)", ["float8"],
                [min(pause * random.uniform(0.5, 1.0), waits.total - waited)])
            pause = min(pause * 2, MAX_PAUSE)
            continue
        finally:
            run(plpy, "SELECT pg_catalog.set_config('lock_timeout', $1, true)", ["text"], [previous])
        if attempts > 1:
            progress(plpy, f"swap lock taken after {attempts} attempts ({time.monotonic() - t0:.2f} s)")
        return


def gave_up(plpy, release, targets, waited, attempts, waits, action="refresh") -> LockNotAvailable:
    holders = run(plpy, """
        SELECT pg_catalog.string_agg(DISTINCT l.pid::text, ', ') AS pids FROM pg_catalog.pg_locks l
        WHERE l.relation = ANY($1) AND l.granted AND l.pid <> pg_catalog.pg_backend_pid()""",
        ["oid[]"], [[t["oid"] for t in targets]])[0]["pids"]
    return LockNotAvailable(
        f"{action} of release {qualified_text(release)} gave up after waiting {waited:.1f} s for "
        f"transactions reading it to finish; the release is kept as it was",
        detail=f"{attempts} lock attempts of {waits.attempt * 1000:.0f} ms each within "
               f"plpy_anon.swap_wait = {waits.total:g} s; backends holding it: {holders or 'none left'}.",
        hint="Long-running transactions are reading the release (see pg_stat_activity for those "
             "backends): let them finish or end them, or allow a longer wait, e.g. "
             f"SET plpy_anon.swap_wait = '10min', and {action} again.")
