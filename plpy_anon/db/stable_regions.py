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
read through anon.readable_release_regions: :func:`store_boxes`). A refresh beyond the budget is
planned from them (:func:`plan_refresh`: one pass over the source in SQL, each row's box and its
person's hash joined with the state's). A person stays in the region that remembers them: a
known person (published, absent or held back) is read, fitted and checked with that region
whatever box their QIs lie in now (a mover, listed by TID), a joiner with their box's region; so
every person's history and every group lives in one region, and no mover links any. Each region
is refreshed by the in-memory stable machinery restricted to its rows, state rows and groups of
the stored versions, and checked region by region after the write (:class:`RegionRefresh`): a
class holding a mover may reach beyond its region's box (as classes grow into each other in
memory: an analyst finds more candidates, not fewer), so the check finds a region's classes by
the bounds the run kept of its movers' classes, or by their corner in its box. What still links
regions (a person two regions remember, a held back person waiting in another region's group, a
group spread over regions: core.refresh_groups) is refused before anything is written
(out_of_core.refresh_stable_by_regions; docs/out-of-core.md, "The stable refresh region by
region").
"""
from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field

import numpy as np

from plpy_anon.core import containment, refresh_groups
from plpy_anon.core.errors import AnonError, InsufficientData, SerializationFailure
from plpy_anon.core.interrupts import check as check_interrupts
from plpy_anon.core.refresh_groups import Axis
from plpy_anon.db import (
    class_counts,
    guards,
    interrupts,
    release_rows,
    republication,
    timing,
)
from plpy_anon.db import columns as catalog
from plpy_anon.db.sqltext import ident, jsonb, local_settings, progress, run
from plpy_anon.spec import Promise

#: range types whose upper bound is stored exclusive (canonical discrete ranges)
DISCRETE_RANGES = ("int4range", "int8range", "daterange")
#: each discrete range's element type's largest value
TOP_OF = {"int4range": "2147483647", "int8range": "9223372036854775807",
          "daterange": "'infinity'::date"}


def range_highest(q: str, released: str) -> str:
    """SQL of the highest value the released range ``q`` (of type ``released``) holds: a discrete
    range's exclusive upper bound less one (a range holding the type's largest value has no
    exclusive bound: [x,)), another's upper bound."""
    high = f"pg_catalog.upper({q})"
    if released not in DISCRETE_RANGES:
        return high
    return (f"(CASE WHEN pg_catalog.upper_inf({q}) THEN {TOP_OF[released]} "
            f"WHEN pg_catalog.upper_inc({q}) THEN {high} ELSE {high} - 1 END)")


class NullAcrossRegions(AnonError):
    """A NULL in a QI released as a range: it lies in every class's range to an analyst, so the
    classes it links span regions (program_limit_exceeded: not built region by region)."""

    sqlstate = "54000"


class SourceChanged(SerializationFailure):
    """A region read again by the check is not what the run read: the source's writers, not
    another refresh (a SerializationFailure, so a refresh's record keeps this message)."""


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


def _people_digest(people) -> tuple[np.ndarray, bytes]:
    """(the order of ``people``'s hashes, the digest of their hashes and records in that
    order): what a region's run and its check compare, whatever order the rows were read in."""
    order = republication._hash_order(people.persons)
    return order, _digest(people.persons[order],
                          None if people.records is None else people.records[order])


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
        order, digest = _people_digest(people)
        version = republication.run_people(rows, groups, None)["version"]
        if version is not None:
            version = {key: version[key] for key in
                       ("group_ids", "counts", "values", "linked", "people_linked")}
        self.regions.append(RegionRun(
            region.bounds, rows.data.n_rows, digest, groups[order].astype(np.int32), version))

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
            parts.append(f"{self._side(a, f'pg_catalog.lower({q})', mine)} AND "
                         f"{self._side(a, range_highest(q, released), mine)}")
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

    def classes_released(self, plpy, released: str, qis) -> int:
        """How many classes ``released`` shows (its rows grouped by their QIs)."""
        if not qis:
            return 1
        columns = ", ".join(f"r.{ident(plpy, c.name)}" for c in qis)
        return int(run(plpy, f"SELECT pg_catalog.count(*) AS n FROM (SELECT {columns} FROM "
                             f"{released} r GROUP BY {columns}) AS c")[0]["n"])

    def _side(self, a: int, value: str, bounds) -> str:
        """The region's cuts on QI ``a`` (``bounds``) tested on ``value`` instead of the column."""
        view = copy.copy(self.src)
        view.names = list(self.src.names)
        view.names[a] = value
        return view.predicate(bounds)

    def released_inside_regions(self, plpy, release: dict, promise, boxes: bool = True):
        """(QI columns, sensitive columns, how many classes are released, whether stored classes
        merge) of ``release``, once every released class is shown to lie inside one region (else
        22000, nothing published): a region's people can then be matched with its classes
        alone. ``boxes``: False counts the classes alone (a refresh with movers)."""
        tbl = guards.table_in_query(plpy, release["source"])
        cols = {c.name: c for c in catalog.table_columns(plpy, tbl)}
        qis = [cols[name] for name in promise.quasi_identifiers or ()]
        sensitive = [cols[name] for name in promise.sensitive or ()]
        released = republication.released_relation(plpy, release)
        with timing.phase("check_classes"), local_settings(
                plpy, **class_counts.pass_settings(plpy, self.budget), jit="off"):
            total, inside = self.classes_inside(plpy, released, qis) if boxes \
                else (self.classes_released(plpy, released, qis),) * 2
            # asked once for every region (a region's classes merge where the release's do)
            stored = class_counts.storage_for(plpy, release)
            merges = stored is not None and class_counts.classes_merge(
                plpy, stored[1], [c.name for c in qis],
                class_counts.pass_settings(plpy, None)["work_mem"])
        if inside != total:
            raise InsufficientData(
                f"the released classes of {release['release_schema']}.{release['release_name']} "
                f"do not each lie inside one region ({total - inside} of {total} lie across "
                "regions); nothing was published",
                hint="Report this with the release's parameters.")
        return qis, sensitive, total, merges

    def check(self, plpy, release: dict) -> dict:
        """The cross-version check of the first version, region by region (see the module
        docstring); returns its figures as republication.check_and_remember does."""
        promise = Promise.of(jsonb(release["parameters"]))
        rid = release["release_id"]
        empty = republication.State(np.empty(0, dtype="S32"), *(np.empty(0, dtype=np.int64),) * 3, [])
        qis, sensitive, total, merges = self.released_inside_regions(plpy, release, promise)
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
                order, digest = _people_digest(people)
                if rows.data.n_rows != region.rows or digest != region.digest:
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
        _refuse_classes_outside(release, seen_classes, total)
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
        republication.refuse_below_l(release, promise, figures)
        return figures


