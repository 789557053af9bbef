"""The committed extension/ scripts are exactly what sql/build.py makes from sql/ (a change to
sql/ without its rebuilt script would install different code than the one reviewed)."""
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_build():
    spec = importlib.util.spec_from_file_location("sql_build", ROOT / "sql" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def committed(path: Path) -> str | None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    result = subprocess.run(["git", "show", f"HEAD:{path.relative_to(ROOT)}"], cwd=ROOT,
                            capture_output=True, text=True, check=False)
    return result.stdout if result.returncode == 0 else None


def test_committed_scripts_match_a_fresh_build(tmp_path):
    build = load_build()
    written = build.build(build.DEFAULT_VENV, tmp_path)
    assert written
    for path in written:
        target = ROOT / "extension" / path.name
        assert committed(target) == path.read_text(), (
            f"extension/{path.name} is stale: run 'make build' and commit it")


def test_every_plpython_body_is_bootstrapped():
    build = load_build()
    for path in build.idempotent_files():
        text = path.read_text()
        assert text.count("LANGUAGE plpython3u") == text.count("#BOOTSTRAP"), path.name


def test_the_venv_is_baked_in_never_read_from_a_setting(tmp_path):
    """Any role may SET a custom setting; the environment the backend activates (and whose .pth
    files it runs as the postgres OS user) must come from the install alone."""
    build = load_build()
    build.build("/srv/some venv/", tmp_path)
    script = (tmp_path / f"plpy_anon--{build.package_version()}.sql").read_text()
    assert "current_setting" not in build.BOOTSTRAP and "plpy_anon.venv" not in script
    assert script.count("_venv = '/srv/some venv'") == script.count("LANGUAGE plpython3u") > 20
    assert "ALTER SYSTEM" not in script and "make install VENV=" in script


@pytest.mark.parametrize("venv", ["relative/venv", "/opt/x\nimport os"])
def test_a_venv_that_is_not_an_absolute_path_is_refused(tmp_path, venv):
    build = load_build()
    with pytest.raises(SystemExit, match="absolute path"):
        build.build(venv, tmp_path)


def test_committed_sql_reference_matches_the_declarations():
    build = load_build()
    assert (ROOT / "docs" / "sql-reference.md").read_text() == build.reference(), (
        "docs/sql-reference.md is stale: run 'python3 sql/build.py' and commit it")


def test_one_declaration_per_public_function_and_no_install_time_rewrite(tmp_path):
    """The shipped script creates anon.f (PL/pgSQL) and anon_py.f (PL/Python) for every declared
    function; nothing renames functions when it runs."""
    build = load_build()
    build.build(build.DEFAULT_VENV, tmp_path)
    script = (tmp_path / f"plpy_anon--{build.package_version()}.sql").read_text()
    signatures = [(f.name, tuple(tuple(a.types) for a in f.args)) for f in build.all_declarations()]
    assert len(signatures) == len(set(signatures)) > 30
    names = {name for name, _ in signatures}
    for name in names:
        assert f"CREATE OR REPLACE FUNCTION {build.PLACEHOLDER}.{name}(" in script   # anon or SCHEMA's
        assert f"CREATE OR REPLACE FUNCTION anon_py.{name}(" in script
    assert "RENAME TO %I" not in script and "_py_" not in script


def test_handwritten_public_functions_are_in_the_reference_and_need_a_comment(tmp_path, monkeypatch):
    build = load_build()
    names = {f.name for f in build.handwritten()}
    assert {"add_queries", "drop_hierarchy"} <= names and not any(n.startswith("_") for n in names)
    assert "### anon.add_queries\n" in build.reference()
    idem = tmp_path / "idempotent"
    idem.mkdir()
    (idem / "010-x.sql").write_text("CREATE OR REPLACE FUNCTION anon.undocumented(a int)\n"
                                    "RETURNS int\nLANGUAGE sql IMMUTABLE\nAS $$ SELECT a $$;\n")
    monkeypatch.setattr(build, "SQL", tmp_path)
    with pytest.raises(SystemExit, match="anon.undocumented .* has no COMMENT ON FUNCTION"):
        build.handwritten()


def test_extension_dir_holds_only_what_the_build_writes(tmp_path):
    """A released version's full script is not shipped once the version moves on: it would install
    code whose package (the version check in every body) is no longer in the environment."""
    build = load_build()
    written = {p.name for p in build.build(build.DEFAULT_VENV, tmp_path)}
    assert {p.name for p in (ROOT / "extension").iterdir()} == written
    assert {f"plpy_anon--{v}--{build.package_version()}.sql" for v in build.prior_versions()} <= written


def test_every_declared_entry_point_is_a_function_of_the_package():
    """A declaration naming a module or function the package lacks builds fine and fails at the
    first call: each one imported from this checkout."""
    import importlib
    build = load_build()
    for function in build.all_declarations():
        module_name, _, name = f"plpy_anon.db.{function.python}".rpartition(".")
        module = importlib.import_module(module_name)
        assert Path(module.__file__).is_relative_to(ROOT), module.__file__
        assert callable(getattr(module, name, None)), f"anon.{function.name}: {function.python}"


def test_the_installed_package_is_this_checkouts():
    """The environment the tests' server runs holds exactly this checkout's modules (a module
    left from an older tree would answer calls that this tree no longer serves)."""
    out = subprocess.run([sys.executable, "-c", ("import os, plpy_anon; "
                          "print(os.path.dirname(plpy_anon.__file__))")],
                         cwd="/", capture_output=True, text=True, check=False)
    if out.returncode != 0:
        pytest.skip("plpy_anon is not installed in this interpreter's environment")
    installed = Path(out.stdout.strip())
    if installed == ROOT / "plpy_anon":
        pytest.skip("installed in development mode")

    def modules(top: Path) -> set[str]:
        return {str(p.relative_to(top)) for p in top.rglob("*.py")}
    assert modules(installed) == modules(ROOT / "plpy_anon")
