"""The schema the extension is installed in: ``anon`` unless ``CREATE EXTENSION plpy_anon SCHEMA
<other>`` chose another (beside PostgreSQL Anonymizer, which also wants ``anon``).

Every PL/Python body of the extension starts with ``use(<its schema>, plpy)`` (the name written
into the body at install time by sql/build.py), so the name is right for the call running, even
after the extension was dropped and created again in another schema in the same backend. The SQL
this package writes names the extension's objects ``anon.x``; in another schema the body's
``plpy`` is ``Bound``, which puts the installed schema in their place in the text the code wrote,
never in a user's names: ``anon.<name>`` is rewritten only where <name> is one of the extension's
objects, and only outside user text. User text is what ``Bound.quote_ident``, ``quote_literal``
and ``quote_nullable`` return, and the names read from the catalog that the code marks with
:func:`user`: each is enclosed in two private-use characters (no identifier, literal or message
of the code contains them) that ``Bound`` skips and removes before PostgreSQL sees the text, so a
user's table ``anon.workload`` (PostgreSQL Anonymizer's schema) keeps its name in every
statement and message. The marks never leave the call: ``Bound`` removes them from parameters,
and :func:`unmarked` from what the body returns. The default install marks and rewrites nothing.
"""
from __future__ import annotations

import re

DEFAULT = "anon"
_name = DEFAULT
_REF = re.compile(r"\banon(?=\.[A-Za-z_\"(%]|\\\.)")


#: encloses user text in SQL and messages (Unicode private-use characters: see the module)
OPEN, CLOSE = "\ue000", "\ue001"
# a mark, or its escape in JSON text (json.dumps writes the characters as \ue000, \ue001)
_MARK = re.compile(f"[{OPEN}{CLOSE}]|\\\\u[eE]00[01]")


def _rewritten(text: str, code) -> str:
    """``text`` with ``code`` applied to the pieces the code wrote, user text (marked, at any
    depth: a marked template may be filled with marked names) kept as it is, marks removed."""
    out, depth, start = [], 0, 0
    for mark in _MARK.finditer(text):
        piece = text[start:mark.start()]
        out.append(code(piece) if depth == 0 else piece)
        opens = mark.group() == OPEN or mark.group().endswith("0")
        depth = depth + 1 if opens else max(depth - 1, 0)
        start = mark.end()
    piece = text[start:]
    out.append(code(piece) if depth == 0 else piece)
    return "".join(out)


def user(text):
    """``text`` (a name read from the catalog or given by the caller, about to be put into SQL or
    a message) marked as user text: never rewritten. Unchanged in the default install."""
    if _name == DEFAULT or not isinstance(text, str):
        return text
    return OPEN + text + CLOSE


def unmarked(value):
    """``value`` (a body's result: text, rows, arrays, a generator of rows) without marks."""
    if _name == DEFAULT:
        return value
    if isinstance(value, str):
        return _MARK.sub("", value)
    if isinstance(value, dict):
        return {k: unmarked(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(unmarked(v) for v in value)
    if hasattr(value, "__next__"):
        return (unmarked(v) for v in value)
    return value


def name() -> str:
    """The extension's schema (a plain lower-case identifier: the install refuses others)."""
    return _name


def sql(text: str) -> str:
    """``text`` (SQL naming the extension's objects ``anon.x``) with the installed schema in place
    of ``anon``."""
    if _name == DEFAULT:
        return text
    return _rewritten(text, lambda code: _REF.sub(_name, code))


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

        def ours_in(code: str) -> str:
            return _NAMED.sub(lambda m: _name if m.group(1) in ours else "anon", code)
        return _rewritten(text, ours_in)

    def execute(self, query, *args, **kwargs):
        return self._plpy.execute(self._sql(query) if isinstance(query, str) else query,
                                  *_values(args), **kwargs)

    def prepare(self, query, *args, **kwargs):
        return self._plpy.prepare(self._sql(query), *args, **kwargs)

    def cursor(self, query, *args, **kwargs):
        return self._plpy.cursor(self._sql(query) if isinstance(query, str) else query,
                                 *_values(args), **kwargs)

    # what users read says where the functions are: "call anon.refresh" reads "call pa.refresh"
    def error(self, message, *args, **kwargs):
        return self._plpy.error(*self._told(message, kwargs), *args, **kwargs)

    def warning(self, message, *args, **kwargs):
        return self._plpy.warning(*self._told(message, kwargs), *args, **kwargs)

    def notice(self, message, *args, **kwargs):
        return self._plpy.notice(*self._told(message, kwargs), *args, **kwargs)

    def info(self, message, *args, **kwargs):
        return self._plpy.info(*self._told(message, kwargs), *args, **kwargs)

    def log(self, message, *args, **kwargs):
        return self._plpy.log(*self._told(message, kwargs), *args, **kwargs)

    def _told(self, message, kwargs) -> tuple:
        if isinstance(kwargs.get("hint"), str):
            kwargs["hint"] = self._sql(kwargs["hint"])
        if isinstance(kwargs.get("detail"), str):     # often the server's own words: kept
            kwargs["detail"] = _plain(kwargs["detail"])
        return (self._sql(message) if isinstance(message, str) else message,)

    # what the code quotes is a user's name or value: marked, so never rewritten
    def quote_ident(self, identifier):
        return user(self._plpy.quote_ident(_plain(identifier)))

    def quote_literal(self, value):
        return user(self._plpy.quote_literal(_plain(value)))

    def quote_nullable(self, value):
        return user(self._plpy.quote_nullable(_plain(value)))

    def __getattr__(self, attribute):
        return getattr(self._plpy, attribute)


def _plain(value):
    return _MARK.sub("", value) if isinstance(value, str) else value


def _values(args: tuple) -> tuple:
    """A plan's parameters (``args[0]``, when given) without marks: they are values, not SQL."""
    if args and isinstance(args[0], (list, tuple)):
        return (type(args[0])(unmarked(v) for v in args[0]), *args[1:])
    return args


def use(schema: str, plpy):
    """Called by every PL/Python body of the extension: records its schema, returns the ``plpy``
    its code should use."""
    global _name
    _name = schema
    if isinstance(plpy, Bound):     # the body's global from its previous call
        plpy = plpy._plpy
    return plpy if schema == DEFAULT else Bound(plpy)
