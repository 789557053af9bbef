"""Texts of a SQL_ASCII database that PL/Python cannot read: refused before a run reads them.

A SQL_ASCII database stores a text as whatever bytes it was given. PL/Python hands a text to
Python as a ``str`` by checking it as UTF-8 (``PLyUnicode_FromStringAndSize``: ``pg_server_to_any``
to UTF-8, which in a SQL_ASCII database only verifies), and a ``str`` goes back to SQL as its UTF-8
bytes, checked again (``PLyUnicode_Bytes``); ``convert_to(text, 'UTF8')`` checks the same way. So
bytes that are not UTF-8 (a LATIN1 é alone, 0x80, 0xFF) can neither reach a method as text nor be
written back from one: a run that reads such a column fails wherever it first meets one, with
PostgreSQL's bare 22021 naming no column. :func:`refuse_bytes_not_utf8` checks the columns a run
reads in one scan before the run reads anything, and names the column.
"""
from __future__ import annotations

from plpy_anon.core.errors import CharacterNotInRepertoire
from plpy_anon.db.sqltext import ident, local_settings, run, text_of

#: built-in types whose text is ASCII whatever the settings (a domain counts as its base type):
#: never checked
ASCII_TYPES = ["int2", "int4", "int8", "numeric", "float4", "float8", "date", "timestamp",
               "timestamptz", "bool"]

#: the columns of ``names`` that may hold other texts, and whether their type is built in
#: (sqltext.text_of)
TEXT_COLUMNS = """
SELECT a.attname::text AS name, bt.typnamespace = 'pg_catalog'::pg_catalog.regnamespace AS builtin
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
JOIN pg_catalog.pg_type bt ON bt.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END
WHERE a.attrelid = $1 AND a.attname = ANY ($2) AND a.attnum > 0 AND NOT a.attisdropped
  AND NOT (bt.typnamespace = 'pg_catalog'::pg_catalog.regnamespace AND bt.typname = ANY ($3))
ORDER BY a.attnum
"""


def server_encoding(plpy) -> str:
    """This backend's database's encoding: asked once per backend, which serves one database for
    its life, whose encoding CREATE DATABASE fixed."""
    global _server_encoding
    if _server_encoding is None:
        _server_encoding = run(plpy, "SELECT pg_catalog.current_setting('server_encoding') AS e"
                               )[0]["e"]
    return _server_encoding


_server_encoding: str | None = None


def sql_ascii(plpy) -> bool:
    return server_encoding(plpy) == "SQL_ASCII"


def refuse_bytes_not_utf8(plpy, tbl, names) -> None:
    """In a SQL_ASCII database (:func:`sql_ascii`; elsewhere PostgreSQL checked every text when
    it was stored: nothing to do), refuse (22021, naming the column, with a hint) when a column
    of ``names`` of ``tbl`` (a ``guards.Table`` a guard resolved: this module stands below
    guards) holds a value that is not UTF-8. One scan of the table for all the columns; one more
    per column only when that scan finds such a value (to name it)."""
    if not names or not sql_ascii(plpy):
        return
    columns = [(r["name"], r["builtin"]) for r in run(
        plpy, TEXT_COLUMNS, ["oid", "text[]", "text[]"], [tbl.oid, list(names), ASCII_TYPES])]
    if not columns or _utf8(plpy, tbl, columns) is True:
        return
    for name, builtin in columns:
        error = _utf8(plpy, tbl, [(name, builtin)])
        if error is not True:
            column = ident(plpy, name)
            raise CharacterNotInRepertoire(
                f'column "{name}" of {tbl.label} holds bytes that are not UTF-8, which '
                "PL/Python cannot read in this SQL_ASCII database",
                detail=f"{error} (PL/Python reads the texts of a SQL_ASCII database as UTF-8).",
                hint=f"Recode the column's texts to UTF-8 (when they are LATIN1: UPDATE ... SET "
                     f"{column} = pg_catalog.convert_from(pg_catalog.convert(pg_catalog."
                     f"convert_to({column}, 'SQL_ASCII'), 'LATIN1', 'UTF8'), 'SQL_ASCII')), "
                     "leave the column out of the release, or release the table from a UTF8 "
                     "database.")
    # read in another snapshot than the first scan's (a VOLATILE caller): name them all
    raise CharacterNotInRepertoire(
        "the columns " + ", ".join(f'"{name}"' for name, _ in columns) + f" of {tbl.label} "
        "hold bytes that are not UTF-8, which PL/Python cannot read in this SQL_ASCII database",
        hint="Recode their texts to UTF-8, leave them out of the release, or release the table "
             "from a UTF8 database.")


def _utf8(plpy, tbl, columns: list[tuple[str, bool]]):
    """True when every value of ``columns`` ((name, built-in type?)) is UTF-8, else PostgreSQL's
    message for the first byte that is not."""
    checks = ", ".join(f"pg_catalog.count(pg_catalog.convert_to("
                       f"{text_of(ident(plpy, name), builtin)}, 'UTF8'))" for name, builtin in columns)
    try:
        # the rows the run reads: row security on, as for its read (release_rows.owner_state)
        with local_settings(plpy, row_security="on"):
            plpy.execute(f"SELECT {checks} FROM {tbl.quoted(plpy)}")
    except plpy.SPIError as error:
        if getattr(error, "sqlstate", None) != CharacterNotInRepertoire.sqlstate:
            raise
        return str(error)
    return True
