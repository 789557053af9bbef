"""Typed exceptions for errors the database reports, keyed by SQLSTATE.

Each carries the server's message, detail and hint, and the SQLSTATE. The classes also derive
from the core's error of the same meaning (``plpy_anon.core.errors``), so ``except
InvalidParameter`` catches a bad ``k`` whether it was found by the client or by the server.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

from plpy_anon.core import errors as core

if TYPE_CHECKING:
    import psycopg


class ServerError(core.AnonError):
    """An error reported by PostgreSQL while running a plpy_anon command."""

    sqlstate = "P0001"

    def __init__(self, message, *, hint=None, detail=None, sqlstate=None):
        super().__init__(message, hint=hint, detail=detail)
        if sqlstate:
            self.sqlstate = sqlstate

    def __str__(self) -> str:
        return self.message + (f" (hint: {self.hint})" if self.hint else "")


class InvalidParameter(ServerError, core.InvalidParameter):
    sqlstate = "22023"


class UndefinedObject(ServerError, core.UndefinedObject):
    sqlstate = "42704"


class DuplicateObject(ServerError, core.DuplicateObject):
    sqlstate = "42710"


class InsufficientData(ServerError, core.InsufficientData):
    sqlstate = "22000"


class UnsupportedType(ServerError, core.UnsupportedType):
    sqlstate = "42804"


class PermissionDenied(ServerError):
    """The connected role may not do this (e.g. an analyst calling an administrative function)."""

    sqlstate = "42501"


class PrerequisiteMissing(ServerError):
    """Something the command needs is not set up (pg_cron not installed or not preloaded)."""

    sqlstate = "55000"


class ExtensionMissing(ServerError):
    """The plpy_anon extension (or one of its functions) is not installed in this database."""

    sqlstate = "42883"


class ConnectionFailed(ServerError):
    """The database could not be reached."""

    sqlstate = "08006"


BY_SQLSTATE: dict[str, type[ServerError]] = {
    "22023": InvalidParameter,
    "42704": UndefinedObject,
    "42P01": UndefinedObject,      # undefined_table
    "42703": UndefinedObject,      # undefined_column
    "3F000": UndefinedObject,      # invalid_schema_name
    "42710": DuplicateObject,
    "42P07": DuplicateObject,      # duplicate_table
    "22000": InsufficientData,
    "42804": UnsupportedType,
    "42501": PermissionDenied,
    "55000": PrerequisiteMissing,
    "42883": ExtensionMissing,     # undefined_function: usually the extension is missing or old
}


# PL/Python labels errors raised in Python with their class ("plpy.Error: ", and
# "spiexceptions.X: " when they cross a function boundary); the message is what follows.
PLPYTHON_PREFIXES = re.compile(r"^(?:(?:spiexceptions\.\w+|plpy\.\w+): )+")


def from_psycopg(error: psycopg.Error) -> ServerError:
    """The typed exception for a psycopg error (ServerError for SQLSTATEs without a class)."""
    import psycopg
    if isinstance(error, psycopg.OperationalError) and error.sqlstate is None:
        # psycopg's own prefixes ("connection failed: ", "connection is bad: ") say less than
        # libpq's message after them
        message = re.sub(r"^(?:connection (?:failed|is bad): )+", "", str(error).strip())
        return ConnectionFailed(message, hint="Check the connection: host (-h), port (-p), "
                                              "database (-d) and user (-U), or libpq's PG* variables.")
    diag = error.diag
    message = PLPYTHON_PREFIXES.sub("", (diag.message_primary or str(error)).strip())
    cls = BY_SQLSTATE.get(error.sqlstate or "", ServerError)
    return cls(message, hint=diag.message_hint, detail=diag.message_detail, sqlstate=error.sqlstate)