def _refuse_classes_outside(release: dict, seen: int, total: int) -> None:
    """Refuse a version whose regions' classes are not all its released classes (a class found
    in no region, or in two: the check region by region would not have seen it once)."""
    if seen != total:
        raise InsufficientData(
            f"the released classes of {release['release_schema']}.{release['release_name']} are "
            f"not each in one region ({seen} found in regions, {total} released); nothing was "
            "published",
            hint="Report this with the release's parameters.")


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


def stored_boxes(plpy, release_id: int) -> list[list[dict]]:
    """The boxes of a release's regions, in their order (none: its state is one region)."""
    rows = run(plpy, "SELECT region, bounds FROM anon.readable_release_regions "
                     "WHERE release_id = $1 ORDER BY region", ["int4"], [release_id])
    if [r["region"] for r in rows] != list(range(len(rows))):
        raise InsufficientData(
            f"the regions of release {release_id} (anon.release_regions) are not numbered "
            "0, 1, ... as its creation stored them",
            hint="Restore the release's rows of anon.release_regions from a backup, or recreate "
                 "the release knowingly.")
    return [jsonb(r["bounds"]) for r in rows]


def _broken_box(release_id: int, cut) -> InsufficientData:
    return InsufficientData(
        f"a stored region of release {release_id} (anon.release_regions) holds a cut that is "
        f"not one its creation wrote: {json.dumps(cut)[:200]}",
        hint="Restore the release's rows of anon.release_regions from a backup, or recreate the "
             "release knowingly.")


def _well_formed(cut, src) -> bool:
    """Whether a stored cut is one :func:`box_of` writes for a QI of ``src`` (a release's
    owner may write its own rows of anon.release_regions)."""
    if not isinstance(cut, dict) or not isinstance(cut.get("qi"), int) \
            or not 0 <= cut["qi"] < len(src.qis) or cut.get("name") != src.qis[cut["qi"]].name \
            or not all(isinstance(cut.get(key), bool) for key in ("left", "strict")):
        return False
    if "texts" in cut:
        return isinstance(cut["texts"], list) and all(isinstance(t, str) for t in cut["texts"]) \
            and all(isinstance(cut.get(key), bool) for key in ("texts_left", "null_left"))
    return "value" in cut and (cut["value"] is None or isinstance(cut["value"], str))


def _checked(src, box, release_id: int) -> list[dict]:
    if not isinstance(box, list):
        raise _broken_box(release_id, box)
    for cut in box:
        if not _well_formed(cut, src):
            raise _broken_box(release_id, cut)
    return box


def box_predicate(src, box: list[dict], release_id: int) -> str:
    """SQL true for a row of ``src`` inside a stored box (:func:`box_of`): the predicate its
    region was read with at creation (out_of_core.Source.left)."""
    parts = []
    for cut in _checked(src, box, release_id):
        a = cut["qi"]
        c = src.names[a]
        if "texts" in cut:
            held = src._member(a, cut["texts"])
            if cut["texts_left"]:
                side = f"({c} IS NULL OR {held})" if cut["null_left"] else held
            else:
                side = f"(NOT {held})" if cut["null_left"] else f"({c} IS NOT NULL AND NOT {held})"
        else:
            side = src.left(a, cut["value"], cut["strict"])
        parts.append(side if cut["left"] else f"(NOT {side})")
    return " AND ".join(parts) if parts else "true"


def box_case(src, boxes: list, release_id: int) -> str:
    """SQL of the number of the box a row lies in, NULL for none (``boxes``: (number, cuts)).
    The boxes are the leaves of the creation's tree of cuts, each one's cuts its path from the
    root: where every box's first cut is one cut (its sides apart), a nested ``CASE`` tests it
    once and goes on with each side's boxes, so a row is tested on its path's cuts alone."""
    def cut_of(cut):
        return {key: value for key, value in cut.items() if key != "left"}
    if len(boxes) == 1:
        number, cuts = boxes[0]
        return str(number) if not cuts else \
            f"CASE WHEN {box_predicate(src, cuts, release_id)} THEN {number} END"
    if all(isinstance(cuts, list) and cuts and isinstance(cuts[0], dict) for _, cuts in boxes):
        first = cut_of(boxes[0][1][0])
        if all(cut_of(cuts[0]) == first for _, cuts in boxes):
            left = [(number, cuts[1:]) for number, cuts in boxes if cuts[0]["left"] is True]
            right = [(number, cuts[1:]) for number, cuts in boxes if cuts[0]["left"] is False]
            if left and right and len(left) + len(right) == len(boxes):
                side = box_predicate(src, [{**boxes[0][1][0], "left": True}], release_id)
                return (f"CASE WHEN {side} THEN ({box_case(src, left, release_id)}) "
                        f"ELSE ({box_case(src, right, release_id)}) END")
    return "CASE " + " ".join(f"WHEN {box_predicate(src, cuts, release_id)} THEN {number}"
                              for number, cuts in boxes) + " END"


#: a set QI's texts in no stored cut (each cut tests them alike) and its NULL, as symbols
OTHER_TEXT, NULL_TEXT = 0, 1


