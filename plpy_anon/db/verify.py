"""Every release is checked from its released rows, in SQL, before it is published.

``releases.record`` -- which every path that builds a release goes through: creation
(``create_release``), the build-and-swap refresh (``refreshing.rebuild_view``) and a plain
``REFRESH MATERIALIZED VIEW`` (event trigger -> ``record_refresh``; Break-Merge's refresh is one)
-- calls :func:`check` before it writes the catalog. The check reads the released relation(s) with
SQL of its own and compares what it counts with what the release promises:

* **rows**: ``count(*)`` of the release = rows the build read from the source in its snapshot
  minus rows the method deliberately suppressed (both stashed by the partitioning run in ``GD``,
  ``releases.stash_run(row_count=..., source_rows=..., suppressed=...)``). A release that lost
  or duplicated rows fails.
* **k**: the smallest class (``GROUP BY`` the released quasi-identifier columns, exactly the
  columns an analyst can link on) has at least ``k`` rows, and ``k`` is at least
  ``core.k_anonymity.MIN_K`` (the third of k's three checks, after the declaration's and the
  core's).
* **l** (when ``l`` was asked): every class holds at least ``l`` distinct values that are not NULL
  in each sensitive column (SQL's ``count(DISTINCT column)``: a NULL is no value an attacker is
  unsure between) -- or, for Break-Merge, in every group of every sensitive table, whose counts
  must also add up to the QIT's rows group by group.

* **privacy models** (when asked, Mondrian family): entropy or recursive (c,l) l-diversity and
  t-closeness, per sensitive column, from the released rows' class x value table (value ranks in
  the column's order, NULL rows left out) given to the pure checks of
  :mod:`plpy_anon.core.privacy_models` (``Models.satisfied``; the table distribution for t is the
  released rows' own), in chunks of classes; the partitioner's state is never consulted.

The classes are counted by one ``GROUP BY`` over the released quasi-identifiers
(:mod:`plpy_anon.db.class_counts`), in the same pass as the release's stored risk report.

Containment (every source row lies inside its class's released box) is checked as a pair with
the Mondrian-family release query: that query carries a *containment filter* (a row whose value is
not inside its class's released range/set is not emitted), and the row-count check above then
sees the missing row and refuses the release. Neither half trusts the partitioning code: a wrong
box loses rows, a lost row fails the count.

What each method promises, and so what is checked (a method's db module may define
``verification_spec(plpy, release, stats) -> Spec``; the default reads the release's promise
(``plpy_anon.spec.Promise``: quasi-identifiers, sensitive columns, k, l and the models):

* mondrian, prioritized_mondrian: rows, k over the QIs, l per sensitive column when asked;
* trust: rows (suppressed outliers excluded), k over the QI labels when k was given;
* break_merge: rows and k over the ``_qit`` view, l and consistent counts over the ``_st_*`` views;
* fusion: rows, k over the released centroids (the identifier is published by design);
* pattern: rows only (no classes; it perturbs values and promises no k).

A failure raises :class:`VerificationFailed` (SQLSTATE 22000, data_exception) naming the check and
its figures, so the caller's (sub)transaction rolls back: a create leaves nothing, a refresh keeps
the previous release, and the refresh machinery records the failure.
"""
from __future__ import annotations

import datetime as dt
import json
import time
from dataclasses import dataclass, field

from plpy_anon.core.errors import AnonError
from plpy_anon.core.k_anonymity import MIN_K
from plpy_anon.db.class_counts import ClassCounts, Counter, pass_settings
from plpy_anon.db.method import ReleaseMethod
from plpy_anon.db.release_rows import check_genuine, storage_of
from plpy_anon.db.sqltext import ident, jsonb, local_settings, run
from plpy_anon.spec import ReleaseSpec


class VerificationFailed(AnonError):
    """A release's rows do not keep the promise it was built with (data_exception)."""

    sqlstate = "22000"


@dataclass
class Spec:
    """What to read and what to compare: the generic check is driven by this alone."""

    relation: str                     # quoted relation holding one row per released individual
    class_key: list[str]              # its columns forming a class (released QIs); [] = no classes
    k: int | None = None              # smallest class promised
    sensitive: list[str] = field(default_factory=list)   # columns of relation checked for l
    l: int | None = None              # distinct sensitive values per class promised
    expected_rows: int | None = None
    # Break-Merge: attribute -> quoted relation (gid, value, count), grouped by group_column
    count_tables: dict[str, str] = field(default_factory=dict)
    # attribute -> SQL comparing a count table's text values as the source column did (its
    # type's equality, its collation: '1.0' and '1.00' are one value); default: the text
    count_values: dict[str, str] = field(default_factory=dict)
    group_column: str | None = None
    # privacy models beyond distinct l (Mondrian family): checked per sensitive column
    l_diversity: str = "distinct"
    c: float | None = None
    t: float | None = None
    ordered: list[str] = field(default_factory=list)   # sensitive columns in value order (t)

    def models_asked(self) -> bool:
        return bool(self.class_key and self.model_columns and
                    ((self.l is not None and self.l > 1 and self.l_diversity != "distinct")
                     or self.t is not None))

    @property
    def model_columns(self) -> list[str]:
        return self.sensitive


