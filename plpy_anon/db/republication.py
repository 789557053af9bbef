"""Refreshes in the stable mode (the grouping: core.republication; what each group publishes:
core.republish).

What the run needs (:func:`people_of`): each row's person (a salted SHA-256 of the identifier
columns' text; in SQL ``sha256(salt || convert_to(concat_ws(E'\\x1f', ids), 'UTF8'))``), the
group and candidates each known person got from the versions published so far
(``anon.release_people``).

What every version is held to (:func:`check_and_remember`, from the record of each create and
refresh, plain REFRESH included): for each person of the run (with their quasi-identifiers as the
run read them: no second read of the source, which may have changed since), the sensitive values
of every released class whose ranges and sets hold those quasi-identifiers -- what an analyst who
knows them computes from the released rows alone (:func:`released_classes`, matched by
core.containment: ranks and a k-d split of the classes, never a listing of the values a range
covers) -- intersected with what earlier versions left them (:func:`remember`). A person left with fewer than l values refuses the version (the transaction rolls back;
the published one stays); otherwise the intersections are remembered for the next version, and
the figures go to the release's verification and to ``anon.refresh_history``. People the run no
longer reads are forgotten (their rows of ``anon.release_people`` deleted). Then the difference
check (:func:`check_differences`): the released classes' multisets against the groups' and every
stored earlier version's (``anon.release_versions``), refused when one group's change would pin
its joiners or leavers.
"""
from __future__ import annotations

import hashlib
import json
import secrets
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from plpy_anon.core import containment, republish
from plpy_anon.core.errors import InsufficientData, InvalidParameter
from plpy_anon.core.interrupts import check as check_interrupts
from plpy_anon.core.privacy_models import Models
from plpy_anon.core.republish import Version
from plpy_anon.db import columns as catalog
from plpy_anon.db import guards, timing
from plpy_anon.db.generalization import output_type
from plpy_anon.db.sqltext import ident, jsonb, local_settings, progress, run, text_of

#: joins the text of several identifier columns (concat_ws in SQL skips NULLs; so does Python)
SEPARATOR = "\x1f"


def resolve_mode(promise, roles, parameters: dict) -> None:
    """The release's ``refresh_mode`` (and what it needs) into ``parameters``. NULL: stable when
    the release has l and identifier columns to follow people by, one of them unique and NOT NULL
    (a primary key, say: a name is not a person), fresh otherwise."""
    identifiers = [c.name for c, role in roles if role == "identifier"]
    mode = promise.refresh_mode
    if mode is None:
        # a unique column may hold NULLs, and a row without an identifier cannot be followed
        unique = any(c.unique and c.not_null for c, role in roles if role == "identifier")
        mode = "stable" if parameters.get("l") and unique and not parameters.get("hierarchies") \
            and parameters.get("t") is None and len(parameters.get("sensitive") or []) <= 1 \
            and not parameters.get("joined_back") else "fresh"
    parameters["refresh_mode"] = mode
    if mode != "stable":
        return
    if not identifiers:
        raise InvalidParameter(
            "refresh_mode => 'stable' follows people from version to version by their identifier "
            "columns, and the release has none",
            hint="Pass identifiers => ARRAY[...] (or declare them with anon.set_column_role), or use "
                 "refresh_mode => 'fresh'.")
    if parameters.get("hierarchies"):
        raise InvalidParameter(
            f"refresh_mode => 'stable' does not support hierarchies (column(s) {', '.join(parameters['hierarchies'])})",
            hint="Release those columns as value sets, or use refresh_mode => 'fresh'.")
    if len(parameters.get("sensitive") or []) > 1:
        # a released row keeps one person's values together: an analyst intersects the
        # combinations, which the per-column candidates do not bound
        raise InvalidParameter(
            "refresh_mode => 'stable' keeps candidates for one sensitive column, and the release has "
            f"{len(parameters['sensitive'])} ({', '.join(parameters['sensitive'])})",
            hint="Release one sensitive column per release, or use refresh_mode => 'fresh'.")
    if parameters.get("joined_back") and parameters.get("l"):
        # a group's rows are published from the values it showed before, not joined back
        raise InvalidParameter(
            "refresh_mode => 'stable' writes each class's values from what earlier versions showed, "
            "and this release would join its rows back to the source",
            hint="Leave plpy_anon.join_back off (the sensitive column must be of a built-in type "
                 "stored exactly), or use refresh_mode => 'fresh'.")
    if parameters.get("t") is not None:
        raise InvalidParameter("refresh_mode => 'stable' does not support t-closeness",
                               hint="Use l (with refresh_mode => 'stable'), or refresh_mode => 'fresh'.")
    parameters["identifiers"] = identifiers
    parameters["person_salt"] = secrets.token_hex(16)


def is_stable(parameters: dict) -> bool:
    return parameters.get("refresh_mode") == "stable"


def person_hashes(texts: list[list[str | None]], salt: str) -> list[bytes]:
    """Each row's person: SHA-256 of the salt and its identifier texts joined by SEPARATOR."""
    prefix = bytes.fromhex(salt)
    return [hashlib.sha256(prefix + SEPARATOR.join(t for t in row if t is not None).encode()).digest()
            for row in zip(*texts)]


@dataclass
class People:
    """The run's people: each row's hash, and for the rows of known people their previous group
    and their candidates' cohort (rows with the same candidates share one)."""

    hashes: list[bytes]
    groups: np.ndarray                    # -1: first seen now
    cohorts: np.ndarray                   # -1: no candidates yet
    cohort_values: list[np.ndarray]       # per sensitive column, (cohorts, values) bool
    history: bool                         # some version was published before
    qi_texts: list[list]                  # per QI, each row's value as text (for the check)
    # the versions published so far (core.republish), their multisets coded over ``values``
    # (the sensitive column's texts: the run's dictionary, then texts only earlier versions
    # hold, then None for NULL)
    versions: list[Version] = field(default_factory=list)
    lineage: np.ndarray | None = None     # every group id used so far
    roots: np.ndarray | None = None       # the group holding each now
    values: list = field(default_factory=list)
    # each row's group in the last version, published or held back (-1: first seen now): a
    # person in the table links the classes that held them, so a joiner keeps their group
    joined: np.ndarray | None = None
    waiting: dict = field(default_factory=dict)   # the last version's held back: hash -> group

    def codes(self, sensitive: np.ndarray) -> np.ndarray:
        """The run's sensitive codes over ``values`` (NULL: the last code)."""
        codes = np.asarray(sensitive, dtype=np.int64).copy()
        codes[codes < 0] = len(self.values) - 1
        return codes


