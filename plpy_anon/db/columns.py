"""Source tables, their columns, and the role each column plays in a release.

Roles: ``identifier`` (dropped), ``quasi_identifier`` (generalized), ``sensitive`` (released as is;
the l-diversity target), ``ignored`` (dropped). Precedence, highest first: the call's arguments,
the declarations in ``anon.column_roles``, the default. The default is conservative: a column that
is a single-column primary key or unique key is an identifier; every other column is a
quasi-identifier. Nothing undeclared is ever published as is.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from plpy_anon.core.errors import (
    InsufficientData,
    InvalidParameter,
    UndefinedObject,
    UnsupportedType,
)
from plpy_anon.db import guards
from plpy_anon.db.errors import sql_entry
from plpy_anon.db.guards import Table
from plpy_anon.db.sqltext import ident, local_settings, run, text_of

if TYPE_CHECKING:
    from plpy_anon.core.hierarchy import Hierarchy

ROLES = ("identifier", "quasi_identifier", "sensitive", "ignored")

# How a quasi-identifier of each base type is read into Python and released.
#   kind       -- "numeric" (ordered; released as a range) or "categorical" (released as a set/label)
#   read       -- SQL expression (over the quoted column %s) giving a number for numeric kinds
#   range_type -- the range type analysts query with @>, &&, ...
NUMERIC_TYPES = {
    "int2": ("%(c)s::int8", "int4range", "int"),
    "int4": ("%(c)s::int8", "int4range", "int"),
    "int8": ("%(c)s", "int8range", "int"),
    # beyond float8's range (1e400, 1e-400), which a cast refuses, as +-infinity or 0: ordering
    # only, the released bounds are the values themselves (NaN sorts above all, so it goes first)
    "numeric": (("CASE WHEN %(c)s = 'NaN' THEN 'NaN'::float8 WHEN %(c)s >= 1e308 THEN 'Infinity'::float8 "
                 "WHEN %(c)s <= -1e308 THEN '-Infinity'::float8 WHEN pg_catalog.abs(%(c)s) < 1e-307 THEN 0::float8 "
                 "ELSE %(c)s::float8 END"), "numrange", "float"),
    "float4": ("%(c)s::float8", "numrange", "float"),
    "float8": ("%(c)s", "numrange", "float"),
    # days since 2000-01-01; 'infinity' / '-infinity' (which date subtraction refuses) as +-inf
    "date": (("CASE WHEN pg_catalog.isfinite(%(c)s) THEN (%(c)s - DATE '2000-01-01')::float8 "
              "WHEN %(c)s > DATE '2000-01-01' THEN 'Infinity'::float8 ELSE '-Infinity'::float8 END"),
             "daterange", "date"),
    "timestamp": ("extract(epoch FROM %(c)s)::float8", "tsrange", "timestamp"),
    "timestamptz": ("extract(epoch FROM %(c)s)::float8", "tstzrange", "timestamptz"),
}
# The element type each range type is tested against (``range @> value::element``) and the
# largest value of the discrete ones: ``[lo, max]`` would canonicalize to ``[lo, max + 1)``, which
# overflows, so a class reaching the type's maximum is released upper-unbounded (still truthful).
RANGE_ELEMENTS = {
    "int4range": ("int4", "2147483647"),
    "int8range": ("int8", "9223372036854775807"),
    "numrange": ("numeric", None),
    "daterange": ("date", "'5874897-12-31'::date"),
    "tsrange": ("timestamp", None),
    "tstzrange": ("timestamptz", None),
}
# typcategory: S string, B boolean, E enum -- released as the set of values (text[]) or, with a
# hierarchy, the lowest common ancestor (text).
CATEGORICAL_CATEGORIES = ("S", "B", "E")


@dataclass(frozen=True)
class Column:
    name: str
    type_name: str      # base type name (pg_type.typname; schema-qualified outside pg_catalog)
    display_type: str   # format_type(), for messages
    category: str       # pg_type.typcategory
    not_null: bool
    unique: bool
    builtin: bool       # the (base) type is in pg_catalog: see sqltext.text_of
    # the base type, typmod kept: a cast to a domain runs its CHECK, which may call the domain
    # owner's functions with the caller's rights; a cast to the base type runs none
    base_display_type: str = ""
    # a number or date column with a registered hierarchy (anon.set_hierarchy_intervals,
    # anon.set_hierarchy_dates) is released through its labels, as a categorical column
    hierarchical: bool = False

    def as_text(self, plpy, table_alias: str | None = None) -> str:
        """SQL reading this column's value as text (:func:`~plpy_anon.db.sqltext.text_of`)."""
        column = ident(plpy, self.name)
        return text_of(f"{table_alias}.{column}" if table_alias else column, self.builtin)

    @property
    def kind(self) -> str | None:
        if self.hierarchical:
            return "categorical"
        if self.type_name in NUMERIC_TYPES:
            return "numeric"
        if self.category in CATEGORICAL_CATEGORIES:
            return "categorical"
        return None


