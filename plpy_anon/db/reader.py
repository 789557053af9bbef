"""Reading a source table's columns into numpy, in chunks, with bounded memory.

The source is read relation by relation (a partitioned table's leaf partitions, an inheritance
parent and its children, each ``FROM ONLY``) and each relation in chunks of consecutive blocks
(``ctid`` ranges: TID range scans, one chunk of ``plpy_anon.read_chunk_blocks`` blocks, default
2048 = 16 MiB of table, per query). One query per chunk aggregates every needed column -- all
aggregates of one query see the rows in the same order:

* numeric columns as ONE ``bytea`` of packed big-endian int8 / float8 (``int8send`` /
  ``float8send`` joined by ``string_agg``, in C), read with ``np.frombuffer``: no Python object per
  value; dates as ``date_send`` writes them (int4 days since 2000-01-01, exact, no arithmetic per
  row); NULL as a number the column's type never reads as (``NULL_STANDS_IN``: int2/int4 as
  int8's minimum, timestamps as NaN, dates as a day past the last one), or else as a mask of one
  byte per row;
* text (categorical columns, numeric columns' exact text) as ONE ``text`` of the chunk's values,
  each followed by the byte 0x01, NULL as the text 0x02, joined by ``string_agg`` and counted
  (``count(column)``): split at the 0x01 bytes and factorized in one pass by the fit's compiled
  kernel where the fit runs on them (else by numpy and pyarrow's ``dictionary_encode``, in C++),
  then merged into one dictionary across chunks. A chunk holding
  a value that contains 0x01 (more pieces than rows) or is 0x02 (more stand-ins than NULLs) is
  read again with that column as ONE ``bytea`` (``textsend`` when the client encoding is UTF-8,
  else ``convert_to``), each value ended by a zero byte (which no text holds), NULL as the byte
  0xFF (which no UTF-8 holds), as is every text where the server's encoding is not UTF-8. No
  Python string per row is ever made (PL/Python turns a ``text[]`` into one per element): what
  is kept is int32 codes, and the values array handed to the methods is ``dictionary[codes]``
  (an object array whose entries all point to the few distinct strings);
* the rows' ctids as ONE ``bytea`` of ``tidsend`` values (6 bytes per row: block, line pointer),
  read with ``np.frombuffer``: they go back to SQL as a ``tid[]`` literal (``ctid_literal``), in
  whatever order the release wants its rows, where ``::tid[]`` (array_in, in C) turns them into
  the join key that brings each row's class back to it.

So the backend's peak grows with the codes (bytes per row per column) and one chunk's text, not
with one Python object per value read (the previous single ``array_agg`` query made ~420 MiB of
Python objects per million rows).

Several physical relations: a ctid is unique only inside one, so for such sources the rows'
``tableoid`` is handed back too (``row_tableoids``) and the release joins back on (tableoid,
ctid); for a source that is one relation it is None (saves a million-element array). The
chunks are read through the root (block ranges of every relation at once, the root's privileges
and policies, the same rows the release's join sees), never by a member's name (read_plan).

Numbers are approximations used for ORDERING only (partitioning): int8 is exact, numeric and
timestamps go through float8, dates are days since 2000-01-01 (as float8 when the column holds
'infinity'). Released bounds are computed in SQL in the column's own type (see ``mondrian.py``).
Non-finite values arrive as they are (±inf, NaN); :func:`refuse_non_finite` is for methods that
cannot release them.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from plpy_anon.core import mondrian_jit
from plpy_anon.core.errors import InvalidParameter
from plpy_anon.db import timing
from plpy_anon.db.columns import NUMERIC_TYPES, Column
from plpy_anon.db.encodings import server_encoding
from plpy_anon.db.guards import Table
from plpy_anon.db.region_spill import LABEL, RoutedRegion
from plpy_anon.db.sqltext import LITERAL_SLICE, ident, int_array_literal, run


@dataclass
class ColumnData:
    values: np.ndarray
    null_mask: np.ndarray | None


class TextColumnData:
    """A column read as text, kept as int32 ``codes`` (-1 for NULL) into ``dictionary`` (its
    distinct strings, in order of first appearance). ``values`` (one object per row, all
    pointing to the dictionary's strings) is built only when a method asks for it: encoding and
    the sensitive codes work from the codes (8 bytes per row and a re-factorization saved)."""

    null_mask = None

    def __init__(self, codes: np.ndarray, dictionary: list[str]):
        self.codes = codes
        self.dictionary = dictionary

    @functools.cached_property
    def values(self) -> np.ndarray:
        table = np.empty(len(self.dictionary) + 1, dtype=object)
        table[:-1] = self.dictionary
        table[-1] = None                         # code -1: NULL
        return table[self.codes]


#: one ctid as tidsend writes it: block number and line pointer, big-endian
TID_DTYPE = np.dtype([("block", ">u4"), ("offset", ">u2")])


@dataclass
class TableData:
    """The rows read: ``n_rows``, each row's ctid (``row_tids``, TID_DTYPE, read order; None when
    not asked for), its tableoid when the source has several physical relations
    (``row_relations``, else None), and the columns asked for."""

    n_rows: int
    row_tids: np.ndarray | None
    columns: dict[str, ColumnData | TextColumnData] = field(default_factory=dict)
    row_relations: np.ndarray | None = None
    exact_times: dict[str, np.ndarray] = field(default_factory=dict)
    numeric_texts: dict[str, TextColumnData] = field(default_factory=dict)
    texts: dict[str, TextColumnData] = field(default_factory=dict)

    @property
    def row_ctids(self) -> str:
        """The ctids in read order as a ``tid[]`` literal (``'{"(0,1)","(0,2)",...}'``)."""
        return self.ctid_literal()

    @property
    def row_tableoids(self) -> str | None:
        """The tableoids in read order as an ``oid[]`` literal, or None (one relation)."""
        return self.tableoid_literal()

    def ctid_literal(self, order: np.ndarray | None = None) -> str:
        """A ``tid[]`` literal of the rows' ctids in read order, or in ``order`` (row indices).
        Built a slice at a time and joined once, the braces added to the end slices: ``"{" +
        whole + "}"`` would copy the whole literal twice more (129 MB each at 10M rows)."""
        return ",".join(self._ctid_slices(order, str)) or "{}"

    def ctid_literal_bytes(self, order: np.ndarray | None = None) -> bytes:
        """:meth:`ctid_literal` as ASCII bytes, each slice encoded as it is made (the literal
        is never held as a str too): what a ``bytea`` result field hands to SQL in one copy."""
        return b",".join(self._ctid_slices(order, lambda text: text.encode("ascii"))) or b"{}"

    def _ctid_slices(self, order, make) -> list:
        tids = self.row_tids if order is None else self.row_tids[order]
        slices = []
        for i in range(0, tids.shape[0], LITERAL_SLICE):
            part = tids[i:i + LITERAL_SLICE]
            text = ",".join([f'"({b},{o})"' for b, o in zip(part["block"].tolist(),
                                                           part["offset"].tolist())])
            if i == 0:
                text = "{" + text
            if i + LITERAL_SLICE >= tids.shape[0]:
                text += "}"                  # with one slice, the same one as the "{"
            slices.append(make(text))
        return slices

    def tableoid_literal(self, order: np.ndarray | None = None) -> str | None:
        if self.row_relations is None:
            return None
        return int_array_literal(self.row_relations if order is None else self.row_relations[order])


HAS_CHILDREN = """
SELECT c.relkind = 'p' OR c.relhassubclass AS has_children FROM pg_catalog.pg_class c WHERE c.oid = $1
"""


def has_children(plpy, tbl: Table) -> bool:
    """True for a partitioned table or a table with inheritance children (rows in several
    physical relations, so ctids alone do not identify them)."""
    return bool(run(plpy, HAS_CHILDREN, ["oid"], [tbl.oid])[0]["has_children"])


def read_expression(plpy, col: Column) -> str:
    """The SQL expression reading a numeric column as a number (see ``NUMERIC_TYPES``)."""
    return NUMERIC_TYPES[col.type_name][0] % {"c": ident(plpy, col.name)}


RELATIONS = """
WITH RECURSIVE tree(oid) AS (
    SELECT $1::pg_catalog.oid
    UNION ALL
    SELECT i.inhrelid FROM pg_catalog.pg_inherits i JOIN tree ON i.inhparent = tree.oid)
