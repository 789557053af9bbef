"""An incremental stable refresh, prototyped on the real state and kernels: what it costs to carry
over the people and classes that did not change since the stored version and to locate only the
rest, beside the fresh refresh (target: stable <= 1.5x fresh).

On bench_stable's synthetic table (6 QIs plus an id primary key, PLPY_ANON_STABLE_ROWS rows,
default "1000000"; k = 10, l = 2; PLPY_ANON_STABLE_CHURN of the people leave and as many join,
default 0.01) a fresh and a stable release are made, the table churns and both are refreshed.
The stable release's own checks (its creation's and its refresh's) are watched in the backend:
``republication.check_and_remember``, ``released_classes`` and ``containment.contained`` are
wrapped to keep what they were given and found (the wrapping changes none of it). Then, inside
the backend, best of PLPY_ANON_FLOOR_REPEAT runs (default 3), each primitive of a refresh that
carries over:

* ``classes linked``: the check's pairs of classes that could hold one person (all of them, as
  the refresh's check finds them);
* ``class fingerprints``: two 64-bit hashes of each released class (its storage row's QIs, and
  its QIs and multiset, as text), read in one statement: a class whose box the stored version
  has holds the same people (their location carries over), one whose box and values it has
  leaves them the same candidates;
* ``changed classes read``: the storage rows of the changed classes alone (by ctid);
* ``location write`` / ``location read``: what a refresh must store per person beyond today's
  state, the classes holding each person in this version (one int4 a person, the first class,
  and the (person, class) pairs beyond it) and the classes' fingerprints, as bytea;
* ``people coded``: the run's QI texts factorized (each person's code per QI), which a search of
  the unchanged people against the changed classes needs;
* ``locate changed``: who must be searched again (new or changed records, a NULL QI, no stored
  class, a stored class that changed or vanished) against every class (``core.containment``'s
  compiled kernel with the check's hints); the others keep their stored classes, and are tested
  only against the changed classes that meet one of those (a class holding a person meets every
  class holding them), pair by pair. The result is checked equal, as a set of (person, class)
  pairs, to what the refresh's own check found for everyone; so are two variants, printed
  beside it (everyone whose stored class meets a changed one searched; everyone against the
  changed classes only);
* ``carried pairs verified`` (in no sum): each carried pair tested true, what a check that
  trusted no stored pair would add;
* ``intersect changed``: candidates as bitmasks (OR of the classes' masks, AND the earlier
  ones) for the people whose classes changed only; the others keep theirs.

It prints, beside the refresh's phases, the floor of such a refresh: the fresh refresh plus the
steps a stable refresh cannot skip (the id read, hash, match and state write and read measured
by ``bench_stable_floor``, re-measured here) plus the incremental check's primitives, over the
fresh refresh, beside the target. The grouping and the multisets of the run (``stable_groups``,
``stable_multisets``) and the difference check are left out (no incremental primitive for them
here): the groups and people they would have to touch are counted (groups with a joiner, a
leaver or a changed member; classes changed). Not a test: it asserts no speed, only that the
carried-over location equals the full one.

PLPY_ANON_INCREMENTAL_CLOCK=cpu times every step by the backend's CPU seconds (time.process_time
inside it, /proc/<pid>/stat around a statement) instead of the wall clock: a loaded machine
stretches them least. The phases of anon.refresh_history stay wall seconds.
"""
from __future__ import annotations

import os
import time

from tests.bench.bench_stable import TARGET, K, L, churn, load, state_size, verified
from tests.bench.bench_stable_floor import (
    HASH_PYTHON,
    MATCH,
    QIS,
    RANGES,
    READ,
    REPEAT,
    SALT,
    SENSITIVE,
    SETS,
    STATE_BYTES,
    STATE_READ,
    STATE_WRITE,
    backend,
)
from tests.bench.common import copy_seconds, extension_db, markdown_table, results_dir

ROWS = int(os.environ.get("PLPY_ANON_STABLE_ROWS", "1000000"))
#: "wall" (seconds of the wall clock) or "cpu" (the backend's CPU seconds: what a loaded machine
#: stretches least; a write's wait for its commit is then not counted)
CLOCK = os.environ.get("PLPY_ANON_INCREMENTAL_CLOCK", "wall")