def output_type(col: Column, hierarchical: bool) -> str:
    """The SQL type a quasi-identifier is released as: its range type (a number or date), the
    lowest common ancestor's label (text, with a hierarchy) or the set of its values (text[])."""
    if col.kind == "numeric":
        return NUMERIC_TYPES[col.type_name][1]
    return "text" if hierarchical else "text[]"



COLUMNS_QUERY = """
SELECT a.attname::text AS name,
       -- a type outside pg_catalog by its qualified name: an "int4" of another schema (an enum,
       -- say) is not read as a number (a cast from it would run its owner's function)
       CASE WHEN bt.typnamespace = 'pg_catalog'::pg_catalog.regnamespace THEN bt.typname::text
            ELSE bt.oid::pg_catalog.regtype::text END AS type_name,
       bt.typnamespace = 'pg_catalog'::pg_catalog.regnamespace AS builtin,
       pg_catalog.format_type(a.atttypid, a.atttypmod) AS display_type,
       pg_catalog.format_type(bt.oid, CASE WHEN t.typtype = 'd' THEN t.typtypmod
                                           ELSE a.atttypmod END) AS base_display_type,
       bt.typcategory::text AS category,
       a.attnotnull AS not_null,
       EXISTS (SELECT 1 FROM pg_catalog.pg_index i
               WHERE i.indrelid = a.attrelid AND i.indisunique AND i.indnkeyatts = 1
                 AND i.indkey[0] = a.attnum AND i.indpred IS NULL) AS is_unique
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
-- a domain behaves as its base type
JOIN pg_catalog.pg_type bt ON bt.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END
WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""


def table_columns(plpy, tbl: Table) -> list[Column]:
    cols = relation_columns(plpy, tbl.oid)
    if not any(c.type_name in NUMERIC_TYPES for c in cols):
        return cols
    typed = set(hierarchy_columns(plpy, tbl))
    return [replace(c, hierarchical=True) if c.name in typed and c.type_name in NUMERIC_TYPES else c
            for c in cols]


def columns_as_built(plpy, tbl: Table, hierarchies) -> list[Column]:
    """The table's columns, a number or date column generalized by a hierarchy exactly when the
    release (its recorded ``hierarchies``) was: a hierarchy registered or dropped since changes
    no released column's type (a refresh keeps the form the release was created with)."""
    built = set(hierarchies)
    return [replace(c, hierarchical=c.name in built and c.type_name in NUMERIC_TYPES)
            for c in relation_columns(plpy, tbl.oid)]


def relation_columns(plpy, oid: int) -> list[Column]:
    """The columns of any relation (a release, a view a report reads), from the catalog."""
    rows = run(plpy, COLUMNS_QUERY, ["oid"], [oid])
    return [Column(r["name"], r["type_name"], r["display_type"], r["category"], r["not_null"],
                   r["is_unique"], r["builtin"], base_display_type=r["base_display_type"])
            for r in rows]


def column_named(tbl: Table, cols: list[Column], name: str) -> Column:
    for c in cols:
        if c.name == name:
            return c
    listing = ", ".join(c.name for c in cols)
    raise UndefinedObject(
        f'column "{name}" does not exist in table {tbl.label}',
        hint=f"Columns are: {listing}. Names are case-sensitive as stored.")


DECLARED_QUERY = """
SELECT column_name::text AS column_name, role FROM anon.column_roles WHERE source = $1::oid::regclass
"""


def declared_roles(plpy, oid: int) -> dict[str, str]:
    """The roles declared for the columns of relation ``oid`` (anon.column_roles)."""
    return {r["column_name"]: r["role"] for r in run(plpy, DECLARED_QUERY, ["oid"], [oid])}


def default_role(col: Column) -> str:
    return "identifier" if col.unique else "quasi_identifier"