SELECT c.oid::int8 AS oid,
       (pg_catalog.pg_relation_size(c.oid)
        / pg_catalog.current_setting('block_size')::int8)::int8 AS blocks
FROM tree JOIN pg_catalog.pg_class c ON c.oid = tree.oid
ORDER BY c.oid
"""
DEFAULT_CHUNK_BLOCKS = 2048


def chunk_blocks(plpy) -> int:
    """Blocks per chunk: ``plpy_anon.read_chunk_blocks`` if set (any role may: it only trades
    round trips for memory), else 2048 (16 MiB of table)."""
    raw = run(plpy, "SELECT pg_catalog.current_setting('plpy_anon.read_chunk_blocks', true) AS b")[0]["b"]
    try:
        return max(1, int(raw)) if raw else DEFAULT_CHUNK_BLOCKS
    except ValueError:
        return DEFAULT_CHUNK_BLOCKS


def read_plan(plpy, tbl: Table) -> tuple[list[tuple[str, int]], bool]:
    """([(quoted relation to read, its size in blocks)], several physical relations?).

    A tree of relations is read through its root, the one name the guard keeps from being
    renamed: chunk i covers blocks [i * chunk, (i + 1) * chunk) of every member. Naming each
    member instead let a custodian rename the member's schema between the guard's check and the
    read and put a table of her own under that name, whose index predicate the read's planning
    then ran with the reader's rights."""
    rels = run(plpy, RELATIONS, ["oid"], [tbl.oid])
    if len(rels) == 1:
        return [(f"ONLY {tbl.quoted(plpy)}", int(rels[0]["blocks"]))], False
    return [(tbl.quoted(plpy), max(int(r["blocks"]) for r in rels))], True


