"""Cancels and timeouts honoured inside long loops, without the database.

The core never imports the database. While a function called from SQL runs, the database layer
installs (:func:`checking`) a function that raises when PostgreSQL has a cancel, a
``statement_timeout`` or a termination pending; every long loop of the core calls :func:`check`,
which costs a context-variable lookup and a call when nothing is installed (tests, the client) and
a clock read when something is. The installed function is seen only by the thread that installed
it (a new thread starts with an empty context): the backend may only be called from that thread,
and worker threads' loops are bounded by the main thread's.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_CHECK: ContextVar[Callable[[], None] | None] = ContextVar("plpy_anon_interrupt_check",
                                                           default=None)


def check() -> None:
    """Raise the pending cancel of the caller's backend, if any (nothing outside a backend)."""
    installed = _CHECK.get()
    if installed is not None:
        installed()


@contextmanager
def checking(check_function: Callable[[], None]) -> Iterator[None]:
    """Run the block with ``check_function`` called by :func:`check` (nested blocks restore the
    outer one)."""
    token = _CHECK.set(check_function)
    try:
        yield
    finally:
        _CHECK.reset(token)