#: the release's state of its people as one row of arrays (a person's candidates as jsonb text)
STATE_ARRAYS = """
SELECT pg_catalog.array_agg(person) AS persons, pg_catalog.array_agg(member_group) AS groups,
       pg_catalog.array_agg(candidates::pg_catalog.text) AS candidates,
       pg_catalog.array_agg(versions) AS versions
FROM anon.release_people WHERE release_id = $1"""


def people_of(plpy, release_id: int, parameters: dict, identifier_texts, sensitive_dictionaries,
              qi_texts) -> People:
    """The run's :class:`People` (``sensitive_dictionaries``: each sensitive column's distinct
    texts, in code order, as the run coded them; ``qi_texts``: each QI's text per row)."""
    import pandas as pd  # the stable mode's paths only: a fresh build loads no pandas
    if parameters.get("person_salt") is None:
        raise InsufficientData(
            f"release {release_id} is refreshed in the stable mode but its salt (the key of its "
            "person hashes, anon.release_secrets) is gone, so nobody it published can be followed",
            hint="Restore the release's row of anon.release_secrets from a backup, or drop the "
                 "release and create it again (a new history that earlier versions can be "
                 "intersected with).")
    missing = sum(any(t is None for t in row) for row in zip(*identifier_texts))
    if missing:
        raise InvalidParameter(
            f"refresh_mode => 'stable' follows people by {', '.join(parameters['identifiers'])}, and "
            f"{missing} rows have no value there (NULL)",
            hint="Give every row its identifier (a NOT NULL primary key, say), or recreate the release "
                 "with refresh_mode => 'fresh'.")
    hashes = person_hashes(identifier_texts, parameters["person_salt"])
    shared = len(hashes) - len(set(hashes))
    if shared:
        raise InvalidParameter(
            f"refresh_mode => 'stable' follows people by {', '.join(parameters['identifiers'])}, and "
            f"{shared} rows share a value with another row (or have none)",
            hint="Identifier columns must tell people apart (a primary key, say); make them unique, "
                 "or recreate the release with refresh_mode => 'fresh'.")
    state = run(plpy, STATE_ARRAYS, ["int4"], [release_id])[0]
    persons = state["persons"] or []
    if not persons and published_versions(plpy, release_id):
        raise InsufficientData(
            f"release {release_id} has published versions, and what they showed of each person "
            "(anon.release_people) is gone; a refresh now would start a new history that analysts "
            "who kept the old versions could intersect with it",
            hint="Restore the release's rows of anon.release_people (they are in every pg_dump of the "
                 "database), or recreate the release with replace => true knowingly.")
    n = len(hashes)
    position = {bytes(h): i for i, h in enumerate(persons)}
    check_interrupts()
    at = np.fromiter((position.get(h, -1) for h in hashes), dtype=np.int64, count=n)
    known = at >= 0
    groups = np.full(n, -1, dtype=np.int64)
    groups[known] = np.asarray(state["groups"] or [], dtype=np.int64)[at[known]]
    # people with the same candidates (the same jsonb text) share a cohort
    codes, texts = pd.factorize(np.asarray(state["candidates"] or [], dtype=object))
    used, cohort_of_known = np.unique(codes[at[known]], return_inverse=True)
    cohorts = np.full(n, -1, dtype=np.int64)
    cohorts[known] = cohort_of_known
    cohort_sets = []
    for c, u in enumerate(used.tolist()):
        if not c % 4096:
            check_interrupts()
        cohort_sets.append(jsonb(texts[u]))
    names = parameters.get("sensitive") or []
    cohort_values = []
    for name, dictionary in zip(names, sensitive_dictionaries):
        position = {v: j for j, v in enumerate(dictionary)}
        matrix = np.zeros((len(cohort_sets), len(dictionary)), dtype=bool)
        for c, sets in enumerate(cohort_sets):
            if not c % 4096:
                check_interrupts()
            held = [position[v] for v in sets.get(name, []) if v in position]
            matrix[c, held] = True
        cohort_values.append(matrix)
    people = People(hashes, groups, cohorts, cohort_values, history=bool(persons), qi_texts=qi_texts)
    if names and sensitive_dictionaries:
        load_versions(plpy, release_id, people, list(sensitive_dictionaries[0]))
    people.joined = groups.copy()
    if people.waiting:
        waiting = np.fromiter((people.waiting.get(h, -1) for h in hashes), dtype=np.int64, count=n)
        people.joined[~known] = waiting[~known]
    return people


VERSIONS = ("SELECT version, group_ids, roots, sizes, vals, linked, waiting, waiting_groups "
            "FROM anon.release_versions WHERE release_id = $1 ORDER BY version")


def load_versions(plpy, release_id: int, people: People, dictionary: list) -> None:
    """The multisets every earlier version published (anon.release_versions) into ``people``."""
    rows = run(plpy, VERSIONS, ["int4"], [release_id])
    values = list(dictionary)
    position = {v: j for j, v in enumerate(values)}
    for row in rows:
        for v in row["vals"]:
            if v is not None and v not in position:
                position[v] = len(values)
                values.append(v)
    values.append(None)
    position[None] = len(values) - 1
    lineage = {}
    for row in rows:
        ids = np.asarray(row["group_ids"], dtype=np.int64)
        counts = np.zeros((ids.size, len(values)), dtype=np.int64)
        owner = np.repeat(np.arange(ids.size), np.asarray(row["sizes"], dtype=np.int64))
        np.add.at(counts, (owner, np.array([position[v] for v in row["vals"]], dtype=np.int64)), 1)
        people.versions.append(Version(ids, counts, _linked(row)))
        lineage.update(zip(row["group_ids"], row["roots"]))
    if rows and rows[-1]["waiting"]:
        people.waiting = dict(zip((bytes(h) for h in rows[-1]["waiting"]), rows[-1]["waiting_groups"]))
    people.lineage = np.array(list(lineage), dtype=np.int64)
    people.roots = np.array(list(lineage.values()), dtype=np.int64)
    people.values = values


