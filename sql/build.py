#!/usr/bin/env python3
"""Builds the extension's install scripts from ``sql/`` (stdlib only; runs before any venv exists).

The layout follows timescale/pgai:

* ``head.sql``            -- guard against running the script through psql;
* ``incremental/NNN-*.sql`` -- objects holding data (tables, types), created exactly once; a new
  version adds files, never edits shipped ones (``frozen.txt`` keeps the hashes of their statements:
  everything after the header comment, which stays editable documentation);
* ``idempotent/NNN-*.sql``  -- ``CREATE OR REPLACE`` code, re-run by every install and upgrade.

Everything written here is built by ``make`` and ignored by git (never committed).

``extension/plpy_anon--<version>.sql`` = head + every incremental file + every idempotent file.
``extension/plpy_anon--<prior>--<version>.sql`` (for each prior version listed in
``versions.txt``) = head + the incremental files that prior version did not have + every
idempotent file, so all upgrade paths converge on the same objects. An upgrade script ends with
``CLEANUP``: functions of the extension the script did not (re)create -- removed, or with a
changed signature -- are dropped, so an old overload can never make a call ambiguous.

Releasing version X: ``python3 sql/build.py --freeze`` records X's incremental files in
``versions.txt`` and their hashes in ``frozen.txt`` (commit both), then ``__version__`` is bumped.
Every later build writes ``plpy_anon--X--<new>.sql`` and refuses edits of X's incremental files.

``functions/NNN-*.toml`` -- one ``[[function]]`` table per user-facing PL/Python function (data,
  never run: name, ``args`` with SQL types and defaults or ``method_args`` taking them from a
  release method's declaration, which NULLs mean something (``nullable``), result, volatility,
  comment, the Python entry point below ``plpy_anon.db``); a table with ``release = "<method>"``
  declares a release method: the function creating its releases (``function``; arguments from
  ``parameters``, shared ones by name from ``plpy_anon/parameters.py``; entry point
  ``creation.create``) and the run its release query calls (``run``: ``RUNS``). From them the
  build writes, just before ``idempotent/NNN-*.sql`` of the same number:

  - ``anon_py.f``: the PL/Python implementation, in the extension's internal schema. Its first
    lines refuse (42501) a caller without EXECUTE on ``anon.f``, so that GRANT EXECUTE ON
    FUNCTION anon.f is all a role needs, and no grant on anon.f can be bypassed;
  - ``anon.f``: the public PL/pgSQL function (defaults, comment), which refuses NULL for an
    argument without a default (22023, naming it) unless the declaration says what NULL means,
    passes NULL for an argument with a default as that default, calls ``anon_py.f`` and re-raises
    its errors with the message alone (PL/Python writes "plpy.Error: " before every message
    raised from Python), same SQLSTATE, DETAIL and HINT; CONTEXT names anon.f;
  - for a method, its run ``anon._<method>_<run>`` (internal), and its declaration in
    ``plpy_anon/declared_methods.json``, from which the installed package knows it;
  - the SQL reference, ``docs/sql-reference.md``.

  An argument type ``"text | jsonb"`` declares one overload per type, with one body.

Every PL/Python body starts with the line ``#BOOTSTRAP``; it is replaced by a snippet that, once
per backend, puts the package's virtual environment at the front of ``sys.path`` (before any
third-party import, so Debian's numpy can never shadow the venv's) and checks that the installed
package version matches the extension version.
"""
from __future__ import annotations

import argparse
import hashlib
import re
import sys
import tomllib
from pathlib import Path

SQL = Path(__file__).resolve().parent
ROOT = SQL.parent
DEFAULT_VENV = "/opt/plpy_anon/venv"

BOOTSTRAP = '''\
if "plpy_anon" not in GD:
    import sys as _sys
    _venv = {venv_literal}
    _site = "%s/lib/python%d.%d/site-packages" % (_venv, _sys.version_info[0], _sys.version_info[1])
    import os as _os, site as _site_mod
    if not _os.path.isdir(_site):
        plpy.error("plpy_anon: no Python environment at %s" % _venv, sqlstate="58P01",
                   hint="The environment's path is fixed when the extension is installed: as root, "
                        "re-run 'make install VENV=/path/to/venv', then start a new session.")
    for _m in ("numpy", "pandas", "sklearn", "scipy"):
        _f = getattr(_sys.modules.get(_m), "__file__", None) or ""
        if _f and not _f.startswith(_venv):
            plpy.error("plpy_anon: %s was already imported from %s in this session" % (_m, _f),
                       sqlstate="55000", hint="Another PL/Python function imported it first; "
                       "start a new session and call a plpy_anon function before it.")
    _before = list(_sys.path)
    _site_mod.addsitedir(_site)
    _sys.path[:] = [p for p in _sys.path if p not in _before] + _before
    import plpy_anon as _pkg
    if _pkg.__version__ != "{version}":
        plpy.error("plpy_anon: the extension is version {version} but %s holds package version %s"
                   % (_venv, _pkg.__version__), sqlstate="55000",
                   hint="Install matching versions: 'make install VENV=/path/to/venv', then "
                        "ALTER EXTENSION plpy_anon UPDATE.")
    GD["plpy_anon"] = _venv
# the extension's schema, written here at install time; plpy names it in the SQL it runs
from plpy_anon.db import extschema as _extschema
globals()["plpy"] = _extschema.use('anon', plpy)'''


# first lines of a generated body: when the call started (timing.entering, in Function.call)
ENTERED = "import time as _time\n_entered = _time.monotonic()\n"