class Clock:
    """The connection's backend's clock: the wall's, or its CPU seconds (/proc/<pid>/stat)."""

    def __init__(self, conn):
        self.stat = f"/proc/{conn.execute('SELECT pg_backend_pid()').fetchone()[0]}/stat"
        self.tick = os.sysconf("SC_CLK_TCK")

    def now(self) -> float:
        if CLOCK != "cpu":
            return time.perf_counter()
        with open(self.stat) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / self.tick


def in_backend(conn, code: str) -> dict:
    """:func:`backend` with the chosen clock."""
    if CLOCK == "cpu":
        code = code.replace("time.perf_counter()", "time.process_time()")
    return backend(conn, code)

#: the stable release's checks watched: each call's people, classes and (person, class) pairs
WATCH = """
from plpy_anon.core import containment
from plpy_anon.db import republication
GD["checks"] = []
if not GD.get("watched"):
    GD["watched"] = True
    check, classes_of, contained = (republication.check_and_remember,
                                    republication.released_classes, containment.contained)

    def watched_check(plpy, release, run_stats):
        GD["check"] = {"release": release["release_name"]}
        try:
            return check(plpy, release, run_stats)
        finally:
            seen, GD["check"] = GD["check"], None
            if run_stats and run_stats.get("people") is not None and "classes" in seen:
                seen["people"] = run_stats["people"]
                GD["checks"].append(seen)

    def watched_classes(*args, **kwargs):
        t0 = time.perf_counter()
        out = classes_of(*args, **kwargs)
        if GD.get("check") is not None:
            GD["check"].update(classes=out, classes_s=time.perf_counter() - t0)
        return out

    def watched_contained(axes, n_points, n_classes, *args, **kwargs):
        t0 = time.perf_counter()
        out = contained(axes, n_points, n_classes, *args, **kwargs)
        if GD.get("check") is not None and "pairs" not in GD["check"]:
            GD["check"].update(pairs=out, located_s=time.perf_counter() - t0,
                               hints=kwargs)
        return out

    republication.check_and_remember = watched_check
    republication.released_classes = watched_classes
    containment.contained = watched_contained
"""

#: each released class's fingerprint (its storage row's QIs and values as text, hashed), in the
#: order the check numbers the classes (the storage's scan, as released_classes reads it)
FINGERPRINTS = """
import numpy as np
from plpy_anon.db import class_counts, release_rows
release = release_rows.by_id(plpy, plpy.execute(
    "SELECT release_id FROM anon.releases WHERE release_name = 'synth_stable'")[0]["release_id"])
stored = class_counts.storage_for(plpy, release)[1]
boxes = ", ".join("s." + plpy.quote_ident(c) for c in %(qis)r)
columns = boxes + ", s." + plpy.quote_ident(%(sensitive)r)
query = (f"SELECT pg_catalog.count(*) AS n, pg_catalog.string_agg(pg_catalog.int8send("
         f"pg_catalog.hashtextextended(ROW({columns})::text, 0)), ''::bytea) AS f, "
         f"pg_catalog.string_agg(pg_catalog.int8send("
         f"pg_catalog.hashtextextended(ROW({boxes})::text, 0)), ''::bytea) AS b, "
         f"pg_catalog.array_agg(s.ctid) AS ctids "
         f"FROM {stored.relation} AS s WHERE {stored.rows} > 0")
best = float("inf")
for _ in range(%(repeat)d):
    t0 = time.perf_counter()
    row = plpy.execute(query)[0]
    prints = class_counts.int8_array(row["f"])
    box_prints = class_counts.int8_array(row["b"])
    best = min(best, time.perf_counter() - t0)
GD["fingerprints_" + %(step)r] = (prints, box_prints, row["ctids"], stored.relation, columns)
report({"fingerprints": best, "classes": int(row["n"]),
        "distinct": int(np.unique(prints).size)})
"""

