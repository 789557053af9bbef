"""pip install 'plpy_anon[client]' brings only psycopg, pandas and click: the client and the CLI
must never import what only the server needs."""
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVER_ONLY = ("sklearn", "scipy", "sqlglot", "matplotlib")


@pytest.mark.parametrize("module", ["plpy_anon.client", "plpy_anon.cli"])
def test_client_import_path_needs_no_server_dependency(module):
    code = (f"import sys, {module}; "
            f"print(','.join(m for m in {SERVER_ONLY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT)
    assert out.stdout.strip() == ""


def test_extras_split_client_and_server():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["dependencies"] == []
    client = " ".join(project["optional-dependencies"]["client"])
    server = " ".join(project["optional-dependencies"]["server"])
    assert "psycopg" in client and "pandas" in client
    assert not any(dep in client for dep in ("scikit-learn", "scipy", "sqlglot", "numpy"))
    assert all(dep in server for dep in ("numpy", "scikit-learn", "scipy", "sqlglot"))


def test_the_package_is_typed_and_every_public_client_method_says_what_it_does():
    import inspect
    from importlib import resources

    from plpy_anon.client import AnonClient
    assert resources.files("plpy_anon").joinpath("py.typed").is_file()       # PEP 561
    bare = [name for name, method in inspect.getmembers(AnonClient, inspect.isfunction)
            if not name.startswith("_") and not (method.__doc__ or "").strip()]
    assert not bare, f"AnonClient methods without a docstring: {bare}"
