"""plpy-anon --version: the package's version, and the extension's when a database is reachable."""
from __future__ import annotations

from click.testing import CliRunner

import plpy_anon
from plpy_anon.cli import main

NO_CONNECTION = {v: None for v in ("PLPY_ANON_DSN", "PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE",
                                    "PGUSER", "PGSERVICE")}


def run(*args, env=None):
    return CliRunner().invoke(main, list(args), env={**NO_CONNECTION, **(env or {})},
                              catch_exceptions=False)


def test_version_without_a_database_says_not_connected():
    result = run("--version")
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [f"plpy-anon {plpy_anon.__version__}",
                                          "extension: not connected (no -d, -h, -p, -U, PLPY_ANON_DSN or PG* variable)"]


def test_version_with_an_unreachable_database_gives_the_error_in_one_line():
    result = run("--dsn", "host=/nonexistent_plpy_anon dbname=x", "--version")
    assert result.exit_code == 0
    first, second = result.stdout.splitlines()
    assert first == f"plpy-anon {plpy_anon.__version__}"
    assert second.startswith("extension: not connected: ") and "nonexistent_plpy_anon" in second


def test_version_reports_the_installed_extension(pg_server, connect):
    dsn = " ".join(f"{k}={v}" for k, v in pg_server.items())
    result = run("--version", env={"PLPY_ANON_DSN": dsn})          # the DSN from the environment
    installed = connect().execute(
        "SELECT extversion FROM pg_extension WHERE extname = 'plpy_anon'").fetchone()[0]
    assert result.exit_code == 0
    assert result.stdout.splitlines()[1] == f"extension: plpy_anon {installed} in database {pg_server['dbname']}"
    with connect(dbname="postgres") as admin:          # a database without the extension
        bare = dsn.replace(f"dbname={pg_server['dbname']}", "dbname=postgres")
        assert admin.execute("SELECT count(*) FROM pg_extension WHERE extname = 'plpy_anon'").fetchone()[0] == 0
    assert run("--dsn", bare, "--version").stdout.splitlines()[1] == \
        "extension: not installed in database postgres"


def test_a_missing_command_is_still_a_usage_error():
    assert run("--quiet").exit_code == 2
    bare = run()
    assert "Usage:" in bare.output and "--version" in bare.output     # no arguments: the help
