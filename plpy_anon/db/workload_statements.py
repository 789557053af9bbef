"""The analysts' statements as the server stores them (anon.workload, pg_stat_statements), read
and parsed for one table: what ``anon.learn_priorities``, the release report and the guard of a
learned release (methods/prioritized_mondrian.py) learn from or measure on."""
from __future__ import annotations

from plpy_anon.core.errors import InsufficientData, InvalidParameter
from plpy_anon.core.workload import restrict_predicate
from plpy_anon.db import columns as catalog
from plpy_anon.db.sqltext import run

CATALOG_QUERY = """
SELECT n.nspname::text AS s, c.relname::text AS t, a.attname::text AS c,
       pg_catalog.format_type(a.atttypid, a.atttypmod) AS ty
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
  AND n.oid <> (SELECT x.relnamespace FROM pg_catalog.pg_class x WHERE x.oid = 'anon.releases'::pg_catalog.regclass)
  AND n.nspname NOT LIKE 'pg_temp%'
ORDER BY 1, 2, a.attnum
"""

PGSS_SCHEMA = """
SELECT n.nspname::text AS s FROM pg_catalog.pg_extension e
JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_stat_statements'
"""


SIZE_SETTING = "plpy_anon.max_statement_size"


def max_statement_bytes(plpy) -> int:
    """The bound on a statement's size (``plpy_anon.max_statement_size``: any role may set it,
    as work_mem; a size such as '64kB', or a number of bytes), else the default."""
    from plpy_anon.querylog.parse import MAX_STATEMENT_BYTES  # sqlglot: only the learner needs it
    raw = run(plpy, "SELECT pg_catalog.current_setting($1, true) AS v", ["text"],
              [SIZE_SETTING])[0]["v"]
    if raw is None or not raw.strip():
        return MAX_STATEMENT_BYTES
    try:
        with plpy.subtransaction():
            size = run(plpy, "SELECT pg_catalog.pg_size_bytes($1) AS b", ["text"], [raw])[0]["b"]
    except plpy.SPIError:
        size = None
    if size is None or size < 1:
        raise InvalidParameter(
            f'{SIZE_SETTING} = "{raw}" is not a positive size',
            hint=f"Set it like work_mem (SET {SIZE_SETTING} = '64kB'), or RESET it "
                 f"(default {MAX_STATEMENT_BYTES // 1024}kB).")
    return int(size)


def catalog_schema(plpy) -> dict:
    """``{schema: {table: {column: type}}}`` of the database, for the statement resolver."""
    schema: dict = {}
    for r in run(plpy, CATALOG_QUERY):
        schema.setdefault(r["s"], {}).setdefault(r["t"], {})[r["c"]] = r["ty"]
    return schema


def stored_statements(plpy, tbl, use_pg_stat_statements=True) -> list[tuple[str, int]]:
    """``(query, frequency)`` from anon.workload and, if available, pg_stat_statements (only
    the statements of roles that may read ``tbl``)."""
    statements = [(r["query"], int(r["frequency"])) for r in run(
        plpy, "SELECT query, sum(frequency)::int8 AS frequency FROM anon.workload GROUP BY query")]
    if use_pg_stat_statements:
        statements += pg_stat_statements(plpy, tbl.oid)
    return statements


# A role's statements count for a source only if the role may SELECT every column of it (the
# table, or each column granted): a statement of a role that cannot read the source reads some
# other relation of the same name (its temporary table, its own schema), never the source.
PGSS_READERS_QUERY = """
WITH recorded AS MATERIALIZED (
  SELECT s.userid, s.query, s.calls FROM {view} s
  WHERE s.dbid = (SELECT d.oid FROM pg_catalog.pg_database d
                  WHERE d.datname = pg_catalog.current_database())),
readers AS (
  SELECT u.userid FROM (SELECT DISTINCT r.userid FROM recorded r) u
  WHERE pg_catalog.has_table_privilege(u.userid, $1, 'SELECT')
     OR NOT EXISTS (SELECT FROM pg_catalog.pg_attribute a
                    WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
                      AND NOT pg_catalog.has_column_privilege(u.userid, $1, a.attnum, 'SELECT')))
SELECT r.query, sum(r.calls)::int8 AS calls FROM recorded r
WHERE r.userid IN (SELECT userid FROM readers) GROUP BY r.query
"""


def pg_stat_statements(plpy, source_oid) -> list[tuple[str, int]]:
    """``(query, calls)`` of this database's pg_stat_statements, from roles that may read the
    source ``source_oid`` (PGSS_READERS_QUERY)."""
    rows = run(plpy, PGSS_SCHEMA)
    if not rows:
        return []
    view = f"{plpy.quote_ident(rows[0]['s'])}.pg_stat_statements"
    try:
        with plpy.subtransaction():
            found = run(plpy, PGSS_READERS_QUERY.format(view=view), ["oid"], [source_oid])
    except plpy.SPIError as error:  # installed but not in shared_preload_libraries, no rights
        plpy.warning(f"pg_stat_statements is installed but cannot be read: {error}",
                     hint="Add it to shared_preload_libraries (and restart), or grant "
                          "pg_read_all_stats; anon.workload is used alone.")
        return []
    return [(r["query"], int(r["calls"])) for r in found if r["query"] and r["calls"]]


def fit_learner(plpy, tbl, statements, projection_share=0.5):
    from plpy_anon.querylog.priorities import PriorityLearner  # sqlglot: only the learner needs it
    learner = PriorityLearner(f"{tbl.schema}.{tbl.name}", projection_share=projection_share,
                              default_schema=tbl.schema,
                              max_statement_bytes=max_statement_bytes(plpy))
    return learner.fit(statements, catalog_schema(plpy))


def qi_workload(plpy, tbl, qis, use_pg_stat_statements=True):
    """(texts, predicates, frequencies) of the stored statements with a predicate on the QIs
    ``qis`` of ``tbl`` (predicates restricted to the QIs whose values can be compared)."""
    evaluable = [c.name for c in qis
                 if c.kind == "categorical"
                 or catalog.NUMERIC_TYPES[c.type_name][2] in ("int", "float")]
    statements = stored_statements(plpy, tbl, use_pg_stat_statements)
    if not statements:
        return [], [], []
    try:
        learner = fit_learner(plpy, tbl, statements)
    except InsufficientData:  # nothing reads the table: no workload to measure
        return [], [], []
    texts, predicates, frequencies = [], [], []
    for (predicate, frequency), text in zip(learner.queries_, learner.query_texts_):
        restricted = restrict_predicate(predicate, evaluable)
        if restricted is not None:
            texts.append(text)
            predicates.append(restricted)
            frequencies.append(frequency)
    return texts, predicates, frequencies
