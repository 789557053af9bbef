"""SQL generalization shared by the release methods: the query that joins a partitioning run back
to its source and publishes generalized classes (``generalized_release_query``), the pieces of it
(``range_expression``, ``containment_test``, ``qi_value``), the release order
(``release_positions``) and the literals a partitioning run hands back to SQL.

A Mondrian release's query, for example, does the set work in SQL:

    WITH run AS MATERIALIZED (SELECT s AS p FROM anon._mondrian_partition_slices(<release_id>) AS s),
    slice_rows AS MATERIALIZED (                    -- Python, once; its slices, one at a time:
        SELECT r.* FROM run CROSS JOIN LATERAL anon._partition_slice_rows(run.p, '<source>'::regclass) AS r),
    kept_rows AS MATERIALIZED (                     -- one join back to the source
        SELECT r.class_id, r.row_position, s."age" AS v0, (s."sex")::text AS v1, s."diagnosis" AS s0
        FROM slice_rows AS r
        JOIN <source> AS s ON s.tableoid = r.row_tableoid AND s.ctid = r.row_ctid),
    bounds AS (SELECT class_id, min(v0) AS lo0, max(v0) AS hi0 FROM kept_rows GROUP BY class_id),
    classes AS MATERIALIZED (SELECT b.class_id, int4range(b.lo0, b.hi0, '[]') AS q0,
                                    x.q1::text[] AS q1                  -- once per class
        FROM bounds b JOIN (<(run.p).literals[1] split, WITH ORDINALITY>) x USING (class_id))
    SELECT c.q0 AS "age", c.q1 AS "sex", rs.s0 AS "diagnosis"
    FROM (SELECT * FROM kept_rows ORDER BY class_id, row_position) AS rs   -- merge-joined:
    JOIN (SELECT * FROM classes ORDER BY class_id) AS c ON c.class_id = rs.class_id  -- no resort
    WHERE (rs.v0 IS NULL OR c.q0 @> rs.v0::int4)                           -- containment filter
      AND array_position(c.q1, rs.v1) IS NOT NULL
    ORDER BY rs.class_id, rs.row_position           -- release order: by class, shuffled inside

so only the quasi-identifiers (and, for l-diversity, the sensitive columns) travel to Python, and
only the rows' ctids (in release order), each class's size and, for categorical QIs, one
generalized value per class travel back, in slices of whole classes (anon.partition_slice, about
a million rows each: PostgreSQL converts and frees one slice before asking for the next, so no
copy of the whole result sits in the backend; _partition_slice_rows turns a slice into a class id
and a position per row; sensitive values never leave SQL). The
partitioning function is STABLE: it reads the source in the query's own snapshot, so the ctids
it returns are those the join sees.

Sources: ordinary tables, inheritance parents and partitioned tables, read without ONLY (every
row of every child / partition). ctids repeat across physical relations, so for a source with
children the run also returns each row's tableoid and the join uses (tableoid, ctid).

Generalized values: numeric, date and timestamp QIs become ranges with the tightest bounds of the
class's non-NULL values, computed IN SQL from the source rows in the column's own type (Python
partitions on a float8 approximation, which orders values but cannot write bounds: a bigint above
2^53, a 20-digit numeric or a timestamp's microseconds would be lost). Bounds are inclusive
(``[lo, hi]``); a discrete range whose upper bound is the type's maximum (2147483647, the largest
date) is released upper-unbounded (``[lo,)``), since ``[lo, max]`` canonicalizes to an overflowing
``[lo, max + 1)``. ±infinity (dates, timestamps, floats, numeric) and NaN (floats, numeric; a
numrange holds it as a bound above infinity) are released as they are; the partitioner sees them
as values just beyond the finite ones. A class of only NULLs gets NULL; a class mixing NULL and
values shows the range of its values (NCP counts such a cell as fully generalized). Categorical
QIs become the sorted set of values present (``text[]``, NULL an element of its own), or, with a
registered hierarchy, the lowest common ancestor (``text``).

Containment filter: a row is emitted only if each of its QI values lies inside its released class
value, tested with the column's own operators (``range @> value::element`` -- NULL values pass, as
above -- and ``array_position(set, value's text) IS NOT NULL``; hierarchy labels are not checked).
A value's text is ``value::text`` for pg_catalog's types and the type's output function for any
other type (an enum, say): a cast to text from a type its owner made may run the owner's function
(``sqltext.text_of``), and the build must not run it with the builder's rights.
A row failing it is left out of the release instead of being published under a value that does not
contain it; the release's post-build verification, which compares the release's row count with
the source's, then fails the build, so a wrong range is never published.
"""
from __future__ import annotations

