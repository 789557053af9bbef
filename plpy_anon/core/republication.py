"""Refreshes that keep each person's candidate values across versions.

An analyst who keeps every version of a release and knows a person's quasi-identifiers
intersects, version by version, the sensitive values of the classes that could hold that person:
the true value survives every intersection, so each refresh can only narrow the set. A refresh
in the ``stable`` mode keeps that intersection at l values or more for everyone it has published:

* every person keeps the class (*group*) of the previous version: groups are never split, people
  who left are removed from theirs, new people join the nearest group (by the centroid of its
  members' coded quasi-identifiers);
* a group that is left with fewer than k rows, a sensitive column that fails the release's l
  model (distinct, entropy or recursive (c,l): core.privacy_models, as the fresh Mondrian checks
  it), or a person whose candidates (the intersection so far, ``cohort_values``) would keep
  fewer than l of its values is merged with the nearest group that holds a missing value (or the
  nearest, if none does); repeated until none is left;
* if even one group of everyone would not do, :class:`CannotKeepCandidates` (the refresh is
  refused, the published version stays).

Merging only ever adds values to a group, so a person's intersection never loses a value to a
merge; it loses values only when the last holder of a value leaves their group, which the merge
repairs. The guarantee is checked again from the released rows (db.republication): this module
builds, it does not vouch.
"""
from __future__ import annotations

import numpy as np

from plpy_anon.core.disjoint_sets import SmallestRootSets
from plpy_anon.core.errors import InsufficientData
from plpy_anon.core.interrupts import check as check_interrupts
from plpy_anon.core.privacy_models import Models


class CannotKeepCandidates(InsufficientData):
    """No grouping of the current rows keeps every known person's l candidates."""


def stable_partition(groups: np.ndarray, points: np.ndarray, sensitive: np.ndarray | None,
                     cohorts: np.ndarray, cohort_values: list[np.ndarray], k: int,
                     l: int | None, models: Models | None = None) -> np.ndarray:
    """Each current row's group: one of ``groups``' ids (a merged group keeps the smallest of its
    ids), so ids are never reused and a person who comes back finds their group's id again.

    ``groups``: each row's group in the previous version, -1 for a row seen for the first time;
    ``points``: (n, d) coordinates of the rows'
    quasi-identifiers (any scale; used for nearness only); ``sensitive``: (n, m) codes, -1 for
    NULL (no value), or None; ``cohorts``: each row's index into the candidate sets, -1 for no
    history; ``cohort_values[j]``: (C, V_j) bool, the candidate codes of each cohort in column j;
    ``models``: the l model each group's values must meet (default: distinct l).
    """
    groups = np.asarray(groups, dtype=np.int64)
    n = groups.size
    if n < k:
        raise CannotKeepCandidates(f"{n} rows cannot form a class of k = {k}")
    points = np.asarray(points, dtype=np.float64).reshape(n, -1)
    labels = _join_nearest(groups, points)
    sensitive = None if sensitive is None else np.asarray(sensitive, dtype=np.int64).reshape(n, -1)
    cohorts = np.asarray(cohorts, dtype=np.int64)
    models = models if models is not None else Models(l=l)
    while True:
        check_interrupts()
        ids, index = np.unique(labels, return_inverse=True)
        index = index.ravel()
        counts = _value_counts(index, ids.size, sensitive, cohort_values)
        present = [c > 0 for c in counts]
        deficit = _deficits(index, ids.size, counts, cohorts, cohort_values, k, l, models)
        bad = np.flatnonzero(deficit.any(axis=1))
        if bad.size == 0:
            return labels
        if ids.size == 1:
            raise CannotKeepCandidates(
                "even one class of every row would leave someone published before with fewer than "
                f"l = {l} of the candidate values the earlier versions left them")
        labels = ids[_merge(index, ids.size, bad, points, present, deficit)]


