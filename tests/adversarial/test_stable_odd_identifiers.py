"""Adversarial: the stable mode keeps each row's QIs and identifiers as the reader's codes and
hashes each identifier text once. Identifiers here are texts holding the reader's separator
0x01 and NULL stand-in 0x02, the empty string, NULL, long texts, and duplicates (two rows of one
person); refreshes with churn (leavers, joiners, QI updates, identifier updates, a row taking an
identifier another row holds). The analyst keeps every version with the table as it was, and
takes a row whose identifier or QIs changed for a leaver and a joiner. Checked from the released
rows: k and l in every version, no true value pinned by difference of two versions nor by
intersecting the classes that could hold a person in every version."""
from __future__ import annotations

import math

import numpy as np
import psycopg
import pytest
from psycopg import sql

from tests.helpers import (
    class_sizes,
    create_release,
    distinct_sensitive_per_class,
    keep_released_version,
    pinned_by_difference,
    pinned_by_intersection,
)

QIS = {"age": "range", "zip": "range"}
VALUES = ["flu", "hiv", "cold", "ok"]
ODD_IDS = ["\x01", "\x02", "", None, "a\x01b", "x" * 2000, "\x02\x01", "ü\x1f"]


class OddSequence:
    def __init__(self, db, schema, seed: int, diversity: str = "distinct"):
        self.db, self.schema, self.rng = db, schema, np.random.default_rng(seed)
        self.diversity = diversity
        rng = self.rng
        self.k, self.l = int(rng.integers(2, 5)), 2
        self.rows: dict[int, list] = {}     # row key -> [pid, age, zip, dx]
        self.epoch: dict[int, int] = {}
        self.next = 0
        for odd in filter(lambda v: v is not None, ODD_IDS):     # unique at first
            self.add(odd)
        for _ in range(int(rng.integers(40, 70))):
            self.add(f"p{self.next}")
        self.kept, self.truth = [], {}
        self.refused = self.kept_after = 0

    def pid(self):
        rng = self.rng
        if rng.random() < 0.25:
            return ODD_IDS[int(rng.integers(0, len(ODD_IDS)))]
        if rng.random() < 0.1 and self.rows:      # a duplicate of another row's identifier
            return self.rows[int(rng.choice(sorted(self.rows)))][0]
        return f"p{int(rng.integers(0, 10**6))}"

    def add(self, pid=None):
        rng = self.rng
        self.rows[self.next] = [self.pid() if pid is None else pid, int(rng.integers(20, 40)), int(rng.integers(0, 5)),
                                VALUES[int(rng.integers(0, 4))]]
        self.next += 1

    def write(self):
        self.db.execute("TRUNCATE pt")
        with self.db.cursor() as cur:
            cur.executemany("INSERT INTO pt VALUES (%s, %s, %s, %s)", list(self.rows.values()))

    def keep(self, release):
        self.db.execute("CREATE TEMP TABLE seen (pk text, age int, zip int, dx text)")
        rows = [(f"{r}#{self.epoch.get(r, 0)}", v[1], v[2], v[3]) for r, v in self.rows.items()]
        with self.db.cursor() as cur:
            cur.executemany("INSERT INTO seen VALUES (%s, %s, %s, %s)", rows)
        self.truth.update((pk, dx) for pk, _, _, dx in rows)
        self.kept.append(keep_released_version(self.db, release, "seen", "pk", QIS, "dx"))
        self.db.execute("DROP TABLE seen")
        n = self.db.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.SQL(release))).fetchone()[0]
        if n:
            assert min(class_sizes(self.db, release, list(QIS))) >= self.k
            assert min(distinct_sensitive_per_class(self.db, release, list(QIS), "dx")) >= self.l
            if self.diversity == "entropy":
                worst = self.db.execute(sql.SQL("""
                    SELECT min(e) FROM (SELECT -sum(n / t * ln(n / t)) AS e FROM (
                        SELECT age, zip, count(*)::float8 AS n, sum(count(*)::float8)
                               OVER (PARTITION BY age, zip) AS t
                        FROM {} WHERE dx IS NOT NULL GROUP BY age, zip, dx) v
                    GROUP BY age, zip) c""").format(sql.SQL(release))).fetchone()[0]
                assert worst >= math.log(self.l) - 1e-9

    def churn(self):
        rng = self.rng
        for op in rng.integers(0, 5, size=int(rng.integers(1, 4))).tolist():
            keys = sorted(self.rows)
            pick = rng.choice(keys, size=min(len(keys) - 10, int(rng.integers(1, 6))), replace=False).tolist()
            if op == 0:
                for r in pick:
                    del self.rows[r]
            elif op == 1:
                for _ in range(int(rng.integers(1, 6))):
                    self.add()
            elif op == 2:          # QI updates
                for r in pick:
                    self.rows[r][1] = int(rng.integers(20, 40))
                    self.epoch[r] = self.epoch.get(r, 0) + 1
            elif op == 3:          # identifier updates, to a new, odd or another row's one
                for r in pick:
                    self.rows[r][0] = self.pid()
                    self.epoch[r] = self.epoch.get(r, 0) + 1
            else:                  # sensitive updates
                for r in pick:
                    self.rows[r][3] = VALUES[int(rng.integers(0, 4))]
                    self.epoch[r] = self.epoch.get(r, 0) + 1
        self.write()

    def run(self):
        self.db.execute("CREATE TABLE pt (pid text, age int, zip int, dx text)")
        self.write()
        release = create_release(self.db, "mondrian_view", self.schema, "pt", k=self.k, l=self.l,
                                 quasi_identifiers=list(QIS), sensitive=["dx"],
                                 identifiers=["pid"], refresh_mode="stable",
                                 l_diversity=self.diversity)
        try:
            self.keep(release)
            for _ in range(int(self.rng.integers(4, 9))):
                before = ({r: list(v) for r, v in self.rows.items()}, dict(self.epoch))
                self.churn()
                try:
                    self.db.execute("SELECT anon.refresh(%s)", (release,))
                except psycopg.Error as refused:     # identifiers shared or NULL: refused
                    assert refused.sqlstate.startswith("22"), refused
                    assert "Report this" not in (refused.diag.message_hint or "")
                    self.refused += 1
                    self.rows, self.epoch = before
                    self.write()
                    continue
                self.kept_after += 1
                self.keep(release)
        finally:
            self.db.execute("SELECT anon.drop_release(%s)", (release,))
            self.db.execute("DROP TABLE pt")
        pins = {}
        for j in range(1, len(self.kept)):
            for i in range(j):
                pins.update(pinned_by_difference(self.kept[i], self.kept[j]))
        by_intersection = pinned_by_intersection(self.kept)
        return ({p: v for p, v in pins.items() if self.truth[p] == v},
                {p: v for p, v in by_intersection.items() if self.truth[p] == v})


@pytest.mark.parametrize("seed, diversity", [*((s, "distinct") for s in range(6)),
                                             *((s, "entropy") for s in range(6, 10))])
def test_odd_and_duplicate_identifiers_under_churn_keep_k_l_and_pin_no_one(db, schema, seed,
                                                                           diversity):
    sequence = OddSequence(db, schema, seed, diversity)
    assert sequence.run() == ({}, {})
    assert sequence.kept_after >= 1
