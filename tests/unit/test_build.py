"""sql/build.py makes extension/ and docs/sql-reference.md from sql/ (both built by make, never
committed): a build is reproducible, its scripts are the frozen files and the sources, and the
server's installed scripts are the ones this checkout builds."""
import hashlib
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PG_CONFIG = os.environ.get("PG_CONFIG", "/usr/lib/postgresql/15/bin/pg_config")


def load_build():
    spec = importlib.util.spec_from_file_location("sql_build", ROOT / "sql" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_two_builds_give_identical_bytes(tmp_path):
    build = load_build()
    first = build.build(build.DEFAULT_VENV, tmp_path / "a")
    second = build.build(build.DEFAULT_VENV, tmp_path / "b")
    assert [p.name for p in first] == [p.name for p in second] and len(first) >= 3
    for a, b in zip(first, second):
        assert a.read_bytes() == b.read_bytes(), a.name
    assert build.reference() == build.reference()


def sections(script: str) -> list[str]:
    """The incremental files a script runs, in order (each section starts with its file name)."""
    return re.findall(r"^-- incremental/(\S+)$", script, re.MULTILINE)


def statements(path: Path) -> bytes:
    """A file's bytes from its first line that is not a comment (the header may be corrected)."""
    lines = path.read_bytes().splitlines(keepends=True)
    while lines and lines[0].lstrip().startswith(b"--"):
        lines.pop(0)
    return b"".join(lines)


def test_a_shipped_files_statements_are_refused_an_edit_and_its_header_is_not(tmp_path, monkeypatch):
    build = load_build()
    shipped = next(iter(build.frozen()))
    copy = tmp_path / "sql"
    (copy / "incremental").mkdir(parents=True)
    (copy / "frozen.txt").write_bytes((ROOT / "sql" / "frozen.txt").read_bytes())
    for f in (ROOT / "sql" / "incremental").glob("*.sql"):
        (copy / "incremental" / f.name).write_bytes(f.read_bytes())
    monkeypatch.setattr(build, "SQL", copy)
    target = copy / "incremental" / shipped
    original = target.read_text()
    target.write_text("-- a corrected header\n" + original)
    build.check_frozen()
    target.write_text(original.replace(";", " ;", 1))
    with pytest.raises(SystemExit, match="shipped in a released version"):
        build.check_frozen()


def test_the_scripts_are_the_frozen_files_then_the_sources(tmp_path):
    """The install script runs every incremental file in order, each upgrade script exactly those
    its prior version did not ship, and a shipped file is byte for byte the one frozen."""
    build = load_build()
    version = build.package_version()
    build.build(build.DEFAULT_VENV, tmp_path)
    incremental = sorted(p.name for p in (ROOT / "sql" / "incremental").glob("*.sql"))
    full = (tmp_path / f"plpy_anon--{version}.sql").read_text()
    assert sections(full) == incremental
    for name in incremental:
        text = (ROOT / "sql" / "incremental" / name).read_text().rstrip()
        # every file but the schema guard runs in the schema CREATE EXTENSION chose
        assert (text if name == build.GUARD_FILE else build.schema_placeholders(text)) in full, name
    frozen = dict(reversed(line.split()) for line in (ROOT / "sql" / "frozen.txt").read_text().splitlines())
    shipped = {}
    for line in (ROOT / "sql" / "versions.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            prior, *names = line.split()
            shipped[prior] = set(names)
    assert shipped and set().union(*shipped.values()) <= set(frozen)
    for name, digest in frozen.items():
        assert hashlib.sha256(statements(ROOT / "sql" / "incremental" / name)).hexdigest() == digest
    for prior, names in shipped.items():
        if prior == version:
            continue
        upgrade = (tmp_path / f"plpy_anon--{prior}--{version}.sql").read_text()
        assert sections(upgrade) == [n for n in incremental if n not in names], prior


def test_the_control_file_installs_the_package_version(tmp_path):
    build = load_build()
    build.build(build.DEFAULT_VENV, tmp_path)
    control = (tmp_path / "plpy_anon.control").read_text()
    declared = re.search(r'^__version__ = "(.+)"$', (ROOT / "plpy_anon" / "__init__.py").read_text(),
                         re.MULTILINE).group(1)
    assert re.findall(r"^default_version = '(.+)'$", control, re.MULTILINE) == [declared]


def test_a_build_leaves_only_its_own_scripts(tmp_path):
    """A released version's full script is not shipped once the version moves on (it would install
    code whose package, checked in every body, is no longer in the environment), nor is a script
    an older build left in the output directory."""
    build = load_build()
    (tmp_path / "plpy_anon--0.0.1.sql").write_text("-- an older build's script\n")
    (tmp_path / "plpy_anon--0.0.1--0.0.2.sql").write_text("-- an older build's script\n")
    written = {p.name for p in build.build(build.DEFAULT_VENV, tmp_path)}
    assert {p.name for p in tmp_path.iterdir()} == written
    assert {f"plpy_anon--{v}--{build.package_version()}.sql" for v in build.prior_versions()} <= written


def test_the_installed_scripts_are_this_checkouts(tmp_path):
    """The server's extension directory holds exactly what this checkout builds (with the venv the
    installed script names): the tests run the SQL under review ('make install' after a change)."""
    try:
        share = subprocess.check_output([PG_CONFIG, "--sharedir"], text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no PostgreSQL server installed")
    build = load_build()
    installed = Path(share) / "extension"
    script = installed / f"plpy_anon--{build.package_version()}.sql"
    if not script.exists():
        pytest.skip("the extension is not installed: run 'make install'")
    venv = re.search(r"^    _venv = '(.*)'$", script.read_text(), re.MULTILINE).group(1)
    written = build.build(venv, tmp_path)
    others = {p.name for p in installed.glob("plpy_anon*")} - {p.name for p in written}
    assert not {n for n in others if re.search(rf"--{re.escape(build.package_version())}\.sql$", n)}
    for path in written:
        assert (installed / path.name).read_text() == path.read_text(), (
            f"the installed {path.name} is not this checkout's: run 'make install'")


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


def test_a_wheel_built_from_a_clone_knows_every_declared_method(tmp_path):
    """`pip install './[client]'` in a clone (no `make` first) gives a client and CLI that know every
    release method: the build backend writes the declarations into the wheel."""
    import json
    import shutil
    import zipfile
    tree = tmp_path / "tree"
    shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(
        ".git", "build", "extension", "declared_methods.json", "_jit_cache", "__pycache__",
        ".hypothesis", "*.egg-info", "bench-results"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    str(tree), "-w", str(tmp_path / "wheels")], check=True, cwd=tmp_path)
    wheel, = (tmp_path / "wheels").glob("plpy_anon-*.whl")
    with zipfile.ZipFile(wheel) as z:
        methods = json.loads(z.read("plpy_anon/declared_methods.json"))
    declared = set(re.findall(r'^release = "(\w+)"', "\n".join(
        p.read_text() for p in (ROOT / "sql" / "functions").glob("*.toml")), re.MULTILINE))
    assert declared and set(methods) == declared