def _join_nearest(groups: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Rows without a group join the group whose centroid is nearest."""
    labels = groups.copy()
    known = labels >= 0
    if not known.any():
        raise CannotKeepCandidates("no row of the previous version is left to keep its class")
    if known.all():
        return labels
    ids, members = np.unique(labels[known], return_inverse=True)
    centroids = _centroids(members.ravel(), ids.size, points[known])
    new = np.flatnonzero(~known)
    for start in range(0, new.size, 4096):
        check_interrupts()
        chunk = new[start:start + 4096]
        distance = ((points[chunk, None, :] - centroids[None, :, :]) ** 2).sum(axis=2)
        labels[chunk] = ids[distance.argmin(axis=1)]
    return labels


def _centroids(labels: np.ndarray, n_groups: int, points: np.ndarray) -> np.ndarray:
    sizes = np.bincount(labels, minlength=n_groups).astype(np.float64)
    out = np.zeros((n_groups, points.shape[1]))
    for dim in range(points.shape[1]):
        out[:, dim] = np.bincount(labels, weights=points[:, dim], minlength=n_groups)
    return out / np.maximum(sizes, 1.0)[:, None]


def _value_counts(labels, n_groups, sensitive, cohort_values) -> list[np.ndarray]:
    """Per sensitive column, (G, V): the rows of each value in each group (NULL is no value)."""
    if sensitive is None:
        return []
    out = []
    for j in range(sensitive.shape[1]):
        codes = sensitive[:, j]
        width = max(int(codes.max()) + 1 if codes.size else 0,
                    cohort_values[j].shape[1] if j < len(cohort_values) else 0)
        held = codes >= 0
        counts = np.bincount(labels[held] * width + codes[held], minlength=n_groups * width)
        out.append(counts.reshape(n_groups, width))
    return out


def _deficits(labels, n_groups, counts, cohorts, cohort_values, k, l, models) -> np.ndarray:
    """(G, 1 + Σ V_j) bool: column 0, the group breaks k or the l model itself; then, per
    sensitive column, the values some person of the group would lose below l candidates."""
    small = np.bincount(labels, minlength=n_groups) < k
    blocks = [small[:, None]]
    for j, column in enumerate(counts):
        held = column > 0
        missing = np.zeros_like(held)
        if l is not None:
            blocks[0] = blocks[0] | ~models.satisfied(column)[:, None]
            known = cohorts >= 0
            if known.any() and j < len(cohort_values):
                pairs = np.unique(np.column_stack([labels[known], cohorts[known]]), axis=0)
                wanted = cohort_values[j][pairs[:, 1]]
                width = held.shape[1]
                wanted = np.pad(wanted, ((0, 0), (0, max(0, width - wanted.shape[1]))))[:, :width]
                kept = (wanted & held[pairs[:, 0]]).sum(axis=1)
                short = kept < l
                if short.any():
                    # the values those people could get back from another group
                    np.logical_or.at(missing, pairs[short, 0], wanted[short] & ~held[pairs[short, 0]])
                    blocks[0][pairs[short, 0]] = True
        blocks.append(missing)
    return np.hstack(blocks)


def _merge(labels, n_groups, bad, points, present, deficit) -> np.ndarray:
    """Each bad group merged with the nearest group holding a value it misses (else the nearest);
    one pass, merges chained (the smallest index is the merged group's)."""
    centroids = _centroids(labels, n_groups, points)
    held = np.hstack([np.zeros((n_groups, 1), dtype=bool)] + present)
    sets = SmallestRootSets(n_groups)
    for g in bad.tolist():
        check_interrupts()
        distance = ((centroids - centroids[g]) ** 2).sum(axis=1)
        distance[g] = np.inf
        helps = (held & deficit[g]).any(axis=1)
        helps[g] = False
        pick = int(np.argmin(np.where(helps, distance, np.inf))) if helps.any() else int(np.argmin(distance))
        sets.union(g, pick)
    return sets.roots()[labels]
