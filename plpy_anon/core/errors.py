"""Errors raised by the pure core.

Each class carries the SQLSTATE the database layer reports it with, so a user sees e.g. 22023
(invalid_parameter_value) for a bad ``k`` whether the error came from Python or from SQL.
"""


class AnonError(Exception):
    """Base class: a message saying what is wrong, and a hint saying how to fix it."""

    sqlstate = "P0001"

    def __init__(self, message, *, hint=None, detail=None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.detail = detail


class InvalidParameter(AnonError):
    """A parameter outside its domain: k < 2, l < 1, negative weights, a fraction outside (0, 1]."""

    sqlstate = "22023"


class UndefinedObject(AnonError):
    """A named thing does not exist: a column, a hierarchy, a release, a requester."""

    sqlstate = "42704"


class InsufficientData(AnonError):
    """The data cannot satisfy the request: empty table, k above the row count, too few values."""

    sqlstate = "22000"


class UnsupportedType(AnonError):
    """A column whose type the method cannot generalize or perturb."""

    sqlstate = "42804"


class DuplicateObject(AnonError):
    """A release (or other named object) of that name exists already."""

    sqlstate = "42710"


class InsufficientPrivilege(AnonError):
    """The caller may not do this to an object another role owns."""

    sqlstate = "42501"


class SerializationFailure(AnonError):
    """Another transaction changed what this one read after its snapshot: retry it."""

    sqlstate = "40001"


class CharacterNotInRepertoire(AnonError):
    """A text holding bytes its encoding cannot read (a SQL_ASCII database's non-UTF-8 bytes)."""

    sqlstate = "22021"
