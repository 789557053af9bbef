"""A mixed load on SHARED releases: writers create, replace, refresh (``anon.refresh`` and plain
``REFRESH MATERIALIZED VIEW``) and drop the same few releases of a few sources, while analysts read
them, each read a REPEATABLE READ transaction of its own (by default): its snapshot is taken before
it waits for a writer's lock, so it sees the release that replaced the one it waited for only if
that release's rows are visible to every snapshot. Used by ``tests/db/test_concurrency.py`` (a
short run) and ``python -m tests.bench soak`` (120 s; ``make bench``).

An operation may lose a race cleanly: the release it names was dropped (42704) or already exists
(42710), or a refresh gave up waiting for readers (55P03). Anything else is a failure; a deadlock
(40P01) means two paths take the same locks in opposite orders; a read of fewer rows than the
source has (an empty read) means an analyst saw a release half-built or not at all.
"""
from __future__ import annotations

import collections
import random
import threading
import time

import psycopg
from psycopg import sql

from tests.helpers import load_python_stack
from tests.waits import HANG

ROWS = 300
K = 5
SOURCES = ("soak_a", "soak_b", "soak_c")
NAMES = ("r0", "r1", "r2", "r3", "r4", "r5")
# a lost race, reported cleanly: the release (or, before the first create, its schema) was dropped
# or replaced meanwhile, already exists, or a refresh gave up waiting for readers
#: the writes a soak makes; it goes on past its time until each has succeeded once
WRITES = ("create", "replace", "refresh", "refresh_matview", "drop")
CLEAN = {"42704", "42P01", "3F000", "42710", "55P03"}

TABLE = """
CREATE TABLE {t} (id int PRIMARY KEY, age int, sex text, zip text, diagnosis text);
INSERT INTO {t} SELECT i, 20 + (i * 37) % 50, CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END,
       (53700 + (i * 13) % 30)::text, (ARRAY['flu', 'asthma', 'gout'])[1 + i % 3]
FROM generate_series(1, {rows}) i;
SELECT anon.set_column_role('{t}', 'diagnosis', 'sensitive');
"""


def setup(conn, schema: str) -> None:
    for t in SOURCES:
        conn.execute(TABLE.format(t=f"{schema}.{t}", rows=ROWS))


class Soak:
    def __init__(self, connect, schema: str, release_schema: str, analyst: str | None,
                 writers: int = 8, analysts: int = 2,
                 isolation: psycopg.IsolationLevel = psycopg.IsolationLevel.REPEATABLE_READ):
        self.connect, self.schema, self.release_schema = connect, schema, release_schema
        self.analyst, self.writers, self.analysts = analyst, writers, analysts
        self.isolation = isolation
        self.empty_reads = 0                       # reads that saw fewer rows than the source
        self.ops = collections.Counter()           # (op, outcome) -> n; outcome 'ok' or SQLSTATE
        self.failures: list[tuple] = []            # (op, sqlstate, message) of unclean errors
        self.lock = threading.Lock()
        self.deadline = 0.0

    def record(self, op: str, exc: psycopg.Error | None = None) -> None:
        with self.lock:
            if exc is None:
                self.ops[op, "ok"] += 1
                return
            self.ops[op, exc.sqlstate or "?"] += 1
            if exc.sqlstate not in CLEAN:
                self.failures.append((op, exc.sqlstate, str(exc).strip()[:400]))

    def going(self) -> bool:
        """Until the soak's time is up and every kind of write has succeeded once: a loaded
        machine gets through fewer writes in the time (HANG more at the most)."""
        now = time.monotonic()
        if now < self.deadline:
            return True
        with self.lock:
            return now < self.deadline + HANG and any(self.ops[op, "ok"] == 0 for op in WRITES)

    def qualified(self, name: str) -> str:
        return sql.Identifier(self.release_schema, name).as_string(None)

    def writer(self, number: int, start: threading.Barrier) -> None:
        rng = random.Random(number)
        with self.connect() as conn:
            load_python_stack(conn)                                  # the Python stack, once
            start.wait()
            while self.going():
                name = rng.choice(NAMES)
                source = f"{self.schema}.{SOURCES[NAMES.index(name) % len(SOURCES)]}"
                op = rng.choice(WRITES)
                try:
                    if op in ("create", "replace"):
                        conn.execute("SELECT anon.mondrian_view(%s::regclass, k => %s, release_name => %s, "
                                     "release_schema => %s, replace => %s)",
                                     (source, K, name, self.release_schema, op == "replace"))
                    elif op == "refresh":
                        conn.execute("SELECT anon.refresh(%s)", (self.qualified(name),))
                    elif op == "refresh_matview":
                        # compact releases (the default): a plain REFRESH names their storage
                        conn.execute(f"REFRESH MATERIALIZED VIEW {self.qualified(name + '_classes')}")
                    else:
                        conn.execute("SELECT anon.drop_release(%s)", (self.qualified(name),))
                    self.record(op)
                except psycopg.Error as exc:
                    self.record(op, exc)

    def reader(self, start: threading.Barrier) -> None:
        with self.connect(user=self.analyst) if self.analyst else self.connect() as conn:
            conn.autocommit = False
            conn.isolation_level = self.isolation
            start.wait()
            while self.going():
                for name in NAMES:
                    try:
                        # one statement per transaction: its snapshot predates any lock wait
                        with conn.transaction():
                            n = conn.execute(f"SELECT count(*) FROM {self.qualified(name)}").fetchone()[0]
                        if n != ROWS:
                            with self.lock:
                                self.empty_reads += 1
                                self.failures.append(("read", None, f"{name} has {n} rows"))
                        self.record("read")
                    except psycopg.Error as exc:
                        self.record("read", exc)
                time.sleep(0.02)

    def run(self, seconds: float) -> Soak:
        def go():
            self.deadline = time.monotonic() + seconds
        start = threading.Barrier(self.writers + self.analysts, action=go, timeout=HANG)
        threads = [threading.Thread(target=self.writer, args=(i, start)) for i in range(self.writers)]
        threads += [threading.Thread(target=self.reader, args=(start,)) for _ in range(self.analysts)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=seconds + 2 * HANG)
        assert not any(t.is_alive() for t in threads), "a session hung"
        return self

    def by_sqlstate(self) -> dict[str, int]:
        out = collections.Counter()
        for (op, outcome), n in self.ops.items():
            if op != "read":
                out[outcome] += n
        return dict(out)

    def summary(self) -> str:
        writes = sum(n for (op, _), n in self.ops.items() if op != "read")
        reads = sum(n for (op, _), n in self.ops.items() if op == "read")
        return (f"{writes} operations by {self.writers} writers ({reads} reads by {self.analysts} analysts); "
                f"outcomes by SQLSTATE: {self.by_sqlstate()}; deadlocks: "
                f"{self.by_sqlstate().get('40P01', 0)}; empty reads: {self.empty_reads}; "
                f"unclean errors: {len(self.failures)}")
