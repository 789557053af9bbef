"""``plpy-anon``: the client library as a command line, with psql's connection manners.

    plpy-anon -d hospital release-status
    plpy-anon -h db.example.org -U custodian -d hospital mondrian-view patients --k 5
    plpy-anon refresh patients_k5                  # PGHOST, PGDATABASE, ... as libpq reads them
    plpy-anon release-report patients_k5 --format json

Connection: ``-d/--dbname`` (a database name, or a connection string or URI, as psql's ``-d``;
also ``--dsn`` or ``PLPY_ANON_DSN``), ``-h/--host``, ``-p/--port``, ``-U/--username``, ``-W``
(ask for the password), ``-w`` (never ask); whatever is not given comes from libpq's defaults
and ``PG*`` variables. Commands and options are named like the SQL functions and arguments they
use (``release_frame`` works as well as ``release-frame``).

Results print as tables for people, ``--format json`` or ``csv`` for scripts, with numbers as
exact as the server sent them and ISO 8601 timestamps. Long operations report their phases on
stderr with the elapsed time (``--quiet`` silences them). A failure prints one line,
``plpy-anon: error: <server message> (hint: ...)`` (JSON on stderr with ``--format json``), and
the exit status says what kind of failure it was (:data:`EXIT_CODES`).
"""
from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import os
import sys
import threading
import time
import traceback
from typing import TYPE_CHECKING, Any, Self

import click

import plpy_anon
from plpy_anon.client.errors import ConnectionFailed, ServerError
from plpy_anon.client.report_thresholds import DEFAULT_THRESHOLDS, THRESHOLD_HELP
from plpy_anon.core.errors import AnonError
from plpy_anon.parameters import SURFACES, function_parameters

# pandas, psycopg and the report are imported by the commands that use them: --help and usage
# errors answer without loading them
if TYPE_CHECKING:
    import pandas as pd

    from plpy_anon.client import AnonClient

#: exit status by kind of failure (docs/cli.md); 1 for any other error the server reports
EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_CONNECTION, EXIT_NOT_FOUND, EXIT_REFUSED, EXIT_INTERNAL, \
    EXIT_FILE = 0, 1, 2, 3, 4, 5, 70, 73
EXIT_CODES = {
    EXIT_OK: "success",
    EXIT_ERROR: "the server refused the command (permission, invalid argument, duplicate, ...)",
    EXIT_USAGE: "usage: unknown command or option, missing argument, malformed connection string",
    EXIT_CONNECTION: "could not connect to the database",
    EXIT_NOT_FOUND: "not found: table, column, release, role, schema or the extension's function",
    EXIT_REFUSED: "refused by a privacy check: the release would break its promise (k, l, t, "
                  "verification, an undeclared identifying column)",
    EXIT_INTERNAL: "internal error of plpy-anon (a bug: please report it with the traceback)",
    EXIT_FILE: "the output file cannot be written (missing directory, no permission, disk full)",
}
NOT_FOUND = {"42P01", "42704", "42703", "3F000", "42883"}
REFUSED = {"22000", "42P10"}


class OutputFileError(AnonError):
    """A file the command was told to write cannot be written (sysexits' EX_CANTCREAT)."""

    sqlstate = "58030"          # PostgreSQL's io_error


def output_file(path: str, force: bool) -> None:
    """Refuse, before anything runs, to replace ``path`` without --force or to write it into a
    directory that does not exist or cannot be written."""
    existing = [f for f in (path, f"{path}.meta.json") if os.path.lexists(f)]
    if existing and not force:
        raise click.UsageError(f"{existing[0]} exists: pass --force to replace it")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise OutputFileError(f"cannot write {path}: directory {directory} does not exist",
                              hint="Create it first (mkdir -p), or give another -o.")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise OutputFileError(f"cannot write {path}: directory {directory} is not writable",
                              hint="Give -o a file in a directory you may write.")


def exit_code(error: Exception) -> int:
    """The exit status of a failed command (EXIT_CODES)."""
    sqlstate = getattr(error, "sqlstate", None) or ""
    if isinstance(error, OutputFileError):
        return EXIT_FILE
    if isinstance(error, ConnectionFailed) or sqlstate.startswith("08"):
        return EXIT_CONNECTION
    if sqlstate in NOT_FOUND:
        return EXIT_NOT_FOUND
    if sqlstate in REFUSED:
        return EXIT_REFUSED
    return EXIT_ERROR


# ---------------------------------------------------------------------------- rendering

