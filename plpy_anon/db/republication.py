"""Refreshes in the stable mode (the grouping: core.republication; what each group publishes:
core.republish).

What the run needs (:func:`people_of`): each row's person (a salted SHA-256 of the identifier
columns' text; in SQL ``sha256(salt || convert_to(concat_ws(E'\\x1f', ids), 'UTF8'))``), the
group and candidates each known person got from the versions published so far
(:class:`State`: rows of ``anon.release_state``, each a run of people as sorted hashes with
aligned arrays, at most ``plpy_anon.build_memory`` / 64 bytes of them (:func:`people_a_row`),
read one at a time and matched in numpy by sorting and searching).

What every version is held to (:func:`check_and_remember`, from the record of each create and
refresh, plain REFRESH included): for each person of the run (with their quasi-identifiers as the
run read them: no second read of the source, which may have changed since), the sensitive values
of every released class whose ranges and sets hold those quasi-identifiers -- what an analyst who
knows them computes from the released rows alone (:func:`released_classes`, matched by
core.containment: ranks and a k-d split of the classes, never a listing of the values a range
covers) -- intersected with what earlier versions left them (:func:`remember`). A person left with fewer than l values refuses the version (the transaction rolls back;
the published one stays); otherwise the intersections are remembered for the next version, and
the figures go to the release's verification and to ``anon.refresh_history``. People the run no
longer reads are kept, marked absent (never erased: one who comes back is bound by what earlier
versions left them, and followed in every version they were in). Then the difference
check (:func:`check_differences`): the released classes' multisets against the groups' and every
stored earlier version's (``anon.release_versions``), refused when one group's change would pin
its joiners or leavers.

The released classes are read once, in one statement, for both checks: a compact release's from
its storage (one row per class, which the view analysts read unfolds, checked to be that query
before), a flat release's grouped from its rows; elements come back as packed integers over a
dictionary of their texts, and everything after (matching, multisets, unions of linked classes)
is numpy, no Python object per element.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from plpy_anon.core import containment, republish, text_hashes
from plpy_anon.core import person_hashes as person_hashes_core
from plpy_anon.core.disjoint_sets import component_labels
from plpy_anon.core.encoding import sorted_distinct
from plpy_anon.core.errors import InsufficientData, InvalidParameter
from plpy_anon.core.interrupts import check as check_interrupts
from plpy_anon.core.privacy_models import Models
from plpy_anon.core.republication import group_index
from plpy_anon.core.republish import Version
from plpy_anon.db import class_counts, guards, release_rows, timing
from plpy_anon.db import columns as catalog
from plpy_anon.db.sqltext import build_memory, ident, jsonb, local_settings, progress, run, text_of
from plpy_anon.spec import Built, Promise

#: joins the text of several identifier columns (concat_ws in SQL skips NULLs; so does Python)
SEPARATOR = "\x1f"


def resolve_mode(promise: Promise, roles, parameters: dict) -> None:
    """The release's ``refresh_mode`` (and what it needs) into ``parameters``, the catalog row
    being built (``promise``: the SQL call's). NULL: stable when the release has l and identifier
    columns to follow people by, one of them unique and NOT NULL (a primary key, say: a name is
    not a person), fresh otherwise."""
    identifiers = [c.name for c, role in roles if role == "identifier"]
    # what the build resolved so far (l, the sensitive columns, hierarchies, the join back)
    resolved, built = Promise.of(parameters), Built.of(parameters)
    sensitive = resolved.sensitive or ()
    mode = promise.refresh_mode
    if mode is None:
        # a unique column may hold NULLs, and a row without an identifier cannot be followed
        unique = any(c.unique and c.not_null for c, role in roles if role == "identifier")
        mode = "stable" if resolved.l and unique and not built.hierarchies \
            and resolved.t is None and len(sensitive) <= 1 \
            and not built.joined_back else "fresh"
    parameters.update(refresh_mode=mode)
    if mode != "stable":
        return
    if not identifiers:
        raise InvalidParameter(
            "refresh_mode => 'stable' follows people from version to version by their identifier "
            "columns, and the release has none",
            hint="Pass identifiers => ARRAY[...] (or declare them with anon.set_column_role), or use "
                 "refresh_mode => 'fresh'.")
    if built.hierarchies:
        raise InvalidParameter(
            f"refresh_mode => 'stable' does not support hierarchies (column(s) {', '.join(built.hierarchies)})",
            hint="Release those columns as value sets, or use refresh_mode => 'fresh'.")
    if len(sensitive) > 1:
        # a released row keeps one person's values together: an analyst intersects the
        # combinations, which the per-column candidates do not bound
        raise InvalidParameter(
            "refresh_mode => 'stable' keeps candidates for one sensitive column, and the release has "
            f"{len(sensitive)} ({', '.join(sensitive)})",
            hint="Release one sensitive column per release, or use refresh_mode => 'fresh'.")
    if built.joined_back and resolved.l:
        # a group's rows are published from the values it showed before, not joined back
        raise InvalidParameter(
            "refresh_mode => 'stable' writes each class's values from what earlier versions showed, "
            "and this release would join its rows back to the source",
            hint="Leave plpy_anon.join_back off (the sensitive column must be of a built-in type "
                 "stored exactly), or use refresh_mode => 'fresh'.")
    if resolved.t is not None:
        raise InvalidParameter("refresh_mode => 'stable' does not support t-closeness",
                               hint="Use l (with refresh_mode => 'stable'), or refresh_mode => 'fresh'.")
    # the salt leaves the row for anon.release_secrets when it is stored (release_rows.SECRETS)
    salt = secrets.token_hex(16)
    parameters.update(identifiers=identifiers, person_salt=salt,
                      salt_digest=release_rows.salt_digest(salt))


def is_stable(parameters: Mapping) -> bool:
    """Whether catalog parameters (a row, or one being built) refresh in the stable mode."""
    return Promise.of(parameters).refresh_mode == "stable"


def person_hashes(texts: list[list[str | None]], salt: str) -> list[bytes]:
    """Each row's person: SHA-256 of the salt and its identifier texts joined by SEPARATOR."""
    prefix = bytes.fromhex(salt)
    sha256 = hashlib.sha256
    if len(texts) == 1:         # one identifier column (a primary key, say): no join per row
        return [sha256(prefix + ("" if t is None else t).encode()).digest() for t in texts[0]]
    return [sha256(prefix + _joined_key(row).encode()).digest() for row in zip(*texts)]


def _joined_key(row) -> str:
    """A composite identifier's texts as one text, one per key. Joined by SEPARATOR where no text
    holds it (the form stored states were hashed in); else as JSON, which escapes it, so the form
    holds no SEPARATOR and meets no joined one."""
    parts = [t for t in row if t is not None]
    if any(SEPARATOR in t for t in parts):
        return json.dumps(parts)
    return SEPARATOR.join(parts)


class Coded:
    """A column of the run as the reader keeps it: each row's int32 code (-1: NULL) into its
    distinct texts (``dictionary``; it may hold texts no row has). What the stable mode keeps of
    each row's QIs: 4 bytes a row, not a Python string; ``np.asarray`` gives the texts."""

    __slots__ = ("codes", "dictionary")

    def __init__(self, codes: np.ndarray, dictionary: list):
        self.codes = np.asarray(codes)
        self.dictionary = dictionary

    @classmethod
    def of(cls, column) -> Coded:
        """A reader column (codes and dictionary), or a list of texts (coded here)."""
        if isinstance(column, Coded):
            return column
        if isinstance(column, Integers):
            return cls.of_integers(column.values, column.null_mask)
        if hasattr(column, "codes") and hasattr(column, "dictionary"):
            return cls(column.codes, column.dictionary)
        import pandas as pd  # the stable mode's paths only: a fresh build loads no pandas
        codes, uniques = pd.factorize(np.asarray(column, dtype=object))
        return cls(codes.astype(np.int32), list(uniques))

    @classmethod
    def of_integers(cls, values: np.ndarray, null_mask: np.ndarray | None) -> Coded:
        """An integer column's text as PostgreSQL prints it (its decimal digits), from the
        numbers read (``null_mask``: the NULL rows, None: none)."""
        values = np.asarray(values, dtype=np.int64)
        # np.unique's result; by a table of the range where it is not much wider than the rows
        uniques, inverse = sorted_distinct(values if null_mask is None else values[~null_mask])
        present = np.ones(values.size, dtype=bool) if null_mask is None else ~null_mask
        codes = np.full(values.size, -1, dtype=np.int32)
        codes[present] = inverse.ravel()
        return cls(codes, [str(v) for v in uniques.tolist()])

    def __len__(self) -> int:
        return self.codes.size

    def __contains__(self, value) -> bool:
        """Whether a row is NULL (``None in column``); other values by their text."""
        if value is None:
            return bool((self.codes < 0).any())
        return value in self.dictionary and bool(
            (self.codes == self.dictionary.index(value)).any())

    def texts(self) -> np.ndarray:
        """The dictionary as an object array with None (NULL) last: ``texts()[codes]`` is each
        row's text (code -1 takes the last)."""
        table = np.empty(len(self.dictionary) + 1, dtype=object)
        table[:-1] = self.dictionary
        return table

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        return self.texts()[self.codes]

    def tolist(self) -> list:
        return self.texts()[self.codes].tolist()

    def take(self, rows: np.ndarray) -> Coded:
        return Coded(self.codes[rows], self.dictionary)

    def __add__(self, other) -> Coded:
        """The rows of both (``other``: another column of the same QI, or a list of texts)."""
        if not len(other):
            return self
        other = Coded.of(other)
        if other.dictionary is self.dictionary:
            return Coded(np.concatenate([self.codes, other.codes]), self.dictionary)
        dictionary = list(self.dictionary)
        position = {t: i for i, t in enumerate(dictionary)}
        recode = np.full(len(other.dictionary) + 1, -1, dtype=np.int32)
        for j, text in enumerate(other.dictionary):
            if text not in position:
                position[text] = len(dictionary)
                dictionary.append(text)
            recode[j] = position[text]
        return Coded(np.concatenate([self.codes, recode[other.codes]]), dictionary)

    def factorized(self) -> tuple[np.ndarray, list]:
        """(codes, distinct texts) as ``pandas.factorize`` gives them (NULL -1), the texts
        only those some row has."""
        used = np.zeros(len(self.dictionary) + 1, dtype=bool)
        used[self.codes] = True
        used = used[:-1]
        if used.all():
            return self.codes.astype(np.int64), list(self.dictionary)
        recode = np.full(len(self.dictionary) + 1, -1, dtype=np.int64)
        recode[:-1][used] = np.arange(int(used.sum()))
        kept = np.flatnonzero(used).tolist()
        return recode[self.codes], [self.dictionary[i] for i in kept]


def factorized(texts) -> tuple[np.ndarray, list]:
    """A column of the run (:class:`Coded`, or a list of texts) as (codes, distinct texts),
    NULL coded -1."""
    if isinstance(texts, Coded):
        return texts.factorized()
    import pandas as pd  # the stable mode's paths only: a fresh build loads no pandas
    codes, uniques = pd.factorize(np.asarray(texts, dtype=object))
    return codes, list(uniques)


def coded_person_hashes(columns: list, salt: str) -> list[bytes]:
    """:func:`person_hashes` of coded identifier columns (:class:`Coded`, or :class:`Integers`)."""
    return _hash_list(coded_persons(columns, salt))


def coded_persons(columns: list, salt: str) -> np.ndarray:
    """:func:`coded_person_hashes` packed (numpy ``S32``): one column's distinct texts hashed
    once each, an integer column's from its numbers (core.person_hashes: no Python string a
    row)."""
    if len(columns) != 1:
        return packed(person_hashes([Coded.of(c).tolist() for c in columns], salt))
    column = columns[0]
    prefix = bytes.fromhex(salt)
    if isinstance(column, Integers):
        return person_hashes_core.salted_sha256_integers(prefix, column.values)
    # NULL (code -1) takes the last: refused before it counts
    digests = person_hashes_core.salted_sha256(prefix, [*column.dictionary, ""])
    codes = column.codes
    if codes.size == len(column.dictionary) and (codes == np.arange(codes.size)).all():
        return digests[:-1]
    return digests[codes]


def _hash_list(persons: np.ndarray) -> list[bytes]:
    """Packed hashes (numpy ``S32``) as bytes (32 each: numpy's items would drop trailing zero
    bytes)."""
    raw = persons.tobytes()
    return [raw[i:i + 32] for i in range(0, len(raw), 32)]


@dataclass
class Integers:
    """An integer identifier column as read (``values``; ``null_mask``: the NULL rows, None:
    none): its text, the digits PostgreSQL prints, is made from the numbers only to hash it."""

    values: np.ndarray
    null_mask: np.ndarray | None = None

    def __len__(self) -> int:
        return self.values.size

    def missing(self) -> np.ndarray:
        return np.zeros(self.values.size, dtype=bool) if self.null_mask is None else self.null_mask

    def shared(self) -> int:
        """Rows whose value another row has too."""
        values = self.values[~self.missing()]
        if values.size < 2 or (values[1:] > values[:-1]).all():
            return 0
        return values.size - np.unique(values).size


@dataclass
class People:
    """The run's people: each row's hash, and for the rows of known people their previous group
    and their candidates' cohort (rows with the same candidates share one)."""

    hashes: list[bytes]
    groups: np.ndarray                    # -1: first seen now
    cohorts: np.ndarray                   # -1: no candidates yet
    cohort_values: list[np.ndarray]       # per sensitive column, (cohorts, values) bool
    history: bool                         # someone is in the state, or held back by the last version
    qi_texts: list[Coded]                 # per QI, each row's value as text (for the check)
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
    #: each row's record fingerprint (:func:`record_fingerprints`; None: no sensitive column)
    records: np.ndarray | None = None
    #: the stored state the run read (anon.release_state), handed to the record's check, which
    #: reads the same row in the same transaction (None: the check reads it)
    state: State | None = None
    #: ``hashes`` packed (numpy ``S32``)
    persons: np.ndarray | None = None
    #: the stored versions' rows the run read (anon.release_versions, oldest first; their ids,
    #: roots, unions and steps, as :data:`KEPT_VERSIONS` gives them, without the values, which
    #: ``versions`` holds coded), handed to the record's difference check, which reads the same
    #: rows in the same transaction (None: the check reads them)
    version_rows: list | None = None

    def codes(self, sensitive: np.ndarray) -> np.ndarray:
        """The run's sensitive codes over ``values`` (NULL: the last code)."""
        codes = np.asarray(sensitive, dtype=np.int64).copy()
        codes[codes < 0] = len(self.values) - 1
        return codes


#: the release's state of its people: its rows (anon.release_state), each a run of people in
#: ascending order of their hashes with its own candidate sets and entries
STATE = """
SELECT chunk, chunks, region, persons, pg_catalog.array_send(member_groups) AS member_groups,
       pg_catalog.array_send(versions) AS versions, pg_catalog.array_send(cohorts) AS cohorts,
       candidate_sets::pg_catalog.text AS candidate_sets, pg_catalog.array_send(entries) AS entries,
       pg_catalog.array_send(entry_versions) AS entry_versions,
       pg_catalog.array_send(entry_groups) AS entry_groups, waiting_persons,
       pg_catalog.array_send(waiting_entries) AS waiting_entries, version, entries_since, records,
       pg_catalog.array_send(record_entries) AS record_entries, waiting_records,
       pg_catalog.array_send(waiting_record_entries) AS waiting_record_entries,
       pg_catalog.array_send(last_versions) AS last_versions,
       pg_catalog.array_send(stay_owners) AS stay_owners,
       pg_catalog.array_send(stay_entries) AS stay_entries,
       pg_catalog.array_send(stay_last) AS stay_last, records_keyed
FROM anon.readable_release_state WHERE release_id = $1 ORDER BY chunk"""
#: the integer arrays STATE reads in their binary form (array_send: no Python object per element)
STATE_ARRAYS = ("member_groups", "versions", "cohorts", "entries", "entry_versions", "entry_groups",
                "waiting_entries", "last_versions", "stay_owners", "stay_entries", "stay_last")


def _int4s(raw: bytes | None) -> np.ndarray | None:
    """A one-dimensional int4[]'s binary form (array_send) as integers (None: NULL); None where it
    is not one (NULL elements, or more dimensions)."""
    if raw is None:
        return None
    ndim, has_nulls = np.frombuffer(raw, dtype=">i4", count=2).tolist()
    if ndim == 0:
        return np.empty(0, dtype=np.int64)
    if ndim != 1 or has_nulls:
        return None
    n = int(np.frombuffer(raw, dtype=">i4", count=1, offset=12)[0])
    # after the header (dimensions, nulls, element type, length, lower bound): (4, value) pairs
    pairs = np.frombuffer(raw, dtype=">i4", count=2 * n, offset=20).reshape(n, 2)
    return pairs[:, 1].astype(np.int64) if (pairs[:, 0] == 4).all() else None


#: the last version a state may be of (its next one must fit an int4)
LAST_VERSION = 2147483646


def _broken(release_id: int, what: str) -> InsufficientData:
    return InsufficientData(
        f"the state of release {release_id} (anon.release_state) {what}",
        hint="Restore the release's rows of anon.release_state from a backup, or recreate "
             "the release knowingly.")


@dataclass
class State:
    """What the versions published so far left each person: ``persons`` their hashes (numpy
    ``S32``), aligned with their ``groups``, ``versions`` (that held them) and ``cohorts`` (their
    candidates: a position in ``sets``, {sensitive column: [value texts]})."""

    persons: np.ndarray
    groups: np.ndarray
    versions: np.ndarray
    cohorts: np.ndarray
    sets: list
    #: each person's entry, the version that first held them (published or held back) and
    #: their group then: a position in ``entry_versions``/``entry_groups`` (None: a state
    #: stored before entries were kept)
    entries: np.ndarray | None = None
    entry_versions: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    entry_groups: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    #: the people the newest version held back (sorted hashes) and their entries
    waiting: np.ndarray = field(default_factory=lambda: np.empty(0, dtype="S32"))
    waiting_entries: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    #: the version the state is of, and the oldest version the entries follow people in
    version: int | None = None
    entries_since: int | None = None
    #: each person's record fingerprint and the entry since which it is unchanged (the version
    #: and their group then), aligned with ``persons`` and ``waiting`` (None: stored before
    #: records were kept, every record taken as unchanged since the person's entry)
    records: np.ndarray | None = None
    record_entries: np.ndarray | None = None
    waiting_records: np.ndarray | None = None
    waiting_record_entries: np.ndarray | None = None
    #: each person's last version in the table, published or held back (aligned with
    #: ``persons``; None: stored before people were kept absent, everyone of ``version``): a
    #: person who left is marked absent, never erased, so one who comes back is followed
    last: np.ndarray | None = None
    #: the earlier stays of people who came back: the person (a position in ``persons``), the
    #: stay's entry (a position in ``entry_versions``) and its last version in the table
    stay_owners: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    stay_entries: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    stay_last: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    #: whether ``records`` and ``waiting_records`` are keyed by the release's salt
    #: (:func:`keyed_records`; False: stored before, under the public key)
    records_keyed: bool = True
    #: the last lookup of each stored array (``persons``, ``waiting``): the asked hashes' bytes
    #: and their positions; a check asks the same people several times
    _found: dict = field(default_factory=dict, repr=False, compare=False)
    #: the state of one region of a release refreshed region by region (:meth:`read`'s
    #: ``region``): its people's groups, now and at their entries; load_versions keeps of each
    #: stored version only the groups of these or held in one of these (None: every group)
    region_groups: np.ndarray | None = None

    @classmethod
    def read(cls, plpy, release_id: int, region: int | None = None) -> State:
        """The release's state, its rows read one at a time (a row's values are let go once
        they are arrays here) and joined; ``region``: only the rows that region wrote (a run
        of rows, numbered on from the regions' before), with its groups (``region_groups``)."""
        parts: list[State] = []
        chunks = None           # the rows the state was written in, as its first row says
        regions = []            # the region of each row (a state written region by region)
        first = None            # the number of the first row read
        query, types, args = STATE, ["int4"], [release_id]
        if region is not None:
            query = STATE.replace("WHERE release_id = $1", "WHERE release_id = $1 AND region = $2")
            types, args = ["int4", "int4"], [release_id, region]
        for row in plpy.cursor(plpy.prepare(query, types), args):
            check_interrupts()
            chunks = row["chunks"] if chunks is None else chunks
            first = (row["chunk"] if region is not None else 0) if first is None else first
            if row["chunk"] != first + len(parts) or row["chunks"] != chunks:
                raise _broken(release_id, f"has a row {row['chunk']} of {row['chunks']} where "
                                          f"row {first + len(parts)} was due: a row was lost or copied")
            if regions and row["region"] < regions[-1]:
                raise _broken(release_id, f"has a row {row['chunk']} of region {row['region']} "
                                          f"after one of region {regions[-1]}")
            parts.append(cls._of_row(row, release_id))
            regions.append(row["region"])
            # each region's rows are one run in the order of their hashes
            if len(parts) > 1 and regions[-2] == regions[-1] and parts[-2].persons.size \
                    and parts[-1].persons.size and not parts[-2].persons[-1] < parts[-1].persons[0]:
                raise _broken(release_id, f"has rows {len(parts) - 2} and {len(parts) - 1} whose "
                                          "people are not in the order of their hashes")
        if parts and region is None and len(parts) != chunks or first is not None and \
                first + len(parts) > chunks:
            raise _broken(release_id, f"has {len(parts)} of the {chunks} rows it was written in: "
                                      "a row was lost")
        if not parts:
            empty = np.empty(0, dtype=np.int64)
            state = cls(np.empty(0, dtype="S32"), empty, empty, empty, [])
        else:
            state = parts[0] if len(parts) == 1 else cls._joined(parts, release_id)
        if len(set(regions)) > 1:
            state._in_hash_order(release_id)
        if region is not None:
            state.region_groups = np.unique(np.concatenate([state.groups, state.entry_groups]))
        return state

    def _in_hash_order(self, release_id: int) -> None:
        """A state joined from the runs of several regions put in the order of its hashes (its
        people, and apart its held back ones), the arrays aligned with them following."""
        for hashes, aligned in (("persons", ("groups", "versions", "cohorts", "entries", "records",
                                             "record_entries", "last")),
                                ("waiting", ("waiting_entries", "waiting_records",
                                             "waiting_record_entries"))):
            held = getattr(self, hashes)
            order = _hash_order(held)
            if (held[order][1:] == held[order][:-1]).any():
                raise _broken(release_id, f"holds a person in two regions ({hashes})")
            for name in (hashes, *aligned):
                values = getattr(self, name)
                if values is not None and values.size == order.size:
                    setattr(self, name, values[order])
            if hashes == "persons" and self.stay_owners.size:
                place = np.empty(order.size, dtype=np.int64)
                place[order] = np.arange(order.size)
                owners = place[self.stay_owners]
                by_owner = np.argsort(owners, kind="stable")
                self.stay_owners = owners[by_owner]
                self.stay_entries, self.stay_last = self.stay_entries[by_owner], self.stay_last[by_owner]

    @classmethod
    def _of_row(cls, row, release_id: int) -> State:
        """The state of one row's people (its positions in its own sets and entries)."""
        def broken(what: str) -> InsufficientData:
            return _broken(release_id, what)

        def ints(name: str, low: int | None = 0) -> np.ndarray | None:
            # a flat array of integers (array_send's form) from ``low`` on (CHECKs keep other arrays out of stored
            # rows; a row restored from elsewhere is read the same way)
            raw = row[name]
            if raw is None:
                return None
            out = _int4s(raw)
            if out is None:
                raise broken(f"has NULL or nested elements in {name}")
            if low is not None and out.size and out.min() < low:
                raise broken(f"has {name} below {low}")
            return out

        def hashes(name: str, width: int = 32) -> np.ndarray:
            value = row[name] or b""
            if len(value) % width:
                raise broken(f"has {name} of {len(value)} bytes, not a multiple of {width}")
            return np.frombuffer(value, dtype="S32" if width == 32 else "<u8")

        sets = json.loads(row["candidate_sets"])
        cohorts = ints("cohorts", None)
        entries = ints("entries", None)
        waiting_entries = ints("waiting_entries", None)
        waiting_entries = np.empty(0, dtype=np.int64) if waiting_entries is None else waiting_entries
        entry_versions, entry_groups = ints("entry_versions"), ints("entry_groups")
        n_entries = 0 if entry_versions is None else entry_versions.size
        record_entries, waiting_record_entries = ints("record_entries"), ints("waiting_record_entries")
        # records are kept with entries: without them, nothing to follow them from
        kept_records = entries is not None and record_entries is not None
        if not kept_records:
            record_entries = waiting_record_entries = None
        if (cohorts.size and (cohorts.min() < 0 or cohorts.max() >= len(sets))) or any(
                e is not None and e.size and (e.min() < 0 or e.max() >= n_entries)
                for e in (entries, waiting_entries, record_entries, waiting_record_entries)):
            raise broken("points people at candidate sets or entries it does not hold")
        version, since = row["version"], row["entries_since"]
        if version is not None and not 0 <= version <= LAST_VERSION or since is not None and since < 0:
            raise broken(f"is of version {version} since version {since}: no next version fits")
        empty = np.empty(0, dtype=np.int64)
        # people marked absent and the earlier stays of those who came back (kept with entries)
        last = ints("last_versions") if entries is not None else None
        stays = [ints(name) if entries is not None else None
                 for name in ("stay_owners", "stay_entries", "stay_last")]
        stays = [empty if a is None else a for a in stays]
        persons = len(row["persons"] or b"") // 32
        if last is not None and (last.size != persons or last.size and (
                version is None or last.max() > version)) or stays[1].size and (
                stays[0].max() >= persons or stays[1].max() >= n_entries) or len(
                {a.size for a in stays}) > 1:
            raise broken("marks people absent, or keeps earlier stays, it does not hold")
        counts = ints("versions", None)
        if counts is not None and counts.size and counts.max() > LAST_VERSION:
            raise broken(f"counts a person in {counts.max()} versions: no next version fits")
        state = cls(hashes("persons"), ints("member_groups", None), counts, cohorts,
                   sets, entries, empty if entry_versions is None else entry_versions,
                   empty if entry_groups is None else entry_groups, hashes("waiting_persons"),
                   waiting_entries, version, since,
                   hashes("records", 8) if kept_records and row["records"] is not None else None,
                   record_entries,
                   hashes("waiting_records", 8) if kept_records and row["waiting_records"] is not None
                   else None,
                   waiting_record_entries)
        state.last, (state.stay_owners, state.stay_entries, state.stay_last) = last, stays
        state.records_keyed = row.get("records_keyed") is not False
        return state

    @classmethod
    def _joined(cls, parts: list[State], release_id: int) -> State:
        """The states of a release's rows as one: their people one after the other, each row's
        positions in its candidate sets and entries offset by the rows' before. Rows of
        different versions, or some with entries or records and some without, are no one
        state: refused."""
        first = parts[0]
        kinds = {(p.version, p.entries_since, p.entries is None, p.records is None,
                  p.record_entries is None, p.waiting_records is None,
                  p.waiting_record_entries is None, p.last is None, p.records_keyed)
                 for p in parts}
        if len(kinds) > 1:
            raise _broken(release_id, "has rows of different versions or kinds (entries, records)")
        people = [(p.persons, p.groups, p.versions, p.cohorts, p.entries, p.records, p.record_entries)
                  for p in parts]
        waiting = [(p.waiting, p.waiting_entries, p.waiting_records, p.waiting_record_entries)
                   for p in parts]
        if any(a is not None and a.size != side[0].size for side in (*people, *waiting)
               for a in side[1:]):
            raise _broken(release_id, "has a row whose arrays are not aligned with its people")
        sets = [s for p in parts for s in p.sets]
        set_at = np.cumsum([0] + [len(p.sets) for p in parts[:-1]])
        person_at = np.cumsum([0] + [p.persons.size for p in parts[:-1]])
        entry_at = np.cumsum([0] + [p.entry_versions.size for p in parts[:-1]])

        def joined(name: str, offsets=None):
            # one field at a time, the rows' arrays let go once joined: the join holds the
            # state once and one field twice, not the whole state twice
            arrays = [getattr(p, name) for p in parts]
            for p in parts:
                setattr(p, name, None)
            if arrays[0] is None:
                return None
            out = np.concatenate(arrays)
            if offsets is not None:
                ends = np.cumsum([a.size for a in arrays])
                for start, end, offset in zip((ends - [a.size for a in arrays]).tolist(),
                                              ends.tolist(), offsets.tolist()):
                    out[start:end] += offset
            return out

        version, since = first.version, first.entries_since
        stays = (joined("stay_owners", person_at), joined("stay_entries", entry_at),
                 joined("stay_last"))
        state = cls(joined("persons"), joined("groups"), joined("versions"),
                    joined("cohorts", set_at), sets, joined("entries", entry_at),
                    joined("entry_versions"), joined("entry_groups"), joined("waiting"),
                    joined("waiting_entries", entry_at), version, since,
                    joined("records"), joined("record_entries", entry_at), joined("waiting_records"),
                    joined("waiting_record_entries", entry_at), joined("last"))
        state.stay_owners, state.stay_entries, state.stay_last = stays
        state.records_keyed = first.records_keyed
        return state

    def hashes(self) -> list[bytes]:
        """The persons as bytes (32 each: numpy's items would drop trailing zero bytes)."""
        raw = self.persons.tobytes()
        return [raw[i:i + 32] for i in range(0, len(raw), 32)]

    def find(self, hashes: np.ndarray) -> np.ndarray:
        """Each of ``hashes``' position in ``persons`` (-1: not there; read-only)."""
        return self._lookup("persons", self.persons, hashes)

    def _lookup(self, name: str, stored: np.ndarray, hashes: np.ndarray) -> np.ndarray:
        # the asked hashes compared as integers with a copy kept of the last ones (no copy of
        # them a lookup)
        asked = _as_words(hashes)
        last = self._found.get(name)
        if last is not None and np.array_equal(last[0], asked):
            return last[1]
        at = _positions(stored, hashes)
        at.setflags(write=False)
        self._found[name] = (asked.copy(), at)
        return at

    def entries_of(self, hashes: np.ndarray) -> np.ndarray:
        """Each of ``hashes``' entry (a position in ``entry_versions``; -1: none, a person
        first held now, or a state stored before entries were kept)."""
        out = np.full(hashes.size, -1, dtype=np.int64)
        if self.entries is None:
            return out
        at = self.find(hashes)
        out[at >= 0] = self.entries[at[at >= 0]]
        held = self._lookup("waiting", self.waiting, hashes)
        out[held >= 0] = self.waiting_entries[held[held >= 0]]
        return out

    def stays_of(self, hashes: np.ndarray, records: np.ndarray | None = None):
        """Where each of ``hashes`` was in the table: (their entry while they stayed through the
        newest version, -1 none; the entries and last versions of their stays that ended: the
        earlier stays of people who came back, and the last one of people absent from the
        newest version, who come back now). With ``records`` (their records' fingerprints
        now), their record entry (:meth:`record_entries_of`) and no stay that ended: to the
        analyst who takes a changed record for a new person, one who came back is new too."""
        entries = self.entries_of(hashes) if records is None else self.record_entries_of(hashes, records)
        empty = np.empty(0, dtype=np.int64)
        if self.entries is None or self.last is None and not self.stay_owners.size:
            return entries, empty, empty
        at = self.find(hashes)
        found = np.flatnonzero(at >= 0)
        ended = found[self.last[at[found]] < self.version] if self.last is not None else empty
        stay_entries, stay_last = [entries[ended]], [self.last[at[ended]]] if ended.size else [empty]
        entries[ended] = -1
        if records is not None:
            return entries, empty, empty
        if self.stay_owners.size:
            mine = np.isin(self.stay_owners, at[found])
            stay_entries.append(self.stay_entries[mine])
            stay_last.append(self.stay_last[mine])
        return entries, np.concatenate(stay_entries), np.concatenate(stay_last)

    def record_entries_of(self, hashes: np.ndarray, records: np.ndarray) -> np.ndarray:
        """Each of ``hashes``' entry since which their record (``records``: its fingerprint now)
        is unchanged (-1: none, the record changed or the person is first held now); a state
        stored before records were kept: their entry."""
        if self.records is None or self.record_entries is None or self.entries is None:
            return self.entries_of(hashes)
        out = np.full(hashes.size, -1, dtype=np.int64)
        records = np.asarray(records, dtype=np.uint64)
        for name, persons, stored, entry in (
                ("persons", self.persons, self.records, self.record_entries),
                ("waiting", self.waiting, self.waiting_records, self.waiting_record_entries)):
            if stored is None or entry is None or stored.size != persons.size \
                    or entry.size != persons.size:
                continue
            at = self._lookup(name, persons, hashes)
            same = np.flatnonzero(at >= 0)
            same = same[stored[at[same]] == records[same]]
            out[same] = entry[at[same]]
        return out


def _positions(persons: np.ndarray, hashes: np.ndarray, engine: str = "auto") -> np.ndarray:
    """Each of ``hashes``' position in ``persons`` (-1: not there): sorted and searched by
    their first 8 bytes (an integer sort; numpy's sort of byte strings is several times
    slower), the whole hash compared; the rare runs of equal first bytes one by one. Stored
    in order (a state), by a compiled kernel where numba is loaded (``engine``: "numpy"
    never)."""
    at = np.full(hashes.size, -1, dtype=np.int64)
    if not persons.size or not hashes.size:
        return at
    stored, asked = _first_words(persons), _first_words(hashes)
    # a state is stored in the order of its hashes: sorted again only when it is not;
    # unstable sorts: runs of equal first words are compared whole
    if (stored[1:] >= stored[:-1]).all():
        kern = person_hashes_core._kernels(hashes.size, engine)
        if kern is not None:
            # buckets of the first integer's top bits, two to four stored hashes each (their
            # starts: 2 to 4 bytes a stored person)
            bits = max(1, int(stored.size).bit_length() - 2)
            shift = 64 - bits
            starts = np.zeros((1 << bits) + 1, dtype=np.int64)
            np.cumsum(np.bincount((stored >> np.uint64(shift)).astype(np.intp),
                                  minlength=1 << bits), out=starts[1:])
            kern.find_sorted(stored, _as_words(persons).reshape(-1, 4), starts, shift, asked,
                             _as_words(hashes).reshape(-1, 4), at)
            return at
        order, first = np.arange(stored.size), stored
    else:
        order = np.argsort(stored)
        first = stored[order]
    if first.size * 16 < asked.size:
        # a few stored (the people held back, say): searched as asked, no sort of the asked
        by_key, keys = np.arange(asked.size), asked
    else:
        # searched in ascending order: each search starts where the last one ended
        by_key = np.argsort(asked)
        keys = asked[by_key]
    lo = np.searchsorted(first, keys, "left")
    if (first[1:] != first[:-1]).all():
        # no two stored share their first word: at most one candidate each
        hit = np.flatnonzero(first[np.minimum(lo, first.size - 1)] == keys)
        candidate = order[lo[hit]]
        same = persons[candidate] == hashes[by_key[hit]]
        at[by_key[hit[same]]] = candidate[same]
        return at
    hi = np.searchsorted(first, keys, "right")
    for i in np.flatnonzero(hi > lo).tolist():
        for j in order[lo[i]:hi[i]].tolist():
            if persons[j] == hashes[by_key[i]]:
                at[by_key[i]] = j
                break
    return at


def _as_words(hashes: np.ndarray) -> np.ndarray:
    """32-byte hashes (numpy ``S32``) viewed as little-endian 8-byte words (four a hash), for
    comparing them whole."""
    return np.ascontiguousarray(hashes).view("<u8")


def _hash_order(hashes: np.ndarray) -> np.ndarray:
    """The order that sorts 32-byte hashes (numpy ``S32``) bytewise: by their first 8 bytes (an
    integer sort), all four words where two share them."""
    # an unstable sort: equal first words are sorted again
    order = np.argsort(_first_words(hashes))
    first = _first_words(hashes)[order]
    if (first[1:] == first[:-1]).any():
        order = np.lexsort(_words(hashes).T[::-1])
    return order


def _first_words(hashes: np.ndarray) -> np.ndarray:
    """The first 8 bytes of 32-byte hashes (numpy ``S32``) as integers."""
    return np.ascontiguousarray(hashes).view(">u8")[::4].astype(np.uint64)


def _words(hashes: np.ndarray) -> np.ndarray:
    """32-byte hashes (numpy ``S32``) as rows of four integers, the first the leading bytes."""
    return np.frombuffer(hashes.tobytes(), dtype=">u8").reshape(-1, 4).astype(np.uint64)


def packed(hashes: list[bytes]) -> np.ndarray:
    """Hashes (32 bytes each) as one numpy ``S32`` array."""
    return np.frombuffer(b"".join(hashes), dtype="S32")


def record_fingerprints(qi_texts, sensitive_texts) -> np.ndarray:
    """Each row's record as one 64-bit fingerprint of its QI texts and sensitive text (None:
    NULL): an analyst who sees a person's QIs or value change may take them for someone new."""
    out = np.zeros(len(sensitive_texts), dtype=np.uint64)
    for texts in (*qi_texts, sensitive_texts):
        check_interrupts()
        if isinstance(texts, Coded):
            # each distinct text hashed once (the hash of a text is its own, whatever the rows)
            table = np.r_[text_hashes.distinct_text_hashes(texts.dictionary),
                          text_hashes.NULL_HASH].astype(np.uint64)
            hashed = table[texts.codes]
        else:
            hashed = text_hashes.text_hashes(texts)
        out = (out * np.uint64(0x100000001B3)) ^ hashed
    return out


def record_key(salt: str) -> bytes:
    """The key of a release's record fingerprints (16 bytes), derived from its salt apart from
    its person hashes (SHA-256 of the salt's bytes and an identifier's)."""
    return hashlib.sha256(b"plpy_anon record fingerprints\x00" + salt.encode("utf-8")).digest()[:16]


def keyed_records(state: State, salt: str | None) -> State:
    """``state`` with its record fingerprints keyed by the release's salt: a state stored
    before holds them under the public key, which anyone knowing a person's quasi-identifiers
    can test values against; they are keyed as read, so a refresh compares like with like and
    writes them keyed."""
    if not state.records_keyed and salt is not None:
        key = record_key(salt)
        if state.records is not None:
            state.records = text_hashes.keyed_fingerprints(state.records, key)
        if state.waiting_records is not None:
            state.waiting_records = text_hashes.keyed_fingerprints(state.waiting_records, key)
        state.records_keyed = True
    return state


def people_of(plpy, release_id: int, parameters: dict, identifier_texts, sensitive_dictionaries,
              qi_texts, sensitive_codes=None, state: State | None = None) -> People:
    """The run's :class:`People` (``sensitive_dictionaries``: each sensitive column's distinct
    texts, in code order, as the run coded them; ``qi_texts``: each QI's text per row;
    ``sensitive_codes``: each row's code in the first sensitive column's dictionary, -1 NULL;
    ``state``: the state they are matched with, None: the release's, read)."""
    with timing.phase("read_people"):
        return _people_of(plpy, release_id, parameters, identifier_texts, sensitive_dictionaries,
                          qi_texts, sensitive_codes, state)


def _people_of(plpy, release_id: int, parameters: dict, identifier_texts, sensitive_dictionaries,
               qi_texts, sensitive_codes=None, state: State | None = None) -> People:
    promise = Promise.of(parameters)
    # the stable mode's state, not part of the specification: merged from anon.release_secrets
    salt = release_rows.person_salt(parameters)
    if salt is None:
        raise InsufficientData(
            f"release {release_id} is refreshed in the stable mode but its salt (the key of its "
            "person hashes, anon.release_secrets) is gone, so nobody it published can be followed",
            hint="Restore the release's row of anon.release_secrets from a backup, or drop the "
                 "release and create it again (a new history that earlier versions can be "
                 "intersected with).")
    identifiers = [column if isinstance(column, Integers) else Coded.of(column)
                   for column in identifier_texts]
    n = len(identifiers[0]) if identifiers else 0
    # rows with a NULL identifier
    missing = int(np.logical_or.reduce([
        c.missing() if isinstance(c, Integers) else c.codes < 0 for c in identifiers]).sum()) if n else 0
    if missing:
        raise InvalidParameter(
            f"refresh_mode => 'stable' follows people by {', '.join(promise.identifiers or ())}, and "
            f"{missing} rows have no value there (NULL)",
            hint="Give every row its identifier (a NOT NULL primary key, say), or recreate the release "
                 "with refresh_mode => 'fresh'.")
    persons = coded_persons(identifiers, salt)
    hashes = _hash_list(persons)
    if len(identifiers) == 1 and isinstance(identifiers[0], Integers):
        shared = identifiers[0].shared()
    elif len(identifiers) == 1:
        # one column: its distinct texts are distinct people
        shared = n - int(np.count_nonzero(np.bincount(identifiers[0].codes,
                                                       minlength=len(identifiers[0].dictionary))))
    else:
        shared = len(hashes) - len(set(hashes))
    del identifiers
    if shared:
        raise InvalidParameter(
            f"refresh_mode => 'stable' follows people by {', '.join(promise.identifiers or ())}, and "
            f"{shared} rows share a value with another row (or have none)",
            hint="Identifier columns must tell people apart (a primary key, say); make them unique, "
                 "or recreate the release with refresh_mode => 'fresh'.")
    state = keyed_records(State.read(plpy, release_id) if state is None else state, salt)
    if not state.persons.size and published_versions(plpy, release_id):
        raise InsufficientData(
            f"release {release_id} has published versions, and what they showed of each person "
            "(anon.release_state) is gone; a refresh now would start a new history that analysts "
            "who kept the old versions could intersect with it",
            hint="Restore the release's row of anon.release_state (it is in every pg_dump of the "
                 "database), or recreate the release with replace => true knowingly.")
    n = len(hashes)
    check_interrupts()
    at = state.find(persons)
    known = at >= 0
    groups = np.full(n, -1, dtype=np.int64)
    groups[known] = state.groups[at[known]]
    # people who came back (absent from the newest version, or held back by it): their
    # candidates bind them, they join the group holding theirs, and none of the newest
    # version's published rows is theirs
    back = np.zeros(n, dtype=bool)
    if state.last is not None:
        back[known] = (state.last[at[known]] < state.version) \
            | (state._lookup("waiting", state.waiting, persons)[known] >= 0)
    groups[back] = -1
    # people with the same candidates share a cohort (people held back so far in no class
    # have none)
    shown = known.copy()
    shown[known] = with_candidates(state, at[known])
    used, cohort_of_known = group_index(state.cohorts[at[shown]])
    cohorts = np.full(n, -1, dtype=np.int64)
    cohorts[shown] = cohort_of_known
    cohort_sets = [state.sets[u] for u in used.tolist()]
    names = promise.sensitive or ()
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
    qi_texts = [Coded.of(texts) for texts in qi_texts]
    people = People(hashes, groups, cohorts, cohort_values, history=bool(state.persons.size),
                    qi_texts=qi_texts, state=state, persons=persons)
    if sensitive_codes is not None and sensitive_dictionaries:
        people.records = text_hashes.keyed_fingerprints(record_fingerprints(
            qi_texts, Coded(sensitive_codes, list(sensitive_dictionaries[0]))), record_key(salt))
    if names and sensitive_dictionaries:
        load_versions(plpy, release_id, people, list(sensitive_dictionaries[0]), state)
    # a version that held everyone back leaves nobody in the state but its held back people,
    # whose groups are kept like published ones (a fresh partition would split them)
    people.history = people.history or bool(people.waiting)
    people.joined = groups.copy()
    if back.any():
        # their group then, followed to the group holding it now (groups only merge)
        before = state.groups[at[back]]
        people.joined[back] = before if people.lineage is None else republish._mapping(
            people.lineage, people.roots)(before)
    if people.waiting:
        new = np.flatnonzero(~known)
        people.joined[new] = np.fromiter((people.waiting.get(hashes[i], -1) for i in new.tolist()),
                                         dtype=np.int64, count=new.size)
    return people


VERSIONS = ("SELECT version, group_ids, roots, sizes, vals, linked, people_linked, waiting, waiting_groups, "
            "next_groups FROM anon.readable_release_versions WHERE release_id = $1 ORDER BY version")
#: what the difference check takes of a stored version's row besides its values and sizes
VERSION_ROW = ("version", "linked", "people_linked", "waiting", "waiting_groups", "next_groups")
#: a stored version's values (one per published row) joined whole, each ended by 0x01, NULL
#: 0x02, with their number and whether one is the NULL mark (:func:`_version_values`)
VALUES_JOINED = """
       pg_catalog.convert_to(pg_catalog.array_to_string(v.vals, E'\\x01', E'\\x02'), 'UTF8')
           AS vals_joined,
       coalesce(pg_catalog.cardinality(v.vals), 0) AS vals_count,
       pg_catalog.array_position(v.vals, E'\\x02') IS NOT NULL AS vals_marked"""
#: :data:`VERSIONS` with each one's values read as :data:`VALUES_JOINED` (no row per value)
VERSIONS_JOINED = f"""
SELECT v.version, v.group_ids, v.roots, v.sizes, v.linked, v.people_linked, v.waiting,
       v.waiting_groups, v.next_groups,{VALUES_JOINED}
FROM anon.readable_release_versions v WHERE v.release_id = $1 ORDER BY v.version"""


def _version_values(plpy, row, release_id: int) -> tuple[np.ndarray, list]:
    """(each value's code among the distinct texts, NULL coded as their number; the texts) of a
    stored version's ``row`` read with :data:`VALUES_JOINED`, read again a row a value
    (:data:`KEPT_VALUES`) where a value is the NULL mark or holds the end one."""
    values = None if row["vals_marked"] else \
        _texts_ending(row["vals_joined"], int(row["vals_count"]), 0x01, 0x02)
    row["vals_joined"] = None
    if values is None:
        packed = run(plpy, KEPT_VALUES, ["int4", "int4"], [release_id, row["version"]])[0]
        values = _decoded_texts(packed["vals_elements"], int(packed["vals_count"] or 0))
    return values


def load_versions(plpy, release_id: int, people: People, dictionary: list,
                  state: State | None = None) -> None:
    """The multisets every earlier version published (anon.release_versions) into ``people``,
    with which of each one's groups still have someone in the table (``state``: the release's
    people, their entries)."""
    region_groups = None if state is None else state.region_groups
    rows = run(plpy, VERSIONS_JOINED if region_groups is None else VERSION_HEADS, ["int4"],
               [release_id])
    values = list(dictionary)
    position = {t: i for i, t in enumerate(values)}
    stored = []
    for row in rows:
        check_interrupts()
        if region_groups is None:
            codes, texts = _version_values(plpy, row, release_id)
        else:
            codes, texts = _region_values(plpy, row, release_id, region_groups)
        codes[codes == len(texts)] = -1
        # texts only earlier versions hold, in the order they first appear
        for text in texts:
            if text not in position:
                position[text] = len(values)
                values.append(text)
        stored.append((codes, np.array([position[t] for t in texts], dtype=np.int64)))
    values.append(None)
    width = len(values)
    lineage = {}
    for row, (vals, recode) in zip(rows, stored):
        check_interrupts()
        ids = np.asarray(row["group_ids"], dtype=np.int64)
        codes = np.where(vals < 0, width - 1, recode[np.maximum(vals, 0)] if recode.size else 0)
        owner = np.repeat(np.arange(ids.size), np.asarray(row["sizes"], dtype=np.int64))
        counts = np.bincount(owner * width + codes, minlength=ids.size * width).reshape(ids.size, width)
        people.versions.append(Version(ids, counts, _linked(row), _people_linked(row)))
        lineage.update(zip(row["group_ids"], row["roots"]))
    del stored
    people.version_rows = [
        {**{name: row[name] for name in VERSION_ROW}, "group_ids": np.asarray(row["group_ids"], dtype=np.int64),
         "roots": np.asarray(row["roots"], dtype=np.int64),
         **{name: row[name] for name in ("region_of", "all_groups") if name in row}} for row in rows]
    if state is not None:
        present = people.persons if people.persons is not None else packed(people.hashes)
        for version, alive in zip(people.versions, alive_groups(rows, state, present, release_id)):
            version.alive = alive
        if people.records is not None:
            for version, same in zip(people.versions,
                                     alive_groups(rows, state, present, release_id, people.records)):
                version.unchanged = same
    if rows and rows[-1]["waiting"]:
        people.waiting = dict(zip((bytes(h) for h in rows[-1]["waiting"]), rows[-1]["waiting_groups"]))
    people.lineage = np.array(list(lineage), dtype=np.int64)
    people.roots = np.array(list(lineage.values()), dtype=np.int64)
    people.values = values


#: the fields of a stored version's row aligned with its groups
GROUP_FIELDS = ("group_ids", "roots", "sizes", "linked", "people_linked", "next_groups")
#: :data:`VERSIONS_JOINED` without the values (read apart: :data:`VALUES_SLICE`)
VERSION_HEADS = VERSIONS_JOINED.replace(f",{VALUES_JOINED}", "")
#: the values of one stored version from ``$3`` to ``$4`` (1-based, inclusive) as
#: :data:`VALUES_JOINED` reads them
VALUES_SLICE = ("SELECT " + VALUES_JOINED.replace("v.vals", "v.vals[$3:$4]").lstrip() +
                " FROM anon.readable_release_versions v WHERE v.release_id = $1 AND v.version = $2")


def _region_values(plpy, row: dict, release_id: int, region_groups: np.ndarray):
    """(codes, texts) of the values of a stored version's groups of one region (``row``:
    :data:`VERSION_HEADS`'; ``region_groups``: :meth:`State.read`'s), the row cut to those
    groups (:func:`_region_version`). A region's groups follow one another in a version (each
    version is stored region after region), so only their slice of the values is read; where
    they do not, or a value is the NULL mark, the whole version's are read and cut."""
    ids = np.asarray(row["group_ids"], dtype=np.int64)
    keep = np.isin(ids, region_groups) | np.isin(np.asarray(row["roots"], dtype=np.int64),
                                                 region_groups)
    sizes = np.asarray(row["sizes"], dtype=np.int64)
    places = np.flatnonzero(keep)
    ends = np.cumsum(sizes)
    if places.size and places[-1] - places[0] + 1 == places.size:
        low, high = int(ends[places[0]] - sizes[places[0]]), int(ends[places[-1]])
        row.update(run(plpy, VALUES_SLICE, ["int4", "int4", "int4", "int4"],
                       [release_id, row["version"], low + 1, high])[0])
        if not row["vals_marked"]:
            _region_version(row, keep)
            return _version_values(plpy, row, release_id)
    elif not places.size:
        _region_version(row, keep)
        return np.zeros(0, dtype=np.int64), []
    whole = int(ends[-1]) if ends.size else 0
    row.update(run(plpy, VALUES_SLICE, ["int4", "int4", "int4", "int4"],
                   [release_id, row["version"], 1, whole])[0])
    codes, texts = _version_values(plpy, row, release_id)
    _region_version(row, keep)
    return codes[np.repeat(keep, sizes)], texts


def _region_version(row: dict, keep: np.ndarray) -> None:
    """A stored version's ``row`` cut in place to the groups ``keep`` marks:
    ``row["region_of"]`` their places in the whole version (its roots are written back
    there), ``row["all_groups"]`` its number of groups. The people it held back are kept where
    they wait in a kept group."""
    size = len(row["group_ids"])
    row["region_of"], row["all_groups"] = np.flatnonzero(keep), size
    for name in GROUP_FIELDS:
        if row[name] is not None and len(row[name]) == size:
            row[name] = [v for v, k in zip(row[name], keep.tolist()) if k]
    if row["waiting"]:
        kept = set(row["group_ids"])
        held = [(p, g) for p, g in zip(row["waiting"], row["waiting_groups"]) if g in kept]
        row["waiting"] = [p for p, _ in held] or None
        row["waiting_groups"] = [g for _, g in held] or None


def alive_groups(rows, state: State, present: np.ndarray, release_id=None,
                 records=None) -> list[np.ndarray | None]:
    """Per stored version (``rows`` of anon.release_versions, oldest first): whether each of its
    groups holds someone of ``present`` (the people in the table now, hashes) then, or None
    where the state does not say (versions older than its entries); with ``records`` (their
    records' fingerprints now), someone whose record is unchanged since. Each person's group in
    a version follows from their entry and the versions' steps (groups only merge)."""
    with timing.phase("alive_groups"):
        return _alive_groups(rows, state, present, release_id, records)


def _alive_groups(rows, state: State, present: np.ndarray, release_id=None,
                  records=None) -> list[np.ndarray | None]:
    entries, stay_entries, stay_last = state.stays_of(present, records)
    # the distinct entries (positions in entry_versions, checked when read), marked not sorted
    entries = _distinct_keys(entries[entries >= 0], state.entry_versions.size)
    # and the stays that ended, each followed until its last version (people who came back)
    if stay_entries.size:
        stays = np.unique(stay_entries << 32 | stay_last)
        entries = np.r_[entries, stays >> 32]
        until = np.r_[np.full(entries.size - stays.size, LAST_VERSION + 1), stays & 0xFFFFFFFF]
    else:
        until = None
    # a state of another version than the newest stored (written apart) says nothing
    since = state.entries_since if state.entries is not None and rows \
        and state.version == rows[-1]["version"] else None
    entered = state.entry_versions[entries] if entries.size else np.empty(0, dtype=np.int64)
    first = state.entry_groups[entries] if entries.size else np.empty(0, dtype=np.int64)
    group = np.full(entries.size, -1, dtype=np.int64)     # each entry's group in the version
    out: list[np.ndarray | None] = []
    for row in rows:
        version = row["version"]
        group[entered == version] = first[entered == version]
        ids = np.asarray(row["group_ids"], dtype=np.int64)
        here = group >= 0 if until is None else (group >= 0) & (until >= version)
        out.append(None if since is None or version < since else np.isin(ids, group[here]))
        steps = row["next_groups"]
        if steps is not None and any(s is None or isinstance(s, list) for s in steps):
            raise InsufficientData(
                f"version {version} of release {release_id} (anon.release_versions) has NULL or "
                "nested elements in next_groups",
                hint="Restore the release's rows of anon.release_versions from a backup, or "
                     "recreate the release knowingly.")
        if steps is not None and len(steps) != ids.size:
            steps = None        # not this version's (written apart): taken as not stored
        if steps is None:
            # no step stored (the newest version, or one stored before entries were kept):
            # the groups of people followed so far are unknown in later versions
            if (group >= 0).any() and row is not rows[-1]:
                since = None
            continue
        if ids.size:
            order = np.argsort(ids, kind="stable")
            at = order[np.minimum(np.searchsorted(ids, group, sorter=order), ids.size - 1)]
            held = (group >= 0) & (ids[at] == group)
            group[held] = np.asarray(steps, dtype=np.int64)[at[held]]
    return out


def _linked(row) -> np.ndarray | None:
    """A stored version's unions of overlapping groups (None: none overlapped)."""
    return None if row["linked"] is None else np.asarray(row["linked"], dtype=np.int64)


def _people_linked(row) -> np.ndarray | None:
    """A stored version's unions of groups linked by people (None: not stored, taken as its
    unions of overlapping groups)."""
    return None if row["people_linked"] is None else np.asarray(row["people_linked"], dtype=np.int64)


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
    qi_columns = [Coded.of(texts) for texts in people.qi_texts]
    if shown.all():
        hashes, qi_texts = people.hashes, qi_columns
    else:
        keep = np.flatnonzero(shown)
        hashes = [people.hashes[i] for i in keep.tolist()]
        qi_texts = [column.take(keep) for column in qi_columns]
    waiting = np.flatnonzero(~shown)
    records = people.records
    out = {"hashes": hashes, "groups": groups[shown].tolist(),
           "records": None if records is None else records[shown],
           "waiting_records": None if records is None else records[~shown],
           # the people held back link classes too (they are in the table)
           "waiting_qi_texts": [column.take(waiting) for column in qi_columns],
           # per QI, whether a row of the run (held back ones too) has a NULL: it meets every range
           "qi_nulls": [None in column for column in qi_columns],
           "qi_texts": qi_texts, "version": None, "state": people.state,
           # the stored versions as the run read them (their multisets over people.values)
           "read_versions": None if people.version_rows is None else (people.version_rows, people.versions)}
    if rows.sensitive is None or not people.values:
        return out
    if published is None:
        ids, index = group_index(groups)
        codes = people.codes(rows.sensitive[:, 0])
        width = len(people.values)
        counts = np.bincount(index.ravel() * width + codes, minlength=ids.size * width).reshape(ids.size, width)
        held_back = counterfeit = 0
        choices = {"advance": int(ids.size)}
        overlap, by_people = republish.box_unions(index.ravel(), ids.size, *qi_boxes(rows.encoded))
        linked = None if overlap is None else ids[overlap]
        people_linked = ids if by_people is None else ids[by_people]
    else:
        ids, counts, linked = published.ids, published.counts, published.linked
        people_linked = published.people_linked
        held_back, counterfeit = published.held_back, published.counterfeit
        choices = {name: int((published.choice == c).sum()) for c, name in enumerate(republish.CHOICES)}
    out["version"] = {"group_ids": ids.tolist(), "counts": counts, "values": people.values,
                      "linked": None if linked is None else linked.tolist(),
                      "people_linked": None if people_linked is None else people_linked.tolist(),
                      "waiting": [people.hashes[i] for i in waiting.tolist()],
                      "waiting_groups": groups[waiting].tolist(),
                      "held_back": held_back, "counterfeit": counterfeit, "groups_by_choice": choices}
    return out


def published_versions(plpy, release_id: int) -> int:
    """How many versions the release's last check counted (0: none published yet)."""
    row = run(plpy, "SELECT (verification -> 'across_versions' ->> 'most_versions')::int AS n "
                    "FROM anon.releases WHERE release_id = $1", ["int4"], [release_id])
    return (row[0]["n"] or 0) if row else 0


#: the version of the release's state and its newest stored version, as committed when this
#: statement starts (READ COMMITTED: after the locks its transaction holds)
COMMITTED_VERSIONS = """
SELECT (SELECT pg_catalog.max(version) FROM anon.readable_release_state WHERE release_id = $1) AS state,
       (SELECT pg_catalog.max(version) FROM anon.release_versions WHERE release_id = $1) AS stored"""


def read_before_commit(plpy, release_id: int, run_stats: dict | None) -> bool:
    """Whether a stable run (``run_stats``: its stash) read the state and stored versions of
    another version than the committed ones this statement sees: a plain REFRESH takes its
    snapshot before it waits for the release's lock, so its run reads them as they were before a
    refresh holding that lock committed. False where the run read none (the check reads them)."""
    stashed = (run_stats or {}).get("people")
    if stashed is None or stashed.get("state") is None:
        return False
    now = run(plpy, COMMITTED_VERSIONS, ["int4"], [release_id])[0]
    if now["state"] != stashed["state"].version:
        return True
    read = stashed.get("read_versions")
    return read is not None and now["stored"] != (read[0][-1]["version"] if read[0] else None)


def released_relation(plpy, release: dict) -> str:
    """What analysts read: the release's own name (a compact release's view)."""
    return ident(plpy, release["release_schema"], release["release_name"])


def check_and_remember(plpy, release: dict, run_stats: dict | None) -> dict | None:
    """The cross-version check of a stable release's new version (see the module docstring);
    returns its figures, or None for a release of another mode or a record without a run."""
    promise = Promise.of(jsonb(release["parameters"]))
    if promise.refresh_mode != "stable" or not run_stats or run_stats.get("people") is None:
        return None
    stashed = run_stats["people"]
    if stashed.get("check") is not None:
        # a first version built region by region is checked so (db/stable_regions.py)
        return stashed["check"](plpy, release)
    hashes, groups, qi_texts = stashed["hashes"], stashed["groups"], stashed["qi_texts"]
    tbl = guards.table_in_query(plpy, release["source"])
    cols = {c.name: c for c in catalog.table_columns(plpy, tbl)}
    qis = [cols[name] for name in promise.quasi_identifiers or ()]
    sensitive = [cols[name] for name in promise.sensitive or ()]
    progress(plpy, f"checking {len(hashes)} people against every version")
    # what the last version left each person (and their group then, for the difference check),
    # read before the check replaces it: the row the run read in this transaction
    state = stashed.get("state") or keyed_records(State.read(plpy, release["release_id"]),
                                                  release_rows.person_salt(jsonb(release["parameters"])))
    waiting_texts = stashed.get("waiting_qi_texts") or [[] for _ in qi_texts]
    everyone = len(hashes) + (len(waiting_texts[0]) if waiting_texts else 0)
    nulls = stashed.get("qi_nulls") or [None in texts for texts in qi_texts]
    version = stashed["version"]
    waiting = ((), ()) if version is None else (version.get("waiting") or (),
                                                version.get("waiting_groups") or ())
    with timing.phase("check_classes"):
        classes = released_classes(plpy, release, qis, sensitive,
                                   [a + b for a, b in zip(qi_texts, waiting_texts)], nulls)
        # every person in the table (published ones first) with each class holding them; the
        # classes that meet (the difference check's: every two that can hold one person, where
        # a range decides; sets alone link them as a chain) and the run's groups guide the
        # search, never its result
        linked, near = None, None
        if version is not None:
            linked = linked_classes(classes) if classes.linkable[0].shape[1] else None
            if len(groups) + len(waiting[1]) == everyone:
                near = np.r_[np.asarray(groups, dtype=np.int64),
                             np.asarray(waiting[1], dtype=np.int64)]
        matched = containment.contained(classes.axes, everyone, classes.count, linked=linked,
                                        near=near)
    with timing.phase("check_candidates"):
        records = stashed.get("records")
        records = None if records is None else (records, stashed["waiting_records"])
        withdrawn = () if version is None else np.asarray(version["group_ids"], dtype=np.int64)[
            np.asarray(version["counts"]).reshape(len(version["group_ids"]), -1).sum(axis=1) == 0]
        figures = remember(plpy, release["release_id"], promise, hashes, groups, classes, state,
                           matched, waiting, records, withdrawn)
    if stashed["version"] is not None:
        with timing.phase("check_differences"):
            # which earlier groups still have someone: the people in the table, by the state
            # as it was (their entries)
            present, rid = packed(list(hashes) + list(waiting[0])), release["release_id"]
            now = None if records is None else np.concatenate(records)
            differences, checked = check_differences(
                plpy, release, promise, stashed["version"], state, hashes, groups, classes, matched,
                lambda kept: alive_groups(kept, state, present, rid),
                None if now is None else lambda kept: alive_groups(kept, state, present, rid, now),
                present, stashed.get("read_versions"))
            figures.update(differences)
            store_version(plpy, rid, checked)
        # the groups of the version before, now followed into this one's: its step
        run(plpy, NEXT_GROUPS, ["int4"], [release["release_id"]])
    refuse_below_l(release, promise, figures)
    if version is not None and version["group_ids"] and len(withdrawn) == len(version["group_ids"]):
        plpy.warning(
            f"{release['release_schema']}.{release['release_name']} publishes no rows in this "
            "version: no grouping of the table as it is now keeps everyone's candidate sensitive "
            "values across the versions published, and the last version, read against the table "
            "as it is now, was never checked",
            hint="Its people are kept: a later refresh publishes rows again once a grouping is "
                 "safe. Each refresh's groups_by_choice (anon.refresh_history.across_versions) "
                 "counts the groups withdrawn.")
    return figures


#: the version before the newest: the group of the newest holding each of its groups (its roots
#: as the newest was stored)
NEXT_GROUPS = """
UPDATE anon.release_versions v SET next_groups = (
    SELECT r.roots FROM anon.readable_release_versions r
    WHERE r.release_id = $1 AND r.version = v.version)
WHERE v.release_id = $1 AND v.version = (SELECT pg_catalog.max(version) - 1
                                         FROM anon.release_versions WHERE release_id = $1)"""


def overlapping_sets(lo: np.ndarray, hi: np.ndarray, sets: list[list],
                     engine: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """Pairs (a < b as positions) of boxes that meet on every ranged dimension (``lo``, ``hi`` as
    :func:`overlapping_boxes`) and whose value sets share a value on every set dimension
    (``sets``: per dimension, each box's non-empty list of values, None a value of its own):
    :func:`overlapping_coded` of the sets' values coded (``engine``: :func:`overlapping_boxes`')."""
    import pandas as pd  # the stable mode's paths only: a fresh build loads no pandas
    count = lo.shape[0]
    coded = []
    for boxes in sets:
        check_interrupts()
        lengths = np.fromiter(map(len, boxes), dtype=np.int64, count=count)
        flat = np.fromiter(itertools.chain.from_iterable(boxes), dtype=object, count=int(lengths.sum()))
        raw, uniques = pd.factorize(flat)           # None: -1, a value of its own (the last)
        coded.append((np.repeat(np.arange(count), lengths), np.where(raw < 0, len(uniques), raw)))
    return overlapping_coded(lo, hi, coded, engine)


def overlapping_coded(lo: np.ndarray, hi: np.ndarray, sets: list,
                      engine: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """:func:`overlapping_sets` with each set dimension as (box, value code) pairs (every box
    holding one value at least). Where only sets decide, the boxes holding one combination of
    values are linked as a chain, not pairwise (the unions are what matters). Otherwise each set
    is also the interval of its values' codes (a necessary condition the sweep tests with the
    ranges) and a bitmask of them (the exact test; on the compiled kernel, within the sweep)."""
    count = lo.shape[0]
    coded, masks, firsts, lasts = [], [], [], []
    for box, raw in sets:
        check_interrupts()
        width = int(raw.max()) + 1 if raw.size else 1
        # each (box, value) once
        pairs = containment.distinct(box.astype(np.int64) * width + raw)
        owner, held_value = pairs // width, pairs % width
        # codes by how many boxes hold each value, most first: a partition's sets are then
        # narrow intervals of codes, as the fit's most-frequent-first order makes them
        held = np.bincount(held_value, minlength=width)
        ranked = np.lexsort((np.arange(width), -held))[:int((held > 0).sum())]
        recode = np.full(width, -1, dtype=np.int64)
        recode[ranked] = np.arange(ranked.size)
        element = recode[held_value]
        coded.append((owner, element))
        mask = np.zeros((count, (max(ranked.size, 1) + 63) // 64), dtype=np.uint64)
        np.bitwise_or.at(mask, (owner, element // 64),
                         np.left_shift(np.uint64(1), (element % 64).astype(np.uint64)))
        masks.append(mask)
        first = np.full(count, ranked.size, dtype=np.int64)
        last = np.full(count, -1, dtype=np.int64)
        np.minimum.at(first, owner, element)
        np.maximum.at(last, owner, element)
        firsts.append(first)
        lasts.append(last)
    if lo.shape[1] == 0 and coded:
        # each box's codes in order (the pairs come by box)
        coded = [(owner, element[np.lexsort((element, owner))]) for owner, element in coded]
        per_box = [np.split(element, np.searchsorted(owner, np.arange(1, count)))
                   for owner, element in coded]
        per_box = [[c.tolist() for c in dim] for dim in per_box]
        combos = [(box, key) for box, per_dim in enumerate(zip(*per_box))
                  for key in itertools.product(*per_dim)]
        if not combos:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        boxes = np.array([b for b, _ in combos], dtype=np.int64)
        keys = np.array([k for _, k in combos], dtype=np.int64).reshape(len(combos), len(coded))
        order = np.lexsort((boxes,) + tuple(keys[:, d] for d in reversed(range(keys.shape[1]))))
        keys, boxes = keys[order], boxes[order]
        same = np.all(keys[1:] == keys[:-1], axis=1) & (boxes[1:] != boxes[:-1])
        a, b = boxes[:-1][same], boxes[1:][same]
        return np.minimum(a, b), np.maximum(a, b)
    if coded:
        lo = np.column_stack([lo] + firsts)
        hi = np.column_stack([hi] + lasts)
    words = (np.hstack(masks), np.cumsum([0] + [m.shape[1] for m in masks]).astype(np.int64)) \
        if masks else None
    a, b = overlapping_boxes(lo, hi, engine, words)
    for mask in masks:
        shared = np.any(mask[a] & mask[b], axis=1)
        a, b = a[shared], b[shared]
    return a, b


def linked_classes(classes: Classes) -> tuple[np.ndarray, np.ndarray]:
    """The pairs (a, b as class numbers) of released classes that some person's QIs could lie in
    both (:attr:`Classes.linkable`): their value sets share a value (NULL included) and their
    ranges meet on every QI; never every pair of classes. Found once (the check's search of
    the classes holding each person is guided by them too)."""
    if classes.linked is not None:
        return classes.linked
    lo, hi, sets, meets = classes.linkable
    keep = np.flatnonzero(meets)
    position = np.full(classes.count, -1, dtype=np.int64)
    position[keep] = np.arange(keep.size)
    kept_sets = []
    for box, code in sets:
        held = meets[box]
        kept_sets.append((position[box[held]], code[held]))
    a, b = overlapping_coded(lo[keep], hi[keep], kept_sets)
    classes.linked = keep[a], keep[b]
    return classes.linked


#: candidate pairs tested at once by :func:`overlapping_boxes`
BOX_CHUNK = 1 << 20
#: a node of the boxes' k-d split with this many boxes or fewer tests each pair of them (the
#: pairs are tested in numpy at once: fewer levels pay; 80,000 classes of a 1M-row release,
#: 2.6 s against 4.4 s with 8)
LEAF_BOXES = 64


def overlapping_boxes(lo: np.ndarray, hi: np.ndarray, engine: str = "auto",
                      words: tuple | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The pairs (a < b as positions) of boxes ``lo[i] <= x <= hi[i]`` (integer codes, one column
    a dimension) that meet on every dimension, each once; every box meets every other when there
    is no dimension. The boxes are split like a k-d tree (:func:`_box_leaves`), each pair of a
    leaf tested: two boxes that meet share a leaf, and a partition's boxes (disjoint but for a
    few) cost about their number times the depth, not its square. ``engine``: "numpy", "numba"
    (core.containment.meeting_pairs) or "auto" (numba where the process has the kernels or
    the boxes are many). ``words``: (bit words (count, W), offsets) of sets the compiled sweep
    also tests (a pair shares a bit of each set), which a caller tests again on numpy."""
    count, dims = lo.shape
    if count < 2:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    if dims == 0:
        # everything meets: a chain links them into one union
        first = np.arange(count - 1, dtype=np.int64)
        return first, first + 1
    if engine != "numpy":
        from plpy_anon.core.republication import _kernels
        kern = _kernels(None if engine == "numba" else count)
        if kern is not None:
            return containment.meeting_pairs(kern, lo, hi, words)
    leaf, box = _box_leaves(lo, hi)
    order = np.lexsort((box, leaf))
    leaf, box = leaf[order], box[order]
    # each entry is paired with the entries after it in its leaf
    ends = np.searchsorted(leaf, leaf, side="right")
    starts = np.arange(1, leaf.size + 1)
    lengths = ends - starts
    total = np.cumsum(lengths)
    out_a, out_b = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    i = 0
    while i < leaf.size:
        check_interrupts()
        done = int(total[i - 1]) if i else 0
        j = min(max(int(np.searchsorted(total, done + BOX_CHUNK, side="right")), i + 1), leaf.size)
        ln = lengths[i:j]
        x = np.repeat(np.arange(i, j), ln)
        y = (np.arange(int(ln.sum())) - np.repeat(np.cumsum(ln) - ln, ln)) + np.repeat(starts[i:j], ln)
        pa, pb = box[x], box[y]
        ok = np.all((lo[pa] <= hi[pb]) & (lo[pb] <= hi[pa]), axis=1)
        out_a.append(pa[ok])
        out_b.append(pb[ok])
        i = j
    a, b = np.concatenate(out_a), np.concatenate(out_b)
    if leaf.size > count:
        # boxes crossing a cut sit in several leaves: a pair of them may be found twice
        key = np.unique(a * count + b)
        a, b = key // count, key % count
    return a, b


def _box_leaves(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(leaf, box) entries of a k-d split of boxes, every node of a level at once: each node cuts
    the dimension whose cut at the median lower bound leaves its larger side smallest; a box
    starting below the cut goes left, one ending at or past it right (one crossing it both), so
    two boxes that meet share a child. A node stops at LEAF_BOXES boxes or when no cut helps."""
    count, dims = lo.shape
    # per dimension, bounds as ranks among the dimension's bounds (small keys)
    lo_r = np.empty((count, dims), dtype=np.int64)
    hi_r = np.empty((count, dims), dtype=np.int64)
    for d in range(dims):
        universe = np.unique(np.concatenate([lo[:, d], hi[:, d]]))
        lo_r[:, d] = np.searchsorted(universe, lo[:, d])
        hi_r[:, d] = np.searchsorted(universe, hi[:, d])
    width = 2 * count + 1
    ids, node = np.arange(count, dtype=np.int64), np.zeros(count, dtype=np.int64)
    nodes, next_leaf = 1, 0
    leaves, boxes = [], []
    while ids.size:
        check_interrupts()
        size = np.bincount(node, minlength=nodes)
        start = np.r_[0, np.cumsum(size)[:-1]]
        best = np.full(nodes, np.iinfo(np.int64).max)
        best_dim = np.zeros(nodes, dtype=np.int64)
        best_cut = np.zeros(nodes, dtype=np.int64)
        if (size > LEAF_BOXES).any():
            for d in range(dims):
                key_lo = np.sort(node * width + lo_r[ids, d])
                key_hi = np.sort(node * width + hi_r[ids, d])
                filled = np.flatnonzero(size)
                cut_key = key_lo[start[filled] + size[filled] // 2]
                left = np.searchsorted(key_lo, cut_key) - start[filled]
                right = size[filled] - (np.searchsorted(key_hi, cut_key) - start[filled])
                score = np.maximum(left, right)
                better = score < best[filled]
                best[filled[better]] = score[better]
                best_dim[filled[better]] = d
                best_cut[filled[better]] = cut_key[better] - filled[better] * width
        split = (size > LEAF_BOXES) & (best < size)
        stop = ~split[node]
        leaf_id = np.cumsum(~split) - 1 + next_leaf
        next_leaf += int((~split).sum())
        leaves.append(leaf_id[node[stop]])
        boxes.append(ids[stop])
        ids, node = ids[~stop], node[~stop]
        child = np.cumsum(split) - 1          # each split node's rank: children 2r, 2r + 1
        nodes = 2 * int(split.sum())
        cut, dim = best_cut[node], best_dim[node]
        to_left, to_right = lo_r[ids, dim] < cut, hi_r[ids, dim] >= cut
        ids = np.r_[ids[to_left], ids[to_right]]
        node = np.r_[2 * child[node[to_left]], 2 * child[node[to_right]] + 1]
    return np.concatenate(leaves), np.concatenate(boxes)


def _signatures(owner: np.ndarray, code: np.ndarray, count: np.ndarray, n: int) -> list[bytes]:
    """The multisets of ``n`` owners as a bag, a multiset as (owner, value code, count) triples
    (codes of one dictionary; an owner may repeat a code): each owner's (code, count) pairs,
    summed and sorted, as bytes, the owners' bytes sorted (two bags are equal when these lists
    are)."""
    width = int(code.max()) + 1 if code.size else 1
    key = owner.astype(np.int64) * width + code
    if key.size and (key[1:] > key[:-1]).all():
        # each (owner, code) once and in order already (a count matrix's cells)
        keys, sums = key, np.asarray(count, dtype=np.int64)
    else:
        keys, inverse = np.unique(key, return_inverse=True)
        sums = np.bincount(inverse.ravel(), weights=count, minlength=keys.size).astype(np.int64)
    held = sums > 0
    keys, sums = keys[held], sums[held]
    raw = np.column_stack([keys % width, sums]).astype(np.int64).tobytes()
    bounds = (np.searchsorted(keys // width, np.arange(n + 1)) * 16).tolist()
    return sorted(raw[bounds[i]:bounds[i + 1]] for i in range(n))


def _without_empty(signatures: list[bytes]) -> list[bytes]:
    """:func:`_signatures` without the owners of no values."""
    return [key for key in signatures if key]


def _union_signatures(a: np.ndarray, b: np.ndarray, n: int, multiset: tuple) -> list[bytes]:
    """:func:`_signatures` of the unions of several of ``n`` members that the pairs (``a``,
    ``b``: positions) link, each member's multiset as (member, code, count) triples."""
    if not n:
        return []
    label = component_labels(a, b, n)
    several = np.bincount(label, minlength=n) > 1
    # unions numbered 0.. in the order of their labels
    union = np.cumsum(several) - 1
    owner, code, count = multiset
    mine = several[label[owner]]
    return _signatures(union[label[owner[mine]]], code[mine], count[mine], int(several.sum()))


def _matrix_triples(counts: np.ndarray) -> tuple:
    """(row, column, count) of the non-zero cells of a count matrix."""
    row, column = np.nonzero(counts)
    return row, column, counts[row, column].astype(np.int64)


def _group_pairs(group_ids, linked_ids) -> tuple[np.ndarray, np.ndarray]:
    """Each group (position) paired with the group its union is named after (``linked_ids``,
    aligned with ``group_ids``; None: no unions)."""
    if linked_ids is None:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    ids, named = np.asarray(group_ids, dtype=np.int64), np.asarray(linked_ids, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    at = order[np.minimum(np.searchsorted(ids[order], named), max(ids.size - 1, 0))]
    # a union named after no group links nothing (the comparison then fails)
    found = ids[at] == named if ids.size else np.zeros(named.size, dtype=bool)
    return np.flatnonzero(found), at[found]


def _moves(release: dict, state: State, kept: list, version: dict, hashes: list, groups: list,
           present: np.ndarray | None = None) -> dict:
    """Each earlier group (the last version's, published or held back) -> the group now holding
    its people (published or held back now); refuses (22000) a group whose people went to two.
    ``present``: those people's hashes packed, when the caller has them."""
    # a person held back now is followed to the group that holds them back (the run's rows are
    # published or held back, never both)
    people = list(hashes) + list(version.get("waiting") or [])
    now = np.r_[np.asarray(groups, dtype=np.int64),
                np.asarray(version.get("waiting_groups") or [], dtype=np.int64)]
    before = np.full(len(people), -1, dtype=np.int64)
    followed = np.zeros(len(people), dtype=bool)
    if people:
        at = state.find(packed(people) if present is None else present)
        followed = at >= 0
        before[followed] = state.groups[at[followed]]
        if state.last is not None and kept:
            # a person back from an absence: their group then, followed to the group holding it
            back = np.flatnonzero(followed)
            back = back[state.last[at[back]] < state.version]
            before[back] = republish._mapping(
                np.concatenate([row["group_ids"] for row in kept]),
                np.concatenate([row["roots"] for row in kept]))(before[back])
        # people held back by the last version: the group that held them then
        held = dict(zip((bytes(h) for h in kept[-1]["waiting"]), kept[-1]["waiting_groups"])) \
            if kept and kept[-1]["waiting"] else {}
        for i in np.flatnonzero(~followed).tolist() if held else ():
            if people[i] in held:
                before[i], followed[i] = held[people[i]], True
    old, new = before[followed], now[followed]
    if old.size:
        # the distinct (old, new) pairs in order, by one sort of integer keys
        low, base = int(new.min()), int(old.min())
        width = int(new.max()) - low + 1
        key = containment.distinct((old - base) * width + (new - low))
        old, new = key // width + base, key % width + low
    pairs = np.column_stack([old, new])
    if pairs.shape[0] and (pairs[1:, 0] == pairs[:-1, 0]).any():
        raise InsufficientData(
            f"a group of {release['release_schema']}.{release['release_name']} was split; "
            "nothing was published", hint="Report this with the release's parameters.")
    return dict(zip(pairs[:, 0].tolist(), pairs[:, 1].tolist()))



def same_multisets_and_unions(release: dict, version: dict, classes: Classes):
    """The released classes (from the released rows) against the run's groups (``version``):
    the multisets as a bag (a group that publishes nothing is no class), and the unions of
    classes that could both hold one person (:func:`linked_classes`) as the groups the run
    linked. Refuses (22000) otherwise; returns (the groups' counts, the classes' and the
    groups' multisets as triples, the linked pairs of classes)."""
    name = f"{release['release_schema']}.{release['release_name']}"
    values = version["values"]
    group_counts = np.asarray(version["counts"], dtype=np.int64).reshape(len(version["group_ids"]), len(values))
    # one dictionary: the run's values, then texts only the released rows show
    code_of = {v: j for j, v in enumerate(values)}
    extra = [t for t in classes.texts if t not in code_of]
    code_of.update((t, len(values) + j) for j, t in enumerate(extra))
    owner, text_code, rows = classes.multiset
    class_multiset = (owner, np.array([code_of[t] for t in classes.texts], dtype=np.int64)[text_code]
                      if text_code.size else text_code, rows)
    group_multiset = _matrix_triples(group_counts)
    if _signatures(*class_multiset, classes.count) != \
            _without_empty(_signatures(*group_multiset, group_counts.shape[0])):
        raise InsufficientData(
            f"the released classes of {name} are not the multisets its groups publish; nothing "
            "was published", hint="Report this with the release's parameters.")
    # classes that could hold one person are one union to an analyst (from the released rows)
    pair_a, pair_b = linked_classes(classes)
    if _union_signatures(pair_a, pair_b, classes.count, class_multiset) != _union_signatures(
            *_group_pairs(version["group_ids"], version.get("linked")), group_counts.shape[0],
            group_multiset):
        raise InsufficientData(
            f"the released classes of {name} that could both hold one person (their ranges and "
            "sets overlap) are not the groups its run checked together; nothing was published",
            hint="Report this with the release's parameters.")
    return group_counts, class_multiset, group_multiset, (pair_a, pair_b)

def check_differences(plpy, release: dict, promise: Promise, version: dict, state: State,
                      hashes: list, groups: list, classes: Classes, matched=None,
                      alive=None, unchanged=None, present=None,
                      read_versions=None) -> tuple[dict, CheckedVersion]:
    """The difference check of a stable release's new version: the multisets of its released
    classes (``classes``: from the released rows, :func:`released_classes`) must be the groups'
    multisets the run stashed (``version``), and no group's values added or removed since any
    stored earlier version may break the l model (core.republish.unsafe_pairs), earlier groups
    followed to the groups now holding them through the people published in both (``state``:
    the last version's people and groups; ``hashes``, ``groups``: the run's), every set of a
    group's ancestors included (core.republish.safe_against); the released classes that could
    hold one person (:func:`linked_classes`) must form the unions of groups the run linked, whose
    changes that break the l model are counted (``unsafe_unions``, core.republish.unsafe_unions:
    the run holds them where it can, and does not merge them). The parts of those unions that
    people link (``matched``: (person, class) pairs of everyone in the table, held back people
    too, each class that holds them, from the released rows) must be the run's
    ``people_linked``, and are checked the same way (an analyst who knows a person links the
    classes that could hold them, not boxes that meet where nobody lies). Multisets are compared
    as sorted (value code, rows) pairs over one dictionary, unions found as the connected
    components of the linked pairs. An earlier group is linked to the group holding it now only
    while someone of it is in the table (``alive``: the stored versions' rows -> per version,
    which of its groups do; core.republish.Version.alive), and apart while someone of it is in
    the table with an unchanged record (``unchanged``, likewise; ``present``: the hashes of the
    run's people and then of its held back ones, packed, when the caller has them). ``read_versions``:
    the stored versions as the run read them in this transaction (:attr:`People.version_rows`
    and :attr:`People.versions`, their multisets over ``version["values"]``), not read again.
    Refuses (22000) otherwise; returns its figures and the version to store
    (:func:`store_version`), nothing written."""
    release_id = release["release_id"]
    values = version["values"]
    group_counts, class_multiset, group_multiset, (pair_a, pair_b) = same_multisets_and_unions(
        release, version, classes)
    overlapping = int(np.unique(np.concatenate([pair_a, pair_b])).size)
    linked_ids = version.get("linked")
    people_ids = version.get("people_linked")
    if matched is not None and people_ids is not None:
        person, klass = matched
        # only people in several classes link any
        several = (np.bincount(person) > 1)[person] if person.size else np.zeros(0, dtype=bool)
        person, klass = person[several], klass[several]
        order = np.lexsort((klass, person))
        person, klass = person[order], klass[order]
        same = person[1:] == person[:-1]
        if _union_signatures(klass[:-1][same], klass[1:][same], classes.count, class_multiset) != \
                _union_signatures(*_group_pairs(version["group_ids"], people_ids),
                                  group_counts.shape[0], group_multiset):
            raise InsufficientData(
                f"the released classes of {release['release_schema']}.{release['release_name']} "
                "that some person in the table could be in at once are not the groups its run "
                "checked together; nothing was published",
                hint="Report this with the release's parameters.")
    # each earlier group to the group now holding its people (held back ones too)
    if read_versions is not None and not (None in values and len(set(values)) == len(values) and all(
            v.counts.shape == (len(row["group_ids"]), len(values)) for row, v in zip(*read_versions))):
        read_versions = None
    kept = read_versions[0] if read_versions is not None else [
        _kept_version(plpy, row, release_id) for row in run(plpy, KEPT_VERSIONS, ["int4"], [release_id])]
    step = _moves(release, state, kept, version, hashes, groups, present)
    step_of = republish._mapping(np.fromiter(step.keys(), dtype=np.int64, count=len(step)),
                                 np.fromiter(step.values(), dtype=np.int64, count=len(step)))
    # every earlier group id -> the group holding it now (a later version's entry wins)
    roots_of = republish._mapping(
        np.concatenate([np.empty(0, np.int64)] + [row["group_ids"] for row in kept]),
        np.concatenate([np.empty(0, np.int64)] + [step_of(row["roots"]) for row in kept]))
    # one code per text of this version and the kept ones, NULL last (no value: core.republish;
    # the run's values hold every text the versions it read hold)
    texts = sorted({v for v in values if v is not None}.union(
        *(row["vals"][1] for row in kept if "vals" in row)))
    position = {t: i for i, t in enumerate(texts)}
    value_codes = np.array([len(texts) if v is None else position[v] for v in values], dtype=np.int64)
    history = []
    for j, row in enumerate(kept):
        check_interrupts()
        ids = row["group_ids"]
        if read_versions is not None:
            # the multisets the run read, over ``values``, onto this dictionary
            counts = np.zeros((ids.size, len(texts) + 1), dtype=np.int64)
            counts[:, value_codes] = read_versions[1][j].counts
            history.append(Version(ids, counts, _linked(row), _people_linked(row)))
            continue
        raw, own = row["vals"]
        # the version's own codes (NULL: len(own)) onto this dictionary's (NULL: len(texts))
        codes = np.array([*(position[t] for t in own), len(texts)], dtype=np.int64)[raw]
        owner = np.repeat(np.arange(ids.size), row["sizes"])
        counts = np.bincount(owner * (len(texts) + 1) + codes,
                             minlength=ids.size * (len(texts) + 1)).reshape(ids.size, len(texts) + 1)
        history.append(Version(ids, counts, _linked(row), _people_linked(row)))
    for earlier, groups_alive in zip(history, alive(kept) if alive is not None else ()):
        earlier.alive = groups_alive
    for earlier, same in zip(history, unchanged(kept) if unchanged is not None else ()):
        earlier.unchanged = same
    ids = np.asarray(version["group_ids"], dtype=np.int64)
    counts = np.zeros((ids.size, len(texts) + 1), dtype=np.int64)
    for j in range(len(values)):
        counts[:, value_codes[j]] += group_counts[:, j]
    # the release's l model (a catalog row without one: Models' own default)
    models = Models(l=promise.l, c=promise.c, l_diversity=promise.l_diversity)
    pinned = republish.unsafe_pairs(models, ids, counts, history, roots_of)
    linked = None if linked_ids is None else np.asarray(linked_ids, dtype=np.int64)
    people_linked = None if people_ids is None else np.asarray(people_ids, dtype=np.int64)
    unions = republish.unsafe_unions(models, ids, counts, linked, history, roots_of,
                                     people_linked=people_linked)
    figures = {"held_back": version["held_back"], "counterfeit": version["counterfeit"],
               "groups_by_choice": version["groups_by_choice"], "versions_compared": len(kept),
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
    sizes = group_counts.sum(axis=1).tolist()
    # each group's values, group after group (a value repeated as many times as it is held),
    # joined as one text where no value is or holds a mark of the joined form
    held = np.repeat(np.tile(np.arange(len(values)), ids.size), group_counts.ravel())
    marks = any(v is not None and ("\x01" in v or v == "\x02") for v in values) or (
        held.size == 1 and values[held[0]] == "")         # one empty text joins as no text
    vals = np.asarray(values, dtype=object)[held].tolist() if marks else "\x01".join(
        np.asarray(["\x02" if v is None else v for v in values], dtype=object)[held].tolist())
    roots = {}
    for row in kept:
        held_in = step_of(row["roots"])
        if (held_in != row["roots"]).any():
            roots[int(row["version"])] = held_in.tolist()
    return figures, CheckedVersion(
        ids.tolist(), sizes, vals, roots, version["held_back"], version["counterfeit"],
        linked_ids, version.get("waiting") or None, version.get("waiting_groups") or None,
        None if people_ids is None else [int(g) for g in people_ids])


@dataclass
class CheckedVersion:
    """A version the difference check passed (:func:`check_differences`), stored apart
    (:func:`store_version`) so that a run checking its people in parts stores it once."""

    #: its groups and each one's published rows
    ids: list
    sizes: list
    #: each group's values, group after group: listed where a value is or holds a mark of the
    #: joined form, else one text (each value ended by 0x01 but the last, NULL 0x02)
    vals: list | str
    #: the stored versions whose groups are now held in other groups: version -> its roots
    roots: dict
    held_back: int
    counterfeit: int
    linked: list | None
    waiting: list | None
    waiting_groups: list | None
    people_linked: list | None


def store_version(plpy, release_id: int, checked: CheckedVersion) -> None:
    """A checked version stored (anon.release_versions) after the earlier ones, their roots
    followed into its groups; only the newest keeps who it held back."""
    for version, roots in checked.roots.items():
        run(plpy, "UPDATE anon.release_versions SET roots = $3 WHERE release_id = $1 AND version = $2",
            ["int4", "int4", "int4[]"], [release_id, version, roots])
    run(plpy, "UPDATE anon.release_versions SET waiting = NULL, waiting_groups = NULL "
              "WHERE release_id = $1 AND version IN (SELECT r.version FROM "
              "anon.readable_release_versions r WHERE r.release_id = $1 AND r.waiting IS NOT NULL)",
        ["int4"], [release_id])
    listed = isinstance(checked.vals, list)
    run(plpy, STORE_VERSION if listed else STORE_JOINED_VERSION,
        ["int4", "int4[]", "int4[]", "text[]" if listed else "text", "int4", "int4", "int4[]",
         "bytea[]", "int4[]", "int4[]"],
        [release_id, checked.ids, checked.sizes, checked.vals, checked.held_back,
         checked.counterfeit, checked.linked, checked.waiting, checked.waiting_groups,
         checked.people_linked])


#: a version checked, stored (its values, ``$4``: a text array)
STORE_VERSION = """
INSERT INTO anon.release_versions (release_id, version, group_ids, roots, sizes, vals, held_back,
                                   counterfeit, linked, waiting, waiting_groups, people_linked)
SELECT $1, coalesce((SELECT pg_catalog.max(version) + 1 FROM anon.release_versions WHERE release_id = $1), 0),
       $2, $2, $3, $4, $5, $6, $7, $8, $9, $10"""
#: :data:`STORE_VERSION` with the values as one text (each ended by 0x01 but the last, NULL
#: 0x02), split by string_to_array (no Python object per value handed to PostgreSQL)
STORE_JOINED_VERSION = STORE_VERSION.replace(
    "$4,", "pg_catalog.string_to_array($4, E'\\x01', E'\\x02'),")
#: the stored versions as the difference check reads them: the integer arrays in their binary
#: form (array_send), each one's values joined whole as :func:`_joined_elements` joins them (no
#: row nor Python object per value)
KEPT_VERSIONS = f"""
SELECT v.version, pg_catalog.array_send(v.group_ids) AS group_ids,
       pg_catalog.array_send(v.roots) AS roots, pg_catalog.array_send(v.sizes) AS sizes,
       v.linked, v.people_linked, v.waiting, v.waiting_groups, v.next_groups,{VALUES_JOINED}
FROM anon.readable_release_versions v WHERE v.release_id = $1 ORDER BY v.version"""
#: one stored version's values packed as :func:`_coded_elements` packs them, where a value is
#: or holds a mark of the joined form
KEPT_VALUES = """
SELECT pg_catalog.string_agg(coalesce(pg_catalog.convert_to(u.t, 'UTF8'), '\\xff'::bytea),
                             '\\x00'::bytea ORDER BY u.o) AS vals_elements,
       pg_catalog.count(*) AS vals_count
FROM anon.readable_release_versions v CROSS JOIN LATERAL pg_catalog.unnest(v.vals) WITH ORDINALITY AS u(t, o)
WHERE v.release_id = $1 AND v.version = $2"""


def _kept_version(plpy, row, release_id: int) -> dict:
    """A row of KEPT_VERSIONS with its arrays decoded: group_ids, roots, sizes as integers,
    vals as (each row's code, the distinct texts; NULL coded as their number)."""
    out = dict(row)
    for name in ("group_ids", "roots", "sizes"):
        out[name] = _int4s(row[name])
        if out[name] is None:
            raise InsufficientData(
                f"version {row['version']} of release {release_id} (anon.release_versions) has "
                f"NULL, NULL elements or more dimensions in {name}",
                hint="Restore the release's rows of anon.release_versions from a backup, or "
                     "recreate the release knowingly.")
    out["vals"] = _version_values(plpy, out, release_id)
    return out


def _released_type(col) -> str:
    """A QI's type in the release (the stable mode refuses hierarchies: never an LCA label)."""
    return catalog.output_type(col, False)


@dataclass
class Classes:
    """The released classes as the check reads them: ``count``; each QI coded for
    core.containment (``axes``); per sensitive column, the (class, value text) pairs of the
    distinct non-NULL values each class shows."""

    count: int
    axes: list
    values: list
    #: the first sensitive column's multiset of each class: (class, value code, rows) triples,
    #: each (class, value) once, the codes positions in ``texts`` (NULL as None)
    multiset: tuple = (np.empty(0, np.int64),) * 3
    texts: list = field(default_factory=list)
    #: what :func:`linked_classes` tests: per QI released as a range (and never NULL in the run)
    #: each class's bounds as codes of one order (``lo``, ``hi``: classes x QIs), per QI
    #: released as a set its (class, value code) pairs, and which classes can hold anyone
    linkable: tuple | None = None
    #: :func:`linked_classes`' pairs, once found
    linked: tuple | None = None


def released_classes(plpy, release: dict, qis, sensitive: list, qi_texts, qi_nulls=None,
                     within=None, merges: bool | None = None) -> Classes:
    """The released classes (what analysts read, grouped by the released QIs; one statement) and
    the run's people coded on the same axes: a range's values by their rank among the people's
    values and the classes' bounds, ranked in SQL by the element type's own order (a range
    becomes a closed interval of ranks, whatever its width; integers, and dates printed as ISO,
    ranked in numpy from the bounds as integers); a set's values by one code each,
    NULL included. A compact release's classes are read from its storage, one row per class
    (the view analysts read unfolds exactly that, checked before: compact.check_view), unless
    two of them have the same QIs (one class to an analyst: then grouped from the view).
    ``qi_nulls``: per QI, whether a row of the run is NULL there (it lies in every range: that
    QI then links every class, :attr:`Classes.linkable`). ``within``: only the classes of this
    SQL condition, a function of the alias of the released row or stored class it reads (one
    region of a stable release checked region by region); ``merges``: whether two stored
    classes have the same QIs (class_counts.classes_merge), when the caller asked already."""
    qi_nulls = list(qi_nulls) if qi_nulls is not None else [None in texts for texts in qi_texts]
    released = released_relation(plpy, release)
    settings = class_counts.pass_settings(plpy, None)
    stored = class_counts.storage_for(plpy, release)
    if sensitive:
        sensitive = sensitive[:1]      # the stable mode keeps one sensitive column
    if merges is None and stored is not None:
        merges = class_counts.classes_merge(plpy, stored[1], [c.name for c in qis],
                                            settings["work_mem"])
    if stored is not None and not merges:
        # one stored row per class: its sensitive array is the class's rows' values
        selects = [f"s.{ident(plpy, c.name)} AS q{i}" for i, c in enumerate(qis)]
        # the stored array as it is: its elements' text is taken where they are read
        selects += [f"s.{ident(plpy, col.name)} AS vals" for col in sensitive]
        element = text_of("e.v", sensitive[0].builtin) if sensitive else None
        # a stored row of no rows is no class the view shows
        base = f"SELECT {', '.join(selects)} FROM {stored[1].relation} AS s WHERE {stored[1].rows} > 0"
        if within is not None:
            base += f" AND ({within('s')})"
    else:
        selects = [f"r.{ident(plpy, c.name)} AS q{i}" for i, c in enumerate(qis)]
        selects += [f"pg_catalog.array_agg({text_of('r.' + ident(plpy, col.name), col.builtin)}) AS vals"
                    for col in sensitive]
        element = "e.v"
        group_by = ", ".join(f"r.{ident(plpy, c.name)}" for c in qis)
        base = f"SELECT {', '.join(selects)} FROM {released} r" + (
            f" WHERE {within('r')}" if within is not None else "") + (
            f" GROUP BY {group_by}" if qis else "")
    ctes = [f"""classes AS MATERIALIZED (
    SELECT pg_catalog.row_number() OVER () - 1 AS class_no, b.* FROM ({base}) b)"""]
    # one-row parts, cross joined: each a few arrays in class order
    parts = []
    # what one scan of the classes computes (a scan and an aggregation each part): (name, an
    # int8 a class)
    scanned = []
    send = run(plpy, "SELECT pg_catalog.pg_client_encoding() = 'UTF8' AS utf8")[0]["utf8"]
    # the arrays whose elements are read: (part name, array, element text, whether the array
    # is of texts, which array_to_string joins as they are)
    elements = []
    if sensitive:
        elements.append(("sensitive", "c.vals", element, stored is None or (
            sensitive[0].builtin and sensitive[0].type_name in JOINED_TYPES)))
    coded, args = [], []
    for i, (col, texts) in enumerate(zip(qis, qi_texts)):
        check_interrupts()
        # codes in no particular order: every axis below ranks or orders them by value
        codes, uniques = factorized(texts)
        coded.append((codes, uniques))
        col_type = _released_type(col)
        q = f"c.q{i}"
        if col_type == "text[]":
            elements.append((f"set{i}", q, "e.v", True))
            continue
        none = f"{q} IS NULL OR pg_catalog.isempty({q})"
        days = _iso_days(uniques) if col_type == "daterange" else None
        if days is not None:
            coded[-1] = (codes, days)
        if col_type in INTEGER_RANGES or days is not None:
            # integers (and dates printed as ISO, as days) rank in numpy, without a sort in SQL;
            # the bounds as closed integers (unbounded: the int8 ends)
            low = (f"CASE WHEN {none} OR pg_catalog.lower_inf({q}) THEN {INT8_ENDS[0]} "
                   f"ELSE {_as_integer(f'pg_catalog.lower({q})', days is not None)} "
                   f"+ CASE WHEN pg_catalog.lower_inc({q}) THEN 0 ELSE 1 END END")
            high = (f"CASE WHEN {none} OR pg_catalog.upper_inf({q}) THEN {INT8_ENDS[1]} "
                    f"ELSE {_as_integer(f'pg_catalog.upper({q})', days is not None)} "
                    f"- CASE WHEN pg_catalog.upper_inc({q}) THEN 0 ELSE 1 END END")
            scanned += [(f"low{i}", low), (f"high{i}", high),
                        (f"empty{i}", f"({none})::pg_catalog.int4")]
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
        parts.append(f"SELECT {class_counts.packed('v.r')[:-1]} ORDER BY v.o) AS points{i} "
                     f"FROM rank{i} v WHERE v.side = 0")
        # a class of NULLs only (a NULL range) holds no value; bounds as closed intervals of
        # ranks, and for the pairs as codes 2 a rank (one off for an exclusive bound: two
        # ranges meet when each one's lower code is at most the other's upper)
        low = (f"CASE WHEN {none} THEN 1 WHEN pg_catalog.lower_inf({q}) THEN 0 "
               f"WHEN pg_catalog.lower_inc({q}) THEN b.r ELSE b.r + 1 END")
        high = (f"CASE WHEN {none} THEN 0 WHEN pg_catalog.upper_inf({q}) THEN {containment.TOP} "
                f"WHEN pg_catalog.upper_inc({q}) THEN t.r ELSE t.r - 1 END")
        pair_low = (f"CASE WHEN {none} THEN 0 WHEN pg_catalog.lower_inf({q}) THEN -1 "
                    f"ELSE 2 * b.r + CASE WHEN pg_catalog.lower_inc({q}) THEN 0 ELSE 1 END END")
        pair_high = (f"CASE WHEN {none} THEN 0 WHEN pg_catalog.upper_inf({q}) THEN {INT8_ENDS[1]} "
                     f"ELSE 2 * t.r - CASE WHEN pg_catalog.upper_inc({q}) THEN 0 ELSE 1 END END")
        parts.append(f"""SELECT {_packed_by_class(low)} AS low{i}, {_packed_by_class(high)} AS high{i},
    {_packed_by_class(f"({none})::pg_catalog.int4")} AS empty{i},
    {_packed_by_class(pair_low)} AS pair_low{i}, {_packed_by_class(pair_high)} AS pair_high{i}
    FROM classes c LEFT JOIN rank{i} b ON b.class_no = c.class_no AND b.side = 1
    LEFT JOIN rank{i} t ON t.class_no = c.class_no AND t.side = 2""")
    # text arrays joined whole (array_to_string), else (or when an element holds a mark of the
    # joined form) element by element. The one scan's aggregates take the classes in the order
    # the scan gives them, which is their numbering's (a materialized CTE is read back in the
    # order it was written): ordering each aggregate's input would sort the classes once an
    # aggregate. That order is read too (scan_order) and asked for where it is not theirs.
    joined, ordered = True, False
    while True:
        columns = ["pg_catalog.count(*) AS n_classes"] + [
            f"{_packed_by_class(value, ordered)} AS {name}" for name, value in scanned] + [
            column for name, array, _, joinable in elements if joined and joinable
            for column in _joined_elements(name, array, ordered)]
        if not ordered:
            columns.append(f"{_packed_by_class('c.class_no', False)} AS scan_order")
        query = (f"WITH {', '.join(ctes)}\nSELECT * FROM " + " CROSS JOIN ".join(
            f"({part}) AS p{n}" for n, part in enumerate(
                [f"SELECT {', '.join(columns)} FROM classes c"] + parts + [
                    _coded_elements(name, array, send, text)
                    for name, array, text, joinable in elements if not (joined and joinable)])))
        # grouping ranges and text arrays by sorting them costs 2-3x hashing them
        # (class_counts.count); hashed in memory (pass_settings), no JIT for a plan run once
        with local_settings(plpy, **settings, enable_sort="off", jit="off"):
            row = run(plpy, query, ["text[]"] * len(args), args)[0]
        if not ordered and not _numbered_in_order(row["scan_order"], int(row["n_classes"])):
            ordered = True
            continue
        decoded = {name: _split_elements(row, name) if joined and joinable else
                   _decoded_elements(row, name) for name, _, _, joinable in elements}
        if all(d is not None for d in decoded.values()):
            break
        joined = False
    count = int(row["n_classes"])
    axes, lows, highs, sets = [], [], [], []
    meets = np.ones(count, dtype=bool)
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
            owners, raw, texts = decoded[f"set{i}"]
            # each distinct element's slot among the people's values (NULL the last)
            position = {u: j for j, u in enumerate(uniques)}
            slots = np.fromiter((position.get(t, -1) for t in [*texts, None]), dtype=np.int64,
                                count=len(texts) + 1)
            slots[-1] = len(uniques)
            element_slots = slots[raw]
            element_codes = np.where(element_slots < 0, -1, recode[element_slots])
            axes.append(containment.set_axis(recode[slot], owners, element_codes, count,
                                             len(uniques) + 1))
            # for the pairs every value counts, those no person has too (NULL one of them)
            sets.append((owners, raw))
            # a class whose set is NULL or empty holds nobody
            meets &= np.bincount(owners, minlength=count) > 0
            continue
        empty = class_counts.int8_array(row[f"empty{i}"]).astype(bool)
        low, high = class_counts.int8_array(row[f"low{i}"]), class_counts.int8_array(row[f"high{i}"])
        if _released_type(col) in INTEGER_RANGES or isinstance(uniques, np.ndarray):
            axes.append(_integer_axis(codes, uniques, low, high, empty))
            pair_low, pair_high = low, high
        else:
            ranks = class_counts.int8_array(row[f"points{i}"])
            points = np.where(codes < 0, containment.ANY, ranks[np.maximum(codes, 0)] if ranks.size else 0)
            axes.append(containment.Axis(points, low, high))
            pair_low = class_counts.int8_array(row[f"pair_low{i}"])
            pair_high = class_counts.int8_array(row[f"pair_high{i}"])
        if qi_nulls[i]:
            continue           # a NULL of the run lies in every range: this QI links every class
        # a NULL (or empty) range holds nobody
        meets &= ~empty
        lows.append(pair_low)
        highs.append(pair_high)
    values, multiset, texts = [], (np.empty(0, np.int64),) * 3, []
    if sensitive:
        owner, code, distinct_values = decoded["sensitive"]
        texts = list(distinct_values) + [None]
        # each (class, value) once, with its rows
        width = len(texts)
        keys, rows = np.unique(owner * width + code, return_counts=True)
        owner, code = keys // width, keys % width
        multiset = (owner, code, rows.astype(np.int64))
        # each class's distinct non-NULL values
        shown = code < width - 1
        values.append((owner[shown], np.asarray(distinct_values, dtype=object)[code[shown]]))
    linkable = (np.column_stack(lows) if lows else np.zeros((count, 0), dtype=np.int64),
                np.column_stack(highs) if highs else np.zeros((count, 0), dtype=np.int64),
                sets, meets)
    return Classes(count, axes, values, multiset, texts, linkable)


def _coded_elements(name: str, array: str, send: bool, element: str = "e.v") -> str:
    """A one-row part: every element ``e.v`` of every class's array as its class
    (class_counts.packed: 8 bytes a number) and its text (``element``, packed as the reader
    packs texts: each in UTF-8 after the other, NULL marked), both from one aggregation (one
    order); coded in Python (:func:`_decoded_elements`) rather than joined to a dictionary of the
    distinct elements in SQL (a hash probe and a comparison of texts an element)."""
    # each text in UTF-8 and a zero byte (no text holds one), NULL as 0xFF (no UTF-8 text holds
    # it); textsend writes the client encoding, UTF-8 when ``send``
    utf8 = f"pg_catalog.textsend({element})" if send else f"pg_catalog.convert_to({element}, 'UTF8')"
    return f"""SELECT {class_counts.packed('c.class_no')} AS {name}_classes,
        pg_catalog.string_agg(coalesce({utf8}, '\\xff'::bytea), '\\x00'::bytea) AS {name}_elements,
        pg_catalog.count(*) AS {name}_count
    FROM classes c CROSS JOIN LATERAL pg_catalog.unnest({array}) AS e(v)"""


def _decoded_elements(row, name: str) -> tuple[np.ndarray, np.ndarray, list]:
    """(classes, codes, texts) of :func:`_coded_elements`' part: each element's class, its code
    among the distinct non-NULL texts (NULL coded as len(texts))."""
    owners = class_counts.int8_array(row[f"{name}_classes"])
    return (owners, *_decoded_texts(row[f"{name}_elements"], int(row[f"{name}_count"] or 0)))


def _decoded_texts(packed, count: int) -> tuple[np.ndarray, list]:
    """(codes, texts) of ``count`` texts packed as :func:`_coded_elements` packs them: each
    one's code among the distinct non-NULL texts (NULL coded as len(texts))."""
    decoded = _texts_ending(packed, count, 0, 0xFF)
    if decoded is None:
        raise RuntimeError(f"read other than {count} texts")
    return decoded


#: text types whose arrays :func:`_joined_elements` reads (their output is their text)
JOINED_TYPES = ("text", "character varying")


def _joined_elements(name: str, array: str, ordered: bool = True) -> list[str]:
    """The aggregates over the classes ``c`` that read arrays of texts as :func:`_coded_elements`'
    part does, each array joined whole by array_to_string (no row an element): per class its
    number of elements (class order; ``ordered=False``: scan order), the elements of every class
    one after the other, each ended by a 0x01 byte, NULL as 0x02 (in UTF-8), and whether some
    element is 0x02 itself (then read by :func:`_coded_elements`)."""
    size = f"coalesce(pg_catalog.cardinality({array}), 0)"
    order = " ORDER BY c.class_no" if ordered else ""
    return [f"{_packed_by_class(size, ordered)} AS {name}_sizes",
            f"""pg_catalog.convert_to(pg_catalog.string_agg(
            pg_catalog.array_to_string({array}, E'\\x01', E'\\x02'), E'\\x01'{order})
            FILTER (WHERE {size} > 0), 'UTF8') AS {name}_joined""",
            (f"pg_catalog.bool_or(pg_catalog.array_position({array}, E'\\x02') IS NOT NULL) "
             f"AS {name}_marked")]


def _split_elements(row, name: str) -> tuple[np.ndarray, np.ndarray, list] | None:
    """:func:`_decoded_elements` of :func:`_joined_elements`' part, or None when some element
    is the NULL mark or holds the end one (more texts than elements)."""
    if row[f"{name}_marked"]:
        return None
    sizes = class_counts.int8_array(row[f"{name}_sizes"])
    decoded = _texts_ending(row[f"{name}_joined"], int(sizes.sum()), 0x01, 0x02)
    return None if decoded is None else (np.repeat(np.arange(sizes.size, dtype=np.int64), sizes),
                                         *decoded)


def _texts_ending(packed, count: int, end: int, null: int) -> tuple[np.ndarray, list] | None:
    """(codes, texts) of ``count`` texts in UTF-8 each ended by the byte ``end`` (the last one's
    end left out), NULL the byte ``null``; None when there are other than ``count``."""
    if not count:
        return np.zeros(0, dtype=np.int64), []
    import pyarrow as pa  # the stable mode's paths only
    packed_texts = bytes(packed) + bytes([end])          # the last one's end
    ends = np.flatnonzero(np.frombuffer(packed_texts, dtype=np.uint8) == end)
    if ends.size != count:
        return None
    # each value with its end mark (equal values, equal bytes), cut off when decoded
    offsets = np.r_[0, ends + 1].astype(np.int32)
    values = pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(offsets),
                                                         pa.py_buffer(packed_texts)])
    # distinct byte strings coded at once (pyarrow's kernel), only they decoded
    try:        # the kernel alone (the method imports pyarrow.compute and all its wrappers)
        from pyarrow._compute import call_function
        encoded = call_function("dictionary_encode", [values])
    except ImportError:
        encoded = values.dictionary_encode()
    distinct = encoded.dictionary.to_pylist()
    null = bytes([null, end])
    texts = [t[:-1].decode("utf-8") for t in distinct if t != null]
    recode = np.empty(len(distinct), dtype=np.int64)
    shown = np.array([t != null for t in distinct], dtype=bool)
    recode[shown] = np.arange(len(texts))
    recode[~shown] = len(texts)
    # the int32 indices' buffer as it is (no NULL): pyarrow's to_numpy imports pandas
    indices = encoded.indices
    indices = np.frombuffer(indices.buffers()[1], dtype=np.int32,
                            count=indices.offset + len(indices))[indices.offset:].astype(np.int64)
    return recode[indices], texts


#: ranges of integers: ranked in numpy (their text is the integer's own)
INTEGER_RANGES = ("int4range", "int8range")
#: an unbounded end of a range as a closed int8 bound: no value lies past it
INT8_ENDS = ("'-9223372036854775808'::pg_catalog.int8", "'9223372036854775807'::pg_catalog.int8")


def _packed_by_class(value: str, ordered: bool = True) -> str:
    """SQL of an int8 a class (never NULL) as one bytea in class order (class_counts.packed);
    ``ordered=False``: in the order the classes ``c`` are scanned."""
    packed_values = class_counts.packed(value)
    return packed_values[:-1] + " ORDER BY c.class_no)" if ordered else packed_values


def _numbered_in_order(scan_order, count: int) -> bool:
    """The classes were scanned in the order of their numbers (``scan_order``: their numbers
    as scanned, packed)."""
    numbers = class_counts.int8_array(scan_order)
    return numbers.size == count and bool((numbers == np.arange(count)).all())


#: a date's day number (since 2000-01-01) in the check's integer form; 'infinity' and
#: '-infinity' (which date subtraction refuses) beyond every finite date's, inside the int8 ends
DAY_NUMBER = """CASE WHEN pg_catalog.isfinite({date})
    THEN ({date} - DATE '2000-01-01')::pg_catalog.int8
    WHEN {date} > DATE '2000-01-01' THEN 1099511627776 ELSE -1099511627776 END"""


def _as_integer(bound: str, date: bool) -> str:
    """SQL of a range bound as the int8 the check compares: a date by its day number."""
    return DAY_NUMBER.format(date=bound) if date else f"{bound}::pg_catalog.int8"


def _iso_days(texts: list) -> np.ndarray | None:
    """Dates as the run read them (their text) as day numbers since 2000-01-01, when each is
    printed as ISO (YYYY-MM-DD: the DateStyle ISO, a year of the common era below 10000), from
    their digits (the proleptic Gregorian calendar, PostgreSQL's; no parse of a text each); None
    when one is not (another DateStyle, a BC date, infinity), which SQL then ranks."""
    if not texts:
        return np.empty(0, dtype=np.int64)
    try:
        joined = "\0".join(texts).encode("ascii")
    except UnicodeEncodeError:
        return None
    if len(joined) != 11 * len(texts) - 1:
        return None
    # each text in a row of 11 bytes (its 0 separator last): digits but for two dashes
    cells = np.frombuffer(joined + b"\0", dtype=np.uint8).reshape(-1, 11)
    if not ((cells[:, ISO_DIGITS] - 48 < 10).all() and (cells[:, [4, 7]] == 45).all()
            and (cells[:, 10] == 0).all()):
        return None
    digits = cells[:, ISO_DIGITS].astype(np.int64) - 48
    year = digits[:, :4] @ np.array([1000, 100, 10, 1])
    month, day = digits[:, 4:6] @ np.array([10, 1]), digits[:, 6:] @ np.array([10, 1])
    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    longest = MONTH_DAYS[np.clip(month, 0, 12)] + (leap & (month == 2))
    if not ((year >= 1) & (month >= 1) & (month <= 12) & (day >= 1) & (day <= longest)).all():
        return None
    # days from the civil date (H. Hinnant, "chrono-Compatible Low-Level Date Algorithms", 2013):
    # years from March, in eras of 400 years
    shifted = year - (month <= 2)
    era = shifted // 400
    of_era = shifted - era * 400
    of_year = (153 * np.where(month > 2, month - 3, month + 9) + 2) // 5 + day - 1
    return era * 146097 + of_era * 365 + of_era // 4 - of_era // 100 + of_year - DAY_2000


#: the digits' places in an ISO date's text (YYYY-MM-DD), each month's days (a common year;
#: 0 for no month), and 2000-01-01's day number in :func:`_iso_days`' count (from 0000-03-01)
ISO_DIGITS = [0, 1, 2, 3, 5, 6, 8, 9]
MONTH_DAYS = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])
DAY_2000 = 730425


def _integer_axis(codes, uniques, low, high, empty) -> containment.Axis:
    """An integer QI: each person's value (``uniques``: the distinct values' texts, or the
    values) and each class's closed bounds (unbounded: the int8 ends, INT8_ENDS, which bound
    nothing; ``empty``: a class of NULLs only) as ranks among them all."""
    values = np.asarray(uniques, dtype=object).astype(np.int64) \
        if not isinstance(uniques, np.ndarray) else uniques.astype(np.int64)
    low, high = np.asarray(low, dtype=np.int64), np.asarray(high, dtype=np.int64)
    unbounded_low = low == np.iinfo(np.int64).min
    unbounded_high = high == np.iinfo(np.int64).max
    universe = containment.distinct(np.concatenate([values, low[~unbounded_low], high[~unbounded_high]]))
    points = np.where(codes < 0, containment.ANY,
                      np.searchsorted(universe, values)[np.maximum(codes, 0)] + 1 if values.size else 0)
    low_rank = np.where(unbounded_low, 0, np.searchsorted(universe, low) + 1)
    high_rank = np.where(unbounded_high, containment.TOP, np.searchsorted(universe, high) + 1)
    empty = np.asarray(empty, dtype=bool)
    low_rank[empty], high_rank[empty] = 1, 0
    return containment.Axis(points, low_rank, high_rank)


# the release's people replaced by the run's and those it keeps absent, a row at a time;
# integer arrays pass as their text, read by array_in at once
FORGET = "DELETE FROM anon.release_state WHERE release_id = $1"
#: the boxes of the regions a stable release was created in (stable_regions.store_boxes)
FORGET_REGIONS = "DELETE FROM anon.release_regions WHERE release_id = $1"
REMEMBER = """
INSERT INTO anon.release_state (release_id, chunk, persons, member_groups, versions, cohorts,
                                candidate_sets, entries, entry_versions, entry_groups,
                                waiting_persons, waiting_entries, version, entries_since, records,
                                record_entries, waiting_records, waiting_record_entries, chunks,
                                last_versions, stay_owners, stay_entries, stay_last, region)
VALUES ($1, $2, $3, $4::pg_catalog.int4[], $5::pg_catalog.int4[], $6::pg_catalog.int4[],
        $7::pg_catalog.jsonb, $8::pg_catalog.int4[], $9::pg_catalog.int4[], $10::pg_catalog.int4[],
        $11, $12::pg_catalog.int4[], $13, $14, $15, $16::pg_catalog.int4[], $17,
        $18::pg_catalog.int4[], $19, $20::pg_catalog.int4[], $21::pg_catalog.int4[],
        $22::pg_catalog.int4[], $23::pg_catalog.int4[], $24)"""
#: REMEMBER's columns after release_id and chunk
STATE_COLUMNS = ("persons", "member_groups", "versions", "cohorts", "candidate_sets", "entries",
                 "entry_versions", "entry_groups", "waiting_persons", "waiting_entries", "version",
                 "entries_since", "records", "record_entries", "waiting_records",
                 "waiting_record_entries", "chunks", "last_versions", "stay_owners", "stay_entries",
                 "stay_last")
REMEMBER_TYPES = ["int4", "int4", "bytea", "text", "text", "text", "text", "text", "text", "text",
                  "bytea", "text", "int4", "int4", "bytea", "text", "bytea", "text", "int4", "text",
                  "text", "text", "text", "int4"]
#: what a person takes in a state row: the hash, the record's fingerprint, six int4
PERSON_BYTES = 64
#: a state row holds people of at most this share of plpy_anon.build_memory...
STATE_ROW_SHARE = 64
#: ... and at least this many, and at most this many (240 MB: far below the 1 GB of a value)
FEWEST_PEOPLE_A_ROW, MOST_PEOPLE_A_ROW = 16, 1 << 22
#: a release's state is at most this many rows (a statement each): any role may set a tiny
#: budget in its session
MOST_STATE_ROWS = 1024


def people_a_row(plpy, people: int) -> int:
    """How many people a row of anon.release_state holds (from ``plpy_anon.build_memory``), for
    a state of ``people`` (published or held back, the larger)."""
    share = build_memory(plpy) // STATE_ROW_SHARE // PERSON_BYTES
    return int(min(MOST_PEOPLE_A_ROW, max(FEWEST_PEOPLE_A_ROW, -(-people // MOST_STATE_ROWS), share)))


@dataclass
class Stored:
    """The state a version leaves, everyone in ascending order of their hashes (people
    published: ``persons`` and aligned arrays; held back: ``waiting`` and theirs), positions in
    ``sets`` (each candidate set's JSON text) and the entries (``entry_versions``,
    ``entry_groups``); records None when the release has no sensitive column."""

    persons: np.ndarray
    groups: np.ndarray
    versions: np.ndarray
    cohorts: np.ndarray
    sets: np.ndarray
    entries: np.ndarray
    entry_versions: np.ndarray
    entry_groups: np.ndarray
    waiting: np.ndarray
    waiting_entries: np.ndarray
    version: int
    since: int
    records: np.ndarray | None = None
    record_entries: np.ndarray | None = None
    waiting_records: np.ndarray | None = None
    waiting_record_entries: np.ndarray | None = None
    #: each person's last version in the table, and the earlier stays of people who came back
    #: (owners: positions in ``persons``, sorted; entries; last versions)
    last: np.ndarray | None = None
    stay_owners: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    stay_entries: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    stay_last: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))

    def rows(self, per_row: int):
        """Its rows: (chunk, {column of anon.release_state: value as REMEMBER passes it}), each
        of at most ``per_row`` people and ``per_row`` held back ones, with the candidate sets
        and entries its people use (positions renumbered)."""
        published, held = self.persons.size, self.waiting.size
        chunks = max(1, -(-published // per_row), -(-held // per_row))
        for chunk in range(chunks):
            # the row's run of published people and its run of held back ones
            mine = theirs = slice(chunk * per_row, (chunk + 1) * per_row)
            used_sets, set_at = _renumbered([self.cohorts[mine]], self.sets.size)
            # the earlier stays of the row's people
            stays = slice(*np.searchsorted(self.stay_owners, [chunk * per_row, (chunk + 1) * per_row]).tolist())
            parts = [self.entries[mine], self.waiting_entries[theirs], self.stay_entries[stays]]
            if self.records is not None:
                parts += [self.record_entries[mine], self.waiting_record_entries[theirs]]
            used, entry_at = _renumbered(parts, self.entry_versions.size)

            def local(entries, entry_at=entry_at):
                return _int_array(entry_at[entries])

            row = {"persons": self.persons[mine].tobytes(),
                   "member_groups": _int_array(self.groups[mine]),
                   "versions": _int_array(self.versions[mine]),
                   "cohorts": _int_array(set_at[self.cohorts[mine]]),
                   "candidate_sets": "[" + ",".join(self.sets[used_sets].tolist()) + "]",
                   "entries": local(self.entries[mine]),
                   "entry_versions": _int_array(self.entry_versions[used]),
                   "entry_groups": _int_array(self.entry_groups[used]),
                   "waiting_persons": self.waiting[theirs].tobytes(),
                   "waiting_entries": local(self.waiting_entries[theirs]), "version": self.version,
                   "entries_since": self.since, "records": None, "record_entries": None,
                   "waiting_records": None, "waiting_record_entries": None, "chunks": chunks,
                   "last_versions": None if self.last is None else _int_array(self.last[mine]),
                   "stay_owners": _int_array(self.stay_owners[stays] - chunk * per_row),
                   "stay_entries": local(self.stay_entries[stays]),
                   "stay_last": _int_array(self.stay_last[stays])}
            if self.records is not None:
                row.update(records=self.records[mine].astype("<u8").tobytes(),
                           record_entries=local(self.record_entries[mine]),
                           waiting_records=self.waiting_records[theirs].astype("<u8").tobytes(),
                           waiting_record_entries=local(self.waiting_record_entries[theirs]))
            yield chunk, row

    def write(self, plpy, release_id: int, per_row: int, first_chunk: int = 0,
              region: int = 0) -> int:
        """Written a row a statement (:meth:`rows`), numbered from ``first_chunk`` on (each
        row's ``chunks`` then counts the rows so far: a state written region by region sets
        it once all are written); returns the rows written."""
        written = 0
        for chunk, row in self.rows(per_row):
            check_interrupts()
            row["chunks"] += first_chunk
            run(plpy, REMEMBER, REMEMBER_TYPES,
                [release_id, first_chunk + chunk, *(row[c] for c in STATE_COLUMNS), region])
            written += 1
        return written


def _renumbered(parts: list[np.ndarray], size: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of ``parts`` (integers in [0, ``size``)), sorted, and a table of
    each one's position among them: marked, no sort."""
    table = np.zeros(size, dtype=np.int64)
    for part in parts:
        table[part] = 1
    used = np.flatnonzero(table)
    table[used] = np.arange(used.size)
    return used, table


#: a state stored before entries were kept: the newest version and whom it held back
NEWEST = ("SELECT version, waiting, waiting_groups FROM anon.readable_release_versions "
          "WHERE release_id = $1 ORDER BY version DESC LIMIT 1")


def _int_array(values: np.ndarray) -> str:
    """An integer array's SQL text (core.person_hashes: no Python object per value)."""
    return person_hashes_core.int_array_text(values)


def with_candidates(state: State, at: np.ndarray) -> np.ndarray:
    """Per person of ``state`` (``at``: positions in it), whether they have candidates: published
    by some version, or held back while a released class held them (an analyst who knew they
    were in the table intersected that class's values); a person held back in no class so far
    has the empty set (``{}``), none."""
    out = state.versions[at] > 0
    held = np.flatnonzero(~out)
    if held.size:
        cohorts, inverse = np.unique(state.cohorts[at[held]], return_inverse=True)
        named = np.fromiter((bool(state.sets[c]) for c in cohorts.tolist()), dtype=bool,
                            count=cohorts.size)
        out[held] = named[inverse.ravel()]
    return out


def remember(plpy, release_id: int, promise: Promise, hashes: list, groups: list,
             classes: Classes, state: State, matched=None, waiting=((), ()), records=None,
             withdrawn=(), region: int | None = None, first_chunk: int = 0,
             row_people: int | None = None) -> dict:
    """Each person's candidates now: the values of every released class holding their QIs,
    intersected with what earlier versions left them (``state``); remembered and counted, with
    each person's entry (:func:`entries`; ``waiting``: the hashes and groups of the people the
    version holds back; ``records``: the fingerprints of the published people's records and of
    the held back ones', each kept with the entry since which it is unchanged; ``withdrawn``:
    the groups that publish nothing). People the run no longer reads are kept, marked absent
    (:func:`_with_absent`): one who comes back is the same person to an analyst.
    ``matched``: (person, class) pairs already found, people beyond ``hashes`` held back: those
    whom a class holds are intersected and counted too, their candidates starting at the first
    version whose class holds them (an analyst who knows they are in the table cannot tell
    they are held back: he intersects the classes that could hold them, published or not).
    ``region``: the people are one region's, whose rows are added from ``first_chunk`` on
    (the state is not replaced; ``state_rows`` in the figures: the rows written) of
    ``row_people`` people each (None: :func:`people_a_row` of these people)."""
    n = len(hashes)
    person, klass = matched if matched is not None else containment.contained(classes.axes, n, classes.count)
    check_interrupts()
    persons = packed(hashes)
    waiting_persons = packed(list(waiting[0]))
    # everyone in the table: the lookup the rest of the check asks again (state.find's last)
    everyone = np.concatenate([persons, waiting_persons])
    at_everyone = state.find(everyone)
    # people held back now whom some class holds: an analyst who knows they are in the table
    # intersects its values, from the first such version on (new or back, published or not)
    held = n + np.flatnonzero(np.bincount(person, minlength=everyone.size)[n:] > 0)
    # the people whose candidates this version narrows: the published ones, then those
    rows = np.r_[np.arange(n), held]
    mine = np.full(everyone.size, -1, dtype=np.int64)
    mine[rows] = np.arange(rows.size)
    person, klass = mine[person[person < everyone.size]], klass[person < everyone.size]
    person, klass = person[person >= 0], klass[person >= 0]
    at = at_everyone[rows]
    # people published before (some may come back from an absence)
    known = at >= 0
    known[known] = state.versions[at[known]] > 0
    versions = np.zeros(rows.size, dtype=np.int64)
    versions[known] = state.versions[at[known]]
    # people with candidates: published before, or held back while a class held them (people
    # held back in no class so far have none yet)
    narrowed = at >= 0
    narrowed[narrowed] = with_candidates(state, at[narrowed])
    # earlier candidates: one set per cohort (people often share one)
    earlier = np.full(rows.size, -1, dtype=np.int64)
    earlier[narrowed] = state.cohorts[at[narrowed]]
    earlier_sets = state.sets
    names = promise.sensitive or ()
    # people no released class holds whose group publishes nothing (core.republish.withdrawn):
    # this version tells nothing of them, so they keep what earlier versions left them
    unheld = np.flatnonzero((np.bincount(person, minlength=rows.size)[:n] == 0) & narrowed[:n]
                            & np.isin(np.asarray(groups, dtype=np.int64), np.asarray(withdrawn, dtype=np.int64)))
    kept, left = [], None
    for name, (value_classes, value_texts) in zip(names, classes.values):
        check_interrupts()
        # the values in the order they first appear (NULL -1), then those only kept ones hold
        first: dict = {}
        codes = np.fromiter((-1 if t is None else first.setdefault(t, len(first))
                             for t in value_texts), dtype=np.int64, count=len(value_texts))
        for t in (t for q in unheld.tolist() for t in earlier_sets[earlier[q]].get(name, [])):
            first.setdefault(t, len(first))
        dictionary = np.empty(len(first), dtype=object)
        dictionary[:] = list(first)
        words = max((len(dictionary) + 63) // 64, 1)
        position = {v: j for j, v in enumerate(dictionary.tolist())}
        # each person's candidates now as a bitmask over the values: the values of every class
        # holding them, ORed (no (person, value) pair is listed)
        masks = np.zeros((rows.size, words), dtype=np.uint64)
        class_masks = _bitmasks(value_classes, codes, classes.count, words)
        for w in range(words):
            np.bitwise_or.at(masks[:, w], person, class_masks[klass, w])
        # each earlier candidate set over the same values (values no class shows now dropped)
        before = _set_masks(earlier_sets, name, position, words)
        if unheld.size:
            masks[unheld] |= before[earlier[unheld]]
        # people with candidates keep only what every earlier version left them
        masks[narrowed] &= before[earlier[narrowed]]
        kept.append((name, masks, dictionary))
        count = np.bitwise_count(masks).sum(axis=1, dtype=np.int64)
        left = count if left is None else np.minimum(left, count)
    cohort, texts = _cohorts(rows.size, kept)
    # one set per distinct text; people in the order of their hashes
    texts, distinct_set = np.unique(np.asarray(texts, dtype=object), return_inverse=True)
    cohort = distinct_set.ravel()[cohort]
    # the held back people's narrowed candidates, by their place among the held back
    held_cohort = np.full(everyone.size - n, -1, dtype=np.int64)
    held_cohort[held - n] = cohort[n:]
    newest = None if state.entries is not None else (run(plpy, NEWEST, ["int4"], [release_id]) or [None])[0]
    all_groups = np.concatenate([np.asarray(groups, dtype=np.int64), np.asarray(waiting[1], dtype=np.int64)])
    if records is None:
        version, since, entry, entry_versions, entry_groups = entries(state, everyone, all_groups, newest)
    else:
        now = np.concatenate([np.asarray(r, dtype=np.uint64) for r in records])
        version, since, entry, record_entry, entry_versions, entry_groups = entries(
            state, everyone, all_groups, newest, now)
    keys = entry_versions << 32 | entry_groups
    stored = _with_absent(state, everyone, n, np.asarray(waiting[1], dtype=np.int64), version, since,
                          keys[entry], None if records is None else keys[record_entry],
                          None if records is None else now,
                          persons, np.asarray(groups, dtype=np.int64), versions[:n] + 1, cohort[:n],
                          texts, held_cohort)
    if region is None:
        run(plpy, FORGET, ["int4"], [release_id])
        # a state of one region: the boxes of a creation region by region no longer say its rows'
        run(plpy, FORGET_REGIONS, ["int4"], [release_id])
    if row_people is None:
        row_people = people_a_row(plpy, max(stored.persons.size, waiting_persons.size))
    written = stored.write(plpy, release_id, row_people, first_chunk, region or 0)
    l = int(promise.l or 0)
    return ({} if region is None else {"state_rows": written}) | {"people": n, "seen_before": int(known[:n].sum()),
            "most_versions": int(versions[:n].max()) + 1 if n else None,
            "fewest_candidates": int(left.min()) if left is not None and n else None,
            "disclosed": int((left <= 1).sum()) if left is not None else 0,
            "below_l": int((left < l).sum()) if left is not None else 0,
            "remembered": n,
            # people kept, not in the table now
            "absent": int((stored.last < version).sum()) if stored.last is not None else 0}


def _with_absent(state: State, everyone: np.ndarray, n: int, waiting_groups: np.ndarray,
                 version: int, since: int, entry_keys: np.ndarray, record_keys, records,
                 persons: np.ndarray, groups: np.ndarray, versions: np.ndarray,
                 cohort: np.ndarray, texts: np.ndarray, held_cohort=None) -> Stored:
    """The state this version leaves: its published people (the first ``n`` of ``everyone``,
    their ``groups``, ``versions``, ``cohort`` in ``texts``) and, never erased, everyone else
    ever in the table: people absent now (their group, candidates, entry and last version as
    they left) and people held back now (their group the one holding them back; none of the
    versions that held them published them: versions 0, their candidates those of the classes
    that held them, none while no class did). The
    earlier stays of people who came back are kept, and one is added for each person absent
    from the newest version and back now (the entry they had and their last version then).
    Entries are given as keys (version << 32 | group), ``records`` and ``record_keys`` (None:
    no sensitive column) for everyone; ``held_cohort``: per held back person, their candidates
    narrowed (or first set) by this version (a position in ``texts``; -1: kept as they were)."""
    found = state.find(everyone)
    newest = -1 if state.version is None else state.version
    # a state stored before people were kept absent: everyone of its version (or, stored
    # before entries were kept, of the newest version, ``since``)
    old_last = state.last if state.last is not None else np.full(
        state.persons.size, since if state.version is None else state.version, dtype=np.int64)

    def old_keys(entries, at):
        # a stored entry's key; a state stored before entries were kept: the newest version
        # (``since``) and their group then
        if state.entries is None or entries is None:
            return np.int64(since) << 32 | state.groups[at]
        return state.entry_versions[entries[at]] << 32 | state.entry_groups[entries[at]]

    # the state's people not published now (``c``), and the held back ones it did not hold
    carried = np.ones(state.persons.size, dtype=bool)
    carried[found[:n][found[:n] >= 0]] = False
    c = np.flatnonzero(carried)
    held = np.full(state.persons.size, -1, dtype=np.int64)    # a kept person's place in everyone
    held[found[n:][found[n:] >= 0]] = n + np.flatnonzero(found[n:] >= 0)
    w = held[c]
    back = w >= 0
    w = w[back]
    fresh = n + np.flatnonzero(found[n:] < 0)
    # the kept people's candidate sets, each distinct one once more, and none for the others
    used, cohort_of = np.unique(state.cohorts[c], return_inverse=True)
    texts = np.r_[texts, np.asarray([json.dumps(state.sets[u], ensure_ascii=False)
                                     for u in used.tolist()] + ["{}"], dtype=object)]
    extra_keys = np.r_[old_keys(state.entries, c), entry_keys[fresh]]
    extra_keys[:c.size][back] = entry_keys[w]
    extra_groups = np.r_[state.groups[c], waiting_groups[fresh - n]]
    extra_groups[:c.size][back] = waiting_groups[w - n]
    extra_last = np.r_[old_last[c], np.full(fresh.size, version, dtype=np.int64)]
    extra_last[:c.size][back] = version
    all_persons = np.concatenate([persons, state.persons[c], everyone[fresh]])
    order = _hash_order(all_persons)
    position = np.empty(order.size, dtype=np.int64)
    position[order] = np.arange(order.size)
    # the stays that ended: kept ones, and that of each person back now from an absence
    new_place = np.full(state.persons.size, -1, dtype=np.int64)
    new_place[c] = position[n + np.arange(c.size)]
    published = np.flatnonzero(found[:n] >= 0)
    new_place[found[published]] = position[published]
    mine = np.flatnonzero(found >= 0)
    returned = mine[old_last[found[mine]] < newest]
    stay_owners = np.r_[new_place[state.stay_owners], new_place[found[returned]]]
    stay_keys = np.r_[old_keys(state.stay_entries, np.arange(state.stay_entries.size))
                      if state.stay_entries.size else np.empty(0, dtype=np.int64),
                      old_keys(state.entries, found[returned])]
    stay_last = np.r_[state.stay_last, old_last[found[returned]]]
    by_owner = np.argsort(stay_owners, kind="stable")
    parts = [np.r_[entry_keys[:n], extra_keys][order], entry_keys[n:], stay_keys]
    record_parts = {}
    if records is not None:
        extra_records = np.r_[state.records[c] if state.records is not None
                              else np.zeros(c.size, dtype=np.uint64), records[fresh]]
        extra_records[:c.size][back] = records[w]
        extra_record_keys = np.r_[old_keys(state.record_entries, c)
                                  if state.record_entries is not None else extra_keys[:c.size],
                                  record_keys[fresh]]
        extra_record_keys[:c.size][back] = record_keys[w]
        parts += [np.r_[record_keys[:n], extra_record_keys][order], record_keys[n:]]
        record_parts = {"records": np.r_[records[:n], extra_records][order]}
    distinct, inverse = _unique_inverse(np.concatenate(parts))
    inverse = inverse.ravel().astype(np.int64)
    pieces = np.split(inverse, np.cumsum([p.size for p in parts])[:-1])
    held_order = _hash_order(everyone[n:])
    if records is not None:
        record_parts.update(record_entries=pieces[3], waiting_records=records[n:][held_order],
                            waiting_record_entries=pieces[4][held_order])
    start = len(texts) - used.size - 1
    extra_cohorts = np.r_[start + cohort_of.ravel(), np.full(fresh.size, len(texts) - 1)]
    if held_cohort is not None:
        narrowed = held_cohort[w - n]
        extra_cohorts[:c.size][np.flatnonzero(back)[narrowed >= 0]] = narrowed[narrowed >= 0]
        # people first seen now, held back in a class: their candidates start here
        first = held_cohort[fresh - n]
        extra_cohorts[c.size:][first >= 0] = first[first >= 0]
    out = Stored(all_persons[order], np.r_[groups, extra_groups][order],
                 np.r_[versions, state.versions[c], np.zeros(fresh.size, dtype=np.int64)][order],
                 np.r_[cohort, extra_cohorts][order],
                 texts, pieces[0], distinct >> 32, distinct & 0xFFFFFFFF,
                 everyone[n:][held_order], pieces[1][held_order], version, since, **record_parts)
    out.last = np.r_[np.full(n, version, dtype=np.int64), extra_last][order]
    out.stay_owners, out.stay_entries = stay_owners[by_owner], pieces[2][by_owner]
    out.stay_last = stay_last[by_owner]
    return out


def entries(state: State, everyone: np.ndarray, groups: np.ndarray, newest=None, records=None):
    """Each person's entry for the state of the version being stored (``everyone``: the hashes
    of the people in the table, published or held back; ``groups``: their groups): the earlier
    state's entry, or this version and their group for people first held now. A state stored
    before entries were kept gives its people the newest version (``newest``: its row of
    anon.release_versions, None when there is none) and their group in it, and the entries
    follow people from that version on. Returns (the version, the oldest version followed, each
    person's entry, the entries' versions, their groups); with ``records`` (each person's record
    fingerprint now), each person's record entry after their entry: the earlier one while their
    record is unchanged, else this version and their group now (a state stored before records
    were kept: their entry)."""
    with timing.phase("entries"):
        return _entries(state, everyone, groups, newest, records)


def _entries(state: State, everyone: np.ndarray, groups: np.ndarray, newest=None, records=None):
    if state.entries is not None:
        version, since = state.version + 1, state.entries_since
        # a person back from an absence enters anew (their earlier stay is kept apart)
        known = state.stays_of(everyone)[0]
        entered = np.where(known >= 0, state.entry_versions[np.maximum(known, 0)], version) \
            if state.entry_versions.size else np.full(everyone.size, version, dtype=np.int64)
        first = np.where(known >= 0, state.entry_groups[np.maximum(known, 0)], groups) \
            if state.entry_groups.size else groups
    else:
        if newest is not None:
            since = newest["version"]
            version = since + 1
            before = np.concatenate([state.groups, np.asarray(newest["waiting_groups"] or [],
                                                              dtype=np.int64)])
            held = packed([bytes(h) for h in newest["waiting"] or []])
            at = _positions(np.concatenate([state.persons, held]), everyone)
        else:
            version = since = 0
            at = np.full(everyone.size, -1, dtype=np.int64)
            before = np.empty(0, dtype=np.int64)
        entered = np.where(at >= 0, since, version)
        first = np.where(at >= 0, before[np.maximum(at, 0)] if before.size else groups, groups)
    keys = np.asarray(entered, dtype=np.int64) << 32 | np.asarray(first, dtype=np.int64)
    if records is None:
        distinct, entry = _unique_inverse(keys)
        return (int(version), int(since), entry.ravel().astype(np.int64), distinct >> 32,
                distinct & 0xFFFFFFFF)
    record_keys = keys
    if state.entries is not None and state.records is not None and state.record_entries is not None:
        same = state.stays_of(everyone, records)[0]
        stored = state.entry_versions[np.maximum(same, 0)] << 32 | state.entry_groups[np.maximum(same, 0)] \
            if state.entry_versions.size else np.zeros(same.size, dtype=np.int64)
        record_keys = np.where(same >= 0, stored, np.int64(version) << 32 | np.asarray(groups, dtype=np.int64))
    distinct, inverse = _unique_inverse(np.concatenate([keys, record_keys]))
    inverse = inverse.ravel().astype(np.int64)
    return (int(version), int(since), inverse[:keys.size], inverse[keys.size:], distinct >> 32,
            distinct & 0xFFFFFFFF)


def _unique_inverse(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_inverse=True)`` of many integers with few distinct values (a
    version in the high 32 bits, a group in the low ones): ranked by one table of the pairs'
    range where it is narrow (core.encoding.sorted_distinct); else each half ranked so, then
    the pairs of ranks."""
    keys = np.asarray(keys, dtype=np.int64)
    if keys.size:
        high, low = keys >> 32, keys & 0xFFFFFFFF
        high_min, low_min = int(high.min()), int(low.min())
        width = int(low.max()) - low_min + 1
        if (int(high.max()) - high_min + 1) * width < 4 * keys.size + 65536:
            # few versions and groups: one table of the pairs' range, in the keys' order
            pairs, inverse = sorted_distinct((high - high_min) * width + (low - low_min))
            return (pairs // width + high_min) << 32 | (pairs % width + low_min), inverse
    highs, high_rank = sorted_distinct(keys >> 32)
    lows, low_rank = sorted_distinct(keys & 0xFFFFFFFF)
    pairs, inverse = sorted_distinct(high_rank.ravel() * lows.size + low_rank.ravel())
    return highs[pairs // max(lows.size, 1)] << 32 | lows[pairs % max(lows.size, 1)], inverse


def _distinct_keys(keys: np.ndarray, size: int) -> np.ndarray:
    """The sorted distinct values of integers in [0, size): marked in a table when it is small
    (no sort), sorted otherwise."""
    if size > 1 << 26:
        return containment.distinct(keys)
    table = np.zeros(size, dtype=bool)
    table[keys] = True
    return np.flatnonzero(table)


def _bitmasks(owners: np.ndarray, codes: np.ndarray, count: int, words: int) -> np.ndarray:
    """Each of ``count`` owners' values (``owners``, ``codes``: one (owner, value code) pair
    each, codes below 64 * ``words``) as a bitmask (owners x words)."""
    masks = np.zeros(count * words, dtype=np.uint64)
    codes = np.asarray(codes, dtype=np.int64)
    np.bitwise_or.at(masks, np.asarray(owners, dtype=np.int64) * words + codes // 64,
                     np.left_shift(np.uint64(1), (codes % 64).astype(np.uint64)))
    return masks.reshape(count, words)


def _set_masks(sets: list, name: str, position: dict, words: int) -> np.ndarray:
    """Each candidate set's values of column ``name`` as a bitmask over ``position`` (value
    text -> code); values not there are dropped."""
    owners, codes = [], []
    for e, candidates in enumerate(sets):
        held = [position[v] for v in candidates.get(name, []) if v in position]
        owners += [e] * len(held)
        codes += held
    return _bitmasks(np.asarray(owners, dtype=np.int64), np.asarray(codes, dtype=np.int64),
                     len(sets), words)


def _cohorts(n: int, kept) -> tuple[np.ndarray, list[str]]:
    """People whose candidates are the same sets share one text: each person's candidates as a
    bitmask over each sensitive column's values (``kept``: per column, the people's bitmasks
    and the values), people of equal bitmasks one cohort; its text from its first person's
    values. Returns each person's cohort and the cohorts' texts."""
    if not kept:
        return np.zeros(n, dtype=np.int64), [json.dumps({})]
    first, cohort = _distinct_rows(np.hstack([masks for _, masks, _ in kept]))
    # the first people's bits, value code i at column i
    held = [(name, np.unpackbits(masks[first].astype("<u8").view(np.uint8), axis=1,
                                 bitorder="little")[:, :len(dictionary)].astype(bool), dictionary)
            for name, masks, dictionary in kept]
    texts = []
    for c in range(first.size):
        if not c % 4096:
            check_interrupts()
        texts.append(json.dumps({name: sorted(dictionary[bits[c]].tolist())
                                 for name, bits, dictionary in held}, ensure_ascii=False))
    return cohort.ravel().astype(np.int64), texts


def _distinct_rows(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Equal rows of an integer matrix: each distinct row's first row, and each row's distinct
    row (numbered in the rows' sorted order; numpy's unique over rows sorts them as bytes, slower)."""
    if matrix.shape[1] == 1:
        _, first, inverse = np.unique(matrix[:, 0], return_index=True, return_inverse=True)
        return first, inverse.ravel().astype(np.int64)
    order = np.lexsort(matrix.T[::-1])      # stable: the first row of each run is its first
    ordered = matrix[order]
    new = np.r_[True, (ordered[1:] != ordered[:-1]).any(axis=1)] if order.size \
        else np.empty(0, dtype=bool)
    distinct = np.empty(order.size, dtype=np.int64)
    distinct[order] = np.cumsum(new) - 1
    return order[new], distinct


def forget(plpy, release_id: int) -> None:
    """A dropped (or replaced) release's people."""
    run(plpy, FORGET, ["int4"], [release_id])
    run(plpy, FORGET_REGIONS, ["int4"], [release_id])
    run(plpy, "DELETE FROM anon.release_versions WHERE release_id = $1", ["int4"], [release_id])


def refuse_below_l(release: dict, promise, figures: dict) -> None:
    """Refuse a version that leaves people with fewer than l candidate sensitive values across
    the versions published (``figures["below_l"]`` of a check; nothing is published)."""
    l = promise.l
    if l is not None and figures.get("below_l"):
        raise InsufficientData(
            f"this version of {release['release_schema']}.{release['release_name']} would leave "
            f"{figures['below_l']} people with fewer than l = {l} candidate sensitive values across the "
            "versions published (an analyst who kept them all could narrow them so); nothing was published",
            detail=json.dumps(figures),
            hint="The published version stays. Earlier versions cannot be unpublished: recreating the "
                 "release with replace => true starts a new history, which analysts may intersect with the old.")
