"""Random stable-mode sequences on real tables (rows drawn from UCI Adult, the sample shipped in
the package, and from UCI Credit Approval when /work/shared/data/credit/crx.data or
$PLPY_ANON_CRX is there), 1 to 3 QIs of ranges (integers) and value sets (text), k 2-20, l 2-5
(distinct, entropy or recursive (c, l)), and churn shapes the comeback sequences do not draw: a
whole released class leaving at once, the same people leaving and coming back every other
version, people whose QIs are updated at every version, joiners all of one value, a value held
by one or two people, sensitive updates. The analyst keeps every version (everyone in the table,
published or held back, with the classes that could hold them, from the released rows alone:
tests.helpers.keep_released_version) and follows each person by id ("cqs") or takes every
changed or returning record for a new person (""). His attacks: tests.helpers.
pinned_by_difference over every pair of kept versions, the intersection of the values of the
classes that could hold a person (pins, and people left fewer than l values); a pin is true
when the value is one the person had while kept."""
from __future__ import annotations

import csv
import gzip
import os
from pathlib import Path

import numpy as np
import psycopg
from psycopg import sql

import plpy_anon
from tests.helpers import (
    create_release,
    intersected_below_l,
    keep_released_version,
    pinned_by_difference,
    pinned_by_intersection,
)

ADULT = ["age", "workclass", "fnlwgt", "education", "education_num", "marital_status",
         "occupation", "relationship", "race", "sex", "capital_gain", "capital_loss",
         "hours_per_week", "native_country", "income"]
CRX = [f"a{i}" for i in range(1, 17)]
#: per table: its QIs (name: "range" for an integer, "set" for text) and its sensitive columns
SHAPES = {
    "adult": ({"age": "range", "education_num": "range", "hours_per_week": "range", "sex": "set",
               "race": "set", "marital_status": "set", "relationship": "set"},
              ["occupation", "workclass", "native_country", "relationship", "education"]),
    "crx": ({"a2": "range", "a11": "range", "a15": "range", "a14": "range", "a1": "set",
             "a4": "set", "a9": "set", "a12": "set"},
            ["a6", "a7", "a13", "a5"]),
}


def _adult() -> list[dict]:
    path = Path(plpy_anon.__file__).parent / "data/samples/adult.data.gz"
    with gzip.open(path, "rt") as handle:
        rows = [[c.strip() for c in row] for row in csv.reader(handle) if len(row) == 15]
    return [dict(zip(ADULT, row)) for row in rows if "?" not in row]


def _crx() -> list[dict]:
    path = Path(os.environ.get("PLPY_ANON_CRX", "/work/shared/data/credit/crx.data"))
    with open(path) as handle:
        rows = [row for row in csv.reader(handle) if len(row) == 16 and "?" not in row]
    out = [dict(zip(CRX, row)) for row in rows]
    for r in out:
        r["a2"] = str(int(float(r["a2"])))
    return out


_SOURCES: dict = {}


def source(name: str) -> list[dict]:
    if name not in _SOURCES:
        _SOURCES[name] = _adult() if name == "adult" else _crx()
    return _SOURCES[name]


def candidates_of(kept: list[dict]) -> dict:
    """Each person's values left by intersecting the classes that could hold them, over every
    kept version in which some class holds them."""
    candidates: dict = {}
    for version in kept:
        for p, classes in version["people"].items():
            values = {v for n in classes for v in version["classes"][n]}
            if values:
                candidates[p] = candidates.get(p, values) & values
    return candidates