import itertools
import re
import secrets

import numpy as np

from plpy_anon.core import mondrian_jit
from plpy_anon.core.errors import AnonError, InvalidParameter
from plpy_anon.core.generalize import class_value_ranks
from plpy_anon.db import columns as catalog
from plpy_anon.db.class_sets import ClassSets, EntryTable, entry_table
from plpy_anon.db.compact import ROWS_COLUMN, view_query
from plpy_anon.db.sqltext import ident, int_array_literal, run  # noqa: F401 -- re-exported

EPOCH_DATE = np.datetime64("2000-01-01", "D")


def generalized_release_query(plpy, tbl, roles, qi_types: dict[str, str], partition_call: str,
                               *, literal_ranges: bool = False, sliced: bool = False,
                               compact: bool = False) -> str:
    """The query of a release whose partitioning function returns an ``anon.partition`` (see the
    module docstring for its shape and why). ``qi_types``: released SQL type of each QI, in the
    order of the ``q0, q1, ...`` class columns. Rows whose class id is negative are suppressed.

    Range-typed QIs get their bounds from the class's rows in SQL (``min``/``max`` in the
    column's own type). With ``literal_ranges`` the partition also carries a range literal per
    class (trust's hierarchy intervals) and the released range is the smallest one holding both
    that literal and the class's values. Every row passes the containment filter.

    ``sliced``: ``partition_call`` is a set-returning function of ``anon.partition_slice`` (the
    Mondrian family: whole classes in release order, a slice at a time) instead of one
    ``anon.partition``.

    ``compact`` (with ``sliced``): one row per class instead of one per person, the storage of a
    compact release (``compact.view_query`` reads it): the class's released QIs once, and
    each sensitive column as the array of its rows' values (in release order), or the class's
    row count (``_rows``) when nothing sensitive is released. The containment filter applies
    before the rows are counted, so a row outside its class's values is missing from the array
    and the row-count check refuses the release as it does a flat one."""
    qi_names = list(qi_types)
    by_name = {col.name: col for col, _ in roles}
    sensitive = [col for col, role in roles if role == "sensitive"]
    ranged = [i for i, name in enumerate(qi_names) if qi_types[name] in catalog.RANGE_ELEMENTS]
    literal = [i for i, name in enumerate(qi_names) if i not in ranged or literal_ranges]
    checked = [i for i in range(len(qi_names)) if i in ranged or qi_types[qi_names[i]] == "text[]"]
    selects = []
    for col, role in roles:
        if role == "quasi_identifier":
            selects.append(f"c.q{qi_names.index(col.name)} AS {ident(plpy, col.name)}")
        elif role == "sensitive":
            selects.append(f"rs.s{sensitive.index(col)} AS {ident(plpy, col.name)}")
    kept = "".join(f", {qi_value(plpy, by_name[qi_names[i]])} AS v{i}" for i in checked)
    kept += "".join(f", s.{ident(plpy, col.name)} AS s{i}" for i, col in enumerate(sensitive))
    aggregates = "".join(f", min(rs.v{i}) AS lo{i}, max(rs.v{i}) AS hi{i}" for i in ranged)
    generalized = []
    for i, name in enumerate(qi_names):
        if i in ranged:
            generalized.append(f"{range_expression(qi_types[name], i, literal_ranges)} AS q{i}")
        else:
            generalized.append(f"x.q{i}::{qi_types[name]} AS q{i}")
    if literal:
        aliases = ", ".join(f"q{i}" for i in literal)
        if sliced:      # packed literals (pack_literals): their first row is none
            elements = ", ".join(literal_rows("(run.p)", n) for n in range(1, len(literal) + 1))
            numbered = f"(run.p).first_class + x.class_no - 2 AS class_id, {aliases} FROM run,\n"
            kept_classes = " WHERE x.class_no > 1"
        else:
            elements = ", ".join(f"pg_catalog.jsonb_array_elements_text((run.p).classes -> 'q{i}')"
                                 for i in literal)
            numbered = f"x.class_no - 1 AS class_id, {aliases} FROM run,\n"
            kept_classes = ""
        # OFFSET 0: class_id is computed before the join. Flattened, the join computes it from
        # run.p, so every row carries its whole slice (~20 MB), which a hash join that spills
        # writes once per row: tens of GB of temporary files at 2M rows
        class_source = (
            f"    FROM bounds AS b\n"
            f"    JOIN (SELECT {numbered}"
            f"          ROWS FROM ({elements}) WITH ORDINALITY AS x({aliases}, class_no){kept_classes} OFFSET 0) AS x\n"
            f"      ON x.class_id = b.class_id")
    else:
        class_source = "    FROM bounds AS b"
    filters = [containment_test(qi_types[qi_names[i]], i) for i in checked]
    where = f"WHERE {' AND '.join(filters)}" if filters else ""
    # kept_rows: each kept row's class and the values the release needs, joined to the source
    # by (tableoid, ctid); scanned twice (bounds, output), so materialized. classes: one row per
    # class, ranges built once per class. The release order (by class, shuffled inside it: see
    # release_order) is imposed by the final ORDER BY, which stays whatever plan is chosen.
    source = tbl.quoted(plpy)
    rows_of = "anon._partition_slice_rows" if sliced else "anon._partition_rows"
    rows_call = f"{rows_of}(run.p, {plpy.quote_literal(source)}::pg_catalog.regclass)"
    if sliced:
        # run: the slices come from a function scan, which frees each slice's conversion before
        # asking for the next one; no copy of the whole result is held (one ~230 MB result at
        # 10M rows was held twice through the join back).
        run = f"SELECT s AS p FROM {partition_call} AS s"
        # slice_rows: every slice's rows first, then ONE join with the source: joined slice by
        # slice (LATERAL), the planner fetches each row by a TID scan once the source is too
        # large to hash per slice (10M rows: 10 slices, 10M TID scans, 54 s)
        handed_back = (f"slice_rows AS MATERIALIZED (\n"
                       f"    SELECT r.* FROM run CROSS JOIN LATERAL {rows_call} AS r),\n")
        joined_rows = "FROM slice_rows AS r"
        # class ids are release ranks, so (class_id, row_position) is the release order. Both
        # sides sorted on class_id let the planner merge-join them, which keeps that order: the
        # sort is then of kept_rows (one row's values, ~100 bytes at 6 QIs) instead of the
        # joined rows with every class's ranges and sets (~230 bytes; 1M rows: 62 instead of
        # 349 MB sorted on disk, 0.65 s less).
        joined = ("FROM (SELECT * FROM kept_rows ORDER BY class_id, row_position) AS rs\n"
                  "JOIN (SELECT * FROM classes ORDER BY class_id) AS c ON c.class_id = rs.class_id")
        order = "rs.class_id, rs.row_position"
    else:
        # run: the partitioning call, once, as a scalar subquery: PL/Python builds its result
        # (and garbage: each text field copied twice, the JSON parsed) in the calling node's
        # per-tuple memory, which a plain SELECT frees only when asked for a second row --
        # after kept_rows has been built (10M rows: ~950 MB held through the join). The
        # subquery asks for that second row at once (to check there is none), so only its copy
        # of the result stays.
        run = f"SELECT (SELECT {partition_call}) AS p"
        handed_back = ""
        joined_rows = f"FROM run CROSS JOIN LATERAL {rows_call} AS r"
        # classes numbered by their first source row: the release order is the positions only
        joined = "FROM kept_rows AS rs\nJOIN classes AS c ON c.class_id = rs.class_id"
        order = "rs.row_position"
    if compact:
        assert sliced and not literal_ranges, "a compact release is a Mondrian family's"
        return compact_storage_query(plpy, roles, qi_names, qi_types, ranged, literal, checked,
                                     sensitive, kept, source, run, handed_back)
    final = (f"SELECT {', '.join(selects)}\n"
             f"{joined}\n"
             f"{where}\n"
             f"ORDER BY {order}")
    return (
        f"WITH run AS MATERIALIZED ({run}),\n"
        f"{handed_back}"
        f"kept_rows AS MATERIALIZED (\n"
        f"    SELECT r.class_id, r.row_position{kept}\n"
        f"    {joined_rows}\n"
        f"    JOIN {source} AS s ON s.tableoid = r.row_tableoid AND s.ctid = r.row_ctid),\n"
        f"bounds AS (SELECT rs.class_id{aggregates} FROM kept_rows AS rs GROUP BY rs.class_id),\n"
        f"classes AS MATERIALIZED (\n"
        f"    SELECT b.class_id, {', '.join(generalized)}\n"
        f"{class_source})\n"
        f"{final}")