def box_axes(plpy, src, boxes: list, release_id: int) -> list[dict]:
    """Each stored box as core.refresh_groups axes ({QI: Axis}). A QI cut at values is a line of
    positions: NULL at -1 (lowest, as the predicates put it), the i-th distinct cut value (in
    the column's order, sorted by SQL) at 2i + 1 and the values between two cut values at the
    even position between; a set taken as the values between its ends (never narrower than it
    is). A QI cut at its texts: the cuts' texts, any other text and NULL as symbols."""
    boxes = [_checked(src, box, release_id) for box in boxes]
    positions: dict = {}
    for a in sorted({c["qi"] for box in boxes for c in box if "texts" not in c}):
        values = sorted({c["value"] for box in boxes for c in box
                         if c["qi"] == a and "texts" not in c and c["value"] is not None})
        if values:
            listed = ", ".join(f"({i}, {src.literal(a, v)})" for i, v in enumerate(values))
            ranked = run(plpy, f"SELECT i FROM (VALUES {listed}) AS v(i, x) ORDER BY x, i")
            positions[a] = {values[r["i"]]: 2 * rank + 1 for rank, r in enumerate(ranked)}
        else:
            positions[a] = {}
    symbols = {a: {t: 2 + i for i, t in enumerate(sorted(
        {t for box in boxes for c in box if c["qi"] == a and "texts" in c for t in c["texts"]}))}
        for a in {c["qi"] for box in boxes for c in box if "texts" in c}}
    out = []
    for box in boxes:
        axes: dict = {}
        for cut in box:
            a = cut["qi"]
            if "texts" in cut:
                every = set(symbols[a].values()) | {OTHER_TEXT, NULL_TEXT}
                listed = {symbols[a][t] for t in cut["texts"]}
                left = {s for s in every - {NULL_TEXT}
                        if (s in listed) == cut["texts_left"]} | (
                    {NULL_TEXT} if cut["null_left"] else set())
                side = frozenset(left if cut["left"] else every - left)
                held = axes.get(a, Axis(symbols=frozenset(every)))
                if held.symbols is None:
                    raise _broken_box(release_id, cut)
                axes[a] = Axis(symbols=held.symbols & side)
                continue
            if cut["value"] is None:
                top = -1                       # the left side is NULL alone
            else:
                top = positions[a][cut["value"]] - (1 if cut["strict"] else 0)
            low, high = (-1, top) if cut["left"] else (top + 1, 2 * len(positions[a]) + 1)
            held = axes.get(a, Axis(-1, 2 * len(positions[a]) + 1))
            if held.symbols is not None:
                raise _broken_box(release_id, cut)
            axes[a] = Axis(max(held.low, low), min(held.high, high))
        out.append(axes)
    return out


def person_text(plpy, identifiers: list) -> str | None:
    """SQL of the text a stable run hashes for a row's person (republication.person_hashes), or
    NULL for a row whose text SQL does not make the same (a composite identifier holding the
    separator, whose text is JSON)."""
    texts = [f"{ident(plpy, c.name)}::pg_catalog.text" if c.type_name in ("int2", "int4", "int8")
             else c.as_text(plpy) for c in identifiers]
    if not texts:
        return None
    if len(texts) == 1:
        return texts[0]
    mark = f"E'\\x{ord(republication.SEPARATOR):02x}'"
    held = " OR ".join(f"pg_catalog.strpos({t}, {mark}) > 0" for t in texts)
    return f"CASE WHEN {held} THEN NULL ELSE pg_catalog.concat_ws({mark}, {', '.join(texts)}) END"


#: the people of a release's state (``column``: persons or waiting_persons), each with the
#: region whose rows hold them
STATE_PEOPLE = """
SELECT s.region AS stored, pg_catalog.substr(s.{column}, 32 * (g.i - 1) + 1, 32) AS person
FROM anon.readable_release_state s
     CROSS JOIN LATERAL pg_catalog.generate_series(1, pg_catalog.octet_length(s.{column}) / 32) AS g(i)
WHERE s.release_id = $1"""
#: each group of the state and a region whose rows hold one of its people
GROUP_REGIONS = """
SELECT DISTINCT m.g, s.region
FROM anon.readable_release_state s CROSS JOIN LATERAL pg_catalog.unnest(s.member_groups) AS m(g)
WHERE s.release_id = $1"""
#: the people the newest stored version held back and the group each waits in
WAITING_GROUPS = """
SELECT w.person, w.g
FROM anon.readable_release_versions v
     CROSS JOIN LATERAL ROWS FROM (pg_catalog.unnest(v.waiting),
                                 pg_catalog.unnest(v.waiting_groups)) AS w(person, g)
WHERE v.release_id = $1
  AND v.version = (SELECT pg_catalog.max(version) FROM anon.release_versions WHERE release_id = $1)"""


@dataclass(frozen=True)
class Mover:
    """A known person whose row lies in another box than the region remembering them: read,
    fitted and checked with that region (``kept``), not with their box's (``box``)."""

    tableoid: int
    ctid: str
    kept: int
    box: int
    #: their person's hash, as the run hashes it
    person: bytes


@dataclass
class RefreshPlan:
    """Each stored region's rows at a stable refresh beyond the budget (:func:`plan_refresh`):
    a known person's with the region remembering them, a joiner's with their box's; and what
    would still link regions (the refresh is then refused)."""

    regions: int
    #: rows each region reads now: its box's, less its movers out, plus its movers in
    rows: list
    #: rows each region reads whose person its state holds (as SQL hashed them: the run, which
    #: hashes them in Python, must find as many)
    stayed: list
    #: rows whose person a region remembers other than their box's now
    movers: int
    #: people held back in one region's state whose group is another region's (links)
    waiting: int
    #: rows of people the state does not hold
    joiners: int
    #: the state's groups whose people its rows hold in several regions (links)
    spread_groups: int
    #: why every region is one group (a row in no box, a NULL in a QI released as a range, an
    #: identifier not hashed in SQL), or None
    everything: str | None
    #: core.refresh_groups.Plan: each region's group and the rows of each
    groups: refresh_groups.Plan
    #: the movers (:class:`Mover`), all of them when ``movers`` is at most MOST_MOVERS
    moved: list = field(default_factory=list)
    #: rows of people two regions' states hold (links)
    twice: int = 0

    def largest(self) -> tuple[list[int], int]:
        """(the regions of the group holding the most rows, its rows)."""
        root, rows = max(self.groups.group_rows.items(), key=lambda item: (item[1], -item[0]))
        return self.groups.members(root), rows


#: the movers a plan lists (their TIDs go into their regions' reads as literals): 10,035 when
#: everyone's age rose by one at 1M rows (docs/out-of-core.md)
MOST_MOVERS = 100_000