def pinned_by_both(before: dict, after: dict, candidates: dict) -> dict:
    """People an analyst narrows to one value by taking the values a part (classes linked by the
    people in both versions, a person linking every class that could hold them) gained for its
    joiners' and those it lost for its leavers', and intersecting them with each one's
    candidates (:func:`candidates_of`): {person: value}. Not certain (a joiner may be held
    back, a leaver's value kept in a counterfeit row), so a pin may be wrong."""
    parent: dict = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(nodes):
        for other in nodes[1:]:
            parent[find(other)] = find(nodes[0])

    for tag, kept in (("b", before), ("a", after)):
        for n in kept["classes"]:
            find((tag, n))
        for classes in kept["people"].values():
            union([(tag, n) for n in classes])
    for p in before["people"].keys() & after["people"].keys():
        union([("b", n) for n in before["people"][p]] + [("a", n) for n in after["people"][p]])
    counts: dict = {}
    for tag, kept in (("b", before), ("a", after)):
        for n, values in kept["classes"].items():
            bucket = counts.setdefault(find((tag, n)), ({}, {}))[tag == "a"]
            for v in values:
                bucket[v] = bucket.get(v, 0) + 1
    pinned = {}
    for tag, kept, other in (("a", after, before), ("b", before, after)):
        for p, classes in kept["people"].items():
            if p in other["people"] or not classes or p not in candidates:
                continue
            old, new = counts.get(find((tag, classes[0])), ({}, {}))
            changed = {v for v, c in (new if tag == "a" else old).items()
                       if c > (old if tag == "a" else new).get(v, 0)}
            left = changed & candidates[p]
            if len(left) == 1:
                pinned[p] = next(iter(left))
    return pinned


def pinned_by_finer_difference(before: dict, after: dict) -> dict:
    """The subtraction of tests.helpers.pinned_by_difference over finer parts: classes linked
    only by the people in both versions (a joiner or a leaver lying in two classes links them
    not), each joiner or leaver counted in a part only when every class that could hold them is
    in it. {person: value}; not certain (a person held back, a counterfeit row), so a pin may be
    wrong."""
    parent: dict = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(nodes):
        for other in nodes[1:]:
            parent[find(other)] = find(nodes[0])

    for tag, kept in (("b", before), ("a", after)):
        for n in kept["classes"]:
            find((tag, n))
    for p in before["people"].keys() & after["people"].keys():
        union([("b", n) for n in before["people"][p]] + [("a", n) for n in after["people"][p]])
    counts: dict = {}
    for tag, kept in (("b", before), ("a", after)):
        for n, values in kept["classes"].items():
            bucket = counts.setdefault(find((tag, n)), ({}, {}))[tag == "a"]
            for v in values:
                bucket[v] = bucket.get(v, 0) + 1
    movers: dict = {}
    for tag, kept, other in (("a", after, before), ("b", before, after)):
        for p, classes in kept["people"].items():
            roots = {find((tag, n)) for n in classes}
            if p not in other["people"] and classes:
                movers.setdefault((next(iter(roots)) if len(roots) == 1 else None, tag), []).append(p)
    pinned = {}
    for root, (old, new) in counts.items():
        added = {v: c - old.get(v, 0) for v, c in new.items() if c > old.get(v, 0)}
        removed = {v: c - new.get(v, 0) for v, c in old.items() if c > new.get(v, 0)}
        for change, tag in ((added, "a"), (removed, "b")):
            people = movers.get((root, tag), [])
            if people and len(change) == 1 and sum(change.values()) == len(people):
                pinned.update(dict.fromkeys(people, next(iter(change))))
    return pinned


