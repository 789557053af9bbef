"""A release method is a plug-in: declared in sql/functions (``release`` with ``function``,
``parameters`` and ``run``) and coded in plpy_anon/db/methods/<name>.py. Its SQL function and
run, its parameters, its registry entry, the client's method and the CLI's command all come from
the declaration; these tests read them from the declarations, never from a list of names."""
from __future__ import annotations

import ast
import importlib.util
import inspect
import re
import subprocess
from pathlib import Path

import pytest

from plpy_anon import parameters
from plpy_anon.core.errors import InvalidParameter
from plpy_anon.spec import SETTINGS

ROOT = Path(__file__).resolve().parents[2]


def load_build():
    spec = importlib.util.spec_from_file_location("sql_build_plug_ins", ROOT / "sql" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def build():
    return load_build()


def test_the_package_knows_the_methods_the_declarations_name(build):
    """plpy_anon/declared_methods.json (what the installed package reads) is the declarations'."""
    declared = build.declared_methods()
    assert {"mondrian", "prioritized_mondrian", "mdav"} <= set(declared)
    assert set(parameters.SURFACES) == set(declared)
    for name, declaration in declared.items():
        assert parameters.SURFACES[name] == parameters.declared_surface(
            name, declaration["function"], declaration["parameters"])


def test_every_method_has_its_sql_function_run_registry_entry_client_method_and_command(build):
    from plpy_anon.cli import main
    from plpy_anon.client.api import AnonClient
    from plpy_anon.db.methods.registry import NAMES

    sql_functions = {f.name: f for f in build.all_declarations()}
    runs = {f.method for path in build.declaration_files() for f in build.declarations(path)
            if isinstance(f, build.RunFunction)}
    assert set(NAMES) == set(parameters.SURFACES)
    for name, surface in parameters.SURFACES.items():
        function = sql_functions[surface.function]
        assert [a.name for a in function.args] == [p.name for p in surface.parameters] \
            or surface.function == "mondrian_view"          # one function, two methods
        client_parameters = inspect.signature(getattr(AnonClient, surface.function)).parameters
        assert set(surface.by_name) <= set(client_parameters)
        assert surface.function.replace("_", "-") in main.commands
        assert name in runs


#: the files every method goes through: none of them knows one by name
PLUMBING = ("plpy_anon/parameters.py", "plpy_anon/db/methods/registry.py", "plpy_anon/db/method.py",
            "plpy_anon/db/creation.py", "plpy_anon/client/api.py", "plpy_anon/cli.py", "sql/build.py")


def code_words(path: Path) -> set[str]:
    """The names, imported modules and strings of a Python file's code (not its docstrings)."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)}
    words = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docstrings:
            words.add(node.value)
        elif isinstance(node, ast.Name):
            words.add(node.id)
        elif isinstance(node, ast.Attribute):
            words.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            words |= {node.module or "", *(a.name for a in node.names)}
    return words


def test_the_plumbing_names_no_method():
    """The parameters, the registry, the contract, creation, the client, the CLI and the build
    know every method from its declaration alone: no method's name, SQL function, run or module
    in their code."""
    for path in PLUMBING:
        words = code_words(ROOT / path)
        for name, surface in parameters.SURFACES.items():
            named = {w for w in words if w in (name, surface.function, f"methods.{name}")
                     or re.search(rf"\b_{name}_|\b{surface.function}\b", w)}
            assert named == set(), (path, name)


def mentions(name: str) -> re.Pattern:
    """The method ``name`` referred to as a method: its SQL function or run, its module, its
    catalog name as a string."""
    return re.compile(rf"\b{name}_view\b|\b_{name}_|methods(\.| import ){name}\b|[\"']{name}[\"']")


def test_a_plug_in_is_named_only_in_its_own_files():
    """Outside the pure core's algorithm, its module and its declaration, no source file of the
    package or of sql/ names a method that keeps its settings to itself (none in
    ``spec.SETTINGS``, which the shared machinery reads by name): the registry, the parameters,
    the client and the CLI find it from the declaration."""
    tracked = subprocess.run(["git", "ls-files", "plpy_anon", "sql", "pyproject.toml", "Makefile"],
                             cwd=ROOT, check=True, capture_output=True, text=True).stdout.split()
    self_contained = [name for name in parameters.SURFACES if name not in SETTINGS]
    assert "mdav" in self_contained
    for name in self_contained:
        own = {f"plpy_anon/db/methods/{name}.py", f"plpy_anon/core/{name}.py"}
        own |= {str(p.relative_to(ROOT)) for p in (ROOT / "sql" / "functions").glob("*.toml")
                if re.search(rf'^release = "{name}"', p.read_text(), re.MULTILINE)}
        pattern = mentions(name)
        elsewhere = [path for path in tracked if path not in own and (ROOT / path).is_file()
                     and pattern.search((ROOT / path).read_text(errors="replace"))]
        assert elsewhere == [], name
        assert len(own) == 3, own


def test_a_new_declaration_gives_a_checked_surface_a_sql_function_and_a_run(build, monkeypatch):
    """What a declaration alone yields, for a method no file names: its parameters with their
    constraints (k's one minimum among them), the SQL function's arguments, its run calling
    plpy_anon.db.methods.<name>, and the client's method."""
    entries = ["source", "k", {"name": "width", "sql_type": "integer", "default": "3",
                               "minimum": 1, "integer": True, "help": "A width.",
                               "hint": "Pass width => 1 or more."}, "release_name"]
    surface = parameters.declared_surface("toy", "toy_view", entries)
    with pytest.raises(InvalidParameter, match="k must be at least 2"):
        surface.validate({"k": 1})
    with pytest.raises(InvalidParameter, match="width must be at least 1"):
        surface.validate({"width": 0})
    assert surface.validate({"k": 2, "width": None}) == {"k": 2, "width": 3}
    function = build.release_function("toy", "Toy releases.", function="toy_view",
                                      parameters=entries)
    assert [a.name for a in function.args] == ["source", "k", "width", "release_name"]
    run = build.RunFunction("toy", "partition_slices").sql("/opt/venv", "9.9.9")
    assert "CREATE OR REPLACE FUNCTION anon._toy_partition_slices(release_id integer)" in run
    assert "from plpy_anon.db.methods import toy\nreturn toy.partition(plpy, GD, release_id)" in run

    from plpy_anon.client import api
    monkeypatch.setitem(parameters.SURFACES, "toy", surface)
    signature = inspect.signature(api.release_method("toy_view"))
    assert list(signature.parameters) == ["self", "source", "k", "width", "release_name"]


def test_a_declaration_naming_no_shared_parameter_is_refused():
    with pytest.raises(ValueError, match="no shared parameter 'kk'"):
        parameters.declared_surface("toy", "toy_view", ["source", "kk"])


@pytest.mark.parametrize("name", ["Toy", "toy-view", "../x", "toy;drop"])
def test_a_plug_in_name_that_is_no_module_name_is_refused(build, name):
    with pytest.raises(SystemExit):
        build.RunFunction(name, "partition_slices")


def test_a_shared_parameter_taken_with_other_fields_keeps_its_constraint():
    """``like``: trust's k without a default and fusion's smallest scanned k keep k's minimum."""
    surface = parameters.declared_surface("toy", "toy_view", [
        "source", {"like": "k", "default": "NULL"},
        {"like": "k", "name": "k_from", "default": "2", "hint": "Use k_from => 2 or more."}])
    k, k_from = surface.by_name["k"], surface.by_name["k_from"]
    assert k.check(None) is None and k_from.check(None) == 2
    assert k.constraint == k_from.constraint == parameters.SHARED["k"].constraint
    with pytest.raises(InvalidParameter, match="k must be at least 2, got 1") as refused:
        k.check(1)
    assert refused.value.hint == parameters.SHARED["k"].hint
    with pytest.raises(InvalidParameter, match="k_from must be at least 2") as refused:
        k_from.check(1)
    assert refused.value.hint == "Use k_from => 2 or more."


def test_a_method_with_a_release_query_of_its_own_declares_the_run_it_calls(build):
    run = build.RunFunction("toy", {"returns": "jsonb", "comment": "Internal: the toy's run."})
    sql = run.sql("/opt/venv", "9.9.9")
    assert "CREATE OR REPLACE FUNCTION anon._toy_run(release_id integer)\nRETURNS jsonb" in sql
    assert "from plpy_anon.db.methods import toy\nreturn toy.run_release(plpy, GD, release_id)" in sql
    assert "COMMENT ON FUNCTION anon._toy_run_py(integer) IS\n    'Internal: the toy''s run.';" in sql
    partition = build.RunFunction("toy", "partition").sql("/opt/venv", "9.9.9")
    assert "RETURNS anon.partition\nLANGUAGE plpython3u STABLE\n" in partition
    assert "SET DateStyle" not in partition
    for bad in ({"comment": "no type"}, {"returns": "jsonb", "rows": 5}, "slices"):
        with pytest.raises(SystemExit):
            build.RunFunction("toy", bad)
