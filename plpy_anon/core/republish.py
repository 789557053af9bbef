"""What each group of a stable refresh publishes, so that no pair of versions pins anyone by
difference.

An analyst who keeps two versions ``i < j`` and knows who is in the table (their
quasi-identifiers: who joined and who left each class) subtracts a class's released multiset of
sensitive values: ``A = P_j(g) - P_i(anc g)`` are the joiners' values, ``R = P_i(anc g) - P_j(g)``
the leavers'. Groups merge but never split, so ``P_i(anc g)`` is the sum of version ``i``'s
multisets over the groups merged into ``g`` since -- or over any set of them: the analyst links
an earlier class through the people in both versions, and one whose people have all left is
subtracted apart (:func:`safe_against`). A version is kept only if, for every earlier version,
every group and every set of its ancestors, ``A`` and ``R`` are each empty or meet the release's
l model (core.privacy_models, NULL counting as no value); checking consecutive versions alone is
not enough (joiners published in one batch, some leaving in a later one, cancel out and pin the
rest). Classes whose released boxes overlap could each hold a person there, so the analyst
subtracts their union too (:func:`overlapping_groups`, :func:`unsafe_unions`): a union that
would pin someone holds its groups where each can. He links classes by the people who could be
in several at once, not by boxes that meet where nobody lies, so the parts of a union that
people link (:func:`people_linked_groups`) are checked the same way.

Each group publishes the most advanced of these multisets that passes, as in m-invariance's
counterfeits (Xiao & Tao, "m-Invariance: Towards Privacy Preserving Re-publication of Dynamic
Datasets", SIGMOD 2007):

* ``advance``: its current rows' values (held joiners published, counterfeits retired, stayers'
  updates published);
* ``retire_joiners``: the values of its stayers that the last version published (counterfeit
  values retired; an updated stayer's row left out until the group advances) plus its joiners';
* ``joiners``: the last published multiset plus the values of its members not yet published
  (leavers stay as counterfeit values, stayers' updates stay held);
* ``retire``: the stayers' published values alone (joiners held back);
* ``hold``: the last published multiset unchanged (a joiner whose value a counterfeit row shows
  takes that row; other joiners held back; each other leaver's value stays as a counterfeit
  row; a stayer's update held at the published value).

A joiner taking a counterfeit row leaves the multiset as it was, so no pair of versions sees a
change; the leaver's row is gone (the value stays, now a published member's).

``hold`` passes every pair that the last version passed, as long as the group was not merged; a
group whose options all fail (``hold`` needs k real published members, a merged group's sums
may cancel) is merged with its nearest group and the choice made again; when one group of
everyone still fails, the version publishes nothing (:func:`withdrawn`) rather than leave the
last one published: read again with the table as it is now, the last version's parts are finer
than the ones it was checked with (people who left link nothing).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from plpy_anon.core.disjoint_sets import SmallestRootSets
from plpy_anon.core.interrupts import check as check_interrupts
from plpy_anon.core.privacy_models import Models
from plpy_anon.core.republication import (
    MERGE_CHUNK,
    CannotKeepCandidates,
    GroupBoxes,
    _centroids,
    _distinct,
    _grouping_kernels,
    _join_nearest,
    _kernels,
    _plain,
    _value_codes,
    first_acceptable,
    group_index,
    group_min_max,
    stable_order,
)

CHOICES = ("advance", "retire_joiners", "joiners", "retire", "hold", "withdraw")
#: the options that publish every current member
PUBLISHING_ALL = 3
HOLD = CHOICES.index("hold")
#: a group that publishes nothing (every group of a version no merge can keep safe)
WITHDRAW = CHOICES.index("withdraw")


@dataclass
class Version:
    """One published version: its groups' ids and multisets, ``counts[g, v]`` copies of value
    code ``v`` (the last code is NULL) in group ``ids[g]``; ``linked``: each group's union of
    groups whose boxes overlapped in that version (its smallest id; None: no two overlapped)."""

    ids: np.ndarray
    counts: np.ndarray
    linked: np.ndarray | None = None
    #: each group's union of groups linked by people in that version (None: unknown, taken as
    #: ``linked``)
    people_linked: np.ndarray | None = None
    #: per group, whether one of its people then is still in the table (None: unknown, every
    #: group taken as linked to the group holding it now)
    alive: np.ndarray | None = None
    #: per group, whether one of its people then is still in the table with the same record
    #: (QIs and sensitive value): an analyst may take a changed record for a leaver and a
    #: joiner, which links fewer classes (None: unknown, taken as ``alive``)
    unchanged: np.ndarray | None = None


@dataclass
class Published:
    """A refresh's publication: ``labels`` each row's group (merged further where needed),
    ``ids`` the groups with rows (sorted) and ``counts`` their published multisets, ``choice``
    each group's option, ``published`` whether each row's person is published after this
    version, ``roots`` every group id ever used mapped to the group holding it now (``lineage``
    ids, in the same order), ``linked`` each group's union of groups whose boxes overlap (the
    smallest group id of it; None: no two overlap)."""

    labels: np.ndarray
    ids: np.ndarray
    counts: np.ndarray
    choice: np.ndarray
    published: np.ndarray
    lineage: np.ndarray
    roots: np.ndarray
    linked: np.ndarray | None = None
    people_linked: np.ndarray | None = None

    @property
    def held_back(self) -> int:
        return int((~self.published).sum())

    @property
    def counterfeit(self) -> int:
        """Published rows beyond the real published members: leavers' values kept."""
        real = np.bincount(np.searchsorted(self.ids, self.labels[self.published]), minlength=self.ids.size)
        return int(np.maximum(self.counts.sum(axis=1) - real, 0).sum())


def meets(models: Models, counts: np.ndarray) -> np.ndarray:
    """Per row of ``counts`` (last column NULL, no value): the l model holds."""
    if models.t is None and (models.l is None or models.l <= 1 or models.l_diversity == "distinct"):
        # distinct l alone: counted on the integers (no float copy of every multiset)
        if models.l is None or models.l <= 1:
            return np.ones(counts.shape[0], dtype=bool)
        return np.count_nonzero(counts[:, :-1], axis=1) >= models.l
    return models.satisfied(counts[:, :-1])


def difference_safe(models: Models, published: np.ndarray, earlier: np.ndarray) -> np.ndarray:
    """Per group: the values added since ``earlier`` and those removed are each none or meet
    the l model (``published``, ``earlier``: (G, V) multisets of the same groups)."""
    added = np.maximum(published - earlier, 0)
    removed = np.maximum(earlier - published, 0)
    return ((added.sum(axis=1) == 0) | meets(models, added)) & \
        ((removed.sum(axis=1) == 0) | meets(models, removed))


def ancestors_sum(version: Version, roots_of, ids: np.ndarray) -> np.ndarray:
    """(len(ids), V): each current group's sum of ``version``'s multisets over the groups merged
    into it (``roots_of``: a version's group ids -> current groups)."""
    out = np.zeros((ids.size, version.counts.shape[1]), dtype=np.int64)
    root = roots_of(version.ids)
    at = np.searchsorted(ids, root)
    inside = (at < ids.size) & (ids[np.minimum(at, ids.size - 1)] == root)
    _add_rows(out, at[inside], version.counts[inside])
    return out


#: ancestors of one group beyond which not every set of them is checked (the single ones, all
#: but one, and all are)
ANCESTOR_SETS_LIMIT = 12


