"""A release written as Parquet with its columns' types: what an analyst's tool reads without parsing
PostgreSQL's text forms (the ``[parquet]`` extra: pyarrow).

* integers, booleans: their Arrow types (int16/32/64, bool); floats (float32/64) cast from their
  exact text, NaN and ±Infinity included;
* dates and timestamps: date32, timestamp[us] (with time zone: UTC); ±infinity has no Parquet
  form, so a release holding one is refused, naming the value;
* numeric: a string of its exact digits (no float rounding, no decimal precision to guess);
* ranges (a generalized quasi-identifier): a struct ``lower, upper, lower_inclusive,
  upper_inclusive, empty`` whose bounds have the element's type (NULL: unbounded), the whole
  struct NULL for a NULL range;
* arrays (value sets): lists of their element's type (an array's lower bound, as in
  ``[5:6]={7,8}``, is not kept);
* any other type (json, uuid, interval, bytea, ...): its PostgreSQL text form, as a string.

The server writes each row as one line of JSON (``COPY ... TO STDOUT``, built by
``json_build_object`` in C) and pyarrow's JSON reader parses it against the schema in C++: no
Python object per value (a Python loop over the values took 54 s for 1M rows, this 13 s). The
lines are parsed ``CHUNK_BYTES`` at a time and written as one row group each, so the client's
memory does not grow with the release. The release's metadata (method, k, l, t, verification,
risk, ...) is stored in the file's key-value metadata under ``plpy_anon``.
"""
from __future__ import annotations

import io
import json
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
import pyarrow.parquet as pq
from psycopg import sql

from plpy_anon.client import errors

CHUNK_BYTES = 16 << 20

INTEGERS = {"smallint": pa.int16(), "integer": pa.int32(), "bigint": pa.int64(), "oid": pa.int64()}
FLOATS = {"real": pa.float32(), "double precision": pa.float64()}
# parsed by the JSON reader from json_build_object's own rendering of the value
AS_JSON = {**INTEGERS, "boolean": pa.bool_(),
           "timestamp without time zone": pa.timestamp("us"),
           "timestamp with time zone": pa.timestamp("us", tz="UTC")}
RANGE_ELEMENTS = {"int4range": "integer", "int8range": "bigint", "numrange": "numeric",
                  "daterange": "date", "tsrange": "timestamp without time zone",
                  "tstzrange": "timestamp with time zone"}


def arrow_type(sql_type: str) -> pa.DataType:
    """The Arrow type a column of ``sql_type`` (format_type's spelling) is written as."""
    if sql_type.endswith("[]"):
        return pa.list_(arrow_type(sql_type[:-2]))
    if sql_type in RANGE_ELEMENTS:
        return range_struct(arrow_type(RANGE_ELEMENTS[sql_type]))
    return AS_JSON.get(sql_type) or FROM_TEXT.get(sql_type) or pa.string()


def range_struct(bound: pa.DataType) -> pa.DataType:
    """A range as a struct of its bounds (of type ``bound``, NULL for unbounded) and flags."""
    return pa.struct([("lower", bound), ("upper", bound), ("lower_inclusive", pa.bool_()),
                      ("upper_inclusive", pa.bool_()), ("empty", pa.bool_())])


#: read as their text and cast by Arrow (:func:`typed`): floats (JSON has no NaN or Infinity),
#: dates (the JSON reader parses timestamps only); ±infinity fails the cast
FROM_TEXT = {**FLOATS, "date": pa.date32()}


def read_type(sql_type: str) -> pa.DataType:
    """The type the JSON reader parses a column as (see :data:`FROM_TEXT`)."""
    if sql_type.endswith("[]"):
        return pa.list_(read_type(sql_type[:-2]))
    if sql_type in RANGE_ELEMENTS:
        return range_struct(read_type(RANGE_ELEMENTS[sql_type]))
    return pa.string() if sql_type in FROM_TEXT else arrow_type(sql_type)


