"""``AnonClient``: the extension's SQL surface as Python methods, on psycopg 3.

    from plpy_anon.client import AnonClient
    with AnonClient("postgresql:///db") as anon:
        rel = anon.mondrian_view("patients", k=5)
        df = anon.release_frame(rel)

Every method is one SQL call (or one transaction) on an autocommit connection; keyword arguments
mirror the SQL function's parameter names and are passed by name, so the server's defaults apply
to whatever is left out (``None`` means "not given"). Errors the server raises come back as the
typed exceptions of :mod:`plpy_anon.client.errors`, carrying its message, detail and hint.
"""
from __future__ import annotations

import contextlib
import datetime
import importlib.util
import inspect
import io
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from plpy_anon.client import errors
from plpy_anon.parameters import SURFACES, function_parameters

if TYPE_CHECKING:       # pandas is imported where a frame is made: a call returning no frame skips it
    import pandas as pd

ProgressCallback = Callable[[str], None]
EXPORT_FORMATS = ("csv", "parquet", "sql")
ROLES = ("identifier", "quasi_identifier", "sensitive", "ignored")
#: a reference to the extension's schema in the SQL this client writes (anon.f, anon.releases;
#: "anon." ending a template's part that an identifier follows): AnonClient puts the schema the
#: extension is installed in in its place
SCHEMA_REF = re.compile(r"\banon(?=\.(?:[A-Za-z_\"(%]|$))")
#: the extension's schema: where its catalog table is (anon unless installed with SCHEMA)
EXTENSION_SCHEMA = """
SELECT c.relnamespace::pg_catalog.regnamespace::text FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
     AND d.objid = c.oid AND d.deptype = 'e'
JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid AND e.extname = 'plpy_anon'
WHERE c.relname = 'releases' AND c.relkind = 'r'"""


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Re-raise database errors as the typed exceptions of plpy_anon.client.errors."""
    try:
        yield
    except psycopg.Error as error:
        raise errors.from_psycopg(error) from error


def _param(value: Any) -> Any:
    """Python value -> query parameter: dicts become jsonb, tuples lists (arrays)."""
    if isinstance(value, dict):
        return Jsonb(value)
    if isinstance(value, tuple):
        return list(value)
    return value


# SQL type of a method parameter -> the annotation its client method shows
PYTHON_TYPES = {"integer": int, "bigint": int, "double precision": float, "boolean": bool,
                "text": str, "regclass": str, "text[]": Sequence[str], "jsonb": str | dict,
                "text | jsonb": str | dict}


def release_method(function: str) -> Callable[..., str]:
    """``AnonClient.<function>(source, name=value, ...)``: creates a release with anon.<function>
    and returns its qualified name. Its signature and docstring come from the parameters'
    declarations (plpy_anon.parameters): an unknown or missing argument is a TypeError before any
    SQL runs; None leaves an argument to the server's default."""
    declared = function_parameters(function)
    signature = inspect.Signature([
        inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        inspect.Parameter("source", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=str),
        *(inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY,
                            default=inspect.Parameter.empty if p.required else None,
                            annotation=PYTHON_TYPES[p.sql_type] if p.required else PYTHON_TYPES[p.sql_type] | None)
          for p in declared if p.name != "source")],
        return_annotation=str)

    def call(self, *args, **named):
        bound = signature.bind(self, *args, **named)
        source = bound.arguments.pop("source")
        bound.arguments.pop("self")
        return self.scalar(function, source, **bound.arguments)

    call.__signature__ = signature
    call.__name__ = call.__qualname__ = function
    lines = [f"anon.{function}: creates a release of ``source``; returns its qualified name.", ""]
    lines += [f"``{p.name}``{' (required)' if p.required else ''}: {p.help}"
              for p in declared if p.name != "source"]
    call.__doc__ = "\n".join(lines)
    return call


