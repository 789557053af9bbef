"""Adversarial: an analyst role granted SELECT on a stable release alone reads it, at REPEATABLE
READ, again and again while its refreshes run, some of which the release's own check refuses
(the run's bound on people back switched off in the refreshing backend, as in
test_stable_comebacks_wide_ranges.py's refusal test): every read must be a version that was
committed, never the rows of a refused refresh, which its check saw and rolled back."""
from __future__ import annotations

import threading
import uuid

import psycopg
import psycopg.sql
from psycopg import sql

from tests.adversarial.test_stable_comebacks_wide_ranges import WideSequence, _Refusals

UNBOUND = """DO $$
import numpy as np
from plpy_anon.core import republish
republish.keeps_candidates = lambda groups, candidates, stacked, l: np.ones(stacked.shape[:2], dtype=bool)
$$ LANGUAGE plpython3u"""


class Watched(WideSequence):
    """A sequence whose release an analyst reads in a thread from its creation to its last
    refresh; each version kept after a refresh (or its refusal) is recorded as committed."""

    def __init__(self, db, schema, seed, reader, superuser):
        super().__init__(db, schema, seed, new_values=True)
        self.reader, self.superuser = reader, superuser
        self.committed, self.reads, self.errors = set(), [], []
        self.done, self.thread = threading.Event(), None

    def keep(self, release, rows=None):
        super().keep(release, rows)
        if rows is not None:
            return
        self.committed.add(_released(self.superuser, release))
        if self.thread is None:
            for grant in ("GRANT USAGE ON SCHEMA {} TO {}", "GRANT SELECT ON {} TO {}"):
                target = release.split(".")[0] if "SCHEMA" in grant else release
                self.superuser.execute(sql.SQL(grant).format(sql.SQL(target), sql.Identifier(self.reader[0])))
            self.thread = threading.Thread(target=self.read, args=(release,))
            self.thread.start()
        elif len(self.kept) == self.refreshes + 1:
            self.done.set()
            self.thread.join()

    def read(self, release):
        conn = self.reader[1]
        while not self.done.is_set():
            try:
                with conn.transaction():
                    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                    self.reads.append(_released(conn, release))
            except psycopg.Error as e:
                self.errors.append(repr(e))
                return


def _released(conn, release):
    return tuple(conn.execute(sql.SQL("SELECT age::text, zip::text, dx FROM {} ORDER BY 1, 2, 3")
                              .format(sql.SQL(release))).fetchall())


def test_an_analyst_never_reads_a_version_the_check_refused(db, connect, schema):
    """Seed 30136 (k = 2, l = 2, 5 refreshes, people back with another value): with the run's
    bound off, the check refuses refreshes; the analyst reading throughout sees only the
    versions committed."""
    role = f"reader_{uuid.uuid4().hex[:8]}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        with connect() as conn, connect(user=role) as analyst:
            conn.execute(psycopg.sql.SQL("SET search_path = {}, public").format(psycopg.sql.Identifier(schema)))
            conn.execute("SELECT * FROM anon.versions()").fetchall()      # activates the environment
            conn.execute(UNBOUND)
            refusals = _Refusals(conn)
            sequence = Watched(refusals, schema, 30136, (role, analyst), db)
            sequence.run()
    finally:
        db.execute(sql.SQL("DROP OWNED BY {0}; DROP ROLE {0}").format(sql.Identifier(role)))
    assert any("fewer than l = 2 candidate" in m for m in refusals.refused), refusals.refused
    assert sequence.errors == [] and sequence.reads
    assert [i for i, rows in enumerate(sequence.reads) if rows not in sequence.committed] == []