def json_value(expression: sql.Composable, sql_type: str) -> sql.Composable:
    """``expression`` (of ``sql_type``) as json_build_object is given it: as it is where the
    reader parses PostgreSQL's JSON rendering, else its text (pg_catalog's cast: core types only
    reach here, anon.release_metadata refuses the others)."""
    if sql_type in RANGE_ELEMENTS:
        element = RANGE_ELEMENTS[sql_type]
        parts = [("lower", json_value(sql.SQL("pg_catalog.lower({})").format(expression), element)),
                 ("upper", json_value(sql.SQL("pg_catalog.upper({})").format(expression), element)),
                 ("lower_inclusive", sql.SQL("pg_catalog.lower_inc({})").format(expression)),
                 ("upper_inclusive", sql.SQL("pg_catalog.upper_inc({})").format(expression)),
                 ("empty", sql.SQL("pg_catalog.isempty({})").format(expression))]
        return sql.SQL("CASE WHEN {e} IS NULL THEN NULL ELSE pg_catalog.json_build_object({parts}) END").format(
            e=expression, parts=sql.SQL(", ").join(sql.SQL("{}, {}").format(sql.Literal(k), v) for k, v in parts))
    if sql_type.endswith("[]"):
        element = sql_type[:-2]
        return expression if element in AS_JSON else sql.SQL("{}::text[]").format(expression)
    if sql_type == "oid":                         # json renders an oid as a string
        return sql.SQL("{}::int8").format(expression)
    return expression if sql_type in AS_JSON else sql.SQL("{}::text").format(expression)


def typed(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """The parsed chunk in the file's schema: what was read as text cast to its type."""
    arrays = [table.column(field.name) if table.schema.field(field.name).type == field.type
              else pc.cast(table.column(field.name), field.type) for field in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def write(connection: psycopg.Connection, meta: dict, path: Path, order: sql.Composable) -> int:
    """Write the release ``meta["relation"]`` (its ``meta["columns"]``) to ``path`` in ``order``,
    inside the caller's transaction; returns the rows written."""
    columns = meta["columns"]
    schema = pa.schema([(c["name"], arrow_type(c["type"])) for c in columns],
                       metadata={"plpy_anon": json.dumps(meta, sort_keys=True, default=str)})
    parse = pa_json.ParseOptions(explicit_schema=pa.schema([(c["name"], read_type(c["type"])) for c in columns]),
                                 unexpected_field_behavior="error")
    row = sql.SQL("pg_catalog.json_build_object({})").format(sql.SQL(", ").join(
        sql.SQL("{}, {}").format(sql.Literal(c["name"]), json_value(sql.Identifier(c["name"]), c["type"]))
        for c in columns))
    # csv with a delimiter and quote JSON never holds raw (it escapes control characters): each
    # line is the JSON as the server wrote it, nothing escaped or quoted
    copy = sql.SQL("COPY (SELECT {} FROM {} ORDER BY {}) TO STDOUT "
                   "(FORMAT csv, DELIMITER E'\\x02', QUOTE E'\\x01')").format(
        row, sql.SQL(meta["relation"]), order)
    written = 0
    with pq.ParquetWriter(path, schema) as writer, connection.cursor().copy(copy) as rows:
        pending, size = [], 0

        def flush() -> int:
            if not pending:
                return 0
            data = b"".join(pending)
            pending.clear()
            try:
                table = pa_json.read_json(io.BytesIO(data), parse_options=parse)
                table = typed(table, schema)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
                raise errors.InvalidParameter(
                    f"the release holds a value Parquet cannot: {str(error).splitlines()[0]}",
                    hint="Export it as csv or sql, which keep PostgreSQL's text forms (infinity included).") from error
            writer.write_table(table)
            return table.num_rows

        for line in rows:                      # one row per block in COPY's text-based formats
            pending.append(bytes(line))
            size += len(line)
            if size >= CHUNK_BYTES:
                written += flush()
                size = 0
        written += flush()
    return written
