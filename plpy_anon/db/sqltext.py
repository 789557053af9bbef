"""Building SQL text safely inside the backend: quoted identifiers, cached prepared statements."""
from __future__ import annotations

import contextlib
import json
import math

from plpy_anon.core.errors import InvalidParameter
from plpy_anon.db import extschema


def ident(plpy, *parts: str) -> str:
    """A (possibly qualified) identifier, each part quoted as needed: ident(plpy, 'My Schema', 't')."""
    return ".".join(plpy.quote_ident(p) for p in parts)


_PLANS: dict = {}


def run(plpy, query: str, types: list[str] | tuple = (), args: list | tuple = ()):
    """Execute ``query`` with bound parameters ``$1..$n`` of ``types``; plans are cached per backend.

    Only catalog queries whose text is a constant go through here, so the cache stays small.
    """
    key = (query, tuple(types), extschema.name())   # the schema: the plan names it
    plan = _PLANS.get(key)
    if plan is None:
        plan = plpy.prepare(query, list(types))
        _PLANS[key] = plan
    return plpy.execute(plan, list(args))


def progress(plpy, message: str) -> None:
    """A NOTICE when the session asked for progress (SET plpy_anon.progress = on): the client
    shows these phases; psql users and pg_cron are not spammed."""
    if run(plpy, "SELECT pg_catalog.current_setting('plpy_anon.progress', true) AS p")[0]["p"] == "on":
        plpy.notice(f"plpy_anon: {message}")


@contextlib.contextmanager
def local_settings(plpy, **values: str):
    """Run the block with configuration parameters set for this transaction only
    (``set_config(name, value, true)``), and put back the values they had however it ends:
    ``with local_settings(plpy, work_mem="256MB", jit="off"): ...``."""
    previous = {name: run(plpy, "SELECT pg_catalog.current_setting($1) AS v", ["text"], [name])[0]["v"]
                for name in values}
    try:
        for name, value in values.items():
            run(plpy, "SELECT pg_catalog.set_config($1, $2, true)", ["text", "text"], [name, value])
        yield
    finally:
        for name, value in previous.items():
            run(plpy, "SELECT pg_catalog.set_config($1, $2, true)", ["text", "text"], [name, value])


#: plpy_anon.build_work_mem's default: the work_mem of a build's queries (the release query, its
#: check), so that a 2M-row build hashes and sorts in memory instead of writing temporary files
DEFAULT_BUILD_WORK_MEM = "256MB"


def build_work_mem(plpy) -> str:
    """The work_mem a build runs with: ``plpy_anon.build_work_mem`` (any role may set it: it only
    trades memory for temporary files; default :data:`DEFAULT_BUILD_WORK_MEM`), or the session's
    own work_mem when that is larger. A value that is no size of at least 64kB (work_mem's least)
    is refused, naming the setting."""
    wanted = run(plpy, "SELECT pg_catalog.current_setting('plpy_anon.build_work_mem', true) AS v")[0]["v"]
    wanted = wanted.strip() if wanted and wanted.strip() else DEFAULT_BUILD_WORK_MEM
    # a number without a unit is kB, as for work_mem (pg_size_bytes would read bytes)
    size = f"{wanted}kB" if wanted.isdigit() else wanted
    try:
        with plpy.subtransaction():
            row = run(plpy, """
                SELECT pg_catalog.pg_size_bytes($1) AS wanted,
                       pg_catalog.pg_size_bytes(pg_catalog.current_setting('work_mem')) AS session""",
                      ["text"], [size])[0]
    except plpy.SPIError:
        row = None
    if row is None or row["wanted"] < 65536:
        raise InvalidParameter(
            f'plpy_anon.build_work_mem = "{wanted}" is not a size of at least 64kB',
            hint="Set it like work_mem (SET plpy_anon.build_work_mem = '256MB'), or RESET it.")
    if row["wanted"] <= row["session"]:
        return run(plpy, "SELECT pg_catalog.current_setting('work_mem') AS v")[0]["v"]
    return f"{int(row['wanted']) // 1024}kB"