def package_version() -> str:
    text = (ROOT / "plpy_anon" / "__init__.py").read_text()
    return re.search(r'^__version__ = "([^"]+)"', text, re.MULTILINE).group(1)


def prior_versions() -> list[str]:
    return list(frozen_by_version())


def incremental_files() -> list[Path]:
    return sorted((SQL / "incremental").glob("[0-9][0-9][0-9]-*.sql"))


def idempotent_files() -> list[Path]:
    return sorted((SQL / "idempotent").glob("[0-9][0-9][0-9]-*.sql"))


def check_names(files: list[Path]) -> None:
    numbers = [f.name[:3] for f in files]
    dupes = {n for n in numbers if numbers.count(n) > 1}
    if dupes:
        sys.exit(f"build: duplicate file numbers in sql/: {sorted(dupes)}")


ROUTINE = re.compile(r"^\s*CREATE\s+(?:OR\s+REPLACE\s+)?(?:FUNCTION|PROCEDURE|AGGREGATE)\b", re.IGNORECASE | re.MULTILINE)


def check_routines(inc: list[Path], idem: list[Path]) -> None:
    """Functions live in idempotent files below FINAL: the upgrade cleanup drops every function of
    the extension that an upgrade script did not (re)create."""
    misplaced = inc + [f for f in idem if f.name >= FINAL]
    bad = [f.relative_to(SQL) for f in misplaced if ROUTINE.search(f.read_text())]
    if bad:
        sys.exit(f"build: {', '.join(map(str, bad))} define functions; put them in an idempotent file "
                 f"numbered below {FINAL} (upgrades re-create functions only from those)")


INTERNAL = "anon_py"

# The note every public function's comment ends with (the NULL rule).
NULL_NOTE = (" NULL for an argument with a default means the default; other arguments must not be"
             " NULL unless said above.")

RERAISE = """\
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        GET STACKED DIAGNOSTICS _message = MESSAGE_TEXT, _detail = PG_EXCEPTION_DETAIL,
                                _hint = PG_EXCEPTION_HINT, _state = RETURNED_SQLSTATE,
                                _context = PG_EXCEPTION_CONTEXT;
        _message := pg_catalog.regexp_replace(_message, '^((plpy|spiexceptions)\\.[A-Za-z]+: )+', '');
        IF _state = '38000' AND _detail = '' THEN   -- an unexpected Python exception: keep where
            _detail := _context;                    -- it happened
        END IF;
        IF _detail <> '' AND _hint <> '' THEN
            RAISE EXCEPTION USING MESSAGE = _message, ERRCODE = _state, DETAIL = _detail, HINT = _hint;
        ELSIF _detail <> '' THEN
            RAISE EXCEPTION USING MESSAGE = _message, ERRCODE = _state, DETAIL = _detail;
        ELSIF _hint <> '' THEN
            RAISE EXCEPTION USING MESSAGE = _message, ERRCODE = _state, HINT = _hint;
        ELSE
            RAISE EXCEPTION USING MESSAGE = _message, ERRCODE = _state;
        END IF;
    END;"""


class Arg:
    def __init__(self, text: str, nullable: bool):
        head, _, default = text.partition(" DEFAULT ")
        self.name, _, types = head.partition(" ")
        self.types = [t.strip() for t in types.split("|")]
        self.default = default.strip() or None
        self.nullable = nullable