def _chunks(blocks: int, chunk: int):
    """(lower tid, upper tid or None) block ranges covering a relation of ``blocks`` blocks; the
    last is open-ended (rows of our snapshot cannot lie beyond the size read, but this costs
    nothing)."""
    starts = list(range(0, max(blocks, 1), chunk))
    for i, b in enumerate(starts):
        yield f"({b},0)", (f"({starts[i + 1]},0)" if i + 1 < len(starts) else None)


#: what :func:`text_aggregate` writes for NULL: a byte no UTF-8 text holds, then the end mark
NULL_TEXT = b"\xff\x00"
#: :func:`plain_text_aggregate`'s separator and its stand-in for NULL (the number of NULLs is
#: counted beside them, so a text that holds either is found, and its chunk read again)
TEXT_SEPARATOR, TEXT_NULL = "\x01", "\x02"


def text_aggregate(expression: str, send: bool) -> str:
    """SQL aggregating a text expression of a chunk into one ``bytea``: each value in UTF-8
    followed by a zero byte, NULL as 0xFF (see :class:`TextDictionary`). With ``send`` (the
    session's client encoding is UTF-8) by ``textsend``, which writes the client encoding and is
    cheaper than ``convert_to``'s look-up of the encoding by name for every value."""
    utf8 = f"pg_catalog.textsend({expression})" if send else \
        f"pg_catalog.convert_to({expression}, 'UTF8')"
    return f"pg_catalog.string_agg(coalesce({utf8}, '\\xff'::bytea), '\\x00'::bytea)"


def plain_text_aggregate(expression: str, column: str, alias: str) -> str:
    """SQL aggregating a text expression of a chunk (of ``column``: NULL where it is) into one
    ``text`` (``alias``), each value followed by :data:`TEXT_SEPARATOR` and NULL as
    :data:`TEXT_NULL`, and counting the values that are not NULL (``alias_n``): no conversion of
    each value to bytes (a fifth cheaper than :func:`text_aggregate`); a chunk where a value
    holds either character is read again by it (:meth:`TextDictionary.split_text` finds them)."""
    return (f"pg_catalog.string_agg(coalesce({expression}, E'\\x02'), E'\\x01') AS {alias}, "
            f"pg_catalog.count({column}) AS {alias}_n")


def client_is_utf8(plpy) -> bool:
    return run(plpy, "SELECT pg_catalog.pg_client_encoding() = 'UTF8' AS utf8")[0]["utf8"]


def server_is_utf8(plpy) -> bool:
    """Whether text values arrive in Python as they are (PL/Python decodes the server's
    encoding; SQL_ASCII text may hold bytes that are no UTF-8)."""
    return server_encoding(plpy) == "UTF8"


