"""The schema the extension is installed in: ``anon`` unless ``CREATE EXTENSION plpy_anon SCHEMA
<other>`` chose another (beside PostgreSQL Anonymizer, which also wants ``anon``).

Every PL/Python body of the extension starts with ``use(<its schema>, plpy)`` (the name written
into the body at install time by sql/build.py), so the name is right for the call running, even
after the extension was dropped and created again in another schema in the same backend. The SQL
this package writes names the extension's objects ``anon.x``; in another schema the body's
``plpy`` is ``Bound``, which puts the installed schema in their place in every statement it runs
or prepares. It rewrites only ``anon.<name>`` where <name> is one of the extension's objects, and
quotes a user's schema named ``anon`` (PostgreSQL Anonymizer's) as ``"anon"``, so that a user's
object in that schema keeps its name.
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


# the extension's object names by (extension oid, its row's xmin): a new row after DROP / CREATE
# EXTENSION or ALTER EXTENSION UPDATE, whose objects may differ
_OURS: dict[tuple, frozenset] = {}
_NAMED = re.compile(r"\banon(?=(?:\.|\\\.)([A-Za-z_][A-Za-z0-9_]*))")
EXTENSION_ROW = "SELECT e.oid::text || '/' || e.xmin::text AS k FROM pg_catalog.pg_extension e WHERE e.extname = 'plpy_anon'"
OBJECT_NAMES = """
SELECT p.proname::text AS n FROM pg_catalog.pg_proc p, ns WHERE p.pronamespace = ns.oid
UNION SELECT c.relname::text FROM pg_catalog.pg_class c, ns WHERE c.relnamespace = ns.oid
UNION SELECT t.typname::text FROM pg_catalog.pg_type t, ns WHERE t.typnamespace = ns.oid"""


class Bound:
    """``plpy`` for an extension installed in another schema than ``anon`` (see the module)."""

    def __init__(self, plpy):
        self._plpy = plpy
        self._ours = None

    def _sql(self, text: str) -> str:
        if self._ours is None:      # once per call: a dict lookup after the backend's first
            key = self._plpy.execute(EXTENSION_ROW)[0]["k"]
            self._ours = _OURS.get((key, _name))
            if self._ours is None:
                names = self._plpy.execute(
                    "WITH ns AS (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = "
                    f"{self._plpy.quote_literal(_name)}){OBJECT_NAMES}")
                self._ours = _OURS[(key, _name)] = frozenset(r["n"] for r in names)
        ours = self._ours
        return _NAMED.sub(lambda m: _name if m.group(1) in ours else "anon", text)

    def execute(self, query, *args, **kwargs):
        return self._plpy.execute(self._sql(query) if isinstance(query, str) else query, *args, **kwargs)

    def prepare(self, query, *args, **kwargs):
        return self._plpy.prepare(self._sql(query), *args, **kwargs)

    def cursor(self, query, *args, **kwargs):
        return self._plpy.cursor(self._sql(query) if isinstance(query, str) else query, *args, **kwargs)

    # what users read says where the functions are: "call anon.refresh" reads "call pa.refresh"
    def error(self, message, *args, **kwargs):
        return self._plpy.error(*self._told(message, kwargs), *args, **kwargs)

    def warning(self, message, *args, **kwargs):
        return self._plpy.warning(*self._told(message, kwargs), *args, **kwargs)

    def notice(self, message, *args, **kwargs):
        return self._plpy.notice(*self._told(message, kwargs), *args, **kwargs)

    def _told(self, message, kwargs) -> tuple:
        if isinstance(kwargs.get("hint"), str):
            kwargs["hint"] = self._sql(kwargs["hint"])
        return (self._sql(message) if isinstance(message, str) else message,)

    def quote_ident(self, identifier):
        return '"anon"' if identifier == DEFAULT else self._plpy.quote_ident(identifier)

    def __getattr__(self, attribute):
        return getattr(self._plpy, attribute)


def use(schema: str, plpy):
    """Called by every PL/Python body of the extension: records its schema, returns the ``plpy``
    its code should use."""
    global _name
    _name = schema
    if isinstance(plpy, Bound):     # the body's global from its previous call
        plpy = plpy._plpy
    return plpy if schema == DEFAULT else Bound(plpy)