def _linked(row) -> np.ndarray | None:
    """A stored version's unions of overlapping groups (None: none overlapped)."""
    return None if row["linked"] is None else np.asarray(row["linked"], dtype=np.int64)


def qi_boxes(encoded) -> tuple[np.ndarray, np.ndarray]:
    """(the rows' QI codes, which QIs are released as ranges) of the run's encoded QIs: ranges
    are released from non-NULL values (a NULL coded -1), sets list every code, NULL's included."""
    ranged = np.array([enc.kind == "numeric" for enc in encoded])
    qi_codes = np.column_stack([
        np.where(enc.codes == enc.null_code, -1, enc.codes) if enc.kind == "numeric"
        and enc.null_code is not None else enc.codes for enc in encoded]).astype(np.int64)
    return qi_codes, ranged


def run_people(rows, groups: np.ndarray, published) -> dict:
    """What a stable run stashes for its record's check (``rows``: the run's ReleaseRows;
    ``groups``: each row's group; ``published``: core.republish's publication, None for a first
    version, which publishes every row as it is): the published people (hashes, groups, QI
    texts) and the version's multiset per group."""
    people = rows.people
    shown = np.ones(groups.size, dtype=bool) if published is None else published.published
    keep = np.flatnonzero(shown).tolist()
    out = {"hashes": [people.hashes[i] for i in keep], "groups": groups[shown].tolist(),
           # per QI, whether a row of the run (held back ones too) has a NULL: it meets every range
           "qi_nulls": [any(t is None for t in texts) for texts in people.qi_texts],
           "qi_texts": [[texts[i] for i in keep] for texts in people.qi_texts], "version": None}
    if rows.sensitive is None or not people.values:
        return out
    if published is None:
        ids, index = np.unique(groups, return_inverse=True)
        codes = people.codes(rows.sensitive[:, 0])
        width = len(people.values)
        counts = np.bincount(index.ravel() * width + codes, minlength=ids.size * width).reshape(ids.size, width)
        held_back = counterfeit = 0
        choices = {"advance": int(ids.size)}
        overlap = republish.overlapping_groups(index.ravel(), ids.size, *qi_boxes(rows.encoded))
        linked = None if overlap is None else ids[overlap]
    else:
        ids, counts, linked = published.ids, published.counts, published.linked
        held_back, counterfeit = published.held_back, published.counterfeit
        choices = {name: int((published.choice == c).sum()) for c, name in enumerate(republish.CHOICES)}
    waiting = np.flatnonzero(~shown).tolist()
    out["version"] = {"group_ids": ids.tolist(), "counts": counts, "values": people.values,
                      "linked": None if linked is None else linked.tolist(),
                      "waiting": [people.hashes[i] for i in waiting],
                      "waiting_groups": groups[waiting].tolist(),
                      "held_back": held_back, "counterfeit": counterfeit, "groups_by_choice": choices}
    return out


def published_versions(plpy, release_id: int) -> int:
    """How many versions the release's last check counted (0: none published yet)."""
    row = run(plpy, "SELECT (verification -> 'across_versions' ->> 'most_versions')::int AS n "
                    "FROM anon.releases WHERE release_id = $1", ["int4"], [release_id])
    return (row[0]["n"] or 0) if row else 0


def released_relation(plpy, release: dict) -> str:
    """What analysts read: the release's own name (a compact release's view)."""
    return ident(plpy, release["release_schema"], release["release_name"])


def check_and_remember(plpy, release: dict, run_stats: dict | None) -> dict | None:
    """The cross-version check of a stable release's new version (see the module docstring);
    returns its figures, or None for a release of another mode or a record without a run."""
    parameters = jsonb(release["parameters"])
    if not is_stable(parameters) or not run_stats or run_stats.get("people") is None:
        return None
    stashed = run_stats["people"]
    hashes, groups, qi_texts = stashed["hashes"], stashed["groups"], stashed["qi_texts"]
    tbl = guards.table_in_query(plpy, release["source"])
    cols = {c.name: c for c in catalog.table_columns(plpy, tbl)}
    qis = [cols[name] for name in parameters["quasi_identifiers"]]
    sensitive = [cols[name] for name in parameters.get("sensitive") or []]
    progress(plpy, f"checking {len(hashes)} people against every version")
    state = run(plpy, STATE_ARRAYS, ["int4"], [release["release_id"]])[0]
    # the groups people were published in by the last version, before the check replaces them
    before = {bytes(h): g for h, g in zip(state["persons"] or [], state["groups"] or [])}
    with local_settings(plpy, jit="off"), timing.phase("check_classes"):
        classes = released_classes(plpy, release, qis, sensitive, qi_texts)
    with timing.phase("check_candidates"):
        figures = remember(plpy, release["release_id"], parameters, hashes, groups, classes, state)
    if stashed["version"] is not None:
        nulls = stashed.get("qi_nulls") or [None in texts for texts in qi_texts]
        with timing.phase("check_differences"):
            figures.update(check_differences(plpy, release, parameters, sensitive[0],
                                             stashed["version"], before, dict(zip(hashes, groups)),
                                             qis, nulls))
    l = parameters.get("l")
    if l is not None and figures["below_l"]:
        raise InsufficientData(
            f"this version of {release['release_schema']}.{release['release_name']} would leave "
            f"{figures['below_l']} people with fewer than l = {l} candidate sensitive values across the "
            "versions published (an analyst who kept them all could narrow them so); nothing was published",
            detail=json.dumps(figures),
            hint="The published version stays. Earlier versions cannot be unpublished: recreating the "
                 "release with replace => true starts a new history, which analysts may intersect with the old.")
    return figures