class TextDictionary:
    """Text values merged across chunks: int32 codes into one list of distinct strings."""

    def __init__(self):
        self.index: dict[str, int] = {}
        #: each chunk's (code of each of its distinct values, each value's index into them)
        self.parts: list[tuple[np.ndarray, np.ndarray]] = []

    @staticmethod
    def split_packed(packed: bytes, n: int):
        """A chunk's ``n`` values packed by :func:`text_aggregate`, factorized: (distinct
        values, each ending with its mark; each value's index into them; NULL's entry)."""
        encoded = _factorized(packed + b"\x00", 0, n)     # the last value's end mark
        if encoded is None:
            raise RuntimeError(f"read other than {n} text values")
        return (*encoded, NULL_TEXT)

    @staticmethod
    def split_text(text: str, n: int, nulls: int):
        """:meth:`split_packed` of a chunk's values aggregated by :func:`plain_text_aggregate`
        (``nulls`` of them NULL), or None when a value holds its separator (more pieces than
        rows) or its NULL stand-in (more stand-ins than NULLs)."""
        end = TEXT_SEPARATOR.encode()
        utf8 = text if isinstance(text, bytes) else text.encode("utf-8")
        encoded = _factorized(utf8 + end, end[0], n)
        if encoded is None:
            return None
        uniques, indices = encoded
        null = (TEXT_NULL + TEXT_SEPARATOR).encode()
        stand_ins = np.count_nonzero(indices == uniques.index(null)) if null in uniques else 0
        return None if stand_ins != nulls else (uniques, indices, null)

    def add(self, uniques: list[bytes], indices: np.ndarray, null: bytes) -> None:
        """Add a chunk's values split by :meth:`split_packed` or :meth:`split_text`."""
        mapping = np.fromiter((-1 if u == null else
                               self.index.setdefault(u[:-1].decode("utf-8"), len(self.index))
                               for u in uniques), dtype=np.int32, count=len(uniques))
        self.parts.append((mapping, indices))

    def column(self) -> TextColumnData:
        """The codes, each chunk's looked up straight into one array (its codes, then their
        concatenation, would copy every code twice)."""
        codes = np.empty(sum(indices.shape[0] for _, indices in self.parts), dtype=np.int32)
        at = 0
        for mapping, indices in self.parts:
            # the indices (the kernel's or pyarrow's) each < its chunk's distinct values: no
            # bounds to check
            np.take(mapping, indices, out=codes[at:at + indices.shape[0]], mode="clip")
            at += indices.shape[0]
        self.parts = []
        return TextColumnData(codes, list(self.index))


def _factorized(buffer: bytes, end: int, n: int):
    """(distinct values, each with its end mark; each value's index into them) of ``buffer``,
    ``n`` values each ended by the byte ``end``, factorized by the compiled kernel where the
    fit's kernels run (core.mondrian_jit.factorized_marked: no import of pyarrow, ~0.045 s of
    CPU in a new backend), else by pyarrow; None when ``buffer`` holds another number of end
    marks."""
    if not mondrian_jit.kernels_loaded() and mondrian_jit.worth_loading(n):
        # the fit's kernels, which the build's fit loads in this phase when no text is read
        with timing.phase("load_kernels"):
            mondrian_jit.kernels()
    compiled = mondrian_jit.factorized_marked(buffer, end, n)
    if compiled is not None:
        return None if compiled[0] is None else compiled
    import pyarrow as pa  # here: the calls that read no text never pay for its import

    ends = np.flatnonzero(np.frombuffer(buffer, dtype=np.uint8) == end)
    if ends.shape[0] != n:
        return None
    offsets = np.empty(n + 1, dtype=np.int32)
    offsets[0] = 0
    offsets[1:] = ends + 1
    # each value with its end mark: equal values, equal bytes; the mark is cut off by the caller
    values = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets),
                                                     pa.py_buffer(buffer)])
    encoded = _dictionary_encode(values)
    return encoded.dictionary.to_pylist(), _int32_values(encoded.indices)


def _dictionary_encode(values):
    """``values.dictionary_encode()`` through pyarrow's kernel registry: the method imports
    pyarrow.compute, which first writes a Python wrapper for each of its ~300 kernels (~0.03 s
    of CPU in every fresh backend that reads text), to call this one kernel."""
    try:
        from pyarrow._compute import call_function
    except ImportError:                  # a pyarrow that moved it: the public method
        return values.dictionary_encode()
    return call_function("dictionary_encode", [values])


def _int32_values(array) -> np.ndarray:
    """The values of a pyarrow int32 array without NULLs, as a numpy view of its buffer
    (``to_numpy`` would import pandas, a third of a fresh backend's first call)."""
    validity, data = array.buffers()
    if validity is not None and array.null_count:
        raise RuntimeError("dictionary indices with NULLs")
    return np.frombuffer(data, dtype=np.int32, count=len(array), offset=array.offset * 4)