def compact_storage_query(plpy, roles, qi_names, qi_types, ranged, literal, checked, sensitive,
                          kept, source, run, handed_back) -> str:
    """:func:`generalized_release_query` for a compact release: one row per class, in ONE pass
    over the joined rows. They are sorted into release order (class, position) and each class is
    aggregated as it passes: its ranges are the ``min``/``max`` of its rows (so a row is inside
    its class's range by construction, and no bounds are computed beforehand: no materialized
    copy of every row, which spilled ~500 MB at 10M rows), its value sets come from the run (one
    per class, joined in the same order) and are checked by the containment filter, and each
    sensitive column becomes the array of its rows' values in release order. The sets are taken
    with ``max`` (one value per class): joining the classes after the grouping, the planner
    (which cannot estimate the groups) nested loops over them, 70,000 x 70,000 comparisons at
    1M rows."""
    values = []
    for i, name in enumerate(qi_names):
        if i in ranged:
            values.append(range_expression(qi_types[name], i, False,
                                           (f"pg_catalog.min(rs.v{i})", f"pg_catalog.max(rs.v{i})")))
        else:
            values.append(f"pg_catalog.max(c.q{i})")
    stored = [f"{values[qi_names.index(col.name)]} AS {ident(plpy, col.name)}"
              if role == "quasi_identifier"
              else f"pg_catalog.array_agg(rs.s{sensitive.index(col)} ORDER BY rs.row_position) "
                   f"AS {ident(plpy, col.name)}"
              for col, role in roles if role in ("quasi_identifier", "sensitive")]
    if not sensitive:
        stored.append(f"pg_catalog.count(*)::int4 AS {ROWS_COLUMN}")
    joined = (f"FROM (SELECT r.class_id, r.row_position{kept}\n"
              f"      FROM slice_rows AS r\n"
              f"      JOIN {source} AS s ON s.tableoid = r.row_tableoid AND s.ctid = r.row_ctid\n"
              f"      ORDER BY r.class_id, r.row_position) AS rs")
    classes = ""
    if literal:
        elements = ", ".join(literal_rows("(run.p)", n) for n in range(1, len(literal) + 1))
        aliases = ", ".join(f"q{i}" for i in literal)
        casts = ", ".join(f"x.q{i}::{qi_types[qi_names[i]]} AS q{i}" for i in literal)
        classes = (f"classes AS MATERIALIZED (\n"
                   f"    SELECT (run.p).first_class + x.class_no - 2 AS class_id, {casts}\n"
                   f"    FROM run, ROWS FROM ({elements}) WITH ORDINALITY AS x({aliases}, class_no)\n"
                   f"    WHERE x.class_no > 1),\n")
        joined += "\nJOIN (SELECT * FROM classes ORDER BY class_id) AS c ON c.class_id = rs.class_id"
    filters = [containment_test(qi_types[qi_names[i]], i) for i in checked if i not in ranged]
    where = f"WHERE {' AND '.join(filters)}\n" if filters else ""
    return (
        f"WITH run AS MATERIALIZED ({run}),\n"
        f"{handed_back.rstrip().rstrip(',')}{',' if classes else ''}\n"
        f"{classes.rstrip().rstrip(',')}\n"
        f"SELECT {', '.join(stored)}\n"
        f"{joined}\n"
        f"{where}"
        f"GROUP BY rs.class_id\n"
        f"ORDER BY rs.class_id")


