"""Union-find whose root is each set's smallest member: groups merged in any order keep the
smallest of their ids (Break-Merge's gids, the stable mode's groups)."""
from __future__ import annotations

import numpy as np


class SmallestRootSets:
    """Disjoint sets over 0..n-1 (path halving; the smaller root absorbs the larger)."""

    def __init__(self, n: int):
        self.parent = np.arange(n)

    def find(self, x: int) -> int:
        parent = self.parent
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return int(x)

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

    def roots(self) -> np.ndarray:
        """Each member's root (parents followed for all members at once until none moves)."""
        parent = np.asarray(self.parent, dtype=np.int64)
        while True:
            up = parent[parent]
            if np.array_equal(up, parent):
                return up
            parent = up