def plain(value: Any, *, iso: bool = True) -> Any:
    """A value as JSON/CSV/table cells show it: PostgreSQL's text forms for ranges and arrays,
    ISO 8601 timestamps (``T`` between date and time; a space with ``iso=False``, as psql shows
    them), numbers exactly as they came (a numeric stays a Decimal)."""
    from psycopg.types.range import Range
    pd = sys.modules.get("pandas")          # a result that never went through pandas holds no pd.NA
    if value is None or (pd is not None and value is pd.NA) or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, Range):
        if value.isempty:
            return "empty"
        lo = "" if value.lower is None else plain(value.lower, iso=iso)
        hi = "" if value.upper is None else plain(value.upper, iso=iso)
        return f"{value.bounds[0]}{lo},{hi}{value.bounds[1]}"
    if isinstance(value, dt.datetime):
        return value.isoformat(sep="T" if iso else " ")
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if hasattr(value, "item"):           # numpy scalars
        return value.item()
    return value


def number_text(value: float | decimal.Decimal) -> str:
    """A number's exact text, as PostgreSQL writes it: a float8 in the shortest digits that read
    back as the same float, without a fraction when it has none and in exponent notation only
    below 1e-4 or from 1e15 on (``30162``, ``0.1``, ``1e+15``, ``1e-05``); a numeric's own digits;
    Infinity and NaN as PostgreSQL spells them."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, decimal.Decimal):
        return "NaN" if value.is_nan() else str(value) if value.is_finite() else \
            ("Infinity" if value > 0 else "-Infinity")
    if value == 0:
        return "-0" if math.copysign(1, value) < 0 else "0"
    shortest = decimal.Decimal(repr(value))
    sign, digits, _ = shortest.as_tuple()
    digits = "".join(map(str, digits)).rstrip("0") or "0"
    magnitude = shortest.adjusted()          # the exponent of the leading digit
    if -4 <= magnitude < 15:
        text = format(shortest, "f")
        text = text.rstrip("0").rstrip(".") if "." in text else text
        return text
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{'-' if sign else ''}{mantissa}e{'+' if magnitude >= 0 else '-'}{abs(magnitude):02d}"


def array_text(values: list, *, iso: bool = True) -> str:
    """A list as PostgreSQL writes an array: elements quoted when empty, NULL or holding a
    delimiter, brace, quote, backslash or white space."""
    def element(v):
        if v is None:
            return "NULL"
        if isinstance(v, list):
            return array_text(v, iso=iso)
        text = cell(v, iso=iso)
        if text == "" or text.upper() == "NULL" or any(ch in text for ch in '{},"\\') \
                or any(ch.isspace() for ch in text):
            return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return text
    return "{" + ",".join(element(v) for v in values) + "}"


def cell(value: Any, *, iso: bool = True) -> str:
    """A value as a table or CSV cell: booleans t/f as psql and COPY write them."""
    value = plain(value, iso=iso)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, list):
        return array_text(value, iso=iso)
    if isinstance(value, dict):
        return json.dumps(value, default=str)
    if isinstance(value, (float, decimal.Decimal)):
        return number_text(value)
    return str(value)


# The renderers take a frame, or column names and rows (tuples): a record or a function's rows,
# which a command prints without loading pandas.

def render_table(table: pd.DataFrame | list[str], rows: list[tuple] | None = None) -> str:
    from plpy_anon.psql_text import aligned_table  # wcwidth: for a table only
    columns, rows = table_of(table, rows)
    return aligned_table(columns, [[cell(v, iso=False) for v in row] for row in rows])


def render_csv(table: pd.DataFrame | list[str], rows: list[tuple] | None = None) -> str:
    columns, rows = table_of(table, rows)
    import csv
    import io
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([cell(v) for v in row])
    return buffer.getvalue().rstrip("\n")


def render_json(table: pd.DataFrame | list[str], rows: list[tuple] | None = None) -> str:
    columns, rows = table_of(table, rows)
    records = [{k: _json_value(v) for k, v in zip(columns, row)} for row in rows]
    return json.dumps(records, indent=2, default=str)


def table_of(table: pd.DataFrame | list[str], rows: list[tuple] | None) -> tuple[list[str], list[tuple]]:
    """(column names, rows) of a frame, or of column names given with their rows."""
    if rows is not None:
        return [str(c) for c in table], rows
    return [str(c) for c in table.columns], list(table.itertuples(index=False, name=None))


def _json_value(value: Any) -> Any:
    """A JSON value, exact: a numeric that a float would round stays a string of its digits."""
    value = plain(value)
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items()}
    if isinstance(value, decimal.Decimal):
        if value.is_finite() and value == value.to_integral_value():
            return int(value)
        as_float = float(value)
        return as_float if math.isfinite(as_float) and decimal.Decimal(repr(as_float)) == value \
            else number_text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return number_text(value)           # JSON has no Infinity or NaN
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return int(value)                   # a count in a float8 column: 30162, as to_json writes it
    return value


RENDERERS = {"table": render_table, "json": render_json, "csv": render_csv}


def emit(ctx: click.Context, frame: pd.DataFrame) -> None:
    click.echo(RENDERERS[ctx.obj["format"]](frame))


def emit_rows(ctx: click.Context, columns: list[str], rows: list[tuple]) -> None:
    click.echo(RENDERERS[ctx.obj["format"]](columns, rows))


def emit_record(ctx: click.Context, record: dict) -> None:
    click.echo(RENDERERS[ctx.obj["format"]](list(record), [tuple(record.values())]))


# ---------------------------------------------------------------------------- progress

class Progress:
    """Phases on stderr with elapsed time, and a heartbeat every few seconds while the server
    works silently, so a long refresh never looks hung."""

    def __init__(self, enabled: bool, heartbeat: float = 5.0):
        self.enabled = enabled
        self.heartbeat = heartbeat
        self.started = time.monotonic()
        self._last = self.started
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __call__(self, message: str) -> None:
        if self.enabled:
            self._last = time.monotonic()
            click.echo(f"[{self._last - self.started:7.1f}s] {message}", err=True)

    def __enter__(self) -> Self:
        self.started = self._last = time.monotonic()
        if self.enabled:
            self._thread = threading.Thread(target=self._beat, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat):
            if time.monotonic() - self._last >= self.heartbeat:
                self("... still working")


# ---------------------------------------------------------------------------- plumbing

def looks_like_conninfo(text: str) -> bool:
    """psql's rule for -d: a connection string (key=value) or a URI, else a database name."""
    return "=" in text or text.startswith(("postgresql://", "postgres://"))