_CHARACTER = re.compile(r"character\((\d+)\)")


def element_type(plpy, col) -> str | None:
    """The type a sensitive column's stored texts are cast back to (read path): its base type;
    for bpchar, ``bpchar(n)`` of a ``character(n)`` column (the cast pads the texts, whose
    ``::text`` dropped the padding, back to n); None for any other bpchar (no length, or a
    domain's: its text is not its value). ``plpy`` None: only whether there is one."""
    if col.type_name == "bpchar":
        length = _CHARACTER.fullmatch(col.display_type)
        return f"pg_catalog.bpchar({int(length.group(1))})" if length else None
    return "" if plpy is None else f"pg_catalog.{ident(plpy, col.type_name)}"


def compact_read_query(plpy, tbl, roles, qi_types: dict[str, str], partition_call: str) -> str:
    """The storage query of a compact release written from the values its run read
    (stored_classes): every class's literals come in its slice, one per class and column
    (``q<i>`` each QI, ``s<j>`` each sensitive column's array), and are cast to the released
    types; no join back, no grouping, no sort: the slices come in release order and so do
    their classes. With nothing sensitive released, each class's size is its row count."""
    qi_names = list(qi_types)
    sensitive = [col for col, role in roles if role == "sensitive"]
    keys = [f"q{i}" for i in range(len(qi_names))] + [f"s{j}" for j in range(len(sensitive))]
    functions = [literal_rows("run", n) for n in range(1, len(keys) + 1)]
    if not sensitive:    # a first size beside the literals' first row, which is none
        functions.append("pg_catalog.unnest(ARRAY[0] || run.class_sizes::pg_catalog.int4[])")
        keys.append("class_size")
    collations = {r["name"]: r["collation"] for r in run(plpy, COLLATIONS, ["oid", "text[]"],
                                                         [tbl.oid, [c.name for c in sensitive]])}
    stored = []
    for col, role in roles:
        if role == "quasi_identifier":
            i = qi_names.index(col.name)
            stored.append(f"x.q{i}::{qi_types[col.name]} AS {ident(plpy, col.name)}")
        elif role == "sensitive":
            element = element_type(plpy, col)
            collate = f" COLLATE {collations[col.name]}" if col.name in collations else ""
            stored.append(f"x.s{sensitive.index(col)}::{element}[]{collate} AS {ident(plpy, col.name)}")
    if not sensitive:
        stored.append(f"x.class_size AS {ROWS_COLUMN}")
    # released_columns: never read, so never planned (PostgreSQL skips an unreferenced CTE: the
    # source's index predicates are not evaluated by whoever refreshes), but the release depends
    # on its source and the columns it releases as one joined back does (DROP TABLE, DROP
    # COLUMN, ALTER COLUMN TYPE refuse while it exists). The slices come from a function scan,
    # in release order, and so do their classes.
    released = ", ".join(f"s.{ident(plpy, col.name)}" for col, role in roles
                         if role in ("quasi_identifier", "sensitive"))
    return (f"WITH released_columns AS (SELECT {released} FROM {tbl.quoted(plpy)} AS s)\n"
            f"SELECT {', '.join(stored)}\n"
            f"FROM {partition_call} AS run\n"
            f"CROSS JOIN LATERAL ROWS FROM ({', '.join(functions)}) WITH ORDINALITY "
            f"AS x({', '.join(keys)}, class_no)\n"
            f"WHERE x.class_no > 1")