def expected_rows(stats: dict | None) -> int | None:
    """Rows the release must hold: source rows the run read, minus those it suppressed."""
    if not stats:
        return None
    source_rows = stats.get("source_rows")
    if source_rows is None:
        source_rows = stats.get("row_count")
    if source_rows is None:
        return None
    return int(source_rows) - int(stats.get("suppressed") or 0)


def default_spec(plpy, release: dict, stats: dict | None) -> Spec:
    # the promise as stored, unchecked: a value the declaration would refuse is found here
    spec = ReleaseSpec.decode(release["method"], jsonb(release["parameters"]), checked=False)
    promise = spec.promise
    return Spec(relation=ident(plpy, release["release_schema"], release["release_name"]),
                class_key=list(promise.quasi_identifiers or ()), k=promise.k, l=promise.l,
                sensitive=list(promise.sensitive or ()) if promise.l or promise.t is not None
                else [],
                expected_rows=expected_rows(stats),
                l_diversity=promise.l_diversity, c=promise.c, t=promise.t,
                ordered=list(spec.built.ordered_sensitive) if promise.t is not None else [])


def spec_for(plpy, release: dict, stats: dict | None, method: ReleaseMethod) -> Spec:
    hook = method.verification_spec
    return hook(plpy, release, stats) if hook is not None else default_spec(plpy, release, stats)


def is_populated(plpy, release: dict) -> bool:
    """Whether the release's materialized view (a compact release's storage) holds rows."""
    rows = run(plpy, """
        SELECT c.relispopulated FROM pg_catalog.pg_class c
        JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = $1 AND c.relname = $2""", ["text", "text"],
        [release["release_schema"], storage_of(release)])
    return bool(rows) and bool(rows[0]["relispopulated"])


# ---------------------------------------------------------------------------- the counts

def counted_sensitive(spec: Spec) -> list[str]:
    """Sensitive columns whose class x value tables the check reads (l or a model asked)."""
    return list(spec.sensitive) if spec.class_key and (spec.l is not None or spec.models_asked()) \
        else []


def model_of(spec: Spec, column: str, table):
    """The models a class of ``column`` must hold, ``table`` the released rows' count per value
    id (value ranks in the column's order, NULL rows left out): its distribution is t's."""
    import numpy as np

    from plpy_anon.core.privacy_models import Models
    l = spec.l if spec.l is not None and spec.l > 1 and spec.l_diversity != "distinct" else None
    table = np.asarray(table, dtype=np.float64)
    return Models(l=l, l_diversity=spec.l_diversity, c=spec.c, t=spec.t,
                  table=table / table.sum(), ordered=column in spec.ordered)


def check_models(spec: Spec, counts: ClassCounts) -> tuple[dict, list[str]]:
    """Entropy / recursive l-diversity and t-closeness of every released class, per sensitive
    column, from its class x value table (value ranks in the column's order, NULL rows left out; the
    table distribution for t is the released rows' own), in chunks of classes
    (core.privacy_models.ClassCheck), or as a bounded pass counted them a fetch at a time
    (class_counts.read_streamed, the same ClassCheck): (figures, failures)."""
    import numpy as np

    from plpy_anon.core.privacy_models import ClassCheck
    figures, failures = {}, []
    for column in spec.model_columns:
        checked = counts.streamed.get(column, {}).get("models", False)
        if checked is False:
            owner, ranks, rows_per_pair = counts.known(column)
            checked = None
            if rows_per_pair.size:
                table = np.bincount(ranks, weights=rows_per_pair.astype(np.float64))
                checked = ClassCheck(model_of(spec, column, table), table.size)
                checked.add(owner, ranks, rows_per_pair, counts.n_classes)
        if checked is None:              # no value that is not NULL: no distribution
            continue
        figures[column] = checked.figures()
        failures.extend(checked.failures(column))
    return figures, failures


def count_table_query(plpy, spec: Spec, attribute: str, table: str) -> str:
    """A sensitive table (gid, value, count) against the relation's groups: groups whose counts
    disagree (missing on either side included), smallest number of distinct values, total."""
    group = ident(plpy, spec.group_column)
    value = spec.count_values.get(attribute, "value")
    return (
        f"SELECT count(*) FILTER (WHERE q.n IS DISTINCT FROM s.n)::int8 AS mismatched,\n"
        f"       min(s.d)::int8 AS smallest_l, coalesce(sum(s.n), 0)::int8 AS n_rows\n"
        f"FROM (SELECT {group} AS g, count(*) AS n FROM {spec.relation} GROUP BY {group}) AS q\n"
        f"FULL JOIN (SELECT gid AS g, sum(count) AS n,\n"
        f"                  count(DISTINCT {value}) AS d\n"
        f"           FROM {table} GROUP BY gid) AS s ON s.g = q.g")