def safe_against(models: Models, options: np.ndarray, version: Version, roots_of,
                 ids: np.ndarray) -> np.ndarray:
    """(G, O): each group's options (``options``: (G, O, V) multisets) against the earlier
    ``version``: for every non-empty set of the group's ancestors in it, the values added and
    removed are each none or meet the l model. An analyst links an ancestor's class to the group
    through the people in both versions, so when all of an ancestor's people have left, its
    values (kept as counterfeits) are subtracted apart from the rest; which ancestors those are
    depends on who left, so every set of them is checked."""
    n_groups, n_options, width = options.shape
    root = roots_of(version.ids)
    at = np.searchsorted(ids, root)
    inside = (at < ids.size) & (ids[np.minimum(at, ids.size - 1)] == root)
    full = np.zeros((n_groups, width), dtype=np.int64)
    _add_rows(full, at[inside], version.counts[inside])
    compiled = _compiled_safe(models, n_groups * n_options)
    if compiled is not None:
        ok = compiled(options, full[:, None, :], np.ones((n_groups, n_options), dtype=bool))
    else:
        ok = difference_safe(models, options.reshape(-1, width),
                             np.repeat(full, n_options, axis=0)).reshape(n_groups, n_options)
    ancestors = np.bincount(at[inside], minlength=n_groups)
    rows = np.flatnonzero(inside)
    several = np.flatnonzero(ancestors > 1)
    if not several.size:
        return ok
    # each group's ancestors, in their order in the version
    by_group = rows[np.argsort(at[inside], kind="stable")]
    starts = np.cumsum(ancestors) - ancestors
    # the groups with as many ancestors at once: every option against every set of them
    for n in np.unique(ancestors[several]).tolist():
        masks = _ancestor_sets(n)
        groups = several[ancestors[several] == n]
        step = max(1, SETS_AT_ONCE // (masks.shape[0] * n_options))
        for first in range(0, groups.size, step):
            chunk = groups[first:first + step]
            sums = masks @ version.counts[by_group[starts[chunk][:, None] + np.arange(n)]]
            if compiled is not None:
                ok[chunk] = compiled(options[chunk], sums, ok[chunk])
                continue
            mine = difference_safe(
                models, np.repeat(options[chunk], masks.shape[0], axis=1).reshape(-1, width),
                np.tile(sums, (1, n_options, 1)).reshape(-1, width))
            ok[chunk] &= mine.reshape(chunk.size, n_options, -1).all(axis=2)
    return ok


#: multisets compared at once at most (groups' options against sets of their ancestors)
SETS_AT_ONCE = 1 << 18


def _compiled_safe(models: Models, size: int):
    """:func:`safe_against`'s test on the compiled kernel (core._republication_kernels.
    options_safe): ``test(options, earlier, ok)`` -> ``ok`` narrowed, for the distinct l model
    alone where the process has the kernels (or ``size`` multisets are worth loading them);
    None otherwise (:func:`difference_safe` on numpy then)."""
    if models.t is not None or (models.l is not None and models.l > 1
                                and models.l_diversity != "distinct"):
        return None
    kern = _kernels(size)
    if kern is None:
        return None
    # no l model: every difference passes (l = 0)
    l = float(models.l) if models.l is not None and models.l > 1 else 0.0

    def test(options, earlier, ok):
        ok = np.ascontiguousarray(ok, dtype=bool).copy()
        kern.options_safe(np.ascontiguousarray(options, dtype=np.int64),
                          np.ascontiguousarray(earlier, dtype=np.int64), l, ok)
        return ok
    return test


def _add_rows(out: np.ndarray, at: np.ndarray, rows: np.ndarray) -> None:
    """``np.add.at(out, at, rows)`` for 2-d ``out`` (contiguous), as one flat addition (a
    compiled pass over the rows where the kernels are loaded)."""
    rows = np.asarray(rows)
    kern = _grouping_kernels(rows.size)
    if kern is not None and out.dtype == np.int64 and rows.dtype.kind in "iu" and rows.ndim == 2:
        kern.add_rows(out, _plain(at, np.int64), _plain(rows, np.int64))
        return
    width = out.shape[1]
    np.add.at(out.reshape(-1), (np.asarray(at)[:, None] * width + np.arange(width)).reshape(-1),
              np.asarray(rows).reshape(-1))


def _ancestor_sets(n: int) -> np.ndarray:
    """(S, n) 0/1: the sets of ``n`` ancestors checked (every non-empty one up to
    ANCESTOR_SETS_LIMIT; beyond, each alone and all but each)."""
    if n <= ANCESTOR_SETS_LIMIT:
        masks = np.arange(1, 1 << n)[:, None] >> np.arange(n)[None, :] & 1
    else:
        one = np.eye(n, dtype=np.int64)
        masks = np.vstack([one, 1 - one])
    return masks.astype(np.int64)


def unsafe_pairs(models: Models, ids: np.ndarray, counts: np.ndarray, history: list[Version],
                 roots_of) -> np.ndarray:
    """(len(history),) the groups each earlier version would pin by difference with ``counts``
    (:func:`safe_against`), groups that no longer have rows (``counts`` of zero, ids absent)
    included."""
    out = []
    for version in history:
        gone = _absent(np.unique(roots_of(version.ids)), ids)
        all_ids = np.concatenate([ids, gone])
        order = np.argsort(all_ids)
        published = np.vstack([counts, np.zeros((gone.size, counts.shape[1]), dtype=counts.dtype)])[order]
        ok = safe_against(models, published[:, None, :], version, roots_of, all_ids[order])
        out.append(int((~ok).sum()))
    return np.asarray(out, dtype=np.int64)


def _absent(values: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """``np.setdiff1d(values, ids)`` of sorted distinct ``values``: searched in ``ids`` when
    they are sorted (no sort of both)."""
    ids = np.asarray(ids)
    if ids.size < 2 or (ids[1:] > ids[:-1]).all():
        at = np.searchsorted(ids, values)
        inside = (at < ids.size) & (ids[np.minimum(at, max(ids.size - 1, 0))] == values) \
            if ids.size else np.zeros(values.size, dtype=bool)
        return values[~inside]
    return np.setdiff1d(values, ids)


def union_nodes(ids: np.ndarray, linked: np.ndarray | None, version: Version,
                roots_of, earlier_linked=False) -> tuple[np.ndarray, np.ndarray]:
    """The unions an analyst who keeps ``version`` and this one subtracts: (the groups, those
    with rows now (``ids``, sorted) then those whose rows have all gone, and each one's union, by
    its smallest position). Classes are linked by overlapping boxes in either version (a person
    there could be in any: ``linked`` now, ``version.linked`` then) and by people in both,
    whose group they keep (the earlier groups followed to the groups holding them now)."""
    root = roots_of(version.ids)
    gone = _absent(np.unique(root), ids)
    nodes = np.concatenate([ids, gone])
    order = np.argsort(nodes, kind="stable")
    sorted_nodes = nodes[order]

    def position(group_ids):
        return order[np.searchsorted(sorted_nodes, group_ids)]

    a, b = [], []
    if linked is not None:
        a.append(np.arange(ids.size))
        b.append(position(np.asarray(linked, dtype=np.int64)))
    then = version.linked if earlier_linked is False else earlier_linked
    if then is not None:
        a.append(position(root))
        b.append(position(roots_of(np.asarray(then, dtype=np.int64))))
    labels = np.arange(nodes.size, dtype=np.int64)
    if a:
        labels = _smallest_roots(labels, np.concatenate(a), np.concatenate(b))
    return nodes, labels


def unsafe_unions(models: Models, ids: np.ndarray, counts: np.ndarray, linked: np.ndarray | None,
                  history: list[Version], roots_of, per_group: bool = False,
                  people_linked: np.ndarray | None = None) -> np.ndarray:
    """(len(history),) the unions of several groups whose boxes overlap now or overlapped in the
    earlier version (:func:`union_nodes`; ``linked``: each group's union now, by its smallest
    id) whose values added or removed since each earlier version (over the groups merged into
    them) break the l model; with ``per_group``, (len(ids),) whether each group is in a union
    that fails against some version."""
    out = np.zeros(len(history), dtype=np.int64)
    failing = np.zeros(ids.size, dtype=bool)
    pairs = [(i, version, linked, False) for i, version in enumerate(history)]
    if people_linked is not None:
        # the parts an analyst links by the people in them (each version's own people)
        pairs += [(i, version, people_linked,
                   version.linked if version.people_linked is None else version.people_linked)
                  for i, version in enumerate(history)]
    for i, version, now_linked, then_linked in pairs:
        if then_linked is not False and version.alive is not None:
            # the parts of an analyst who follows every person in both versions, and of one
            # who takes each changed record for a new person: either may pin where the other
            # does not
            unsafe = _unsafe_parts(models, ids, counts, now_linked, then_linked, version,
                                   roots_of, version.alive)
            if version.unchanged is not None:
                unsafe |= _unsafe_parts(models, ids, counts, now_linked, then_linked, version,
                                        roots_of, version.unchanged)
            out[i] += int(unsafe.sum())
            failing |= unsafe
            continue
        nodes, union = union_nodes(ids, now_linked, version, roots_of, then_linked)
        several = np.bincount(union, minlength=nodes.size) > 1
        if not several.any():
            continue
        now = np.zeros((nodes.size, counts.shape[1]), dtype=np.int64)
        before = np.zeros_like(now)
        _add_rows(now, union[:ids.size], counts)
        order = np.argsort(nodes, kind="stable")
        _add_rows(before, union[order], ancestors_sum(version, roots_of, nodes[order]))
        unsafe = np.zeros(nodes.size, dtype=bool)
        unsafe[several] = ~difference_safe(models, now[several], before[several])
        out[i] += int(unsafe.sum())
        failing |= unsafe[union[:ids.size]]
    return failing if per_group else out


def _unsafe_parts(models, ids, counts, now_linked, then_linked, version, roots_of,
                  alive) -> np.ndarray:
    """Per group now: in a part of several classes linked as an analyst links them (people in
    several boxes, in either version, and people in both: an earlier group to the group holding
    it now only where ``alive``, one of its people is followed into this version) whose values
    added or removed break the l model."""
    n, m = ids.size, version.ids.size
    a, b = [], []
    if now_linked is not None:
        a.append(np.arange(n))
        b.append(np.searchsorted(ids, np.asarray(now_linked, dtype=np.int64)))
    order = np.argsort(version.ids, kind="stable")
    if then_linked is not None:
        a.append(n + np.arange(m))
        b.append(n + order[np.searchsorted(version.ids[order], np.asarray(then_linked, dtype=np.int64))])
    root = roots_of(version.ids)
    at = np.searchsorted(ids, root)
    followed = np.asarray(alive, dtype=bool) & (at < n) & (ids[np.minimum(at, n - 1)] == root)
    a.append(n + np.flatnonzero(followed))
    b.append(at[followed])
    labels = _smallest_roots(np.arange(n + m, dtype=np.int64), np.concatenate(a), np.concatenate(b))
    now = np.zeros((n + m, counts.shape[1]), dtype=np.int64)
    before = np.zeros_like(now)
    _add_rows(now, labels[:n], counts)
    _add_rows(before, labels[n:], version.counts)
    several = np.flatnonzero(np.bincount(labels, minlength=n + m) > 1)
    unsafe = np.zeros(n + m, dtype=bool)
    # the parts of one class are not subtracted: only those of several tested
    unsafe[several] = ~difference_safe(models, now[several], before[several])
    return unsafe[labels[:n]]


def linked_ever(ids: np.ndarray, linked: np.ndarray | None, history: list[Version],
                roots_of) -> np.ndarray | None:
    """Each group's union over every earlier version's overlaps and this one's (the index of its
    smallest group), or None when no two groups are linked so."""
    labels = np.arange(ids.size, dtype=np.int64)
    found = False
    for version in history:
        nodes, union = union_nodes(ids, linked, version, roots_of)
        # a group linked only to earlier groups whose rows have all gone is a union too
        found |= bool((np.bincount(union, minlength=nodes.size)[union[:ids.size]] > 1).any())
        union = union[:ids.size]
        # groups now that share a union (gone groups link them too)
        first = np.full(union.max() + 1 if union.size else 1, -1, dtype=np.int64)
        np.maximum.at(first, union, np.arange(ids.size))
        mate = first[union]
        if (mate != np.arange(ids.size)).any():
            found = True
            labels = _smallest_roots(labels, np.arange(ids.size), mate)
    if linked is not None:
        at = np.searchsorted(ids, np.asarray(linked, dtype=np.int64))
        if (at != np.arange(ids.size)).any():
            found = True
            labels = _smallest_roots(labels, np.arange(ids.size), at)
    return labels if found else None


def publish(labels: np.ndarray, previous: np.ndarray, codes: np.ndarray, points: np.ndarray,
            history: list[Version], lineage: np.ndarray, roots: np.ndarray, k: int,
            models: Models, qi_codes: np.ndarray | None = None,
            ranged: np.ndarray | None = None, held_in: np.ndarray | None = None,
            bound: np.ndarray | None = None, point_codes: list | None = None,
            candidates: np.ndarray | None = None) -> Published:
    """Each group's published multiset for this version (:func:`kept_publication`), or, when
    even one group of everyone would pin someone by difference, a version that publishes
    nothing (:func:`withdrawn`): keeping the last version instead would leave it read with the
    table as it is now, whose parts (people who left link nothing) it was never checked with."""
    try:
        return kept_publication(labels, previous, codes, points, history, lineage, roots, k,
                                models, qi_codes, ranged, held_in, bound, point_codes,
                                candidates)
    except CannotKeepCandidates:
        return withdrawn(labels, previous, history, lineage, roots, held_in)


def withdrawn(labels: np.ndarray, previous: np.ndarray, history: list[Version],
              lineage: np.ndarray, roots: np.ndarray, held_in: np.ndarray | None = None) -> Published:
    """A version of no rows: every group keeps its people (its published ones stay published,
    its joiners wait) and publishes nothing. Against any earlier version, every part an analyst
    forms then only loses whole classes, each of which met the l model, and a sum of multisets
    that each meet it meets it too (distinct, entropy and recursive l are monotone under
    union: Machanavajjhala et al., "l-Diversity: Privacy Beyond k-Anonymity", 2007)."""
    labels = np.asarray(labels, dtype=np.int64)
    previous = np.asarray(previous, dtype=np.int64)
    published_before = previous >= 0
    step = _step(labels, previous, published_before, held_in)
    ids = np.unique(labels)
    lineage = np.asarray(lineage, dtype=np.int64)
    now = _mapping(np.fromiter(step.keys(), dtype=np.int64, count=len(step)),
                   np.fromiter(step.values(), dtype=np.int64, count=len(step)))(
                       np.asarray(roots, dtype=np.int64))
    n_values = history[-1].counts.shape[1]
    return Published(labels, ids, np.zeros((ids.size, n_values), dtype=np.int64),
                     np.full(ids.size, WITHDRAW, dtype=np.int64), published_before.copy(),
                     lineage, now, None, ids.copy())


def _step(labels, previous, published_before, held_in=None) -> dict:
    """Each group of the last version -> a group its rows are in now: by its published members'
    (the last of them), else by its held-back members' (the last of them); one entry per group,
    found column-wise (a dict of the rows' pairs would build a Python object per row)."""
    keys, values = previous[published_before], labels[published_before]
    if held_in is not None:
        held_in = np.asarray(held_in, dtype=np.int64)
        waited = (held_in >= 0) & ~published_before
        # published members after the held-back ones: theirs win, as the last of a key does
        keys = np.concatenate([held_in[waited], keys])
        values = np.concatenate([labels[waited], values])
    if keys.size == 0:
        return {}
    low, high = int(keys.min()), int(keys.max())
    if high - low >= 4 * keys.size:
        # sparse ids: each key's last row by a sort
        known, first = np.unique(keys[::-1], return_index=True)
        return dict(zip(known.tolist(), values[::-1][first].tolist()))
    last = np.full(high - low + 1, -1, dtype=np.int64)
    np.maximum.at(last, keys - low, np.arange(keys.size, dtype=np.int64))
    at = last[last >= 0]
    return dict(zip(keys[at].tolist(), values[at].tolist()))


def joined_groups(groups: np.ndarray, points: np.ndarray, lineage: np.ndarray,
                  ranged: np.ndarray | None = None, fresh: np.ndarray | None = None) -> np.ndarray:
    """Each row's group of the last version, joiners in the nearest, or, when nobody of the last
    version is left, new groups (ids none of ``lineage`` used): ``fresh``'s classes (an
    ordinary partition of the rows), else one group of everyone. The groups of a
    :func:`withdrawn` version when no grouping keeps everyone's candidates: it shows none of
    them, and the next refresh keeps them as it keeps published groups."""
    groups = np.asarray(groups, dtype=np.int64)
    if groups.size and (groups < 0).all():
        start = int(np.max(lineage, initial=-1)) + 1
        if fresh is None:
            return np.full(groups.size, start, dtype=np.int64)
        return start + np.unique(np.asarray(fresh), return_inverse=True)[1].ravel().astype(np.int64)
    return _join_nearest(groups, np.asarray(points, dtype=np.float64), ranged)


def kept_publication(labels: np.ndarray, previous: np.ndarray, codes: np.ndarray,
                     points: np.ndarray, history: list[Version], lineage: np.ndarray,
                     roots: np.ndarray, k: int, models: Models, qi_codes: np.ndarray | None = None,
                     ranged: np.ndarray | None = None, held_in: np.ndarray | None = None,
                     bound: np.ndarray | None = None, point_codes: list | None = None,
                     candidates: np.ndarray | None = None) -> Published:
    """Each group's published multiset for this version (see the module docstring).

    ``labels``: each row's group (core.republication.stable_partition); ``previous``: the
    group the row's person was published in by the last version, -1 if not published then;
    ``codes``: each row's sensitive code (``V - 1`` for NULL); ``points``: the rows' coordinates
    (nearness for merges); ``history``: every earlier version, oldest first (at least one);
    ``lineage``/``roots``: every group id used so far and the group of the last version
    holding it; ``qi_codes`` (n, d) and ``ranged`` (d,): the rows' QI codes and which QIs are
    released as ranges (their NULLs coded -1) rather than sets: groups that would be released
    with the same QIs are one class to an analyst, so they are merged. ``held_in``: each row's
    group in the last version, held back or published (-1: new; default ``previous``): a person
    held back links their group then to their group now as well. ``bound``: the rows not
    published by the last version whose person has candidates (people who come back, and
    people held back, never published, since a released class held them: an analyst who
    knew they were in the table took its values for theirs): their
    group's current values keep l of them (core.republication.stable_partition), so they are
    published only with every distinct value of it, never by taking a counterfeit row.
    ``point_codes``: core.republication.point_codes of ``points`` and ``ranged``, if the caller
    has them.
    ``candidates``: (rows of ``bound``, V) bool, each such person's candidate values: such a
    person lies in their group's released box whether it publishes them or holds them back, so
    an analyst who knew them intersects whatever multiset the group shows with their
    candidates, and an option keeping fewer than l of them is not taken."""
    labels = np.asarray(labels, dtype=np.int64).copy()
    previous = np.asarray(previous, dtype=np.int64)
    published_before = previous >= 0
    codes = np.asarray(codes, dtype=np.int64)
    n_values = history[-1].counts.shape[1]
    lineage = np.asarray(lineage, dtype=np.int64)
    roots = np.asarray(roots, dtype=np.int64)
    # each group of the last version -> the group its published members are in now (merged
    # groups keep the smallest id, so they agree)
    step = _step(labels, previous, published_before, held_in)
    while True:
        # the last pass's (G, O, V) options are not kept while this pass finds its own
        current = taken = stacked = possible = index = None
        ids, index = group_index(labels)
        if qi_codes is not None:
            same = _same_release_keys(index, ids.size, qi_codes, ranged)
            if same is not None:
                labels = _rename(ids, same, index, step)
                continue
        now = _mapping(np.fromiter(step.keys(), dtype=np.int64, count=len(step)),
                       np.fromiter(step.values(), dtype=np.int64, count=len(step)))(roots)
        roots_of = _mapping(lineage, now)

        current, taken, stacked, possible = _options(
            index, ids, codes, published_before, history, roots_of, k, models, bound, candidates)
        bad = np.flatnonzero(~possible.any(axis=1))
        if bad.size == 0:
            choice = possible.argmax(axis=1)
            overlap, by_people = (None, None) if qi_codes is None else \
                box_unions(index, ids.size, qi_codes, ranged)
            linked = None if overlap is None else ids[overlap]
            people_linked = ids if by_people is None else ids[by_people]
            ever = linked_ever(ids, linked, history, roots_of)
            if ever is not None:
                choice = _unions_held(models, ever, linked, choice, possible, stacked, history,
                                      roots_of, ids, people_linked)
            # checked even where no boxes overlap: a group's part with only the ancestors whose
            # people are still in the table is a set of them safe_against may not try (over
            # ANCESTOR_SETS_LIMIT), and the release's check refuses it as it does a union
            counts = stacked[np.arange(ids.size), choice]
            failing = unsafe_unions(models, ids, counts, linked, history, roots_of,
                                    per_group=True, people_linked=people_linked)
            if failing.any():
                if ids.size == 1:
                    raise CannotKeepCandidates(
                        "no multiset of one class of every row keeps the unions of classes "
                        "that overlapped from pinning someone by difference")
                within = ever
                if ever is None:
                    # no union: each failing group is its own, merged with a near group
                    ever = np.arange(ids.size)
                # the release's check refuses a version with an unsafe union: its groups
                # that cannot hold (or are its only group now) merge with a near group
                # (then the union may hold), or, when all could, the union's failing groups
                # become one group, which safe_against checks against its ancestors
                shared = np.bincount(ever[failing], minlength=ids.size)[ever]
                cannot = np.flatnonzero(failing & (~possible[:, HOLD] | (shared == 1)))
                if cannot.size:
                    # within the union: their boxes already overlap, so the union's box
                    # grows least
                    merged = _merge_nearest(
                        index, ids.size, cannot, points, ranged, within=within,
                        acceptable=_merge_with_an_option(index, ids, codes, published_before,
                                                         history, roots_of, k, models),
                        point_codes=point_codes)
                else:
                    first = np.full(ids.size, ids.size, dtype=np.int64)
                    np.minimum.at(first, ever[failing], np.flatnonzero(failing))
                    merged = np.where(failing, first[ever], np.arange(ids.size))
                labels = _rename(ids, merged, index, step)
                continue
            published = published_before | (choice[index] < PUBLISHING_ALL)
            published |= _taking_rows(index, codes, published_before if bound is None
                                      else published_before | bound,
                                      taken * (choice == HOLD)[:, None])
            return Published(labels, ids, counts, choice, published, lineage, now, linked,
                             None if qi_codes is None else people_linked)
        if ids.size == 1:
            raise CannotKeepCandidates(
                "no multiset of one class of every row keeps every pair of versions from pinning "
                "someone by difference")
        # the values an earlier version showed in a group's ancestors that none of its options
        # holds: a set of ancestors that lost one of them pins its leavers, and only a merge
        # with a group holding it brings the value back (a merge with the nearest may not)
        shown = np.zeros((ids.size, n_values), dtype=bool)
        for version in history:
            shown |= ancestors_sum(version, roots_of, ids) > 0
        missing = shown & (stacked.max(axis=1) == 0)
        missing[:, -1] = False
        acceptable = _merge_with_an_option(index, ids, codes, published_before, history, roots_of,
                                           k, models)
        labels = _rename(ids, _merge_nearest(index, ids.size, bad, points, ranged, missing,
                                             current > 0, acceptable=acceptable,
                                             point_codes=point_codes), index, step)


def _mapping(keys: np.ndarray, values: np.ndarray):
    """``dict(zip(keys, values)).get(x, x)`` for each ``x`` of an array (a repeated key maps
    to its last value), by sort and search."""
    keys = np.asarray(keys, dtype=np.int64)
    values = np.asarray(values, dtype=np.int64)
    if keys.size and int(keys.max()) - int(keys.min()) < 4 * keys.size:
        # dense keys: a table of each key's last value (no sort of the keys)
        low = int(keys.min())
        last = np.full(int(keys.max()) - low + 1, -1, dtype=np.int64)
        np.maximum.at(last, keys - low, np.arange(keys.size, dtype=np.int64))
        has = last >= 0
        table = values[np.maximum(last, 0)]

        def lookup(x):
            x = np.asarray(x, dtype=np.int64)
            at = x - low
            inside = (at >= 0) & (at < table.size)
            at = np.where(inside, at, 0)
            return np.where(inside & has[at], table[at], x)
        return lookup
    keys = keys[::-1]
    known, first = np.unique(keys, return_index=True)
    mapped = values[::-1][first]

    def get(x):
        x = np.asarray(x, dtype=np.int64)
        if known.size == 0:
            return x.copy()
        pos = np.minimum(np.searchsorted(known, x), known.size - 1)
        return np.where(known[pos] == x, mapped[pos], x)
    return get


def _options(index, ids, codes, published_before, history, roots_of, k, models, bound=None,
             candidates=None):
    """Each group's five multisets (the module docstring) and which it may publish: (current
    multisets, counterfeit rows joiners take, (G, O, V) options, (G, O) possible); ``bound``:
    rows of people with candidates not published by the last version, ``candidates`` theirs
    (:func:`kept_publication`)."""
    n_values = history[-1].counts.shape[1]
    members = np.bincount(index, minlength=ids.size)
    real_hold = np.bincount(index[published_before], minlength=ids.size)
    current = _counts(index, codes, ids.size, n_values)
    joiners = _counts(index[~published_before], codes[~published_before], ids.size, n_values)
    last = last_published(history, roots_of, ids)
    # the stayers' values the last version published (counterfeits are the rest of it)
    stayers = _counts(index[published_before], codes[published_before], ids.size, n_values)
    kept = np.minimum(last, stayers)
    # a joiner whose value a counterfeit row shows takes that row: the multiset stays, the
    # leaver's row is retired
    takers = joiners
    if bound is not None and bound.any():
        takers = _counts(index[~published_before & ~bound], codes[~published_before & ~bound],
                         ids.size, n_values)
    taken = np.minimum(last - kept, takers)
    new = joiners.sum(axis=1)
    options = [current, kept + joiners, last + joiners, kept, last]
    # retiring keeps every distinct value of the current rows (so every candidate that
    # stable_partition kept): the values dropped are counterfeits or held updates only
    retires = kept.sum(axis=1) < last.sum(axis=1)
    valid = [members >= k, retires & (kept.sum(axis=1) + new >= k) & _keeps(current, kept + joiners),
             (members >= k) & (new > 0), retires & (kept.sum(axis=1) >= k) & _keeps(current, kept),
             real_hold + taken.sum(axis=1) >= k]
    if bound is not None and bound.any():
        # a group with someone bound publishes them with every value it holds now
        returning = np.bincount(index[bound], minlength=ids.size) > 0
        valid[2] = valid[2] & (~returning | _keeps(current, last + joiners))
    stacked = np.stack(options, axis=1)
    possible = np.column_stack(valid) & meets(models, stacked.reshape(-1, n_values)).reshape(ids.size, -1)
    if candidates is not None and bound is not None and bound.any() and models.l:
        possible &= keeps_candidates(index[bound], candidates, stacked, models.l)
    for version in history:
        possible &= safe_against(models, stacked, version, roots_of, ids)
    return current, taken, stacked, possible


def keeps_candidates(groups: np.ndarray, candidates: np.ndarray, stacked: np.ndarray,
                     l: float) -> np.ndarray:
    """(G, O): whether each option of each group shows at least ``l`` of the candidate values
    of each person of it given (``groups``: their group indexes; ``candidates``: (people, V)
    bool, padded with False to V): what an analyst who knew they were in the table, published
    or held back, intersects with their candidates so far."""
    candidates = np.asarray(candidates, dtype=bool)
    width = stacked.shape[2]
    if candidates.shape[1] < width:
        candidates = np.pad(candidates, ((0, 0), (0, width - candidates.shape[1])))
    ok = np.ones(stacked.shape[:2], dtype=bool)
    # in chunks of people: a (chunk, O, V) array at most
    for start in range(0, groups.size, 4096):
        g = groups[start:start + 4096]
        kept = ((stacked[g] > 0) & candidates[start:start + 4096, None, :width]).sum(axis=2)
        np.logical_and.at(ok, g, kept >= l)
    return ok


def last_published(history: list[Version], roots_of, ids: np.ndarray) -> np.ndarray:
    """(len(ids), V): each group's multiset as the newest version that showed its ancestors
    published it (a version of no rows shows none of them: holding that one would withdraw the
    group for good, while holding the one before is checked against every version like any
    option)."""
    last = ancestors_sum(history[-1], roots_of, ids)
    for version in reversed(history[:-1]):
        empty = last.sum(axis=1) == 0
        if not empty.any():
            break
        last[empty] = ancestors_sum(version, roots_of, ids[empty])
    return last


def merge_keeps_an_option(previous, codes, history, lineage, roots, k, models):
    """For core.republication.stable_partition: ``acceptable(labels, g, c)``, whether groups
    ``g`` and ``c`` (ids in ``labels``, each row's group) merged have a multiset they may
    publish (:func:`publish`'s options), so that a merge is not one that at once needs another
    (each brings more ancestors, whose sums must all be safe)."""
    previous = np.asarray(previous, dtype=np.int64)
    codes = np.asarray(codes, dtype=np.int64)
    published_before = previous >= 0
    root_of = _mapping(lineage, roots)

    state: dict = {}

    def acceptable(labels, g: int, c: int) -> bool:
        if state.get("labels") is not labels:
            # each version's groups by the group holding them now (the merges so far), and the
            # rows by group, once per labelling
            step = _mapping(previous[published_before], labels[published_before])
            state.clear()
            state["labels"] = labels
            state["versions"] = [_Members(step(root_of(version.ids))) for version in history]
            state["rows"] = _Members(labels)
        parts = [_version_part(version, members.of((g, c)))
                 for version, members in zip(history, state["versions"])]
        return _merged_has_an_option(state["rows"].of((g, c)), min(g, c), parts, codes,
                                     published_before, k, models)
    return acceptable


def _merge_with_an_option(index, ids, codes, published_before, history, roots_of, k, models):
    """``acceptable(g, c)`` for merge_partner: groups ``g`` and ``c`` (indexes) merged have a
    multiset they may publish (so a merge that would need another at once is passed over)."""
    state: dict = {}

    def acceptable(g: int, c: int) -> bool:
        if not state:
            state["versions"] = [_Members(roots_of(version.ids)) for version in history]
            state["rows"] = _Members(index)
        pair = (int(ids[g]), int(ids[c]))
        parts = [_version_part(version, members.of(pair))
                 for version, members in zip(history, state["versions"])]
        return _merged_has_an_option(state["rows"].of((g, c)), min(pair), parts, codes,
                                     published_before, k, models)
    return acceptable


class _Members:
    """The positions of an array's entries by value: sorted once, searched per look-up."""

    def __init__(self, values: np.ndarray):
        self.order = stable_order(values)
        self.sorted = np.asarray(values)[self.order]

    def of(self, values) -> np.ndarray:
        """The positions holding any of ``values``, ascending."""
        return np.sort(np.concatenate([
            self.order[np.searchsorted(self.sorted, x):np.searchsorted(self.sorted, x, side="right")]
            for x in values]))


def _version_part(version: Version, positions: np.ndarray) -> Version:
    """``version`` with only its groups at ``positions`` (every per-group array cut alike)."""
    n = version.ids.size
    cut = {}
    for item in dataclasses.fields(version):
        value = getattr(version, item.name)
        if isinstance(value, np.ndarray) and value.ndim and value.shape[0] == n:
            cut[item.name] = value[positions]
    return dataclasses.replace(version, **cut)


def _merged_has_an_option(rows, low, parts, codes, published_before, k, models) -> bool:
    """Whether the group of ``rows`` (two groups merged into the group ``low``) has a multiset
    it may publish, against ``parts``: each earlier version's groups that it holds (every one
    of them held by it now), as :func:`_options` checks them against whole versions."""
    def roots_of(version_ids):
        return np.full(np.asarray(version_ids).size, low, dtype=np.int64)
    *_, possible = _options(np.zeros(rows.size, dtype=np.int64), np.array([low]), codes[rows],
                            published_before[rows], parts, roots_of, k, models)
    return bool(possible.any())


def _unions_held(models, ever, linked, choice, possible, stacked, history, roots_of,
                 ids, people_linked=None) -> np.ndarray:
    """Classes whose boxes overlap, now or in an earlier version, are one union to an analyst
    who keeps both versions (a person there could be in any): the groups of each union whose
    change against an earlier version pins someone hold (their last multisets) when every group
    linked to them (``ever``: each group's union over all versions) can."""
    choice = choice.copy()
    counts = stacked[np.arange(ids.size), choice]
    failing = unsafe_unions(models, ids, counts, linked, history, roots_of, per_group=True,
                            people_linked=people_linked)
    can_hold = np.ones(ids.size, dtype=bool)
    np.logical_and.at(can_hold, ever, possible[:, HOLD])
    choice[failing & can_hold[ever]] = HOLD
    return choice


def _taking_rows(index, codes, published_before, taken) -> np.ndarray:
    """Per row: a joiner among the first ``taken[group, value]`` joiners of its group with its
    value (they take counterfeit rows of that value)."""
    out = np.zeros(index.size, dtype=bool)
    rows = np.flatnonzero(~published_before)
    if rows.size == 0 or not taken.any():
        return out
    key = index[rows] * taken.shape[1] + codes[rows]
    order = np.argsort(key, kind="stable")
    key = key[order]
    first = np.searchsorted(key, key)
    rank = np.arange(key.size) - first
    out[rows[order]] = rank < taken.ravel()[key]
    return out


def _rename(ids, merged, index, step: dict) -> np.ndarray:
    """Rows' labels after merging groups (``merged``: each group index's merged index), and
    ``step`` (last version's groups -> groups now) updated in place."""
    new_ids = ids[merged]
    renamed = dict(zip(ids.tolist(), new_ids.tolist()))
    changed = {h: renamed.get(g, g) for h, g in step.items()} | \
        {g: renamed[g] for g in ids.tolist() if renamed[g] != g}
    step.clear()
    step.update(changed)
    return new_ids[index]


def _group_ranges(index, n_groups: int, col) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each group's smallest and largest non-NULL code of a QI (``col``, NULL as -1; a group
    without one: max int64 and -1), and which rows are not NULL."""
    valued = col >= 0
    low = np.full(n_groups, np.iinfo(np.int64).max)
    high = np.full(n_groups, -1)
    group_min_max(index[valued], col[valued], low, high)
    return low, high, valued


def _same_release_keys(index, n_groups, qi_codes, ranged) -> np.ndarray | None:
    """Groups released with identical QIs (ranges: smallest and largest non-NULL code; sets: the
    codes present) merged (each group index's merged index: the smallest with its key), or None
    when all differ. Sets are compared only between groups whose ranges are the same."""
    ranges = []
    for d in np.flatnonzero(ranged):
        low, high, _ = _group_ranges(index, n_groups, np.asarray(qi_codes[:, d], dtype=np.int64))
        ranges += [low, high]
    groups = np.arange(n_groups)
    if ranges:
        ranges = _row_ids(np.column_stack(ranges))
        groups = np.flatnonzero(np.bincount(ranges, minlength=n_groups)[ranges] > 1)
        if groups.size == 0:
            return None
        ranges = [ranges[groups]]
    # those groups' rows, the groups numbered 0.. in their order
    position = np.full(n_groups, -1, dtype=np.int64)
    position[groups] = np.arange(groups.size)
    sub = position[index]
    rows = sub >= 0
    if not rows.all():
        sub = sub[rows]
        qi_codes = qi_codes[rows]
    parts = ranges + [_set_ids(sub, groups.size, np.asarray(qi_codes[:, d], dtype=np.int64))
                      for d in np.flatnonzero(~np.asarray(ranged, dtype=bool))]
    keys = np.column_stack(parts) if parts else np.zeros((groups.size, 1), dtype=np.int64)
    same = _row_ids(keys)
    if same.max(initial=-1) + 1 == groups.size:
        return None
    first = np.full(groups.size, groups.size, dtype=np.int64)
    np.minimum.at(first, same, np.arange(groups.size))
    out = np.arange(n_groups, dtype=np.int64)
    out[groups] = groups[first[same]]
    return out


def _row_ids(table: np.ndarray) -> np.ndarray:
    """Per row of ``table`` (2-d integers), a number from 0 naming its values: equal rows,
    equal numbers, numbered in the rows' lexicographic order (a lexicographic sort of the
    columns packed by :func:`_packed_columns`, then the rows that differ from the one before)."""
    table = _packed_columns(table)
    order = np.lexsort(table.T[::-1])
    ordered = table[order]
    new = np.ones(order.size, dtype=bool)
    new[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)
    ids = np.empty(order.size, dtype=np.int64)
    ids[order] = np.cumsum(new) - 1
    return ids


def _packed_columns(table: np.ndarray) -> np.ndarray:
    """``table``'s integer columns packed, each as its offset from its smallest value, into as
    few int64 columns as their ranges allow (earlier columns in higher bits): rows compare,
    lexicographically and for equality, as they did; a sort then has fewer keys."""
    if table.shape[0] == 0 or table.shape[1] < 2:
        return table
    low, high = table.min(axis=0), table.max(axis=0)
    words, word, used = [], None, 0
    for j in range(table.shape[1]):
        bits = (int(high[j]) - int(low[j])).bit_length()
        if bits > 62:
            # too wide to shift: a column of its own, as it is
            if word is not None:
                words.append(word)
            words.append(table[:, j])
            word, used = None, 0
        elif word is not None and used + bits <= 63:
            word = (word << bits) | (table[:, j] - low[j])
            used += bits
        else:
            if word is not None:
                words.append(word)
            word, used = table[:, j] - low[j], bits
    if word is not None:
        words.append(word)
    return np.column_stack(words) if len(words) < table.shape[1] else table


def _set_ids(index, n_groups, col) -> np.ndarray:
    """Per group, a number naming the set of ``col``'s values its rows hold (equal sets, equal
    numbers): groups keyed by their set's size and a sum of its codes mixed to 64 bits, each
    set then compared code by code with the first of its key's; only if two sets share a key,
    each group's sorted codes as a row, padded, numbered by :func:`_row_ids` (groups by rows,
    wide when one group holds many values)."""
    low = int(col.min(initial=0))
    width = int(col.max(initial=0)) - low + 1
    if n_groups * width <= 1 << 26:
        member = np.zeros(n_groups * width, dtype=bool)
        member[index * width + (col - low)] = True
        held = np.flatnonzero(member)
        del member
    else:
        held = _distinct(index * width + (col - low))
    group, code = held // width, held % width + low
    del held
    sizes = np.bincount(group, minlength=n_groups)
    starts = np.cumsum(sizes) - sizes
    sums = np.zeros(n_groups, dtype=np.uint64)
    if code.size:
        sums[sizes > 0] = np.add.reduceat(_mixed(code), starts[sizes > 0])
    ids = _row_ids(np.column_stack([sizes, sums.view(np.int64)]))
    first = np.full(n_groups, n_groups, dtype=np.int64)
    np.minimum.at(first, ids, np.arange(n_groups))
    position = np.arange(code.size) - starts[group]
    if (code[starts[first[ids]][group] + position] == code).all():
        return ids
    table = np.full((n_groups, int(sizes.max(initial=1))), low - 1, dtype=np.int64)
    table[group, position] = code
    return _row_ids(table)


def _mixed(codes: np.ndarray) -> np.ndarray:
    """Each code's 64-bit mix (splitmix64's finalizer): sums of them tell sets apart."""
    z = codes.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def box_unions(index: np.ndarray, n_groups: int, qi_codes: np.ndarray,
               ranged: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(:func:`overlapping_groups`, :func:`people_linked_groups` when some boxes overlap, else
    None): on the compiled kernels, from one listing of the pairs of boxes that meet."""
    index = np.asarray(index, dtype=np.int64)
    kern = _kernels(index.size)
    if kern is None:
        overlap = overlapping_groups(index, n_groups, qi_codes, ranged)
        return overlap, None if overlap is None else \
            people_linked_groups(index, n_groups, qi_codes, ranged)
    tests = _box_tests(index, n_groups, qi_codes, ranged)
    boxes = _compiled_box_tests(tests, n_groups)
    link = _people_link(kern, index, n_groups, qi_codes, tests, boxes)
    overlap = np.arange(n_groups, dtype=np.int64)
    by_people = np.arange(n_groups, dtype=np.int64)
    overlaps = found = False
    for a, b in _meeting_pairs_compiled(kern, boxes):
        overlaps = True
        overlap = _smallest_roots(overlap, a, b)
        linked = link(a, b)
        if linked.any():
            found = True
            by_people = _smallest_roots(by_people, a[linked], b[linked])
    if not overlaps:
        return None, None
    return overlap, by_people if found else None