class AnonClient:
    """A connection to a database with the plpy_anon extension.

    ``dsn``: a libpq connection string or URI; or pass an open psycopg ``connection`` (it must be
    in autocommit mode). ``progress``: called with each phase the server reports during long
    operations (refreshes), e.g. ``progress=print``. ``schema``: the extension's schema (where
    install() puts it); by default the one it is installed in, ``anon`` unless CREATE EXTENSION
    plpy_anon SCHEMA chose another (beside PostgreSQL Anonymizer).
    """

    def __init__(self, dsn: str | None = None, *, connection: psycopg.Connection | None = None,
                 progress: ProgressCallback | None = None, schema: str | None = None):
        self._schema = schema
        self._extension_found: bool | None = None
        if (dsn is None) == (connection is None):
            raise errors.InvalidParameter("give either a dsn or a connection",
                                          hint='AnonClient("postgresql:///db") or AnonClient(connection=conn).')
        if connection is None:
            with translated():
                connection = psycopg.connect(dsn, autocommit=True)
            self._owns_connection = True
        else:
            if not connection.autocommit:
                raise errors.InvalidParameter("the connection must be in autocommit mode",
                                              hint="psycopg.connect(..., autocommit=True): each call is its own transaction.")
            self._owns_connection = False
        self.connection = connection
        self.progress = progress
        if progress is not None:
            connection.add_notice_handler(self._on_notice)
            with translated():
                connection.execute("SET plpy_anon.progress = on")

    # ------------------------------------------------------------------ life cycle
    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection if this client opened it (not one it was given)."""
        if self._owns_connection and not self.connection.closed:
            self.connection.close()

    def _on_notice(self, diag) -> None:
        message = diag.message_primary or ""
        if message.startswith("plpy_anon: ") and self.progress is not None:
            self.progress(message[len("plpy_anon: "):])

    # ------------------------------------------------------------------ generic calls
    @property
    def schema(self) -> str:
        """The extension's schema (asked of the server once, unless given)."""
        if self._schema is None:
            with translated():
                row = self.connection.execute(EXTENSION_SCHEMA).fetchone()
            self._extension_found = row is not None
            if row is None:
                return "anon"
            self._schema = row[0]
        return self._schema

    def _in_schema(self, query):
        """``query`` (naming the extension's objects anon.x) in the extension's schema: only this
        client's own SQL text is rewritten, never a name or value composed into it
        (sql.Identifier, sql.Literal), so that a user's relation in a schema anon keeps its name."""
        if self.schema == "anon":
            return query
        if isinstance(query, sql.Composed):
            return sql.Composed([self._in_schema(part) for part in query])
        if isinstance(query, sql.SQL):
            return sql.SQL(self._in_schema(query.as_string(None)))
        if isinstance(query, str):
            return SCHEMA_REF.sub(lambda _: sql.Identifier(self.schema).as_string(self.connection), query)
        return query

    def _execute(self, query, params=None, *, ours: bool = True) -> psycopg.Cursor:
        """Run ``query``; ``ours``: SQL of this client, naming the extension's schema anon."""
        try:
            with translated():
                return self.connection.execute(self._in_schema(query) if ours else query, params)
        except (errors.UndefinedObject, errors.ExtensionMissing) as error:
            # the server's own words ("schema anon does not exist") do not say what to do
            if ours and self._extension_found is False and error.sqlstate in ("3F000", "42883"):
                raise self._not_installed() from error
            raise

    def _not_installed(self) -> errors.ExtensionMissing:
        database = self.connection.info.dbname
        return errors.ExtensionMissing(
            f'the extension plpy_anon is not installed in database "{database}"',
            hint="Install it as a superuser: plpy-anon install (CREATE EXTENSION plpy_anon CASCADE), "
                 "or connect to the database that has it (-d).")

    def call(self, function: str, *args: Any, **named: Any) -> list[dict]:
        """``SELECT * FROM anon.<function>(args..., name => value, ...)`` as a list of dicts;
        named arguments that are None are left out (the server's default applies)."""
        cursor = self._execute(*self._call_query(function, args, named))
        names = [d.name for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]

    def scalar(self, function: str, *args: Any, **named: Any) -> Any:
        """``SELECT anon.<function>(...)``: the single value it returns."""
        query, params = self._call_query(function, args, named, scalar=True)
        return self._execute(query, params).fetchone()[0]

    def rows(self, function: str, *args: Any, **named: Any) -> tuple[list[str], list[tuple]]:
        """A set-returning function's column names and rows (tuples), without pandas."""
        cursor = self._execute(*self._call_query(function, args, named))
        return [d.name for d in cursor.description], cursor.fetchall()

    def frame(self, function: str, *args: Any, **named: Any) -> pd.DataFrame:
        """A set-returning function's rows as a DataFrame (columns even when there are no rows)."""
        return frame_of(self._execute(*self._call_query(function, args, named)))

    @staticmethod
    def _call_query(function, args, named, scalar=False):
        function = function.removeprefix("anon.")     # frame("anon.risk_report") as frame("risk_report")
        placeholders = [sql.Placeholder() for _ in args]
        params = [_param(a) for a in args]
        for name, value in named.items():
            if value is None:
                continue
            placeholders.append(sql.SQL("{} => {}").format(sql.Identifier(name), sql.Placeholder()))
            params.append(_param(value))
        call = sql.SQL("anon.{}({})").format(sql.Identifier(function), sql.SQL(", ").join(placeholders))
        template = "SELECT {}" if scalar else "SELECT * FROM {}"
        return sql.SQL(template).format(call), params

    # ------------------------------------------------------------------ the extension
    def extension_version(self) -> str | None:
        """The installed version of the extension in this database, or None."""
        row = self._execute("SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'plpy_anon'").fetchone()
        return row[0] if row else None

    def available_versions(self) -> list[str]:
        """The versions of plpy_anon this server can install or update to, oldest first."""
        rows = self._execute("SELECT version FROM pg_catalog.pg_available_extension_versions "
                             "WHERE name = 'plpy_anon' ORDER BY version").fetchall()
        return [r[0] for r in rows]

    def install(self, version: str | None = None) -> str:
        """CREATE EXTENSION plpy_anon (and plpython3u) if missing; returns the installed version.
        A ``version`` other than the one installed is refused (upgrade() moves between versions)."""
        installed = self.extension_version()
        if installed is None:
            query = sql.SQL("CREATE EXTENSION plpy_anon")
            if self._schema is not None and self._schema != "anon":
                self._execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self._schema)))
                query += sql.SQL(" SCHEMA {}").format(sql.Identifier(self._schema))
            if version:
                query += sql.SQL(" VERSION {}").format(sql.Literal(version))
            self._execute(query + sql.SQL(" CASCADE"))
        elif version and version != installed:
            raise errors.PrerequisiteMissing(
                f"plpy_anon {installed} is installed in this database, not {version}",
                hint=f"Update it with plpy-anon install --upgrade --version {version} (ALTER EXTENSION "
                     f"plpy_anon UPDATE TO '{version}') where an update path leads there; an older "
                     "version needs DROP EXTENSION plpy_anon CASCADE (which drops every release) first.")
        return self.extension_version()

    def upgrade(self, version: str | None = None) -> tuple[str, str]:
        """ALTER EXTENSION plpy_anon UPDATE [TO version]; returns (old, new) versions. Existing
        releases and the catalog are kept."""
        old = self.extension_version()
        if old is None:
            raise errors.ExtensionMissing("plpy_anon is not installed in this database",
                                          hint="Install it first: plpy-anon install (CREATE EXTENSION plpy_anon CASCADE).")
        query = sql.SQL("ALTER EXTENSION plpy_anon UPDATE")
        if version:
            query += sql.SQL(" TO {}").format(sql.Literal(version))
        self._execute(query)
        return old, self.extension_version()

    def versions(self) -> pd.DataFrame:
        """What the server's Python runs (anon.versions())."""
        return self.frame("versions")

    # ------------------------------------------------------------------ declarations
    def set_column_role(self, source: str, column_name: str, role: str | None) -> None:
        """Declare a column's role (identifier, quasi_identifier, sensitive, ignored; None removes it)."""
        self.scalar("set_column_role", source, column_name, role)

    def declare(self, source: str, *, identifiers: Sequence[str] = (),
                quasi_identifiers: Sequence[str] = (), sensitive: Sequence[str] = (),
                ignored: Sequence[str] = ()) -> pd.DataFrame:
        """Declare several columns' roles in one transaction; returns anon.column_roles(table)."""
        wanted = {"identifier": identifiers, "quasi_identifier": quasi_identifiers,
                  "sensitive": sensitive, "ignored": ignored}
        with translated(), self.connection.transaction():
            for role, columns in wanted.items():
                for column in columns:
                    self.connection.execute(self._in_schema("SELECT anon.set_column_role(%s, %s, %s)"),
                                            (source, column, role))
        return self.column_roles(source)

    def column_roles(self, source: str) -> pd.DataFrame:
        """anon.column_roles: the role each column of ``source`` takes in a release (declared or
        the default) and how a quasi-identifier is released."""
        return self.frame("column_roles", source)

    def detect_identifiers(self, source: str, *, sample_size: int | None = None) -> pd.DataFrame:
        """anon.detect_identifiers: the columns of ``source`` that look identifying (by name and a
        sample of ``sample_size`` rows), and whether each blocks a release until declared."""
        return self.frame("detect_identifiers", source, sample_size=sample_size)

    def set_hierarchy(self, source: str, column_name: str, paths: Sequence[Sequence[str | None]]) -> int:
        """Register a hierarchy: one path per leaf (leaf, parent, ..., root); returns the leaves."""
        width = max(len(p) for p in paths) if paths else 0
        padded = [list(p) + [None] * (width - len(p)) for p in paths]
        return self.scalar("set_hierarchy", source, column_name, padded)

    def load_hierarchy_csv(self, source: str, column_name: str, csv: str | os.PathLike | io.TextIOBase,
                           sep: str = ";") -> int:
        """Register an ARX-style hierarchy CSV (``leaf;parent;...;*`` per line) from a path, an
        open file or the CSV text itself; returns the number of leaves."""
        if hasattr(csv, "read"):
            text = csv.read()
        elif isinstance(csv, os.PathLike) or (isinstance(csv, str) and "\n" not in csv
                                               and os.path.exists(csv)):
            with open(csv, encoding="utf-8-sig") as f:
                text = f.read()
        elif isinstance(csv, str) and "\n" not in csv and sep not in csv:
            # neither a file here nor CSV text: most likely a path relative to another directory
            raise errors.InvalidParameter(
                f"no hierarchy file {csv!r} in {os.getcwd()}",
                hint="Give the CSV file's absolute path, an open file, or the CSV text itself "
                     f"(one line per leaf: leaf{sep}parent{sep}...{sep}*).")
        else:
            text = str(csv)
        return self.scalar("set_hierarchy_csv", source, column_name, text, sep)

    set_hierarchy_csv = load_hierarchy_csv

    def drop_hierarchy(self, source: str, column_name: str) -> bool:
        """Remove the hierarchy of ``source.column_name``; True if there was one."""
        return self.scalar("drop_hierarchy", source, column_name)

    # creating releases: one method per SQL function of a release method, added below the class
    # from the declarations (release_methods)

    # ------------------------------------------------------------------ managing releases
    def releases(self) -> pd.DataFrame:
        """Every release with its last refresh, rows, k, errors and schedule (anon.release_status())."""
        return self.frame("release_status")

    def release_audit(self, name: str | None = None) -> pd.DataFrame:
        """anon.release_audit: every release (or the one named) as a privacy officer signs it off:
        method, promise, readers, versions, what was held back, and safe with why."""
        return self.frame("release_audit", name)

    def release_name(self, name: str) -> str:
        """The quoted qualified name of a release given as ``name`` or ``schema.name``."""
        rows = self._execute("""
            SELECT pg_catalog.format('%%I.%%I', r.release_schema, r.release_name)
            FROM anon.releases r, pg_catalog.parse_ident(%s) p
            WHERE (pg_catalog.cardinality(p) = 2 AND r.release_schema = p[1] AND r.release_name = p[2])
               OR (pg_catalog.cardinality(p) = 1 AND r.release_name = p[1])""", (name,)).fetchall()
        if not rows:
            raise errors.UndefinedObject(f'release "{name}" does not exist',
                                         hint="plpy-anon release-status lists them.")
        if len(rows) > 1:
            raise errors.InvalidParameter(f'release name "{name}" is ambiguous: '
                                          + ", ".join(r[0] for r in rows), hint="Qualify it with its schema.")
        return rows[0][0]

    def release(self, name: str) -> dict:
        """The catalog row of a release (anon.releases)."""
        qualified = self.release_name(name)
        rows = self._execute("SELECT * FROM anon.releases WHERE pg_catalog.format('%%I.%%I', release_schema, "
                             "release_name) = %s", (qualified,))
        return dict(zip([d.name for d in rows.description], rows.fetchone()))

    def refresh(self, release: str) -> dict:
        """Re-anonymize a release from current data; returns its updated catalog row. On failure
        the old release stays and the failure is recorded (see release_status)."""
        return self.call("refresh", release)[0]

    def refresh_all(self) -> pd.DataFrame:
        """Refresh every release in dependency order: release, status, seconds, error."""
        return self.frame("refresh_all")

    def drop_release(self, release: str, *, if_exists: bool = False) -> bool:
        """Drop a release (its relations and catalog row); with ``if_exists`` a missing one is
        no error. True if one was dropped."""
        return self.scalar("drop_release", release, if_exists=if_exists)

    drop = drop_release

    def release_frame(self, release: str, *, limit: int | None = None, text: bool = False) -> pd.DataFrame:
        """A release's rows as a DataFrame (ranges as psycopg Range objects, sets as lists; with
        ``text``, both as PostgreSQL's own text, as psql shows them). Only a
        release owned by the connected role or a superuser: planning a read of another role's
        relation runs whatever index predicate it has added, with the reader's rights."""
        name = self.release_name(release)
        owner = self.foreign_owner(name)
        if owner is not None:
            raise errors.PermissionDenied(
                f"{name} belongs to {owner}, who may add an index at any moment whose predicate "
                "planning a read would run with your rights",
                hint=f"Have {owner} read it in a session of its own.")
        columns = self.relation_columns(name, with_types=True)
        # arrays and ranges as the server writes them (psql's and COPY's text): a list or a
        # psycopg Range loses the quoting that tells 'NULL' from NULL and "a, b" from two values
        query = sql.SQL("SELECT {} FROM {}").format(sql.SQL(", ").join(
            sql.SQL("{c}::text AS {c}").format(c=sql.Identifier(c)) if text and kind in "AR"
            else sql.Identifier(c) for c, kind in columns.items()), self.relation_identifier(name))
        if limit is not None:
            query += sql.SQL(" LIMIT {}").format(sql.Literal(int(limit)))
        return frame_of(self._execute(query))

    def relation_identifier(self, name: str) -> sql.Identifier:
        """``name`` (a relation's qualified name, quoted where needed) as an identifier to compose."""
        return sql.Identifier(*self._execute("SELECT pg_catalog.parse_ident(%s)", (name,)).fetchone()[0])

    def foreign_owner(self, name: str) -> str | None:
        """The owner of relation ``name`` when it is neither a superuser nor the connected role
        (then planning a read of it runs whatever index predicate it has added, with the reader's
        rights); else None."""
        owner = self._execute(
            "SELECT o.rolname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_roles o ON o.oid = c.relowner "
            "WHERE c.oid = pg_catalog.to_regclass(%s)::pg_catalog.oid AND NOT o.rolsuper "
            "AND (o.rolname <> current_user OR current_user <> session_user OR o.oid IS DISTINCT FROM "
            "(SELECT a.usesysid FROM pg_catalog.pg_stat_activity a WHERE a.pid = pg_catalog.pg_backend_pid()))",
            (name,)).fetchone()
        return None if owner is None else owner[0]

    def relation_columns(self, name: str, *, with_types: bool = False) -> list[str] | dict[str, str]:
        """The columns of relation ``name`` in order; ``with_types``: each with its type's
        category (pg_type.typcategory: A array, R range, N numeric, ...)."""
        rows = self._execute(
            "SELECT a.attname, t.typcategory FROM pg_catalog.pg_attribute a "
            "JOIN pg_catalog.pg_type t ON t.oid = a.atttypid "
            "WHERE a.attrelid = pg_catalog.to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped "
            "ORDER BY a.attnum", (name,)).fetchall()
        return {r[0]: r[1] for r in rows} if with_types else [r[0] for r in rows]

    def query(self, statement, *params: Any) -> list[dict]:
        """A statement's rows as dicts (``%s`` placeholders bound to ``params``)."""
        cursor = self._execute(statement, params or None, ours=False)
        names = [d.name for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]

    def release_report(self, release: str) -> pd.DataFrame:
        """anon.release_report(release) when the server has it, else the catalog's figures."""
        name = release
        if self._has_function("release_report"):
            return self.frame("release_report", name)
        row = self.release(name)
        metrics = row.get("metrics") or {}
        flat = {"release": self.release_name(name), "method": row["method"],
                "row_count": row["row_count"], "achieved_k": row["achieved_k"],
                "refreshed_at": row["refreshed_at"],
                **{k: v for k, v in metrics.items() if not isinstance(v, (dict, list))}}
        import pandas as pd
        return pd.DataFrame([flat])

    report = release_report

    # ------------------------------------------------------------------ leaving the database
    def snapshot(self, release: str, *, snapshot_name: str | None = None, snapshot_schema: str | None = None,
                 replace: bool | None = None) -> str:
        """anon.snapshot: copy RELEASE into a plain table pg_dump -t carries elsewhere; returns its name."""
        return self.scalar("snapshot", release, snapshot_name=snapshot_name,
                           snapshot_schema=snapshot_schema, replace=replace)

    def release_metadata(self, release: str) -> dict:
        """anon.release_metadata: method, parameters, achieved k, row count, when built, columns."""
        return self.scalar("release_metadata", release)

    def export(self, release: str, path: str | os.PathLike, format: str = "csv", *,
               formula_protection: bool = True) -> dict:
        """Write RELEASE's rows (exactly its columns and rows, ordered by every column) to ``path``
        as ``csv`` (with a header), ``parquet`` (typed columns: plpy_anon.client.parquet; needs the
        ``[parquet]`` extra) or ``sql`` (CREATE TABLE + COPY, loadable by psql into a database
        without plpy_anon), and ``<path>.meta.json`` beside it (anon.release_metadata + format,
        exported_rows, exported_at). Rows and metadata are read in one REPEATABLE READ snapshot.
        ``formula_protection`` (csv): a text cell a spreadsheet would run as a formula (starting
        with = + - @, a tab or a carriage return) is written with a leading ``'`` (OWASP's advice).
        Returns the metadata written."""
        if format not in EXPORT_FORMATS:
            raise errors.InvalidParameter(f"unknown export format {format!r}",
                                          hint="Use one of: " + ", ".join(EXPORT_FORMATS) + ".")
        if format == "parquet" and importlib.util.find_spec("pyarrow") is None:
            raise errors.PrerequisiteMissing(
                "parquet export needs pyarrow, which is not installed in this Python environment",
                hint="pip install './[parquet]' in a clone of plpy_anon (or pip install pyarrow), "
                     "or export --format csv or sql.")
        path = Path(path)
        with translated(), self.connection.transaction():
            self.connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            meta = self.connection.execute(self._in_schema("SELECT anon.release_metadata(%s)"),
                                           (release,)).fetchone()[0]
            # every column, by its text where its type has no ordering (json, xml)
            order = sql.SQL(", ").join(
                sql.SQL("{}::text").format(sql.Identifier(c["name"])) if c["type"] in ("json", "xml")
                else sql.Identifier(c["name"]) for c in meta["columns"])
            cells = [csv_cell(c["name"], c["type"]) if format == "csv" and formula_protection
                     else sql.Identifier(c["name"]) for c in meta["columns"]]
            select = sql.SQL("SELECT {} FROM {} ORDER BY {}").format(
                sql.SQL(", ").join(cells), sql.SQL(meta["relation"]), order)
            rows = self.connection.execute(sql.SQL("SELECT pg_catalog.count(*) FROM {}").format(
                sql.SQL(meta["relation"]))).fetchone()[0]
            meta.update({"format": format, "file": path.name, "exported_rows": rows,
                         "exported_at": datetime.datetime.now(datetime.UTC).isoformat()})
            try:
                if format == "csv":
                    self._copy_out(sql.SQL("COPY ({}) TO STDOUT WITH (FORMAT csv, HEADER)").format(select),
                                   path, b"")
                elif format == "sql":
                    name = self.connection.execute("SELECT (pg_catalog.parse_ident(%s))[2]",
                                                   (meta["relation"],)).fetchone()[0]
                    self._copy_out(sql.SQL("COPY ({}) TO STDOUT").format(select), path,
                                   self._sql_header(meta, name), b"\\.\nCOMMIT;\n")
                else:
                    from plpy_anon.client import parquet  # the optional pyarrow, asked for
                    parquet.write(self.connection, meta, path, order)
            except BaseException:
                path.unlink(missing_ok=True)            # no half-written file left behind
                raise
        Path(f"{path}.meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n")
        return meta

    def _copy_out(self, statement, path: Path, header: bytes, footer: bytes = b"") -> None:
        """COPY ... TO STDOUT into ``path`` between ``header`` and ``footer``."""
        with open(path, "wb") as out:
            out.write(header)
            with self.connection.cursor().copy(statement) as copy:
                out.writelines(copy)
            out.write(footer)

    def _sql_header(self, meta: dict, name: str) -> bytes:
        """CREATE TABLE (core types only: anon.release_metadata refuses others) + COMMENT + COPY."""
        table = sql.Identifier(name)
        cols = sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(c["name"]), sql.SQL(c["type"]))
                                  for c in meta["columns"])
        names = sql.SQL(", ").join(sql.Identifier(c["name"]) for c in meta["columns"])
        comment = "plpy_anon export " + json.dumps(meta, sort_keys=True, default=str)
        text = sql.SQL(
            "-- plpy_anon export of {release}: the release's rows only; needs no extension.\n"
            "-- Load with: psql -v ON_ERROR_STOP=1 -d DATABASE -f FILE\n"
            "SET client_encoding = 'UTF8';\nBEGIN;\nCREATE TABLE {table} ({cols});\n"
            "COMMENT ON TABLE {table} IS {comment};\nCOPY {table} ({names}) FROM stdin;\n").format(
                release=sql.SQL(printable(meta["release"])), table=table, cols=cols,
                comment=sql.Literal(comment), names=names)
        return text.as_string(self.connection).encode()

    def risk_report(self, relation: str, *, quasi_identifiers: list[str] | None = None,
                    sensitive: list[str] | None = None, population: int | None = None,
                    risk_threshold: float | None = None,
                    recursive_c: float | None = None) -> pd.DataFrame:
        """anon.risk_report: the risk figures of a table, view, materialized view or release, one
        a row (measure, column_name, value, detail); see docs/risk.md."""
        return self.frame("risk_report", relation, quasi_identifiers=quasi_identifiers,
                          sensitive=sensitive, population=population,
                          risk_threshold=risk_threshold, recursive_c=recursive_c)

    def _has_function(self, name: str) -> bool:
        return self._execute("SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON "
                             "n.oid = p.pronamespace WHERE n.nspname = %s AND p.proname = %s)",
                             (self.schema, name)).fetchone()[0]

    # ------------------------------------------------------------------ operations
    def schedule_refresh(self, release: str, schedule: str) -> int:
        """A pg_cron job refreshing the release on ``schedule`` ('0 3 * * *'); returns the job id.
        When pg_cron runs in another database of the server, the job is scheduled from there
        (cron.schedule_in_database) to run in this one."""
        cron_db = self._cron_database()
        if cron_db is None:
            return self.scalar("schedule_refresh", release, schedule)
        job = self.call("refresh_job", release)[0]
        with self._connection_to(cron_db) as cron, translated():
            return cron.execute("SELECT cron.schedule_in_database(%s, %s, %s, %s)",
                                (job["job_name"], schedule, job["command"],
                                 job["database_name"])).fetchone()[0]

    def unschedule_refresh(self, release: str) -> bool:
        """Remove the release's pg_cron job; True if there was one."""
        cron_db = self._cron_database()
        if cron_db is None:
            return self.scalar("unschedule_refresh", release)
        job = self.call("refresh_job", release)[0]
        with self._connection_to(cron_db) as cron, translated():
            jobs = cron.execute("SELECT jobid FROM cron.job WHERE jobname = %s AND database = %s",
                                (job["job_name"], job["database_name"])).fetchall()
            for (jobid,) in jobs:
                cron.execute("SELECT cron.unschedule(%s::bigint)", (jobid,))
        return bool(jobs)

    def _cron_database(self) -> str | None:
        """pg_cron's database when it is another one of this server (None: this one, or none)."""
        row = self._execute("SELECT pg_catalog.current_setting('cron.database_name', true), "
                            "pg_catalog.current_database()").fetchone()
        return row[0] if row[0] and row[0] != row[1] else None

    def _connection_to(self, dbname: str) -> psycopg.Connection:
        info = self.connection.info
        with translated():
            return psycopg.connect(info.dsn, dbname=dbname, password=info.password or None,
                                   autocommit=True)

    def grant_analyst(self, role: str) -> int:
        """Let ``role`` read every current and future release; returns how many it can read."""
        return self.scalar("grant_analyst", role)

    def revoke_analyst(self, role: str) -> int:
        """Take back ``role``'s access to releases; returns how many it can still read (0)."""
        return self.scalar("revoke_analyst", role)

    def load_queries(self, path: str | os.PathLike, *, source: str | None = None,
                     log_format: str = "auto", projection_share: float = 0.5):
        """Load a PostgreSQL server log (csvlog or stderr) into the workload store; with ``source``
        learn the attribute priorities of ``source`` too (the table, as anon.learn_priorities).
        Returns plpy_anon.client.querylog.LoadResult."""
        from plpy_anon.client import querylog
        from plpy_anon.core.errors import AnonError

        try:
            with translated():
                return querylog.load_queries(self.connection, os.fspath(path), table=source,
                                             log_format=log_format, projection_share=projection_share,
                                             schema=self.schema)
        except errors.ServerError:
            raise
        except AnonError as error:      # found on the client (missing file, empty log)
            raise errors.BY_SQLSTATE.get(error.sqlstate, errors.ServerError)(
                error.message, hint=error.hint, detail=error.detail) from error


