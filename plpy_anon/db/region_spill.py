"""An out-of-core run's regions read in ONE pass over the source, routed to spill files.

Read one filtered scan each, 16 regions of a 100M-row table cost 16 scans of all its rows for
~6.25M each (docs/out-of-core.md). Here the first region's read (reader.read_columns, given a
:class:`RoutedRegion`) reads the source once, chunk by chunk as the reader reads any table (TID
ranges of ``plpy_anon.read_chunk_blocks`` blocks), each chunk's rows grouped by their region
(``label``: a ``CASE`` over the cuts, one comparison per level) and aggregated as the reader
aggregates a chunk; each (chunk, region) row of packed columns is appended, as PostgreSQL sent
it, to its region's file. Each region's read then replays its file through the reader's decode:
the same rows, in the same order (the source's blocks), as its filtered scan gave, so the same
codes and dictionaries.

The files are private to the server's OS user (a 0700 directory, 0600 files) under the data
directory's ``base/pgsql_tmp``, named with PostgreSQL's temporary prefix (``pgsql_tmp``), which
the server removes at its next start after a crash; a region's file is removed once read, the
directory when the run ends, fails or is cancelled (the run's generator closed, or collected).
"""
from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
import time
import weakref
from dataclasses import dataclass

from plpy_anon.core import interrupts
from plpy_anon.db.sqltext import local_settings

#: the region label's column in the pass's queries (no source column is so named), quoted
LABEL_NAME = "plpy_anon region"
LABEL = f'"{LABEL_NAME}"'
#: where the files go, relative to the data directory (the backend's working directory)
TEMPORARY = os.path.join("base", "pgsql_tmp")
_SIZE = struct.Struct("<q")


@dataclass
class RoutedRegion:
    """Region ``number`` of ``spill``'s pass; ``predicate``: its SQL condition, read with it
    when the pass cannot serve the read (another column set than the pass's)."""

    spill: RegionSpill
    number: int
    predicate: str | None


def spill_directory() -> str:
    """Where the files go: the data directory's TEMPORARY (the backend runs in the data
    directory), else the OS's temporary directory."""
    if os.path.isfile("PG_VERSION") and os.path.isdir("base"):
        try:
            os.makedirs(TEMPORARY, mode=0o700, exist_ok=True)
            return TEMPORARY
        except OSError:
            pass
    return tempfile.gettempdir()