def flat_read_query(plpy, tbl, roles, qi_types: dict[str, str], partition_call: str) -> str:
    """A flat release written from the values its run read: :func:`compact_read_query`'s
    classes, each unfolded into its rows as a compact release's view does, each sensitive value
    cast to its column's declared type (a flat release's columns keep varchar(n), numeric(p,s))."""
    released = [(col.name, role == "sensitive") for col, role in roles
                if role in ("quasi_identifier", "sensitive")]
    types = {col.name: col.display_type for col, role in roles if role == "sensitive"}
    stored = compact_read_query(plpy, tbl, roles, qi_types, partition_call)
    return view_query(plpy, f"({stored})", released, types)


# the columns (of $2) whose collation is not the database's default: the sensitive arrays keep
# it, as array_agg of the column does when joined back (a case-insensitive diagnosis stays so)
COLLATIONS = """
SELECT a.attname::text AS name, pg_catalog.format('%I.%I', n.nspname, c.collname) AS collation
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_collation c ON c.oid = a.attcollation
JOIN pg_catalog.pg_namespace n ON n.oid = c.collnamespace
WHERE a.attrelid = $1 AND a.attname::text = ANY($2) AND NOT a.attisdropped
  AND a.attcollation <> 'pg_catalog.default'::pg_catalog.regcollation"""


FLOAT_TYPES = ("float4", "float8")