class Function:
    """One declaration of ``sql/functions/*.toml`` (see the module docstring)."""

    def __init__(self, name: str, *, args: list[str], returns: str, python: str, comment: str,
                 volatility: str = "VOLATILE", positional: int = 0, gd: bool = False,
                 rename: dict[str, str] | None = None, plpy: bool = True,
                 nullable: list[str] = (), constants: dict | None = None):
        self.name, self.returns, self.python, self.comment = name, returns, python, comment
        self.constants = constants or {}
        self.volatility, self.positional, self.gd, self.plpy = volatility, positional, gd, plpy
        self.rename = rename or {}
        self.args = [Arg(a, a.split()[0] in nullable) for a in args]
        unknown = set(nullable) - {a.name for a in self.args}
        unknown |= set(self.rename) - {a.name for a in self.args}
        if unknown or volatility not in ("VOLATILE", "STABLE", "IMMUTABLE") or "." not in python:
            sys.exit(f"build: bad declaration of {name}: {sorted(unknown) or volatility or python}")
        if sum(len(a.types) > 1 for a in self.args) > 1:
            sys.exit(f"build: {name}: at most one argument may have alternative types")

    def overloads(self) -> list[list[tuple[Arg, str]]]:
        alternatives = max(len(a.types) for a in self.args) if self.args else 1
        return [[(a, a.types[i] if len(a.types) > 1 else a.types[0]) for a in self.args]
                for i in range(alternatives)]

    def call(self) -> str:
        package, _, module = f"plpy_anon.db.{self.python}".rsplit(".", 1)[0].rpartition(".")
        function = self.python.rsplit(".", 1)[1]
        parts = ["plpy"] if self.plpy else []
        for i, a in enumerate(self.args):
            parts.append(a.name if i < self.positional else f"{self.rename.get(a.name, a.name)}={a.name}")
        parts += [f"{name}={value!r}" for name, value in self.constants.items()]
        if self.gd:
            parts.append("GD=GD")
        returns = self.returns != "void"    # without the marks of user text (db/extschema.py)
        # the call's clock starts at the top of the body (ENTERED): the durations a call records
        # include the checks, the environment's activation and the imports before its function
        return (f"from plpy_anon.db.timing import entering as _entering\n"
                f"_entering(_entered)\n"
                f"from {package} import {module} as _module\n"
                + (f"return _extschema.unmarked(_module.{function}({', '.join(parts)}))"
                   if returns else f"_module.{function}({', '.join(parts)})"))

    def sql(self, venv: str, version: str) -> str:
        return "".join(self.overload_sql(sig, venv, version) for sig in self.overloads())

    def overload_sql(self, sig: list[tuple[Arg, str]], venv: str, version: str) -> str:
        types = ", ".join(t for _, t in sig)
        public = f"anon.{self.name}({types})"
        inner_args = ", ".join(f"{a.name} {t}" for a, t in sig)
        outer_args = ",\n    ".join(f"{a.name} {t}" + (f" DEFAULT {a.default}" if a.default else "")
                                    for a, t in sig)
        outer_args = f"\n    {outer_args}\n" if sig else ""
        # a caller without USAGE on schema anon cannot even name anon.f: refused the same way
        guard = (f'try:\n'
                 f'    _allowed = plpy.execute("SELECT pg_catalog.has_function_privilege('
                 f"{sql_literal(public)}, 'EXECUTE') AS ok\")[0][\"ok\"]\n"
                 f'except plpy.SPIError:\n'
                 f'    _allowed = False\n'
                 f'if not _allowed:\n'
                 f'    plpy.error("permission denied for function {public}", sqlstate="42501",\n'
                 f'               hint="{INTERNAL}.{self.name} implements {public}: call that, after'
                 f' GRANT EXECUTE ON FUNCTION {public}.")\n')
        checks, call = [], []
        for n, (a, t) in enumerate(sig, 1):
            if a.default is None and not a.nullable:
                checks.append(
                    f"    IF ${n} IS NULL THEN\n"
                    f"        RAISE EXCEPTION USING ERRCODE = '22023',\n"
                    f"            MESSAGE = {sql_literal(f'anon.{self.name}: argument {a.name} must not be NULL')},\n"
                    f"            HINT = {sql_literal(f'Pass a value for {a.name} (only arguments with a default may be NULL, meaning the default).')};\n"
                    f"    END IF;\n")
            if a.default is None or re.fullmatch(r"NULL(::.*)?", a.default, re.IGNORECASE):
                call.append(f"${n}")
            else:
                call.append(f"coalesce(${n}, ({a.default})::{t})")
        invoke = f"{INTERNAL}.{self.name}({', '.join(call)})"
        statement = ("RETURN QUERY SELECT * FROM " if self.returns.startswith("TABLE") else
                     "PERFORM " if self.returns == "void" else "RETURN ") + invoke + ";"
        comment = self.comment + (NULL_NOTE if sig else "")
        return f"""
-- {public}: generated from sql/functions/ (implementation: {INTERNAL}.{self.name})
CREATE OR REPLACE FUNCTION {INTERNAL}.{self.name}({inner_args})
RETURNS {self.returns}
LANGUAGE plpython3u {self.volatility}
SET search_path = pg_catalog, pg_temp
AS $$
{ENTERED}{guard}{bootstrap(venv, version)}
{self.call()}
$$;
COMMENT ON FUNCTION {INTERNAL}.{self.name}({types}) IS {sql_literal(f"Implementation of {public}; executable only by a role that may execute that.")};

CREATE OR REPLACE FUNCTION {public[:-len(types) - 2]}({outer_args})
RETURNS {self.returns}
LANGUAGE plpgsql {self.volatility}
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    _message text; _detail text; _hint text; _state text; _context text;
BEGIN
{"".join(checks)}    BEGIN
        {statement}
{RERAISE}
END
$$;
COMMENT ON FUNCTION {public} IS
    {sql_literal(comment)};
"""

    def reference(self) -> str:
        out = []
        for sig in self.overloads():
            args = ",\n    ".join(f"{a.name} {t}" + (f" DEFAULT {a.default}" if a.default else "")
                                  for a, t in sig)
            out.append(f"anon.{self.name}(" + (f"\n    {args}\n" if sig else "") + f") RETURNS {self.returns}")
        required = [a.name for a in self.args if a.default is None and not a.nullable]
        nullable = [a.name for a in self.args if a.nullable]
        lines = [f"### anon.{self.name}", "", "```", "\n".join(out), "```", "", self.comment, "",
                 f"{self.volatility.lower()}; Python: `plpy_anon.db.{self.python}`."]
        if required:
            lines.append(f"Must not be NULL (22023): {', '.join(required)}.")
        if nullable:
            lines.append(f"NULL has the meaning given above: {', '.join(nullable)}.")
        return "\n".join(lines) + "\n"


def sql_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def declaration_files() -> list[Path]:
    return sorted((SQL / "functions").glob("[0-9][0-9][0-9]-*.toml"))


def method_parameters():
    """plpy_anon/parameters.py, where each release method's parameters are declared (standard
    library only, like this script): the package is imported from this checkout."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from plpy_anon import parameters
    if Path(parameters.__file__).resolve().parent.parent != ROOT:
        sys.exit(f"build: plpy_anon.parameters was imported from {parameters.__file__}, not {ROOT}")
    return parameters


def declared_surfaces():
    """Every release method's parameters, from its declaration (``release`` with ``parameters``)."""
    return method_parameters().declared_surfaces(declared_methods())