def resolve_roles(plpy, tbl: Table, *, quasi_identifiers=None, sensitive=None, identifiers=None,
                  cols: list[Column] | None = None,
                  publishing: bool = True) -> list[tuple[Column, str]]:
    """Every column of the table with the role it takes in this release, in table order: its
    declaration, overridden by the call's lists, else its default. A release resolves its roles
    through ``identifiers.release_roles``, which also runs the identifier detector.

    With ``publishing`` (every release), sensitive columns, which releases keep in their own
    type, are refused if that type is a range type running another role's code on ANALYZE
    (:func:`~plpy_anon.db.guards.check_range_columns`)."""
    cols = cols if cols is not None else table_columns(plpy, tbl)
    roles = {c.name: default_role(c) for c in cols}
    declared = declared_roles(plpy, tbl.oid)
    for name, role in declared.items():
        if name in roles:  # a declaration for a column dropped since is ignored
            roles[name] = role
    given: dict[str, str] = {}
    for role, names in (("quasi_identifier", quasi_identifiers), ("sensitive", sensitive),
                        ("identifier", identifiers)):
        for name in names or ():
            if name is None:
                raise InvalidParameter(f"the {role} list contains NULL", hint="Remove the NULL.")
            column_named(tbl, cols, name)
            if name in given and given[name] != role:
                raise InvalidParameter(
                    f'column "{name}" is given as both {given[name]} and {role}',
                    hint="Give each column one role.")
            given[name] = role
    if quasi_identifiers is not None:
        # An explicit QI list is the whole QI set: other would-be QIs are not released.
        for name, role in roles.items():
            if role == "quasi_identifier" and name not in given:
                roles[name] = "ignored"
    roles.update(given)
    if publishing:
        guards.check_range_columns(plpy, tbl.oid, f"table {tbl.label}",
                            [c.name for c in cols if roles[c.name] == "sensitive"])
    return [(c, roles[c.name]) for c in cols]


def check_quasi_identifier(tbl: Table, col: Column) -> None:
    if col.kind is None:
        raise UnsupportedType(
            f'column "{col.name}" of {tbl.label} has type {col.display_type}, which '
            "cannot be generalized as a quasi-identifier",
            hint=f"Declare another role for it, e.g. SELECT anon.set_column_role("
                 f"'{tbl.label}', '{col.name}', 'ignored'), or pass "
                 "quasi_identifiers => ARRAY[...] without it.")


@sql_entry
def set_column_role(plpy, source, column_name, role):
    tbl = guards.table(plpy, source)
    col = column_named(tbl, table_columns(plpy, tbl), column_name)
    if role is None:
        run(plpy, "DELETE FROM anon.column_roles WHERE source = $1::oid::regclass AND column_name = $2",
            ["oid", "text"], [tbl.oid, col.name])
        return
    if role not in ROLES:
        raise InvalidParameter(f'unknown role "{role}"', hint="Roles are: " + ", ".join(ROLES) + ".")
    if role == "quasi_identifier":
        check_quasi_identifier(tbl, col)
    run(plpy, """
        INSERT INTO anon.column_roles (source, column_name, role) VALUES ($1::oid::regclass, $2, $3)
        ON CONFLICT (source, column_name) DO UPDATE SET role = EXCLUDED.role""",
        ["oid", "text", "text"], [tbl.oid, col.name, role])


@sql_entry
def describe_roles(plpy, source):
    tbl = guards.table_in_query(plpy, source)          # STABLE; reads the catalog only
    declared = declared_roles(plpy, tbl.oid)
    with_hierarchy = set(hierarchy_columns(plpy, tbl))
    rows = []
    for col, role in resolve_roles(plpy, tbl, publishing=False):
        rows.append((col.name, col.display_type, role, col.name in declared,
                     released_as(col, role, col.name in with_hierarchy)))
    return rows


def released_as(col: Column, role: str, has_hierarchy: bool) -> str | None:
    if role in ("identifier", "ignored"):
        return "dropped"
    if role == "sensitive":
        return col.display_type
    if col.kind == "numeric":
        return NUMERIC_TYPES[col.type_name][1]
    if col.kind == "categorical":
        return "text (hierarchy)" if has_hierarchy else "text[]"
    return None


#: the settings under which a hierarchical column's values are read as text, wherever they are
#: (the builders, their coverage check, every release): the leaves a hierarchy stores must be the
#: texts a release reads, whoever's session registered it (the release query of the Mondrian
#: family pins the same in its SQL function)
HIERARCHY_TEXT_SETTINGS = {"DateStyle": "ISO, YMD", "TimeZone": "UTC", "extra_float_digits": "1"}