def conninfo(options: dict, password: str | None = None) -> str:
    """The libpq connection string of the global options; what they leave out, libpq takes from
    its defaults and the PG* variables, as psql does."""
    import psycopg
    from psycopg.conninfo import make_conninfo
    base, dbname = options.get("dbname") or "", None
    if base and not looks_like_conninfo(base):
        base, dbname = "", base
    given = {"dbname": dbname, "host": options.get("host"), "port": options.get("port"),
             "user": options.get("username"), "password": password}
    try:
        return make_conninfo(base, **{k: v for k, v in given.items() if v is not None})
    except psycopg.ProgrammingError as error:     # libpq could not parse it
        raise click.BadParameter(
            f"not a connection string or URI: {error} (a database name has no '=', a URI starts "
            "with postgresql://, e.g. -d 'host=/tmp dbname=hospital' or -d postgresql:///hospital)",
            param_hint="'-d' / '--dbname' / PLPY_ANON_DSN") from None


def connect(ctx: click.Context, progress: Progress | None = None) -> AnonClient:
    """A client on the global options' connection. -W asks for the password first; without it,
    a server that wants a password it was not given gets it asked for on a terminal (unless -w)."""
    from plpy_anon.client import AnonClient
    options = ctx.obj
    password = ask_password() if options.get("password_prompt") else None
    try:
        return AnonClient(conninfo(options, password), progress=progress, schema=options.get("schema"))
    except ConnectionFailed as error:
        if password is not None or options.get("no_password") or "no password supplied" not in error.message \
                or not click.get_text_stream("stdin").isatty():
            raise
    return AnonClient(conninfo(options, ask_password()), progress=progress, schema=options.get("schema"))


def ask_password() -> str:
    return click.prompt("Password", hide_input=True, err=True)


def client(ctx: click.Context, progress: Progress | None = None) -> AnonClient:
    anon = connect(ctx, progress)
    ctx.call_on_close(anon.close)
    return anon