def overlapping_groups(index: np.ndarray, n_groups: int, qi_codes: np.ndarray,
                       ranged: np.ndarray) -> np.ndarray | None:
    """The unions of groups whose released boxes overlap, transitively (each group index's
    union, by the smallest index in it), or None when every box is apart. Two boxes
    overlap when some person's QIs could lie in both: on every QI, their ranges (smallest and
    largest non-NULL code) meet, or some row has a NULL there (a NULL lies in every range), and
    their sets share a code (NULL's included).

    Pairs are found by sort and sweep on the most selective QI (the pairs whose ranges meet
    there, or that share a code), then tested on every QI: the cost follows the pairs that
    could overlap, not the square of the groups."""
    index = np.asarray(index, dtype=np.int64)
    tests = _box_tests(index, n_groups, qi_codes, ranged)
    kern = _kernels(index.size)
    labels = np.arange(n_groups, dtype=np.int64)
    found = False
    for a, b in (_meeting_pairs(tests, n_groups) if kern is None else
                 _meeting_pairs_compiled(kern, _compiled_box_tests(tests, n_groups))):
        found = True
        labels = _smallest_roots(labels, a, b)
    return labels if found else None


def _box_tests(index: np.ndarray, n_groups: int, qi_codes: np.ndarray, ranged: np.ndarray) -> list:
    """Per QI, each group's released box side: ("range", low, high, any NULL) or ("set", packed
    membership, held (group * width + code), width, codes of the rows)."""
    tests = []
    for d in range(qi_codes.shape[1]):
        col = np.asarray(qi_codes[:, d], dtype=np.int64)
        if ranged[d]:
            low, high, valued = _group_ranges(index, n_groups, col)
            # a NULL meets every range: with one in the table, ranges always meet there
            tests.append(("range", low, high, bool((~valued).any())))
        else:
            code = _set_codes(col)
            width = int(code.max()) + 1 if code.size else 1
            member = np.zeros((n_groups, width), dtype=bool)
            member[index, code] = True
            # (group * width + code) of each code a group holds
            held = np.flatnonzero(member.ravel())
            tests.append(("set", np.packbits(member, axis=1), held, width, code))
    return tests


