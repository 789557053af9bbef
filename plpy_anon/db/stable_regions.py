"""A stable release created beyond ``plpy_anon.build_memory``: its first version built, checked
and remembered one region of its source at a time (docs/out-of-core.md, "The stable mode
region by region").

The regions are the out-of-core run's (out_of_core.py: top cuts chosen by SQL aggregates, as for
a fresh release); each region's rows are read, their people hashed, grouped by the ordinary fit
and released in turn. The run keeps of each region only what the check must take from it: its
people's groups in the order of their hashes (4 bytes a person), a digest of those hashes and
their records, and its groups' multisets and unions.

The check (:meth:`RegionChecks.check`, called by republication.check_and_remember) first tests,
in one pass over the released rows' classes, that each class's box lies inside one region's box
(every range's both ends, every set's every value, inside the cuts of the region its corner lies
in: :meth:`RegionChecks.classes_inside`), then reads each region's rows again, refuses a region
whose people or records are not those the run read (the source changed meanwhile), and matches
its people with that region's classes only (those whose corner lies in it). That is every class
that can hold them: a region is a conjunction of cuts, so regions are disjoint boxes covering
the domain, and the fit makes each class of one region's rows, whose ranges and sets are the
tight bounds of those rows; so a class's box lies inside its region's box (tested), and a
person with no NULL in a QI released as a range lies in no other region's box. A NULL in such a
QI, which lies in every range to an analyst, is not built region by region (54000). The check
then intersects, counts and remembers the region's people (republication.remember: the region's
own rows of anon.release_state, a run in the order of their hashes), compares the region's
classes with the run's groups (multisets, unions of classes that meet, parts linked by people),
and after the last region stores the version (anon.release_versions) as the in-memory check
does.

Each region's box (its cuts: :func:`box_of`) is stored beside the state (anon.release_regions,
read through anon.readable_release_regions: :func:`store_boxes`), so that
a release created today has its boxes when a refresh region by region is built: that refresh
must know which region remembered each person. It is not built: a refresh beyond the budget is
refused before anything is read (out_of_core.refuse_stable_refresh_over_budget; what it must
settle: docs/out-of-core.md, "Not built").
"""
from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass

import numpy as np

from plpy_anon.core import containment
from plpy_anon.core.errors import AnonError, InsufficientData
from plpy_anon.core.interrupts import check as check_interrupts
from plpy_anon.db import class_counts, guards, interrupts, release_rows, republication, timing
from plpy_anon.db import columns as catalog
from plpy_anon.db.sqltext import ident, jsonb, local_settings, progress, run
from plpy_anon.spec import Promise

#: range types whose upper bound is stored exclusive (canonical discrete ranges)
DISCRETE_RANGES = ("int4range", "int8range", "daterange")
#: each discrete range's element type's largest value
TOP_OF = {"int4range": "2147483647", "int8range": "9223372036854775807",
          "daterange": "'infinity'::date"}


class NullAcrossRegions(AnonError):
    """A NULL in a QI released as a range: it lies in every class's range to an analyst, so the
    classes it links span regions (program_limit_exceeded: not built region by region)."""

    sqlstate = "54000"


class SourceChanged(AnonError):
    """A region read again by the check is not what the run read (serialization_failure)."""

    sqlstate = "40001"


def first_version(plpy, release_id: int) -> bool:
    """Whether a stable release's run is its first (nothing remembered or stored yet)."""
    return not run(plpy, """
        SELECT EXISTS (SELECT FROM anon.release_state WHERE release_id = $1)
            OR EXISTS (SELECT FROM anon.release_versions WHERE release_id = $1) AS seen""",
                   ["int4"], [release_id])[0]["seen"] and not republication.published_versions(
        plpy, release_id)


def with_secrets(release_method, plpy, release: dict, read):
    """(release, spec, read) of a stable run: its parameters with its secrets (the salt of its
    person hashes, as method.run gives them), and ``read`` run as the state's owner."""
    with release_rows.owner_state(plpy):
        secret = release_rows.secrets(plpy, release["release_id"], jsonb(release["parameters"]))
    if secret:
        release = {**release, "parameters": json.dumps({**jsonb(release["parameters"]), **secret})}

    def owners_read(*args, **kwargs):
        with release_rows.owner_state(plpy):
            return read(*args, **kwargs)
    return release, release_method.spec_of(jsonb(release["parameters"])), owners_read