def split_list(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [v.strip() for v in value.split(",") if v.strip()]


def parse_params(pairs: tuple[str, ...]) -> dict:
    """``--param key=value``: the value as JSON when it parses (numbers, booleans, arrays,
    objects), else as text."""
    params = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not key=value", param_hint="--param")
        try:
            params[key] = json.loads(value)
        except ValueError:
            params[key] = value
    return params


class Group(click.Group):
    """Turns every error into one line on stderr (JSON with --format json) and the exit status
    of its kind (EXIT_CODES); resolves ``release_frame`` as ``release-frame``."""

    def get_command(self, ctx, cmd_name):
        return super().get_command(ctx, cmd_name) or super().get_command(ctx, cmd_name.replace("_", "-"))

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (ServerError, AnonError) as error:
            if (ctx.obj or {}).get("format") == "json":      # scripts parse errors too
                click.echo(json.dumps({"sqlstate": getattr(error, "sqlstate", None),
                                       "message": error.message, "detail": error.detail,
                                       "hint": error.hint}), err=True)
                ctx.exit(exit_code(error))
            message = error.message + (f" (hint: {error.hint})" if error.hint else "")
            click.echo(f"plpy-anon: error: {' '.join(message.split())}", err=True)   # one line
            ctx.exit(exit_code(error))
        except (click.exceptions.Exit, click.ClickException, click.Abort, KeyboardInterrupt):
            raise
        except Exception:  # noqa: BLE001 -- a bug of ours: say so, with what to report
            click.echo(traceback.format_exc().rstrip(), err=True)
            click.echo("plpy-anon: internal error: this is a bug of plpy-anon; please report it "
                       "with the traceback above", err=True)
            ctx.exit(EXIT_INTERNAL)


# ---------------------------------------------------------------------------- commands

CONNECTION_VARIABLES = ("PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGSERVICE")


def version_lines(options: dict) -> list[str]:
    """``plpy-anon --version``: the package's version, and the extension's in the database when
    a connection is given (an option, PLPY_ANON_DSN or a PG* variable; else why not, in one line)."""
    lines = [f"plpy-anon {plpy_anon.__version__}"]
    given = any(options.get(k) for k in ("dbname", "host", "port", "username")) \
        or any(os.environ.get(v) for v in CONNECTION_VARIABLES)
    if not given:
        return lines + ["extension: not connected (no -d, -h, -p, -U, PLPY_ANON_DSN or PG* variable)"]
    from plpy_anon.client import AnonClient
    try:
        with AnonClient(conninfo(options)) as anon:
            installed = anon.extension_version()
            database = anon.connection.info.dbname
    except (ServerError, AnonError) as error:
        return lines + [f"extension: not connected: {' '.join(error.message.split())}"]
    if installed is None:
        return lines + [f"extension: not installed in database {database}"]
    return lines + [f"extension: plpy_anon {installed} in database {database}"]


EPILOG = ("Exit status: 0 success, 1 refused by the server, 2 usage, 3 connection, 4 not found, "
          "5 refused by a privacy check, 70 internal error, 73 output file cannot be written "
          "(docs/cli.md).")


@click.group(cls=Group, invoke_without_command=True, no_args_is_help=True, epilog=EPILOG)
@click.option("-d", "--dbname", "--dsn", "dbname", envvar="PLPY_ANON_DSN", metavar="DBNAME",
              help="Database name, or a libpq connection string or URI (as psql -d; or PLPY_ANON_DSN).")
@click.option("-h", "--host", help="Server host or socket directory (libpq's PGHOST by default).")
@click.option("-p", "--port", help="Server port (PGPORT by default).")
@click.option("-U", "--username", help="Database user (PGUSER by default).")
@click.option("-W", "--password", "password_prompt", is_flag=True, help="Ask for the password.")
@click.option("-w", "--no-password", "no_password", is_flag=True, help="Never ask for a password.")
@click.option("--format", "fmt", type=click.Choice(list(RENDERERS)), default="table",
              help="Output: human table (default), json or csv.")
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
@click.option("--schema", envvar="PLPY_ANON_SCHEMA", metavar="SCHEMA",
              help="The extension's schema: where install puts it (default anon; e.g. beside PostgreSQL "
                   "Anonymizer), else where it is (default: asked of the server).")
@click.option("--version", "show_version", is_flag=True,
              help="Print the package's version, and the extension's in the database (when a connection is given).")
@click.pass_context
def main(ctx, dbname, host, port, username, password_prompt, no_password, fmt, quiet, schema, show_version):
    """Anonymized releases of PostgreSQL tables (the plpy_anon extension)."""
    ctx.ensure_object(dict)
    ctx.obj.update(dbname=dbname, host=host, port=port, username=username,
                   password_prompt=password_prompt, no_password=no_password, format=fmt, quiet=quiet,
                   schema=schema)
    if show_version:
        click.echo("\n".join(version_lines(ctx.obj)))
        ctx.exit(0)
    if ctx.invoked_subcommand is None:
        raise click.UsageError("Missing command.")


def format_option(f):
    """--format accepted after the command too (plpy-anon release-report x --format json)."""
    def store(ctx, _param, value):
        if value:
            ctx.obj["format"] = value
    return click.option("--format", "fmt_local", type=click.Choice(list(RENDERERS)), default=None,
                        expose_value=False, callback=store, help="Output: table, json or csv.")(f)


@main.command()
@click.option("--version", "version", default=None, help="Install this version (default: the newest).")
@click.option("--upgrade", is_flag=True, help="Upgrade an installed extension to the newest version.")
@format_option
@click.pass_context
def install(ctx, version, upgrade):
    """CREATE EXTENSION plpy_anon CASCADE (or ALTER EXTENSION ... UPDATE with --upgrade). With
    --version, installs exactly that version, or refuses when another one is installed (without
    --upgrade). With the global --schema, into that schema (created if missing; it must be empty):
    plpy-anon --schema pa install, beside PostgreSQL Anonymizer's schema anon."""
    anon = client(ctx)
    before = anon.extension_version()
    if upgrade and before is not None:
        old, new = anon.upgrade(version)
    else:
        old, new = before, anon.install(version)
    emit_record(ctx, {"extension": "plpy_anon", "before": old, "installed": new})


# SQL type of a method parameter -> its option's click type; lists are comma-separated, jsonb JSON
OPTION_TYPES = {"integer": click.INT, "bigint": click.INT, "double precision": click.FLOAT,
                "text": click.STRING, "regclass": click.STRING, "text[]": click.STRING,
                "jsonb": click.STRING, "text | jsonb": click.STRING}


def option_name(argument: str) -> str:
    return "--" + argument.replace("_", "-")


def option_value(parameter, value):
    """An option's text as the SQL argument: a list for text[], parsed JSON for jsonb."""
    if value is None:
        return None
    if parameter.sql_type == "text[]":
        return split_list(value)
    if parameter.sql_type == "jsonb":
        from psycopg.types.json import Jsonb
        try:
            return Jsonb(json.loads(value))
        except ValueError as error:
            raise click.BadParameter(f"not JSON: {error}", param_hint=option_name(parameter.name)) from None
    return value


def create_release(ctx, function: str, source: str, kwargs: dict, params: tuple[str, ...]) -> None:
    declared = {p.name: p for p in function_parameters(function)}
    kwargs = {k: option_value(declared[k], v) if k in declared else v for k, v in kwargs.items()}
    kwargs = {k: v for k, v in kwargs.items() if v is not None and v is not False}
    with Progress(not ctx.obj["quiet"]) as progress:
        anon = client(ctx, progress)
        progress(f"creating a {function} release of {source}")
        name = anon.scalar(function, source, **kwargs, **parse_params(params))
    emit_record(ctx, {"release": name})


def method_command(function: str) -> click.Command:
    """The command anon.<function> (e.g. mondrian-view SOURCE --k 5 --quasi-identifiers a,b): one
    option per parameter the SQL function declares (plpy_anon.parameters)."""
    def command(ctx, source, params, **kwargs):
        create_release(ctx, function, source, kwargs, params)
    command.__doc__ = f"Create a release of SOURCE with anon.{function}; prints its name."
    for p in reversed([p for p in function_parameters(function) if p.name != "source"]):
        text = p.help + ("" if p.default in (None, "NULL") else f" [default: {p.python_default}]")
        if p.sql_type == "text[]":
            text += " Comma-separated."
        if p.sql_type == "boolean" and p.default == "false":
            option = click.option(option_name(p.name), p.name, is_flag=True, default=None, help=text)
        elif p.sql_type == "boolean":
            flag = p.name.replace("_", "-")
            option = click.option(f"--{flag}/--no-{flag}", p.name, default=None, help=text)
        else:
            option = click.option(option_name(p.name), p.name, type=OPTION_TYPES[p.sql_type],
                                  required=p.required, help=text)
        command = option(command)
    command = click.option("--param", "params", multiple=True, metavar="KEY=VALUE",
                           help="Any other argument of the SQL function (repeatable; JSON values accepted).")(command)
    command = format_option(command)
    command = click.argument("source")(command)
    return main.command(function.replace("_", "-"))(click.pass_context(command))


for _function in sorted({s.function for s in SURFACES.values()}):
    method_command(_function)


@main.command()
@click.argument("release", required=False)
@click.option("--all", "all_", is_flag=True, help="Refresh every release in dependency order (refresh-all).")
@format_option
@click.pass_context
def refresh(ctx, release, all_):
    """Re-anonymize RELEASE from current data (phases shown on stderr)."""
    if bool(release) == all_:
        raise click.UsageError("give a release or --all")
    if all_:
        ctx.invoke(refresh_all)
        return
    with Progress(not ctx.obj["quiet"]) as progress:
        row = client(ctx, progress).refresh(release)
    emit_record(ctx, {k: row[k] for k in ("release_schema", "release_name", "row_count",
                                          "achieved_k", "refreshed_at", "refresh_seconds")})


@main.command("refresh-all")
@format_option
@click.pass_context
def refresh_all(ctx):
    """Refresh every release in dependency order; exits 1 if one failed."""
    with Progress(not ctx.obj["quiet"]) as progress:
        frame = client(ctx, progress).refresh_all()
    emit(ctx, frame)
    if (frame["status"] != "refreshed").any():
        ctx.exit(1)


@main.command("release-status")
@format_option
@click.pass_context
def release_status(ctx):
    """Every release: method, rows, k, last refresh, errors, schedule."""
    columns, rows = client(ctx).rows("release_status")
    if ctx.obj["format"] == "table":
        shown = ["release", "method", "source", "row_count", "achieved_k", "refreshed_at",
                 "refresh_seconds", "verified", "last_error", "schedule", "last_run_status"]
        at = [columns.index(c) for c in shown]
        columns, rows = shown, [tuple(row[i] for i in at) for row in rows]
    emit_rows(ctx, columns, rows)


@main.command("release-audit")
@click.argument("name", metavar="[RELEASE]", required=False)
@format_option
@click.pass_context
def release_audit(ctx, name):
    """Every release (or RELEASE) as a privacy officer signs it off: method, promise, readers,
    versions, what was held back, and whether it is safe and why (anon.release_audit)."""
    columns, rows = client(ctx).rows("release_audit", name)
    if ctx.obj["format"] == "table":
        shown = ["release", "method", "refresh_mode", "k", "l", "t", "achieved_k", "distinct_l",
                 "verified", "readers", "refreshed_at", "versions", "held_back", "safe", "why"]
        at = [columns.index(c) for c in shown]
        columns, rows = shown, [tuple(row[i] for i in at) for row in rows]
    emit_rows(ctx, columns, rows)


@main.command("release-report")
@click.argument("release")
@format_option
@click.pass_context
def release_report(ctx, release):
    """Utility and protection figures of RELEASE (k, C_DM, NCP, ...)."""
    emit(ctx, client(ctx).release_report(release))


@main.command("risk-report")
@click.argument("relation")
@click.option("--quasi-identifiers", "quasi_identifiers",
              help="Quasi-identifiers, comma-separated (default: a release's, else the declared ones).")
@click.option("--sensitive", help="Sensitive columns, comma-separated (default: a release's, else the declared ones).")
@click.option("--population", type=int, default=None,
              help="Size of the population RELATION is a sample of (journalist and marketer risk).")
@click.option("--risk-threshold", "risk_threshold", type=float, default=None,
              help="A record is at risk above this re-identification probability (default 0.2).")
@click.option("--recursive-c", "recursive_c", type=float, default=None,
              help="c of recursive (c,l)-diversity (default 3).")
@format_option
@click.pass_context
def risk_report(ctx, relation, quasi_identifiers, sensitive, population, risk_threshold, recursive_c):
    """Risk figures of RELATION (table, view, materialized view or release): k, small classes,
    prosecutor (and with --population journalist, marketer) risk, l-diversity and t-closeness."""
    emit(ctx, client(ctx).risk_report(relation, quasi_identifiers=split_list(quasi_identifiers),
                                      sensitive=split_list(sensitive), population=population,
                                      risk_threshold=risk_threshold, recursive_c=recursive_c))


@main.command("sweep")
@click.argument("source")
@click.option("--k", "k", required=True, metavar="K,K,...",
              help="The k to try, comma-separated (at most 50), e.g. 2,5,10,20,50.")
@click.option("--quasi-identifiers", "quasi_identifiers",
              help="Quasi-identifiers, comma-separated (default: the declared ones, as mondrian-view).")
@click.option("--sensitive", help="Sensitive columns, comma-separated (default: the declared ones).")
@click.option("--identifiers", help="Identifying columns left out, comma-separated.")
@click.option("--l", "l", type=int, default=None, help="Distinct l-diversity each partition keeps.")
@click.option("--risk-threshold", "risk_threshold", type=float, default=None,
              help="A record is at risk above this prosecutor risk (default 0.2).")
@format_option
@click.pass_context
def sweep(ctx, source, k, quasi_identifiers, sensitive, identifiers, l, risk_threshold):
    """What a Mondrian release of SOURCE would give for each k, publishing nothing (anon.sweep):
    classes, smallest class, NCP %, C_DM, C_AVG and prosecutor risk per k."""
    try:
        ks = [int(v) for v in split_list(k)]
    except ValueError:
        raise click.BadParameter(f"{k!r} is not a comma-separated list of integers", param_hint="--k") from None
    with Progress(not ctx.obj["quiet"]) as progress:
        emit(ctx, client(ctx, progress).frame(
            "sweep", source, ks, quasi_identifiers=split_list(quasi_identifiers),
            sensitive=split_list(sensitive), identifiers=split_list(identifiers), l=l,
            risk_threshold=risk_threshold))


@main.command("load-sample")
@click.argument("sample", type=click.Choice(["patients", "adult", "enterprise", "hr"]))
@click.option("--schema-name", "schema_name", default="public", show_default=True,
              help="The schema to create the sample's tables in (created if missing).")
@format_option
@click.pass_context
def load_sample(ctx, sample, schema_name):
    """Load a SAMPLE's tables (anon.load_sample): patients, adult (UCI Adult), enterprise
    (employees, web_facts) or hr (salaries), the tables the docs' examples read."""
    emit(ctx, client(ctx).frame("load_sample", sample, schema_name=schema_name))


@main.command("release-frame")
@click.argument("release")
@click.option("--limit", type=int, default=20, show_default=True, help="Rows to show (0: all).")
@format_option
@click.pass_context
def release_frame(ctx, release, limit):
    """The rows of RELEASE, as analysts see them (arrays and ranges as psql shows them)."""
    emit(ctx, client(ctx).release_frame(release, limit=limit or None, text=True))


@main.command("export")
@click.argument("release")
@click.option("--format", "export_format", type=click.Choice(["csv", "parquet", "sql"]), default="csv",
              show_default=True, help="csv (header), parquet (typed columns; the [parquet] extra) or sql "
                                      "(CREATE TABLE + COPY for psql).")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="File to write; FILE.meta.json is written beside it.")
