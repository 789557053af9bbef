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
knows them computes from the released rows alone -- intersected with what earlier versions left
them. A person left with fewer than l values refuses the version (the transaction rolls back;
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

from plpy_anon.core import republish
from plpy_anon.core.errors import InsufficientData, InvalidParameter
from plpy_anon.core.interrupts import check as check_interrupts
from plpy_anon.core.privacy_models import Models
from plpy_anon.core.republish import Version
from plpy_anon.db import columns as catalog
from plpy_anon.db import guards
from plpy_anon.db.generalization import output_type
from plpy_anon.db.sqltext import ident, jsonb, local_settings, run, text_of

#: joins the text of several identifier columns (concat_ws in SQL skips NULLs; so does Python)
SEPARATOR = "\x1f"


def resolve_mode(values: dict, roles, parameters: dict) -> None:
    """The release's ``refresh_mode`` (and what it needs) into ``parameters``. NULL: stable when
    the release has l and identifier columns to follow people by, one of them unique and NOT NULL
    (a primary key, say: a name is not a person), fresh otherwise."""
    identifiers = [c.name for c, role in roles if role == "identifier"]
    mode = values.get("refresh_mode")
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

    def codes(self, sensitive: np.ndarray) -> np.ndarray:
        """The run's sensitive codes over ``values`` (NULL: the last code)."""
        codes = np.asarray(sensitive, dtype=np.int64).copy()
        codes[codes < 0] = len(self.values) - 1
        return codes


STATE = "SELECT person, member_group, candidates FROM anon.release_people WHERE release_id = $1"


def people_of(plpy, release_id: int, parameters: dict, identifier_texts, sensitive_dictionaries,
              qi_texts) -> People:
    """The run's :class:`People` (``sensitive_dictionaries``: each sensitive column's distinct
    texts, in code order, as the run coded them; ``qi_texts``: each QI's text per row)."""
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
    state = {bytes(r["person"]): r for r in run(plpy, STATE, ["int4"], [release_id])}
    if not state and published_versions(plpy, release_id):
        raise InsufficientData(
            f"release {release_id} has published versions, and what they showed of each person "
            "(anon.release_people) is gone; a refresh now would start a new history that analysts "
            "who kept the old versions could intersect with it",
            hint="Restore the release's rows of anon.release_people (they are in every pg_dump of the "
                 "database), or recreate the release with replace => true knowingly.")
    n = len(hashes)
    groups = np.full(n, -1, dtype=np.int64)
    cohorts = np.full(n, -1, dtype=np.int64)
    cohort_index: dict[str, int] = {}
    cohort_sets: list[dict] = []
    for i, h in enumerate(hashes):
        if not i % 4096:
            check_interrupts()
        known = state.get(h)
        if known is None:
            continue
        groups[i] = known["member_group"]
        key = known["candidates"]
        if key not in cohort_index:
            cohort_index[key] = len(cohort_sets)
            cohort_sets.append(jsonb(key))
        cohorts[i] = cohort_index[key]
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
    people = People(hashes, groups, cohorts, cohort_values, history=bool(state), qi_texts=qi_texts)
    if names and sensitive_dictionaries:
        load_versions(plpy, release_id, people, list(sensitive_dictionaries[0]))
    return people


VERSIONS = ("SELECT version, group_ids, roots, sizes, vals FROM anon.release_versions "
            "WHERE release_id = $1 ORDER BY version")


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
        people.versions.append(Version(ids, counts))
        lineage.update(zip(row["group_ids"], row["roots"]))
    people.lineage = np.array(list(lineage), dtype=np.int64)
    people.roots = np.array(list(lineage.values()), dtype=np.int64)
    people.values = values


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
    out["version"] = {"group_ids": ids.tolist(), "counts": counts, "values": people.values,
                      "linked": None if linked is None else linked.tolist(),
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
    # the groups people were published in by the last version, before the check replaces them
    before = {bytes(r["person"]): r["member_group"] for r in run(
        plpy, "SELECT person, member_group FROM anon.release_people WHERE release_id = $1",
        ["int4"], [release["release_id"]])}
    tbl = guards.table_in_query(plpy, release["source"])
    cols = {c.name: c for c in catalog.table_columns(plpy, tbl)}
    qis = [cols[name] for name in parameters["quasi_identifiers"]]
    sensitive = [cols[name] for name in parameters.get("sensitive") or []]
    # a plan this size would spend seconds compiling; its CTEs' estimates would invite nested loops
    with local_settings(plpy, jit="off", enable_nestloop="off"):
        expanded = expanded_columns(plpy, release, qis, qi_texts, len(hashes))
        query = check_query(plpy, release, qis, sensitive, expanded)
        figures = run(plpy, query, ["bytea[]", "int4[]", "int4", "text[]"] + ["text[]"] * len(qis),
                      [hashes, [int(g) for g in groups], release["release_id"], [c.name for c in sensitive],
                       *qi_texts])[0]
    figures = {key: (int(v) if v is not None else None) for key, v in figures.items()}
    figures["matched_by_equality"] = [c.name for c in expanded]
    # people no longer in the table: their personal state goes now (what they were published
    # with stays only as anonymous values of their class, until it can change safely)
    figures["forgotten"] = run(plpy, """
        WITH gone AS (
            DELETE FROM anon.release_people x WHERE x.release_id = $1
              AND NOT EXISTS (SELECT 1 FROM pg_catalog.unnest($2) AS h(person) WHERE h.person = x.person)
            RETURNING 1)
        SELECT pg_catalog.count(*)::int AS n FROM gone""", ["int4", "bytea[]"],
        [release["release_id"], hashes])[0]["n"]
    if stashed["version"] is not None:
        nulls = stashed.get("qi_nulls") or [None in texts for texts in qi_texts]
        figures.update(check_differences(plpy, release, parameters, sensitive[0], stashed["version"],
                                         before, dict(zip(hashes, groups)), qis, nulls))
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


def overlapping_classes(plpy, release: dict, qis, sensitive, qi_nulls) -> tuple[list, dict]:
    """The pairs of released classes (from the released rows) that some person's QIs could lie
    in both -- their value sets share a value (NULL included) and their ranges meet on every QI,
    a range always met on a QI where a row of the run is NULL (``qi_nulls``: a NULL lies in
    every range) -- and the sensitive values (texts, NULL as None) of each class in a pair.
    Classes meet first by equality of one listed value per set QI (a hash join), then by their
    ranges (every pair of classes when no QI is a set)."""
    q = [f"q{i}" for i in range(len(qis))]
    group_by = ", ".join(f"r.{ident(plpy, c.name)}" for c in qis)
    selects = ", ".join(f"r.{ident(plpy, c.name)} AS {q[i]}" for i, c in enumerate(qis))
    s = f"r.{ident(plpy, sensitive.name)}"
    listed, expand, conditions = [], "", ["true"]
    for i, col in enumerate(qis):
        if _released_type(col) == "text[]":
            expand += f" CROSS JOIN LATERAL pg_catalog.unnest(c.{q[i]}) AS e{i}(x)"
            listed.append(f"e{i}.x")
        elif not qi_nulls[i]:
            conditions.append(f"coalesce(x.{q[i]} OPERATOR(pg_catalog.&&) y.{q[i]}, false)")
    key = f"pg_catalog.jsonb_build_array({', '.join(listed)})"
    rows = run(plpy, f"""
        WITH c AS MATERIALIZED (
            SELECT pg_catalog.row_number() OVER () AS n, g.* FROM (
                SELECT {selects}, pg_catalog.array_agg({text_of(s, sensitive.builtin)}) AS vals
                FROM {released_relation(plpy, release)} r GROUP BY {group_by}) g),
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
    return pairs, values


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
    pairs, class_values = overlapping_classes(plpy, release, qi_columns, sensitive, qi_nulls)
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
        history.append(Version(ids, counts))
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
               "overlapping_classes": len(pairs), "unsafe_differences": int(pinned.sum()),
               "unsafe_unions": int(unions.sum())}
    if figures["unsafe_differences"]:
        raise InsufficientData(
            f"this version of {release['release_schema']}.{release['release_name']} would let an "
            "analyst who kept earlier versions pin joiners or leavers by subtracting released values "
            f"({figures['unsafe_differences']} group x earlier version pairs); nothing was published",
            detail=json.dumps(figures),
            hint="The published version stays. Report this with the release's parameters.")
    sizes = [int(n) for n in np.asarray(version["counts"]).sum(axis=1)]
    vals = [values[c] for row in version["counts"] for c in np.repeat(np.arange(len(values)), row)]
    for row in stored:
        roots = [step.get(r, r) for r in row["roots"]]
        if roots != list(row["roots"]):
            run(plpy, "UPDATE anon.release_versions SET roots = $3 WHERE release_id = $1 AND version = $2",
                ["int4", "int4", "int4[]"], [release_id, row["version"], roots])
    run(plpy, """
        INSERT INTO anon.release_versions (release_id, version, group_ids, roots, sizes, vals, held_back, counterfeit)
        SELECT $1, coalesce((SELECT pg_catalog.max(version) + 1 FROM anon.release_versions WHERE release_id = $1), 0),
               $2, $2, $3, $4, $5, $6""",
        ["int4", "int4[]", "int4[]", "text[]", "int4", "int4"],
        [release_id, [int(g) for g in ids], sizes, vals, version["held_back"], version["counterfeit"]])
    return figures


def _sorted_values(values) -> tuple:
    return tuple(sorted(values, key=lambda v: (v is None, v or "")))


#: range types whose values can be listed (integers, days): a class's range becomes equalities
DISCRETE_RANGES = {"int4range": "int8", "int8range": "int8", "daterange": "date"}
#: rows the equality join may list: classes x the values of the QIs listed
EXPANSION_BUDGET = 2_000_000


def _released_type(col) -> str:
    """A QI's type in the release (the stable mode refuses hierarchies: never an LCA label)."""
    return output_type(col, False)


def _width(col_type: str, value: str) -> str:
    """SQL: how many values a class's released ``value`` lists (1e18: too many to list)."""
    if col_type == "text[]":
        return f"coalesce(pg_catalog.cardinality({value}), 1)::pg_catalog.float8"
    if col_type == "daterange":
        return (f"CASE WHEN {value} IS NULL THEN 1 WHEN pg_catalog.lower_inf({value}) OR pg_catalog.upper_inf({value}) "
                f"OR NOT pg_catalog.isfinite(pg_catalog.lower({value})) OR NOT pg_catalog.isfinite(pg_catalog.upper({value})) "
                f"THEN 1e18 ELSE (pg_catalog.upper({value}) - pg_catalog.lower({value}))::pg_catalog.float8 END")
    return (f"CASE WHEN {value} IS NULL THEN 1 WHEN pg_catalog.lower_inf({value}) OR pg_catalog.upper_inf({value}) "
            f"THEN 1e18 ELSE pg_catalog.upper({value})::pg_catalog.float8 - pg_catalog.lower({value})::pg_catalog.float8 END")


def expanded_columns(plpy, release: dict, qis, qi_texts, n_people: int) -> list:
    """The QIs whose class values the check lists as rows, so that people meet their classes
    by equality (a hash join) rather than one containment test per person and class: value
    sets and ranges of integers or days (not ranges a NULL of the run must meet everywhere),
    fewest values per class first, as many as keep the listing within EXPANSION_BUDGET rows
    (or 20 per person)."""
    listable = [c for c, texts in zip(qis, qi_texts)
                if _released_type(c) == "text[]"
                or (_released_type(c) in DISCRETE_RANGES and None not in texts)]
    if not listable:
        return []
    widths = ", ".join(f"pg_catalog.array_agg({_width(_released_type(c), 'g.' + ident(plpy, c.name))}) AS w{i}"
                       for i, c in enumerate(listable))
    group_by = ", ".join(f"r.{ident(plpy, c.name)}" for c in qis)
    row = run(plpy, f"SELECT {widths} FROM (SELECT {group_by} FROM "
                    f"{released_relation(plpy, release)} r GROUP BY {group_by}) AS g")[0]
    width = {c.name: np.asarray(row[f"w{i}"] or [], dtype=np.float64) for i, c in enumerate(listable)}
    chosen, rows = [], None
    budget = max(EXPANSION_BUDGET, 20 * n_people)
    for col in sorted(listable, key=lambda c: float(width[c.name].mean()) if width[c.name].size else 0.0):
        product = width[col.name] if rows is None else rows * width[col.name]
        if float(product.sum()) > budget:
            break
        chosen.append(col)
        rows = product
    return chosen


def check_query(plpy, release, qis, sensitive: list, expanded) -> str:
    """The cross-version check as one statement: the released classes, the run's people (their
    QIs as the run read them) matched with every class that could hold them, the intersection
    with what earlier versions left them, remembered (upsert) and counted. Parameters: $1 the
    run's people, $2 their groups, $3 the release id, $4 the sensitive columns' names, $5... each
    QI's text per person. ``expanded``: the QIs matched by equality (:func:`expanded_columns`)."""
    parameters = jsonb(release["parameters"])
    q = {col.name: f"q{i}" for i, col in enumerate(qis)}
    s = {col.name: f"s{j}" for j, col in enumerate(sensitive)}
    released = released_relation(plpy, release)
    group_by = ", ".join(f"r.{ident(plpy, c.name)}" for c in qis)
    selects = [f"r.{ident(plpy, c.name)} AS {q[c.name]}" for c in qis]
    # as text without running a cast of the type's owner (sqltext.text_of)
    selects += [f"pg_catalog.array_agg(DISTINCT {text_of('r.' + ident(plpy, col.name), col.builtin)}) "
                f"FILTER (WHERE r.{ident(plpy, col.name)} IS NOT NULL) AS {s[col.name]}" for col in sensitive]
    expand, keys, listed, conditions = "", [], [], ["true"]
    for i, col in enumerate(qis):
        value, released_value = f"p.t{i}", f"c.{q[col.name]}"
        col_type = _released_type(col)
        if col in expanded:
            # the class's values listed as rows: people meet them by equality (one hash join)
            x = f"e{q[col.name]}.x"
            if col_type == "text[]":
                expand += f" CROSS JOIN LATERAL pg_catalog.unnest({released_value}) AS e{q[col.name]}(x)"
                keys.append(value)
            else:
                # integers, or days since 2000-01-01; NULL for a class of NULLs only
                days = DISCRETE_RANGES[col_type] == "date"
                lo, hi = f"pg_catalog.lower({released_value})", f"pg_catalog.upper({released_value})"
                if days:
                    lo, hi = f"({lo} - DATE '2000-01-01')", f"({hi} - DATE '2000-01-01')"
                expand += (f" CROSS JOIN LATERAL (SELECT v FROM pg_catalog.generate_series({lo}::pg_catalog.int8, "
                           f"{hi}::pg_catalog.int8 - 1) AS v UNION ALL SELECT NULL WHERE {released_value} IS NULL) "
                           f"AS e{q[col.name]}(x)")
                # an infinite date meets no listed day (its class's range is not listed anyway)
                keys.append(f"CASE WHEN {value} IS NULL THEN NULL WHEN pg_catalog.isfinite({value}::pg_catalog.date) "
                            f"THEN pg_catalog.to_jsonb({value}::pg_catalog.date - DATE '2000-01-01') "
                            "ELSE '\"infinite\"'::pg_catalog.jsonb END"
                            if days else f"{value}::pg_catalog.int8")
            listed.append(x)
        elif col_type == "text[]":
            conditions.append(f"(CASE WHEN {value} IS NULL THEN pg_catalog.array_position({released_value}, NULL) "
                              f"IS NOT NULL ELSE {value} = ANY({released_value}) END)")
        else:
            # the text the run read is the value's own (floats: shortest exact digits); a NULL may
            # sit in any class (a class of numbers and NULLs releases its numbers' range)
            element = catalog.RANGE_ELEMENTS[col_type][0]
            conditions.append(f"(CASE WHEN {value} IS NULL THEN true "
                              f"ELSE coalesce({released_value} @> {value}::pg_catalog.{element}, false) END)")
    values = ", ".join(f"($4[{j + 1}], c.{s[col.name]})" for j, col in enumerate(sensitive)) \
        or "(NULL::pg_catalog.text, NULL::pg_catalog.text[])"
    return f"""
WITH classes AS MATERIALIZED (
    SELECT pg_catalog.row_number() OVER () AS class_no, g.* FROM (
        SELECT {', '.join(selects)} FROM {released} r GROUP BY {group_by}) g),
    run AS MATERIALIZED (
        SELECT u.* FROM ROWS FROM ({', '.join(f"pg_catalog.unnest(${n})" for n in [1, 2, *range(5, 5 + len(qis))])})
        AS u(person, member_group{''.join(f", t{i}" for i in range(len(qis)))})),
    listed AS MATERIALIZED (
        SELECT c.class_no, pg_catalog.jsonb_build_array({', '.join(listed)}) AS key FROM classes c{expand}),
    matched AS (
        SELECT DISTINCT p.person, c.class_no
        FROM run p JOIN listed x ON x.key = pg_catalog.jsonb_build_array({', '.join(keys)})
        JOIN classes c ON c.class_no = x.class_no
        WHERE {' AND '.join(conditions)}),
    -- this version's candidates of each person: the values of every class that could hold them
    seen AS (
        SELECT DISTINCT m.person, j.col, v.x
        FROM matched m JOIN classes c ON c.class_no = m.class_no
        CROSS JOIN LATERAL (VALUES {values}) AS j(col, vals)
        CROSS JOIN LATERAL pg_catalog.unnest(j.vals) AS v(x)),
    state AS (SELECT x.person, x.candidates, x.versions FROM anon.release_people x WHERE x.release_id = $3),
    before AS (
        SELECT st.person, k.key AS col, e.v AS x
        FROM state st CROSS JOIN LATERAL pg_catalog.jsonb_each(st.candidates) AS k
        CROSS JOIN LATERAL pg_catalog.jsonb_array_elements_text(k.value) AS e(v)),
    -- what every version left them: this one's, and the earlier ones' for people seen before
    kept AS (
        SELECT s.person, s.col, s.x FROM seen s
        LEFT JOIN state st ON st.person = s.person
        LEFT JOIN before b ON b.person = s.person AND b.col = s.col AND b.x = s.x
        WHERE st.person IS NULL OR b.person IS NOT NULL),
    per_column AS (
        SELECT r.person, cols.name,
               coalesce(pg_catalog.jsonb_agg(k.x ORDER BY k.x) FILTER (WHERE k.x IS NOT NULL),
                        '[]'::pg_catalog.jsonb) AS vals, pg_catalog.count(k.x) AS n
        FROM run r CROSS JOIN pg_catalog.unnest($4) AS cols(name)
        LEFT JOIN kept k ON k.person = r.person AND k.col = cols.name
        GROUP BY r.person, cols.name),
    fewest AS MATERIALIZED (
        SELECT r.person, r.member_group, st.person IS NOT NULL AS known, coalesce(st.versions, 0) AS versions,
               coalesce(pg_catalog.jsonb_object_agg(pc.name, pc.vals) FILTER (WHERE pc.name IS NOT NULL),
                        '{{}}'::pg_catalog.jsonb) AS candidates,
               pg_catalog.min(pc.n) AS left_values
        FROM run r LEFT JOIN state st ON st.person = r.person
        LEFT JOIN per_column pc ON pc.person = r.person
        GROUP BY r.person, r.member_group, st.person, st.versions),
    saved AS (
        INSERT INTO anon.release_people AS p (release_id, person, member_group, candidates, versions)
        SELECT $3, f.person, f.member_group, f.candidates, f.versions + 1 FROM fewest f
        ON CONFLICT (release_id, person) DO UPDATE
        SET member_group = excluded.member_group, candidates = excluded.candidates, versions = excluded.versions
        RETURNING 1)
SELECT pg_catalog.count(*) AS people, pg_catalog.count(*) FILTER (WHERE f.known) AS seen_before,
       pg_catalog.max(f.versions + 1) AS most_versions, pg_catalog.min(f.left_values) AS fewest_candidates,
       pg_catalog.count(*) FILTER (WHERE f.left_values <= 1) AS disclosed,
       pg_catalog.count(*) FILTER (WHERE f.left_values < {int(parameters.get('l') or 0)}) AS below_l,
       (SELECT pg_catalog.count(*) FROM saved) AS remembered
FROM fewest f"""


def forget(plpy, release_id: int) -> None:
    """A dropped (or replaced) release's people."""
    run(plpy, "DELETE FROM anon.release_people WHERE release_id = $1", ["int4"], [release_id])
    run(plpy, "DELETE FROM anon.release_versions WHERE release_id = $1", ["int4"], [release_id])
