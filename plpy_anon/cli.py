"""``plpy-anon``: the client library as a command line.

    plpy-anon --dsn postgresql:///db release-status
    plpy-anon --dsn ... mondrian-view patients --k 5 --quasi-identifiers age,sex,zip --sensitive diagnosis
    plpy-anon --dsn ... refresh patients_k5
    plpy-anon --dsn ... release-report patients_k5 --format json

Commands and options are named like the SQL functions and arguments they use (``release_frame``
works as well as ``release-frame``); the older spellings (``create mondrian``, ``show``, ``--qi``,
...) still work, with a warning on stderr.

Results print as tables for people, ``--format json`` or ``csv`` for scripts. Long operations
report their phases on stderr with the elapsed time (``--quiet`` silences them). A failure prints
one line, ``plpy-anon: error: <server message> (hint: ...)``, and exits 1 (2 for usage errors).
The DSN comes from ``--dsn`` or the ``PLPY_ANON_DSN`` environment variable (libpq's PG* variables
apply as usual).
"""
from __future__ import annotations

import copy
import datetime as dt
import decimal
import json
import math
import threading
import time
from typing import Any, Self

import click
import pandas as pd
from psycopg.types.json import Jsonb
from psycopg.types.range import Range

import plpy_anon
from plpy_anon.client import AnonClient
from plpy_anon.client.api import function_parameters
from plpy_anon.client.errors import ServerError
from plpy_anon.core.errors import AnonError
from plpy_anon.parameters import SURFACES

METHODS = {                      # deprecated "create METHOD" name -> SQL function
    "mondrian": "mondrian_view",
    "break-merge": "break_merge",
    "trust": "trust_view",
    "pattern": "pattern_view",
    "fusion": "fusion_resilient_view",
}


# ---------------------------------------------------------------------------- rendering