def plan_refresh(plpy, release: dict, src, identifiers: list) -> RefreshPlan | None:
    """Each stored region's rows at a stable refresh beyond the budget, from one pass over the
    source in SQL (``release``: with its salt, :func:`with_secrets`): each row's stored box
    (:func:`box_case`) and its person's salted hash joined with the state's people and held
    back people. A known person stays with the region remembering them whatever box their QIs
    lie in now (a mover: listed by TID); a joiner goes to their box's region. What still links
    regions: a person two regions remember, a held back person whose group is another region's,
    a group of the state held in several regions (core.refresh_groups closes them; the refresh
    is then refused). Counts per region and the movers reach Python, nothing else. None when
    the release stores no boxes (created in memory, or its state rewritten as one region)."""
    rid = release["release_id"]
    boxes = stored_boxes(plpy, rid)
    if not boxes:
        return None
    axes = box_axes(plpy, src, boxes, rid)
    label = box_case(src, list(enumerate(boxes)), rid)
    ranged = [src.names[a] for a, c in enumerate(src.qis)
              if republication._released_type(c) != "text[]"]
    null_ranged = " OR ".join(f"{c} IS NULL" for c in ranged) or "false"
    text = person_text(plpy, identifiers)
    salt = release_rows.person_salt(jsonb(release["parameters"]))
    person = "NULL::pg_catalog.bytea" if text is None or salt is None else (
        f"pg_catalog.sha256($2 OPERATOR(pg_catalog.||) pg_catalog.convert_to({text}, 'UTF8'))")
    links: dict = {}
    rows = [0] * len(boxes)
    stayed = [0] * len(boxes)
    movers = joiners = twice = 0
    moved: list = []
    everything = None
    for member in src.members:
        check_interrupts()
        counted = run(plpy, f"""
            WITH now AS MATERIALIZED (
                     SELECT tableoid, ctid, {label} AS region, {person} AS person,
                            ({null_ranged}) AS null_ranged
                     FROM {member}),
                 held AS (SELECT person, pg_catalog.min(stored) AS stored,
                                 pg_catalog.max(stored) AS other
                          FROM ({STATE_PEOPLE.format(column="persons")}) AS p GROUP BY person),
                 waits AS (SELECT person, pg_catalog.min(stored) AS stored,
                                  pg_catalog.max(stored) AS other
                           FROM ({STATE_PEOPLE.format(column="waiting_persons")}) AS p
                           GROUP BY person),
                 known AS MATERIALIZED (
                     SELECT n.tableoid, n.ctid, n.region, n.null_ranged, n.person,
                            n.person IS NULL AS unhashed, h.stored, w.stored AS waited,
                            h.other IS DISTINCT FROM h.stored
                                AND h.other IS NOT NULL
                                OR w.other IS DISTINCT FROM w.stored
                                AND w.other IS NOT NULL AS twice
                     FROM now n LEFT JOIN held h ON h.person OPERATOR(pg_catalog.=) n.person
                          LEFT JOIN waits w ON w.person OPERATOR(pg_catalog.=) n.person)
            SELECT false AS mover, region, stored, waited, null_ranged, unhashed,
                   twice,
                   pg_catalog.count(*) AS n, NULL::pg_catalog.oid AS tableoid,
                   NULL::pg_catalog.tid AS ctid, NULL::pg_catalog.bytea AS person
            FROM known GROUP BY 2, 3, 4, 5, 6, 7
            UNION ALL
            (SELECT true, region, stored, waited, false, false, false, 1, tableoid, ctid, person
             FROM known
             WHERE COALESCE(stored, waited) IS DISTINCT FROM region
               AND COALESCE(stored, waited) IS NOT NULL
             LIMIT {MOST_MOVERS + 1})""", ["int4", "bytea"],
                      [rid, None if salt is None else bytes.fromhex(salt)])
        for r in counted:
            stored, waited = r["stored"], r["waited"]
            kept = stored if stored is not None else waited
            if r["mover"]:
                if r["region"] is not None and len(moved) < MOST_MOVERS:
                    moved.append(Mover(int(r["tableoid"]), r["ctid"], int(kept), int(r["region"]),
                                       bytes(r["person"])))
                continue
            n = int(r["n"])
            if r["region"] is None:
                everything = everything or f"{n:,} rows lie in no stored region"
                continue
            here = int(r["region"])
            if r["unhashed"]:
                everything = everything or f"{n:,} rows' identifiers are not hashed in SQL"
            if r["null_ranged"]:
                everything = everything or (f"{n:,} rows hold NULL in a QI released as a range, "
                                            "which an analyst finds in every class's range")
            if stored is not None and waited is not None and int(stored) != int(waited):
                links[(int(stored), int(waited))] = links.get((int(stored), int(waited)), 0) + n
                twice += n
            if r["twice"]:
                # remembered by two regions' rows of one column: every region their own link
                everything = everything or f"{n:,} rows' people are remembered by two regions"
                twice += n
            reader = here if kept is None else int(kept)
            rows[reader] += n
            if stored is not None:
                stayed[reader] += n
            if kept is not None and int(kept) != here:
                movers += n
            if kept is None and not r["unhashed"]:
                joiners += n
    # a held back person waits in a group of their own region's (a region's run holds both)
    waiting = 0
    for r in run(plpy, f"""
            WITH waits AS ({STATE_PEOPLE.format(column="waiting_persons")}),
                 waits_in AS ({WAITING_GROUPS}),
                 group_regions AS ({GROUP_REGIONS})
            SELECT w.stored, r.region, pg_catalog.count(*) AS n
            FROM waits w JOIN waits_in i ON i.person OPERATOR(pg_catalog.=) w.person
                 JOIN group_regions r ON r.g = i.g
            WHERE r.region <> w.stored
            GROUP BY 1, 2""", ["int4"], [rid]):
        links[(int(r["stored"]), int(r["region"]))] = int(r["n"])
        waiting += int(r["n"])
    spread = run(plpy, f"SELECT pg_catalog.array_agg(region ORDER BY region) AS regions "
                       f"FROM ({GROUP_REGIONS}) AS r GROUP BY g HAVING pg_catalog.count(*) > 1",
                 ["int4"], [rid])
    pairs = list(links) + [(held["regions"][0], other) for held in spread
                           for other in held["regions"][1:]]
    groups = refresh_groups.plan(axes, pairs, rows, everything is not None)
    return RefreshPlan(len(boxes), rows, stayed, movers, waiting, joiners, len(spread), everything,
                       groups, moved, twice)


class NotByRegions(AnonError):
    """A stable refresh beyond the budget that the run region by region does not cover
    (program_limit_exceeded): refused before anything is written."""

    sqlstate = "54000"


class RefreshedMeanwhile(AnonError):
    """The state or versions changed between a refresh's run and its check (serialization_failure)."""

    sqlstate = "40001"