def _digest(persons: np.ndarray, records) -> bytes:
    """The people of a region (``persons``: their hashes in order) and their records."""
    out = hashlib.sha256(np.ascontiguousarray(persons).tobytes())
    if records is not None:
        out.update(np.ascontiguousarray(records, dtype="<u8").tobytes())
    return out.digest()


@dataclass
class RegionRun:
    """What the run keeps of one region for its check."""

    bounds: tuple
    rows: int
    digest: bytes
    #: each person's group, people in the order of their hashes
    groups: np.ndarray
    #: the region's version as republication.run_people gives it (group ids, counts over
    #: ``values``, unions)
    version: dict


class RegionChecks:
    """The regions of a stable release's first version, kept by the run (:meth:`add`) and checked
    after it from the released rows (:meth:`check`). ``read(ctx, where, whole, people_state=)``:
    the method's read of one region; ``src``: the run's out_of_core.Source (its predicates);
    ``region_read``: the settings a region is read with."""

    def __init__(self, ctx, src, read, region_read, label: str, budget: int):
        self.ctx, self.src, self.read, self.region_read = ctx, src, read, region_read
        self.label, self.budget = label, budget
        self.regions: list[RegionRun] = []

    def add(self, region, rows, model, first_class: int) -> None:
        """Keep what the check needs of one region just fitted (its classes' ids offset by
        ``first_class``): refuses a NULL in a QI released as a range."""
        for col, enc in zip(rows.qis, rows.encoded):
            if republication._released_type(col) != "text[]" and enc.null_code is not None \
                    and bool((enc.codes == enc.null_code).any()):
                raise NullAcrossRegions(
                    f"refresh_mode => 'stable' beyond plpy_anon.build_memory is built region by "
                    f"region, and column \"{col.name}\" of {self.label} holds NULL, which an "
                    "analyst finds in every class's range: the classes it links span regions",
                    detail="Each region is checked against its own classes only; a NULL in a QI "
                           "released as a range would need every region's classes.",
                    hint="Raise plpy_anon.build_memory to what the stable run holds in one "
                         "backend, give the column a value in every row, or create the release "
                         "with refresh_mode => 'fresh'.")
        people = rows.people
        groups = np.asarray(model.labels_, dtype=np.int64) + first_class
        order = republication._hash_order(people.persons)
        version = republication.run_people(rows, groups, None)["version"]
        if version is not None:
            version = {key: version[key] for key in
                       ("group_ids", "counts", "values", "linked", "people_linked")}
        self.regions.append(RegionRun(
            region.bounds, rows.data.n_rows,
            _digest(people.persons[order], None if people.records is None else people.records[order]),
            groups[order].astype(np.int32), version))

    def class_within(self, alias: str, bounds) -> str:
        """SQL true for a released class (``alias``: its row) whose box lies inside the region
        of ``bounds``: each range's lowest and highest value and each set's every value inside
        the region's cuts on that QI."""
        parts = []
        for a in sorted({b.qi for b in bounds}):
            mine = [b for b in bounds if b.qi == a]
            col = self.src.qis[a]
            q = f"{alias}.{ident(self.ctx.plpy, col.name)}"
            released = republication._released_type(col)
            if released == "text[]":
                value = f"CAST(e.v AS {col.base_display_type or col.display_type})"
                parts.append(f"NOT EXISTS (SELECT FROM pg_catalog.unnest({q}) AS e(v) "
                             f"WHERE NOT ({self._side(a, value, mine)}))")
                continue
            high = f"pg_catalog.upper({q})"
            if released in DISCRETE_RANGES:
                # a class holding the type's largest value has no exclusive bound: [x,)
                high = (f"(CASE WHEN pg_catalog.upper_inf({q}) THEN {TOP_OF[released]} "
                        f"WHEN pg_catalog.upper_inc({q}) THEN {high} ELSE {high} - 1 END)")
            parts.append(f"{self._side(a, f'pg_catalog.lower({q})', mine)} AND "
                         f"{self._side(a, high, mine)}")
        return " AND ".join(parts) or "true"

    def class_corner_in(self, alias: str, bounds) -> str:
        """SQL true for a released class (``alias``: its row) one corner of whose box lies in
        the region of ``bounds``: each range's lowest value, each set's first (a class whose box
        lies inside one region, :meth:`class_within`, is that region's)."""
        parts = []
        for a in sorted({b.qi for b in bounds}):
            col = self.src.qis[a]
            q = f"{alias}.{ident(self.ctx.plpy, col.name)}"
            corner = f"CAST({q}[1] AS {col.base_display_type or col.display_type})" \
                if republication._released_type(col) == "text[]" else f"pg_catalog.lower({q})"
            parts.append(self._side(a, corner, [b for b in bounds if b.qi == a]))
        return " AND ".join(parts) or "true"

    def classes_inside(self, plpy, released: str, qis) -> tuple[int, int]:
        """(released classes, those whose box lies inside the region their corner lies in),
        from the released rows in one pass: the regions are disjoint and cover the domain, so
        each corner lies in one region, and each class's box is tested against that one."""
        if not qis:
            return 1, 1
        columns = ", ".join(f"r.{ident(plpy, c.name)}" for c in qis)
        inside = "CASE " + " ".join(
            f"WHEN {self.class_corner_in('c', r.bounds)} THEN {self.class_within('c', r.bounds)}"
            for r in self.regions) + " ELSE false END"
        row = run(plpy, f"SELECT pg_catalog.count(*) AS n, pg_catalog.count(*) FILTER (WHERE "
                        f"{inside}) AS inside FROM (SELECT {columns} FROM {released} r "
                        f"GROUP BY {columns}) AS c")[0]
        return int(row["n"]), int(row["inside"])

    def _side(self, a: int, value: str, bounds) -> str:
        """The region's cuts on QI ``a`` (``bounds``) tested on ``value`` instead of the column."""
        view = copy.copy(self.src)
        view.names = list(self.src.names)
        view.names[a] = value
        return view.predicate(bounds)

    def check(self, plpy, release: dict) -> dict:
        """The cross-version check of the first version, region by region (see the module
        docstring); returns its figures as republication.check_and_remember does."""
        promise = Promise.of(jsonb(release["parameters"]))
        rid = release["release_id"]
        tbl = guards.table_in_query(plpy, release["source"])
        cols = {c.name: c for c in catalog.table_columns(plpy, tbl)}
        qis = [cols[name] for name in promise.quasi_identifiers or ()]
        sensitive = [cols[name] for name in promise.sensitive or ()]
        empty = republication.State(np.empty(0, dtype="S32"), *(np.empty(0, dtype=np.int64),) * 3, [])
        released = republication.released_relation(plpy, release)
        with timing.phase("check_classes"), local_settings(
                plpy, **class_counts.pass_settings(plpy, self.budget), jit="off"):
            total, inside = self.classes_inside(plpy, released, qis)
            # asked once for every region (a region's classes merge where the release's do)
            stored = class_counts.storage_for(plpy, release)
            merges = stored is not None and class_counts.classes_merge(
                plpy, stored[1], [c.name for c in qis],
                class_counts.pass_settings(plpy, None)["work_mem"])
        if inside != total:
            raise InsufficientData(
                f"the released classes of {release['release_schema']}.{release['release_name']} "
                f"do not each lie inside one region of its run ({total - inside} of {total} lie "
                "across regions); nothing was published",
                hint="Report this with the release's parameters.")
        progress(plpy, f"checking {sum(r.rows for r in self.regions):,} people region by region "
                       f"({len(self.regions)} regions)")
        figures: dict = {}
        to_store = {"ids": [], "sizes": [], "vals": [], "linked": [], "people_linked": [],
                    "any_linked": False}
        # people a state row: as for the whole table's people, and at most MOST_STATE_ROWS
        # rows in all though each region ends a row of its own
        everyone = sum(r.rows for r in self.regions)
        row_people = max(republication.people_a_row(plpy, everyone), -(-everyone // max(
            1, republication.MOST_STATE_ROWS - len(self.regions))))
        chunk = seen_classes = overlapping = 0
        for number, region in enumerate(self.regions):
            step = f"checking region {number + 1} of {len(self.regions)}"
            with interrupts.honoured(plpy):
                progress(plpy, f"{step}: reading its people")
                where = self.src.predicate(region.bounds) if region.bounds else None
                with timing.phase("read_people"), self.region_read(plpy):
                    rows = self.read(self.ctx, where, self.src.whole, people_state=empty)
                people = rows.people
                order = republication._hash_order(people.persons)
                if rows.data.n_rows != region.rows or _digest(
                        people.persons[order],
                        None if people.records is None else people.records[order]) != region.digest:
                    raise SourceChanged(
                        f"{self.label} changed while its stable release was built region by "
                        f"region: region {number}'s rows are not those the run read",
                        hint="Create the release again when the table is not being written "
                             "(or LOCK it IN SHARE MODE in the same transaction first).")
                groups = np.empty(order.size, dtype=np.int64)
                groups[order] = region.groups
                qi_texts = people.qi_texts
                progress(plpy, f"{step}: matching its classes")
                with timing.phase("check_classes"):
                    classes = republication.released_classes(
                        plpy, release, qis, sensitive, qi_texts, [None in t for t in qi_texts],
                        within=lambda alias, bounds=region.bounds: self.class_corner_in(alias, bounds),
                        merges=merges)
                    linked = republication.linked_classes(classes) \
                        if classes.linkable[0].shape[1] else None
                    matched = containment.contained(classes.axes, order.size, classes.count,
                                                    linked=linked)
                progress(plpy, f"{step}: remembering its people")
                with timing.phase("check_candidates"):
                    records = None if people.records is None else (
                        people.records, np.empty(0, dtype=np.uint64))
                    got = republication.remember(plpy, rid, promise, people.hashes, groups, classes,
                                                 empty, matched, ((), ()), records, (),
                                                 region=number, first_chunk=chunk,
                                                 row_people=row_people)
                chunk += got.pop("state_rows")
                _merge(figures, got)
                if region.version is not None:
                    with timing.phase("check_differences"):
                        overlapping += _same_as_run(release, region.version, classes, matched)
                        _keep_version(to_store, region.version)
                seen_classes += classes.count
                del rows, people, classes, matched
        if seen_classes != total:
            raise InsufficientData(
                f"the released classes of {release['release_schema']}.{release['release_name']} "
                f"are not each in one region of its run ({seen_classes} found in regions, "
                f"{total} released); nothing was published",
                hint="Report this with the release's parameters.")
        run(plpy, "UPDATE anon.release_state SET chunks = $2 WHERE release_id = $1",
            ["int4", "int4"], [rid, chunk])
        store_boxes(plpy, rid, self.src, [r.bounds for r in self.regions])
        figures["regions"] = len(self.regions)
        if to_store["ids"]:
            _store_version(plpy, rid, to_store)
            figures.update({"held_back": 0, "counterfeit": 0,
                            "groups_by_choice": {"advance": len(to_store["ids"])},
                            "versions_compared": 0, "overlapping_classes": overlapping,
                            "unsafe_differences": 0, "unsafe_unions": 0})
        l = promise.l
        if l is not None and figures.get("below_l"):
            raise InsufficientData(
                f"this version of {release['release_schema']}.{release['release_name']} would "
                f"leave {figures['below_l']} people with fewer than l = {l} candidate sensitive "
                "values across the versions published (an analyst who kept them all could "
                "narrow them so); nothing was published",
                detail=json.dumps(figures),
                hint="The published version stays. Earlier versions cannot be unpublished: "
                     "recreating the release with replace => true starts a new history, which "
                     "analysts may intersect with the old.")
        return figures