def qi_value(plpy, col) -> str:
    """Source row ``s``'s value of QI ``col`` as the release bounds and tests it. Floats go
    through their text form, which is exact (the shortest digits that read back as the same
    float): a direct float-to-numeric cast keeps only 15 (float8) or 6 (float4) significant
    digits and would publish ranges that miss the row's value. See check_float_digits. A value
    released in a value set is read as text (``Column.as_text``: no cast of the type's owner)."""
    if col.kind != "numeric":
        return col.as_text(plpy, "s")
    value = f"s.{ident(plpy, col.name)}"
    return f"{value}::text::numeric" if col.type_name in FLOAT_TYPES else value


def check_float_digits(plpy, tbl, qis) -> None:
    """The text form of a float is exact only with extra_float_digits >= 1 (the default): with
    fewer, PostgreSQL rounds it, and so would the released ranges. Refuse instead of publishing
    rounded bounds (called by every build, inside the release's own query)."""
    floats = [c.name for c in qis if c.type_name in FLOAT_TYPES]
    if floats and int(run(plpy, "SELECT pg_catalog.current_setting('extra_float_digits') AS d")[0]["d"]) < 1:
        raise InvalidParameter(
            f"extra_float_digits is below 1 in this session, so the floating-point column(s) "
            f"{', '.join(map(repr, floats))} of {tbl.label} would be released rounded "
            "(their range bounds, or their values)",
            hint="RESET extra_float_digits (the default, 1, writes floats exactly) and run it again.")


def containment_test(qi_type: str, i: int) -> str:
    """True when row value ``rs.v<i>`` lies inside its class's released value ``c.q<i>``, tested
    with the column's own operators: ``range @> value`` (a NULL value passes: it may sit in any
    class) or, for a value set (``text[]``), membership (NULL an element of its own; ``rs.v<i>``
    is then the value's text, :func:`qi_value`)."""
    if qi_type in catalog.RANGE_ELEMENTS:
        element = catalog.RANGE_ELEMENTS[qi_type][0]
        return f"(rs.v{i} IS NULL OR c.q{i} @> rs.v{i}::{element})"
    return f"pg_catalog.array_position(c.q{i}, rs.v{i}) IS NOT NULL"


def range_expression(range_type: str, i: int, literal_ranges: bool,
                     bounds: tuple[str, str] | None = None) -> str:
    """The released range of QI ``i`` from its class's bounds ``b.lo<i>``/``b.hi<i>`` (column
    type; or the expressions ``bounds``): inclusive ``[lo, hi]``; NULL when the class holds only
    NULLs; upper-unbounded when ``hi`` is the maximum of a discrete type (``[lo, max]`` would
    canonicalize to an overflowing ``[lo, max + 1)``). With ``literal_ranges``, merged with the
    class's range literal ``x.q<i>``."""
    element, maximum = catalog.RANGE_ELEMENTS[range_type]
    fn = f"pg_catalog.{range_type}"
    low, high = bounds or (f"b.lo{i}", f"b.hi{i}")
    lo, hi = f"{low}::{element}", f"{high}::{element}"
    unbounded = f"WHEN {hi} = {maximum} THEN {fn}({lo}, NULL, '[)') " if maximum else ""
    exact = f"CASE WHEN {low} IS NULL THEN NULL::{range_type} {unbounded}ELSE {fn}({lo}, {hi}, '[]') END"
    if not literal_ranges:
        return exact
    return (f"CASE WHEN {low} IS NULL THEN x.q{i}::{range_type} "
            f"ELSE pg_catalog.range_merge(x.q{i}::{range_type}, {exact}) END")