class RegionSpill:
    """The pass routing a source's rows to ``regions`` files by ``label`` (SQL: each row's
    region number, 0 to regions - 1), run by the first read that asks for a region."""

    def __init__(self, label: str, regions: int, chunk: int):
        self.label = label
        self.regions = regions
        self.chunk = chunk                 # the pass's blocks per chunk
        self.key = None                    # the read the pass was made for
        self.directory: str | None = None
        self.place: str | None = None      # the directory the files' directory is made in
        self.rows = [0] * regions          # rows routed to each region
        self.bytes = 0                     # bytes written
        self.seconds = self.cpu = 0.0      # the pass's wall and this backend's CPU
        self._cleanup = None

    def serves(self, key) -> bool:
        """Whether the read ``key`` (its relations, aggregates and texts) is the pass's, or the
        pass is not made yet."""
        return self.key is None or self.key == key

    def _path(self, number: int) -> str:
        return os.path.join(self.directory, f"region{number}")

    def write(self, plpy, ranges, statement, checked_texts) -> None:
        """Read the source once: for each (relation, lower, upper) ctid range of ``ranges``,
        ``statement(relation, bounded, as_bytes)`` (SQL with the range's bounds as $1, $2: the
        chunk's rows grouped by LABEL, as_bytes the texts read as bytes) and append each of its
        rows to its region's file. ``checked_texts``: the aliases read as text, each checked
        for a value holding the reader's separator or NULL stand-in, which reads the chunk again
        with that text as bytes (from then on, as the reader does)."""
        wall, cpu = time.monotonic(), time.process_time()
        self.place = spill_directory()
        self.directory = os.path.abspath(tempfile.mkdtemp(
            prefix=f"pgsql_tmp{os.getpid()}.plpy_anon_regions.", dir=self.place))
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.directory, True)
        plain = set(checked_texts)
        prepared = {}
        # the region reads run with TID range scans off (out_of_core.REGION_READ); the pass reads
        # chunks, which only a TID range scan reads without scanning the whole table. A chunk's
        # label has as many values as regions, which the planner cannot tell from a CASE: it
        # sorted each chunk's rows by it (GroupAggregate) rather than hash them into the regions
        # (2M rows, 11 chunks: 4.2 s of queries against 3.3 s for 8 regions' scans)
        try:
            with local_settings(plpy, enable_tidscan="on", enable_sort="off"):
                for relation, lo, hi in ranges:
                    while True:
                        as_bytes = frozenset(a for a in checked_texts if a not in plain)
                        key = (relation, hi is not None, as_bytes)
                        if key not in prepared:
                            prepared[key] = plpy.prepare(statement(relation, hi is not None, as_bytes),
                                                         ["text", "text"] if hi is not None else ["text"])
                        rows = prepared[key].execute([lo, hi] if hi is not None else [lo])
                        records, again = [], set()
                        for row in rows:
                            record = self._record(row, plain)
                            if isinstance(record, set):
                                again |= record
                            else:
                                records.append(record)
                        del rows
                        if not again:
                            break
                        plain -= again
                    for number, fields in records:
                        self._append(number, fields)
                    del records
                    interrupts.check()
        finally:
            self.seconds += time.monotonic() - wall
            self.cpu += time.process_time() - cpu

    def _record(self, row, plain: set):
        """(region, [(field, kind, value)]) of a result row, or the set of its texts read as text
        that hold the separator or the NULL stand-in."""
        number = row[LABEL_NAME]
        if number is None or not 0 <= number < self.regions:
            raise RuntimeError(f"out-of-core run: a row in no region ({number})")
        n = int(row["n"])
        fields, again = [], set()
        for name, value in row.items():
            if name == LABEL_NAME:
                continue
            if isinstance(value, str):
                encoded = value.encode("utf-8")
                # UTF-8 holds the bytes 0x01 and 0x02 only as those characters
                if name in plain and (encoded.count(b"\x01") != n or
                                      encoded.count(b"\x02") != n - int(row[f"{name}_n"])):
                    again.add(name)
                fields.append((name, "t", encoded))
            elif isinstance(value, bytes):
                fields.append((name, "b", value))
            else:
                fields.append((name, "i", int(value)))
        return again if again else (number, fields)

    def _append(self, number: int, fields) -> None:
        meta = json.dumps([[name, kind, value if kind == "i" else len(value)]
                           for name, kind, value in fields]).encode()
        descriptor = os.open(self._path(number), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(descriptor, "ab") as out:
            out.write(_SIZE.pack(len(meta)))
            out.write(meta)
            for _, kind, value in fields:
                if kind != "i":
                    out.write(value)
                    self.bytes += len(value)
        self.rows[number] += next(value for name, kind, value in fields if name == "n")

    def records(self, number: int):
        """Region ``number``'s rows as the pass read them (texts as UTF-8 bytes), its file
        removed once read."""
        path = self._path(number)
        if not os.path.exists(path):
            return
        try:
            with open(path, "rb") as source:
                while True:
                    head = source.read(_SIZE.size)
                    if not head:
                        break
                    meta = json.loads(source.read(_SIZE.unpack(head)[0]))
                    yield {name: size if kind == "i" else source.read(size)
                           for name, kind, size in meta}
                    interrupts.check()
        finally:
            os.unlink(path)

    def close(self) -> None:
        """Remove the files (also what a failed or cancelled run left)."""
        if self._cleanup is not None:
            self._cleanup()