#: the incremental check's primitives, on the creation's check (the stored version) and the
#: refresh's (the new one)
INCREMENTAL = """
import dataclasses
import numpy as np
from plpy_anon.core import containment
from plpy_anon.db import republication

checks = [c for c in GD["checks"] if c["release"] == "synth_stable"]
old, new = checks[-2], checks[-1]
old_prints, old_boxes, _, _, _ = GD["fingerprints_old"]
new_prints, new_boxes, new_ctids, relation, columns = GD["fingerprints_new"]
out = {}
assert old_prints.size == old["classes"].count and new_prints.size == new["classes"].count


def twins(old_keys, new_keys):
    # each new class's stored twin by fingerprint (-1: none)
    order = np.argsort(old_keys, kind="stable")
    at = np.minimum(np.searchsorted(old_keys[order], new_keys), old_keys.size - 1)
    return np.where(old_keys[order][at] == new_keys, order[at], -1)


# the classes: a class whose box (its released QIs) the stored version has holds the same
# people (the location carried over); one whose box and values it has, the same candidates
twin = twins(old_boxes, new_boxes)
value_twin = twins(old_prints, new_prints)
changed = np.flatnonzero(twin < 0)
changed_values = np.flatnonzero(value_twin < 0)
out.update(classes=int(new_prints.size), changed_classes=int(changed_values.size),
           changed_boxes=int(changed.size),
           vanished_classes=int(old_prints.size - (value_twin >= 0).sum()))

# the changed classes' storage rows alone
best = float("inf")
fetch = plpy.prepare(f"SELECT {columns} FROM {relation} AS s "
                     f"WHERE s.ctid = ANY($1::pg_catalog.tid[])", ["text[]"])
wanted = [new_ctids[i] for i in changed_values.tolist()]
for _ in range(%(repeat)d):
    t0 = time.perf_counter()
    rows = plpy.execute(fetch, [wanted])
    best = min(best, time.perf_counter() - t0)
assert len(rows) == changed_values.size
out["changed_read"] = best

# people: the stored version's (published ones, then those held back) and the new one's, by hash
def everyone(check):
    people = check["people"]
    version = people["version"] or {}
    hashes = republication.packed(list(people["hashes"]) + list(version.get("waiting") or ()))
    records = people["records"]
    if records is not None:
        records = np.concatenate([records, people["waiting_records"]])
    return hashes, records

old_hashes, old_records = everyone(old)
new_hashes, new_records = everyone(new)
n_old, n_new = old_hashes.size, new_hashes.size
order = np.argsort(old_hashes, kind="stable")
at = np.minimum(np.searchsorted(old_hashes[order], new_hashes), n_old - 1)
before = np.where(old_hashes[order][at] == new_hashes, order[at], -1)
same = before >= 0
if old_records is not None and new_records is not None:
    same &= old_records[np.maximum(before, 0)] == new_records
unchanged, moved = np.flatnonzero(same), np.flatnonzero(~same)
out.update(people=int(n_new), unchanged_people=int(unchanged.size),
           changed_people=int(moved.size))

# what must be stored per person: the classes holding them in this version (the first one, -1
# for none, and the pairs beyond it), and the classes' fingerprints
old_p, old_c = old["pairs"]
pair_order = np.lexsort((old_c, old_p))
old_p, old_c = old_p[pair_order], old_c[pair_order]
first_at = np.flatnonzero(np.r_[True, old_p[1:] != old_p[:-1]])
first = np.full(n_old, -1, dtype=np.int32)
first[old_p[first_at]] = old_c[first_at]
beyond = np.ones(old_p.size, dtype=bool)
beyond[first_at] = False
location = (first.tobytes() + old_p[beyond].astype(np.int32).tobytes()
            + old_c[beyond].astype(np.int32).tobytes() + old_prints.tobytes()
            + old_boxes.tobytes())
GD["floor_state"] = location
out.update(location_bytes=len(location), pairs_beyond_first=int(beyond.sum()))

# the people's codes (the run's QI texts factorized, as released_classes does for everyone)
people = new["people"]
texts = [a + b for a, b in zip(people["qi_texts"], people["waiting_qi_texts"])]
best = float("inf")
for _ in range(%(repeat)d):
    t0 = time.perf_counter()
    for column in texts:
        republication.factorized(column)
    best = min(best, time.perf_counter() - t0)
out["coded"] = best

# the search: changed people against every class, unchanged ones against the changed classes
axes, count = new["classes"].axes, new["classes"].count
near = (new.get("hints") or {}).get("near")


def sub_axes(people_rows, class_rows):
    subset = []
    remap = None
    if class_rows is not None:
        remap = np.full(count, -1, dtype=np.int64)
        remap[class_rows] = np.arange(class_rows.size)
    for a in axes:
        points = a.points if people_rows is None else a.points[people_rows]
        if class_rows is None:
            subset.append(containment.Axis(points, a.low, a.high, a.members, a.width))
            continue
        members = None
        if a.members is not None:
            owner = remap[a.members // a.width]
            keep = owner >= 0
            members = np.sort(owner[keep] * a.width + np.mod(a.members[keep], a.width))
        subset.append(containment.Axis(points, a.low[class_rows], a.high[class_rows], members,
                                       a.width))
    return subset


# the changed people against every class, the unchanged ones against the changed classes
def locate_against_changed():
    found_p, found_c = [], []
    if moved.size:
        p, c = containment.contained(sub_axes(moved, None), moved.size, count, engine="numba",
                                     near=None if near is None else near[moved])
        found_p.append(moved[p])
        found_c.append(c)
    if changed.size and unchanged.size:
        p, c = containment.contained(sub_axes(unchanged, changed), unchanged.size, changed.size,
                                     engine="numba",
                                     near=None if near is None else near[unchanged])
        found_p.append(unchanged[p])
        found_c.append(changed[c])
    return found_p, found_c


# the stored location (person, class) of the unchanged people, in the new numbering of both
old_to_new = np.full(old_prints.size, -1, dtype=np.int64)
kept_classes = np.flatnonzero(twin >= 0)
old_to_new[twin[kept_classes]] = kept_classes
old_of_new = np.full(n_old, -1, dtype=np.int64)
old_of_new[before[unchanged]] = unchanged
any_null = np.zeros(n_new, dtype=bool)
for a in axes:
    any_null |= a.points == containment.ANY


# who must be searched again: the new or changed, those with a NULL QI, those no stored class
# held, those a stored class of whom changed or vanished, and those a stored class of whom
# meets a changed class (any class holding a person meets every class holding them)
def searched_people(linked):
    a, b = linked
    changed_class = twin < 0
    meets_changed = np.zeros(count, dtype=bool)
    meets_changed[a[changed_class[b]]] = True
    meets_changed[b[changed_class[a]]] = True
    person, klass = old_of_new[old_p], old_to_new[old_c]
    mine = person >= 0
    person, klass = person[mine], klass[mine]
    again = ~same | any_null
    placed = np.zeros(n_new, dtype=bool)
    placed[person] = True
    again |= ~placed
    again[person[klass < 0]] = True
    again[person[(klass >= 0) & meets_changed[np.maximum(klass, 0)]]] = True
    keep = ~again[person]
    return np.flatnonzero(again), person[keep], klass[keep]


# the people who must be searched again against every class (the check's hints); the others
# keep their stored classes
def locate_searched(linked):
    wanted, kept_p, kept_c = searched_people(linked)
    p, c = containment.contained(sub_axes(wanted, None), wanted.size, count, engine="numba",
                                 linked=linked, near=None if near is None else near[wanted])
    return wanted, [wanted[p]], [c], kept_p, kept_c


# people whose stored classes all stayed, one of which meets a changed class: tested against
# those changed partners only, pair by pair; the rest of the searched people against every class
def pair_tested(p, c):
    inside = np.ones(p.size, dtype=bool)
    for a in axes:
        v = a.points[p]
        inside &= (v >= a.low[c]) & (v <= a.high[c])
        if a.members is not None and a.members.size:
            key = c * a.width + v
            at = np.minimum(np.searchsorted(a.members, key), a.members.size - 1)
            inside &= a.members[at] == key
    return p[inside], c[inside]


def locate_partners(linked, parts=None):
    t0 = time.perf_counter()
    a, b = linked
    changed_class = twin < 0
    # each stayed class's changed partners, both ways
    one = ~changed_class[a] & changed_class[b]
    two = changed_class[a] & ~changed_class[b]
    owner = np.r_[a[one], b[two]]
    partner = np.r_[b[one], a[two]]
    by_owner = np.argsort(owner, kind="stable")
    owner, partner = owner[by_owner], partner[by_owner]
    starts = np.searchsorted(owner, np.arange(count + 1))
    person, klass = old_of_new[old_p], old_to_new[old_c]
    mine = person >= 0
    person, klass = person[mine], klass[mine]
    again = ~same | any_null
    placed = np.zeros(n_new, dtype=bool)
    placed[person] = True
    again |= ~placed
    again[person[klass < 0]] = True
    keep = ~again[person]
    kept_p, kept_c = person[keep], klass[keep]
    # the pairs (person, changed partner of a class of theirs)
    width = starts[kept_c + 1] - starts[kept_c]
    pair_p = np.repeat(kept_p, width)
    first = np.repeat(starts[kept_c] - np.r_[0, np.cumsum(width)[:-1]], width)
    pair_c = partner[first + np.arange(pair_p.size)]
    t1 = time.perf_counter()
    hit_p, hit_c = pair_tested(pair_p, pair_c)
    t2 = time.perf_counter()
    wanted = np.flatnonzero(again)
    searched_axes = sub_axes(wanted, None)
    t3 = time.perf_counter()
    p, c = containment.contained(searched_axes, wanted.size, count, engine="numba",
                                 linked=linked, near=None if near is None else near[wanted])
    if parts is not None:
        parts.update(carry=t1 - t0, pairs=t2 - t1, axes=t3 - t2,
                     search=time.perf_counter() - t3)
    return wanted, int(pair_p.size), [wanted[p], hit_p], [c, hit_c], kept_p, kept_c


linked_best = float("inf")
for _ in range(%(repeat)d):
    fresh_classes = dataclasses.replace(new["classes"], linked=None)
    t0 = time.perf_counter()
    linked = republication.linked_classes(fresh_classes)
    linked_best = min(linked_best, time.perf_counter() - t0)
out["linked"] = linked_best
locate_against_changed()                      # the kernels loaded before the timing
best = {"against_changed": float("inf"), "searched": float("inf"), "partners": float("inf")}
for _ in range(%(repeat)d):
    t0 = time.perf_counter()
    found_p, found_c = locate_against_changed()
    best["against_changed"] = min(best["against_changed"], time.perf_counter() - t0)
    t0 = time.perf_counter()
    wanted, searched_p, searched_c, kept_p, kept_c = locate_searched(linked)
    best["searched"] = min(best["searched"], time.perf_counter() - t0)
    t0 = time.perf_counter()
    parts = {}
    wanted_c, pairs_c, found_cp, found_cc, kept_cp, kept_cc = locate_partners(linked, parts)
    took = time.perf_counter() - t0
    if took < best["partners"]:
        best["partners"], out["locate_parts"] = took, parts
out["locate_against_changed"] = best["against_changed"]
out["locate_meeting"] = best["searched"]
out["people_meeting"] = int(wanted.size)
out["locate_changed"] = best["partners"]
out["people_searched"] = int(wanted_c.size)
out["pairs_tested"] = pairs_c
# the carried pairs checked true (each class holds its person), as a check that trusts the
# stored location for completeness only would
best_verify = float("inf")
for _ in range(%(repeat)d):
    t0 = time.perf_counter()
    true_p, _ = pair_tested(kept_cp, kept_cc)
    best_verify = min(best_verify, time.perf_counter() - t0)
out.update(carried_verified=best_verify, carried_true=bool(true_p.size == kept_cp.size))
key_c = np.unique(np.concatenate([kept_cp] + found_cp) * count
                  + np.concatenate([kept_cc] + found_cc))
key_b = np.unique(np.concatenate([kept_p] + searched_p) * count
                  + np.concatenate([kept_c] + searched_c))
best_full = float("inf")
for _ in range(%(repeat)d):
    t0 = time.perf_counter()
    containment.contained(axes, n_new, count, engine="numba", linked=linked, near=near)
    best_full = min(best_full, time.perf_counter() - t0)
out["full_locate"] = best_full
out["refresh_locate"] = new["located_s"]
out["full_classes"] = new["classes_s"]

# carry over: each unchanged person's stored classes that did not change, renumbered
best = float("inf")
for _ in range(%(repeat)d):
    t0 = time.perf_counter()
    # the stored location, as read back: first class, then the pairs beyond it
    stored_first = first
    stored_p = np.r_[np.flatnonzero(stored_first >= 0), old_p[beyond]]
    stored_c = np.r_[stored_first[stored_first >= 0], old_c[beyond]]
    person, klass = old_of_new[stored_p], old_to_new[stored_c]
    carried = (person >= 0) & (klass >= 0)
    all_p = np.concatenate([person[carried]] + found_p)
    all_c = np.concatenate([klass[carried]] + found_c)
    best = min(best, time.perf_counter() - t0)
out["carry_over"] = best
full_p, full_c = new["pairs"]
key = np.unique(all_p * count + all_c)
full_key = np.unique(full_p * count + full_c)
out.update(pairs=int(full_key.size), carried_pairs=int(carried.sum()),
           searched_pairs=int(sum(p.size for p in found_p)),
           same_location=bool(key.size == full_key.size and np.array_equal(key, full_key)),
           same_location_searched=bool(np.array_equal(key_b, full_key)),
           same_location_partners=bool(np.array_equal(key_c, full_key)))

# the people whose classes changed are those whose candidates are intersected again: searched
# again, or a changed partner of whose classes holds them; the others' classes, and so their
# candidates, are the stored version's
in_changed_values = np.isin(np.mod(key_c, count), changed_values)
again = np.unique(np.r_[wanted_c, found_cp[1], (key_c // count)[in_changed_values]])
out["people_intersected"] = int(again.size)
values = new["classes"].values[0]
owner, texts_shown = values
dictionary, codes = np.unique(texts_shown.astype(str), return_inverse=True)
masks = np.zeros(count, dtype=np.uint64)
np.bitwise_or.at(masks, owner, np.left_shift(np.uint64(1), np.mod(codes, 64).astype(np.uint64)))
earlier = np.full(n_new, np.iinfo(np.uint64).max, dtype=np.uint64)
best = float("inf")
for _ in range(%(repeat)d):
    t0 = time.perf_counter()
    mine = np.isin(all_p, again)
    p, c = all_p[mine], all_c[mine]
    order = np.argsort(p, kind="stable")
    held_people, starts = np.unique(p[order], return_index=True)
    held = np.zeros(n_new, dtype=np.uint64)
    held[held_people] = np.bitwise_or.reduceat(masks[c[order]], starts)
    left = held & earlier
    below = int((np.bitwise_count(left) < %(l)d)[held_people].sum())
    best = min(best, time.perf_counter() - t0)
out.update(intersect_changed=best, below_l=below)

# the run's side: the groups a refresh that carries over must still group and choose for
old_groups = np.r_[np.asarray(old["people"]["groups"], dtype=np.int64),
                   np.asarray((old["people"]["version"] or {}).get("waiting_groups") or [],
                              dtype=np.int64)]
new_groups = np.r_[np.asarray(people["groups"], dtype=np.int64),
                   np.asarray((people["version"] or {}).get("waiting_groups") or [],
                              dtype=np.int64)]
stayed = np.zeros(n_old, dtype=bool)
stayed[before[before >= 0]] = True
touched_groups = np.unique(np.r_[new_groups[moved], old_groups[~stayed]])
out.update(groups=int(np.unique(new_groups).size), groups_touched=int(touched_groups.size),
           people_in_touched_groups=int(np.isin(new_groups, touched_groups).sum()))
report(out)
"""