#: the types whose read number has a value no row can give it, which stands for NULL (in SQL; in
#: the values handed on, what the column held there before: 0): a column of them is read with no
#: NULL mask of its own
NULL_STANDS_IN = {
    "int2": ("(-9223372036854775808)::int8", np.iinfo(np.int64).min, 0),
    "int4": ("(-9223372036854775808)::int8", np.iinfo(np.int64).min, 0),
    "timestamp": ("'NaN'::float8", np.nan, 0.0),            # seconds or +-infinity, never NaN
    "timestamptz": ("'NaN'::float8", np.nan, 0.0),
}

#: a date as date_send writes it: days since 2000-01-01 as a big-endian int4, +-infinity as the
#: int4 maximum / minimum; NULL as a day past the last date PostgreSQL has (5874897-12-31)
DATE_NULL = 2**31 - 2
DATE_INFINITIES = (2**31 - 1, -2**31)

#: each value's microseconds since 2000-01-01 (UTC for timestamptz), what timestamp_send
#: writes: exact, where the float8 epoch read for ordering is not (int64 min / max: +-infinity)
EXACT_TIME_TYPES = ("timestamp", "timestamptz")


def _number_select(plpy, i: int, col: Column) -> list[str]:
    """The aggregates reading numeric column ``i`` of a chunk (see the module docstring)."""
    column = ident(plpy, col.name)
    if col.type_name == "date":          # the days themselves, exact: no arithmetic per row
        return [(f"pg_catalog.string_agg(coalesce(pg_catalog.date_send({column}), "
                 f"'\\x7ffffffe'::bytea), ''::bytea) AS n{i}")]
    is_int = NUMERIC_TYPES[col.type_name][2] == "int"
    send = "int8send" if is_int else "float8send"
    value = f"({read_expression(plpy, col)})::{'int8' if is_int else 'float8'}"
    selects = []
    if col.not_null:
        value = f"coalesce({value}, 0)"
    elif col.type_name in NULL_STANDS_IN:       # NULL as a number the column cannot hold
        value = (f"CASE WHEN {column} IS NULL "
                 f"THEN {NULL_STANDS_IN[col.type_name][0]} ELSE {value} END")
    else:
        value = f"coalesce({value}, 0)"
        selects.append(f"pg_catalog.string_agg(CASE WHEN {column} IS NULL "
                       f"THEN '\\x01'::bytea ELSE '\\x00'::bytea END, ''::bytea) AS z{i}")
    selects.append(f"pg_catalog.string_agg(pg_catalog.{send}({value}), ''::bytea) AS n{i}")
    return selects


def _numbers(col: Column, parts: list[np.ndarray], masks: list[np.ndarray]):
    """(values, NULL mask or None) of numeric column ``col`` from its chunks' parts."""
    kind = NUMERIC_TYPES[col.type_name][2]
    if col.type_name == "date":
        days = _joined(parts, np.int64)
        null = days == DATE_NULL
        plus, minus = days == DATE_INFINITIES[0], days == DATE_INFINITIES[1]
        mask = None if col.not_null else null
        if not (null.any() or plus.any() or minus.any()):
            return days, mask             # days: ints when every one is a day
        values = days.astype(np.float64)
        values[plus] = np.inf
        values[minus | null] = -np.inf    # NULL: what the column held there before
        return values, mask
    values = _joined(parts, np.int64 if kind == "int" else np.float64)
    if col.not_null:
        mask = None
    elif col.type_name in NULL_STANDS_IN:
        stand_in, stored = NULL_STANDS_IN[col.type_name][1:]
        mask = np.isnan(values) if np.isnan(stand_in) else values == stand_in
        values[mask] = stored
    else:
        mask = _joined(masks, bool)
    return values, mask


def _joined(parts: list[np.ndarray], dtype) -> np.ndarray:
    """The chunks' big-endian ``parts`` as one array of ``dtype``, each converted as it is
    copied in (a concatenation, then a conversion, would copy every value twice)."""
    out = np.empty(sum(part.shape[0] for part in parts), dtype=dtype)
    at = 0
    for part in parts:
        out[at:at + part.shape[0]] = part
        at += part.shape[0]
    return out