def hierarchy_text_settings(plpy):
    """Read values as a hierarchy's leaves are, for this transaction's block."""
    return local_settings(plpy, **HIERARCHY_TEXT_SETTINGS)


def hierarchy_columns(plpy, tbl: Table) -> list[str]:
    rows = run(plpy, "SELECT DISTINCT column_name::text AS c FROM anon.hierarchies "
                     "WHERE source = $1::oid::regclass", ["oid"], [tbl.oid])
    return [r["c"] for r in rows]


def load_hierarchy(plpy, tbl: Table, column_name: str) -> Hierarchy | None:
    # custodians may not read anon.hierarchies' paths (their leaves are the column's values):
    # the view shows those of the columns the role running this may read
    rows = run(plpy, "SELECT path FROM anon.readable_hierarchies "
                     "WHERE source = $1::oid::regclass AND column_name = $2 ORDER BY leaf",
               ["oid", "text"], [tbl.oid, column_name])
    if not rows:
        return None
    from plpy_anon.core.hierarchy import Hierarchy  # numpy: only where a hierarchy is used
    return Hierarchy.from_paths([list(r["path"]) for r in rows])


def _store_hierarchy(plpy, tbl: Table, column_name: str, hierarchy: Hierarchy, paths,
                     typed: bool = False) -> int:
    """Register ``paths``; a number or date column only when ``typed`` (the builders that read
    its values: its leaves are its values' text)."""
    col = column_named(tbl, table_columns(plpy, tbl), column_name)
    if col.category not in CATEGORICAL_CATEGORIES and not (typed and col.type_name in NUMERIC_TYPES):
        raise UnsupportedType(
            f'column "{col.name}" has type {col.display_type}; hierarchies apply to categorical '
            "(text, boolean, enum) columns", hint="Numeric and date columns are released as ranges.")
    check_hierarchy_covers(plpy, tbl, col, hierarchy)
    run(plpy, "DELETE FROM anon.hierarchies WHERE source = $1::oid::regclass AND column_name = $2",
        ["oid", "text"], [tbl.oid, col.name])
    run(plpy, """
        INSERT INTO anon.hierarchies (source, column_name, leaf, path)
        SELECT $1::oid::regclass, $2, x.path[1], x.path
        FROM jsonb_to_recordset($3) AS x(path text[])""",
        ["oid", "text", "jsonb"], [tbl.oid, col.name, json.dumps([{"path": p} for p in paths])])
    return len(paths)


def check_hierarchy_covers(plpy, tbl: Table, col: Column, hierarchy: Hierarchy) -> None:
    """Every non-NULL value present in the column must be a leaf of its hierarchy."""
    query = (f"SELECT DISTINCT {col.as_text(plpy)} AS v FROM {tbl.quoted(plpy)} "
             f"WHERE {ident(plpy, col.name)} IS NOT NULL")
    leaves = set(hierarchy.leaves)
    with hierarchy_text_settings(plpy):
        present = [r["v"] for r in plpy.execute(query)]
    missing = sorted(v for v in present if v not in leaves)
    if missing:
        from plpy_anon.core.hierarchy import uncovered_error
        raise uncovered_error(col.name, missing)


def _clean_paths(paths) -> list[list[str]]:
    """Rows of a (possibly NULL-padded) 2-D array, without the padding."""
    if not paths:
        raise InvalidParameter("the hierarchy is empty", hint="Give one row per leaf: leaf, parent, ..., root.")
    rows = paths if isinstance(paths[0], list) else [paths]
    return [[v for v in row if v is not None] for row in rows]


@sql_entry
def set_hierarchy(plpy, source, column_name, paths):
    tbl = guards.table(plpy, source)
    clean = _clean_paths(paths)
    from plpy_anon.core.hierarchy import Hierarchy
    hierarchy = Hierarchy.from_paths(clean)
    return _store_hierarchy(plpy, tbl, column_name, hierarchy, clean)