def overlapping_classes(plpy, release: dict, qis, sensitive, qi_nulls) -> tuple[list, dict, int]:
    """The pairs of released classes (from the released rows) that some person's QIs could lie
    in both -- their value sets share a value (NULL included) and their ranges meet on every QI,
    a range always met on a QI where a row of the run is NULL (``qi_nulls``: a NULL lies in
    every range) --, the sensitive values (texts, NULL as None) of each class in a pair, and how
    many classes are in a pair. Classes meet first by equality of one listed value per set QI (a
    hash join), then by their ranges; with no set QI, by ranks of their bounds swept in numpy
    (:func:`overlapping_boxes`), never every pair of classes."""
    q = [f"q{i}" for i in range(len(qis))]
    group_by = ", ".join(f"r.{ident(plpy, c.name)}" for c in qis)
    selects = ", ".join(f"r.{ident(plpy, c.name)} AS {q[i]}" for i, c in enumerate(qis))
    s = f"r.{ident(plpy, sensitive.name)}"
    classes = f"""
        c AS MATERIALIZED (
            SELECT pg_catalog.row_number() OVER () AS n, g.* FROM (
                SELECT {selects}, pg_catalog.array_agg({text_of(s, sensitive.builtin)}) AS vals
                FROM {released_relation(plpy, release)} r GROUP BY {group_by}) g)"""
    listed, expand, conditions, ranged = [], "", ["true"], []
    for i, col in enumerate(qis):
        if _released_type(col) == "text[]":
            expand += f" CROSS JOIN LATERAL pg_catalog.unnest(c.{q[i]}) AS e{i}(x)"
            listed.append(f"e{i}.x")
        elif not qi_nulls[i]:
            conditions.append(f"coalesce(x.{q[i]} OPERATOR(pg_catalog.&&) y.{q[i]}, false)")
            ranged.append(q[i])
    if not listed:
        return _overlapping_ranges(plpy, classes, ranged)
    key = f"pg_catalog.jsonb_build_array({', '.join(listed)})"
    rows = run(plpy, f"""
        WITH {classes},
        e AS MATERIALIZED (SELECT DISTINCT c.n, {key} AS key FROM c{expand}),
        pairs AS (SELECT DISTINCT a.n AS a, b.n AS b FROM e a JOIN e b ON a.key = b.key AND a.n < b.n),
        overlapping AS (
            SELECT p.a, p.b FROM pairs p JOIN c x ON x.n = p.a JOIN c y ON y.n = p.b
            WHERE {' AND '.join(conditions)})
        SELECT NULL::pg_catalog.int8 AS a, NULL::pg_catalog.int8 AS b, c.n, c.vals FROM c
        WHERE c.n IN (SELECT a FROM overlapping UNION SELECT b FROM overlapping)
        UNION ALL
        SELECT o.a, o.b, NULL, NULL FROM overlapping o""")
    pairs = [(r["a"], r["b"]) for r in rows if r["a"] is not None]
    values = {r["n"]: r["vals"] for r in rows if r["a"] is None}
    return pairs, values, len(values)


def _overlapping_ranges(plpy, classes: str, ranged: list[str]) -> tuple[list, dict, int]:
    """:func:`overlapping_classes` of releases whose QIs are all ranges (``ranged``: the ones
    that decide, by their column in ``classes``): each bound coded by its rank among the
    column's bounds (2 rank, one off for an exclusive bound: two ranges meet when each one's
    lower code is at most the other's upper), in SQL in the type's own order."""
    ranks, codes = [], []
    for i, col in enumerate(ranged):
        ranks.append(f"""
        r{i} AS (SELECT v, pg_catalog.dense_rank() OVER (ORDER BY v) AS k FROM (
            SELECT pg_catalog.lower({col}) AS v FROM c UNION SELECT pg_catalog.upper({col}) FROM c) u
            WHERE v IS NOT NULL)""")
        codes.append(f"""
            CASE WHEN c.{col} IS NULL OR pg_catalog.isempty(c.{col}) THEN NULL
                 WHEN pg_catalog.lower_inf(c.{col}) THEN -1
                 ELSE 2 * (SELECT k FROM r{i} WHERE v = pg_catalog.lower(c.{col}))
                      + CASE WHEN pg_catalog.lower_inc(c.{col}) THEN 0 ELSE 1 END END AS lo{i},
            CASE WHEN c.{col} IS NULL OR pg_catalog.isempty(c.{col}) THEN NULL
                 WHEN pg_catalog.upper_inf(c.{col}) THEN 9223372036854775807
                 ELSE 2 * (SELECT k FROM r{i} WHERE v = pg_catalog.upper(c.{col}))
                      - CASE WHEN pg_catalog.upper_inc(c.{col}) THEN 0 ELSE 1 END END AS hi{i}""")
    rows = run(plpy, f"""
        WITH {classes}{''.join(',' + r for r in ranks)}
        SELECT c.n, c.vals{''.join(',' + c for c in codes)} FROM c ORDER BY c.n""")
    n = np.array([r["n"] for r in rows], dtype=np.int64)
    d = len(ranged)
    # a NULL (or empty) range meets nothing, as && of NULL is not true
    meets = np.array([all(r[f"lo{i}"] is not None for i in range(d)) for r in rows], dtype=bool)
    lo = np.array([[r[f"lo{i}"] or 0 for i in range(d)] for r in rows], dtype=np.int64).reshape(len(rows), d)
    hi = np.array([[r[f"hi{i}"] or 0 for i in range(d)] for r in rows], dtype=np.int64).reshape(len(rows), d)
    a, b = overlapping_boxes(lo[meets], hi[meets])
    keep = np.flatnonzero(meets)
    pairs_a, pairs_b = n[keep[a]], n[keep[b]]
    members = set(pairs_a.tolist()) | set(pairs_b.tolist())
    values = {r["n"]: r["vals"] for r in rows if r["n"] in members}
    return list(zip(pairs_a.tolist(), pairs_b.tolist())), values, len(values)


#: candidate pairs tested at once by :func:`overlapping_boxes`
BOX_CHUNK = 1 << 20


