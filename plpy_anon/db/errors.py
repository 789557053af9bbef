"""Turns core errors into PostgreSQL errors carrying the right SQLSTATE, message, detail and hint."""
from __future__ import annotations

import functools

from plpy_anon.core.errors import AnonError
from plpy_anon.db import interrupts, timing


def report(plpy, error: AnonError):
    """Raise ``error`` as a PostgreSQL ERROR (plpy.error raises; this never returns)."""
    kwargs = {"sqlstate": error.sqlstate}
    if error.hint:
        kwargs["hint"] = error.hint
    if error.detail:
        kwargs["detail"] = error.detail
    plpy.error(error.message, **kwargs)


def sql_entry(func):
    """Decorator for functions called from SQL bodies: core errors become clean SQL errors, the
    call's start is kept for the durations it records (timing.entry), and the core's long loops
    honour the caller's cancels and timeouts (db.interrupts)."""

    @functools.wraps(func)
    def wrapper(plpy, *args, **kwargs):
        try:
            with timing.entry(), interrupts.honoured(plpy):
                return func(plpy, *args, **kwargs)
        except AnonError as error:
            report(plpy, error)

    return wrapper
