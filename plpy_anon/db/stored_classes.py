"""A compact release's class rows written from the values the partitioning run read, instead of
joining every row back to the source for them (the join back, its sort and their temporary
files were most of a build's SQL time).

Possible when every value the storage holds was read exactly:

* a ranged QI of an integer type (read as int8), a float (float8, or float4 widened: both exact)
  or a date (days since 2000-01-01, or +-infinity): its class's bounds are the values of its
  smallest and largest codes (codes follow the values' order; NULLs left out), written as the
  text PostgreSQL reads back as those very values (:func:`number_texts`); a timestamp: its
  microseconds are read too (``timestamp_send``), and its class's bounds are their extremes; a
  numeric: its text is read too (distinct values in the float8 read for ordering may share a
  float8: 20 digits, 1e400), ranked by PostgreSQL (:func:`numeric_ranks`), and its class's
  bounds are the texts of its smallest and largest ranks;
* a value-set or hierarchy QI: its literals come from the run already;
* a sensitive column whose ``::text`` (what the reader reads) is its value's own spelling once
  cast back (generalization.element_type): every built-in type but the reg* ones, ``char(n)``
  padded back to n (not a ``bpchar`` without length), floats with ``extra_float_digits >= 1``
  (``check_float_digits``); its rows' texts, as spelled in the source (before equal spellings
  are merged for counting), become each class's array literal in release order
  (:func:`array_literals`).

Other releases (a sensitive column of an INEXACT_TEXT_TYPES type or a length-less bpchar, a
SQL_ASCII database) keep the join back (``generalization.compact_storage_query``). Either way
the check that follows counts the stored classes; truthfulness holds by construction here: a class's bounds are the extremes of its own
rows' values, its sets the values its rows hold.
"""
from __future__ import annotations

import itertools
import re

import numpy as np

from plpy_anon.core.errors import InvalidParameter
from plpy_anon.db import class_sets
from plpy_anon.db.class_sets import ClassSets, EntryTable
from plpy_anon.db.encodings import sql_ascii
from plpy_anon.db.generalization import array_element, element_type
from plpy_anon.db.release_rows import storage_of
from plpy_anon.db.sqltext import run

#: timestamps: their bounds come from their microseconds (reader.EXACT_TIME_TYPES), not their codes
TIME_TYPES = ("timestamp", "timestamptz")
INT64 = np.iinfo(np.int64)
#: sensitive types whose text does not read back as the same value: the reg* types print names
#: that another search_path reads as other objects (``bpchar::text`` drops the padding, which a
#: cast back to ``char(n)`` restores: generalization.element_type; not for a bpchar without length)
INEXACT_TEXT_TYPES = ("regclass", "regcollation", "regconfig", "regdictionary",
                      "regnamespace", "regoper", "regoperator", "regproc", "regprocedure",
                      "regrole", "regtype")
#: the largest value of each exact type whose range is discrete: ``[lo, max]`` would
#: canonicalize to an overflowing ``[lo, max + 1)``, so such a class is released ``[lo,)``
#: (generalization.range_expression does the same)
EPOCH = np.datetime64("2000-01-01", "D")
DISCRETE_MAXIMUM = {"int4": 2147483647, "int8": 9223372036854775807,
                    "date": int((np.datetime64("5874897-12-31", "D") - EPOCH).astype(np.int64))}


def reads_exactly(plpy, sensitive) -> bool:
    """True when a compact release of these columns can be written from the values read (every
    QI is: see the module docstring). Not in a SQL_ASCII database: its bytes are not text
    PL/Python can hold."""
    return (all(c.type_name not in INEXACT_TEXT_TYPES and element_type(None, c) is not None for c in sensitive)
            and not sql_ascii(plpy))


def join_back_asked(plpy) -> bool:
    """``SET plpy_anon.join_back = on``: releases created in this session join back to the
    source for every value (the reference the tests compare with; a fallback for anyone who
    prefers it). Recorded in the release: its refreshes do the same."""
    setting = run(plpy, "SELECT pg_catalog.current_setting('plpy_anon.join_back', true) AS v")[0]["v"]
    return (setting or "").strip().lower() in ("on", "true", "yes", "1")


