"""Knowledge-breach probabilities (Nadimpalli & Vatsavayi) for a plain generalized release and a Break-Merge one.

The adversary knows a target's QI group and wants a sensitive value. Two levels of knowledge:

(a) **group only**: ``P(B = v | group) = count(group, v) / |group|``; the breach is the
    probability of the most likely value, ``max_v``. Same formula for both releases (in the plain
    release the group is the QI equivalence class; in Break-Merge, the ST group ``gid``).
(b) **group + one other sensitive value** ``A = a`` of the target:

    * plain release -- rows carry all their sensitive values together, so the adversary restricts
      the group to rows with ``A = a``: ``P(B = v) = count(group, a, v) / count(group, a)``;
    * Break-Merge -- each ST is a separate histogram and nothing links a row of one ST to a row of
      another, so knowing ``a`` tells nothing about ``B``: ``P(B = v) = count(gid, v) / |gid|``.

    For all the other sensitive attributes *jointly* (the paper's Jessica example), Break-Merge
    multiplies the per-attribute shares: ``P(never-married, <=50K) = 2/5 x 4/5 = 8/25``; the plain
    release reads the joint directly: ``count(group, a, combination) / count(group, a)``.

Every individual gets the breach of the most likely value (combination) in its own situation;
a report gives, per (target, known) pair, the max, the mean over individuals and the number of
individuals at or above a threshold.

The attack simulation (:func:`attack_plain`, :func:`attack_break_merge`) plays that adversary on
each target: it reads only what an analyst can read (the plain rows, or the QIT and the STs),
guesses the most likely value and scores the guess against the truth (ties are broken uniformly
at random, so a target's score is ``[truth among the best] / (number of best values)``).
Break-Merge can never score higher on average than the plain release: the plain adversary's guess
is the in-sample optimum among all guesses that depend on (QIs, known value), and the Break-Merge
adversary's guess is one of those.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from plpy_anon.core.errors import InvalidParameter

__all__ = [
    "attack_break_merge",
    "attack_plain",
    "break_merge_breach",
    "combination_probability",
    "plain_breach",
    "summarize",
]

_REPORT_COLUMNS = ["target", "known", "max_probability", "mean_probability", "n_above"]


def summarize(probability, threshold, weight=None):
    """``(max, mean, count >= threshold)`` of per-individual probabilities (optionally weighted
    by the number of individuals each entry stands for)."""
    probability = np.asarray(probability, dtype=float)
    weight = np.ones_like(probability) if weight is None else np.asarray(weight, dtype=float)
    return (
        float(probability.max()),
        float(np.sum(probability * weight) / np.sum(weight)),
        int(np.sum(weight[probability >= threshold - 1e-12])),
    )


def _check_threshold(threshold):
    if threshold is None or not 0 < threshold <= 1:
        raise InvalidParameter(
            f"threshold must be in (0, 1], got {threshold!r}",
            hint="the threshold is a probability, e.g. 0.5",
        )


# --------------------------------------------------------------------------------------------
# Plain release: rows with (group, sensitive values) together


def _max_share(frame, condition, target):
    """Per row: ``max_v count(condition, v) / count(condition)`` with ``v`` ranging over the
    value combinations of the ``target`` columns inside the row's ``condition`` cell."""
    cell_size = frame.groupby(condition + target, dropna=False, sort=False)[condition[0]].transform(
        "size"
    )
    grouped = cell_size.groupby([frame[c] for c in condition], dropna=False, sort=False)
    return (grouped.transform("max") / grouped.transform("size")).to_numpy(dtype=float)


def plain_breach(groups, sensitive, threshold=0.5):
    """Breach report of a plain generalized release.

    ``groups``: the QI group of each row (labels); ``sensitive``: DataFrame of the sensitive
    columns, same rows. Returns a DataFrame with columns ``target`` (attribute, or the
    comma-joined other attributes for the joint case), ``known`` (None for case (a), else the
    attribute the adversary knows), ``max_probability``, ``mean_probability``, ``n_above``.
    """
    _check_threshold(threshold)
    frame = sensitive.reset_index(drop=True).copy()
    frame["__group"] = np.asarray(groups)
    attributes = list(sensitive.columns)
    rows = []
    for target in attributes:
        rows.append((target, None, *summarize(_max_share(frame, ["__group"], [target]), threshold)))
    for known in attributes:
        others = [a for a in attributes if a != known]
        for target in others:
            share = _max_share(frame, ["__group", known], [target])
            rows.append((target, known, *summarize(share, threshold)))
        if len(others) > 1:
            share = _max_share(frame, ["__group", known], others)
            rows.append((",".join(others), known, *summarize(share, threshold)))
    return pd.DataFrame(rows, columns=_REPORT_COLUMNS)


# --------------------------------------------------------------------------------------------
# Break-Merge release: group sizes (from the QIT) and one ST per attribute


def _group_max_share(group_sizes, table):
    """Per gid (index 0..G-1): max_v count(gid, v) / |gid|, read from one ST."""
    largest = table.groupby("gid")["count"].max().reindex(np.arange(group_sizes.size), fill_value=0)
    return largest.to_numpy(dtype=float) / group_sizes