def method_args(method: str, names: list[str]) -> list[str]:
    """The SQL arguments ``names`` of release method ``method``, in that order, from its
    declaration: another function taking the same ones (anon.fusion_scan, anon.trust)."""
    surface = declared_surfaces()[method]
    unknown = [n for n in names if n not in surface.by_name]
    if unknown:
        sys.exit(f"build: method {method} declares no parameter {', '.join(unknown)}")
    return [surface.by_name[n].sql() for n in names]


def release_function(method: str, comment: str, function: str, parameters: list) -> Function:
    """The SQL function creating a release by ``method``: its name and arguments are the method's
    declaration (``function`` and ``parameters``); every one calls plpy_anon.db.creation.create."""
    surface = method_parameters().declared_surface(method, function, parameters)
    return Function(surface.function, args=surface.sql_args(), returns="text",
                    python="creation.create", positional=1, gd=True,
                    constants={"method": method}, comment=comment)


# The runs a declaration's ``run`` names, which a release query of the shared kinds calls (in the
# snapshot of the query that joins its result back to the source): the result type, the entry point
# of plpy_anon/db/methods/<method>.py it calls, its ROWS estimate (1: the planner costs the join
# back as for one result, not a thousand), and whether it prints in fixed output styles (the texts
# a compact release stores are read back by the release query in the caller's session: ISO dates,
# numeric UTC offsets, ISO 8601 intervals, which every DateStyle, IntervalStyle and TimeZone reads
# the same). A method whose release query is its own declares ``run = {returns = "<type>",
# comment = "..."}``: anon._<method>_run, calling its run_release.
RUNS = {"partition_slices": ("SETOF anon.partition_slice", "partition", " ROWS 1", True),
        "partition": ("anon.partition", "partition", "", False)}
OUTPUT_STYLES = """SET DateStyle = 'ISO, YMD'
SET IntervalStyle = 'iso_8601'
SET TimeZone = 'UTC'
SET bytea_output = 'hex'
"""
PLUG_IN_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class RunFunction:
    """``anon._<method>_<run>(release_id)``, the STABLE run a release query calls (in the snapshot
    of the query that joins its result back to the source), through the wrapper that re-raises its
    errors with the message alone (``#WRAP``). Internal: not in the reference."""

    def __init__(self, method: str, run):
        own = isinstance(run, dict) and set(run) <= {"returns", "comment"} and "returns" in run
        if not PLUG_IN_NAME.match(method) or not (own or (isinstance(run, str) and run in RUNS)):
            sys.exit(f"build: bad method declaration: method {method!r}, run {run!r} "
                     f"(runs: {', '.join(RUNS)}, or a table with returns and comment)")
        self.method = method
        if own:
            self.run, self.comment = "run", run.get("comment")
            self.returns, self.entry, self.rows, self.styles = run["returns"], "run_release", "", False
        else:
            self.run, self.comment = run, None
            self.returns, self.entry, self.rows, self.styles = RUNS[run]

    def sql(self, venv: str, version: str) -> str:
        name = f"_{self.method}_{self.run}"
        comment = (f"COMMENT ON FUNCTION anon.{name}_py(integer) IS\n    {sql_literal(self.comment)};\n"
                   if self.comment else "")
        text = f"""
#WRAP anon.{name}(release_id integer) RETURNS {self.returns} STABLE{self.rows}
CREATE OR REPLACE FUNCTION anon.{name}_py(release_id integer)
RETURNS {self.returns}
LANGUAGE plpython3u STABLE{self.rows}
SET search_path = pg_catalog, pg_temp
{OUTPUT_STYLES if self.styles else ""}AS $$
#BOOTSTRAP
from plpy_anon.db.methods import {self.method}
return {self.method}.{self.entry}(plpy, GD, release_id)
$$;
{comment}"""
        return WRAP.sub(clean_errors_wrapper, text).replace("#BOOTSTRAP", bootstrap(venv, version))


def declarations(path: Path) -> list:
    functions = []
    for table in tomllib.loads(path.read_text())["function"]:
        if "release" in table:
            method, run = table.pop("release"), table.pop("run", None)
            functions.append(release_function(method, **table))
            if run is not None:
                functions.append(RunFunction(method, run))
            continue
        if "method_args" in table:
            table["args"] = method_args(**table.pop("method_args"))
        functions.append(Function(table.pop("name"), **table))
    return functions


def all_declarations() -> list[Function]:
    """Every public function declared in sql/functions (the methods' runs are internal)."""
    return [f for path in declaration_files() for f in declarations(path)
            if isinstance(f, Function)]


def declared_methods() -> dict[str, dict]:
    """The release methods, each declared in sql/functions (``release`` with ``function``,
    ``parameters`` and ``run``): ``{method: {"function", "parameters", "run"}}``, what the
    package reads at run time (plpy_anon/declared_methods.json) to know them."""
    found = {}
    for path in declaration_files():
        for table in tomllib.loads(path.read_text())["function"]:
            if "release" in table:
                if not {"function", "parameters"} <= set(table):
                    sys.exit(f"build: method {table['release']!r} in {path.name} declares no "
                             f"function or parameters")
                if not PLUG_IN_NAME.match(table["release"]):
                    sys.exit(f"build: bad method name {table['release']!r} in {path.name}")
                found[table["release"]] = {key: table.get(key)
                                           for key in ("function", "parameters", "run")}
    return found


def write_declared_methods() -> Path:
    """plpy_anon/declared_methods.json: the methods' declarations, for the installed package."""
    import json
    path = ROOT / "plpy_anon" / "declared_methods.json"
    path.write_text(json.dumps(declared_methods(), indent=1, sort_keys=True) + "\n")
    return path