def _among(plpy, movers: list) -> str:
    """SQL true for a row of ``movers`` (their tables' oids and TIDs)."""
    by_table: dict = {}
    for mover in movers:
        by_table.setdefault(mover.tableoid, []).append(f'"{mover.ctid}"')
    return " OR ".join(
        f"(tableoid OPERATOR(pg_catalog.=) CAST({int(oid)} AS pg_catalog.oid) AND ctid "
        f"OPERATOR(pg_catalog.=) ANY (CAST({plpy.quote_literal('{' + ','.join(tids) + '}')} "
        "AS pg_catalog.tid[])))" for oid, tids in by_table.items())


class Cut:
    """A stored cut (:func:`box_of`) as :class:`RegionChecks` reads a region's bounds: ``qi``."""

    def __init__(self, cut: dict):
        self.cut, self.qi = cut, cut["qi"]


@dataclass
class RefreshedRegion:
    """What a refresh region by region keeps of one stored region for its check."""

    number: int
    bounds: list
    rows: int
    digest: bytes | None = None
    #: each person's group and whether they are published, people in the order of their hashes
    groups: np.ndarray | None = None
    shown: np.ndarray | None = None
    #: the region's version as republication.run_people gives it
    version: dict | None = None
    #: its people whose rows lie in another box now, and the rows of its box whose people
    #: another region remembers (:class:`Mover`)
    moved_in: list = field(default_factory=list)
    moved_out: list = field(default_factory=list)
    #: the released bounds of its classes holding a mover in (:meth:`RegionRefresh.keep`)
    keys: list = field(default_factory=list)
    #: the rows it publishes (counterfeits included) in its classes of each such bounds
    key_rows: dict = field(default_factory=dict)
    #: other regions' such bounds whose class's corner lies in its box
    #: (:meth:`RegionRefresh.place_mover_classes`)
    foreign: list = field(default_factory=list)


#: what a refresh region by region keeps of a region's version (republication.run_people's)
KEPT_OF_VERSION = ("group_ids", "counts", "values", "linked", "people_linked", "waiting",
                   "waiting_groups", "held_back", "counterfeit", "groups_by_choice")