def box_of(src, bounds) -> list[dict]:
    """A region's cuts (``bounds``: core.regions.Bound) as stored (anon.release_regions): a cut
    at a value keeps it as text; a categorical QI cut in its order of frequency (an int
    position: out_of_core.Source.left) keeps the texts its predicate tests, since that order is
    the creation's own, not a later table's."""
    out = []
    for b in bounds:
        cut = {"qi": b.qi, "name": src.qis[b.qi].name, "left": b.left, "strict": b.strict}
        if isinstance(b.value, int):
            order = src.by_frequency[b.qi]
            left = order[:b.value if b.strict else b.value + 1]
            tested = left if 2 * len(left) <= len(order) else order[len(left):]
            cut.update({"texts": [t for t in tested if t is not None],
                        "texts_left": tested is left, "null_left": None in left})
        else:
            cut["value"] = b.value
        out.append(cut)
    return out


STORE_BOX = "INSERT INTO anon.release_regions (release_id, region, bounds) VALUES ($1, $2, $3)"


def store_boxes(plpy, release_id: int, src, regions: list) -> None:
    """Each region's box (``regions``: their bounds, in the order of their numbers in
    anon.release_state.region) stored beside the state, for its refreshes."""
    run(plpy, republication.FORGET_REGIONS, ["int4"], [release_id])
    for number, bounds in enumerate(regions):
        run(plpy, STORE_BOX, ["int4", "int4", "jsonb"],
            [release_id, number, json.dumps(box_of(src, bounds))])