HANDWRITTEN = re.compile(r"^CREATE OR REPLACE FUNCTION anon\.([a-z][a-z0-9_]*)\((.*?)\)\s*RETURNS\s+(.*?)\s*"
                         r"LANGUAGE\s+(\w+)\s+(VOLATILE|STABLE|IMMUTABLE)\b", re.DOTALL | re.MULTILINE)


class Handwritten:
    """A user-facing function written in SQL or PL/pgSQL in ``idempotent/*.sql`` (names not
    starting with ``_``): documented in the reference from its definition and its COMMENT."""

    def __init__(self, path: Path, match: re.Match):
        self.path, self.name, self.returns = path, match.group(1), " ".join(match.group(3).split())
        self.language, self.volatility = match.group(4), match.group(5)
        self.args = [" ".join(a.split()) for a in split_args(match.group(2))]
        comment = re.search(rf"^COMMENT ON FUNCTION anon\.{self.name}\(.*?\) IS\s*'((?:[^']|'')*)';",
                            path.read_text(), re.DOTALL | re.MULTILINE)
        if comment is None:
            sys.exit(f"build: anon.{self.name} in {path.relative_to(SQL)} has no COMMENT ON FUNCTION "
                     f"(user-facing functions are documented from it)")
        self.comment = " ".join(comment.group(1).replace("''", "'").split())

    def reference(self) -> str:
        args = ",\n    ".join(self.args)
        signature = f"anon.{self.name}(" + (f"\n    {args}\n" if self.args else "") + f") RETURNS {self.returns}"
        return "\n".join([f"### anon.{self.name}", "", "```", signature, "```", "", self.comment, "",
                          (f"{self.volatility.lower()}; {self.language}, written by hand in "
                           f"`sql/{self.path.relative_to(SQL)}`.")]) + "\n"


def split_args(text: str) -> list[str]:
    """Top-level commas only (a type or default may hold parentheses)."""
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    return [p.strip() for p in parts + [current] if p.strip()]


def handwritten() -> list[Handwritten]:
    return [Handwritten(path, m) for path in idempotent_files()
            for m in HANDWRITTEN.finditer(path.read_text())]


def reference() -> str:
    head = ("# SQL reference\n\n"
            "Generated by `sql/build.py` from `sql/functions/*.toml` -- edit the declarations there --\n"
            "and from the few functions written by hand in SQL (`sql/idempotent/*.sql`, their COMMENTs).\n"
            "Every function is `anon.<name>` (`pa.<name>` when installed with `CREATE EXTENSION plpy_anon\n"
            "SCHEMA pa`: [beside PostgreSQL Anonymizer](installation.md#beside-postgresql-anonymizer));\n"
            "to call one, a role needs `USAGE` on schema `anon` and\n"
            "`EXECUTE` on the function. Every function runs with its caller's rights (none is\n"
            "`SECURITY DEFINER`), so one that reads or writes tables also needs the caller's\n"
            "privileges on them: `SELECT` on the source, and on the extension's catalog tables it\n"
            "uses (`anon.column_roles`, `anon.releases`, ...). Releases are built by a superuser or\n"
            "a member of the role `plpy_anon_custodian`, which holds all of that\n"
            "([operations](operations.md#custodians-who-are-not-superusers)); analysts call no\n"
            "function (`anon.grant_analyst`).\n"
            "Errors carry the message alone with SQLSTATE, DETAIL and\n"
            "HINT. NULL for an argument with a default means the default; an argument without a\n"
            "default must not be NULL (SQLSTATE 22023) unless its NULL is given a meaning below.\n")
    functions = [*all_declarations(), *handwritten()]
    body = "\n".join(f.reference() for f in sorted(functions, key=lambda f: f.name))
    return head + "\n" + body


def statements_digest(path: Path) -> str:
    """Hash of an incremental file without its header comment: the statements a released version ran
    must never change, while the comment above them is documentation that may be corrected."""
    lines = path.read_bytes().splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if not line.lstrip().startswith(b"--")), len(lines))
    return hashlib.sha256(b"".join(lines[start:])).hexdigest()


def frozen() -> dict[str, str]:
    """Hashes of incremental files shipped in released versions: they must never change."""
    path = SQL / "frozen.txt"
    if not path.exists():
        return {}
    pairs = (line.split() for line in path.read_text().splitlines() if line.strip())
    return {name: digest for digest, name in pairs}


def check_frozen() -> None:
    for name, digest in frozen().items():
        f = SQL / "incremental" / name
        if not f.exists() or statements_digest(f) != digest:
            sys.exit(f"build: sql/incremental/{name} was shipped in a released version and must "
                     f"not change; add a new incremental file instead")


def bootstrap(venv: str, version: str) -> str:
    """The venv path is a constant of the generated script: it is never read from a setting, since
    any role may SET a custom setting (or have one set by ALTER ROLE/DATABASE ... SET), and the
    environment decides which Python code the backend -- the postgres OS user -- runs."""
    if not venv.startswith("/") or any(ch in venv for ch in "\n\r\0"):
        sys.exit(f"build: --venv must be an absolute path, not {venv!r}")
    return BOOTSTRAP.format(venv_literal=repr(venv.rstrip("/") or "/"), version=version)


# "#WRAP anon._f(args) RETURNS [SETOF] type VOLATILITY [ROWS n]" in an idempotent file: a PL/pgSQL
# function anon._f calling the PL/Python anon._f_py that follows it, re-raising its errors with the
# message alone. For the runs that release queries call: a plain REFRESH MATERIALIZED VIEW shows
# their errors as they are, with no "plpy.Error: " prefix or Python traceback in the message.
WRAP = re.compile(r"^#WRAP anon\.(_[a-z0-9_]+)\((\w+) (\w+)\) RETURNS (SETOF )?(\S+) "
                  r"(STABLE|VOLATILE|IMMUTABLE)( ROWS \d+)?$", re.MULTILINE)


