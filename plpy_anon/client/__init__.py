"""Python client of the plpy_anon extension (psycopg 3): ``AnonClient`` and typed errors."""
from plpy_anon.client.api import AnonClient
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
