"""The schema the extension is installed in: ``anon`` unless ``CREATE EXTENSION plpy_anon SCHEMA
<other>`` chose another (beside PostgreSQL Anonymizer, which also wants ``anon``).

Every PL/Python body of the extension starts with ``use(<its schema>, plpy)`` (the name written
into the body at install time by sql/build.py), so the name is right for the call running, even
after the extension was dropped and created again in another schema in the same backend. The SQL
this package writes names the extension's objects ``anon.x``; in another schema the body's
``plpy`` is ``Bound``, which puts the installed schema in their place in every statement it runs
or prepares, and quotes a user's schema named ``anon`` (PostgreSQL Anonymizer's) as ``"anon"``,
which that rewriting leaves alone.
"""
from __future__ import annotations

import re

DEFAULT = "anon"
_name = DEFAULT
_REF = re.compile(r"\banon(?=\.[A-Za-z_\"(%]|\\\.)")


def name() -> str:
    """The extension's schema (a plain lower-case identifier: the install refuses others)."""
    return _name


def sql(text: str) -> str:
    """``text`` (SQL naming the extension's objects ``anon.x``) with the installed schema in place
    of ``anon``."""
    return text if _name == DEFAULT else _REF.sub(_name, text)


class Bound:
    """``plpy`` for an extension installed in another schema than ``anon`` (see the module)."""

    def __init__(self, plpy):
        self._plpy = plpy

    def execute(self, query, *args, **kwargs):
        return self._plpy.execute(sql(query) if isinstance(query, str) else query, *args, **kwargs)

    def prepare(self, query, *args, **kwargs):
        return self._plpy.prepare(sql(query), *args, **kwargs)

    def cursor(self, query, *args, **kwargs):
        return self._plpy.cursor(sql(query) if isinstance(query, str) else query, *args, **kwargs)

    # what users read says where the functions are: "call anon.refresh" reads "call pa.refresh"
    def error(self, message, *args, **kwargs):
        return self._plpy.error(*self._told(message, kwargs), *args, **kwargs)

    def warning(self, message, *args, **kwargs):
        return self._plpy.warning(*self._told(message, kwargs), *args, **kwargs)

    def notice(self, message, *args, **kwargs):
        return self._plpy.notice(*self._told(message, kwargs), *args, **kwargs)

    @staticmethod
    def _told(message, kwargs) -> tuple:
        if isinstance(kwargs.get("hint"), str):
            kwargs["hint"] = sql(kwargs["hint"])
        return (sql(message) if isinstance(message, str) else message,)

    def quote_ident(self, identifier):
        return '"anon"' if identifier == DEFAULT else self._plpy.quote_ident(identifier)

    def __getattr__(self, attribute):
        return getattr(self._plpy, attribute)


def use(schema: str, plpy):
    """Called by every PL/Python body of the extension: records its schema, returns the ``plpy``
    its code should use."""
    global _name
    _name = schema
    plpy = getattr(plpy, "_plpy", plpy) if isinstance(plpy, Bound) else plpy
    return plpy if schema == DEFAULT else Bound(plpy)
