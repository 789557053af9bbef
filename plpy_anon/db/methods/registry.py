"""The registry of release methods: ``anon.releases.method`` -> its ``ReleaseMethod`` (method.py).

Lazy: ``REGISTRY[name]`` imports the module of that one method when it is first asked for, so
refreshing a Mondrian release does not pay for scikit-learn (fusion) or scipy (pattern) in a
backend that never uses them. Every method is declared in sql/functions (``parameters.SURFACES``,
from the build's declarations) and found as ``plpy_anon.db.methods.<name>``: only names the build
declared (checked against ``[a-z][a-z0-9_]*``) become import paths, never a name read from the
catalog as such. A method defined outside the package (tests/contract/random_groups.py) is added
to one backend with ``register``: only code already running in the backend can call it, that is
PL/Python code, which only a superuser can create. Imported only by the SQL entry points at the
top of the db layer (creation, releases, risk_report, snapshots, sweep); the method modules
import the machinery below it (publish, verify, release_rows), never this module.
"""
from __future__ import annotations

import importlib
import re
from collections.abc import Iterator, Mapping

from plpy_anon.db.method import ReleaseMethod
from plpy_anon.parameters import SURFACES

#: every method of plpy_anon: those the build declared
NAMES = tuple(sorted(name for name in SURFACES if re.fullmatch(r"[a-z][a-z0-9_]*", name)))


def _module(name: str):
    """The module of method ``name``, imported now (and only it); None for an unknown name."""
    if name not in NAMES:
        return None
    return importlib.import_module(f"plpy_anon.db.methods.{name}")


_registered: dict[str, ReleaseMethod] = {}


def register(method: ReleaseMethod) -> None:
    """Make ``method`` (defined outside this package) known to this backend until it exits."""
    if method.name in NAMES:
        raise ValueError(f"{method.name} is a method of plpy_anon itself")
    _registered[method.name] = method


class _Registry(Mapping):
    def __getitem__(self, name: str) -> ReleaseMethod:
        if name in _registered:
            return _registered[name]
        module = _module(name)
        if module is None:
            raise KeyError(name)
        method = module.RELEASE_METHOD
        assert method.name == name, (method.name, name)
        return method

    def __iter__(self) -> Iterator[str]:
        return iter((*NAMES, *_registered))

    def __len__(self) -> int:
        return len(NAMES) + len(_registered)


REGISTRY: Mapping[str, ReleaseMethod] = _Registry()