# a run that returns a set: PL/Python reports an error raised after its first row as "error
# fetching next item from iterator", the error's own message moved to DETAIL
RERAISE_SET = RERAISE.replace("""        _message := pg_catalog.regexp_replace(""", """\
        IF _message = 'error fetching next item from iterator' AND _detail <> '' THEN
            _message := _detail;
            _detail := '';
        END IF;
        _message := pg_catalog.regexp_replace(""", 1)


def clean_errors_wrapper(match: re.Match) -> str:
    name, arg, argtype, setof, returns, volatility, rows = match.groups()
    if setof:   # value per call from the run (a target-list SRF), into the wrapper's one tuplestore
        statement = f"RETURN QUERY SELECT (q.r).* FROM (SELECT anon.{name}_py($1) AS r OFFSET 0) AS q;"
    else:
        statement = f"RETURN anon.{name}_py($1);"
    return f"""CREATE OR REPLACE FUNCTION anon.{name}({arg} {argtype})
RETURNS {setof or ""}{returns}
LANGUAGE plpgsql {volatility}{rows or ""}
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    _message text; _detail text; _hint text; _state text; _context text;
BEGIN
    BEGIN
        {statement}
{RERAISE_SET if setof else RERAISE}
END
$$;
COMMENT ON FUNCTION anon.{name}({argtype}) IS
    {sql_literal(f"Internal: runs anon.{name}_py, re-raising its errors with the message alone.")};"""


def section(path: Path, venv: str, version: str) -> str:
    body = WRAP.sub(clean_errors_wrapper, path.read_text()).replace("#BOOTSTRAP", bootstrap(venv, version))
    return f"\n-------------------------------------------------------------------------------\n" \
           f"-- {path.relative_to(SQL)}\n{body.rstrip()}\n"


def generated(path: Path, venv: str, version: str) -> str:
    body = "".join(f.sql(venv, version) for f in declarations(path))
    return f"\n-------------------------------------------------------------------------------\n" \
           f"-- {path.relative_to(SQL)} (generated)\n{body.lstrip()}"


def code_sections(files: list[Path], venv: str, version: str) -> str:
    """Idempotent files and declaration files, by number; a declaration file first."""
    items = [(f.name[:3], 1, f) for f in files] + [(f.name[:3], 0, f) for f in declaration_files()]
    return "".join(generated(f, venv, version) if kind == 0 else section(f, venv, version)
                   for _, kind, f in sorted(items))


def script(files: list[Path], venv: str, version: str) -> str:
    head = (SQL / "head.sql").read_text()
    inc = [f for f in files if f.parent.name == "incremental"]
    idem = [f for f in files if f.parent.name == "idempotent"]
    return head + "".join(section(f, venv, version) for f in inc) + code_sections(idem, venv, version)


# Runs in upgrade scripts after the code files and before the final ones (FINAL: 900-privileges,
# whose REVOKE ... ON ALL FUNCTIONS rewrites every pg_proc row). The whole script is one
# transaction, and CREATE OR REPLACE writes a new pg_proc row version even for an unchanged
# function, so every function this version defines has the current transaction as xmin; the
# extension's other functions are leftovers of the old version. (A leftover a release's view still
# uses makes the DROP, and the upgrade, fail loudly instead of leaving two overloads behind.)
FINAL = "900"      # idempotent files numbered from here on define no functions
CLEANUP = """
-------------------------------------------------------------------------------
-- cleanup: drop the functions of the previous version that this version does not define
DO $cleanup$
DECLARE
    leftover regprocedure;
BEGIN
    FOR leftover IN
        SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
        JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_proc'::regclass
             AND d.objid = p.oid AND d.deptype = 'e'
        JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid AND e.extname = 'plpy_anon'
        WHERE p.xmin::text <> (pg_catalog.pg_current_xact_id()::text::bigint % 4294967296)::text
    LOOP
        RAISE NOTICE 'plpy_anon upgrade: dropping %, which this version no longer defines', leftover;
        EXECUTE pg_catalog.format('DROP ROUTINE %s', leftover);
    END LOOP;
END
$cleanup$;
"""


def freeze() -> list[str]:
    """Record the current version as released: its incremental files (versions.txt) and their
    hashes (frozen.txt). Idempotent for the same version."""
    version = package_version()
    files = [f.name for f in incremental_files()]
    versions = frozen_by_version()
    versions[version] = set(files)
    header = [line for line in (SQL / "versions.txt").read_text().splitlines() if line.startswith("#")] \
        if (SQL / "versions.txt").exists() else []
    lines = header + [f"{v} {' '.join(sorted(names))}" for v, names in versions.items()]
    (SQL / "versions.txt").write_text("\n".join(lines) + "\n")
    hashes = frozen()
    for name in files:
        hashes[name] = statements_digest(SQL / "incremental" / name)
    (SQL / "frozen.txt").write_text("".join(f"{d} {n}\n" for n, d in sorted(hashes.items())))
    return files