def read_columns(plpy, tbl: Table, numeric: list[Column], categorical: list[Column],
                 *, located: bool = True, exact: bool = False, texts: list[Column] = (),
                 where: str | None = None) -> TableData:
    """Read ``numeric`` columns as numbers and ``categorical`` columns as text, chunk by chunk
    (see the module docstring); with ``located``, each row's ctid (and relation) too; with
    ``exact``, what the float8 read for ordering rounds, exactly: each timestamp column's
    microseconds (``data.exact_times``) and each numeric column's text (``data.numeric_texts``,
    coded like a categorical column's); ``texts``: these columns' text too, whatever else reads
    them (``data.texts``); ``where``: only the rows of this SQL condition (built by the caller
    from quoted identifiers and literals; a :class:`RoutedRegion`: that region's rows, from its
    pass's file where the pass serves this read, else by its predicate)."""
    region = where if isinstance(where, RoutedRegion) else None
    where = region.predicate if region is not None else where
    plan, several = read_plan(plpy, tbl)
    several = several and located
    selects = ["count(*) AS n"]
    if located:
        selects.append("pg_catalog.string_agg(pg_catalog.tidsend(ctid), ''::bytea) AS row_tids")
    if several:
        selects.append("pg_catalog.string_agg(pg_catalog.oidsend(tableoid), ''::bytea) "
                       "AS row_relations")
    kinds = []
    # each text read: its alias, SQL expression, column and where its values go
    numeric_texts = [TextDictionary() for _ in numeric]
    dictionaries = [TextDictionary() for _ in categorical]
    text_dictionaries = [TextDictionary() for _ in texts]
    text_reads = []
    for i, col in enumerate(numeric):
        kinds.append(">i4" if col.type_name == "date" else
                     ">i8" if NUMERIC_TYPES[col.type_name][2] == "int" else ">f8")
        selects.extend(_number_select(plpy, i, col))
        if exact and col.type_name == "numeric":
            text_reads.append((f"x{i}", f"{ident(plpy, col.name)}::text", ident(plpy, col.name),
                               numeric_texts[i]))
        if exact and col.type_name in EXACT_TIME_TYPES:
            selects.append(f"pg_catalog.string_agg(coalesce(pg_catalog.{col.type_name}_send("
                           f"{ident(plpy, col.name)}), '\\x0000000000000000'::bytea), ''::bytea) AS e{i}")
    text_reads += [(f"c{i}", col.as_text(plpy), ident(plpy, col.name), dictionaries[i])
                   for i, col in enumerate(categorical)]
    text_reads += [(f"t{i}", col.as_text(plpy), ident(plpy, col.name), text_dictionaries[i])
                   for i, col in enumerate(texts)]
    send_text = client_is_utf8(plpy)
    # texts read as bytes (text_aggregate) rather than as text (plain_text_aggregate): every
    # one where the server's text is not UTF-8, else those a chunk found holding the separator
    # or the NULL stand-in, from that chunk on
    as_bytes = {alias for alias, *_ in text_reads} if text_reads and not server_is_utf8(plpy) \
        else set()
    step = chunk_blocks(plpy)
    n_rows = 0
    ctids, tableoids = [], []
    numbers = [[] for _ in numeric]
    masks = [[] for _ in numeric]
    exact_parts = [[] for _ in numeric]
    condition = f" AND ({where})" if where else ""
    prepared = {}

    def aggregates(as_bytes: frozenset) -> str:
        return ", ".join(selects + [
            f"{text_aggregate(sql, send_text)} AS {alias}" if alias in as_bytes
            else plain_text_aggregate(sql, column, alias) for alias, sql, column, _ in text_reads])

    def chunk_row(relation: str, lo: str, hi: str | None, whole: bool, as_bytes: frozenset):
        read = aggregates(as_bytes)
        if whole:
            # one query planned for this call: a saved plan never runs in parallel workers, a
            # one-shot one may (an out-of-core region's filtered scan)
            return plpy.execute(f"SELECT {read} FROM {relation}"
                                + (f" WHERE {where}" if where else ""))[0]
        key = (relation, hi is not None, as_bytes)
        if key not in prepared:
            bounds = "ctid >= $1::tid AND ctid < $2::tid" if hi is not None else "ctid >= $1::tid"
            prepared[key] = plpy.prepare(f"SELECT {read} FROM {relation} WHERE {bounds}"
                                         f"{condition}", ["text", "text"] if hi is not None
                                         else ["text"])
        return (prepared[key].execute([lo, hi]) if hi is not None
                else prepared[key].execute([lo]))[0]

    def chunk_rows():
        """(row, its texts split) of each chunk holding rows."""
        for relation, blocks in plan:
            for lo, hi in _chunks(blocks, step):
                while True:
                    row = chunk_row(relation, lo, hi, blocks <= step, frozenset(as_bytes))
                    n = int(row["n"])
                    if n == 0:
                        break
                    split = {alias: TextDictionary.split_packed(row[alias], n) if alias in as_bytes
                             else TextDictionary.split_text(row[alias], n,
                                                            n - int(row[f"{alias}_n"]))
                             for alias, *_ in text_reads}
                    again = {alias for alias, values in split.items() if values is None}
                    if not again:
                        break
                    as_bytes.update(again)     # a value holds the separator or NULL's stand-in
                if n:
                    yield row, split

    def routed_rows(spill):
        """The same of the region's rows, from its file (the pass made by the first read)."""
        if spill.key is None:
            spill.key = key
            # texts read as bytes from the start (a server whose text is not UTF-8) stay so
            read_as_bytes = frozenset(as_bytes)
            spill.write(plpy, [(relation, lo, hi) for relation, blocks in plan
                               for lo, hi in _chunks(blocks, spill.chunk)],
                        lambda relation, bounded, found: (
                            f"SELECT {spill.label} AS {LABEL}, {aggregates(read_as_bytes | found)} "
                            f"FROM {relation} WHERE ctid >= $1::tid"
                            + (" AND ctid < $2::tid" if bounded else "") + " GROUP BY 1"),
                        [alias for alias, *_ in text_reads if alias not in read_as_bytes])
        for row in spill.records(region.number):
            n = row["n"]
            # a text the pass read as text has its count of values beside it
            split = {alias: TextDictionary.split_text(row[alias], n, n - row[f"{alias}_n"])
                     if f"{alias}_n" in row else TextDictionary.split_packed(row[alias], n)
                     for alias, *_ in text_reads}
            if any(values is None for values in split.values()):
                raise RuntimeError("out-of-core run: a region's file holds other texts than read")
            yield row, split

    key = (tuple(plan), tuple(selects), tuple(sql for _, sql, *_ in text_reads),
           frozenset(as_bytes), send_text)
    spill = region.spill if region is not None and region.spill.serves(key) else None
    for row, split in (routed_rows(spill) if spill is not None else chunk_rows()):
        n = int(row["n"])
        n_rows += n
        if located:
            ctids.append(np.frombuffer(row["row_tids"], dtype=TID_DTYPE))
        if several:
            tableoids.append(np.frombuffer(row["row_relations"], dtype=">u4"))
        for i, col in enumerate(numeric):
            numbers[i].append(np.frombuffer(row[f"n{i}"], dtype=kinds[i]))
            if f"z{i}" in row:
                masks[i].append(np.frombuffer(row[f"z{i}"], dtype=np.uint8))
            if f"e{i}" in row:
                exact_parts[i].append(np.frombuffer(row[f"e{i}"], dtype=">i8"))
        for alias, _, _, dictionary in text_reads:
            dictionary.add(*split.pop(alias))
        del row, split
    tids = None if not located else np.concatenate(ctids) if ctids else np.empty(0, dtype=TID_DTYPE)
    data = TableData(n_rows, tids,
                     row_relations=np.concatenate(tableoids).astype(np.uint32) if tableoids else None)
    del ctids, tableoids
    if n_rows == 0:
        return data
    for i, col in enumerate(numeric):
        data.columns[col.name] = ColumnData(*_numbers(col, numbers[i], masks[i]))
        numbers[i] = masks[i] = None
        if exact_parts[i]:
            data.exact_times[col.name] = _joined(exact_parts[i], np.int64)
            exact_parts[i] = None
        if numeric_texts[i].parts:
            data.numeric_texts[col.name] = numeric_texts[i].column()
    for i, col in enumerate(categorical):
        data.columns[col.name] = dictionaries[i].column()
    for i, col in enumerate(texts):
        data.texts[col.name] = text_dictionaries[i].column()
    return data