@sql_entry
def set_hierarchy_prefix(plpy, source, column_name, mask, step):
    tbl = guards.table(plpy, source)
    col = column_named(tbl, table_columns(plpy, tbl), column_name)
    with hierarchy_text_settings(plpy):
        values = [r["v"] for r in plpy.execute(
            f"SELECT DISTINCT {col.as_text(plpy)} AS v FROM {tbl.quoted(plpy)} "
            f"WHERE {ident(plpy, col.name)} IS NOT NULL")]
    if not values:
        raise InsufficientData(f'column "{col.name}" holds no value to build a hierarchy from',
                               hint="Load the table first; the hierarchy covers the values present.")
    from plpy_anon.core.hierarchy import Hierarchy, prefix_paths
    paths = prefix_paths(values, mask, step)
    return _store_hierarchy(plpy, tbl, column_name, Hierarchy.from_paths(paths), paths)


@sql_entry
def set_hierarchy_csv(plpy, source, column_name, csv, sep):
    tbl = guards.table(plpy, source)
    if csv is None or not csv.strip():
        raise InvalidParameter("the hierarchy CSV is empty", hint="One line per leaf: leaf;parent;...;*")
    line = csv.strip()
    if "\n" not in line and sep not in line and ("/" in line or line.lower().endswith((".csv", ".txt"))):
        raise InvalidParameter(
            f"csv is the hierarchy's text, not a file name: {line!r} has no {sep!r} separator",
            hint="Pass the file's contents: in psql, \\set h `cat hierarchy.csv` then "
                 "anon.set_hierarchy_csv('t', 'c', :'h'); a superuser may pass pg_read_file(path).")
    from plpy_anon.core.hierarchy import Hierarchy, csv_rows
    clean = csv_rows(csv, sep)
    hierarchy = Hierarchy.from_paths(clean)
    return _store_hierarchy(plpy, tbl, column_name, hierarchy, clean)


def _typed_values(plpy, tbl: Table, column_name: str, kinds: tuple[str, ...], what: str,
                  extra: str = "") -> tuple[Column, list[dict]]:
    """The column (one of the NUMERIC_TYPES of ``kinds``) and its distinct non-NULL values, as
    text (the hierarchy's leaves: the text a release reads) plus ``extra`` expressions of ``c``."""
    col = column_named(tbl, table_columns(plpy, tbl), column_name)
    if col.type_name not in NUMERIC_TYPES or NUMERIC_TYPES[col.type_name][2] not in kinds:
        raise UnsupportedType(
            f'column "{col.name}" has type {col.display_type}; {what}',
            hint="anon.set_hierarchy_intervals takes numbers, anon.set_hierarchy_dates dates and "
                 "timestamps, anon.set_hierarchy_prefix codes.")
    column = ident(plpy, col.name)
    with hierarchy_text_settings(plpy):      # date_part of a timestamptz too: in UTC
        rows = list(plpy.execute(
            f"SELECT DISTINCT {col.as_text(plpy)} AS v{extra.replace('%(c)s', column)} "
            f"FROM {tbl.quoted(plpy)} WHERE {column} IS NOT NULL"))
    if not rows:
        raise InsufficientData(f'column "{col.name}" holds no value to build a hierarchy from',
                               hint="Load the table first; the hierarchy covers the values present.")
    return col, rows


@sql_entry
def set_hierarchy_intervals(plpy, source, column_name, widths, origin):
    tbl = guards.table(plpy, source)
    col, rows = _typed_values(plpy, tbl, column_name, ("int", "float"),
                              "interval hierarchies apply to number columns")
    from decimal import Decimal, InvalidOperation

    from plpy_anon.core.hierarchy import Hierarchy, interval_paths
    values = []
    for r in rows:
        try:
            values.append((r["v"], Decimal(r["v"])))
        except InvalidOperation:
            raise InvalidParameter(f"the value {r['v']!r} has no interval",
                                   hint="NaN and infinities cannot be placed in an interval.") from None
    paths = interval_paths(values, widths, origin)
    return _store_hierarchy(plpy, tbl, col.name, Hierarchy.from_paths(paths), paths, typed=True)


@sql_entry
def set_hierarchy_dates(plpy, source, column_name, levels):
    tbl = guards.table(plpy, source)
    parts = "".join(f", pg_catalog.date_part('{p}', %(c)s) AS {p}" for p in ("year", "month", "day"))
    col, rows = _typed_values(plpy, tbl, column_name, ("date", "timestamp", "timestamptz"),
                              "date hierarchies apply to date and timestamp columns", parts)
    from plpy_anon.core.hierarchy import Hierarchy, date_paths
    paths = date_paths([(r["v"], r["year"], r["month"], r["day"]) for r in rows], levels)
    return _store_hierarchy(plpy, tbl, col.name, Hierarchy.from_paths(paths), paths, typed=True)