# ---------------------------------------------------------------------------- the check

def check(plpy, release: dict, stats: dict | None, method: ReleaseMethod | None,
          counter: Counter | None = None) -> dict | None:
    """Check a release just built (not yet recorded); returns its figures for the catalog, or None
    when there is nothing to check (a relation registered by hand with a method plpy_anon does not
    know, or a materialized view refreshed WITH NO DATA). Raises
    VerificationFailed with every failed check and its figures. ``counter``: where the classes
    are counted (class_counts.py; the build's risk report reads the same counts)."""
    # the queries below read the release's relations by name, possibly as the extension's owner
    # (event trigger): only those plpy_anon made, never a stale row's namesakes
    check_genuine(plpy, release)
    if method is None or not is_populated(plpy, release):
        return None      # not built by a plpy_anon method (promises nothing), or no rows to read
    started = time.monotonic()
    name = f"{release['release_schema']}.{release['release_name']}"
    spec = spec_for(plpy, release, stats, method)
    counts = None
    counter = counter or Counter(plpy, release)
    if spec.class_key:
        counts = counter.get(spec.relation, spec.class_key, counted_sensitive(spec))
        row = {"n_rows": counts.n_rows, "n_classes": counts.n_classes,
               "smallest": counts.smallest}
    else:
        row = {"n_rows": int(plpy.execute(f"SELECT count(*)::int8 AS n FROM {spec.relation}")[0]["n"]),
               "n_classes": None, "smallest": None}
    # JIT off: a check's plan runs once, and above 1M rows its cost estimate triggers JIT
    # compilation that the run never earns back
    with local_settings(plpy, work_mem=pass_settings(plpy, counter.budget)["work_mem"], jit="off"):
        tables = {attr: plpy.execute(count_table_query(plpy, spec, attr, table))[0]
                  for attr, table in spec.count_tables.items()}
    model_figures, model_failures = check_models(spec, counts) if spec.models_asked() \
        else ({}, [])
    figures = {"rows_expected": spec.expected_rows, "rows_released": row["n_rows"],
               "classes": row["n_classes"], "smallest_class": row["smallest"],
               "k": spec.k, "l": spec.l, "l_by_column": {}}
    if counts is not None:
        figures["counted_with"] = counts.settings
    failures = []
    if spec.expected_rows is None:
        failures.append("the build's statistics (rows read, rows suppressed) are missing, so its "
                        "row count cannot be checked")
    elif row["n_rows"] != spec.expected_rows:
        read = stats.get("source_rows", stats.get("row_count"))
        failures.append(f"{row['n_rows']} rows released, {spec.expected_rows} expected "
                        f"({read} source rows read, {int(stats.get('suppressed') or 0)} suppressed)")
    if spec.k is not None and spec.k < MIN_K:       # a catalog row edited below the minimum
        failures.append(f"k = {spec.k} promised, below the smallest k of any release ({MIN_K})")
    if (spec.k is not None and spec.class_key and row["smallest"] is not None
            and row["smallest"] < spec.k):
        failures.append(f"smallest class has {row['smallest']} rows, k = {spec.k} promised")
    if spec.models_asked():
        figures["models"] = {"l_diversity": spec.l_diversity, "c": spec.c, "t": spec.t,
                             "by_column": model_figures}
        failures.extend(model_failures)
    if spec.l is not None and spec.l_diversity == "distinct":
        for col in counted_sensitive(spec):
            fewest = counts.fewest_distinct(col)
            figures["l_by_column"][col] = fewest
            if fewest is not None and fewest < spec.l:
                failures.append(f'a class has {fewest} distinct values of "{col}", '
                                f"l = {spec.l} promised")
    for attr, t in tables.items():
        figures["l_by_column"][attr] = t["smallest_l"]
        if t["mismatched"]:
            failures.append(f'{t["mismatched"]} group(s) of the sensitive table of "{attr}" do not '
                            "count the same rows as the quasi-identifier table")
        if spec.l is not None and t["smallest_l"] is not None and t["smallest_l"] < spec.l:
            failures.append(f'a group has {t["smallest_l"]} distinct values of "{attr}", '
                            f"l = {spec.l} promised")
    figures["seconds"] = round(time.monotonic() - started, 4)
    figures["checked_at"] = dt.datetime.now(dt.UTC).isoformat()
    if failures:
        raise VerificationFailed(
            f"release {name}: " + "; ".join(failures),
            detail="figures: " + json.dumps(figures),
            hint="The release was not published (a previous release stays as it was). Its rows "
                 "break a promise of the method: report this with the release's parameters.")
    return figures