class Shape:
    """One random release and churn of ``seed`` on ``table`` ("adult" or "crx"); ``follows``: "cqs"
    the analyst follows people by id through comebacks, QI and value updates, "" each changed or
    returning record is a new person to him."""

    def __init__(self, db, schema: str, seed: int, table: str = "adult", follows: str = "cqs",
                 mode: str = "stable", heavy: bool = False):
        self.db, self.schema, self.seed, self.follows, self.mode = db, schema, seed, follows, mode
        self.rng = rng = np.random.default_rng(seed)
        qis, sensitives = SHAPES[table]
        names = sorted(qis)
        chosen = rng.choice(len(names), size=int(rng.integers(1, 4)), replace=False)
        self.qis = {names[i]: qis[names[i]] for i in sorted(chosen)}
        sensitives = [s for s in sensitives if s not in self.qis]
        self.sensitive = sensitives[int(rng.integers(0, len(sensitives)))]
        self.k, self.l = int(rng.integers(2, 21)), int(rng.integers(2, 6))
        self.model = ["distinct", "entropy", "recursive"][int(rng.integers(0, 3))]
        self.c = int(rng.integers(2, 5))
        rows = source(table)
        pool = [rows[i] for i in rng.choice(len(rows), size=int(rng.integers(150, 400)), replace=False)]
        self.pool = [(*(int(r[q]) if kind == "range" else r[q] for q, kind in self.qis.items()),
                      r[self.sensitive]) for r in pool]
        low = min(max(40, 2 * self.k * self.l), 190)
        n = int(rng.integers(low, max(low + 1, min(len(self.pool) - 40, 200))))
        n = min(n, len(self.pool) - 40)
        self.refreshes = int(rng.integers(6, 13) if heavy else rng.integers(4, 9))
        self.heavy = heavy
        self.table = {i: self.pool[i] for i in range(n)}
        self.next = n
        # a value held by one or two people, from the start or joining later
        self.rare = [(i, "rare") for i in range(int(rng.integers(0, 3)))]
        for i, _ in self.rare:
            self.table[i] = (*self.table[i][:-1], "zz-rare")
        self.flappers = [int(i) for i in rng.choice(n, size=int(rng.integers(0, 9 if heavy else 4)), replace=False)]
        self.movers = [int(i) for i in rng.choice(n, size=int(rng.integers(0, 9 if heavy else 4)),
                                                  replace=False)]
        self.left: dict = {}
        self.epoch: dict = {}
        self.truths: dict = {}
        self.kept: list = []
        self.version = 0
        self.refused = 0
        self.refusals: list = []
        self.created = False
        self.replace_at = 0     # the version at which the release is created anew (replace => true)

    # the table
    def columns(self) -> list[str]:
        return [*self.qis, self.sensitive]

    def insert(self, ids) -> None:
        cols = sql.SQL(", ").join(map(sql.Identifier, ["id", *self.columns()]))
        marks = sql.SQL(", ").join(sql.Placeholder() * (len(self.qis) + 2))
        with self.db.cursor() as cur:
            cur.executemany(sql.SQL("INSERT INTO pt ({}) VALUES ({})").format(cols, marks),
                            [(i, *self.table[i]) for i in ids])

    def delete(self, ids) -> None:
        ids = [i for i in dict.fromkeys(ids) if i in self.table]
        if ids:
            self.db.execute("DELETE FROM pt WHERE id = ANY(%s)", (ids,))
            self.left.update((i, self.table.pop(i)) for i in ids)

    def bump(self, i: int, kind: str) -> None:
        if kind not in self.follows:
            self.epoch[i] = self.epoch.get(i, 0) + 1

    def record(self) -> tuple:
        return self.pool[int(self.rng.integers(0, len(self.pool)))]

    def come_back(self, ids) -> None:
        ids = [i for i in dict.fromkeys(ids) if i in self.left]
        for i in ids:
            self.table[i] = self.left.pop(i)
            self.bump(i, "c")
        if ids:
            self.insert(ids)

    def churn(self, release: str) -> None:
        rng, table = self.rng, self.table
        # people leaving and coming back every other version
        if self.version % 2:
            self.come_back(self.flappers)
        else:
            self.delete(self.flappers)
        # people whose QIs change at every version (an UPDATE, not a delete and insert)
        for i in self.movers:
            if i in table:
                new = self.record()
                table[i] = (*new[:-1], table[i][-1])
                self.bump(i, "q")
                sets = sql.SQL(", ").join(sql.SQL("{} = %s").format(sql.Identifier(q)) for q in self.qis)
                self.db.execute(sql.SQL("UPDATE pt SET {} WHERE id = %s").format(sets), (*new[:-1], i))
        keep = set(self.flappers) | set(self.movers)
        for op in rng.integers(0, 7, size=int(rng.integers(1, 7 if self.heavy else 4))).tolist():
            ids = sorted(set(table) - keep)
            if op == 0:      # leavers
                self.delete(rng.choice(ids, size=min(int(rng.integers(1, 10)), max(0, len(ids) - 20)),
                                       replace=False).tolist())
            elif op == 1:    # joiners
                new = list(range(self.next, self.next + int(rng.integers(1, 10))))
                self.next += len(new)
                table.update((i, self.record()) for i in new)
                self.insert(new)
                if self.heavy and rng.integers(0, 3) == 0:    # a joiner who moves, or flaps
                    (self.movers if rng.integers(0, 2) else self.flappers).append(new[0])
            elif op == 2:    # joiners all of one value
                values = sorted({r[-1] for r in self.pool})
                value = values[int(rng.integers(0, len(values)))]
                same = [r for r in self.pool if r[-1] == value]
                new = list(range(self.next, self.next + int(rng.integers(2, 2 + 2 * self.k))))
                self.next += len(new)
                table.update((i, same[int(rng.integers(0, len(same)))]) for i in new)
                self.insert(new)
            elif op == 3:    # a whole released class leaves at once
                q = sql.SQL(", ").join(map(sql.Identifier, self.qis))
                boxes = self.db.execute(sql.SQL("SELECT DISTINCT {} FROM {}").format(q, sql.SQL(release))).fetchall()
                if boxes:
                    box = boxes[int(rng.integers(0, len(boxes)))]
                    gone = [i for i in ids if all(b is None or v in b for v, b in zip(table[i], box))]
                    if len(table) - len(gone) >= 20:
                        self.delete(gone)
                        if self.heavy and rng.integers(0, 2):    # the whole class flaps
                            self.flappers += gone
            elif op == 4 and self.left:    # leavers come back
                back = [i for i in self.left if i not in keep]
                self.come_back(rng.choice(back, size=min(len(back), int(rng.integers(1, 6))),
                                          replace=False).tolist() if back else [])
            elif op == 5:    # sensitive updates
                for i in rng.choice(ids, size=min(len(ids), int(rng.integers(1, 4))), replace=False).tolist():
                    table[i] = (*table[i][:-1], self.record()[-1])
                    self.bump(i, "s")
                    self.db.execute(sql.SQL("UPDATE pt SET {} = %s WHERE id = %s").format(
                        sql.Identifier(self.sensitive)), (table[i][-1], i))
            elif op == 6:    # a rare value joins
                i = self.next
                self.next += 1
                table[i] = (*self.record()[:-1], "zz-rare")
                self.insert([i])

    def keep(self, release: str) -> None:
        cols = [sql.SQL("{} {}").format(sql.Identifier(q), sql.SQL("int" if kind == "range" else "text"))
                for q, kind in self.qis.items()]
        self.db.execute(sql.SQL("CREATE TEMP TABLE seen (pk text, {})").format(sql.SQL(", ").join(cols)))
        rows = [(f"{i}#{self.epoch.get(i, 0)}", *r[:-1]) for i, r in self.table.items()]
        with self.db.cursor() as cur:
            cur.executemany(sql.SQL("INSERT INTO seen VALUES ({})").format(
                sql.SQL(", ").join(sql.Placeholder() * (len(self.qis) + 1))), rows)
        for i, r in self.table.items():
            self.truths.setdefault(f"{i}#{self.epoch.get(i, 0)}", set()).add(r[-1])
        self.kept.append(keep_released_version(self.db, release, "seen", "pk", self.qis, self.sensitive))
        self.db.execute("DROP TABLE seen")

    def run(self) -> dict:
        cols = sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(q), sql.SQL(
            "int" if kind == "range" else "text")) for q, kind in self.qis.items())
        self.db.execute(sql.SQL("CREATE TABLE pt (id int PRIMARY KEY, {}, {} text)").format(
            cols, sql.Identifier(self.sensitive)))
        self.insert(sorted(self.table))
        arguments = {"k": self.k, "l": self.l, "quasi_identifiers": list(self.qis),
                     "sensitive": [self.sensitive], "identifiers": ["id"], "refresh_mode": self.mode,
                     "l_diversity": self.model}
        if self.model == "recursive":
            arguments["c"] = self.c
        if self.replace_at:
            arguments["release_name"] = "pt_shape"
        try:
            release = create_release(self.db, "mondrian_view", self.schema, "pt", **arguments)
        except (psycopg.errors.DataException, psycopg.errors.InvalidParameterValue):
            self.db.execute("DROP TABLE pt")
            return self.summary()
        self.created = True
        try:
            self.keep(release)
            for version in range(1, self.refreshes + 1):
                self.version = version
                self.churn(release)
                try:
                    if self.replace_at == version:    # a new release of the same name instead
                        release = create_release(self.db, "mondrian_view", self.schema, "pt",
                                                 replace=True, **arguments)
                    else:
                        self.db.execute("SELECT anon.refresh(%s)", (release,))
                except psycopg.errors.DataException as refused:
                    assert "Report this" not in (refused.diag.message_hint or ""), refused
                    self.refused += 1
                    self.refusals.append(refused.diag.message_primary)
                self.keep(release)
        finally:
            self.db.execute("SELECT anon.drop_release(%s)", (release,))
            self.db.execute("DROP TABLE pt")
        return self.summary()

    def pins(self) -> tuple[list, dict, dict]:
        """(earlier, later, person, value) pinned by difference; pinned by intersection; left
        below l by intersection."""
        by_difference = []
        for j in range(1, len(self.kept)):
            for i in range(j):
                by_difference += [(i, j, p, v) for p, v in pinned_by_difference(self.kept[i], self.kept[j]).items()]
        return by_difference, pinned_by_intersection(self.kept), intersected_below_l(self.kept, self.l)

    def pins_by_both(self) -> list:
        """(earlier, later, person, value) pinned by :func:`pinned_by_both`."""
        candidates = candidates_of(self.kept)
        return [(i, j, p, v) for j in range(1, len(self.kept)) for i in range(j)
                for p, v in pinned_by_both(self.kept[i], self.kept[j], candidates).items()]

    def pins_by_finer_difference(self) -> list:
        return [(i, j, p, v) for j in range(1, len(self.kept)) for i in range(j)
                for p, v in pinned_by_finer_difference(self.kept[i], self.kept[j]).items()]

    def summary(self) -> dict:
        line = {"seed": self.seed, "created": self.created, "k": self.k, "l": self.l,
                "model": self.model, "qis": list(self.qis), "sensitive": self.sensitive}
        if not self.created:
            return line
        difference, intersection, below = self.pins()
        both = self.pins_by_both()
        finer = self.pins_by_finer_difference()
        true = lambda p, v: v in self.truths[p]
        line.update(refreshes=self.refreshes, refused=self.refused, refusals=self.refusals,
                    people=len(self.truths),
                    no_rows=sum(1 for kept in self.kept[1:] if not kept["classes"]),
                    difference_true=sum(true(p, v) for _, _, p, v in difference),
                    difference_wrong=sum(not true(p, v) for _, _, p, v in difference),
                    intersection_true=sum(true(p, v) for p, v in intersection.items()),
                    intersection_wrong=sum(not true(p, v) for p, v in intersection.items()),
                    below_l=len(below), below_l_people=sorted(below)[:5],
                    both_true=len({p for _, _, p, v in both if true(p, v)}),
                    both_wrong=len({p for _, _, p, v in both if not true(p, v)}),
                    both_pins=[list(x) for x in both[:5]],
                    finer_true=len({p for _, _, p, v in finer if true(p, v)}),
                    finer_wrong=len({p for _, _, p, v in finer if not true(p, v)}),
                    finer_pins=[list(x) for x in finer[:5]],
                    difference_pins=[list(x) for x in difference[:5]])
        return line