def plain(value: Any) -> Any:
    """A value as JSON/CSV/table cells show it: PostgreSQL's text forms for ranges and arrays."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, Range):
        if value.isempty:
            return "empty"
        lo = "" if value.lower is None else plain(value.lower)
        hi = "" if value.upper is None else plain(value.upper)
        return f"{value.bounds[0]}{lo},{hi}{value.bounds[1]}"
    if isinstance(value, (dt.date, dt.datetime, dt.time)):
        return value.isoformat(sep=" ") if isinstance(value, dt.datetime) else value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if hasattr(value, "item"):           # numpy scalars
        return value.item()
    return value


def cell(value: Any) -> str:
    value = plain(value)
    if value is None:
        return ""
    if isinstance(value, list):
        return "{" + ",".join("NULL" if v is None else str(plain(v)) for v in value) + "}"
    if isinstance(value, dict):
        return json.dumps(value, default=str)
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def render_table(frame: pd.DataFrame) -> str:
    headers = [str(c) for c in frame.columns]
    rows = [[cell(v) for v in row] for row in frame.itertuples(index=False)]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    line = lambda vals: " " + " | ".join(v.ljust(w) for v, w in zip(vals, widths))
    out = [line(headers), "-" + "-+-".join("-" * w for w in widths) + "-"]
    out += [line(r) for r in rows]
    out.append(f"({len(rows)} row{'' if len(rows) == 1 else 's'})")
    return "\n".join(out)


def render_csv(frame: pd.DataFrame) -> str:
    import csv
    import io
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(frame.columns)
    for row in frame.itertuples(index=False):
        writer.writerow([cell(v) for v in row])
    return buffer.getvalue().rstrip("\n")


def render_json(frame: pd.DataFrame) -> str:
    records = [{str(k): _json_value(v) for k, v in zip(frame.columns, row)}
               for row in frame.itertuples(index=False)]
    return json.dumps(records, indent=2, default=str)


def _json_value(value: Any) -> Any:
    value = plain(value)
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    return value


RENDERERS = {"table": render_table, "json": render_json, "csv": render_csv}


def emit(ctx: click.Context, frame: pd.DataFrame) -> None:
    click.echo(RENDERERS[ctx.obj["format"]](frame))


def emit_record(ctx: click.Context, record: dict) -> None:
    emit(ctx, pd.DataFrame([record]))


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

def client(ctx: click.Context, progress: Progress | None = None) -> AnonClient:
    dsn = ctx.obj["dsn"]
    if not dsn:
        raise click.UsageError("no database given: pass --dsn or set PLPY_ANON_DSN")
    anon = AnonClient(dsn, progress=progress)
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


# Old spellings, still accepted (hidden) with a one-line warning on stderr.
DEPRECATED_COMMANDS = {          # old command -> command named like the SQL function it calls
    "releases": "release-status", "report": "release-report", "show": "release-frame",
    "drop": "drop-release", "declare": "set-column-role", "schedule": "schedule-refresh",
    "unschedule": "unschedule-refresh", "grant": "grant-analyst", "revoke": "revoke-analyst",
}
DEPRECATED_OPTIONS = {           # old option -> option named like the SQL argument
    "--qi": "--quasi-identifiers", "--name": "--release-name", "--schema": "--release-schema",
    "--table": "--source",
}


def deprecated(old: str, new: str) -> None:
    click.echo(f"plpy-anon: warning: '{old}' is deprecated, use '{new}'", err=True)


class Group(click.Group):
    """Turns every error into one line on stderr and exit status 1; resolves ``release_frame`` as
    ``release-frame`` and the deprecated spellings (DEPRECATED_COMMANDS, DEPRECATED_OPTIONS)."""

    def get_command(self, ctx, cmd_name):
        command = super().get_command(ctx, cmd_name) or super().get_command(ctx, cmd_name.replace("_", "-"))
        if command is None and cmd_name in DEPRECATED_COMMANDS:
            deprecated(cmd_name, DEPRECATED_COMMANDS[cmd_name])
            command = super().get_command(ctx, DEPRECATED_COMMANDS[cmd_name])
        return command

    def parse_args(self, ctx, args):
        renamed = []
        for arg in args:
            option, eq, value = arg.partition("=")
            if option in DEPRECATED_OPTIONS:
                deprecated(option, DEPRECATED_OPTIONS[option])
                arg = DEPRECATED_OPTIONS[option] + eq + value
            renamed.append(arg)
        return super().parse_args(ctx, renamed)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (ServerError, AnonError) as error:
            if (ctx.obj or {}).get("format") == "json":      # scripts parse errors too
                click.echo(json.dumps({"sqlstate": getattr(error, "sqlstate", None),
                                       "message": error.message, "detail": error.detail,
                                       "hint": error.hint}), err=True)
                ctx.exit(1)
            message = error.message + (f" (hint: {error.hint})" if error.hint else "")
            click.echo(f"plpy-anon: error: {' '.join(message.split())}", err=True)   # one line
            ctx.exit(1)


# ---------------------------------------------------------------------------- commands

def version_lines(dsn: str | None) -> list[str]:
    """``plpy-anon --version``: the package's version, and the extension's in the database when
    one is given (else why not, in one line)."""
    lines = [f"plpy-anon {plpy_anon.__version__}"]
    if not dsn:
        return lines + ["extension: not connected (no --dsn or PLPY_ANON_DSN)"]
    try:
        with AnonClient(dsn) as anon:
            installed = anon.extension_version()
            database = anon.connection.info.dbname
    except (ServerError, AnonError) as error:
        return lines + [f"extension: not connected: {' '.join(error.message.split())}"]
    if installed is None:
        return lines + [f"extension: not installed in database {database}"]
    return lines + [f"extension: plpy_anon {installed} in database {database}"]


@click.group(cls=Group, invoke_without_command=True, no_args_is_help=True)
@click.option("--dsn", envvar="PLPY_ANON_DSN", help="libpq connection string or URI (or PLPY_ANON_DSN).")
@click.option("--format", "fmt", type=click.Choice(list(RENDERERS)), default="table",
              help="Output: human table (default), json or csv.")
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
@click.option("--version", "show_version", is_flag=True,
              help="Print the package's version, and the extension's in the database (with --dsn).")
@click.pass_context
def main(ctx, dsn, fmt, quiet, show_version):
    """Anonymized releases of PostgreSQL tables (the plpy_anon extension)."""
    ctx.ensure_object(dict)
    ctx.obj.update(dsn=dsn, format=fmt, quiet=quiet)
    if show_version:
        click.echo("\n".join(version_lines(dsn)))
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
    """CREATE EXTENSION plpy_anon CASCADE (or ALTER EXTENSION ... UPDATE with --upgrade)."""
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
        progress("done")
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


@main.command(hidden=True)
@click.argument("method", type=click.Choice(list(METHODS)))
@click.argument("source")
@click.option("--k", type=int)
@click.option("--l", type=int)
@click.option("--quasi-identifiers", "quasi_identifiers")
@click.option("--sensitive")
@click.option("--identifiers")
@click.option("--release-name", "release_name")
@click.option("--release-schema", "release_schema")
@click.option("--replace", is_flag=True)
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE")
@format_option
@click.pass_context
def create(ctx, method, source, params, **kwargs):
    """Deprecated: create METHOD SOURCE is now the command named like the SQL function."""
    function = METHODS[method]
    deprecated(f"create {method}", function.replace("_", "-"))
    create_release(ctx, function, source, {k: v for k, v in kwargs.items() if v is not None}, params)


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
    frame = client(ctx).releases()
    if ctx.obj["format"] == "table":
        frame = frame[["release", "method", "source", "row_count", "achieved_k", "refreshed_at",
                       "refresh_seconds", "verified", "last_error", "schedule", "last_run_status"]]
    emit(ctx, frame)


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


risk_alias = copy.copy(risk_report)       # plpy-anon risk RELATION: the same, not listed
risk_alias.hidden = True
main.add_command(risk_alias, "risk")


@main.command("release-frame")
@click.argument("release")
@click.option("--limit", type=int, default=20, show_default=True, help="Rows to show (0: all).")
@format_option
@click.pass_context
def release_frame(ctx, release, limit):
    """The rows of RELEASE, as analysts see them."""
    emit(ctx, client(ctx).release_frame(release, limit=limit or None))


@main.command("export")
@click.argument("release")
@click.option("--format", "export_format", type=click.Choice(["csv", "parquet", "sql"]), default="csv",
              show_default=True, help="csv (header), parquet (needs pyarrow) or sql (CREATE TABLE + COPY for psql).")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="File to write; FILE.meta.json is written beside it.")
@click.pass_context
def export(ctx, release, export_format, output):
    """Write RELEASE's rows (exactly its columns and rows) to FILE, and FILE.meta.json (method,
    parameters, achieved k, row count, when built and exported). See docs/export.md."""
    meta = client(ctx).export(release, output, format=export_format)
    emit_record(ctx, {"release": meta["release"], "format": export_format, "file": output,
                      "rows": meta["exported_rows"], "metadata": f"{output}.meta.json"})


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


@main.group(hidden=True)
def hierarchy():
    """Deprecated: set-hierarchy-csv and drop-hierarchy."""


@hierarchy.command("load", context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def hierarchy_load(ctx, args):
    deprecated("hierarchy load", "set-hierarchy-csv")
    set_hierarchy_csv.main(list(args), prog_name="plpy-anon set-hierarchy-csv", obj=ctx.obj,
                           standalone_mode=False)


@hierarchy.command("drop", context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def hierarchy_drop(ctx, args):
    deprecated("hierarchy drop", "drop-hierarchy")
    drop_hierarchy.main(list(args), prog_name="plpy-anon drop-hierarchy", obj=ctx.obj,
                        standalone_mode=False)


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
