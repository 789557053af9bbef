"""CLI commands and options, and client methods' arguments, are named like the SQL functions and
arguments they use (sql/functions/ declarations and the hand-written SQL functions); no older
spelling is kept before 1.0."""
from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from plpy_anon import cli
from plpy_anon.client import AnonClient
from plpy_anon.parameters import SURFACES

ROOT = Path(__file__).resolve().parents[2]
CLI_ONLY = {"fmt_local", "params", "all_"}            # --format, --param, refresh --all
EXTRA = {     # commands that are not one SQL function, or options that are not SQL arguments
    "install": {"version", "upgrade"},                 # CREATE/ALTER EXTENSION
    "load-queries": {"log_file", "log_format", "source", "projection_share"},   # client-side reader
    "release-frame": {"release", "limit"},             # AnonClient.release_frame (a SELECT)
    "export": {"release", "export_format", "output"},   # AnonClient.export (COPY, client-side files)
    "set-column-role": {"identifiers", "quasi_identifiers", "sensitive", "ignored"},  # one per role
    "report": {"release", "output", "population", "thresholds"},   # client.report.write_report (HTML)
}
CLI_ONLY |= {"force", "no_formula_protection"}        # export --force, --no-formula-protection


def sql_arguments() -> dict[str, set[str]]:
    spec = importlib.util.spec_from_file_location("sql_build", ROOT / "sql" / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    names: dict[str, set[str]] = {}
    for f in build.all_declarations():
        names.setdefault(f.name, set()).update(a.name for a in f.args)
    for f in build.handwritten():
        names.setdefault(f.name, set()).update(a.split()[0] for a in f.args)
    return names


SQL = sql_arguments()


def visible_commands() -> dict[str, click.Command]:
    return {name: command for name, command in cli.main.commands.items() if not command.hidden}


def test_every_command_is_named_like_a_sql_function():
    for name in visible_commands():
        assert name in EXTRA or name.replace("-", "_") in SQL, f"{name}: no anon.{name.replace('-', '_')}"
    assert {"release-frame", "grant-analyst", "mondrian-view", "fusion-resilient-view"} <= set(visible_commands())


def test_every_option_and_argument_is_named_like_a_sql_argument():
    for name, command in visible_commands().items():
        function = name.replace("-", "_")
        allowed = SQL.get(function, set()) | CLI_ONLY | EXTRA.get(name, set())
        for param in command.params:
            assert param.name in allowed, f"{name}: {param.name} is not an argument of anon.{function}"
            if isinstance(param, click.Option) and param.name in SQL.get(function, ()):
                assert param.opts == ["--" + param.name.replace("_", "-")], (name, param.opts)
    # a release-creating command has an option for every argument of its SQL function but the
    # source (its argument), built from the declarations (plpy_anon.parameters)
    for function in {s.function for s in SURFACES.values()}:
        command = cli.main.commands[function.replace("_", "-")]
        assert {p.name for p in command.params} - CLI_ONLY == SQL[function], function
        assert AnonClient.__dict__[function].__signature__.parameters.keys() - {"self"} == SQL[function]


def test_client_methods_named_like_sql_functions_take_its_argument_names():
    checked = 0
    for name, method in inspect.getmembers(AnonClient, inspect.isfunction):
        if name not in SQL:
            continue
        params = [p for p in inspect.signature(method).parameters.values()
                  if p.name != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD]
        extra = {p.name for p in params} - SQL[name]
        assert not extra, f"AnonClient.{name}: {sorted(extra)} are not arguments of anon.{name}"
        checked += 1
    assert checked >= 15


@pytest.mark.parametrize("old", [["show", "r"], ["grant", "someone"], ["releases"],
                                 ["create", "mondrian", "t"], ["hierarchy", "drop", "t", "c"],
                                 ["risk", "t"], ["mondrian-view", "t", "--qi", "a"]])
def test_no_old_spelling_is_kept_before_1_0(old):
    result = CliRunner().invoke(cli.main, ["-d", "host=/nonexistent_plpy_anon dbname=x", "--quiet", *old])
    assert result.exit_code == 2 and ("No such command" in result.stderr or "No such option" in result.stderr)


def test_underscores_work_as_dashes():
    result = CliRunner().invoke(cli.main, ["release_frame", "--help"])
    assert result.exit_code == 0 and "The rows of RELEASE" in result.stdout
