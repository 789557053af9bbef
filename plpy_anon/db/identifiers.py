"""anon.detect_identifiers, and the privacy-by-default check every release makes.

The detector itself is pure (``plpy_anon.core.identifiers``); this module reads ONE sample of the
table (one query: ``ORDER BY random() LIMIT n`` over the table, with the exact row count from a
window, or ``TABLESAMPLE SYSTEM`` first when the table is much larger than the sample) and turns
the findings into rows or into the refusal.

The check (``check_undeclared``, called by ``release_roles``): a column that would get its
role by DEFAULT -- not declared in ``anon.column_roles``, not named in the call's lists, no
explicit ``quasi_identifiers`` list -- and is not a unique key would be released as a
quasi-identifier. If the detector finds it identifying, the release is refused with SQLSTATE
42P10 (``IdentifyingColumns``), naming each column with its evidence and the call that declares
it. It runs once, when a release is created; a refresh re-uses the roles recorded at creation and
does not re-check.
"""
from __future__ import annotations

from plpy_anon.core.errors import InvalidParameter
from plpy_anon.core.identifiers import ColumnSample, Finding, IdentifyingColumns, blocking, detect
from plpy_anon.db import columns as catalog
from plpy_anon.db import guards
from plpy_anon.db.encodings import sql_ascii
from plpy_anon.db.errors import sql_entry
from plpy_anon.db.sqltext import run

DEFAULT_SAMPLE = 1000
MAX_SAMPLE = 100_000
# longest text kept per sampled value (formats and distinctness are decided well before this)
MAX_VALUE_CHARS = 500
# use TABLESAMPLE SYSTEM when the table's estimated rows exceed the sample this many times
TABLESAMPLE_FACTOR = 20


def _check_sample_size(sample_size) -> int:
    if sample_size is None:
        raise InvalidParameter("sample_size must not be NULL",
                               hint=f"Omit it (default {DEFAULT_SAMPLE}) or pass e.g. sample_size => 1000.")
    if not 1 <= sample_size <= MAX_SAMPLE:
        raise InvalidParameter(f"sample_size must be between 1 and {MAX_SAMPLE}, got {sample_size}",
                               hint=f"Pass e.g. sample_size => {DEFAULT_SAMPLE}.")
    return int(sample_size)


def sample_columns(plpy, tbl: guards.Table, cols: list[catalog.Column],
                   sample_size: int = DEFAULT_SAMPLE) -> list[ColumnSample]:
    """One random sample of the columns (values as text), with the table's row count."""
    if not cols:
        return []
    # the whole table: a partitioned table or an inheritance parent keeps its rows in its
    # descendants (the parent's own reltuples, or a scan of the parent alone, sees none of them)
    estimate = run(plpy, f"""
        WITH RECURSIVE {guards.INHERITANCE_TREE}
        SELECT pg_catalog.sum(GREATEST(c.reltuples, 0))::float8 AS n
        FROM pg_catalog.pg_class c JOIN tree USING (oid)""", ["oid"], [tbl.oid])[0]["n"]
    # a SQL_ASCII database's texts as their bytes: PL/Python would refuse those that are not
    # UTF-8 (db.encodings), and the detector looks at shapes, which a replaced byte keeps
    as_bytes = sql_ascii(plpy)
    read = "pg_catalog.convert_to(%s, 'SQL_ASCII')" if as_bytes else "%s"
    select = ", ".join(f"{read % f'pg_catalog.left({c.as_text(plpy)}, {MAX_VALUE_CHARS})'} AS c{i}"
                       for i, c in enumerate(cols))
    if estimate is not None and estimate > TABLESAMPLE_FACTOR * sample_size:
        # a few times the sample in random blocks, then a random subset of it
        percent = min(100.0, 100.0 * 4 * sample_size / estimate)
        plan = plpy.prepare(f"SELECT {select} FROM {tbl.quoted(plpy)} TABLESAMPLE SYSTEM ($1) "
                            "ORDER BY pg_catalog.random() LIMIT $2", ["float8", "int4"])
        rows = plpy.execute(plan, [percent, sample_size])
        total = max(int(estimate), len(rows))
    else:
        plan = plpy.prepare(f"SELECT {select}, pg_catalog.count(*) OVER () AS n_rows "
                            f"FROM {tbl.quoted(plpy)} ORDER BY pg_catalog.random() LIMIT $1",
                            ["int4"])
        rows = plpy.execute(plan, [sample_size])
        total = int(rows[0]["n_rows"]) if rows.nrows() else 0
    def value(v):
        return v if v is None or not as_bytes else bytes(v).decode("utf-8", "replace")

    return [ColumnSample(c.name, c.type_name, c.category,
                         tuple(value(r[f"c{i}"]) for r in rows), total, c.unique)
            for i, c in enumerate(cols)]