@click.option("--force", is_flag=True, help="Replace FILE and FILE.meta.json if they exist.")
@click.option("--no-formula-protection", "no_formula_protection", is_flag=True,
              help="csv: write text cells starting with = + - @ as they are (by default they get a "
                   "leading ' so that a spreadsheet shows them instead of running them).")
@click.pass_context
def export(ctx, release, export_format, output, force, no_formula_protection):
    """Write RELEASE's rows (exactly its columns and rows) to FILE, and FILE.meta.json (method,
    parameters, achieved k, row count, when built and exported). See docs/export.md."""
    output_file(output, force)
    try:
        meta = client(ctx).export(release, output, format=export_format,
                                  formula_protection=not no_formula_protection)
    except OSError as error:        # the directory went away or filled up while writing
        raise OutputFileError(f"cannot write {output}: {error.strerror}") from None
    emit_record(ctx, {"release": meta["release"], "format": export_format, "file": output,
                      "rows": meta["exported_rows"], "metadata": f"{output}.meta.json"})


@main.command("report")
@click.argument("release")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="The HTML file to write.")
@click.option("--population", type=int, default=None,
              help="Size of the population the source is a sample of (journalist and marketer risk).")
@click.option("--force", is_flag=True, help="Replace FILE if it exists.")
@click.option("--threshold", "thresholds", multiple=True, metavar="NAME=VALUE",
              help="Judge a figure against VALUE instead of the release's parameter or the default "
                   "(repeatable): " + "; ".join(f"{k} ({v}, default {DEFAULT_THRESHOLDS[k]})"
                                               for k, v in THRESHOLD_HELP.items()) + ".")