#: types a CSV cell cannot take for a formula: numbers (a negative one starts with "-" and stays
#: a number), dates and times, booleans; ranges and arrays start with a bracket or brace
NOT_TEXT = ("smallint", "integer", "bigint", "real", "double precision", "numeric", "boolean",
            "date", "timestamp", "time", "interval", "oid")


#: what a spreadsheet may take for the start of a formula: = + - @ (also their fullwidth forms),
#: after any white space or invisible character, or a tab, carriage return or line feed; one
#: pattern for PostgreSQL's regular expressions and Python's
FORMULA_START = ("^([\\s\u00a0\u200b\u200c\u200d\u2060\ufeff]*[-=+@\uff1d\uff0b\uff0d\uff20]"
                 "|[\t\r\n])")


def formula_safe(text: str) -> str:
    """A header cell as the CSV export writes it (column names are the source's owner's)."""
    return "'" + text if re.match(FORMULA_START, text) else text


def csv_cell(name: str, sql_type: str) -> sql.Composable:
    """A column as the CSV export writes it: a text value a spreadsheet would run as a formula
    (:data:`FORMULA_START`) gets a leading ' so that it is shown instead; the header too."""
    column, header = sql.Identifier(name), sql.Identifier(formula_safe(name))
    if sql_type.startswith(NOT_TEXT) or sql_type.endswith(("[]", "range")):
        return sql.SQL("{} AS {}").format(column, header)
    return sql.SQL(
        "CASE WHEN {c}::text OPERATOR(pg_catalog.~) {formula} THEN {quote} OPERATOR(pg_catalog.||) {c}::text "
        "ELSE {c}::text END AS {h}").format(
            c=column, h=header, formula=sql.Literal(FORMULA_START), quote=sql.Literal("'"))


