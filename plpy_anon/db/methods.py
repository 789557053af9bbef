"""The registry of release methods: ``anon.releases.method`` -> its ``ReleaseMethod`` (method.py).

Explicit on purpose, and lazy: ``REGISTRY[name]`` imports the module of that one method when it is
first asked for, so refreshing a Mondrian release does not pay for scikit-learn (fusion) or scipy
(pattern) in a backend that never uses them. A seventh method adds its module and one ``case``
below: a package scan would have to import every module to find its ``RELEASE_METHOD`` (the cost
this laziness avoids), and names are never turned into import paths. Imported only by the top of
the db layer, releases.py (refresh, drop, the event trigger) and risk_report.py (a release's
report); the method modules import the machinery below it (publish, refreshing, verify,
release_rows), never this module.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping

from plpy_anon.db.method import ReleaseMethod

NAMES = ("break_merge", "fusion", "mondrian", "pattern", "prioritized_mondrian", "trust")


def _module(name: str):
    """The module of method ``name``, imported now (and only it); None for an unknown name."""
    match name:
        case "break_merge":
            from plpy_anon.db import break_merge as module
        case "fusion":
            from plpy_anon.db import fusion as module
        case "mondrian":
            from plpy_anon.db import mondrian as module
        case "pattern":
            from plpy_anon.db import pattern as module
        case "prioritized_mondrian":
            from plpy_anon.db import prioritized_mondrian as module
        case "trust":
            from plpy_anon.db import trust as module
        case _:
            return None
    return module


class _Registry(Mapping):
    def __getitem__(self, name: str) -> ReleaseMethod:
        module = _module(name) if name in NAMES else None
        if module is None:
            raise KeyError(name)
        method = module.RELEASE_METHOD
        assert method.name == name, (method.name, name)
        return method

    def __iter__(self) -> Iterator[str]:
        return iter(NAMES)

    def __len__(self) -> int:
        return len(NAMES)


REGISTRY: Mapping[str, ReleaseMethod] = _Registry()