@format_option
@click.pass_context
def report(ctx, release, output, population, force, thresholds):
    """Write a report of RELEASE a privacy officer can read and file: a one-line verdict, what an
    attacker learns (k, l, t, the strongest quasi-identifier -> sensitive value rule, prosecutor,
    journalist and marketer risk, each against a threshold), the classes that give a value away,
    its parameters and guarantees, source and release risk, class sizes, information loss, utility
    and risk against k (anon.sweep) and a glossary. One self-contained HTML file; needs the
    [report] extra (matplotlib). Exit 0 whatever the verdict: read "passed" in the output."""
    if os.path.lexists(output) and not force:
        raise click.UsageError(f"{output} exists: pass --force to replace it")
    output_file(output, True)
    given = {}
    for pair in thresholds:
        key, _, value = pair.partition("=")
        if key not in DEFAULT_THRESHOLDS:
            raise click.BadParameter(f"unknown threshold {key!r}: one of {', '.join(DEFAULT_THRESHOLDS)}",
                                     param_hint="--threshold")
        try:
            given[key] = float(value)
        except ValueError:
            raise click.BadParameter(f"{pair!r} is not NAME=NUMBER", param_hint="--threshold") from None
    try:
        import matplotlib  # noqa: F401 -- the charts' library, an extra: say so before connecting
    except ImportError as error:
        raise ServerError(f"the report needs matplotlib, which is not installed ({error})",
                          hint="pip install './[report]' in a clone of plpy_anon (or pip install matplotlib).",
                          sqlstate="55000") from None
    from plpy_anon.client.report import write_report
    with Progress(not ctx.obj["quiet"]) as progress:
        anon = client(ctx, progress)
        progress(f"gathering the figures of {release}")
        try:
            written = write_report(anon, release, output, population=population, thresholds=given)
        except OSError as error:
            raise OutputFileError(f"cannot write {output}: {error.strerror}") from None
        emit_record(ctx, written)