#: built-in types whose equal values always print the same text: no merge is needed. Any other
#: built-in type may spell one value several ways: '1.0' and '1.00' (numeric, and inside jsonb,
#: arrays, ranges), '-0' and '0' (floats), '1 day' and '24:00:00' (interval); json, which has no
#: equality, as jsonb ('{"a":1}' and '{"a": 1}'); and strings under a nondeterministic collation
#: ('HIV' and 'hiv' under a case-insensitive one). Strings under a deterministic one are one text
#: per value.
CANONICAL_TYPES = ("bool", "int2", "int4", "int8", "oid", "date", "uuid", "timestamp",
                   "timestamptz", "time", "char", "bytea")

NONDETERMINISTIC_COLLATIONS = """
SELECT a.attname::text AS name, pg_catalog.format('%I.%I', cn.nspname, co.collname) AS collation
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_collation co ON co.oid = a.attcollation
JOIN pg_catalog.pg_namespace cn ON cn.oid = co.collnamespace
WHERE a.attrelid = $1 AND a.attname = ANY($2) AND NOT a.attisdropped AND NOT co.collisdeterministic
"""


def nondeterministic_collations(plpy, oid: int, names: list[str]) -> dict[str, str]:
    """Those of the columns ``names`` of relation ``oid`` under a nondeterministic collation,
    with that collation's qualified name: equal values there may be spelled differently."""
    return {r["name"]: r["collation"] for r in run(plpy, NONDETERMINISTIC_COLLATIONS,
                                                    ["oid", "text[]"], [oid, list(names)])}