class RegionRefresh(RegionChecks):
    """A stable refresh beyond the budget where no region is linked to another (the plan's
    groups are its stored regions: nobody remembered twice or waiting in another region's
    group, no group spanning regions): each stored region refreshed by the in-memory stable
    machinery restricted to its rows (its box's, less its movers out, plus its movers in), its
    state rows and its groups of the stored versions (republication.State.read's ``region``),
    then checked region by region from the released rows as the creation's check is
    (:meth:`check`), the version stored once."""

    def __init__(self, ctx, src, read, region_read, label: str, budget: int, boxes: list,
                 plan: RefreshPlan, committed: dict):
        super().__init__(ctx, src, read, region_read, label, budget)
        self.release_id = ctx.release_id
        self.regions = [RefreshedRegion(i, [Cut(c) for c in box], plan.rows[i])
                        for i, box in enumerate(boxes)]
        for mover in plan.moved:
            self.regions[mover.kept].moved_in.append(mover)
            self.regions[mover.box].moved_out.append(mover)
        self.stayed = plan.stayed
        #: the QIs released as ranges: a class of movers is known by their bounds
        self.ranged = [a for a, col in enumerate(src.qis)
                       if republication._released_type(col) != "text[]"]
        if plan.moved and not self.ranged:
            raise NotByRegions(
                f"a stable refresh of {label} region by region finds the classes of people whose "
                f"quasi-identifiers left their region's box ({len(plan.moved):,}) by their "
                "ranges, and the release has no QI released as a range",
                hint="Raise plpy_anon.build_memory to what the stable run holds in one backend "
                     "for this refresh.")
        #: the state's and the newest stored version's numbers the run read
        self.committed = committed

    def _side(self, a: int, value: str, bounds) -> str:
        view = copy.copy(self.src)
        view.names = list(self.src.names)
        view.names[a] = value
        return box_predicate(view, [b.cut for b in bounds], self.release_id)

    def read_rows(self, ctx, region: RefreshedRegion):
        """The region's rows, its people matched with its own state rows and versions."""
        plpy = ctx.plpy
        where = box_predicate(self.src, [b.cut for b in region.bounds], self.release_id) \
            if region.bounds else None
        if region.moved_out:
            where = f"({where or 'true'}) AND NOT ({_among(plpy, region.moved_out)})"
        if region.moved_in:
            where = f"({where or 'true'}) OR ({_among(plpy, region.moved_in)})"
        with release_rows.owner_state(plpy):
            state = republication.State.read(plpy, self.release_id, region=region.number)
            # the region's own codes (no table's figures to widen them to): the stable run's
            # nearness is measured within the region, where its groups are
            with self.region_read(plpy):
                return self.read(ctx, where, [None] * len(self.src.qis), people_state=state)

    def slices(self, plpy, ctx, fit, publish, metrics: dict):
        """The refresh's slices, region by region (out_of_core._leaf_slices' form)."""
        position = first_class = published = 0
        achieved = None
        for region in self.regions:
            step = f"region {region.number + 1} of {len(self.regions)}"
            with interrupts.honoured(plpy):
                progress(plpy, f"{step}: reading {region.rows:,} rows")
                with timing.phase("region_read"):
                    rows = self.read_rows(ctx, region)
                people = rows.people
                found = int((people.state.find(people.persons) >= 0).sum())
                if found != self.stayed[region.number] or rows.data.n_rows != region.rows:
                    # the plan's links hold only if SQL hashed people as the run does
                    raise SourceChanged(
                        f"region {region.number} of {self.label} holds {rows.data.n_rows:,} rows "
                        f"and {found:,} people its state remembers, where the refresh's plan "
                        f"counted {region.rows:,} and {self.stayed[region.number]:,}: the table "
                        "changed meanwhile, or its identifiers are not hashed in SQL as the run "
                        "hashes them",
                        hint="Refresh it again when the table is not being written; if it is "
                             "refused again, raise plpy_anon.build_memory to what the stable "
                             "run holds in one backend and report the identifiers' types.")
                if people.version_rows is None or not (people.joined >= 0).any():
                    raise NotByRegions(
                        f"refresh_mode => 'stable' beyond plpy_anon.build_memory is refreshed "
                        f"region by region, and region {region.number} of {self.label} keeps "
                        "nobody of the last version (or the release has no sensitive column): "
                        "its new groups are not built region by region",
                        hint="Raise plpy_anon.build_memory to what the stable run holds in one "
                             "backend for this refresh.")
                progress(plpy, f"{step}: fitting")
                with timing.phase("region_fit"):
                    model = fit(rows, ctx.spec)
                with timing.phase("region_publish"):
                    pieces, stats = publish(ctx, rows, model)
                self.keep(region, rows, model, stats["people"])
                published += int(stats["row_count"])
                if stats.get("achieved_k") is not None:
                    achieved = stats["achieved_k"] if achieved is None \
                        else min(achieved, stats["achieved_k"])
                n_rows, n_classes = rows.data.n_rows, model.n_classes_
                del rows, model, stats, people
                progress(plpy, f"{step}: writing")
            for piece in pieces:
                piece["first_position"] += position
                piece["first_class"] += first_class
                yield piece
            del pieces
            position += n_rows
            first_class += n_classes
            self.ctx.note_memory("regions")
        if self.ctx.memory_mib:
            metrics["memory_mib"] = self.ctx.memory_mib
        metrics["seconds"] = {"python_total": round(self.ctx.elapsed(), 4)}
        stash = self.ctx.GD.get(release_rows.RUNS_KEY, {}).get(self.release_id)
        if stash is not None:
            stash["achieved_k"] = achieved
            stash["row_count"] = stash["source_rows"] = published

    def keep(self, region: RefreshedRegion, rows, model, stashed: dict) -> None:
        """What the check needs of one region just fitted; a region whose run withdraws its
        version (no grouping keeps everyone's candidates) refuses the whole refresh."""
        version = stashed["version"]
        counts = np.asarray(version["counts"])
        if version["group_ids"] and not counts.sum():
            raise NotByRegions(
                f"region {region.number} of {self.label} would publish no rows in this version "
                "(no grouping of its people keeps everyone's candidate sensitive values across "
                "the versions published); a version withdrawn in some regions only is not "
                "published, and the run region by region withdraws none",
                hint="The published version stays. Raise plpy_anon.build_memory to what the "
                     "stable run holds in one backend: it withdraws the whole version.")
        people = rows.people
        published = getattr(model, "published_", None)
        shown = np.ones(people.persons.size, dtype=bool) if published is None \
            else np.asarray(published.published, dtype=bool)
        order, region.digest = _people_digest(people)
        region.groups = np.asarray(model.groups_, dtype=np.int64)[order]
        region.shown = shown[order]
        region.version = {key: version[key] for key in KEPT_OF_VERSION}
        if region.moved_in:
            ids = np.asarray(version["group_ids"], dtype=np.int64)
            released = np.asarray(version["counts"]).reshape(ids.size, -1).sum(axis=1)
            region.keys = self.mover_classes(region, rows, model,
                                             dict(zip(ids.tolist(), released.tolist())))

    def mover_classes(self, region: RefreshedRegion, rows, model, group_rows: dict) -> list:
        """The released bounds of each class of ``region`` holding one of its movers in (per
        QI released as a range: its lowest and highest value's text, as read; per QI released
        as a set: its values' texts): such a class's corner may lie in another region's box, so
        the check finds it by its bounds, every QI's (other regions' classes often release the
        same ranges with other sets)."""
        people = rows.people
        movers = np.asarray([m.person for m in region.moved_in], dtype=people.persons.dtype)
        labels = np.asarray(model.labels_)
        groups = np.asarray(model.groups_, dtype=np.int64)
        keys, key_groups = [], {}
        for c in np.unique(labels[np.isin(people.persons, movers)]).tolist():
            check_interrupts()
            members = np.flatnonzero(labels == c)
            key = []
            for a in range(len(self.src.qis)):
                texts = people.qi_texts[a]
                if a not in self.ranged:
                    codes = np.unique(np.asarray(texts.codes)[members]).tolist()
                    key.append(tuple(sorted((None if code < 0 else texts.dictionary[code]
                                             for code in codes), key=lambda t: (t is None, t))))
                    continue
                codes = rows.encoded[a].codes[members]
                for at in (members[int(np.argmin(codes))], members[int(np.argmax(codes))]):
                    code = int(texts.codes[at])
                    key.append(None if code < 0 else texts.dictionary[code])
            keys.append(tuple(key))
            key_groups.setdefault(keys[-1], set()).update(np.unique(groups[members]).tolist())
        region.key_rows = {key: sum(int(group_rows.get(g, 0)) for g in held)
                           for key, held in key_groups.items()}
        return keys

    def _key_columns(self) -> list:
        """Each entry of a class's key: (its QI, 'low', 'high' or 'set')."""
        return [(a, part) for a in range(len(self.src.qis))
                for part in (("low", "high") if a in self.ranged else ("set",))]

    @staticmethod
    def _set_key(array: str) -> str:
        """SQL of a set's texts in one order (C collation), each once: a released set and a
        key's compare equal whatever order each lists them in."""
        return (f"ARRAY(SELECT e FROM pg_catalog.unnest({array}) AS e GROUP BY e "
                'ORDER BY e COLLATE "C")')

    def _class_key(self, alias: str) -> str:
        """SQL of a released class's key (``alias``: its row): :meth:`mover_classes`' bounds."""
        parts = []
        for a, part in self._key_columns():
            q = f"{alias}.{ident(self.ctx.plpy, self.src.qis[a].name)}"
            if part == "set":
                parts.append(self._set_key(q))
            elif part == "low":
                parts.append(f"pg_catalog.lower({q})")
            else:
                parts.append(range_highest(q, republication._released_type(self.src.qis[a])))
        return f"({', '.join(parts)})"

    def _key_literals(self, key: tuple) -> str:
        """A key's bounds as constants of their QIs' types (a set's as its texts), comma
        separated."""
        out = []
        for (a, part), value in zip(self._key_columns(), key):
            if part == "set":
                texts = ", ".join("NULL" if t is None else self.ctx.plpy.quote_literal(t)
                                  for t in value)
                out.append(self._set_key(f"CAST(ARRAY[{texts}] AS pg_catalog.text[])"))
            else:
                out.append("NULL" if value is None else self.src.literal(a, value))
        return ", ".join(out)

    def _keys_listed(self, keys: list) -> str:
        return ", ".join(f"({self._key_literals(key)})" for key in keys)

    def place_mover_classes(self, plpy, release: dict, qis) -> None:
        """Each region's :attr:`RefreshedRegion.foreign`: the bounds of other regions' movers'
        classes whose corner lies in its box, found in one pass over the released classes (the
        regions' checks then list a few bounds each, not every region's)."""
        listed = list(dict.fromkeys((r.number, key) for r in self.regions for key in r.keys))
        if not listed:
            return
        columns = ", ".join(f"r.{ident(plpy, c.name)}" for c in qis)
        corner = "CASE " + " ".join(
            f"WHEN {self.class_corner_in('c', r.bounds)} THEN {r.number}"
            for r in self.regions) + " END"
        names = [f"k{j}" for j in range(len(self._key_columns()))]
        values = ", ".join(f"({self._key_literals(key)}, {i})" for i, (_, key) in enumerate(listed))
        found = run(plpy, f"""
            SELECT k.i, {corner} AS region, c.n
            FROM (SELECT {columns}, pg_catalog.count(*) AS n
                  FROM {republication.released_relation(plpy, release)} r
                  GROUP BY {columns}) AS c
                 JOIN (VALUES {values}) AS k({', '.join(names)}, i)
                   ON {self._class_key('c')} = ({', '.join(f'k.{n}' for n in names)})""")
        released: dict = {}
        for row in found:
            released[int(row["i"])] = released.get(int(row["i"]), 0) + int(row["n"])
        for i, n in released.items():
            owner, key = listed[i]
            if n > self.regions[owner].key_rows[key]:
                # another region's group released with the same bounds: one class to an
                # analyst, whose rows no region's check can tell apart
                raise NotByRegions(
                    f"a class of region {owner} of {self.label} holding people whose "
                    "quasi-identifiers left its box is released with the bounds of a class of "
                    f"another region ({n:,} released rows, {self.regions[owner].key_rows[key]:,} "
                    "of its own); the run region by region checks each region's classes apart, "
                    "so nothing was published",
                    hint="The published version stays. Raise plpy_anon.build_memory to what the "
                         "stable run holds in one backend for this refresh (it checks such "
                         "classes whole).")
        for row in found:
            owner, key = listed[int(row["i"])]
            if row["region"] is not None and int(row["region"]) != owner:
                self.regions[int(row["region"])].foreign.append(key)

    def classes_of(self, alias: str, region: RefreshedRegion) -> str:
        """SQL true for a released class (``alias``: its row) of ``region``: one of its
        movers' classes (by their bounds), or a class whose corner lies in its box and is not
        another region's movers' class (a class of no mover lies inside its region's box)."""
        corner = self.class_corner_in(alias, region.bounds)
        if not region.keys and not region.foreign:
            return corner
        key = self._class_key(alias)
        if region.foreign:
            corner = (f"(NOT COALESCE({key} IN (VALUES {self._keys_listed(region.foreign)}), "
                      f"false) AND {corner})")
        if region.keys:
            corner = f"(COALESCE({key} IN (VALUES {self._keys_listed(region.keys)}), false) " \
                     f"OR {corner})"
        return corner

    def check(self, plpy, release: dict) -> dict:
        """The cross-version check of the version, region by region: each region's people
        read again (refused if not what the run read), matched with its released classes,
        remembered as new rows of its region, and its groups compared with its groups of the
        stored versions (republication.check_differences); then the old state rows dropped,
        the new renumbered, and the version stored once."""
        promise = Promise.of(jsonb(release["parameters"]))
        rid = release["release_id"]
        if run(plpy, republication.COMMITTED_VERSIONS, ["int4"], [rid])[0] != self.committed:
            raise RefreshedMeanwhile(
                f"the state of {release['release_schema']}.{release['release_name']} changed "
                "while it was refreshed region by region; nothing was published",
                hint="Refresh it again.")
        # a class of movers may reach beyond its region's box (docs/out-of-core.md): then each
        # region's classes are those its check finds by their bounds or corners, and each
        # class's rows are its region's by the multisets compared with its run's groups
        qis, sensitive, total, merges = self.released_inside_regions(
            plpy, release, promise, boxes=not any(r.moved_in for r in self.regions))
        with timing.phase("check_classes"), local_settings(plpy, jit="off"):
            self.place_mover_classes(plpy, release, qis)
        with release_rows.owner_state(plpy):
            old_rows = int(run(plpy, "SELECT pg_catalog.count(*) AS n FROM "
                                     "anon.readable_release_state WHERE release_id = $1",
                               ["int4"], [rid])[0]["n"])
        everyone = sum(r.rows for r in self.regions)
        row_people = max(republication.people_a_row(plpy, everyone), -(-everyone // max(
            1, republication.MOST_STATE_ROWS - len(self.regions))))
        figures: dict = {}
        differences: dict = {}
        checked_parts = []
        chunk = old_rows
        seen_classes = 0
        for region in self.regions:
            step = f"checking region {region.number + 1} of {len(self.regions)}"
            with interrupts.honoured(plpy):
                progress(plpy, f"{step}: reading its people")
                with timing.phase("read_people"):
                    rows = self.read_rows(self.ctx, region)
                people = rows.people
                order, digest = _people_digest(people)
                version = _in_values_of(region.version, people.values)
                if digest != region.digest or version is None:
                    raise SourceChanged(
                        f"{self.label} changed while its stable release was refreshed region by "
                        f"region: region {region.number}'s rows are not those the run read",
                        hint="Refresh it again when the table is not being written (or LOCK it "
                             "IN SHARE MODE in the same transaction first).")
                groups = np.empty(order.size, dtype=np.int64)
                groups[order] = region.groups
                shown = np.empty(order.size, dtype=bool)
                shown[order] = region.shown
                pub, held = np.flatnonzero(shown), np.flatnonzero(~shown)
                hashes = [people.hashes[i] for i in pub.tolist()]
                waiting = ([people.hashes[i] for i in held.tolist()], groups[held].tolist())
                if sorted(waiting[0]) != sorted(version["waiting"]):
                    raise SourceChanged(f"{self.label} changed while its stable release was "
                                        "refreshed region by region", hint="Refresh it again.")
                ordered = np.r_[pub, held]
                qi_texts = [column.take(ordered) for column in people.qi_texts]
                progress(plpy, f"{step}: matching its classes")
                with timing.phase("check_classes"):
                    classes = republication.released_classes(
                        plpy, release, qis, sensitive, qi_texts,
                        [None in column for column in people.qi_texts],
                        within=lambda alias, r=region: self.classes_of(alias, r), merges=merges)
                    linked = republication.linked_classes(classes) \
                        if classes.linkable[0].shape[1] else None
                    matched = containment.contained(classes.axes, ordered.size, classes.count,
                                                    linked=linked, near=groups[ordered])
                progress(plpy, f"{step}: remembering its people")
                state = people.state
                records = None if people.records is None else (people.records[pub],
                                                               people.records[held])
                ids = np.asarray(version["group_ids"], dtype=np.int64)
                withdrawn = ids[np.asarray(version["counts"]).reshape(ids.size, -1).sum(axis=1) == 0]
                with timing.phase("check_candidates"):
                    got = republication.remember(
                        plpy, rid, promise, hashes, groups[pub].tolist(), classes, state, matched,
                        waiting, records, withdrawn, region=region.number, first_chunk=chunk,
                        row_people=row_people)
                chunk += got.pop("state_rows")
                _merge(figures, got)
                with timing.phase("check_differences"):
                    present = republication.packed(hashes + waiting[0])
                    now = None if records is None else np.concatenate(records)
                    found, checked = republication.check_differences(
                        plpy, release, promise, version, state, hashes, groups[pub].tolist(),
                        classes, matched,
                        lambda kept, st=state, p=present: republication.alive_groups(kept, st, p, rid),
                        None if now is None else (
                            lambda kept, st=state, p=present, n=now:
                            republication.alive_groups(kept, st, p, rid, n)),
                        present, (people.version_rows, people.versions))
                _add_differences(differences, found)
                checked_parts.append((checked, [
                    (row["version"], row.get("region_of"), row.get("all_groups"))
                    for row in people.version_rows]))
                seen_classes += classes.count
                del rows, people, classes, matched, state
        _refuse_classes_outside(release, seen_classes, total)
        with timing.phase("check_differences"):
            _store_regions_version(plpy, release, checked_parts)
            run(plpy, republication.NEXT_GROUPS, ["int4"], [rid])
        # the old rows dropped, the new numbered from 0 in their order (one at a time, upwards:
        # each goes to a number no row holds)
        run(plpy, "DELETE FROM anon.release_state WHERE release_id = $1 AND chunk < $2",
            ["int4", "int4"], [rid, old_rows])
        for number in range(old_rows, chunk):
            check_interrupts()
            run(plpy, "UPDATE anon.release_state SET chunk = $3, chunks = $4 "
                      "WHERE release_id = $1 AND chunk = $2", ["int4", "int4", "int4", "int4"],
                [rid, number, number - old_rows, chunk - old_rows])
        figures.update(differences)
        figures["regions"] = len(self.regions)
        republication.refuse_below_l(release, promise, figures)
        return figures


