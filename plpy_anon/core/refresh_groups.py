"""The groups of regions a stable refresh beyond the budget would have to run together
(docs/out-of-core.md, "The stable refresh region by region").

A stable release created region by region keeps each region's box (its cuts). At a refresh a
known person stays in the region remembering them whatever their QIs become (db/stable_regions.py:
a mover links nothing). What still links regions: a person two regions remember, a held back
person waiting in another region's group, a group of the state spread over regions (a state
written otherwise). Regions so linked are merged (union-find), and a merged group's classes can
then reach anywhere in the hull of its boxes (every value between on a QI released as a range,
the union of the values on a set), so every region whose box meets that hull is merged too,
until no group's hull meets the box of a region outside it: the plan's figures of a refresh
refused (54000).

Boxes are given per QI as :class:`Axis` values: an interval of positions on an ordered line
(a QI cut by value) or a set of symbols (a QI cut by its texts). Pure: no database.
"""
from __future__ import annotations

from dataclasses import dataclass

from plpy_anon.core.disjoint_sets import SmallestRootSets
from plpy_anon.core.interrupts import check as check_interrupts


@dataclass(frozen=True)
class Axis:
    """A box's extent on one QI: ``low``..``high`` (inclusive positions) on an ordered QI, or
    ``symbols`` (a frozenset) on a QI cut by its texts; exactly one of the two is given."""

    low: int | None = None
    high: int | None = None
    symbols: frozenset | None = None

    def meets(self, other: Axis) -> bool:
        if self.symbols is not None:
            return bool(self.symbols & other.symbols)
        return self.low <= other.high and other.low <= self.high

    def hull(self, other: Axis) -> Axis:
        if self.symbols is not None:
            return Axis(symbols=self.symbols | other.symbols)
        return Axis(min(self.low, other.low), max(self.high, other.high))

    @property
    def empty(self) -> bool:
        return not self.symbols if self.symbols is not None else self.low > self.high


def meets(a: dict, b: dict) -> bool:
    """Whether two boxes ({QI: Axis}; a QI absent is unbounded) share a point."""
    return all(a[q].meets(b[q]) for q in a.keys() & b.keys())


def hull(boxes: list[dict]) -> dict:
    """The smallest box holding ``boxes`` (a QI unbounded in one of them is unbounded)."""
    shared = set.intersection(*(set(b) for b in boxes))
    out = {}
    for q in shared:
        axis = boxes[0][q]
        for b in boxes[1:]:
            axis = axis.hull(b[q])
        out[q] = axis
    return out


@dataclass
class Plan:
    """Each region's group (its smallest region) and the rows each group holds."""

    groups: list
    #: rows per group, keyed by its smallest region
    group_rows: dict
    #: rounds of the hull closure after the links (0: the links alone were closed)
    rounds: int

    def members(self, root: int) -> list[int]:
        return [r for r, g in enumerate(self.groups) if g == root]


def plan(boxes: list[dict], links, rows: list[int], everything: bool = False) -> Plan:
    """The closed groups of regions (``boxes``: each region's box; ``links``: pairs of regions a
    person links; ``rows``: each region's rows now; ``everything``: one group of all)."""
    n = len(boxes)
    sets = SmallestRootSets(n)
    for a, b in links:
        sets.union(int(a), int(b))
    if everything:
        for r in range(1, n):
            sets.union(0, r)
    rounds = 0
    while True:
        check_interrupts()
        roots = sets.roots().tolist()
        members: dict = {}
        for r, g in enumerate(roots):
            members.setdefault(g, []).append(r)
        merged = False
        for g, regions in members.items():
            if len(regions) < 2:
                continue
            reach = hull([boxes[r] for r in regions])
            for r in range(n):
                if sets.find(r) != sets.find(g) and meets(reach, boxes[r]):
                    sets.union(g, r)
                    merged = True
        if not merged:
            break
        rounds += 1
    roots = sets.roots().tolist()
    group_rows: dict = {}
    for r, g in enumerate(roots):
        group_rows[g] = group_rows.get(g, 0) + int(rows[r])
    return Plan(roots, group_rows, rounds)


def closed(boxes: list[dict], groups: list) -> bool:
    """Whether no group of several regions has a hull meeting a box of another group."""
    members: dict = {}
    for r, g in enumerate(groups):
        members.setdefault(g, []).append(r)
    for g, regions in members.items():
        if len(regions) < 2:
            continue
        reach = hull([boxes[r] for r in regions])
        if any(groups[r] != g and meets(reach, boxes[r]) for r in range(len(boxes))):
            return False
    return True