# The extension's schema. The sources name it "anon" (readable, and what the upgrade from 0.1.0
# keeps); the fresh install script names it by PLACEHOLDER, which the script replaces by the schema
# it installs into: "anon" (created by the script, as before) when CREATE EXTENSION was given no
# schema of its own (public, the usual first schema of search_path, or pg_catalog), else the
# schema given (CREATE EXTENSION plpy_anon SCHEMA pa). A control file's "schema" cannot be both a
# default and overridable, hence the choice at install time. The internal schema anon_py and the
# release schemas keep their names.
PLACEHOLDER = "@plpy_anon_schema@"
SCHEMA_REF = re.compile(r"\banon(?=\.[A-Za-z_\"(%]|\\\.)|(?<=SCHEMA )anon\b|(?<=')anon(?=')")
GUARD_FILE = "000-schema-guard.sql"   # creates schema "anon", refusing an existing one
CHOOSE_SCHEMA = """
-------------------------------------------------------------------------------
-- the extension's schema: "anon" unless CREATE EXTENSION ... SCHEMA named another; the rest of
-- the script (below, with every reference to the schema written {placeholder}) runs in it
DO $plpy_anon_install$
DECLARE
    nsp record;
    target name;
    contents text;
BEGIN
    SELECT n.oid, n.nspname, pg_catalog.pg_get_userbyid(n.nspowner) AS owner, r.rolsuper
    INTO nsp
    FROM pg_catalog.pg_extension e
    JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
    JOIN pg_catalog.pg_roles r ON r.oid = n.nspowner
    WHERE e.extname = 'plpy_anon';
    IF nsp.nspname IN ('public', 'pg_catalog') THEN
        target := 'anon';
        EXECUTE $plpy_anon_guard${guard}$plpy_anon_guard$;
        -- recorded in pg_catalog, as with the control file's schema = pg_catalog (which would
        -- forbid SCHEMA pa): an extension in public goes with DROP SCHEMA public CASCADE, and its
        -- catalog with it; pg_dump writes WITH SCHEMA pg_catalog, which installs into anon again
        IF nsp.nspname = 'public' THEN
            UPDATE pg_catalog.pg_extension SET extnamespace = 'pg_catalog'::pg_catalog.regnamespace
            WHERE extname = 'plpy_anon';
            DELETE FROM pg_catalog.pg_depend
            WHERE classid = 'pg_catalog.pg_extension'::pg_catalog.regclass
              AND objid = (SELECT e.oid FROM pg_catalog.pg_extension e WHERE e.extname = 'plpy_anon')
              AND refclassid = 'pg_catalog.pg_namespace'::pg_catalog.regclass
              AND refobjid = nsp.oid AND deptype = 'n';
        END IF;
    ELSE
        target := nsp.nspname;
        IF target !~ '^[a-z_][a-z0-9_]*$' OR target = 'anon_py' OR target LIKE 'pg\\_%' THEN
            RAISE EXCEPTION 'plpy_anon cannot be installed in schema %', pg_catalog.quote_ident(target)
                USING ERRCODE = '42602',
                      HINT = 'Name a schema in lower-case letters, digits and underscores (not anon_py), '
                             'e.g. CREATE SCHEMA pa; CREATE EXTENSION plpy_anon SCHEMA pa.';
        END IF;
        SELECT pg_catalog.string_agg(d.what, ', ' ORDER BY d.what) INTO contents
        FROM (SELECT o.type || ' ' || o.identity AS what
              FROM pg_catalog.pg_depend dep,
                   LATERAL pg_catalog.pg_identify_object(dep.classid, dep.objid, dep.objsubid) o
              WHERE dep.refclassid = 'pg_catalog.pg_namespace'::pg_catalog.regclass
                AND dep.refobjid = nsp.oid
                AND dep.classid <> 'pg_catalog.pg_extension'::pg_catalog.regclass
              LIMIT 6) d;
        IF contents IS NOT NULL THEN
            RAISE EXCEPTION 'plpy_anon needs a schema of its own, but schema % already holds objects', target
                USING ERRCODE = '42P06', DETAIL = 'It already holds: ' || contents || '.',
                      HINT = 'Nothing was installed. Create an empty schema for it: CREATE SCHEMA pa; '
                             'CREATE EXTENSION plpy_anon SCHEMA pa (or SCHEMA public: into its own schema anon).';
        END IF;
        -- whoever owns the schema may drop and replace what is in it
        IF NOT nsp.rolsuper THEN
            RAISE EXCEPTION 'plpy_anon cannot be installed in schema %, owned by % who is not a superuser',
                            target, nsp.owner
                USING ERRCODE = '42501',
                      HINT = pg_catalog.format('Nothing was installed. ALTER SCHEMA %s OWNER TO %s, then '
                                               'CREATE EXTENSION plpy_anon SCHEMA %s again.',
                                               target, pg_catalog.quote_ident(current_user), target);
        END IF;
        -- a role that may create in it may overload the extension's functions with its own,
        -- which the DBA's calls then run (pa.sweep(text, text) is chosen over pa.sweep(regclass, ...))
        SELECT pg_catalog.string_agg(CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                                          ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END,
                                     ', ' ORDER BY a.grantee) INTO contents
        FROM pg_catalog.pg_namespace n, pg_catalog.aclexplode(n.nspacl) a
        WHERE n.oid = nsp.oid AND a.privilege_type = 'CREATE' AND a.grantee <> n.nspowner;
        IF contents IS NOT NULL THEN
            RAISE EXCEPTION 'plpy_anon cannot be installed in schema %, in which % may create objects',
                            target, contents
                USING ERRCODE = '42501',
                      HINT = pg_catalog.format('Nothing was installed. REVOKE CREATE ON SCHEMA %s FROM %s, '
                                               'then CREATE EXTENSION plpy_anon SCHEMA %s again.',
                                               target, contents, target);
        END IF;
    END IF;
    EXECUTE pg_catalog.replace($plpy_anon_script${body}$plpy_anon_script$, '{placeholder}', target);
END
$plpy_anon_install$;
"""