def timed_releases(conn) -> dict:
    """Both releases made (the stable one's classes fingerprinted after), the churn, both
    refreshed (fingerprinted again); the seconds and the stable refresh's phases."""
    qis = "ARRAY[" + ", ".join(f"'{q}'" for q in QIS) + "]"
    fmt = {"qis": QIS, "sensitive": SENSITIVE, "repeat": REPEAT}
    releases, figures = {}, {}
    clock = Clock(conn)
    in_backend(conn, WATCH)
    t0 = clock.now()
    conn.execute("CREATE TABLE synth_copy AS SELECT * FROM synth")
    figures["copy"] = clock.now() - t0
    conn.execute("DROP TABLE synth_copy")
    for mode in ("fresh", "stable"):
        t0 = clock.now()
        releases[mode] = conn.execute(
            f"SELECT anon.mondrian_view('synth', k => {K}, l => {L}, quasi_identifiers => {qis}, "
            f"sensitive => ARRAY['{SENSITIVE}'], identifiers => ARRAY['id'], "
            f"refresh_mode => '{mode}', release_name => 'synth_{mode}')").fetchone()[0]
        figures[f"create {mode}"] = clock.now() - t0
    figures["old"] = in_backend(conn, FINGERPRINTS % dict(fmt, step="old"))
    churn(conn, "synth")
    for mode in ("fresh", "stable"):
        t0 = clock.now()
        conn.execute(f"SELECT anon.refresh('{releases[mode]}')")
        figures[mode] = clock.now() - t0
    figures["new"] = in_backend(conn, FINGERPRINTS % dict(fmt, step="new"))
    figures["phases"] = conn.execute(
        "SELECT phases FROM anon.refresh_history WHERE release_name LIKE '%synth_stable' "
        "ORDER BY refresh_id DESC LIMIT 1").fetchone()[0] or {}
    figures["releases"] = releases
    return figures