# the rule of the release's materialized view, as its node tree (read from the catalog: no
# relation is opened, so a release dropped or swapped meanwhile is simply not found)
RELEASE_RULE = """
SELECT w.ev_action::text AS tree FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_rewrite w ON w.ev_class = c.oid AND w.rulename = '_RETURN'
WHERE c.relnamespace = $1::pg_catalog.regnamespace AND c.relname = $2
  AND c.relowner = $3::pg_catalog.regrole AND c.relkind = 'm'"""
COLUMN_NAMES = """
SELECT a.attnum::int AS number, a.attname::text AS name FROM pg_catalog.pg_attribute a
WHERE a.attrelid = $1 AND a.attnum = ANY($2) AND NOT a.attisdropped"""
# one output column of the released_columns CTE: the source column's number and the name the
# column had when the rule was made (outToken escapes ASCII spaces, tabs, newlines, braces and
# backslashes; other white space, U+3000 say, is part of the name)
_TARGET = re.compile(r"(?<!\\)\{TARGETENTRY :expr \{VAR :varno 1 :varattno (\d+) [^{}]*\} "
                     r":resno \d+ :resname ((?:\\.|[^ \n\t\\])+) ", re.DOTALL)


def check_not_renamed(plpy, release: dict, tbl, released: list[str]) -> None:
    """Refuse a run whose source columns were renamed since its release's query was made: the
    run reads columns by the names in the release's parameters, its query (and a restored
    one) by number, so two swapped names would release one column's values under the other's
    (an identifier as a diagnosis). The rule's ``released_columns`` CTE records both: each
    column's number and the name it had. Nothing to compare for a release being created (or
    swept: no catalog row) and for one that joins back (no such CTE)."""
    if release.get("schema_oid") is None:
        return
    rows = run(plpy, RELEASE_RULE, ["text", "text", "text"],
               [release["schema_oid"], storage_of(release), release["release_owner"]])
    if not rows or ":ctename released_columns " not in rows[0]["tree"]:
        return
    tree = rows[0]["tree"].split(":ctename released_columns ", 1)[1]
    targets = tree.split(":targetList (", 1)[1].split(" :override ", 1)[0]
    made = [(int(number), re.sub(r"\\(.)", r"\1", name, flags=re.DOTALL)) for number, name in _TARGET.findall(targets)]
    now = {r["number"]: r["name"] for r in run(plpy, COLUMN_NAMES, ["oid", "int2[]"],
                                                [tbl.oid, [n for n, _ in made]])}
    if [name for _, name in made] != list(released) or any(now.get(n) != name for n, name in made):
        raise InvalidParameter(
            f"columns of {tbl.label} released by {release['release_schema']}.{release['release_name']} "
            "were renamed since the release was created",
            detail=f"It releases {', '.join(map(repr, released))}.",
            hint="Rename them back, or recreate the release with replace => true.")


def number_texts(plpy, values, type_name: str) -> list[str]:
    """The text PostgreSQL reads back as exactly these values of a column of ``type_name``, as
    its released range bound: ints as they are; dates as ISO dates (``BC`` before year 1; ISO is
    read whatever the DateStyle) or +-infinity; floats as float4out / float8out print them (the
    flat layout casts that text to numeric), asked of PostgreSQL once per distinct value: its
    shortest form differs from Python's where a decimal lies exactly halfway between two floats
    (1e23 prints 9.999999999999999e+22)."""
    if type_name in ("int2", "int4", "int8"):
        return [str(v) for v in np.asarray(values, dtype=np.int64).tolist()]
    if type_name == "date":
        return _each_distinct(np.asarray(values, dtype=np.float64),
                              lambda days: [_date_text(v) for v in days.tolist()])
    if type_name in TIME_TYPES:
        zone = "+00" if type_name == "timestamptz" else ""
        return _each_distinct(np.asarray(values, dtype=np.int64), lambda m: time_texts(m, zone))
    if type_name == "numeric":
        return list(values)                      # the source's own texts (numeric_ranks)
    if type_name in ("float4", "float8"):
        distinct, inverse = np.unique(np.asarray(values, dtype=np.float64), return_inverse=True)
        texts = run(plpy, FLOAT_TEXTS[type_name], ["float8[]"], [distinct.tolist()])[0]["texts"]
        return np.asarray(texts, dtype=object)[inverse].tolist()
    raise ValueError(f"{type_name} is not read exactly")


