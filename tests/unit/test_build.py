"""The committed extension/ scripts are exactly what sql/build.py makes from sql/ (a change to
sql/ without its rebuilt script would install different code than the one reviewed)."""
import importlib.util
import shutil
import subprocess
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