def _set_codes(col: np.ndarray) -> np.ndarray:
    """Each row's rank among a set QI's distinct codes (:func:`_value_codes`): ``col`` itself,
    no copy, when its codes are already 0 to w - 1, every one held (as the run's encoding
    gives them)."""
    if col.size and int(col.min()) >= 0 and int(col.max()) < 2 * col.size and \
            np.bincount(col).all():
        return col
    return _value_codes(col)[0]


def _meeting_pairs(tests, n_groups: int):
    """Chunks (a, b) of the pairs of groups whose boxes meet (:func:`overlapping_groups`)."""
    for a, b in _candidate_pairs(tests, n_groups):
        check_interrupts()
        meet = np.ones(a.size, dtype=bool)
        for test in tests:
            if test[0] == "range":
                _, low, high, null = test
                if not null:
                    meet &= (low[a] <= high[b]) & (low[b] <= high[a])
            else:
                packed = test[1]
                meet &= (packed[a] & packed[b]).any(axis=1)
        if meet.any():
            yield a[meet], b[meet]


#: pairs of the tree's parts walked per kernel call at most (interrupts are checked between
#: calls)
PAIRS_WALKED = 1 << 18


def _compiled_box_tests(tests, n_groups: int) -> dict:
    """:func:`_box_tests` as the compiled kernels read them: the spans they are indexed by
    (ranges without NULLs, each set's smallest and largest code), ranges' ends (``low``/``high``
    of those without NULLs, ``all_low``/``all_high`` of every range) and sets' bit words
    (code c: bit c % 64 of word c // 64 from the set's offset)."""
    spans, low, high, all_low, all_high, words = [], [], [], [], [], []
    for test in tests:
        if test[0] == "range":
            all_low.append(test[1])
            all_high.append(test[2])
            if not test[3]:
                spans.append((test[1], test[2]))
                low.append(test[1])
                high.append(test[2])
        else:
            packed, held, width = test[1], test[2], test[3]
            groups, codes = held // width, held % width
            first = np.full(n_groups, np.iinfo(np.int64).max)
            last = np.full(n_groups, -1)
            group_min_max(groups, codes, first, last)
            spans.append((first, last))
            member = np.unpackbits(packed, axis=1, count=width)
            bits = np.packbits(member, axis=1, bitorder="little")
            bits = np.pad(bits, ((0, 0), (0, -bits.shape[1] % 8)))
            words.append(np.ascontiguousarray(bits).view("<u8").astype(np.uint64))
    if not spans:
        # nothing to index by: every group in one span
        spans.append((np.zeros(n_groups), np.zeros(n_groups)))

    def columns(parts, dtype):
        return np.ascontiguousarray(np.array(parts, dtype=dtype).reshape(len(parts), n_groups).T)
    span_low = columns([s[0] for s in spans], np.float64)
    span_high = columns([s[1] for s in spans], np.float64)
    return {"span_low": span_low, "span_high": span_high,
            "index": _kernels().box_tree(span_low, span_high),
            "low": columns(low, np.int64), "high": columns(high, np.int64),
            "all_low": columns(all_low, np.int64), "all_high": columns(all_high, np.int64),
            "words": np.ascontiguousarray(np.hstack([np.zeros((n_groups, 0), dtype=np.uint64)] + words)),
            "offsets": np.cumsum([0] + [w.shape[1] for w in words]).astype(np.int64)}