def _each_distinct(values: np.ndarray, texts) -> list[str]:
    """``texts(values)``, computed once per distinct value: a class's bounds repeat the few
    values a column holds (a date column's days), and formatting is per value in Python."""
    distinct, inverse = np.unique(values, return_inverse=True)
    return np.asarray(texts(distinct), dtype=object)[inverse.ravel()].tolist()


# PL/Python hands each Python float over as its repr, which float8in reads back exactly
FLOAT_TEXTS = {
    t: f"""SELECT pg_catalog.array_agg(u.v::pg_catalog.{t}::pg_catalog.text ORDER BY u.o) AS texts
           FROM pg_catalog.unnest($1) WITH ORDINALITY AS u(v, o)"""
    for t in ("float4", "float8")}


MICROSECONDS_PER_DAY = 86_400_000_000


def time_texts(micros, zone: str) -> list[str]:
    """Timestamps (microseconds since 2000-01-01, int64 min / max for -+infinity) as ISO text,
    ``zone`` after the time ('+00' for timestamptz's UTC), ``BC`` last for years before 1."""
    micros = np.asarray(micros, dtype=np.int64)
    days, of_day = np.divmod(micros, MICROSECONDS_PER_DAY)
    out = []
    for day, tod, m in zip(days.tolist(), of_day.tolist(), micros.tolist()):
        if m in (INT64.max, INT64.min):
            out.append("infinity" if m == INT64.max else "-infinity")
            continue
        date = _date_text(day)
        seconds, fraction = divmod(tod, 1_000_000)
        clock = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{fraction:06d}{zone}"
        out.append(f"{date[:-3]} {clock} BC" if date.endswith(" BC") else f"{date} {clock}")
    return out


def _date_text(days: float) -> str:
    if days in (float("inf"), float("-inf")):
        return "infinity" if days > 0 else "-infinity"
    iso = str(EPOCH + np.timedelta64(int(days), "D"))      # astronomical years: 0 is 1 BC
    if iso.startswith(("-", "0000")):
        year, rest = iso.lstrip("-").split("-", 1)
        astronomical = -int(year) if iso.startswith("-") else 0
        return f"{1 - astronomical:04d}-{rest} BC"
    return iso


def range_literals(plpy, type_name: str, low, high, only_null) -> list[str | None]:
    """Each class's released range (text of the column's range type) from its smallest and
    largest value: inclusive ``[lo,hi]``, ``[lo,)`` when ``hi`` is the type's maximum, None
    (SQL NULL) for a class of NULLs only."""
    maximum = DISCRETE_MAXIMUM.get(type_name)
    if type_name in ("int2", "int4", "int8"):     # formatted as they are compared: Python ints
        return [None if null else (f"[{a},)" if b == maximum else f"[{a},{b}]") for a, b, null in
                zip(np.asarray(low, dtype=np.int64).tolist(), np.asarray(high, dtype=np.int64).tolist(),
                    np.asarray(only_null).tolist())]
    lo, hi = number_texts(plpy, low, type_name), number_texts(plpy, high, type_name)
    unbounded = [False] * len(lo)
    if maximum is not None:        # a date's days (float64, for +-infinity)
        unbounded = (np.asarray(high, dtype=np.float64) == maximum).tolist()
    return [None if null else (f"[{a},)" if top else f"[{a},{b}]")
            for a, b, top, null in zip(lo, hi, unbounded, np.asarray(only_null).tolist())]


#: ranged QI types whose range literals the compiled kernel writes (class_sets.ClassRanges):
#: integers in digits, dates and timestamps from their bounds' distinct texts
WRITTEN_RANGE_TYPES = ("int2", "int4", "int8", "date", "timestamp", "timestamptz")


