"""Versions of what the backend runs, for anon.versions()."""
from __future__ import annotations

import importlib.metadata
import importlib.util
import sys

COMPONENTS = ("plpy_anon", "numpy", "pandas", "scipy", "sklearn", "sqlglot")
#: a component whose distribution is named otherwise than its module
DISTRIBUTIONS = {"sklearn": "scikit-learn"}


def versions():
    """(component, version, location) of Python and each component: a module this backend has
    loaded as it is; any other as installed where this backend would load it from, found without
    importing it (scikit-learn, pandas and sqlglot take seconds to import on a loaded machine,
    and a call that never needs them should not pay for them)."""
    rows = [("python", sys.version.split()[0], sys.executable)]
    for name in COMPONENTS:
        module = sys.modules.get(name)
        if module is not None:
            rows.append((name, getattr(module, "__version__", None), getattr(module, "__file__", None)))
            continue
        spec = importlib.util.find_spec(name)
        if spec is None:
            rows.append((name, None, None))
            continue
        try:
            version = importlib.metadata.version(DISTRIBUTIONS.get(name, name))
        except importlib.metadata.PackageNotFoundError:
            version = None
        rows.append((name, version, spec.origin))
    return rows