def _meeting_pairs_compiled(kern, boxes: dict):
    """:func:`_meeting_pairs` on the compiled kernel: each pair once, a < b (a walk of pairs of
    the tree's parts, kern.meeting_pairs_walk)."""
    n_groups = boxes["span_low"].shape[0]
    # room for the pairs of two leaves at least: the walk writes them at once
    size = max(PAIR_CHUNK, 2 * n_groups, kern.TREE_LEAF ** 2)
    out_a, out_b = np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64)
    # pending pairs of parts: at most 3 a level of the walk, two levels a level of the tree
    depth = 2 * (int(np.log2(max(n_groups, 1))) + 2)
    stack_a, stack_b = np.zeros(3 * depth + 1, dtype=np.int64), np.zeros(3 * depth + 1, dtype=np.int64)
    top = 1
    while top:
        check_interrupts()
        count, top = kern.meeting_pairs_walk(
            stack_a, stack_b, top, PAIRS_WALKED, boxes["span_low"], boxes["span_high"],
            *boxes["index"], boxes["low"], boxes["high"], boxes["words"], boxes["offsets"],
            out_a, out_b)
        if count:
            yield out_a[:count].copy(), out_b[:count].copy()


def _people_link(kern, index, n_groups, qi_codes, tests, boxes):
    """``link(a, b)``: per pair of groups, whether a row of one lies in the other's box
    (:func:`people_linked_groups`), on the compiled kernel."""
    order = stable_order(index)
    # where each group's rows start in ``order`` (index[order] is sorted): by counting
    start = np.zeros(n_groups + 1, dtype=np.int64)
    np.cumsum(np.bincount(index, minlength=n_groups), out=start[1:])
    if all(test[0] == "range" or np.may_share_memory(test[4], qi_codes) for test in tests):
        # every set QI's codes are the table's own (:func:`_set_codes`): no copy of the rows
        codes = np.ascontiguousarray(qi_codes, dtype=np.int64)
    else:
        codes = np.ascontiguousarray(np.column_stack([
            np.asarray(qi_codes[:, d], dtype=np.int64) if test[0] == "range" else test[4]
            for d, test in enumerate(tests)]) if tests else np.zeros((index.size, 0), dtype=np.int64))
    is_range = np.array([test[0] == "range" for test in tests], dtype=bool)
    ranges, sets = np.flatnonzero(is_range), np.flatnonzero(~is_range)

    def link(a, b):
        linked = np.zeros(a.size, dtype=bool)
        kern.people_link(a, b, order, start, codes, ranges, boxes["all_low"], boxes["all_high"],
                         boxes["words"], boxes["offsets"], sets, linked)
        return linked
    return link