def findings_for(plpy, tbl: guards.Table, cols: list[catalog.Column],
                 sample_size: int = DEFAULT_SAMPLE) -> list[Finding]:
    return detect(sample_columns(plpy, tbl, cols, sample_size))


@sql_entry
def detect_identifiers(plpy, source, sample_size):
    if source is None:
        raise InvalidParameter("source must not be NULL",
                               hint="Name a table: SELECT * FROM anon.detect_identifiers('patients');")
    sample_size = _check_sample_size(sample_size)
    tbl = guards.table(plpy, source)
    cols = catalog.table_columns(plpy, tbl)
    declared = catalog.declared_roles(plpy, tbl.oid)
    by_name = {c.name: c for c in cols}
    rows = []
    for f in findings_for(plpy, tbl, cols, sample_size):
        col = by_name[f.column]
        role = declared.get(f.column)
        blocks = f.blocks_release and role is None and not col.unique
        rows.append((f.column, col.display_type, f.kind, f.confidence, f.evidence, role, blocks))
    return rows


def _literal(plpy, value: str) -> str:
    return plpy.quote_literal(value)


def release_roles(plpy, tbl: guards.Table, *, quasi_identifiers=None, sensitive=None,
                  identifiers=None, cols: list[catalog.Column] | None = None
                  ) -> list[tuple[catalog.Column, str]]:
    """A release's columns and their roles (``columns.resolve_roles``), after refusing undeclared
    columns that would be released as quasi-identifiers by default and look identifying
    (:func:`check_undeclared`; an explicit quasi_identifiers list names them all)."""
    roles = catalog.resolve_roles(plpy, tbl, quasi_identifiers=quasi_identifiers, sensitive=sensitive,
                                  identifiers=identifiers, cols=cols)
    if quasi_identifiers is None:
        declared = catalog.declared_roles(plpy, tbl.oid)
        given = {*(sensitive or ()), *(identifiers or ())}
        check_undeclared(plpy, tbl, [c for c, role in roles if role == "quasi_identifier"
                                     and c.name not in declared and c.name not in given])
    return roles


def check_undeclared(plpy, tbl: guards.Table, defaulted: list[catalog.Column]) -> None:
    """Refuse (IdentifyingColumns, 42P10) if any of ``defaulted`` -- columns about to be released
    as quasi-identifiers by default -- looks identifying."""
    if not defaulted:
        return
    found = blocking(findings_for(plpy, tbl, defaulted))
    if not found:
        return
    table_literal = _literal(plpy, tbl.quoted(plpy))
    names = ", ".join(f'"{name}"' for name in found)
    detail = "\n".join(
        f'column "{name}": ' + "; ".join(f"{f.kind} ({f.confidence}): {f.evidence}" for f in fs)
        for name, fs in found.items())
    declare = " ".join(f"SELECT anon.set_column_role({table_literal}, {_literal(plpy, name)}, "
                       "'identifier');" for name in found)
    raise IdentifyingColumns(
        f"table {tbl.label} has undeclared column(s) that look identifying: {names}; "
        "they would be released as quasi-identifiers by default",
        detail=detail,
        hint=f"Declare each one's role before releasing, e.g. {declare} (or 'sensitive', "
             "'ignored', 'quasi_identifier' if that is what it is). A role declared with "
             "anon.set_column_role, or an explicit quasi_identifiers => ARRAY[...] / identifiers "
             f"=> ARRAY[...] list in the call, overrides this check. "
             f"SELECT * FROM anon.detect_identifiers({table_literal}) lists every finding.")
