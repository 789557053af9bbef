"""Break-Merge: split a k-anonymous release into a QI table and one sensitive table per attribute.

Nadimpalli & Vatsavayi, Algorithm 2. From a partition of the source rows into QI
groups (e.g. ``Mondrian(...).labels_``), Break-Merge publishes

* the **QIT**: each row's generalized QIs plus a group id ``gid`` -- no sensitive value;
* one **ST per sensitive attribute**: rows ``(gid, value, count)``, the histogram of the attribute
  inside the group.

An analyst re-joins them on ``gid`` ("merge"); inside a group the link between a row's QIs and its
sensitive values, and between its different sensitive values, is gone.

l-diversity by merging (our rule; the paper only says the STs are l-diverse)
---------------------------------------------------------------------------
Distinct l-diversity is required in every group of every ST: at least ``l`` distinct values that
are not NULL (a NULL is no value an attacker is unsure between; the ST still lists it). It is
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

from itertools import combinations

import numpy as np
import pandas as pd

from plpy_anon.core.disjoint_sets import SmallestRootSets
from plpy_anon.core.errors import InsufficientData, InvalidParameter, UnsupportedType
from plpy_anon.core.k_anonymity import check_k

__all__ = [
    "BreakMerge",
    "antecedent_sizes",
    "check_categories",
    "check_diversity_feasible",
    "class_detail_kept",
    "merge_for_diversity",
    "merge_tables",
    "merge_until_no_rule",
    "qi_to_sa_rules",
    "relabel_in_order",
    "released_rules",
    "validate_attribute_roles",
]

#: rules a reader can count: antecedents of up to this many released QI values, by default
MAX_ANTECEDENTS = 2
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

    ``distinct`` maps column -> number of distinct values (NULL counted as one: it takes rows of
    the sensitive table). Shared by
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
    """Refuse ``l`` above the number of distinct values (not NULL) some sensitive column has in
    the whole table: merging groups can never reach it."""
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

    def __init__(self, l=None, k=None, max_categories=MAX_CATEGORIES, max_rule_probability=None,
                 max_antecedents=MAX_ANTECEDENTS, min_support=None):
        self.l = l
        self.k = k
        self.max_categories = max_categories
        self.max_rule_probability = max_rule_probability
        self.max_antecedents = max_antecedents
        self.min_support = min_support

    def fit(self, labels, sensitive, quasi_identifiers=None):
        """Break the rows labelled by ``labels`` (one per row) with the columns of ``sensitive``.

        ``quasi_identifiers`` (DataFrame, one row per row, the row's *released* QI values, equal
        for all rows of a label) is needed with ``max_rule_probability``: gids are then merged
        until the merge view shows no QI -> SA rule at that probability (``rule_check_`` says
        what was found before, what remains, and how many gids were merged for it)."""
        self._validate_params()
        labels = self._validate_input(labels, sensitive)
        label_values, group = np.unique(labels, return_inverse=True)
        group = group.ravel()
        sizes = np.bincount(group)
        self._check_k(sizes, label_values)
        codes, values = _encode_sensitive(sensitive, self.max_categories)
        new_gid = self._merge(group, codes, values, label_values.size)
        self.rule_check_ = None
        if self.max_rule_probability is not None:
            if quasi_identifiers is None or len(quasi_identifiers) != labels.size:
                raise InvalidParameter(
                    "max_rule_probability needs the released QI values of every row",
                    hint="pass quasi_identifiers= (one row per row, as released)",
                )
            first = np.unique(group, return_index=True)[1]
            group_qis = quasi_identifiers.iloc[first].reset_index(drop=True)
            histograms = {c: _group_value_counts(group, codes[c], label_values.size,
                                                 len(values[c])) for c in values}
            min_support = self.min_support if self.min_support is not None else (self.k or 1)
            new_gid, self.rule_check_ = merge_until_no_rule(
                group_qis, sizes, new_gid, histograms, values, self.max_rule_probability,
                max_antecedents=self.max_antecedents, min_support=min_support)
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
        alpha = self.max_rule_probability
        if alpha is not None and not (isinstance(alpha, (int, float)) and 0 < alpha < 1):
            raise InvalidParameter(
                f"max_rule_probability must be in (0, 1), got {alpha!r}",
                hint="e.g. max_rule_probability => 0.9 (NULL: no rule check)",
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
        if self.k is None or check_k(self.k) <= sizes.min():
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
        known = {c: ~np.asarray(pd.isna(v)) for c, v in values.items()}    # NULL is no value
        check_diversity_feasible({c: int(k.sum()) for c, k in known.items()}, self.l)
        presence = [
            (_group_value_counts(group, codes[c], n_groups, len(values[c])) > 0)[:, known[c]]
            for c in values
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


# ---------------------------------------------------------------------------- QI -> SA rules
#
# l-diversity does not stop a reader from counting "age = [19,20) -> income = <=50K (0.997)" in
# the released tables: every group of young people has both incomes but almost only <=50K.
# ``max_rule_probability`` (alpha) closes that for every rule a reader can count, not only a
# learned network's edges (Adult, k = 5, l = 2: a network-based check published 427 / 190 / 995
# rules >= 0.9 of 1 to 3 released QI values): every antecedent of up to ``max_antecedents``
# released QI values, and the whole QI class (all QIs: what an attacker who knows a target's QI
# group reads, the breach Break-Merge bounds), with support >= min_support (the release's k) is
# counted against every sensitive value (:func:`released_rules`), and groups are merged until none
# reaches alpha. An antecedent of any size is a union of whole classes, and its share of a value is
# the classes' shares averaged (weighted by their rows whose value is known), so no antecedent
# reaches alpha once no class does: sizes 1..all QIs are then bounded. The db layer counts again,
# in SQL, on the released relations after the build and every refresh.


def antecedent_sizes(n_qis, max_antecedents=MAX_ANTECEDENTS):
    """The antecedent sizes the rule check counts: 1..max_antecedents and the whole class."""
    sizes = list(range(1, min(max_antecedents, n_qis) + 1))
    return sizes + [n_qis] if n_qis > max_antecedents else sizes


def qi_to_sa_rules(rules, quasi_identifiers, sensitive):
    """The rules whose antecedent holds a QI and whose consequent is a sensitive attribute."""
    if rules.empty:
        return rules
    qis, sens = set(quasi_identifiers), set(sensitive)
    has_qi = rules["parents"].map(lambda ps: any(p in qis for p in ps))
    return rules[has_qi & rules["child"].isin(sens)].reset_index(drop=True)


def describe_rule(rule):
    """``age=[19,20), sex=M -> income=<=50K (p = 0.997, 812 rows)``."""
    lhs = ", ".join(f"{p}={v}" for p, v in zip(rule["parents"], rule["parent_values"]))
    return (f"{lhs} -> {rule['child']}={rule['child_value']} "
            f"(p = {rule['probability']:.3f}, {rule['parent_support']:.0f} rows)")


def rule_record(rule):
    """A rule as JSON-able dict (what the catalog stores)."""
    return {
        "parents": list(rule["parents"]),
        "parent_values": [None if pd.isna(v) else str(v) for v in rule["parent_values"]],
        "child": rule["child"],
        "child_value": None if pd.isna(rule["child_value"]) else str(rule["child_value"]),
        "probability": round(float(rule["probability"]), 6),
        "support": round(float(rule["support"]), 3),
        "parent_support": round(float(rule["parent_support"]), 3),
    }



def released_rules(group_qis, group_sizes, gid, histograms, values, *, threshold,
                   max_antecedents=MAX_ANTECEDENTS, min_support=1):
    """Every rule ``(QI values) -> (sensitive = value)`` a reader can count in the released QIT
    and STs, whose probability reaches ``threshold``, strongest first (``qi_to_sa_rules``'
    format). The antecedent is 1..``max_antecedents`` released QI values or all of them (the
    whole class: :func:`antecedent_sizes`); its support, the QIT
    rows holding them (at least ``min_support``); its probability, the share of the consequent
    among those rows whose value is known (not NULL), each row standing for its gid's ST shares
    (what the merge view weighs): a NULL is no value, so 90 % NULLs do not dilute a rule that
    holds for everyone whose value is recorded. ``group_qis``: one row per
    group, its released QI values (hashable); ``group_sizes``: rows per group; ``gid``: merged gid
    per group; ``histograms``: attribute -> ``(n_groups, n_values)`` counts; ``values``:
    attribute -> Index of values.

    Exhaustive, unlike a learned network's edges: ``anon.detect_dependencies`` reports the rules
    of one network; this counts every antecedent, which is what a reader with the tables does."""
    gid = np.asarray(gid, dtype=np.int64)
    sizes = np.asarray(group_sizes, dtype=np.float64)
    n_gids = int(gid.max()) + 1
    qis = list(group_qis.columns)
    keys = group_qis.reset_index(drop=True)
    records = []
    for attribute, hist in histograms.items():
        gid_hist = np.zeros((n_gids, hist.shape[1]))
        np.add.at(gid_hist, gid, hist)
        known = ~np.asarray(pd.isna(values[attribute]))
        share = gid_hist[:, known] / gid_hist.sum(axis=1, keepdims=True)
        expected = pd.DataFrame(sizes[:, None] * share[gid])      # rows of each value per group
        names = values[attribute][known]
        expected["_known"] = expected.sum(axis=1)                 # rows with a known value
        expected["_support"] = sizes
        for r in antecedent_sizes(len(qis), max_antecedents):
            for columns in combinations(qis, r):
                totals = pd.concat([keys[list(columns)], expected], axis=1).groupby(
                    list(columns), dropna=False, sort=False).sum()
                support = totals.pop("_support").to_numpy()
                known_rows = totals.pop("_known").to_numpy()
                with np.errstate(invalid="ignore", divide="ignore"):
                    probability = totals.to_numpy() / known_rows[:, None]
                probability = np.nan_to_num(probability, nan=0.0)
                hits = np.argwhere((support[:, None] >= min_support) & (probability >= threshold))
                antecedents = totals.index.to_flat_index()
                for i, j in hits:
                    antecedent = antecedents[i] if r > 1 else (antecedents[i],)
                    records.append({"parents": list(columns), "parent_values": list(antecedent),
                                    "child": attribute, "child_value": names[j],
                                    "probability": float(probability[i, j]),
                                    "support": float(probability[i, j] * known_rows[i]),
                                    "parent_support": float(support[i])})
    columns = ["parents", "parent_values", "child", "child_value", "probability", "support",
               "parent_support"]
    if not records:
        return pd.DataFrame(columns=columns)
    return (pd.DataFrame(records, columns=columns)
            .sort_values(["probability", "parent_support"], ascending=False, kind="stable")
            .reset_index(drop=True))



def class_detail_kept(histograms, values, gid):
    """Per sensitive attribute: the share of the classes' own sensitive detail the STs keep.

    A class's detail is how far its distribution of known values lies from the whole table's
    (total variation distance), weighted by its rows with a known value; the released tables show
    each class its gid's distribution. 1 = every class's own shares (one gid per class), 0 = the
    table's shares everywhere (one gid). Merging averages distributions, so the share is in
    [0, 1]. ``histograms``: attribute -> ``(n_groups, n_values)`` counts per class; ``gid``:
    the gid of each class."""
    gid = np.asarray(gid, dtype=np.int64)
    kept = {}
    for attribute, hist in histograms.items():
        counts = hist[:, ~np.asarray(pd.isna(values[attribute]))].astype(float)
        rows = counts.sum(axis=1)
        if rows.sum() == 0:
            kept[attribute] = 1.0
            continue
        table = counts.sum(axis=0) / rows.sum()
        gid_counts = np.zeros((int(gid.max()) + 1, counts.shape[1]))
        np.add.at(gid_counts, gid, counts)
        with np.errstate(invalid="ignore", divide="ignore"):
            own = np.nan_to_num(counts / rows[:, None])
            shown = np.nan_to_num(gid_counts / gid_counts.sum(axis=1, keepdims=True))[gid]

        def detail(shares, rows=rows, table=table):
            return float(rows @ (0.5 * np.abs(shares - table).sum(axis=1)))

        whole = detail(own)
        kept[attribute] = round(detail(shown) / whole, 6) if whole > 0 else 1.0
    return kept


def check_base_rates(histograms, values, alpha):
    """Refuse alpha at or below a sensitive value's share of the table's known values: merging
    every group into one leaves exactly that share as P(value | any QIs), so no merge can get
    below alpha. A NULL is no value: neither counted nor a consequent."""
    worst = None
    for attribute, hist in histograms.items():
        known = ~np.asarray(pd.isna(values[attribute]))
        if not known.any():
            continue
        totals = np.where(known, hist.sum(axis=0), 0)
        j = int(np.argmax(totals))
        share = totals[j] / totals.sum()
        if worst is None or share > worst[2]:
            worst = (attribute, values[attribute][j], share)
    if worst is not None and worst[2] >= alpha:
        attribute, value, share = worst
        raise InsufficientData(
            f"max_rule_probability = {alpha} cannot be honoured: {share:.3f} of the rows whose "
            f"{attribute} is known have {attribute} = {value!r}, so even one merged group lets anyone infer "
            f"(any QIs) -> {attribute}={value} with p = {share:.3f}",
            hint=f"use max_rule_probability above {share:.3f}, or drop {attribute!r} from sensitive "
                 "(a value that common is no secret of a QI group)",
        )


def _merge_offending(gid, rules, group_qis, histograms, values):
    """One round: every gid holding a group that matches a rule's QI antecedent is merged with a
    gid that does not, the ones richest in the rule's consequent paired with the poorest (so the
    merged share falls fastest); left-over offenders are paired with each other. Every round with
    a rule merges at least two gids, so the loop ends (one gid is the limit)."""
    n_gids = int(gid.max()) + 1
    sets = SmallestRootSets(n_gids)
    find, union = sets.find, sets.union
    used = set()
    for rule in rules.to_dict("records"):
        match = np.ones(gid.size, dtype=bool)
        for p, v in zip(rule["parents"], rule["parent_values"]):
            if p in group_qis.columns:
                match &= (group_qis[p].to_numpy() == v)
        offending = np.unique(gid[match])
        offending = np.array([g for g in offending if find(g) not in used], dtype=np.int64)
        if offending.size == 0:
            continue
        hist = histograms[rule["child"]]
        column = values[rule["child"]].get_loc(rule["child_value"])
        gid_count = np.bincount(gid, weights=hist[:, column], minlength=n_gids)
        gid_sizes = np.bincount(gid, weights=hist.sum(axis=1), minlength=n_gids)
        share = gid_count / np.maximum(gid_sizes, 1)
        others = np.setdiff1d(np.arange(n_gids), offending)
        others = np.array([g for g in others if find(g) not in used], dtype=np.int64)
        rich = offending[np.argsort(-share[offending], kind="stable")]
        poor = others[np.argsort(share[others], kind="stable")]
        pairs = min(rich.size, poor.size)
        for a, b in zip(rich[:pairs], poor[:pairs]):
            union(int(a), int(b))
        rest = rich[pairs:]
        for a, b in zip(rest[0::2], rest[1::2]):
            union(int(a), int(b))
        if rest.size % 2 == 1:  # odd one out: with the group it is closest to in label order
            a = int(rest[-1])
            union(a, a - 1 if a > 0 else a + 1)
        used.update(find(int(g)) for g in rich)
    _, renumbered = np.unique(sets.roots(), return_inverse=True)
    return renumbered.ravel()[gid]


def merge_until_no_rule(group_qis, group_sizes, gid, histograms, values, alpha, *,
                        max_antecedents=MAX_ANTECEDENTS, min_support=1, report=10):
    """Merge gids until no QI -> SA rule a reader can count in the released tables
    (:func:`released_rules`) reaches ``alpha``; returns ``(gid, info)``. Refuses
    (:class:`InsufficientData`, SQLSTATE 22000) when a sensitive value's global share is at least
    alpha: with every group in one gid each antecedent shows exactly that share."""
    check_base_rates(histograms, values, alpha)
    gid = np.asarray(gid, dtype=np.int64)
    detail_before = class_detail_kept(histograms, values, gid)
    n_start, rounds, before = int(gid.max()) + 1, 0, None
    while True:
        rules = released_rules(group_qis, group_sizes, gid, histograms, values,
                               threshold=alpha, max_antecedents=max_antecedents,
                               min_support=min_support)
        if before is None:
            before = rules
        if rules.empty:
            break
        if gid.max() == 0:
            raise InsufficientData(
                f"max_rule_probability = {alpha} cannot be honoured: with every group merged "
                f"into one, {len(rules)} QI -> SA rule(s) still reach it, the strongest "
                f"{describe_rule(rules.iloc[0])}",
                hint=f"use max_rule_probability above {rules['probability'].max():.3f}, or "
                     "drop that attribute from sensitive",
            )
        gid = _merge_offending(gid, rules, group_qis, histograms, values)
        rounds += 1
    residual = released_rules(group_qis, group_sizes, gid, histograms, values, threshold=0.0,
                              max_antecedents=max_antecedents, min_support=min_support)
    info = {
        "max_rule_probability": alpha,
        "max_antecedents": max_antecedents,
        "antecedent_sizes": antecedent_sizes(len(group_qis.columns), max_antecedents),
        "min_support": min_support,
        "rules_before": len(before),
        "strongest_before": [rule_record(r) for r in before.head(report).to_dict("records")],
        "rounds": rounds,
        "gids_merged": int(n_start - (int(gid.max()) + 1)),
        "residual_rules": [rule_record(r) for r in residual.head(report).to_dict("records")],
        "max_residual_probability": (
            round(float(residual["probability"].max()), 6) if len(residual) else None),
        # the utility cost in the analyst's terms, beside the gid sizes
        "class_detail_kept_before": detail_before,
        "class_detail_kept": class_detail_kept(histograms, values, gid),
    }
    return gid, info