def break_merge_breach(group_sizes, sensitive_tables, threshold=0.5):
    """Breach report of a Break-Merge release, computed from what an analyst reads.

    ``group_sizes``: rows per gid (array indexed by gid 0..G-1, i.e. the QIT group sizes);
    ``sensitive_tables``: dict attribute -> DataFrame ``(gid, value, count)``. Same output as
    :func:`plain_breach`. Known values do not change a single attribute's breach (unlinked STs);
    the joint breach is the product of the per-attribute shares.
    """
    _check_threshold(threshold)
    sizes = np.asarray(group_sizes, dtype=float)
    share = {a: _group_max_share(sizes, t) for a, t in sensitive_tables.items()}
    attributes = list(sensitive_tables)
    rows = [(a, None, *summarize(share[a], threshold, weight=sizes)) for a in attributes]
    for known in attributes:
        others = [a for a in attributes if a != known]
        rows += [(a, known, *summarize(share[a], threshold, weight=sizes)) for a in others]
        if len(others) > 1:
            joint = np.prod([share[a] for a in others], axis=0)
            rows.append((",".join(others), known, *summarize(joint, threshold, weight=sizes)))
    return pd.DataFrame(rows, columns=_REPORT_COLUMNS)


def combination_probability(group_size, sensitive_tables, gid, values):
    """Break-Merge probability that a member of ``gid`` has all of ``values`` (attribute -> value):
    the product of the per-ST shares, as in the paper (2/5 x 4/5 = 8/25)."""
    probability = 1.0
    for attribute, value in values.items():
        table = sensitive_tables[attribute]
        count = table.loc[(table["gid"] == gid) & (table["value"] == value), "count"].sum()
        probability *= count / group_size
    return float(probability)


# --------------------------------------------------------------------------------------------
# Attack simulation


def _score_guesses(scores, truth_column):
    """Per target: [truth among the best-scoring values] / (number of best-scoring values).

    ``scores``: DataFrame with ``target_id``, ``value``, ``score``; ``truth_column`` maps target
    id -> its true value.
    """
    best = scores.groupby("target_id")["score"].transform("max")
    winners = scores[np.isclose(scores["score"], best, rtol=1e-12, atol=0)]
    n_winners = winners.groupby("target_id").size()
    hit = winners["value"].to_numpy() == truth_column.reindex(winners["target_id"]).to_numpy()
    hits = pd.Series(hit, index=winners["target_id"].to_numpy()).groupby(level=0).sum()
    success = (hits / n_winners).reindex(truth_column.index, fill_value=0.0)
    return success.to_numpy(dtype=float)


def _validate_attack_columns(frame, columns, what):
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise InvalidParameter(
            f"{what} lacks column(s) {missing}",
            hint=f"{what} must carry the generalized QIs and the sensitive values used",
        )


def attack_plain(release, targets, quasi_identifiers, known, target):
    """Success probability per target when attacking the plain generalized ``release``.

    ``release`` and ``targets`` both carry the generalized QIs, ``known`` and ``target``; the
    adversary restricts the release to rows with the target's QIs and known value (falling back to
    the QIs alone if no row matches) and guesses the most frequent ``target`` value.
    """
    qi = list(quasi_identifiers)
    for frame, what in ((release, "release"), (targets, "targets")):
        _validate_attack_columns(frame, qi + [known, target], what)
    truth = targets[target].reset_index(drop=True)
    probes = targets[qi + [known]].reset_index(drop=True).rename_axis("target_id").reset_index()
    cells = release.groupby(qi + [known, target], dropna=False).size().rename("score").reset_index()
    scores = probes.merge(cells, on=qi + [known], how="inner")
    unmatched = ~probes["target_id"].isin(scores["target_id"])
    if unmatched.any():  # known value absent from the target's class: use the class alone
        by_qi = release.groupby(qi + [target], dropna=False).size().rename("score").reset_index()
        scores = pd.concat([scores, probes[unmatched].merge(by_qi, on=qi, how="inner")])
    scores = scores.rename(columns={target: "value"})[["target_id", "value", "score"]]
    return _score_guesses(scores, truth)


def attack_break_merge(qit, sensitive_tables, targets, quasi_identifiers, known, target):
    """Success probability per target when attacking a Break-Merge release (QIT + STs).

    The target sits in one of the QIT rows with its generalized QIs; each such row lies in some
    gid. By Bayes, ``P(gid) ~ rows(QIs, gid) * count_known(gid, a) / |gid|`` and, the STs being
    unlinked, ``P(target = v) = sum_gid P(gid) * count_target(gid, v) / |gid|``.
    """
    qi = list(quasi_identifiers)
    _validate_attack_columns(qit, qi + ["gid"], "qit")
    _validate_attack_columns(targets, qi + [known, target], "targets")
    sizes = qit.groupby("gid").size().rename("size")
    truth = targets[target].reset_index(drop=True)
    probes = targets[qi + [known]].reset_index(drop=True).rename_axis("target_id").reset_index()
    rows = qit.groupby(qi + ["gid"], dropna=False).size().rename("rows").reset_index()
    located = probes.merge(rows, on=qi, how="inner").join(sizes, on="gid")
    known_st = sensitive_tables[known].rename(columns={"value": known, "count": "known_count"})
    located = located.merge(known_st, on=["gid", known], how="left").fillna({"known_count": 0})
    located["weight"] = located["rows"] * located["known_count"] / located["size"]
    # The known value never appears in the candidate gids: fall back to the QIs alone.
    no_evidence = located.groupby("target_id")["weight"].transform("sum") == 0
    located.loc[no_evidence, "weight"] = located.loc[no_evidence, "rows"]
    target_st = sensitive_tables[target].rename(columns={"count": "target_count"})
    scored = located.merge(target_st, on="gid", how="inner")
    scored["score"] = scored["weight"] * scored["target_count"] / scored["size"]
    scores = scored.groupby(["target_id", "value"], as_index=False, dropna=False)["score"].sum()
    return _score_guesses(scores, truth)