def people_linked_groups(index: np.ndarray, n_groups: int, qi_codes: np.ndarray,
                         ranged: np.ndarray) -> np.ndarray | None:
    """The unions of groups linked by people: a row (held back or not) whose QIs lie in the
    boxes of other groups than its own links them all, as an analyst who knows that person
    cannot tell in which class they are; transitively (each group index's union, by its
    smallest index), or None when nobody lies in two boxes. Finer than
    :func:`overlapping_groups`: boxes that meet where nobody lies are not linked."""
    index = np.asarray(index, dtype=np.int64)
    kern = _kernels(index.size)
    if kern is not None:
        return box_unions(index, n_groups, qi_codes, ranged)[1]
    tests = _box_tests(index, n_groups, qi_codes, ranged)
    order = np.argsort(index, kind="stable")
    start = np.searchsorted(index[order], np.arange(n_groups + 1))
    labels = np.arange(n_groups, dtype=np.int64)
    found = False
    for a, b in _meeting_pairs(tests, n_groups):
        # the rows of b tested against a's box, then the rows of a against b's
        box = np.concatenate([a, b])
        own = np.concatenate([b, a])
        sizes = start[own + 1] - start[own]
        pair = np.repeat(np.arange(box.size), sizes)
        offset = np.arange(pair.size) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        rows = order[start[own][pair] + offset]
        inside = np.ones(rows.size, dtype=bool)
        g = box[pair]
        for d, test in enumerate(tests):
            if test[0] == "range":
                _, low, high, _ = test
                x = np.asarray(qi_codes[rows, d], dtype=np.int64)
                inside &= (x < 0) | ((low[g] <= x) & (x <= high[g]))
            else:
                packed, code = test[1], test[4][rows]
                inside &= (packed[g, code >> 3] >> (7 - (code & 7)) & 1).astype(bool)
        if inside.any():
            found = True
            labels = _smallest_roots(labels, g[inside], index[rows[inside]])
    return labels if found else None