# versions that could be installed into schema anon only: the upgrades from them name it
FIXED_SCHEMA_VERSIONS = {"0.1.0"}
UPGRADE_IN_SCHEMA = """
-------------------------------------------------------------------------------
-- the extension's schema: the one holding its catalog (anon unless CREATE EXTENSION ... SCHEMA
-- named another); the rest of the script (below, every reference to the schema written
-- {placeholder}) runs in it
DO $plpy_anon_upgrade$
DECLARE
    target name;
BEGIN
    SELECT n.nspname INTO STRICT target
    FROM pg_catalog.pg_class c
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
         AND d.objid = c.oid AND d.deptype = 'e'
    JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid AND e.extname = 'plpy_anon'
    WHERE c.relname = 'releases' AND c.relkind = 'r';
    EXECUTE pg_catalog.replace($plpy_anon_script${body}$plpy_anon_script$, '{placeholder}', target);
END
$plpy_anon_upgrade$;
"""


def upgrade_in_schema(text: str) -> str:
    """An upgrade script (head + body) whose body runs in the schema the extension is in."""
    head = (SQL / "head.sql").read_text()
    body = schema_placeholders(text.removeprefix(head))
    if "$plpy_anon_script$" in body or "$plpy_anon_upgrade$" in body:
        sys.exit("build: sql/ must not use the dollar quotes $plpy_anon_script$, $plpy_anon_upgrade$")
    return head + UPGRADE_IN_SCHEMA.format(body=body, placeholder=PLACEHOLDER)


def schema_placeholders(text: str) -> str:
    """``text`` with every reference to the extension's schema written PLACEHOLDER."""
    return SCHEMA_REF.sub(PLACEHOLDER, text)


def install_script(inc: list[Path], idem: list[Path], venv: str, version: str) -> str:
    """The fresh install: head, then CHOOSE_SCHEMA running the rest in the schema it chooses."""
    guard = [f for f in inc if f.name == GUARD_FILE]
    rest = [f for f in inc if f.name != GUARD_FILE]
    body = schema_placeholders("".join(section(f, venv, version) for f in rest)
                               + code_sections(idem, venv, version))
    guard_text = "".join(section(f, venv, version) for f in guard)
    for tag in ("$plpy_anon_install$", "$plpy_anon_guard$", "$plpy_anon_script$"):
        if tag in body or tag in guard_text:
            sys.exit(f"build: sql/ must not use the dollar quote {tag} (the install script's)")
    return (SQL / "head.sql").read_text() + CHOOSE_SCHEMA.format(
        guard=guard_text, body=body, placeholder=PLACEHOLDER)


def control(version: str) -> str:
    return (SQL / "plpy_anon.control.in").read_text().replace("@VERSION@", version)


def build(venv: str, out: Path) -> list[Path]:
    version = package_version()
    inc, idem = incremental_files(), idempotent_files()
    check_names(inc)
    check_names(idem)
    check_names(declaration_files())
    if any(f.name[:3] >= FINAL for f in declaration_files()):
        sys.exit(f"build: declaration files must be numbered below {FINAL}")
    check_routines(inc, idem)
    check_frozen()
    out.mkdir(parents=True, exist_ok=True)
    written = []
    target = out / f"plpy_anon--{version}.sql"
    target.write_text(install_script(inc, idem, venv, version))
    written.append(target)
    shipped = frozen_by_version()
    for prior in prior_versions():
        if prior == version:
            continue
        new_inc = [f for f in inc if f.name not in shipped.get(prior, set())]
        up = out / f"plpy_anon--{prior}--{version}.sql"
        code = [f for f in idem if f.name < FINAL]
        text = (script(new_inc + code, venv, version) + CLEANUP
                + "".join(section(f, venv, version) for f in idem if f.name >= FINAL))
        up.write_text(text if prior in FIXED_SCHEMA_VERSIONS else upgrade_in_schema(text))
        written.append(up)
    ctl = out / "plpy_anon.control"
    ctl.write_text(control(version))
    written.append(ctl)
    # scripts of an older build (another version) would be installed beside these by PGXS
    for stale in set(out.glob("plpy_anon--*.sql")) - set(written):
        stale.unlink()
    return written


def frozen_by_version() -> dict[str, set[str]]:
    """versions.txt lines ``<version> <file> <file> ...``: the incremental files each version had."""
    path = SQL / "versions.txt"
    result: dict[str, set[str]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split()
            if parts and not parts[0].startswith("#"):
                result[parts[0]] = set(parts[1:])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", default=DEFAULT_VENV,
                        help="the Python environment the backend loads (baked into the script)")
    parser.add_argument("--out", default=str(ROOT / "extension"))
    parser.add_argument("--freeze", action="store_true",
                        help="record the current version as released (versions.txt, frozen.txt)")
    parser.add_argument("--no-docs", action="store_true",
                        help="do not rewrite docs/sql-reference.md")
    args = parser.parse_args()
    if args.freeze:
        print(f"froze {package_version()}: {' '.join(freeze())}")
        return
    for path in [*build(args.venv, Path(args.out)), write_declared_methods()]:
        print(f"built {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    if not args.no_docs:
        (ROOT / "docs" / "sql-reference.md").write_text(reference())
        print("built docs/sql-reference.md")


if __name__ == "__main__":
    main()