def release_order(labels: np.ndarray, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """The release's row order: grouped by class, classes in random order and rows in random
    order inside a class, so the release keeps no trace of the source's physical row order
    (insertion order can identify a row). Returns (labels renumbered so that class ``c`` is the
    ``c``-th in the release (int32), row indices in release order).

    The generator is seeded with 128 fresh bits from the operating system's CSPRNG at every
    call, kept nowhere. A seed anyone can know makes the shuffle a function an analyst can
    replay: seeded with the release id (printed in the release's own view definition) and the
    row count, sorting each class's members by their replayed tie-breakers reads off every
    person's sensitive value (tests/adversarial/test_release_order.py)."""
    rng = np.random.default_rng(secrets.randbits(128))
    class_rank = rng.permutation(max(int(n_classes), 1)).astype(np.int32)
    ranked = class_rank[labels]
    # the rows in a uniformly random order, then grouped by class rank keeping that order: by
    # the compiled fit's counting sort once it is loaded (1M rows: 0.04-0.05 s of CPU against a
    # sort's 0.10), else by sorting one int64 key, the rank high and the position low
    shuffled = rng.permutation(labels.size)
    codes = ranked[shuffled]
    grouped = mondrian_jit.grouped_order(codes, class_rank.size)
    if grouped is None:
        grouped = np.argsort((codes.astype(np.int64) << 32) | np.arange(codes.size, dtype=np.int64))
    return ranked, shuffled[grouped]


def release_positions(labels: np.ndarray) -> np.ndarray:
    """Each row's position in the release (see release_order), for methods that hand SQL a class
    id and a position per row."""
    _, order = release_order(labels, int(labels.max()) + 1)
    positions = np.empty(labels.size, dtype=np.int64)
    positions[order] = np.arange(labels.size)
    return positions


def column_for(tbl, cols: dict, name: str):
    """The column ``name`` a release was made with; a clear error when the table lost it."""
    if name not in cols:
        raise InvalidParameter(
            f'column "{name}" of {tbl.label} used by this release no longer exists',
            hint="Recreate the release with replace => true after changing the table.")
    return cols[name]


def class_literals(col, bounds) -> list:
    """One SQL literal per class (text cast by the release query), None for SQL NULL."""
    if col.kind == "categorical":
        if bounds.dtype == object and len(bounds) and isinstance(bounds[0], tuple):
            quoted = {}                        # each distinct value quoted once, not per class
            for values in bounds:
                for v in values:
                    if v not in quoted:
                        quoted[v] = array_element(v)
            return ["{" + ",".join([quoted[v] for v in values]) + "}" for values in bounds]
        return [None if v is None else str(v) for v in bounds]
    texts = VALUE_FORMATS[catalog.NUMERIC_TYPES[col.type_name][2]]
    only_null = np.isnan(np.asarray(bounds.lo, dtype=np.float64))
    lo, hi = texts(np.where(only_null, 0, bounds.lo)), texts(np.where(only_null, 0, bounds.hi))
    return [None if null else f"[{a},{b}]" for a, b, null in zip(lo, hi, only_null.tolist())]


def class_set_literals(enc, labels: np.ndarray, n_classes: int, ranked=None):
    """:func:`class_literals` of a categorical QI without hierarchy (``enc``: its encoded column),
    as a function of ``(first, last)`` returning the literals of classes ``first`` to ``last``
    (exclusive): a release's slices are written one at a time, so only one slice's strings
    exist at once. Made straight from the (class, value) pairs: each distinct value quoted
    once, each class's literal one join of its values in output order (no tuple per class), or
    written by the compiled kernel (class_sets.ClassSets) where the fit runs on it.
    ``ranked``: ``core.generalize.class_value_ranks`` of the column, when computed already."""
    by_rank, ranks, bounds = ranked or class_value_ranks(enc, labels, n_classes)
    quoted = np.empty(by_rank.size, dtype=object)
    quoted[:] = [array_element(v) for v in np.asarray(enc.labels, dtype=object)[by_rank].tolist()]
    table = entry_table(quoted, labels.size)

    def literals(first: int, last: int) -> list[str] | ClassSets:
        if isinstance(table, EntryTable):       # written by the compiled kernel
            return ClassSets(table, ranks[bounds[first]:bounds[last]], bounds, first, last)
        texts = quoted[ranks[bounds[first]:bounds[last]]].tolist()
        edges = (bounds[first:last + 1] - bounds[first]).tolist()
        return ["{" + ",".join(texts[a:b]) + "}" for a, b in itertools.pairwise(edges)]

    return literals


# Bound values (as read: ints, floats, days since 2000-01-01, epoch seconds) to literal text,
# a whole column at a time.
def _ints(values) -> list[str]:
    return [str(v) for v in np.asarray(values, dtype=np.int64).tolist()]


def _floats(values) -> list[str]:
    return [repr(v) for v in np.asarray(values, dtype=np.float64).tolist()]


def _dates(days) -> list[str]:
    return (EPOCH_DATE + np.asarray(days, dtype=np.int64).astype("timedelta64[D]")).astype(str).tolist()


def _timestamps(epoch, suffix="") -> list[str]:
    micros = np.round(np.asarray(epoch, dtype=np.float64) * 1e6).astype(np.int64)
    iso = micros.astype("datetime64[us]").astype(str)
    return [f'"{t.replace("T", " ")}{suffix}"' for t in iso.tolist()]


VALUE_FORMATS = {"int": _ints, "float": _floats, "date": _dates,
                 "timestamp": _timestamps, "timestamptz": lambda e: _timestamps(e, "+00")}


# what makes array_in need quotes around an element (as array_out decides): empty, the word
# NULL in any case, a delimiter, brace, quote or backslash, or white space anywhere
_NEEDS_QUOTES = re.compile(r'(?i)^(?:|null)$|[{},"\\\s]')


def array_element(value) -> str:
    """One element of a text[] literal, quoted (\\ and " escaped) only when array_in needs it
    -- unquoted values keep the literals, and the JSON carrying them, about half as long; None
    -> NULL."""
    if value is None:
        return "NULL"
    if _NEEDS_QUOTES.search(value) is None:
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


# A slice's literals travel as one text per literal column (anon.partition_slice.literals), not
# as jsonb: PostgreSQL parses a jsonb character by character (a quarter of a 1M-row release's
# storage SQL), and Python spent as long writing it.
#: separators and NULL markers tried first: control characters ordinary text never holds
SEPARATORS = "\x1f\x1e\x1d\x1c"


class NoSeparator(AnonError):
    """One slice's literals of a column hold every character there is (program_limit_exceeded)."""

    sqlstate = "54000"


def literal_keys(keys) -> list[str]:
    """The order of a slice's literal columns in ``literals``: ``q<i>`` by i, then ``s<j>`` by j
    (what :func:`literal_rows` reads by position)."""
    return sorted(keys, key=lambda key: (key[0], int(key[1:])))


def pack_literals(literals: list[str | None], any_character: bool = True) -> tuple[bytes, str]:
    """One column's literals of a slice's classes, packed for :func:`literal_rows`: (the UTF-8
    text of each literal after a separator, NULL as a NULL marker; the separator and the
    marker). Both are characters no literal holds; the leading separator keeps the text from
    being empty (string_to_table makes no row of an empty text, one literal '' included).
    ``any_character`` False (a server encoding other than UTF-8): ASCII ones only, which every
    server encoding spells. ``literals`` may also be a writer of them (class_sets.ClassSets,
    ClassRanges: ``held``, a text holding every character they may hold, and
    ``write(separator, null)``, their packed bytes)."""
    write = getattr(literals, "write", None)
    if write is None:
        literals = literals if isinstance(literals, list) else list(literals)
    held = literals.held if write else "".join(filter(None, literals))  # memchr, not counted
    free = [c for c in SEPARATORS if c not in held][:2]
    if len(free) < 2:
        used = set(held)
        codes = itertools.chain(range(1, 0xD800), range(0xE000, 0x110000)) if any_character \
            else range(1, 128)
        free = list(itertools.islice((c for c in map(chr, codes) if c not in used), 2))
        if len(free) < 2:
            what = "Unicode" if any_character else "ASCII"
            raise NoSeparator(f"the values of one slice of classes hold every {what} character: "
                              "no character is left to separate them",
                              hint="Release the column through a hierarchy, or leave it out.")
    separator, null = free
    if write is not None:
        return write(separator, null), separator + null
    if None in literals:
        literals = [null if v is None else v for v in literals]
    return (separator + separator.join(literals)).encode(), separator + null


def literal_rows(slice_: str, position: int) -> str:
    """SQL: the rows of the literals packed (:func:`pack_literals`) at ``position`` (from 1, in
    :func:`literal_keys` order) of the ``anon.partition_slice`` ``slice_``, the first of them
    none (the empty text before the leading separator: the caller leaves it out). The
    database's default collation, as jsonb's texts had (convert_from's would be C, its
    encoding name's)."""
    return (f"pg_catalog.string_to_table(pg_catalog.convert_from({slice_}.literals[{position}], "
            f"'UTF8') COLLATE pg_catalog.\"default\", "
            f"pg_catalog.substr({slice_}.separators, {2 * position - 1}, 1), "
            f"pg_catalog.substr({slice_}.separators, {2 * position}, 1))")