def fixed_steps(conn) -> dict:
    """What any stable refresh does beyond a fresh one whatever it carries over (as
    bench_stable_floor measures it): the id read, the hashes, the match, the state's write and
    read (today's state plus the location, GD["floor_state"] as INCREMENTAL left it)."""
    fmt = {"ranges": RANGES, "sets": SETS, "sensitive": SENSITIVE, "repeat": REPEAT,
           "salt": SALT, "churn": float(os.environ.get("PLPY_ANON_STABLE_CHURN", "0.01"))}
    out, clock = {}, Clock(conn)
    read = in_backend(conn, READ % fmt)
    out["read id"] = max(read["with"] - read["without"], 0.0)
    out["hash"] = in_backend(conn, HASH_PYTHON % fmt)["run"]
    out["match"] = in_backend(conn, MATCH % fmt)["match"]
    size, rows = conn.execute(
        "SELECT sum(pg_column_size(s.*))::int8, count(*) FROM anon.release_state s "
        "JOIN anon.releases r USING (release_id) WHERE r.release_name = 'synth_stable'").fetchone()
    conn.execute("CREATE TABLE floor_state (chunk int4, blob bytea)")
    for label, code in (("location", None), ("state", STATE_BYTES % {"size": size})):
        if code is not None:
            in_backend(conn, code)
        best = float("inf")
        for _ in range(REPEAT):
            t0 = clock.now()
            in_backend(conn, STATE_WRITE % {"rows": rows})
            best = min(best, clock.now() - t0)
        out[f"{label} write"] = best
        out[f"{label} read"] = in_backend(conn, STATE_READ % fmt)["read"]
    out["state bytes"] = size
    return out