def spelled_columns(plpy, tbl: Table, columns: list[Column]) -> list[Column]:
    """Those of ``columns`` (read as text) whose equal values may be read as different texts
    (see CANONICAL_TYPES): also domains over domains, arrays of domains and composite types
    ('1.0' and '1.00' in each). Grouping them runs no role's code: a type's equality
    comes from its default operator class, which only a superuser can create."""
    collated = nondeterministic_collations(plpy, tbl.oid, [c.name for c in columns])
    return [c for c in columns if c.name in collated or (
        c.category not in ("S", "E") and not (c.builtin and c.type_name in CANONICAL_TYPES))]


def merge_equal_spellings(plpy, tbl: Table, data: TableData, columns: list[Column]) -> None:
    """Give values that are EQUAL in their column's type and collation one code and one text
    (the smallest of their spellings), in place, for the columns of ``spelled_columns``. Read as
    text, '1.0' and '1.00' would be two values, and a group holding one value would count as
    l = 2. The spellings are grouped by PostgreSQL itself (GROUP BY the column, which
    uses the type's equality and the column's collation): one aggregate over the source per
    such column, returning only values spelled more than one way."""
    for col in spelled_columns(plpy, tbl, columns):
        d = data.columns.get(col.name)
        if not isinstance(d, TextColumnData) or not d.dictionary:
            continue
        column = ident(plpy, col.name)
        value = f"s.{column}::pg_catalog.jsonb" if col.type_name == "json" else f"s.{column}"
        try:
            with plpy.subtransaction():
                groups = run(plpy, f"""
                    SELECT pg_catalog.array_agg(x.t) AS spellings
                    FROM (SELECT {value} AS v, ({col.as_text(plpy, 's')}) COLLATE pg_catalog."C" AS t
                          FROM {tbl.quoted(plpy)} AS s
                          WHERE s.{column} IS NOT NULL GROUP BY 1, 2) AS x
                    GROUP BY x.v HAVING pg_catalog.count(*) > 1""")
        except plpy.SPIError:
            continue         # a type without equality (xml, point, ...): its values are its texts
        if not groups:
            continue
        index = {text: i for i, text in enumerate(d.dictionary)}
        mapping = np.arange(len(d.dictionary) + 1, dtype=np.int32)   # last entry: NULL (-1)
        mapping[-1] = -1
        for g in groups:
            present = sorted(t for t in g["spellings"] if t in index)
            for t in present[1:]:
                mapping[index[t]] = index[present[0]]
        merged = mapping[d.codes]
        kept = merged >= 0
        import pandas as pd  # here: only a column whose spellings merge pays its import
        local, uniques = pd.factorize(merged[kept])
        codes = np.full(merged.shape[0], -1, dtype=np.int32)
        codes[kept] = local
        data.columns[col.name] = TextColumnData(codes, [d.dictionary[u] for u in uniques])


def refuse_non_finite(tbl: Table, data: TableData, columns: list[Column], method: str) -> None:
    """A clear error naming the first numeric column holding NaN or ±infinity (read as such), for
    methods that compute with the numbers themselves."""
    for col in columns:
        d = data.columns.get(col.name)
        if d is None or d.values.dtype != np.float64:
            continue
        bad = ~np.isfinite(d.values)
        if d.null_mask is not None:
            bad &= ~d.null_mask
        if bad.any():
            raise non_finite_error(tbl, col.name, "NaN" if np.isnan(d.values[bad]).any()
                                   else "infinity", method)


def non_finite_error(tbl: Table, column: str, what: str, method: str) -> InvalidParameter:
    return InvalidParameter(
        f'column "{column}" of {tbl.label} holds {what}, which {method} cannot release',
        hint=f'Replace it with NULL (UPDATE ... SET "{column}" = NULL WHERE "{column}" '
             "IN ('NaN', 'Infinity', '-Infinity')) or declare the column ignored or sensitive; "
             "anon.mondrian_view and anon.break_merge release such values.")
