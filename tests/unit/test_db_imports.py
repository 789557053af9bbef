"""The db layer's module graph: no import cycle, no import hidden inside a function to dodge one."""
import ast
import graphlib
import pathlib
import subprocess
import sys

import pytest

DB = pathlib.Path(__file__).resolve().parents[2] / "plpy_anon" / "db"
# every module of the db layer, methods/ included, by its dotted name below plpy_anon.db
MODULES = sorted(".".join(p.relative_to(DB).with_suffix("").parts) for p in DB.rglob("*.py")
                 if p.stem != "__init__")
METHODS = [m for m in MODULES if m.startswith("methods.") and m != "methods.registry"]


def path_of(module: str) -> pathlib.Path:
    return DB.joinpath(*module.split(".")).with_suffix(".py")


def db_imports(tree, top_level_only):
    nodes = tree.body if top_level_only else ast.walk(tree)
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and (
                node.module == "plpy_anon.db" or node.module.startswith("plpy_anon.db.")):
            package = node.module.removeprefix("plpy_anon.db").lstrip(".")
            for alias in node.names:
                name = f"{package}.{alias.name}" if package else alias.name
                yield name if name in MODULES else package


def test_db_module_graph_is_acyclic():
    graph = {m: set(db_imports(ast.parse(path_of(m).read_text()), True)) for m in MODULES}
    graphlib.TopologicalSorter(graph).prepare()     # raises CycleError on a cycle


def floors(db: pathlib.Path = DB) -> dict[str, int]:
    """Each module's floor: 1 + the highest floor among what it imports (a module importing no
    other module of the db layer stands on floor 1); methods/ counts as one module."""
    def room(module):
        return "methods" if module.startswith("methods.") else module
    modules = sorted(".".join(p.relative_to(db).with_suffix("").parts) for p in db.rglob("*.py")
                     if p.stem != "__init__")
    graph = {}
    for module in modules:
        tree = ast.parse(db.joinpath(*module.split(".")).with_suffix(".py").read_text())
        graph.setdefault(room(module), set()).update(
            room(m) for m in db_imports(tree, False) if m and room(m) != room(module))
    floor = {}
    for module in graphlib.TopologicalSorter(graph).static_order():
        floor[module] = 1 + max((floor[m] for m in graph.get(module, ()) if m in floor), default=0)
    return floor


def test_the_db_layer_stands_on_at_most_eight_floors():
    """From an SQL entry point down to the SQL text helpers, at most eight modules: a module takes
    a helper from below, never from a module high above for one helper."""
    floor = floors()
    assert max(floor.values()) <= 8, sorted(floor.items(), key=lambda item: -item[1])[:6]


@pytest.mark.parametrize("module", [m for m in MODULES if m != "methods.registry"])
def test_no_function_level_db_imports(module):
    """Only the registry imports inside functions (one method's module when it is first asked
    for, by design: methods/registry.py); an import anywhere else hidden in a function dodges a cycle."""
    tree = ast.parse(path_of(module).read_text())
    everywhere = list(db_imports(tree, False))
    assert everywhere == list(db_imports(tree, True))


@pytest.mark.parametrize("module", MODULES)
def test_each_db_module_imports_alone(module):
    subprocess.run([sys.executable, "-c", f"import plpy_anon.db.{module}"], check=True)


def test_registry_names_every_method_module_once():
    """Every module of methods/ that defines a RELEASE_METHOD is registered once: built in, or
    declared in sql/functions alone (a plug-in, found from the build's declarations)."""
    from plpy_anon.db.methods.registry import NAMES
    modules = sorted(m.removeprefix("methods.") for m in METHODS
                     if "\nRELEASE_METHOD = " in path_of(m).read_text())
    assert sorted(NAMES) == modules
    assert len(set(NAMES)) == len(NAMES)


def test_registry_loads_every_declared_method():
    from plpy_anon.db.methods.registry import REGISTRY
    assert {name: REGISTRY[name].name for name in REGISTRY} == {n: n for n in REGISTRY}
    assert REGISTRY.get("no_such_method") is None


def test_registry_import_costs_no_method_module():
    """Importing the registry (every refresh does) must not import the heavy method modules."""
    code = ("import sys, plpy_anon.db.releases; "
            "print(sorted(m for m in ('sklearn', 'scipy', 'plpy_anon.db.methods.fusion', "
            "'plpy_anon.db.methods.pattern') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "[]"


def test_no_method_module_imports_another():
    """What methods share lives below them (mondrian_family, generalization, publish, ...), so a
    method can change, or a new one be added, without touching another."""
    from plpy_anon.db.methods.registry import NAMES
    methods = {f"methods.{name}" for name in NAMES}
    assert methods <= set(METHODS)
    for name in METHODS:
        imported = set(db_imports(ast.parse(path_of(name).read_text()), False))
        assert not imported & methods, (name, sorted(imported & methods))


def test_the_method_modules_are_the_registered_ones_and_their_shared_code():
    from plpy_anon.db.methods.registry import NAMES
    assert sorted(METHODS) == sorted([f"methods.{n}" for n in NAMES] + ["methods.mondrian_family"])


def test_only_the_guards_make_a_table():
    """Every read of a user relation goes through plpy_anon.db.guards by construction: a
    ``Table`` (what every query names a source by) is made there only, and its name for a query
    (``Table.quoted``) refuses one no guard made."""
    makers = []
    for module in MODULES:
        for node in ast.walk(ast.parse(path_of(module).read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "Table":
                makers.append(module)
    assert set(makers) == {"guards"}
    from plpy_anon.db.guards import Table
    with pytest.raises(RuntimeError, match="not resolved by plpy_anon.db.guards"):
        Table(1, "public", "t").quoted(None)


def test_a_region_is_read_again_in_the_run_functions_output_styles():
    """The stable check's second read of a region (out_of_core.REGION_READ) sets every output
    style the run function sets (sql/build.py OUTPUT_STYLES), so both read the same texts."""
    import re
    from pathlib import Path

    from plpy_anon.db.out_of_core import REGION_READ

    build = (Path(__file__).resolve().parents[2] / "sql" / "build.py").read_text()
    styles = re.search(r'OUTPUT_STYLES = """(.*?)"""', build, re.DOTALL).group(1)
    found = dict(re.findall(r"SET (\w+) = '([^']*)'", styles))
    assert found and all(REGION_READ.get(name) == value for name, value in found.items()), found