#: candidate pairs tested at once
PAIR_CHUNK = 1 << 20
#: groups at most in a part of the space whose pairs are all listed
LEAF = 32


def _candidate_pairs(tests, n_groups: int):
    """Chunks (a, b) of group pairs, a < b, that hold every overlapping pair (and few others).

    The groups are cut recursively, like a k-d tree, on a QI at the code that the fewest boxes
    straddle among those that leave at least a quarter of them on each side (a set QI by its
    smallest and largest code held); a box that straddles the cut goes to both sides, so two
    boxes that overlap, sharing a point (a code), meet in some part; then the pairs of each
    part are listed."""
    spans = []
    for test in tests:
        if test[0] == "range" and not test[3]:
            spans.append((test[1], test[2]))
        elif test[0] == "set":
            held, width = test[2], test[3]
            groups, codes = held // width, held % width
            low = np.full(n_groups, np.iinfo(np.int64).max)
            high = np.full(n_groups, -1)
            np.minimum.at(low, groups, codes)
            np.maximum.at(high, groups, codes)
            spans.append((low, high))
    pending, listed = [np.arange(n_groups)], []
    size = 0
    while pending:
        part = pending.pop()
        cut = _best_cut(part, spans) if part.size > LEAF else None
        if cut is not None:
            d, x = cut
            low, high = spans[d]
            pending.append(part[low[part] < x])
            pending.append(part[high[part] >= x])
            continue
        a, b = np.nonzero(np.arange(part.size)[None, :] < np.arange(part.size)[:, None])
        listed.append((part[b], part[a]))
        size += a.size
        if size >= PAIR_CHUNK:
            yield _listed_pairs(listed)
            listed, size = [], 0
    if listed:
        yield _listed_pairs(listed)