def class_ranges(plpy, type_name: str, low, high, only_null, n_rows: int):
    """:func:`range_literals`, written a slice at a time by the compiled kernel where the fit
    runs on it (a function of the slice's first and last class returning a
    class_sets.ClassRanges, the same texts), else the list :func:`range_literals` makes."""
    kernel = class_sets.range_writer(n_rows) if type_name in WRITTEN_RANGE_TYPES else None
    if kernel is None:
        return range_literals(plpy, type_name, low, high, only_null)
    maximum = DISCRETE_MAXIMUM.get(type_name)
    if type_name in ("int2", "int4", "int8"):
        low, high = np.asarray(low, dtype=np.int64), np.asarray(high, dtype=np.int64)
        top = high == maximum if maximum is not None else np.zeros(low.shape, dtype=bool)
        texts = None
    else:
        # a date's days (float64, for +-infinity) or a timestamp's microseconds, spelled once
        # per distinct bound
        top = np.asarray(high, dtype=np.float64) == maximum if maximum is not None \
            else np.zeros(np.shape(low), dtype=bool)
        distinct, tokens = np.unique(np.concatenate([low, high]), return_inverse=True)
        texts = number_texts(plpy, distinct, type_name)
        tokens = tokens.ravel()
        low, high = tokens[:len(top)], tokens[len(top):]
    kinds = np.where(np.asarray(only_null, dtype=bool), class_sets.RANGE_NULL,
                     np.where(top, class_sets.RANGE_OPEN, class_sets.RANGE_CLOSED))
    bounds = class_sets.RangeBounds(kernel, low, high, kinds, texts)
    return lambda first, last: class_sets.ClassRanges(bounds, first, last)


# each distinct text's position in numeric order (ties: first read first, which decides the
# spelling of a bound where equal values are spelled apart, 1.0 and 1.00)
NUMERIC_ORDER = """
SELECT pg_catalog.array_agg(u.o::int4 ORDER BY u.v::pg_catalog.numeric, u.o) AS positions
FROM pg_catalog.unnest($1::pg_catalog.text[]) WITH ORDINALITY AS u(v, o)"""


def numeric_ranks(plpy, dictionary: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(each dictionary entry's rank in PostgreSQL's numeric order, the entries by rank and
    then None: rank 0 of a column of NULLs only)."""
    positions = np.asarray(run(plpy, NUMERIC_ORDER, ["text[]"], [dictionary])[0]["positions"] or [],
                           dtype=np.int64) - 1
    ranks = np.empty(positions.size, dtype=np.int64)
    ranks[positions] = np.arange(positions.size)
    by_rank = np.empty(positions.size + 1, dtype=object)
    by_rank[:-1] = np.asarray(dictionary, dtype=object)[positions]
    return ranks, by_rank


def class_extremes(values, null, index):
    """(smallest value, largest value, only NULLs?) of every class (``index``: a ClassIndex),
    NULL rows (``null``) left out; 0 for both where a class holds only NULLs. ``values``: a
    QI's codes (they follow its values' order), a numeric's ranks or a timestamp's microseconds."""
    # gathered into class order once, for the three reductions
    values = np.asarray(values)[index.order].astype(np.int64)
    if not np.any(null):        # nothing to leave out: two reductions
        empty = np.diff(index.bounds) == 0          # no rows, read as only NULLs
        low = index.reduce(np.minimum, values, INT64.max, grouped=True)
        high = index.reduce(np.maximum, values, INT64.min, grouped=True)
        return np.where(empty, 0, low), np.where(empty, 0, high), empty
    null = np.asarray(null)[index.order]
    low = index.reduce(np.minimum, np.where(null, INT64.max, values), INT64.max, grouped=True)
    high = index.reduce(np.maximum, np.where(null, INT64.min, values), INT64.min, grouped=True)
    only_null = index.reduce(np.maximum, (~null).astype(np.int8), 0, grouped=True) == 0
    return np.where(only_null, 0, low), np.where(only_null, 0, high), only_null


def array_elements(dictionary: list) -> np.ndarray:
    """Each dictionary entry quoted as an array_in element, then NULL (code -1)."""
    elements = np.empty(len(dictionary) + 1, dtype=object)
    elements[:-1] = [array_element(v) for v in dictionary]
    elements[-1] = "NULL"
    return elements


def array_literals(codes, elements, order, bounds, first: int, last: int):
    """Array literals of classes ``first`` to ``last`` (exclusive): each the elements of its
    rows (``codes`` into ``elements``, :func:`array_elements` or their EntryTable) in
    release order (``order[bounds[c]:bounds[c+1]]``); a ClassSets writer of them when
    ``elements`` is an EntryTable (class_sets.entry_table), else a list."""
    entries = elements.entries if isinstance(elements, EntryTable) else elements
    tokens = np.asarray(codes)[order[bounds[first]:bounds[last]]]
    if isinstance(elements, EntryTable):
        return ClassSets(elements, tokens, bounds, first, last)
    texts = entries[tokens].tolist()
    edges = (bounds[first:last + 1] - bounds[first]).tolist()
    return ["{" + ",".join(texts[a:b]) + "}" for a, b in itertools.pairwise(edges)]