def main() -> None:
    shape = {"rows": ROWS, "qis": QIS, "sensitive": SENSITIVE, "identifiers": ["id"]}
    with extension_db() as conn:
        conn.execute("CREATE TABLE warm_up AS SELECT g AS id, g % 97 AS a, 'v' || g % 5 AS s "
                     "FROM generate_series(1, 2000) g")
        conn.execute("ALTER TABLE warm_up ADD PRIMARY KEY (id)")
        for mode in ("fresh", "stable"):
            conn.execute(f"SELECT anon.mondrian_view('warm_up', k => {K}, l => {L}, "
                         "quasi_identifiers => ARRAY['a'], sensitive => ARRAY['s'], "
                         f"refresh_mode => '{mode}', release_name => 'warm_up_{mode}')")
        load(conn, "synth", shape)
        n = conn.execute("SELECT count(*) FROM synth").fetchone()[0]
        copy = copy_seconds(conn, "synth")
        timed = timed_releases(conn)
        for mode, release in timed["releases"].items():
            smallest, fewest = verified(conn, release, shape)
            print(f"  {mode} release verified from its rows: smallest class {smallest} (k = {K}), "
                  f"fewest sensitive values in a class {fewest} (l = {L})", flush=True)
            assert smallest >= K and fewest >= L, (release, smallest, fewest)
        print(f"  synth stable state after the refresh: "
              f"{state_size(conn, timed['releases']['stable'])}", flush=True)
        inc = in_backend(conn, INCREMENTAL % {"repeat": REPEAT, "l": L})
        fixed = fixed_steps(conn)
    assert inc["same_location"] and inc["same_location_searched"] and \
        inc["same_location_partners"], \
        "the carried-over location differs from the full one"
    fresh, stable, phases = timed["fresh"], timed["stable"], timed["phases"]
    print(f"clock: {CLOCK} (the backend's {'CPU' if CLOCK == 'cpu' else 'wall'} seconds); "
          f"copy in this clock {timed['copy']:.2f} s")
    print(f"synth ({n:,} rows): copy {copy:.2f} s; create fresh {timed['create fresh']:.2f} s, "
          f"stable {timed['create stable']:.2f} s", flush=True)
    print(f"refresh after {os.environ.get('PLPY_ANON_STABLE_CHURN', '0.01')} churn: fresh "
          f"{fresh:.2f} s, stable {stable:.2f} s = {stable / fresh:.2f}x (target <= {TARGET}x)")
    print("stable refresh phases (s): " + ", ".join(
        f"{p} {s:.2f}" for p, s in sorted(phases.items(), key=lambda i: -i[1])))
    print(f"classes {inc['classes']:,}: {inc['changed_classes']:,} changed or new "
          f"({inc['changed_boxes']:,} of them with a box the stored version has not), "
          f"{inc['vanished_classes']:,} of the stored version's changed or gone; people "
          f"{inc['people']:,}: {inc['changed_people']:,} new or changed; "
          f"{inc['people_intersected']:,} whose classes changed; groups {inc['groups']:,}, "
          f"{inc['groups_touched']:,} with a joiner, leaver or changed member "
          f"({inc['people_in_touched_groups']:,} people)")
    print(f"location: {inc['pairs']:,} (person, class) pairs, {inc['carried_pairs']:,} carried "
          f"over, {inc['searched_pairs']:,} searched; equal to the full check's: "
          f"{inc['same_location']}; below l {inc['below_l']}")
    parts = ", ".join(f"{k} {v:.3f} s" for k, v in inc["locate_parts"].items())
    # the cheapest of three exact ways (each checked equal to the full location)
    against_changed = inc["locate_against_changed"] + inc["carry_over"]
    locate = min(inc["locate_changed"], inc["locate_meeting"], against_changed)
    located = (f"the cheapest of: {inc['people_searched']:,} people searched against every class "
               f"and {inc['pairs_tested']:,} (person, changed class meeting a class of theirs) "
               f"pairs tested, the others' stored classes carried over, "
               f"{inc['locate_changed']:.3f} s ({parts}); {inc['people_meeting']:,} searched "
               f"(every one a stored class of whom meets a changed one) "
               f"{inc['locate_meeting']:.3f} s; the new or changed people against every class "
               f"and everyone else against the changed classes {against_changed:.3f} s; "
               f"instead, everyone against every class {inc['full_locate']:.3f} s (in the refresh "
               f"{inc['refresh_locate']:.3f} s, its classes read {inc['full_classes']:.3f} s)")
    check = {
        "class fingerprints": (timed["new"]["fingerprints"],
                               f"{timed['new']['classes']:,} classes, one statement"),
        "changed classes read": (inc["changed_read"],  # box or values changed
                                 f"{inc['changed_classes']:,} storage rows by ctid"),
        "people coded": (inc["coded"], "the run's QI texts factorized, everyone"),
        "classes linked": (inc["linked"], "the check's pairs of classes that meet, all of them"),
        "locate changed": (locate, located),
        "intersect changed": (inc["intersect_changed"],
                              f"{inc['people_intersected']:,} people"),
        "location write": (fixed["location write"], f"{inc['location_bytes'] / 1e6:.1f} MB"),
        "location read": (fixed["location read"], f"{inc['location_bytes'] / 1e6:.1f} MB"),
    }
    base = {
        "read id": (fixed["read id"], "reader with id less without"),
        "hash": (fixed["hash"], "the run's salted SHA-256"),
        "match": (fixed["match"], "hashes to the state"),
        "state write": (fixed["state write"], f"{fixed['state bytes'] / 1e6:.1f} MB"),
        "state read": (fixed["state read"], f"{fixed['state bytes'] / 1e6:.1f} MB"),
    }
    total_check = sum(s for s, _ in check.values())
    verify = (inc["carried_verified"], ("each carried (person, class) pair tested (in no sum: "
                                        "what a check that trusts no stored pair adds); all "
                                        f"hold: {inc['carried_true']}"))
    total_base = sum(s for s, _ in base.values())
    left_out = sum(phases.get(p, 0.0) for p in ("stable_groups", "stable_multisets",
                                                 "check_differences", "entries"))
    rows = [[step, f"{s:.3f}", how] for step, (s, how) in {
        **base, **check, "carried pairs verified": verify}.items()]
    rows.append(["sum, steps any stable refresh takes", f"{total_base:.3f}", ""])
    rows.append(["sum, the incremental check", f"{total_check:.3f}",
                 (f"today's check_classes + check_candidates "
                  f"{phases.get('check_classes', 0) + phases.get('check_candidates', 0):.2f} s")])
    rows.append(["fresh refresh", f"{fresh:.3f}", f"plain copy {copy:.2f} s"])
    rows.append(["stable refresh today", f"{stable:.3f}", f"{stable / fresh:.2f}x fresh"])
    floor = (fresh + total_base + total_check) / fresh
    rows.append(["floor (fresh + sums) / fresh", f"{floor:.2f}x",
                 (f"target {TARGET}x: budget beyond fresh {(TARGET - 1) * fresh:.2f} s, "
                  f"used {total_base + total_check:.2f} s, left "
                  f"{(TARGET - 1) * fresh - total_base - total_check:.2f} s")])
    rows.append([("left out: today's stable_groups + stable_multisets + check_differences + "
                  "entries"), f"{left_out:.3f}",
                 f"{inc['groups_touched']:,} of {inc['groups']:,} groups touched"])
    table = markdown_table(["step", "seconds", "measured"], rows)
    print(table)
    (results_dir() / "stable_incremental.md").write_text(table + "\n")


if __name__ == "__main__":
    main()