def boxes_of(plpy, release_id: int) -> list:
    """The stored boxes of a stable release, read under row security as its state is."""
    with release_rows.owner_state(plpy):
        return stored_boxes(plpy, release_id)


def _in_values_of(version: dict, values: list) -> dict | None:
    """A region's version as the run kept it, its counts over ``values`` (the same texts in the
    order a read of the region again coded them: a parallel scan returns rows in another
    order), or None where the texts are not the same."""
    kept = version["values"]
    if len(kept) != len(values) or set(kept) != set(values):
        return None
    at = {v: j for j, v in enumerate(kept)}
    counts = np.asarray(version["counts"]).reshape(len(version["group_ids"]), len(kept))
    return {**version, "values": list(values), "counts": counts[:, [at[v] for v in values]]}


def _add_differences(total: dict, found: dict) -> None:
    """One region's difference check's figures added to the version's."""
    for key, value in found.items():
        if key == "groups_by_choice":
            held = total.setdefault(key, {})
            for name, n in value.items():
                held[name] = held.get(name, 0) + n
        elif key == "versions_compared":
            total[key] = max(total.get(key, 0), value)
        else:
            total[key] = total.get(key, 0) + value


def _store_regions_version(plpy, release: dict, parts: list) -> None:
    """The version of a refresh region by region stored once (republication.store_version):
    the regions' groups, values and unions one after the other, and each stored version's
    roots with every region's groups put back in their places. Refuses (22000) a stored
    version whose groups are not each one region's."""
    rid = release["release_id"]
    vals: list = []
    listed = any(isinstance(checked.vals, list) for checked, _ in parts)
    roots: dict = {}
    kept_groups: dict = {}
    whole: dict = {}
    for checked, rows in parts:
        for version, region_of, all_groups in rows:
            kept_groups[version] = kept_groups.get(version, 0) + len(region_of)
            whole[version] = all_groups
            if version in checked.roots:
                roots.setdefault(version, []).append((region_of, checked.roots[version]))
        if not sum(checked.sizes):
            continue                 # no value (its joined text is empty, not one empty value)
        if isinstance(checked.vals, list):
            vals += checked.vals
        elif listed:
            vals += [None if v == "\x02" else v for v in checked.vals.split("\x01")]
        else:
            vals.append(checked.vals)
    if any(kept_groups[v] != whole[v] for v in whole):
        raise InsufficientData(
            f"a stored version of {release['release_schema']}.{release['release_name']} has "
            "groups in no region's state or in several; nothing was published",
            hint="Report this with the release's parameters.")
    for version, changes in roots.items():
        stored = run(plpy, "SELECT roots FROM anon.readable_release_versions WHERE release_id = $1 "
                           "AND version = $2", ["int4", "int4"], [rid, version])[0]["roots"]
        for places, new in changes:
            for place, root in zip(places.tolist(), new):
                stored[place] = root
        roots[version] = stored
    ids = [g for checked, _ in parts for g in checked.ids]
    any_linked = any(checked.linked is not None for checked, _ in parts)
    republication.store_version(plpy, rid, republication.CheckedVersion(
        ids, [s for checked, _ in parts for s in checked.sizes],
        vals if listed else "\x01".join(vals), roots,
        sum(checked.held_back for checked, _ in parts),
        sum(checked.counterfeit for checked, _ in parts),
        [g for checked, _ in parts for g in (checked.linked if checked.linked is not None
                                             else checked.ids)] if any_linked else None,
        [p for checked, _ in parts for p in checked.waiting or ()] or None,
        [g for checked, _ in parts for g in checked.waiting_groups or ()] or None,
        [g for checked, _ in parts for g in (checked.people_linked if checked.people_linked
                                             is not None else checked.ids)]))


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
