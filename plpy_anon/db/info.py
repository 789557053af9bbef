"""Versions of what the backend runs, for anon.versions()."""
from __future__ import annotations

import importlib
import sys

COMPONENTS = ("plpy_anon", "numpy", "pandas", "scipy", "sklearn", "sqlglot")


def versions():
    rows = [("python", sys.version.split()[0], sys.executable)]
    for name in COMPONENTS:
        try:
            module = importlib.import_module(name)
        except ImportError:
            rows.append((name, None, None))
            continue
        rows.append((name, getattr(module, "__version__", None), getattr(module, "__file__", None)))
    return rows
