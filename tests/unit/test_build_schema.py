"""The fresh install script names the extension's schema only through the placeholder it replaces
by the schema chosen at CREATE EXTENSION (anon, or the one given with SCHEMA), and the upgrade from
0.1.0 keeps schema anon."""
import re

from tests.unit.test_build import load_build

# a reference to the schema anon: anon.x, anon\.x (a regex), 'anon', SCHEMA anon; not anon_py
NAMES_ANON = re.compile(r"(?<![\w\"@])anon(\.|\\\.|'|\b(?!_))")


def code(text: str) -> list[str]:
    """The lines of ``text`` that are not SQL comments."""
    return [line for line in text.splitlines() if not line.lstrip().startswith("--")]


def test_the_install_names_schema_anon_only_in_the_guard_that_creates_it(tmp_path):
    build = load_build()
    build.build(build.DEFAULT_VENV, tmp_path)
    script = (tmp_path / f"plpy_anon--{build.package_version()}.sql").read_text()
    guard, _, rest = script.partition("$plpy_anon_guard$;")
    assert rest and "CREATE SCHEMA anon;" in guard
    body = rest.partition("$plpy_anon_script$")[2]
    assert body.count(build.PLACEHOLDER) > 500
    assert [line for line in code(body) if NAMES_ANON.search(line)] == []


def test_the_upgrade_from_0_1_0_keeps_schema_anon(tmp_path):
    build = load_build()
    build.build(build.DEFAULT_VENV, tmp_path)
    upgrade = (tmp_path / f"plpy_anon--0.1.0--{build.package_version()}.sql").read_text()
    assert build.PLACEHOLDER not in upgrade and "GRANT USAGE ON SCHEMA anon TO" in upgrade


def test_placeholders_leave_other_names_alone():
    build = load_build()
    text = ("SELECT anon.f(x) FROM anon.releases, plpy_anon.db, anon_py.g(), \"anon\".t; "
            "GRANT USAGE ON SCHEMA anon TO r; has_schema_privilege('anon', 'USAGE'); "
            "format('ON anon.%I', t); '^SELECT anon\\.refresh'")
    assert build.schema_placeholders(text) == (
        "SELECT @plpy_anon_schema@.f(x) FROM @plpy_anon_schema@.releases, plpy_anon.db, anon_py.g(), "
        "\"anon\".t; GRANT USAGE ON SCHEMA @plpy_anon_schema@ TO r; "
        "has_schema_privilege('@plpy_anon_schema@', 'USAGE'); format('ON @plpy_anon_schema@.%I', t); "
        "'^SELECT @plpy_anon_schema@\\.refresh'")
