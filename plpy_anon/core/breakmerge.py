"""Break-Merge: split a k-anonymous release into a QI table and one sensitive table per attribute.

Paper 003 (Nadimpalli & Vatsavayi, Algorithm 2). From a partition of the source rows into QI
groups (e.g. ``Mondrian(...).labels_``), Break-Merge publishes

* the **QIT**: each row's generalized QIs plus a group id ``gid`` -- no sensitive value;
* one **ST per sensitive attribute**: rows ``(gid, value, count)``, the histogram of the attribute
  inside the group.

An analyst re-joins them on ``gid`` ("merge"); inside a group the link between a row's QIs and its
sensitive values, and between its different sensitive values, is gone.

l-diversity by merging (our rule; the paper only says the STs are l-diverse)
---------------------------------------------------------------------------
Distinct l-diversity is required in every group of every ST: at least ``l`` distinct values. It is
*monotone under union* (the union of two groups has at least the distinct values of each), so
merging groups can only repair a violation, never create one. The rule:

1. Groups that are l-diverse in every ST keep their own gid.
2. The violating groups are visited in increasing label order and pooled into a bucket until the
   bucket is l-diverse in every ST; the bucket becomes one merged gid. Label order is the caller's
   locality order: number the groups by their generalized QI values (the db layer does) so that
   consecutive labels are neighbours in QI space.
3. A bucket that reaches ``l`` groups without becoming diverse is "stuck" (its groups lack the
   same values, e.g. a run of young people all earning <=50K): each stuck bucket joins a diverse
   host -- a diverse group or diverse bucket -- matched monotonically in label order with the
   load spread evenly over the hosts, so a run of stuck buckets does not pile onto one group.

Violators are merged with each other first because each one then repairs the other -- fewer,
smaller merged groups than merging each into a diverse neighbour. Merging does not touch the QIT's
generalized QIs (each row keeps the generalization of its own, k-anonymous, QI group), so the QIT
stays k-anonymous with unchanged precision; only the QI -> sensitive link gets coarser, which is
what the release is for. Feasibility is checked up front: if an attribute has fewer than ``l``
distinct values over the whole table no merge can help and :class:`InsufficientData` is raised.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from plpy_anon.core.errors import InsufficientData, InvalidParameter, UnsupportedType

__all__ = [
    "BreakMerge",
    "check_categories",
    "check_diversity_feasible",
    "merge_for_diversity",
    "merge_tables",
    "relabel_in_order",
    "validate_attribute_roles",
]

#: default cap on distinct values of a sensitive attribute (beyond it: bucket the column first)
MAX_CATEGORIES = 64


def validate_attribute_roles(quasi_identifiers, sensitive):
    """Refuse a column listed both as QI and as sensitive, and empty or duplicate lists."""
    if not sensitive:
        raise InvalidParameter(
            "no sensitive attribute given",
            hint="pass sensitive => ARRAY['col', ...] with the columns to split into STs",
        )
    for role, names in (("sensitive", sensitive), ("quasi-identifier", quasi_identifiers)):
        duplicates = sorted({n for n in names if list(names).count(n) > 1})
        if duplicates:
            raise InvalidParameter(
                f"{role} column(s) listed twice: {duplicates}", hint="list each column once"
            )
    both = sorted(set(quasi_identifiers) & set(sensitive))
    if both:
        raise InvalidParameter(
            f"column(s) {both} are both quasi-identifiers and sensitive attributes",
            hint="a QIT must carry no sensitive data: remove them from one of the two lists",
        )


def merge_for_diversity(presence, l):
    """Map each group to a merged group so that every merged group is l-diverse everywhere.

    ``presence`` is a list, one entry per attribute, of ``(n_groups, n_values)`` boolean arrays
    (value present in group). Returns ``new_gid``: for each group, the 0-based id of its merged
    group, numbered by the smallest group it contains. The rule is described in the module doc.
    """
    n_groups = presence[0].shape[0]
    distinct = np.stack([p.sum(axis=1) for p in presence], axis=1)
    diverse = (distinct >= l).all(axis=1)
    owner = np.arange(n_groups)
    violators = np.flatnonzero(~diverse)
    if violators.size == 0:
        return owner
    masks = [_bitmasks(p[violators]) for p in presence]
    buckets = _pool_violators(violators.tolist(), masks, l)
    for members, _ in buckets:
        owner[members] = members[0]
    stuck = [members for members, is_diverse in buckets if not is_diverse]
    if stuck:
        hosts = _spread_over_hosts(
            np.array([m[0] for m in stuck]), np.flatnonzero(diverse), buckets
        )
        for members, host in zip(stuck, hosts):
            owner[members] = host
    # Renumber 0..G'-1 in order of each merged group's smallest member.
    _, new_gid = np.unique(owner, return_inverse=True)
    return new_gid


def _bitmasks(present):
    """One Python int per row: bit v set iff value v is present (popcount = distinct values)."""
    if present.shape[1] <= 64:  # one uint64 dot product; .tolist() yields exact Python ints
        bits = np.left_shift(np.uint64(1), np.arange(present.shape[1], dtype=np.uint64))
        return (present.astype(np.uint64) @ bits).tolist()
    return [int("".join("1" if b else "0" for b in row[::-1]), 2) for row in present.tolist()]


def _pool_violators(violators, masks, l):
    """Pool consecutive violators into buckets until each bucket is l-diverse in every attribute.

    A bucket that reaches ``l`` groups without becoming diverse is closed as *stuck*: its groups
    share the same few values (e.g. a run of young people all earning <=50K), so pooling more of
    them would only grow it; stuck buckets are given a diverse host instead. Returns
    ``[(members, is_diverse), ...]``. The loop is over violating *groups* only, with int bit ops.
    """
    n_attributes = len(masks)
    buckets, members, union = [], [], [0] * n_attributes
    for position, group in enumerate(violators):
        members.append(group)
        union = [u | m[position] for u, m in zip(union, masks)]
        is_diverse = all(u.bit_count() >= l for u in union)
        if is_diverse or len(members) >= l:
            buckets.append((members, is_diverse))
            members, union = [], [0] * n_attributes
    if members:
        buckets.append((members, False))
    return buckets


def _spread_over_hosts(stuck_first, diverse_groups, buckets):
    """Host (a diverse group, or a diverse bucket's owner) for every stuck bucket.

    WHY spread: stuck buckets come in runs, and sending a whole run to its nearest host would make
    one huge group. Hosts are matched monotonically in label order (locality) with a capacity of
    ``ceil(n_stuck / n_hosts)`` each: a bucket goes to its nearest host unless that host is behind
    the last one used or full, then to the next one.
    """
    hosts = np.union1d(diverse_groups, [m[0] for m, ok in buckets if ok]).astype(np.int64)
    if hosts.size == 0:
        # No diverse group at all: every group is in a stuck bucket, and merging them all gives
        # the whole table, which the feasibility check guarantees is l-diverse.
        return np.full(stuck_first.size, stuck_first[0])
    capacity = -(-stuck_first.size // hosts.size)
    after = np.clip(np.searchsorted(hosts, stuck_first), 0, hosts.size - 1)
    before = np.maximum(after - 1, 0)
    closer_before = np.abs(hosts[before] - stuck_first) < np.abs(hosts[after] - stuck_first)
    nearest = np.where(closer_before, before, after)
    chosen, pointer, load = np.empty(stuck_first.size, dtype=np.int64), 0, 0
    for j, candidate in enumerate(nearest.tolist()):
        if candidate > pointer:
            pointer, load = candidate, 0
        if load >= capacity and pointer + 1 < hosts.size:
            pointer, load = pointer + 1, 0
        chosen[j], load = hosts[pointer], load + 1
    return chosen


def check_categories(distinct, max_categories):
    """Refuse sensitive columns with more than ``max_categories`` distinct values.

    ``distinct`` maps column -> number of distinct values (NULL counted as one). Shared by
    :class:`BreakMerge` and the db layer, which checks before building anything.
    """
    for column, n_values in distinct.items():
        if n_values > max_categories:
            raise UnsupportedType(
                f"sensitive column {column!r} has {n_values} distinct values, more than "
                f"max_categories={max_categories}; a Break-Merge ST is a per-group histogram of a "
                "categorical attribute",
                hint=f"bucket {column!r} into ranges or categories first (e.g. width_bucket in a "
                "view) or raise max_categories",
            )


def check_diversity_feasible(distinct, l):
    """Refuse ``l`` above the number of distinct values some sensitive column has in the whole
    table: merging groups can never reach it."""
    too_few = {c: n for c, n in distinct.items() if l is not None and n < l}
    if too_few:
        raise InsufficientData(
            f"l={l} is impossible: sensitive column(s) have fewer distinct values than l "
            f"in the whole table: {too_few}",
            hint=f"use l <= {min(too_few.values())} or drop those columns from sensitive",
        )


def _encode_sensitive(sensitive, max_categories):
    """Codes and values per sensitive column; refuses columns with too many distinct values."""
    codes, values = {}, {}
    for column in sensitive.columns:
        col_codes, uniques = pd.factorize(sensitive[column], sort=True, use_na_sentinel=False)
        check_categories({column: uniques.size}, max_categories)
        codes[column], values[column] = col_codes.astype(np.int64), pd.Index(uniques)
    return codes, values


def _group_value_counts(group, codes, n_groups, n_values):
    """Dense ``(n_groups, n_values)`` histogram of one attribute per group (one bincount)."""
    flat = np.bincount(group * n_values + codes, minlength=n_groups * n_values)
    return flat.reshape(n_groups, n_values)


def _sensitive_table(gid, codes, values, n_gids):
    """The ST of one attribute: ``(gid, value, count)`` for every non-zero count, sorted."""
    counts = _group_value_counts(gid, codes, n_gids, len(values))
    rows, cols = np.nonzero(counts)
    return pd.DataFrame({"gid": rows, "value": values[cols], "count": counts[rows, cols]})


class BreakMerge:
    """Break a partitioned table into a QIT group map and one sensitive table per attribute.

    Parameters
    ----------
    l : int or None
        Distinct l-diversity required in every group of every ST (None: no requirement).
    k : int or None
        When given, the input partition is checked to be k-anonymous (every group >= k rows).
    max_categories : int
        Sensitive columns with more distinct values are refused (bucket them first).

    Attributes (after ``fit``)
    --------------------------
    gid_ : int array, the merged group id of every row (the QIT's ``gid`` column).
    group_map_ : DataFrame ``(label, gid)``, the merged group of each input label.
    group_sizes_ : int array, rows per gid (the QIT group sizes).
    sensitive_tables_ : dict attribute -> DataFrame ``(gid, value, count)``.
    n_merged_ : number of input groups that were merged into another group's gid.
    """

    def __init__(self, l=None, k=None, max_categories=MAX_CATEGORIES):
        self.l = l
        self.k = k
        self.max_categories = max_categories

    def fit(self, labels, sensitive):
        """Break the rows labelled by ``labels`` (one per row) with the columns of ``sensitive``."""
        self._validate_params()
        labels = self._validate_input(labels, sensitive)
        label_values, group = np.unique(labels, return_inverse=True)
        group = group.ravel()
        sizes = np.bincount(group)
        self._check_k(sizes, label_values)
        codes, values = _encode_sensitive(sensitive, self.max_categories)
        new_gid = self._merge(group, codes, values, label_values.size)
        self.gid_ = new_gid[group]
        self.group_map_ = pd.DataFrame({"label": label_values, "gid": new_gid})
        self.group_sizes_ = np.bincount(self.gid_)
        n_gids = self.group_sizes_.size
        self.sensitive_tables_ = {
            column: _sensitive_table(self.gid_, codes[column], values[column], n_gids)
            for column in sensitive.columns
        }
        self.n_merged_ = int(label_values.size - n_gids)
        return self

    def _validate_params(self):
        for name in ("l", "k"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, (int, np.integer)) or value < 1):
                raise InvalidParameter(
                    f"{name} must be a positive integer or None, got {value!r}",
                    hint=f"e.g. {name} => 2 (None means no {name} requirement)",
                )
        if not isinstance(self.max_categories, (int, np.integer)) or self.max_categories < 2:
            raise InvalidParameter(
                f"max_categories must be an integer >= 2, got {self.max_categories!r}",
                hint=f"the default is {MAX_CATEGORIES}",
            )

    @staticmethod
    def _validate_input(labels, sensitive):
        if not isinstance(sensitive, pd.DataFrame) or sensitive.shape[1] == 0:
            raise InvalidParameter(
                "sensitive must be a DataFrame with at least one column",
                hint="pass the sensitive columns of the source rows, in the same row order as labels",
            )
        labels = np.asarray(labels)
        if labels.ndim != 1 or labels.size != len(sensitive):
            raise InvalidParameter(
                f"labels must hold one group label per row: got shape {labels.shape} for "
                f"{len(sensitive)} rows",
                hint="pass Mondrian(...).labels_ computed on the same rows",
            )
        if labels.size == 0:
            raise InsufficientData("cannot break an empty table", hint="check the source has rows")
        return labels

    def _check_k(self, sizes, label_values):
        if self.k is None or sizes.min() >= self.k:
            return
        small = label_values[sizes < self.k]
        raise InvalidParameter(
            f"the partition is not {self.k}-anonymous: {small.size} group(s) have fewer than "
            f"{self.k} rows (e.g. label {small.tolist()[0]!r} with {sizes.min()} rows)",
            hint="build the partition with the same k (Mondrian(k=...)) before breaking it",
        )

    def _merge(self, group, codes, values, n_groups):
        if self.l is None or self.l <= 1:
            return np.arange(n_groups)
        check_diversity_feasible({c: len(v) for c, v in values.items()}, self.l)
        presence = [
            _group_value_counts(group, codes[c], n_groups, len(values[c])) > 0 for c in values
        ]
        return merge_for_diversity(presence, self.l)


def merge_tables(qit, sensitive_tables):
    """The analyst's merge: natural join of the QIT and the STs on ``gid``, as weighted rows.

    ``qit`` has the generalized QI columns and ``gid`` (one row per individual);
    ``sensitive_tables`` maps attribute -> DataFrame ``(gid, value, count)``. Each output row is a
    distinct (QIs, gid) combined with one value of every ST, and ``weight`` is the number of
    individuals it stands for when the STs are read as independent inside the group:
    ``rows(QIs, gid) * prod_a count_a(gid, v_a) / |gid|``. The weights of a (QIs, gid) sum to its
    rows, so the weighted table has the release's row count and each ST's histogram per group.
    Use it to learn a Bayesian network from a Break-Merge release (``sample_weight=weight``).
    """
    qi = [c for c in qit.columns if c != "gid"]
    merged = (
        qit.groupby([*qi, "gid"], dropna=False, sort=False).size().rename("weight").reset_index()
    )
    sizes = qit.groupby("gid").size()
    for attribute, table in sensitive_tables.items():
        share = table["count"] / sizes.reindex(table["gid"]).to_numpy()
        st_rows = pd.DataFrame({"gid": table["gid"], attribute: table["value"], "_share": share})
        merged = merged.merge(st_rows, on="gid", how="inner")
        merged["weight"] = merged["weight"] * merged.pop("_share")
    return merged


def relabel_in_order(labels, sort_keys):
    """Renumber groups 0..G-1 in the order of their first row when rows are sorted by
    ``sort_keys`` (DataFrame, first column most significant; e.g. the generalized QIs).

    WHY: :func:`merge_for_diversity` pools violating groups in label order, so labels that follow
    a QI order make merged groups out of neighbours.
    """
    labels = np.asarray(labels)
    keys = [pd.factorize(sort_keys[c], sort=True)[0] for c in reversed(sort_keys.columns)]
    order = np.lexsort(keys) if keys else np.arange(labels.size)
    _, group = np.unique(labels, return_inverse=True)
    rank = np.full(group.max() + 1, -1)
    sorted_groups = group.ravel()[order]
    first = np.unique(sorted_groups, return_index=True)[1]
    rank[sorted_groups[np.sort(first)]] = np.arange(first.size)
    return rank[group.ravel()]
