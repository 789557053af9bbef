"""One pass over a relation's rows, grouped by its quasi-identifiers: the counts both the release
check (``verify.py``) and the risk report (``risk.py``) read.

A release's classes are its rows with identical released quasi-identifiers (ranges, value sets),
exactly what an analyst can link on. Grouping them means hashing every row's ranges and arrays,
the costliest read of a release (1M release rows: ~2.9 s for the check's pass, ~3.5 s for the
report's). Every build checks the release and then stores its report, over the same rows and the
same quasi-identifiers; :class:`Counter` makes that one pass: the check asks first, for the
columns of both, and the report is served from it.

:class:`ClassCounts` holds the class-size histogram (size, classes of that size: a few hundred
numbers whatever the table size) and, per sensitive column, the class x value table
``(class id, value id, rows)`` with value ids ranked in the column's order, NULL as -1: a NULL is
no value an attacker is unsure between, and counts for no privacy model (``known``). Everything
else (rows, classes, k, distinct l, entropy, (c,l), t) follows in numpy.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from plpy_anon.core import mondrian_jit
from plpy_anon.core import risk as core_risk
from plpy_anon.core.privacy_models import ClassCheck
from plpy_anon.db.compact import stored_rows
from plpy_anon.db.sqltext import build_work_mem, columns_as_text, ident, jsonb, local_settings, run

#: hash_mem_multiplier of the pass (restored afterwards). The planner sizes each array_agg state
#: of the class hash table at 8 kB (its memory context's initial block), ~8x what a class's state
#: holds, and the hash aggregate spills once the classes outnumber hash memory / 8 kB: at the
#: default multiplier (2) and 256MB, past ~60,000 classes (2M release rows: 300 MB of temporary
#: files, with 150 MB of memory really used). 16 lets ~500,000 classes hash in memory.
HASH_MEM_MULTIPLIER = "16"


def pass_settings(plpy, budget: int | None) -> dict:
    """work_mem and hash_mem_multiplier of the pass (and of the check's other queries). With a
    ``budget`` (an out-of-core release's plpy_anon.build_memory, bytes) they are capped by it:
    work_mem at an eighth, each hash table at a quarter (the grouping spills to temporary files
    past it rather than grow with the release's classes), since the pass holds several nodes of
    work_mem at once (the hashed classes, the materialized CTEs) besides the counts it returns."""
    work_mem = build_work_mem(plpy)
    if budget is None:
        return {"work_mem": work_mem, "hash_mem_multiplier": HASH_MEM_MULTIPLIER}
    wanted = run(plpy, "SELECT pg_catalog.pg_size_bytes($1) AS b", ["text"], [work_mem])[0]["b"]
    capped = max(64 * 1024, min(int(wanted), budget // 8))
    multiplier = max(1.0, min(float(HASH_MEM_MULTIPLIER), (budget // 4) / capped))
    return {"work_mem": f"{capped // 1024}kB", "hash_mem_multiplier": f"{multiplier:g}"}


@dataclass
class ClassCounts:
    """The counts of one pass (see the module docstring). ``tables[column]`` is
    ``(class_ids, value_ids, rows)``, one entry per (class, value) pair present, in class order
    (int32 where every one fits)."""

    relation: str
    qis: tuple[str, ...]
    sensitive: tuple[str, ...]
    sizes: np.ndarray
    classes: np.ndarray
    tables: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)
    #: work_mem and hash_mem_multiplier the pass ran with (read by current_setting inside it)
    settings: dict[str, str] = field(default_factory=dict)
    #: a bounded pass's figures per sensitive column instead of its table (:func:`read_streamed`):
    #: ``fewest_distinct`` and, for a column whose order was announced, ``figures`` (those of
    #: core.risk.sensitive_figures with ``c``); with the check's models, ``models`` (their
    #: core.privacy_models.ClassCheck, None for a column without a value)
    streamed: dict[str, dict] = field(default_factory=dict)

    @property
    def n_rows(self) -> int:
        return int((self.sizes * self.classes).sum())

    @property
    def n_classes(self) -> int:
        return int(self.classes.sum())

    @property
    def smallest(self) -> int | None:
        present = self.sizes[self.classes > 0]
        return int(present.min()) if present.size else None

    def known(self, column: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``tables[column]`` without its NULL pairs: what the privacy models count."""
        if column not in self.tables:
            raise RuntimeError(f'the class x value table of "{column}" was not kept (a bounded pass)')
        class_ids, value_ids, rows = self.tables[column]
        kept = value_ids >= 0
        if kept.all():
            return class_ids, value_ids, rows
        return class_ids[kept], value_ids[kept], rows[kept]

    def fewest_distinct(self, column: str) -> int | None:
        """The smallest number of distinct values of ``column`` that are not NULL in a class (what
        SQL's ``count(DISTINCT column)`` gives); None without classes. A class of NULLs counts 0."""
        if self.n_classes == 0:
            return None
        if column in self.streamed:
            return self.streamed[column]["fewest_distinct"]
        class_ids = self.known(column)[0]
        return int(np.bincount(class_ids, minlength=self.n_classes).min())

    def sensitive_figures(self, column: str, *, ordered: bool, c: float) -> dict:
        """core.risk.sensitive_figures of ``column``'s table (NULL pairs left out)."""
        streamed = self.streamed.get(column)
        if streamed is None:
            return core_risk.sensitive_figures(*self.known(column), ordered=ordered, c=c,
                                               n_classes=self.n_classes)
        if streamed.get("ordered") != ordered or streamed.get("c") != c:
            raise RuntimeError(f'the bounded pass counted "{column}" for other figures')
        return streamed["figures"]

    def serves(self, relation: str, qis, sensitive) -> bool:
        return (relation == self.relation and set(qis) == set(self.qis)
                and set(sensitive) <= set(self.sensitive))


def per_class_query(plpy, storage: str, rows: str, sensitive) -> str:
    """:func:`class_query`'s ``grouped`` for a compact release: its storage holds one row per
    class already (``rows``: the SQL of the rows its view makes of one, each sensitive column an
    array of the class's values), so no row is hashed."""
    carried = "".join(f", s.{ident(plpy, column)} AS vals{i}" for i, column in enumerate(sensitive))
    # a stored class of no rows (a stable version's withdrawn group) is no class the view shows
    return (f"SELECT pg_catalog.row_number() OVER () - 1 AS cid, ({rows})::int8 AS n{carried}\n"
            f"    FROM {storage} AS s WHERE ({rows}) > 0")


#: what separates a stored class's values in :func:`stored_texts_query` (array_to_string's
#: delimiter); a value holding it is found by the count of pieces (:class:`AmbiguousTexts`)
STORED_DELIMITER = "\x01"


class AmbiguousTexts(Exception):
    """A stored value holds :data:`STORED_DELIMITER`: its class's texts cannot be split apart
    (the pass is then counted in SQL, :func:`class_query`)."""


def stored_texts_query(plpy, storage: Storage, qis, sensitive, bounds: str = "") -> str:
    """The stored classes (``bounds``: those of this ctid condition), one row each in storage
    order (class id = row number): its rows
    ``n`` (as the view unfolds it), a hash of its QIs ``h`` (equal QIs, equal hashes: two
    classes an analyst sees as one have the same) and, per sensitive column ``i``, its elements
    ``e<i>``, its NULL elements ``z<i>`` and its other values' texts joined by
    :data:`STORED_DELIMITER` (``t<i>``: the output function's text, C code over the stored
    array; no element is unnested or hashed in SQL: :func:`read_stored` tells the values apart
    and ranks them)."""
    group = ", ".join(f"s.{ident(plpy, q)}" for q in qis)
    columns = [f", pg_catalog.hash_record_extended(ROW({group}), 0) AS h"]
    for i, column in enumerate(sensitive):
        c = f"s.{ident(plpy, column)}"
        columns.append(
            f", coalesce(pg_catalog.cardinality({c}), 0)::int8 AS e{i}"
            # array_remove copies the array: only where array_position finds a NULL
            f", CASE WHEN pg_catalog.array_position({c}, NULL) IS NULL THEN 0 "
            f"ELSE pg_catalog.cardinality({c}) - pg_catalog.cardinality("
            f"pg_catalog.array_remove({c}, NULL)) END::int8 AS z{i}"
            f", pg_catalog.array_to_string({c}, E'\\x01') AS t{i}")
    # a stored class of no rows (a version that publishes none of a group) is no class the
    # view shows
    return (f"SELECT ({storage.rows})::int8 AS n{''.join(columns)} FROM {storage.relation} AS s "
            f"WHERE ({storage.rows}) > 0{bounds}")


def stored_chunk_query(plpy, storage: Storage, qis, sensitive, bounded_above: bool) -> str:
    """:func:`stored_texts_query`'s rows of a range of blocks (``$1`` to ``$2``, or to the end
    without ``bounded_above``) in ONE row: ``classes``, each int8 column packed into one
    ``bytea`` (:func:`int8_array`) and each ``t<i>`` of the classes holding values joined by
    :data:`STORED_DELIMITER` (all aggregates see the classes in the same order): no row and no
    value per class for PL/Python to convert."""
    bounds = " AND s.ctid >= $1::pg_catalog.tid" + (" AND s.ctid < $2::pg_catalog.tid"
                                                    if bounded_above else "")
    columns = ["pg_catalog.count(*) AS classes", packed_column("n"), packed_column("h")]
    for i in range(len(sensitive)):
        columns += [packed_column(f"e{i}"), packed_column(f"z{i}"),
                    f"pg_catalog.string_agg(c.t{i}, E'\\x01') FILTER (WHERE c.e{i} > c.z{i}) AS t{i}"]
    return (f"SELECT {', '.join(columns)}\n"
            f"FROM ({stored_texts_query(plpy, storage, qis, sensitive, bounds)}) AS c")


def packed_column(name: str) -> str:
    """An int8 column of :func:`stored_texts_query` packed as :func:`packed` does."""
    return f"pg_catalog.string_agg(pg_catalog.int8send(c.{name}), ''::bytea) AS {name}"


#: the type (with its modifier) and the collation other than the default of a stored column
STORED_COLUMN = """
SELECT pg_catalog.format_type(a.atttypid, a.atttypmod) AS array_type,
       CASE WHEN a.attcollation NOT IN (0, 'pg_catalog.default'::pg_catalog.regcollation)
            THEN pg_catalog.format('%I.%I', n.nspname, c.collname) END AS collation
FROM pg_catalog.pg_attribute a
LEFT JOIN pg_catalog.pg_collation c ON c.oid = a.attcollation
LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.collnamespace
WHERE a.attrelid = $1::pg_catalog.regclass AND a.attname = $2 AND NOT a.attisdropped"""


def value_ranks(plpy, relation: str, column: str, texts: list[str]) -> np.ndarray:
    """Each text's value id: its value (the text read back as the stored column's element type)
    ranked in the column's order and collation, equal values (1.0 and 1.00, 'a ' and 'a' in
    char(n)) one id, as GROUP BY and DISTINCT see them."""
    if not texts:
        return np.zeros(0, dtype=np.int64)
    found = run(plpy, STORED_COLUMN, ["text", "text"], [relation, column])[0]
    collate = f" COLLATE {found['collation']}" if found["collation"] else ""
    ranks = plpy.execute(plpy.prepare(
        f"SELECT pg_catalog.array_agg(r.vid ORDER BY r.o) AS ranks FROM (\n"
        f"    SELECT u.o, pg_catalog.dense_rank() OVER (ORDER BY u.v{collate}) - 1 AS vid\n"
        f"    FROM pg_catalog.unnest(($1::pg_catalog.text[])::{found['array_type']}) "
        f"WITH ORDINALITY AS u(v, o)) AS r", ["text[]"]), [texts])[0]["ranks"]
    return np.asarray(ranks, dtype=np.int64)


def dictionary_encode(values):
    """pyarrow's dictionary_encode kernel, called through its registry (the array's method
    imports pyarrow.compute, which wraps each of its ~300 kernels first: ~0.03 s of CPU)."""
    try:
        from pyarrow._compute import call_function
    except ImportError:                  # a pyarrow that moved it: the public method
        return values.dictionary_encode()
    return call_function("dictionary_encode", [values])


def read_stored(plpy, storage: Storage, qis, sensitive, *, streamed: dict | None = None,
                c: float = 3.0) -> tuple | None:
    """(sizes, classes, tables, figures) of :class:`ClassCounts` and whether no two classes' QIs
    hash alike (else they may merge: :func:`classes_merge`) from a compact release's stored
    classes, read a range of blocks at a time (:func:`stored_chunk_query`): each chunk's texts
    split at the delimiter (their pieces counted against the values the arrays hold) and
    factorized (:func:`_split_stored`), the distinct texts ranked by PostgreSQL
    (:func:`value_ranks`), then each class's (value id, rows) pairs counted; NULL -1. Without ``streamed``: one pass, each
    value's code (4 bytes) held until the ranks are known, then the tables. With ``streamed`` (a
    bounded pass: whether each sensitive column whose report figures are wanted is ordered): a
    first pass finds the values and their rows, a second counts each chunk into the figures of
    :func:`read_streamed` and lets it go. None where a stored value holds the delimiter (its
    class's pieces outnumber its values), or where a QI's type has no hash of its QIs: the
    caller counts in SQL."""
    index: list[dict[str, int]] = [{} for _ in sensitive]       # text -> code, per column
    try:
        with plpy.subtransaction():
            if streamed is None:
                return _stored_tables(plpy, qis, storage, sensitive, index)
            return _stored_figures(plpy, qis, storage, sensitive, index, streamed, c)
    except AmbiguousTexts:
        return None
    except plpy.spiexceptions.UndefinedFunction:     # a QI type without an extended hash
        return None


#: blocks of a compact release's storage per chunk of :func:`_stored_fetches` (16 MiB)
STORED_CHUNK_BLOCKS = 2048


def _stored_fetches(plpy, storage: Storage, qis, sensitive, index: list[dict[str, int]]):
    """Each chunk of the stored classes (:func:`stored_chunk_query`, a range of
    :data:`STORED_CHUNK_BLOCKS` blocks at a time): (class ids, rows per class, QI hashes, per
    sensitive column (values, NULLs, each value's code into ``index``, grown as texts are
    met))."""
    blocks = int(run(plpy, "SELECT (pg_catalog.pg_relation_size($1::pg_catalog.regclass) / "
                           "pg_catalog.current_setting('block_size')::int8)::int8 AS b",
                     ["text"], [storage.relation])[0]["b"])
    step = STORED_CHUNK_BLOCKS
    plans = [plpy.prepare(stored_chunk_query(plpy, storage, qis, sensitive, bounded),
                          ["text", "text"] if bounded else ["text"]) for bounded in (True, False)]
    first = 0
    for lo in range(0, max(blocks, 1), step):
        # the last chunk open-ended (as reader._chunks)
        row = (plans[0].execute([f"({lo},0)", f"({lo + step},0)"]) if lo + step < blocks
               else plans[1].execute([f"({lo},0)"]))[0]
        classes = int(row["classes"])
        if not classes:
            continue
        cids = np.arange(first, first + classes, dtype=np.int64)
        first += classes
        rows, hashes = int8_array(row["n"]), int8_array(row["h"])
        columns = []
        for i in range(len(sensitive)):
            elements, nulls = int8_array(row[f"e{i}"]), int8_array(row[f"z{i}"])
            values = elements - nulls
            joined = (row[f"t{i}"] or "").encode()
            n = int(values.sum())
            if not n:
                if joined:
                    raise AmbiguousTexts(sensitive[i])
                columns.append((values, nulls, np.zeros(0, dtype=np.int32)))
                continue
            # each piece with the delimiter after it (the last one's added): equal texts,
            # equal bytes
            uniques, indices = _split_stored(joined + STORED_DELIMITER.encode(), n, sensitive[i])
            mapping = np.fromiter(
                (index[i].setdefault(u[:-1].decode("utf-8"), len(index[i])) for u in uniques),
                dtype=np.int32, count=len(uniques))
            codes = mapping[indices]
            columns.append((values, nulls, codes))
        del row
        yield cids, rows, hashes, columns


def _split_stored(marked: bytes, n: int, column: str) -> tuple[list, np.ndarray]:
    """The ``n`` pieces of ``marked`` (each ended by :data:`STORED_DELIMITER`) factorized: (the
    distinct pieces with their delimiter, each piece's index into them), by the compiled kernel
    where the fit's kernels run (core.mondrian_jit.factorized_marked), else by pyarrow;
    AmbiguousTexts when a value holds the delimiter (more pieces than values)."""
    compiled = mondrian_jit.factorized_marked(marked, ord(STORED_DELIMITER), n)
    if compiled is not None:
        if compiled[0] is None:
            raise AmbiguousTexts(column)
        return compiled
    import pyarrow as pa  # here: only a compact release's check reads stored texts

    ends = np.flatnonzero(np.frombuffer(marked, dtype=np.uint8) == ord(STORED_DELIMITER))
    if ends.shape[0] != n:
        raise AmbiguousTexts(column)
    offsets = np.empty(n + 1, dtype=np.int32)
    offsets[0], offsets[1:] = 0, ends + 1
    encoded = dictionary_encode(pa.Array.from_buffers(pa.binary(), n, [
        None, pa.py_buffer(offsets), pa.py_buffer(marked)]))
    return (encoded.dictionary.to_pylist(),
            np.frombuffer(encoded.indices.buffers()[1], dtype=np.int32, count=n))


def _class_pairs(cids, values, nulls, codes, ranks) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A fetch's (class id, value id, rows) pairs of one column, in class order; NULL -1."""
    owner = np.concatenate([np.repeat(cids, values), np.repeat(cids, nulls)])
    vid = np.concatenate([ranks[codes], np.full(int(nulls.sum()), -1, dtype=np.int64)])
    return count_pairs(owner, vid)


def _histogram(rows_of_class: list) -> tuple[np.ndarray, np.ndarray]:
    if not rows_of_class:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    sizes, classes = np.unique(np.concatenate(rows_of_class), return_counts=True)
    return sizes.astype(np.int64), classes.astype(np.int64)


def _distinct(hashes: list) -> bool:
    joined = np.concatenate(hashes) if hashes else np.zeros(0, dtype=np.int64)
    return np.unique(joined).size == joined.size


def _stored_tables(plpy, qis, storage: Storage, sensitive, index) -> tuple:
    rows_of_class, kept, hashes = [], [], []
    for cids, rows, hashed, columns in _stored_fetches(plpy, storage, qis, sensitive, index):
        rows_of_class.append(rows)
        hashes.append(hashed)
        kept.append((cids, columns))
    tables = {}
    for i, s in enumerate(sensitive):
        ranks = value_ranks(plpy, storage.relation, s, list(index[i]))
        parts = ([], [], [])
        for cids, columns in kept:
            for part, values in zip(parts, _class_pairs(cids, *columns[i], ranks)):
                part.append(narrow(values))
            columns[i] = None                       # let each fetch's codes go once counted
        tables[s] = tuple(np.concatenate(part) if part else np.zeros(0, dtype=np.int32)
                          for part in parts)
    return (*_histogram(rows_of_class), tables, {}, _distinct(hashes))


def _stored_figures(plpy, qis, storage: Storage, sensitive, index, ordered: dict,
                    c: float) -> tuple:
    # first pass: the values and their rows (the table distribution the figures need first)
    code_rows = [np.zeros(0, dtype=np.int64) for _ in sensitive]
    hashes = []
    for _, _, hashed, columns in _stored_fetches(plpy, storage, qis, sensitive, index):
        hashes.append(hashed)
        for i, (_, _, codes) in enumerate(columns):
            found = np.bincount(codes, minlength=len(index[i]))
            code_rows[i] = np.concatenate([code_rows[i], np.zeros(found.size - code_rows[i].size,
                                                                   dtype=np.int64)]) + found
    ranks = [value_ranks(plpy, storage.relation, s, list(index[i])) for i, s in enumerate(sensitive)]
    known = [len(x) for x in index]
    ranges = {s: core_risk.SensitiveRanges(
                  np.bincount(ranks[i], weights=code_rows[i].astype(np.float64)) if known[i] else [],
                  ordered=ordered[s], c=c)
              for i, s in enumerate(sensitive) if s in ordered}
    fewest: dict[str, int | None] = dict.fromkeys(sensitive)
    histograms = []
    # second pass: each fetch counted into the figures
    for cids, rows, _, columns in _stored_fetches(plpy, storage, qis, sensitive, index):
        histograms.append(_histogram([rows]))
        for i, s in enumerate(sensitive):
            if len(index[i]) != known[i]:
                raise RuntimeError("the stored classes changed between the pass's two reads")
            _count_fetch(s, *_class_pairs(cids - cids[0], *columns[i], ranks[i]), len(cids),
                         fewest, ranges)
        del columns
    return (*_merged_histograms(histograms), {},
            _streamed_figures(sensitive, fewest, ranges, ordered, c), _distinct(hashes))


def class_query(plpy, relation: str, qis, sensitive, *, as_text=(), grouped: str | None = None,
                distribution: bool = False) -> str:
    """ONE pass over the relation for every figure: a hash aggregate over the QIs finds the
    classes, counts their rows and collects their values of each sensitive column
    (``array_agg``). Without sensitive columns the query returns the class-size histogram
    (``sizes``, ``classes``: int array texts). With them it returns one row per class, streamed
    (:func:`count` reads it by a cursor): its id ``cid`` (the group's row number), its rows
    ``n`` and, per sensitive column ``i``, its (value id, rows) pairs packed (``vids<i>``,
    ``ns<i>``: :func:`packed`), counted class by class: no step holds every class's pairs, so the
    backend's and Python's memory grow with the pairs read, never with copies of them all. Value
    ids follow the values' order (NULL -1), which the ordered EMD needs; the distinct values are
    ranked once and hashed once (the hash join's table is kept across the classes' rescans). No
    sort on the QIs (:func:`count` turns sorts off for it): ordering ranges and text arrays (a
    dense_rank over them) cost 10 of 25 s at 2M release rows, and grew faster than the rows. One
    pass, not one per figure: each pass re-hashes every row's ranges and arrays (2.3 s a pass at
    1M release rows). ``as_text``: sensitive columns counted by their text form (a type without
    equality or ordering, e.g. json). ``grouped``: the classes' query when they are stored
    (:func:`per_class_query`); each class's ``vids<i>`` are then the value ids of its elements,
    uncounted (no ``ns<i>``: :func:`read_classes` counts them). ``distribution``: a first row
    (``cid`` -1) carries each column's (value id, rows) pairs over every class, the table
    distribution a bounded reader (:func:`read_streamed`) needs before the classes."""
    group = ", ".join(ident(plpy, q) for q in qis)
    texts = dict(zip(as_text, columns_as_text(plpy, relation, as_text)))
    values = []
    for column in sensitive:
        sa = ident(plpy, column)
        if column in as_text and is_json_column(plpy, relation, column):
            # json has no equality: its documents compared as jsonb, where '{"a":1}' and
            # '{"a": 1}' are one value (as text they made a class of one value look l-diverse)
            sa = f"({sa})::pg_catalog.jsonb"
        elif column in as_text:
            sa = texts[column]           # no cast of the type's owner (sqltext.text_of)
        elif is_array_column(plpy, relation, column):
            # array_agg of arrays stacks them (and refuses ragged ones), unnest would flatten
            # them: carry each value in a one-field record instead (ordered like the value,
            # NULL last)
            sa = f"ROW({sa})"
        values.append(sa)
    collected = "".join(f", array_agg({sa}) AS vals{i}" for i, sa in enumerate(values))
    carried = "".join(f", g.vals{i}" for i in range(len(values)))
    stored = grouped is not None
    grouped = grouped or (f"SELECT pg_catalog.row_number() OVER () - 1 AS cid, g.n{carried}\n"
                          f"    FROM (SELECT count(*) AS n{collected} FROM {relation}\n"
                          f"          GROUP BY {group}) AS g")
    if not values:
        return (f"WITH grouped AS MATERIALIZED (\n"
                f"    {grouped})\n"
                f"SELECT array_agg(h.size)::text AS sizes, array_agg(h.classes)::text AS classes\n"
                f"FROM (SELECT n AS size, count(*) AS classes FROM grouped GROUP BY n) AS h")
    # value ids: the column's distinct non-NULL values ranked in their order, NULL -1; a value
    # the ranking's join misses (a type whose = under this search_path is not its GROUP BY's
    # equality, e.g. citext) is one value of its own, never taken for NULL
    ranked = "".join(
        f",\nranked{i} AS MATERIALIZED (\n"
        f"    SELECT u.v, row_number() OVER (ORDER BY u.v) - 1 AS vid\n"
        f"    FROM (SELECT DISTINCT x.v FROM grouped AS c\n"
        f"          CROSS JOIN LATERAL (SELECT pg_catalog.unnest(c.vals{i}) AS v) AS x) AS u\n"
        f"    WHERE u.v IS NOT NULL)"
        for i in range(len(values))) if not distribution else ranked_with_rows(len(values))
    if stored:
        # stored classes hold built-in types only, whose = (pg_catalog's) is their GROUP BY's
        # equality: each element looked up in the ranking's hash alone, counted by the reader
        # (a hash aggregate per class, rebuilt for each of 70,000 classes at 1M rows, cost more)
        tables = "".join(
            f"CROSS JOIN LATERAL (\n"
            f"    SELECT {packed(vid_of(i, 'u.v', 'd.vid'))} AS vids{i}\n"
            f"    FROM (SELECT pg_catalog.unnest(c.vals{i}) AS v) AS u\n"
            f"    LEFT JOIN {ranking(i)} AS d ON d.v = u.v) AS t{i}\n"
            for i in range(len(values)))
        # UNION ALL matches columns by position: each vids<i> with its ns<i>, as the first row
        empty = ", NULL::pg_catalog.bytea" if distribution else ""
        columns = "".join(f", t{i}.vids{i}{empty}" for i in range(len(values)))
    else:
        # each class's (value, rows), counted by a small hash over its own array
        tables = "".join(
            f"CROSS JOIN LATERAL (\n"
            f"    SELECT {packed('r.vid')} AS vids{i}, {packed('r.n')} AS ns{i}\n"
            f"    FROM (SELECT {vid_of(i, 'p.v', 'd.vid')} AS vid, p.n\n"
            f"          FROM (SELECT u.v, count(*) AS n\n"
            f"                FROM (SELECT pg_catalog.unnest(c.vals{i}) AS v) AS u GROUP BY u.v) AS p\n"
            f"          LEFT JOIN {ranking(i)} AS d ON d.v = p.v) AS r) AS t{i}\n"
            for i in range(len(values)))
        columns = "".join(f", t{i}.vids{i}, t{i}.ns{i}" for i in range(len(values)))
    return (f"WITH grouped AS MATERIALIZED (\n"
            f"    {grouped}){ranked}{distributions(len(values), distribution)}\n"
            f"SELECT c.cid, c.n{columns}\n"
            f"FROM grouped AS c\n"
            f"{tables}")


def ranked_with_rows(n_columns: int) -> str:
    """The ranking CTEs of :func:`class_query` with its ``distribution``: the distinct values
    counted (``valued<i>``: value, rows) by the one pass that finds them, then ranked."""
    return "".join(
        f",\nvalued{i} AS MATERIALIZED (\n"
        f"    SELECT x.v, count(*) AS n FROM grouped AS c\n"
        f"    CROSS JOIN LATERAL (SELECT pg_catalog.unnest(c.vals{i}) AS v) AS x GROUP BY x.v),\n"
        f"ranked{i} AS MATERIALIZED (\n"
        f"    SELECT u.v, row_number() OVER (ORDER BY u.v) - 1 AS vid\n"
        f"    FROM valued{i} AS u WHERE u.v IS NOT NULL)"
        for i in range(n_columns))


def distributions(n_columns: int, wanted: bool) -> str:
    """The CTEs of :func:`class_query`'s ``distribution`` (from :func:`ranked_with_rows`'
    counts) and its first row, to which the class rows are appended (UNION ALL: its branches
    run in order); nothing unless ``wanted``."""
    if not wanted:
        return ""
    ctes = "".join(
        f",\ndistribution{i} AS MATERIALIZED (\n"
        f"    SELECT {vid_of(i, 'u.v', 'd.vid')} AS vid, sum(u.n)::int8 AS n\n"
        f"    FROM valued{i} AS u LEFT JOIN {ranking(i)} AS d ON d.v = u.v GROUP BY 1)"
        for i in range(n_columns))
    def in_order(value: str, i: int) -> str:      # both columns in value id order
        return (f"(SELECT pg_catalog.string_agg(pg_catalog.int8send(({value})::int8), ''::bytea "
                f"ORDER BY x.vid) FROM distribution{i} AS x)")
    pairs = "".join(f", {in_order('x.vid', i)} AS vids{i}, {in_order('x.n', i)} AS ns{i}"
                    for i in range(n_columns))
    return f"{ctes}\nSELECT -1::int8 AS cid, NULL::int8 AS n{pairs}\nUNION ALL"


def ranking(i: int) -> str:
    """The ranked values of sensitive column ``i`` as the per-class lookups join them. Its filter
    keeps every row (ids start at 0) but lowers the planner's estimate below a class's: the
    ranking is then the hashed side, hashed once and kept across the classes' rescans, rather
    than each class's values hashed and the whole ranking scanned per class (1M release rows:
    0.45 -> 0.31 s; per class and distinct value with many distinct values)."""
    return f"(SELECT * FROM ranked{i} WHERE vid >= 0)"


def vid_of(i: int, value: str, ranked_vid: str) -> str:
    """SQL of the value id of ``value`` of sensitive column ``i``: its rank (``ranked_vid``, from
    the ranking's join), -1 for NULL, one past the ranks for a value the join misses."""
    return (f"CASE WHEN {value} IS NULL THEN -1 "
            f"ELSE coalesce({ranked_vid}, (SELECT count(*) FROM ranked{i})) END")


@dataclass(frozen=True)
class Storage:
    """Where a compact release's classes are stored: its storage relation (quoted) and the SQL
    of the rows its view makes of one stored row (``s``)."""

    relation: str
    rows: str


def storage_for(plpy, release: dict) -> tuple[str, Storage] | None:
    """(the relation analysts read, its Storage) of a compact release, else None."""
    params = jsonb(release["parameters"])
    storage = params.get("storage")
    if not storage:
        return None
    schema = release["release_schema"]
    return (ident(plpy, schema, release["release_name"]),
            Storage(ident(plpy, schema, storage), stored_rows(plpy, params)))


def classes_merge(plpy, storage: Storage, qis, work_mem: str) -> bool:
    """Whether two stored classes have the same released QIs, so that an analyst sees them as
    one class (possible, rare: e.g. two classes of only NULLs). Their counts are then taken from
    the view, whose GROUP BY merges them."""
    group = ", ".join(f"s.{ident(plpy, q)}" for q in qis)
    with local_settings(plpy, work_mem=work_mem, enable_sort="off", jit="off"):
        return plpy.execute(f"SELECT EXISTS (SELECT FROM {storage.relation} AS s "
                            f"WHERE ({storage.rows}) > 0 GROUP BY {group} "
                            f"HAVING count(*) > 1) AS merge")[0]["merge"]


#: whether a storage has a unique index, which REFRESH MATERIALIZED VIEW CONCURRENTLY needs: such a
#: refresh (its owner's: plpy_anon makes no unique index, and its own refreshes wait for a read's
#: lock) changes the stored classes between the queries of :func:`read_stored`, each of which
#: sees the changes committed before it. Asked after the read: the index a refresh needed is
#: still there (dropping it waits for the read's lock)
UNIQUE_INDEX = """
SELECT EXISTS (SELECT FROM pg_catalog.pg_index i
               WHERE i.indrelid = pg_catalog.to_regclass($1) AND i.indisunique) AS found"""


def concurrently_refreshable(plpy, storage: Storage) -> bool:
    return bool(run(plpy, UNIQUE_INDEX, ["text"], [storage.relation])[0]["found"])


def count(plpy, relation: str, qis, sensitive, storage: Storage | None = None,
          budget: int | None = None, ordered: dict | None = None,
          c: float = 3.0, models: dict | None = None) -> ClassCounts:
    """Run :func:`class_query` over ``relation`` (quoted) grouped by ``qis``; over ``storage``'s
    stored classes instead when ``relation`` is a compact release's view and no two of them
    merge (checked first): their texts read in one scan (:func:`read_stored`) where every
    sensitive column can be, else by :func:`class_query` over them. ``budget``: the memory the pass is bounded by (:func:`pass_settings`),
    and the pass keeps figures instead of tables (:func:`read_streamed`: ``ordered``, whether
    each sensitive column whose report figures are wanted is ordered, and their ``c``; ``models``
    the check's privacy models per column: ``models[column](table)``, checked as read)."""
    sensitive = list(dict.fromkeys(sensitive))
    settings = pass_settings(plpy, budget)
    as_text = [s for s in sensitive if not is_orderable_column(plpy, relation, s)]
    bounded = budget is not None and bool(sensitive)
    counted = None
    # a bounded pass with privacy models checks them fetch by fetch (read_streamed)
    if storage is not None and not as_text and sensitive and not (bounded and models):
        # the stored texts are read back as values in the same session: printed so that each
        # reads back as itself (floats' shortest exact digits; ISO dates and numeric zone
        # offsets, not abbreviations another zone table reads otherwise)
        with local_settings(plpy, **settings, enable_sort="off", jit="off", extra_float_digits="3",
                            DateStyle="ISO, YMD", IntervalStyle="postgres"):
            counted = read_stored(plpy, storage, qis, sensitive,
                                  streamed=(ordered or {}) if bounded else None, c=c)
        if counted is not None and concurrently_refreshable(plpy, storage):
            counted = None
            storage = None       # its chunks may have straddled such a refresh: through the view
        if counted is not None and not counted[-1] and classes_merge(plpy, storage, qis, settings["work_mem"]):
            counted = None
            storage = None       # two stored classes an analyst sees as one: through the view
    grouped = None       # values counted by their text are counted through the view
    if counted is None and storage is not None and not as_text \
            and not classes_merge(plpy, storage, qis, settings["work_mem"]):
        grouped = per_class_query(plpy, storage.relation, storage.rows, sensitive)
    # grouping by the released QIs (ranges, text arrays) by sorting them costs 2-3x hashing them
    # (2M release rows: 25.5 s vs 11 s), and the planner, misjudging the groups, sorts: not here.
    # Sorts off add a 1e10 disable cost, which alone would trigger JIT compilation (0.6 s at 1M
    # rows, for a plan that runs once): JIT off too.
    query = class_query(plpy, relation, qis, sensitive, as_text=as_text, grouped=grouped,
                        distribution=bounded)
    streamed = {}
    with local_settings(plpy, **settings, enable_sort="off", jit="off"):
        if counted is not None:
            sizes, classes, tables, streamed, _ = counted
        elif bounded:
            sizes, classes, streamed = read_streamed(plpy, query, sensitive, ordered or {}, c,
                                                     counted=grouped is None, models=models)
            tables = {}
        elif sensitive:
            sizes, classes, tables = read_classes(plpy, query, sensitive,
                                                  counted=grouped is None)
        else:
            row = plpy.execute(query)[0]
            sizes, classes, tables = int_array(row["sizes"]), int_array(row["classes"]), {}
        ran_with = run(plpy, "SELECT pg_catalog.current_setting('work_mem') AS work_mem, "
                             "pg_catalog.current_setting('hash_mem_multiplier') AS hash_mem_multiplier")[0]
    return ClassCounts(relation, tuple(qis), tuple(sensitive), sizes, classes, tables,
                       dict(ran_with), streamed)


#: classes per fetch of :func:`read_classes`' cursor (at most, uncounted)
FETCH_CLASSES = 20_000
#: uncounted: classes of the first fetch, then elements (rows) per fetch
FETCH_FIRST = 64
FETCH_ELEMENTS = 1 << 20


def read_classes(plpy, query: str, sensitive, *,
                 counted: bool = True) -> tuple[np.ndarray, np.ndarray, dict]:
    """(sizes, classes, tables) of :class:`ClassCounts` from :func:`class_query`'s rows, one per
    class, read by a cursor :data:`FETCH_CLASSES` at a time: what is held at once is one fetch
    and the pairs decoded so far, int32 where they fit (:func:`narrow`: 12 bytes a pair rather
    than 24), joined one array at a time at the end. ``counted``: the rows carry (value id,
    rows) pairs; else each element's value id, counted here a fetch (whole classes) at a time."""
    rows_of_class = []
    parts = {s: ([], [], []) for s in sensitive}
    cursor = plpy.cursor(query)
    # uncounted, a fetch holds its classes' elements: sized to hold about FETCH_ELEMENTS, from
    # a few classes first (large classes, a large k, must not make one fetch of millions)
    size = FETCH_CLASSES if counted else FETCH_FIRST
    while True:
        batch = cursor.fetch(size)
        if not batch:
            break
        cids = np.fromiter((r["cid"] for r in batch), dtype=np.int64, count=len(batch))
        rows_of_class.append(np.fromiter((r["n"] for r in batch), dtype=np.int64,
                                         count=len(batch)))
        if not counted:
            per_class = max(1, int(rows_of_class[-1].sum()) // len(batch))
            size = max(1, min(FETCH_CLASSES, FETCH_ELEMENTS // per_class))
        for i, s in enumerate(sensitive):
            owners, vids, ns = parts[s]
            for held, values in zip((owners, vids, ns), fetched_pairs(batch, cids, i, s, counted)):
                held.append(narrow(values))
        del batch
    cursor.close()
    if rows_of_class:
        sizes, classes = np.unique(np.concatenate(rows_of_class), return_counts=True)
    else:
        sizes = classes = np.zeros(0, dtype=np.int64)
    tables = {}
    for s, columns in parts.items():
        joined = []
        for column in columns:                  # each part list let go once joined
            joined.append(np.concatenate(column) if column else np.zeros(0, dtype=np.int32))
            column.clear()
        tables[s] = tuple(joined)
    return sizes.astype(np.int64), classes.astype(np.int64), tables


def read_streamed(plpy, query: str, sensitive, ordered: dict, c: float, *,
                  counted: bool = True,
                  models: dict | None = None) -> tuple[np.ndarray, np.ndarray, dict]:
    """(sizes, classes, figures per sensitive column) from :func:`class_query`'s rows with its
    ``distribution`` row first: each fetch of classes is counted into the figures
    (``fewest_distinct``; core.risk.SensitiveRanges for the columns in ``ordered``; for the
    columns in ``models``, ``models[column](table)`` the privacy models each class must hold
    given the table's rows per value id, their check: core.privacy_models.ClassCheck, under
    ``models``, None for a column without a value) and let go, so what is held is one fetch and
    the class-size histogram, whatever the number of classes."""
    histograms: list = []           # a fetch's (sizes, classes of each size) each
    fewest = dict.fromkeys(sensitive)
    ranges: dict = {}
    checks: dict = {}
    models = models or {}
    cursor = plpy.cursor(query)
    first = cursor.fetch(1)
    if not first or first[0]["cid"] != -1:
        raise RuntimeError("the class pass did not start with its distribution row")
    for i, s in enumerate(sensitive):
        vid = int8_array(first[0][f"vids{i}"])
        n = int8_array(first[0][f"ns{i}"])
        known = vid >= 0
        q = np.bincount(vid[known], weights=n[known].astype(np.float64)) if known.any() else []
        if s in ordered:
            ranges[s] = core_risk.SensitiveRanges(q, ordered=ordered[s], c=c)
        if s in models:
            checks[s] = (None if len(q) == 0
                         else ClassCheck(models[s](q), len(q)))
    del first
    size = FETCH_CLASSES if counted else FETCH_FIRST
    following = 0                                # the next class id expected
    while True:
        batch = cursor.fetch(size)
        if not batch:
            break
        cids = np.fromiter((r["cid"] for r in batch), dtype=np.int64, count=len(batch))
        if cids[0] != following or (np.diff(cids) != 1).any():
            raise RuntimeError("the class pass did not return its classes in order")
        following += len(batch)
        rows_of_class = np.fromiter((r["n"] for r in batch), dtype=np.int64, count=len(batch))
        histograms.append(_histogram([rows_of_class]))
        if not counted:
            per_class = max(1, int(rows_of_class.sum()) // len(batch))
            size = max(1, min(FETCH_CLASSES, FETCH_ELEMENTS // per_class))
        for i, s in enumerate(sensitive):
            _count_fetch(s, *fetched_pairs(batch, cids - cids[0], i, s, counted), len(batch),
                         fewest, ranges, checks)
        del batch
    cursor.close()
    return (*_merged_histograms(histograms),
            _streamed_figures(sensitive, fewest, ranges, ordered, c, checks))


def _merged_histograms(histograms: list) -> tuple[np.ndarray, np.ndarray]:
    """(sizes, classes of each size) of several fetches' histograms (:func:`_histogram`)."""
    if not histograms:
        return _histogram([])
    sizes = np.concatenate([h[0] for h in histograms])
    merged, at = np.unique(sizes, return_inverse=True)
    return merged, np.bincount(at.ravel(), weights=np.concatenate([h[1] for h in histograms]),
                               minlength=merged.size).astype(np.int64)


def _streamed_figures(sensitive, fewest: dict, ranges: dict, ordered: dict, c: float,
                      checks: dict | None = None) -> dict:
    """A bounded pass's figures per sensitive column (ClassCounts.streamed)."""
    figures = {}
    for s in sensitive:
        figures[s] = {"fewest_distinct": fewest[s]}
        if s in ranges:
            figures[s].update(ordered=ordered[s], c=c, figures=ranges[s].figures())
        if checks and s in checks:
            figures[s]["models"] = checks[s]
    return figures


def _count_fetch(column: str, owner: np.ndarray, vid: np.ndarray, n: np.ndarray, classes: int,
                 fewest: dict, ranges: dict, checks: dict | None = None) -> None:
    """One fetch's (class, value id, rows) of ``column`` over its ``classes`` classes counted
    into the figures: the fewest distinct values, the ranges, the models' check."""
    known = vid >= 0                             # a NULL is no value (ClassCounts.known)
    owner, vid, n = owner[known], vid[known], n[known]
    least = int(np.bincount(owner, minlength=classes).min())
    fewest[column] = least if fewest[column] is None else min(fewest[column], least)
    for figures in (ranges.get(column), (checks or {}).get(column)):
        if figures is not None:
            figures.add(owner, vid, n, classes)


def fetched_pairs(batch, cids: np.ndarray, i: int, column: str,
                  counted: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(class ids, value ids, rows) of sensitive column ``i`` in a fetch of :func:`class_query`'s
    rows (``cids``: the class id each row's pairs are given), its packed pairs decoded (counted
    here when the rows carry each element's value id: ``counted`` False), in class order."""
    packed_vids = [r[f"vids{i}"] or b"" for r in batch]
    owner = np.repeat(cids, [len(b) // 8 for b in packed_vids])
    vid = int8_array(b"".join(packed_vids))
    del packed_vids
    if counted:
        n = int8_array(b"".join(r[f"ns{i}"] or b"" for r in batch))
    else:
        owner, vid, n = count_pairs(owner, vid)
    if not owner.shape == vid.shape == n.shape:
        raise ValueError(f'pairs of "{column}" do not match their classes')
    return owner, vid, n


def count_pairs(owner: np.ndarray, vid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each (class, value id) pair of the elements (``owner``, ``vid``: value ids >= -1) and its
    rows, ordered by class then value id."""
    if owner.size == 0:
        return owner, vid, np.zeros(0, dtype=np.int64)
    first, width = int(owner.min()), int(vid.max()) + 2
    key = (owner - first) * width + (vid + 1)
    span = (int(owner.max()) - first + 1) * width
    if span <= 4 * key.size + (1 << 20):             # a histogram over the keys: no sort
        rows = np.bincount(key, minlength=span)
        key = np.flatnonzero(rows)
        rows = rows[key]
    else:
        key, rows = np.unique(key, return_counts=True)
    return key // width + first, key % width - 1, rows.astype(np.int64)


def narrow(values: np.ndarray) -> np.ndarray:
    """``values`` (int64) as int32 when every one fits, else as they are."""
    limits = np.iinfo(np.int32)
    if values.size and (values.min() < limits.min or values.max() > limits.max):
        return values
    return values.astype(np.int32)


class Counter:
    """Counts of one build's release, computed once: :meth:`expect` announces the sensitive
    columns a later reader (the risk report) will ask for, so the first :meth:`get` (the check)
    counts them too and the later one is served from it."""

    def __init__(self, plpy, release: dict | None = None, budget: int | None = None,
                 models: dict | None = None, c: float = 3.0,
                 stored: tuple[str, Storage] | None = None):
        self._plpy = plpy
        #: bytes the check's queries are bounded by (an out-of-core release's build_memory)
        self.budget = budget
        #: recursive (c,l)'s c of the figures a bounded pass computes as it reads
        self.c = c
        #: with a budget, ``models[column](table)``: the privacy models (core.privacy_models)
        #: the check asks of each class of a column, checked as the pass reads its classes
        self.models = models
        self._expected: dict[tuple[str, frozenset], list[str]] = {}
        self._ordered: dict[tuple[str, frozenset], dict] = {}
        self._done: list[ClassCounts] = []
        # a compact release's view is counted from its stored classes (``stored``: the view
        # and its Storage, when the caller found them readable: risk_report.stored_classes)
        if release is not None:
            stored = storage_for(plpy, release)
        self._stored = dict([stored]) if stored else {}

    def expect(self, relation: str, qis, sensitive, ordered: dict | None = None) -> None:
        """``ordered``: whether each of ``sensitive`` is ordered (the report's figures of a
        bounded pass are computed as it reads: core.risk.SensitiveRanges)."""
        key = (relation, frozenset(qis))
        self._expected.setdefault(key, []).extend(sensitive)
        self._ordered.setdefault(key, {}).update(ordered or {})

    def get(self, relation: str, qis, sensitive) -> ClassCounts:
        for done in self._done:
            if done.serves(relation, qis, sensitive):
                return done
        wanted = list(sensitive) + self._expected.get((relation, frozenset(qis)), [])
        counts = count(self._plpy, relation, qis, wanted, self._stored.get(relation), self.budget,
                       self._ordered.get((relation, frozenset(qis))), c=self.c,
                       models=self.models)
        self._done.append(counts)
        return counts


ARRAY_COLUMN = """
SELECT t.typcategory = 'A' AS is_array
FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
WHERE a.attrelid = $1::pg_catalog.regclass AND a.attname = $2 AND NOT a.attisdropped
"""

COLUMN_TYPE = """
SELECT pg_catalog.format_type(a.atttypid, a.atttypmod) AS display_type
FROM pg_catalog.pg_attribute a
WHERE a.attrelid = $1::pg_catalog.regclass AND a.attname = $2 AND NOT a.attisdropped
"""


def is_json_column(plpy, relation: str, column: str) -> bool:
    rows = run(plpy, COLUMN_TYPE, ["text", "text"], [relation, column])
    return bool(rows and rows[0]["display_type"] == "json")


def is_array_column(plpy, relation: str, column: str) -> bool:
    rows = run(plpy, ARRAY_COLUMN, ["text", "text"], [relation, column])
    return bool(rows and rows[0]["is_array"])


def is_orderable_column(plpy, relation: str, column: str) -> bool:
    rows = run(plpy, COLUMN_TYPE, ["text", "text"], [relation, column])
    return not rows or orderable(plpy, rows[0]["display_type"])


def orderable(plpy, display_type: str) -> bool:
    """Whether values of the type can be grouped and ranked (a default btree ordering): json, xml,
    point, ... cannot. ``display_type`` comes from pg_catalog.format_type (valid SQL)."""
    try:
        with plpy.subtransaction():
            plpy.prepare(f"SELECT 1 ORDER BY NULL::{display_type}")
        return True
    except plpy.SPIError:
        return False


def packed(value: str) -> str:
    """SQL of the int8 ``value``s of a group as one bytea of big-endian int8s (:func:`int8_array`):
    8 bytes a value in the backend and here, where array_agg's state (a Datum and a null flag a
    value, doubled as it grows), its array and that array's text cost several times that."""
    return f"pg_catalog.string_agg(pg_catalog.int8send(({value})::int8), ''::bytea)"


def int8_array(packed_values: bytes | None) -> np.ndarray:
    """The values :func:`packed` sent (NULL: none)."""
    if not packed_values:
        return np.zeros(0, dtype=np.int64)
    if len(packed_values) % 8:
        raise ValueError(f"not a whole number of int8s: {len(packed_values)} bytes")
    return np.frombuffer(packed_values, dtype=">i8").astype(np.int64)


def int_array(text: str | None) -> np.ndarray:
    """An int8[] literal of the pass's query as an array, parsed in C: splitting it made one
    Python string per element first (10M-row release: ~5.7M (class, value) pairs per sensitive
    column, ~300 MB of strings at once, the peak of the report)."""
    if not text or text == "{}":
        return np.zeros(0, dtype=np.int64)
    body = text[1:-1]
    with warnings.catch_warnings():
        # fromstring stops at what it cannot read with only a DeprecationWarning: an error here
        warnings.simplefilter("error", DeprecationWarning)
        try:
            values = np.fromstring(body, dtype=np.int64, sep=",")
        except (DeprecationWarning, ValueError):
            values = None
    if values is None or values.size != body.count(",") + 1:
        raise ValueError(f"not an array of integers: {text[:80]!r}")
    return values