#: integer types (int2, int4, int8, oid): read as pandas' nullable Int64, so that a NULL does not
#: turn a column of counts into floats (``achieved_k`` 10.0)
INTEGER_TYPES = {21, 23, 20, 26}


def frame_of(cursor: psycopg.Cursor) -> pd.DataFrame:
    """A query's rows as a DataFrame with its columns' names; integer columns stay integers."""
    import pandas as pd
    frame = pd.DataFrame(cursor.fetchall(), columns=[d.name for d in cursor.description])
    for i, column in enumerate(cursor.description):
        if column.type_code in INTEGER_TYPES:
            frame[frame.columns[i]] = frame.iloc[:, i].astype("Int64")
    return frame


def printable(text: str) -> str:
    """``text`` with every character that is not printable (line ends, carriage returns, other
    control and separator characters) as "?": for names written into comments of a script that
    psql will run. psql ends a ``--`` comment at a carriage return too: a table named
    "t<carriage return>\\! command" would run the command on the machine loading an export."""
    return "".join(ch if ch.isprintable() else "?" for ch in text)


def release_methods() -> list[str]:
    """The SQL functions creating releases, built in or declared in sql/functions (plug-ins)."""
    return sorted({surface.function for surface in SURFACES.values()})


for _function in release_methods():
    setattr(AnonClient, _function, release_method(_function))
