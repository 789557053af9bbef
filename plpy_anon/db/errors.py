"""Turns core errors into PostgreSQL errors carrying the right SQLSTATE, message, detail and hint."""
from __future__ import annotations

import functools
import types

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
                result = func(plpy, *args, **kwargs)
        except AnonError as error:
            report(plpy, error)
        return _reported(plpy, result) if isinstance(result, types.GeneratorType) else result

    return wrapper


def _reported(plpy, rows):
    """A set's rows, a core error raised while PostgreSQL fetches them reported as at the call."""
    try:
        yield from rows
    except AnonError as error:
        report(plpy, error)