def _best_cut(part, spans):
    """(QI, code) cutting ``part`` with the fewest straddling boxes, at least a quarter of the
    part wholly on each side; None if no cut leaves fewer than the part on each side."""
    best = None
    quarter = part.size // 4
    for d, (low, high) in enumerate(spans):
        lows, highs = np.sort(low[part]), np.sort(high[part])
        xs = lows[quarter:part.size - quarter + 1]
        if xs.size == 0:
            continue
        below = np.searchsorted(highs, xs, side="left")      # wholly left: high < x
        above = part.size - np.searchsorted(lows, xs, side="left")  # wholly right: low >= x
        ok = (below >= quarter) & (above >= quarter) & (below > 0) & (above > 0)
        if not ok.any():
            continue
        straddle = np.where(ok, part.size - below - above, part.size)
        i = int(np.argmin(straddle))
        if best is None or straddle[i] < best[0]:
            best = (int(straddle[i]), d, xs[i])
    if best is None or best[0] >= part.size // 2:
        return None
    return best[1], best[2]


def _listed_pairs(listed):
    """The pairs of the parts listed (a pair in several parts comes more than once)."""
    return np.concatenate([p[0] for p in listed]), np.concatenate([p[1] for p in listed])


def _smallest_roots(labels: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``labels`` (each group's union, by its smallest index) with the pairs (a, b) joined: the
    roots of each pair hooked onto the smaller, then paths shortened, until every pair agrees."""
    labels = labels.copy()
    while True:
        ra, rb = labels[a], labels[b]
        differ = ra != rb
        if not differ.any():
            return labels
        ra, rb = ra[differ], rb[differ]
        lowest = np.minimum(ra, rb)
        np.minimum.at(labels, ra, lowest)
        np.minimum.at(labels, rb, lowest)
        while True:
            jumped = labels[labels]
            if np.array_equal(jumped, labels):
                break
            labels = jumped


def _keeps(current: np.ndarray, option: np.ndarray) -> np.ndarray:
    """Per group: ``option`` holds every value its current rows hold."""
    return ~((current > 0) & (option == 0)).any(axis=1)


def _counts(index, codes, n_groups, n_values) -> np.ndarray:
    return np.bincount(index * n_values + codes, minlength=n_groups * n_values).reshape(n_groups, n_values)


def _merge_nearest(index, n_groups, bad, points, ranged=None, missing=None,
                   held=None, within=None, acceptable=None, point_codes=None) -> np.ndarray:
    """Each bad group merged with a near group (of its own union, ``within``: each group's, if
    given), among those holding a value it misses (``missing``, ``held``: (G, V) bool) if any
    does, the one whose merged box overlaps the fewest
    others (core.republication.GroupBoxes); the smallest index is the merged group's."""
    centroids = _centroids(index, n_groups, points)
    boxes = GroupBoxes(index, n_groups, points, ranged, point_codes)
    sets = SmallestRootSets(n_groups)
    kern = _kernels(index.size) if points.shape[1] < 8 and np.isfinite(points).all() else None
    if kern is not None:
        if missing is None:
            missing, held = np.zeros((n_groups, 1), dtype=bool), np.zeros((n_groups, 1), dtype=bool)
        for start in range(0, bad.size, MERGE_CHUNK):
            check_interrupts()
            chunk = bad[start:start + MERGE_CHUNK]
            ranked, n_near = boxes.ranked_partners(kern, chunk, centroids, missing[chunk], held,
                                                   within, searched=bad.size)
            for g, row, n in zip(chunk.tolist(), ranked.tolist(), n_near.tolist()):
                sets.union(g, first_acceptable(row, n, None if acceptable is None else
                                               (lambda c, g=g: acceptable(g, c))))
        return sets.roots()
    for g in bad.tolist():
        distance = ((centroids - centroids[g]) ** 2).sum(axis=1)
        distance[g] = np.inf
        if within is not None and ((within == within[g]).sum() > 1):
            distance = np.where(within == within[g], distance, np.inf)
        if missing is not None and missing[g].any():
            helps = (held & missing[g]).any(axis=1)
            helps[g] = False
            if helps.any():
                distance = np.where(helps, distance, np.inf)
        sets.union(g, boxes.merge_partner(
            g, distance, None if acceptable is None else (lambda c, g=g: acceptable(g, c))))
    return sets.roots()