@main.command("snapshot")
@click.argument("release")
@click.option("--snapshot-name", "snapshot_name", help="Table name (default <relation>_<yyyymmdd>).")
@click.option("--snapshot-schema", "snapshot_schema", help='Schema (default "snapshot"; never a release schema).')
@click.option("--replace", is_flag=True, default=None, help="Replace an existing snapshot of that name.")
@format_option
@click.pass_context
def snapshot(ctx, release, snapshot_name, snapshot_schema, replace):
    """Copy RELEASE into a plain table that pg_dump -t carries to a server without plpy_anon."""
    emit_record(ctx, {"release": release, "snapshot": client(ctx).snapshot(
        release, snapshot_name=snapshot_name, snapshot_schema=snapshot_schema, replace=replace)})


@main.command("drop-release")
@click.argument("release")
@click.option("--if-exists", "if_exists", is_flag=True, help="No error if it does not exist.")
@format_option
@click.pass_context
def drop_release(ctx, release, if_exists):
    """Drop RELEASE (its relations and catalog row)."""
    emit_record(ctx, {"release": release, "dropped": client(ctx).drop_release(release, if_exists=if_exists)})


@main.command("set-column-role")
@click.argument("source")
@click.option("--identifiers", help="Columns to drop from releases (names, ids), comma-separated.")
@click.option("--quasi-identifiers", "quasi_identifiers", help="Quasi-identifiers to generalize, comma-separated.")
@click.option("--sensitive", help="Sensitive columns released as they are, comma-separated.")
@click.option("--ignored", help="Columns left out of releases, comma-separated.")
@format_option
@click.pass_context
def set_column_role(ctx, source, identifiers, quasi_identifiers, sensitive, ignored):
    """Declare the roles of SOURCE's columns (anon.set_column_role); prints every column's role."""
    emit(ctx, client(ctx).declare(source, identifiers=split_list(identifiers) or (),
                                  quasi_identifiers=split_list(quasi_identifiers) or (),
                                  sensitive=split_list(sensitive) or (), ignored=split_list(ignored) or ()))


