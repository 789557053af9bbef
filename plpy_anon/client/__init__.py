"""Python client of the plpy_anon extension (psycopg 3): ``AnonClient`` and typed errors.

``AnonClient`` (with psycopg and pandas) is imported on first use, so that the errors and the
command line's help load without them."""
from plpy_anon.client.errors import (
    ConnectionFailed,
    DuplicateObject,
    ExtensionMissing,
    InsufficientData,
    InvalidParameter,
    PermissionDenied,
    PrerequisiteMissing,
    ServerError,
    UndefinedObject,
    UnsupportedType,
)

__all__ = ["AnonClient", "ConnectionFailed", "DuplicateObject", "ExtensionMissing",
           "InsufficientData", "InvalidParameter", "PermissionDenied", "PrerequisiteMissing",
           "ServerError", "UndefinedObject", "UnsupportedType"]


def __getattr__(name: str):
    if name == "AnonClient":
        from plpy_anon.client.api import AnonClient
        return AnonClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