def overlapping_boxes(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pairs (a < b as positions) of boxes ``lo[i] <= x <= hi[i]`` (integer codes, one column
    a dimension) that meet on every dimension; every box meets every other when there is no
    dimension. A sweep over the dimension whose boxes overlap least: each box is tested only
    against the boxes starting inside it there, so a partition's boxes cost about their number,
    not its square (unless they really overlap)."""
    count, dims = lo.shape
    if count < 2:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    if dims == 0:
        # everything meets: a chain links them into one union
        first = np.arange(count - 1, dtype=np.int64)
        return first, first + 1
    spans = []
    for d in range(dims):
        order = np.argsort(lo[:, d], kind="stable")
        ends = np.searchsorted(lo[order, d], hi[order, d], side="right")
        spans.append((int(np.maximum(ends - np.arange(1, count + 1), 0).sum()), d, order, ends))
    _, d, order, ends = min(spans, key=lambda x: x[0])
    starts = np.arange(1, count + 1)
    lengths = np.maximum(ends - starts, 0)
    out_a, out_b = [], []
    i = 0
    while i < count:
        check_interrupts()
        j = int(np.searchsorted(np.cumsum(lengths[i:]), BOX_CHUNK, side="right")) + i + 1
        j = min(max(j, i + 1), count)
        ln = lengths[i:j]
        x = np.repeat(np.arange(i, j), ln)
        y = (np.arange(int(ln.sum())) - np.repeat(np.cumsum(ln) - ln, ln)) + np.repeat(starts[i:j], ln)
        pa, pb = order[x], order[y]
        ok = np.all((lo[pa] <= hi[pb]) & (lo[pb] <= hi[pa]), axis=1)
        out_a.append(np.minimum(pa[ok], pb[ok]))
        out_b.append(np.maximum(pa[ok], pb[ok]))
        i = j
    return np.concatenate(out_a), np.concatenate(out_b)


def _unions(pairs, members: dict) -> Counter:
    """The sorted multisets of the unions of several ``members`` (member -> its values) that
    ``pairs`` link."""
    parent = {m: m for m in members}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        if a != b:
            parent[find(a)] = find(b)
    unions: dict = {}
    for m, vals in members.items():
        unions.setdefault(find(m), []).append(vals)
    return Counter(_sorted_values([v for vals in parts for v in vals])
                   for parts in unions.values() if len(parts) > 1)


def check_differences(plpy, release: dict, parameters: dict, sensitive, version: dict,
                      before: dict, now: dict, qi_columns, qi_nulls) -> dict:
    """The difference check of a stable release's new version: the multisets of its released
    classes (from the released rows) must be the groups' multisets the run stashed (``version``),
    and no group's values added or removed since any stored earlier version may break the l
    model (core.republish.unsafe_pairs), earlier groups followed to the groups now holding them
    through the people published in both (``before``, ``now``: person -> group), every set of a
    group's ancestors included (core.republish.safe_against); the released classes that could
    hold one person (:func:`overlapping_classes`; ``qi_columns``, ``qi_nulls``: the QIs and
    whether the run has a NULL in each) must form the unions of groups the run linked, whose changes that break
    the l model are counted (``unsafe_unions``, core.republish.unsafe_unions: the run holds them
    where it can, and does not merge them). Refuses (22000) otherwise; stores the version
    (anon.release_versions) and returns its figures."""
    release_id = release["release_id"]
    values = version["values"]
    claimed = Counter(_sorted_values([values[c] for c in np.repeat(np.arange(len(values)), row)])
                      for row in version["counts"])
    qis = ", ".join(f"r.{ident(plpy, name)}" for name in parameters["quasi_identifiers"])
    s = f"r.{ident(plpy, sensitive.name)}"
    released = Counter(_sorted_values(r["vals"]) for r in run(
        plpy, f"SELECT pg_catalog.array_agg({text_of(s, sensitive.builtin)}) AS vals "
              f"FROM {released_relation(plpy, release)} r GROUP BY {qis}"))
    if released != claimed:
        raise InsufficientData(
            f"the released classes of {release['release_schema']}.{release['release_name']} are not "
            "the multisets its groups publish; nothing was published",
            hint="Report this with the release's parameters.")
    # classes that could hold one person are one union to an analyst (from the released rows):
    # they must be the unions of groups the run linked, which are checked below
    pairs, class_values, overlapping = overlapping_classes(plpy, release, qi_columns, sensitive, qi_nulls)
    group_values = {g: [values[c] for c in np.repeat(np.arange(len(values)), row)]
                    for g, row in zip(version["group_ids"], version["counts"])}
    linked_ids = version.get("linked")
    if _unions(pairs, class_values) != _unions(list(zip(version["group_ids"], linked_ids or [])),
                                               group_values):
        raise InsufficientData(
            f"the released classes of {release['release_schema']}.{release['release_name']} that "
            "could both hold one person (their ranges and sets overlap) are not the groups its run "
            "checked together; nothing was published", hint="Report this with the release's parameters.")
    stored = run(plpy, VERSIONS, ["int4"], [release_id])
    step = {}
    for person, group in now.items():
        old = before.get(person)
        if old is not None and step.setdefault(old, group) != group:
            raise InsufficientData(
                f"a group of {release['release_schema']}.{release['release_name']} was split; "
                "nothing was published", hint="Report this with the release's parameters.")
    lineage = {}
    for row in stored:
        lineage.update((h, step.get(r, r)) for h, r in zip(row["group_ids"], row["roots"]))
    # one code per text of this version and the stored ones, NULL last (no value: core.republish)
    texts = sorted({v for v in values if v is not None} | {v for row in stored for v in row["vals"] if v is not None})
    position = {v: j for j, v in enumerate(texts)} | {None: len(texts)}
    history = []
    for row in stored:
        ids = np.asarray(row["group_ids"], dtype=np.int64)
        counts = np.zeros((ids.size, len(position)), dtype=np.int64)
        owner = np.repeat(np.arange(ids.size), np.asarray(row["sizes"], dtype=np.int64))
        np.add.at(counts, (owner, np.array([position[v] for v in row["vals"]], dtype=np.int64)), 1)
        history.append(Version(ids, counts, _linked(row)))
    ids = np.asarray(version["group_ids"], dtype=np.int64)
    counts = np.zeros((ids.size, len(position)), dtype=np.int64)
    for j, v in enumerate(values):
        counts[:, position[v]] += np.asarray(version["counts"])[:, j]
    # the release's l model (a catalog row without one: Models' own default)
    models = Models(l=parameters.get("l"), c=parameters.get("c"),
                    **{k: parameters[k] for k in ("l_diversity",) if parameters.get(k)})

    def roots_of(group_ids):
        return np.array([lineage.get(h, h) for h in group_ids.tolist()], dtype=np.int64)

    pinned = republish.unsafe_pairs(models, ids, counts, history, roots_of)
    linked = None if linked_ids is None else np.asarray(linked_ids, dtype=np.int64)
    unions = republish.unsafe_unions(models, ids, counts, linked, history, roots_of)
    figures = {"held_back": version["held_back"], "counterfeit": version["counterfeit"],
               "groups_by_choice": version["groups_by_choice"], "versions_compared": len(stored),
               "overlapping_classes": overlapping, "unsafe_differences": int(pinned.sum()),
               "unsafe_unions": int(unions.sum())}
    if figures["unsafe_differences"] or figures["unsafe_unions"]:
        raise InsufficientData(
            f"this version of {release['release_schema']}.{release['release_name']} would let an "
            "analyst who kept earlier versions pin joiners or leavers by subtracting released values "
            f"({figures['unsafe_differences']} group x earlier version pairs, "
            f"{figures['unsafe_unions']} unions of overlapping classes x earlier versions); "
            "nothing was published",
            detail=json.dumps(figures),
            hint="The published version stays. Report this with the release's parameters.")
    sizes = [int(n) for n in np.asarray(version["counts"]).sum(axis=1)]
    vals = [values[c] for row in version["counts"] for c in np.repeat(np.arange(len(values)), row)]
    for row in stored:
        roots = [step.get(r, r) for r in row["roots"]]
        if roots != list(row["roots"]):
            run(plpy, "UPDATE anon.release_versions SET roots = $3 WHERE release_id = $1 AND version = $2",
                ["int4", "int4", "int4[]"], [release_id, row["version"], roots])
    # only the newest version keeps who it held back
    run(plpy, "UPDATE anon.release_versions SET waiting = NULL, waiting_groups = NULL "
              "WHERE release_id = $1 AND waiting IS NOT NULL", ["int4"], [release_id])
    run(plpy, """
        INSERT INTO anon.release_versions (release_id, version, group_ids, roots, sizes, vals, held_back,
                                           counterfeit, linked, waiting, waiting_groups)
        SELECT $1, coalesce((SELECT pg_catalog.max(version) + 1 FROM anon.release_versions WHERE release_id = $1), 0),
               $2, $2, $3, $4, $5, $6, $7, $8, $9""",
        ["int4", "int4[]", "int4[]", "text[]", "int4", "int4", "int4[]", "bytea[]", "int4[]"],
        [release_id, [int(g) for g in ids], sizes, vals, version["held_back"], version["counterfeit"],
         linked_ids, version.get("waiting") or None, version.get("waiting_groups") or None])
    return figures


def _sorted_values(values) -> tuple:
    return tuple(sorted(values, key=lambda v: (v is None, v or "")))


def _released_type(col) -> str:
    """A QI's type in the release (the stable mode refuses hierarchies: never an LCA label)."""
    return output_type(col, False)


@dataclass
class Classes:
    """The released classes as the check reads them: ``count``; each QI coded for
    core.containment (``axes``); per sensitive column, the (class, value text) pairs of the
    distinct non-NULL values each class shows."""

    count: int
    axes: list
    values: list


def released_classes(plpy, release: dict, qis, sensitive: list, qi_texts) -> Classes:
    """The released classes (what analysts read, grouped by the released QIs) and the run's
    people coded on the same axes: a range's values by their rank among the people's values and
    the classes' bounds, ranked in SQL by the element type's own order (a range becomes a closed
    interval of ranks, whatever its width); a set's values by one code each, NULL included."""
    import pandas as pd  # the stable mode's paths only: a fresh build loads no pandas
    released = released_relation(plpy, release)
    inner = [f"r.{ident(plpy, c.name)} AS q{i}" for i, c in enumerate(qis)]
    # as text without running a cast of the type's owner (sqltext.text_of)
    inner += [f"{text_of('r.' + ident(plpy, col.name), col.builtin)} AS s{j}"
              for j, col in enumerate(sensitive)]
    outer = [f"v.q{i}" for i in range(len(qis))]
    distinct = "DISTINCT " if len(sensitive) > 1 else ""
    outer += [f"pg_catalog.array_agg({distinct}v.s{j}) FILTER (WHERE v.s{j} IS NOT NULL) AS s{j}"
              for j in range(len(sensitive))]
    # each class's distinct values grouped twice (hashable keys) rather than sorted per class
    ctes = [f"""classes AS MATERIALIZED (
    SELECT pg_catalog.row_number() OVER () - 1 AS class_no, g.* FROM (
        SELECT {', '.join(outer)} FROM (
            SELECT {', '.join(inner)} FROM {released} r
            GROUP BY {', '.join(str(n + 1) for n in range(len(inner)))}) v
        GROUP BY {', '.join(f"v.q{i}" for i in range(len(qis)))}) g)"""]
    outputs = ["(SELECT pg_catalog.count(*) FROM classes) AS n_classes"]

    def flattened(column: str, name: str) -> list[str]:
        # (class, element) pairs of an array column, in one order for both arrays
        source = (f"FROM classes c CROSS JOIN LATERAL pg_catalog.unnest(c.{column}) "
                  "WITH ORDINALITY AS e(v, o)")
        return [f"(SELECT pg_catalog.array_agg(c.class_no ORDER BY c.class_no, e.o) {source}) AS {name}_classes",
                f"(SELECT pg_catalog.array_agg(e.v ORDER BY c.class_no, e.o) {source}) AS {name}_values"]

    coded, args = [], []
    for i, (col, texts) in enumerate(zip(qis, qi_texts)):
        check_interrupts()
        codes, uniques = pd.factorize(np.asarray(texts, dtype=object), sort=True)
        coded.append((codes, list(uniques)))
        col_type = _released_type(col)
        q = f"c.q{i}"
        if col_type == "text[]":
            outputs += flattened(f"q{i}", f"set{i}")
            continue
        if col_type in INTEGER_RANGES:
            # integers rank in numpy; the bounds as closed integers (NULL: unbounded)
            none = f"{q} IS NULL OR pg_catalog.isempty({q})"
            outputs.append(f"""(SELECT pg_catalog.array_agg(CASE WHEN {none} OR pg_catalog.lower_inf({q}) THEN NULL
        ELSE pg_catalog.lower({q})::pg_catalog.int8 + CASE WHEN pg_catalog.lower_inc({q}) THEN 0 ELSE 1 END END
        ORDER BY c.class_no) FROM classes c) AS low{i}""")
            outputs.append(f"""(SELECT pg_catalog.array_agg(CASE WHEN {none} OR pg_catalog.upper_inf({q}) THEN NULL
        ELSE pg_catalog.upper({q})::pg_catalog.int8 - CASE WHEN pg_catalog.upper_inc({q}) THEN 0 ELSE 1 END END
        ORDER BY c.class_no) FROM classes c) AS high{i}""")
            outputs.append(f"(SELECT pg_catalog.array_agg({none} ORDER BY c.class_no) FROM classes c) AS empty{i}")
            continue
        args.append(list(uniques))
        param, element = f"${len(args)}::pg_catalog.text[]", catalog.RANGE_ELEMENTS[col_type][0]
        # the text the run read is the value's own (floats: shortest exact digits)
        # one sort per QI: the people's values and the classes' bounds ranked together
        ctes.append(f"""rank{i} AS MATERIALIZED (
    SELECT s.o, s.class_no, s.side, pg_catalog.dense_rank() OVER (ORDER BY s.x) AS r FROM (
        SELECT u.o, NULL::pg_catalog.int8 AS class_no, 0 AS side, u.t::pg_catalog.{element} AS x
        FROM pg_catalog.unnest({param}) WITH ORDINALITY AS u(t, o)
        UNION ALL SELECT NULL, c.class_no, 1, pg_catalog.lower({q}) FROM classes c
        UNION ALL SELECT NULL, c.class_no, 2, pg_catalog.upper({q}) FROM classes c) s
    WHERE s.x IS NOT NULL)""")
        outputs.append(f"(SELECT pg_catalog.array_agg(v.r ORDER BY v.o) FROM rank{i} v WHERE v.side = 0) AS points{i}")
        # a class of NULLs only (a NULL range) holds no value; bounds as closed intervals of ranks
        outputs.append(f"""(SELECT pg_catalog.array_agg(CASE WHEN {q} IS NULL OR pg_catalog.isempty({q}) THEN 1
        WHEN pg_catalog.lower_inf({q}) THEN 0 WHEN pg_catalog.lower_inc({q}) THEN b.r ELSE b.r + 1 END
        ORDER BY c.class_no)
     FROM classes c LEFT JOIN rank{i} b ON b.class_no = c.class_no AND b.side = 1) AS low{i}""")
        outputs.append(f"""(SELECT pg_catalog.array_agg(CASE WHEN {q} IS NULL OR pg_catalog.isempty({q}) THEN 0
        WHEN pg_catalog.upper_inf({q}) THEN {containment.TOP} WHEN pg_catalog.upper_inc({q}) THEN b.r
        ELSE b.r - 1 END ORDER BY c.class_no)
     FROM classes c LEFT JOIN rank{i} b ON b.class_no = c.class_no AND b.side = 2) AS high{i}""")
    for j in range(len(sensitive)):
        outputs += flattened(f"s{j}", f"sensitive{j}")
    row = run(plpy, f"WITH {', '.join(ctes)}\nSELECT {', '.join(outputs)}",
              ["text[]"] * len(args), args)[0]
    count = int(row["n_classes"])
    axes = []
    for i, (col, (codes, uniques)) in enumerate(zip(qis, coded)):
        if _released_type(col) == "text[]":
            # NULL is a value of its own (slot len(uniques)); codes in the fit's order of a
            # categorical column (most frequent first), so that classes' sets are narrow intervals
            slot = np.where(codes < 0, len(uniques), codes)
            counts = np.bincount(slot, minlength=len(uniques) + 1)
            order = sorted(range(len(uniques) + 1), key=lambda u: (
                -counts[u], u == len(uniques), uniques[u] if u < len(uniques) else ""))
            recode = np.empty(len(uniques) + 1, dtype=np.int64)
            recode[order] = np.arange(len(uniques) + 1)
            elements = np.asarray(row[f"set{i}_values"] or [], dtype=object)
            missing = pd.isna(elements)
            element_slots = np.full(elements.size, len(uniques), dtype=np.int64)
            element_slots[~missing] = pd.Index(uniques, dtype=object).get_indexer(elements[~missing])
            element_codes = np.where(element_slots < 0, -1, recode[element_slots])
            axes.append(containment.set_axis(
                recode[slot], np.asarray(row[f"set{i}_classes"] or [], dtype=np.int64), element_codes,
                count, len(uniques) + 1))
            continue
        if _released_type(col) in INTEGER_RANGES:
            axes.append(_integer_axis(codes, uniques, row[f"low{i}"] or [], row[f"high{i}"] or [],
                                      row[f"empty{i}"] or []))
            continue
        ranks = np.asarray(row[f"points{i}"] or [], dtype=np.int64)
        points = np.where(codes < 0, containment.ANY, ranks[np.maximum(codes, 0)] if ranks.size else 0)
        axes.append(containment.Axis(points, np.asarray(row[f"low{i}"] or [], dtype=np.int64),
                                     np.asarray(row[f"high{i}"] or [], dtype=np.int64)))
    values = [(np.asarray(row[f"sensitive{j}_classes"] or [], dtype=np.int64),
               list(row[f"sensitive{j}_values"] or [])) for j in range(len(sensitive))]
    return Classes(count, axes, values)


#: ranges of integers: ranked in numpy (their text is the integer's own)
INTEGER_RANGES = ("int4range", "int8range")


def _integer_axis(codes, uniques, low, high, empty) -> containment.Axis:
    """An integer QI: each person's value and each class's closed bounds (None: unbounded;
    ``empty``: a class of NULLs only) as ranks among them all."""
    values = np.asarray(uniques, dtype=object).astype(np.int64)
    unbounded_low = np.array([v is None for v in low], dtype=bool)
    unbounded_high = np.array([v is None for v in high], dtype=bool)
    low = np.array([0 if v is None else v for v in low], dtype=np.int64)
    high = np.array([0 if v is None else v for v in high], dtype=np.int64)
    universe = containment.distinct(np.concatenate([values, low[~unbounded_low], high[~unbounded_high]]))
    points = np.where(codes < 0, containment.ANY,
                      np.searchsorted(universe, values)[np.maximum(codes, 0)] + 1 if values.size else 0)
    low_rank = np.where(unbounded_low, 0, np.searchsorted(universe, low) + 1)
    high_rank = np.where(unbounded_high, containment.TOP, np.searchsorted(universe, high) + 1)
    empty = np.asarray(empty, dtype=bool)
    low_rank[empty], high_rank[empty] = 1, 0
    return containment.Axis(points, low_rank, high_rank)


# the release's people replaced by the run's: one delete and one insert cost half an upsert's
# index probes and row locks; people the run no longer reads are forgotten with them
FORGET = "DELETE FROM anon.release_people WHERE release_id = $1"
REMEMBER = """
INSERT INTO anon.release_people (release_id, person, member_group, candidates, versions)
SELECT $1, u.person, u.member_group, u.candidates, u.versions
FROM ROWS FROM (pg_catalog.unnest($2::pg_catalog.bytea[]), pg_catalog.unnest($3::pg_catalog.int4[]),
               pg_catalog.unnest($4::pg_catalog.jsonb[]), pg_catalog.unnest($5::pg_catalog.int4[]))
     AS u(person, member_group, candidates, versions)"""


def remember(plpy, release_id: int, parameters: dict, hashes: list, groups: list,
             classes: Classes, state: dict) -> dict:
    """Each person's candidates now: the values of every released class holding their QIs,
    intersected with what earlier versions left them (``state``: the release's people as
    STATE_ARRAYS reads them); remembered and counted. People the run no longer reads are
    forgotten (what they were published with stays only as anonymous values of their class,
    until it can change safely)."""
    import pandas as pd  # the stable mode's paths only: a fresh build loads no pandas
    n = len(hashes)
    person, klass = containment.contained(classes.axes, n, classes.count)
    check_interrupts()
    position = {bytes(h): i for i, h in enumerate(state["persons"] or [])}
    at = np.fromiter((position.get(h, -1) for h in hashes), dtype=np.int64, count=n)
    known = at >= 0
    versions = np.zeros(n, dtype=np.int64)
    versions[known] = np.asarray(state["versions"] or [], dtype=np.int64)[at[known]]
    # earlier candidates: one set per distinct jsonb text (people often share one)
    earlier_codes, earlier_texts = pd.factorize(np.asarray(state["candidates"] or [], dtype=object))
    earlier = np.full(n, -1, dtype=np.int64)
    earlier[known] = earlier_codes[at[known]]
    earlier_sets = [jsonb(t) for t in earlier_texts]
    names = parameters.get("sensitive") or []
    kept, left = [], None
    for name, (value_classes, value_texts) in zip(names, classes.values):
        check_interrupts()
        codes, dictionary = pd.factorize(np.asarray(value_texts, dtype=object))
        width = max(len(dictionary), 1)
        # (person, value) for every value of every class holding the person
        order = np.argsort(value_classes, kind="stable")
        per_class = np.bincount(value_classes, minlength=classes.count)
        start = np.cumsum(per_class) - per_class
        repeat = per_class[klass]
        offset = np.arange(int(repeat.sum())) - np.repeat(np.cumsum(repeat) - repeat, repeat)
        values = codes[order][np.repeat(start[klass], repeat) + offset]
        pairs = containment.distinct(np.repeat(person, repeat) * width + values)
        p, v = pairs // width, pairs % width
        # people seen before keep only what every earlier version left them
        code = {v: j for j, v in enumerate(dictionary.tolist())}
        before = np.fromiter((e * width + code[v] for e, sets in enumerate(earlier_sets)
                              for v in sets.get(name, []) if v in code), dtype=np.int64)
        e = earlier[p]
        held = (e < 0) | np.isin(e * width + v, before)
        p, v = p[held], v[held]
        kept.append((name, p, v, np.asarray(dictionary, dtype=object)))
        count = np.bincount(p, minlength=n)
        left = count if left is None else np.minimum(left, count)
    cohort, texts = _cohorts(n, person, klass, classes.count, earlier, kept)
    run(plpy, FORGET, ["int4"], [release_id])
    # each person's text (people of one cohort share the string)
    run(plpy, REMEMBER, ["int4", "bytea[]", "int4[]", "jsonb[]", "int4[]"],
        [release_id, hashes, [int(g) for g in groups], [texts[c] for c in cohort.tolist()],
         (versions + 1).tolist()])
    l = int(parameters.get("l") or 0)
    return {"people": n, "seen_before": int(known.sum()),
            "most_versions": int(versions.max()) + 1 if n else None,
            "fewest_candidates": int(left.min()) if left is not None and n else None,
            "disclosed": int((left <= 1).sum()) if left is not None else 0,
            "below_l": int((left < l).sum()) if left is not None else 0,
            "remembered": n, "forgotten": len(position) - int(known.sum())}


def _cohorts(n: int, person, klass, n_classes: int, earlier, kept) -> tuple[np.ndarray, list[str]]:
    """People whose candidates are the same set share one jsonb text: those held by the same
    classes with the same earlier candidates (one class: a key in numpy; several: in Python)."""
    matched = np.bincount(person, minlength=n)
    only = np.full(n, -1, dtype=np.int64)
    only[person] = klass
    key = np.where(matched == 1, (earlier + 1) * (n_classes + 1) + only, -1)
    several = np.flatnonzero(matched > 1)
    if several.size:
        check_interrupts()
        order = np.argsort(person, kind="stable")
        starts = np.searchsorted(person[order], several)
        sets = {}
        for i, s in zip(several.tolist(), starts.tolist()):
            held = tuple(sorted(klass[order][s:s + matched[i]].tolist()))
            key[i] = -2 - sets.setdefault((int(earlier[i]), held), len(sets))
    cohort_keys, first, cohort = np.unique(key, return_index=True, return_inverse=True)
    texts = []
    spans = [(name, p, v, dictionary, np.searchsorted(p, first), np.searchsorted(p, first, "right"))
             for name, p, v, dictionary in kept]
    for c in range(cohort_keys.size):
        if not c % 4096:
            check_interrupts()
        texts.append(json.dumps({name: sorted(dictionary[v[a[c]:b[c]]].tolist())
                                 for name, p, v, dictionary, a, b in spans}, ensure_ascii=False))
    return cohort.astype(np.int64), texts


def forget(plpy, release_id: int) -> None:
    """A dropped (or replaced) release's people."""
    run(plpy, "DELETE FROM anon.release_people WHERE release_id = $1", ["int4"], [release_id])
    run(plpy, "DELETE FROM anon.release_versions WHERE release_id = $1", ["int4"], [release_id])