@main.command("column-roles")
@click.argument("source")
@format_option
@click.pass_context
def column_roles(ctx, source):
    """The role each column of SOURCE takes in a release (declared, or the default) and how a
    quasi-identifier is released (anon.column_roles)."""
    emit_rows(ctx, *client(ctx).rows("column_roles", source))


@main.command("detect-identifiers")
@click.argument("source")
@click.option("--sample-size", "sample_size", type=int, default=None,
              help="Rows sampled to judge the values [default: 1000].")
@format_option
@click.pass_context
def detect_identifiers(ctx, source, sample_size):
    """Columns of SOURCE that look identifying (by name and a sample of values), and whether each
    blocks a release until declared (anon.detect_identifiers)."""
    emit(ctx, client(ctx).detect_identifiers(source, sample_size=sample_size))


@main.command("set-hierarchy-csv")
@click.argument("source")
@click.argument("column_name")
@click.argument("csv", type=click.File("r", encoding="utf-8-sig"))
@click.option("--sep", default=";", show_default=True, help="Field separator of the CSV.")
@format_option
@click.pass_context
def set_hierarchy_csv(ctx, source, column_name, csv, sep):
    """Register an ARX-style hierarchy CSV (leaf;parent;...;*) for SOURCE.COLUMN_NAME ('-': stdin)."""
    leaves = client(ctx).set_hierarchy_csv(source, column_name, csv.read(), sep=sep)
    emit_record(ctx, {"table": source, "column": column_name, "leaves": leaves})


@main.command("drop-hierarchy")
@click.argument("source")
@click.argument("column_name")
@format_option
@click.pass_context
def drop_hierarchy(ctx, source, column_name):
    """Remove the hierarchy of SOURCE.COLUMN_NAME."""
    emit_record(ctx, {"table": source, "column": column_name,
                      "dropped": client(ctx).drop_hierarchy(source, column_name)})


@main.command("load-queries")
@click.argument("log_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--source", help="Also learn this table's attribute priorities from the log (anon.learn_priorities).")
@click.option("--log-format", type=click.Choice(["auto", "csvlog", "stderr"]), default="auto", show_default=True)
@click.option("--projection-share", type=float, default=0.5, show_default=True,
              help="Weight of SELECT-list use against WHERE use in the learned priorities.")
@format_option
@click.pass_context
def load_queries(ctx, log_file, source, log_format, projection_share):
    """Load a PostgreSQL server log (csvlog or stderr) into the workload store (anon.add_queries)."""
    with Progress(not ctx.obj["quiet"]) as progress:
        progress(f"reading {log_file}")
        result = client(ctx).load_queries(log_file, source=source, log_format=log_format,
                                          projection_share=projection_share)
    if result.priorities:
        import pandas as pd
        emit(ctx, pd.DataFrame(result.priorities))
    else:
        emit_record(ctx, {"statements": result.statements, "distinct": result.distinct,
                          "skipped_entries": result.skipped_entries})


@main.command("schedule-refresh")
@click.argument("release")
@click.argument("schedule")
@format_option
@click.pass_context
def schedule_refresh(ctx, release, schedule):
    """Refresh RELEASE on a pg_cron SCHEDULE, e.g. '0 3 * * *'."""
    emit_record(ctx, {"release": release, "schedule": schedule,
                      "jobid": client(ctx).schedule_refresh(release, schedule)})


@main.command("unschedule-refresh")
@click.argument("release")
@format_option
@click.pass_context
def unschedule_refresh(ctx, release):
    """Remove RELEASE's pg_cron job."""
    emit_record(ctx, {"release": release, "unscheduled": client(ctx).unschedule_refresh(release)})


@main.command("grant-analyst")
@click.argument("role")
@format_option
@click.pass_context
def grant_analyst(ctx, role):
    """Let ROLE read every current and future release (and nothing else)."""
    emit_record(ctx, {"role": role, "releases": client(ctx).grant_analyst(role)})


@main.command("revoke-analyst")
@click.argument("role")
@format_option
@click.pass_context
def revoke_analyst(ctx, role):
    """Take back ROLE's access to releases."""
    emit_record(ctx, {"role": role, "releases": client(ctx).revoke_analyst(role)})


if __name__ == "__main__":
    main()