#: the memory a build's backend may hold itself (docs/out-of-core.md); any role may set it
BUILD_MEMORY = "plpy_anon.build_memory"
DEFAULT_BUILD_MEMORY = "1GB"


def build_memory(plpy) -> int:
    """``plpy_anon.build_memory`` in bytes (``pg_size_bytes``: '512MB', '1GB', '65536')."""
    raw = run(plpy, f"SELECT pg_catalog.current_setting('{BUILD_MEMORY}', true) AS b")[0]["b"] \
        or DEFAULT_BUILD_MEMORY
    try:
        with plpy.subtransaction():
            value = run(plpy, "SELECT pg_catalog.pg_size_bytes($1) AS b", ["text"], [raw])[0]["b"]
    except plpy.SPIError:
        value = None
    if value is None or value <= 0:
        raise InvalidParameter(f'{BUILD_MEMORY} = "{raw}" is not a memory size',
                               hint="Set it to a size such as '512MB' or '2GB' (pg_size_bytes units).")
    return int(value)


def text_of(expr: str, builtin: bool) -> str:
    """The SQL text of ``expr``, a value of a source or released column, without running code of
    the column type's owner.

    ``expr::text`` runs the cast from the type to text if pg_cast has one, and the owner of a type
    may create that cast (CREATE CAST needs only ownership of one of the two types) with a function
    of their own: the build, a refresh or a pg_cron job would then run that function with their
    rights (a superuser's). Types of pg_catalog (``builtin``; a domain counts as its base type) can
    only have casts a superuser made, and keep ``::text`` (bool reads 'true', bpchar loses its
    padding, as releases always showed them). Any other type goes through its output function
    (``format('%s', ...)``, the text ``::text`` gives when no cast exists), NULL staying NULL
    (``num_nonnulls`` tests the value itself: ``IS NULL`` on a composite tests its fields)."""
    if builtin:
        return f"({expr})::text"
    return f"CASE WHEN pg_catalog.num_nonnulls({expr}) = 1 THEN pg_catalog.format('%s', {expr}) END"


BUILTIN_COLUMNS = """
SELECT a.attname::text AS name, bt.typnamespace = 'pg_catalog'::pg_catalog.regnamespace AS builtin
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
JOIN pg_catalog.pg_type bt ON bt.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END
WHERE a.attrelid = $1::pg_catalog.regclass AND a.attnum > 0 AND NOT a.attisdropped
"""


def columns_as_text(plpy, relation: str, columns, alias: str | None = None) -> list[str]:
    """SQL reading each of ``columns`` of ``relation`` (a quoted name) as text, for relations read
    by column name (releases, whose sensitive columns keep the source's types):
    :func:`text_of`; a column not found counts as not built-in."""
    builtin = {r["name"]: r["builtin"] for r in run(plpy, BUILTIN_COLUMNS, ["text"], [relation])}
    prefix = f"{alias}." if alias else ""
    return [text_of(prefix + ident(plpy, c), builtin.get(c, False)) for c in columns]


def jsonb_text(value) -> str:
    """``value`` as JSON text for a jsonb parameter; a non-finite float (a metric of a range as
    wide as float8 itself: inf / inf) becomes null, which jsonb has, instead of NaN, which it
    refuses."""
    def finite(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: finite(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [finite(x) for x in v]
        return v
    return json.dumps(finite(value))


def jsonb(value):
    """A jsonb value as Python data: PL/Python hands jsonb over as text (and SQL NULL as None)."""
    return json.loads(value) if isinstance(value, str) else value


#: elements per slice when writing a large array literal: only one slice's per-element Python
#: ints and strings exist at a time, not the whole array's (~100 MiB per million at once)
LITERAL_SLICE = 65536


def int_array_literal(values) -> str:
    """An int[] / oid[] literal of a 1-D integer array (parsed by array_in, in C, on the SQL
    side), built a slice at a time (LITERAL_SLICE)."""
    import numpy as np  # here, not above: calls that only read the catalog never load numpy
    values = np.asarray(values)
    return "{" + ",".join(",".join(map(str, values[i:i + LITERAL_SLICE].tolist()))
                          for i in range(0, values.shape[0], LITERAL_SLICE)) + "}"
