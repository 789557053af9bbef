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


def component_labels(a, b, n: int) -> np.ndarray:
    """The connected components of the undirected graph on 0..n-1 whose edges are the pairs
    (``a[i]``, ``b[i]``): each member's component number, components numbered 0.. in the order
    of their smallest members (as ``scipy.sparse.csgraph.connected_components`` numbers them,
    without importing scipy: ~0.1 s of CPU in a fresh backend).

    Each round hooks the larger root of every edge between two components under the smallest
    root it meets, then points every member straight at its root; a root only moves to a smaller
    one, so the parents stay a forest and the rounds end when no edge joins two components."""
    parent = np.arange(n, dtype=np.int64)
    a = np.asarray(a, dtype=np.int64).ravel()
    b = np.asarray(b, dtype=np.int64).ravel()
    while a.size:
        root_a, root_b = parent[a], parent[b]
        across = root_a != root_b
        a, b, root_a, root_b = a[across], b[across], root_a[across], root_b[across]
        np.minimum.at(parent, np.maximum(root_a, root_b), np.minimum(root_a, root_b))
        while True:
            up = parent[parent]
            if np.array_equal(up, parent):
                break
            parent = up
    return np.unique(parent, return_inverse=True)[1].reshape(-1)