def _merge(figures: dict, got: dict) -> None:
    """One region's figures (republication.remember's) added to the release's."""
    for key, value in got.items():
        if key not in figures or figures[key] is None:
            figures[key] = value
        elif value is None:
            continue
        elif key in ("most_versions",):
            figures[key] = max(figures[key], value)
        elif key == "fewest_candidates":
            figures[key] = min(figures[key], value)
        else:
            figures[key] += value


def _same_as_run(release: dict, version: dict, classes, matched) -> int:
    """A region's released classes (from the released rows) against the run's groups of the
    region, as republication.check_differences compares a whole version's: the multisets as a
    bag, the unions of classes that could hold one person, the parts some person links.
    Returns the region's classes that overlap another; refuses (22000) otherwise."""
    name = f"{release['release_schema']}.{release['release_name']}"
    group_counts, class_multiset, group_multiset, (pair_a, pair_b) = \
        republication.same_multisets_and_unions(release, version, classes)
    person, klass = matched
    several = (np.bincount(person) > 1)[person] if person.size else np.zeros(0, dtype=bool)
    person, klass = person[several], klass[several]
    by = np.lexsort((klass, person))
    person, klass = person[by], klass[by]
    same = person[1:] == person[:-1]
    if republication._union_signatures(klass[:-1][same], klass[1:][same], classes.count,
                                       class_multiset) != republication._union_signatures(
            *republication._group_pairs(version["group_ids"], version["people_linked"]),
            group_counts.shape[0], group_multiset):
        raise InsufficientData(
            f"the released classes of {name} that some person in the table could be in at once "
            "are not the groups its run checked together; nothing was published",
            hint="Report this with the release's parameters.")
    return int(np.unique(np.concatenate([pair_a, pair_b])).size)


def _keep_version(to_store: dict, version: dict) -> None:
    """One region's groups added to the version to store: ids, sizes, each group's values (one
    per published row: joined as one text, each ended by 0x01 but the last, NULL 0x02, where no
    value is or holds a mark; else listed) and unions."""
    values = version["values"]
    ids = list(version["group_ids"])
    counts = np.asarray(version["counts"], dtype=np.int64).reshape(len(ids), len(values))
    held = np.repeat(np.tile(np.arange(len(values)), len(ids)), counts.ravel())
    if any(v is not None and ("\x01" in v or v == "\x02") for v in values):
        to_store["vals"].append(np.asarray(values, dtype=object)[held].tolist())
    else:
        marked = np.asarray(["\x02" if v is None else v for v in values], dtype=object)
        to_store["vals"].append("\x01".join(marked[held].tolist()))
    to_store["ids"] += ids
    to_store["sizes"] += counts.sum(axis=1).tolist()
    to_store["any_linked"] |= version["linked"] is not None
    # a group in no union of others is named after itself (no pair: as no union)
    to_store["linked"] += ids if version["linked"] is None else list(version["linked"])
    to_store["people_linked"] += list(version["people_linked"])


def _store_version(plpy, release_id: int, to_store: dict) -> None:
    """The first version stored (anon.release_versions), as republication.store_version
    stores one: its values as one text, or listed where a region's are (one empty text, which
    joins as no text, listed too)."""
    parts = to_store["vals"]
    marks = any(isinstance(part, list) for part in parts) or parts == [""]
    if marks:
        vals = [t for part in parts for t in (
            part if isinstance(part, list) else [None if v == "\x02" else v for v in part.split("\x01")])]
    else:
        vals = "\x01".join(parts)
    del parts[:]
    check_interrupts()
    republication.store_version(plpy, release_id, republication.CheckedVersion(
        [int(g) for g in to_store["ids"]], [int(s) for s in to_store["sizes"]], vals, {}, 0, 0,
        [int(g) for g in to_store["linked"]] if to_store["any_linked"] else None,
        None, None, [int(g) for g in to_store["people_linked"]]))
