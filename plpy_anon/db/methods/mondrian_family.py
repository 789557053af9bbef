"""What the Mondrian family shares (plain and prioritized Mondrian): the release's columns and
privacy-model parameters, its default name, its query (generalization.py), and the partitioning
run's read (the source's QIs, encoded) and output (whole classes in release order, in slices).
Each method module imports this one, never another method.
"""
from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import TYPE_CHECKING

import numpy as np

from plpy_anon.core.encoding import (
    encode_factorized,
    encode_numeric,
    finite_for_ordering,
    numeric_offset,
)
from plpy_anon.core.errors import DuplicateObject, InsufficientData, InvalidParameter
from plpy_anon.core.generalize import ClassIndex, class_bounds, class_code_range, class_value_ranks
from plpy_anon.core.k_anonymity import check_k
from plpy_anon.core.metrics import release_metrics
from plpy_anon.core.regions import widened
from plpy_anon.db import (
    class_sets,
    compact,
    guards,
    method,
    params,
    release_rows,
    republication,
    stored_classes,
)
from plpy_anon.db import columns as catalog
from plpy_anon.db.class_counts import orderable
from plpy_anon.db.compact import ROWS_COLUMN
from plpy_anon.db.generalization import (
    check_float_digits,
    class_literals,
    class_set_literals,
    column_for,
    compact_read_query,
    flat_read_query,
    generalized_release_query,
    int_array_literal,
    literal_keys,
    pack_literals,
    release_order,
)
from plpy_anon.db.identifiers import release_roles
from plpy_anon.db.reader import (
    TableData,
    TextColumnData,
    merge_equal_spellings,
    read_columns,
    server_is_utf8,
)
from plpy_anon.db.sqltext import ident, jsonb, run
from plpy_anon.parameters import L_DIVERSITY
from plpy_anon.spec import Built, Promise, ReleaseSpec

if TYPE_CHECKING:
    import pandas as pd


def check_l(l, sensitive: list) -> int | None:
    if l is None:
        return None
    if not sensitive:
        raise InvalidParameter(
            "l-diversity needs a sensitive column, and the table has none",
            hint="Declare one with anon.set_column_role(table, column, 'sensitive') or pass sensitive => ARRAY[...].")
    return int(l)


def resolve_release_columns(plpy, tbl, promise: Promise):
    """(roles, qis, sensitive columns, l) of a generalizing release from its ``promise``:
    at least one QI, every QI of a type that generalizes, l only with a sensitive column."""
    roles = release_roles(plpy, tbl, quasi_identifiers=promise.quasi_identifiers,
                          sensitive=promise.sensitive, identifiers=promise.identifiers)
    qis = [c for c, role in roles if role == "quasi_identifier"]
    sens = [c for c, role in roles if role == "sensitive"]
    if not qis:
        raise InvalidParameter(
            f"table {tbl.label} has no quasi-identifier to generalize",
            hint="Declare some with anon.set_column_role(table, column, 'quasi_identifier') "
                 "or pass quasi_identifiers => ARRAY[...].")
    for col in qis:
        catalog.check_quasi_identifier(tbl, col)
    return roles, qis, sens, check_l(promise.l, sens)


#: SA types whose values are ordered for t-closeness (ordered-distance EMD); others: equal distance
ORDERED_SENSITIVE_TYPES = ("int2", "int4", "int8", "numeric", "float4", "float8")


def check_models(l, sens: list, spec: ReleaseSpec) -> dict:
    """The privacy-model and split parameters of a Mondrian-family release (``spec``, each
    validated by its declaration) checked together, as stored in its parameters.
    ``ordered_sensitive``: the sensitive columns t-closeness treats as ordered (numeric types)."""
    models = core_models(spec)
    params.check_models(replace(spec.promise, l=l))
    if spec.promise.t is not None and not sens:
        raise InvalidParameter(
            "t-closeness needs a sensitive column, and the table has none",
            hint="Declare one with anon.set_column_role(table, column, 'sensitive') or pass sensitive => ARRAY[...].")
    models["ordered_sensitive"] = [c.name for c in sens if c.type_name in ORDERED_SENSITIVE_TYPES]
    return models


def model_suffix(l, models: dict) -> str:
    """Default release name suffix: ``_l2``, ``_l2_entropy``, ``_l2_recursive_c3``, ``_t0_2``."""
    out = f"_l{l}" if l else ""
    if l and models.get("l_diversity", L_DIVERSITY.python_default) != "distinct":
        out += f"_{models['l_diversity']}"
        if models.get("c") is not None:
            out += f"_c{models['c']:g}".replace(".", "_")
    if models.get("t") is not None:
        out += f"_t{models['t']:g}".replace(".", "_")
    return out


def core_models(spec: ReleaseSpec) -> dict:
    """The core estimator's model keywords from a release's specification."""
    promise = spec.promise
    return {"l_diversity": promise.l_diversity, "c": promise.c, "t": promise.t,
            "split": spec.settings.split}


def ordered_sensitive_names(spec: ReleaseSpec) -> set[str]:
    """The sensitive columns whose codes follow their values' order: with t, the numeric ones."""
    return set(spec.built.ordered_sensitive) if spec.promise.t is not None else set()


def value_ordered_codes(column: TextColumnData) -> np.ndarray:
    """Codes of a numeric sensitive column (read as text) numbered in value order (NaN after
    numbers, as PostgreSQL sorts them), so that the ordered-distance EMD sees neighbours as
    neighbours; NULL stays -1 (no value: core.mondrian). The dictionary's strings are parsed once
    each, not once per row, as exact decimals: values PostgreSQL tells apart (20-digit numerics,
    int8's limits) may share a float8, and the check ranks them apart."""
    values = [Decimal(v) for v in column.dictionary]
    numbers = sorted({v for v in values if not v.is_nan()})
    rank_of = {v: i for i, v in enumerate(numbers)}          # equal values (1.0, 1.00): one rank
    rank = np.array([len(numbers) if v.is_nan() else rank_of[v] for v in values], dtype=np.int64)
    table = np.append(rank, -1)                                          # code -1 (NULL): -1
    return table[column.codes]


def sensitive_for_models(rows, spec: ReleaseSpec):
    """(sensitive codes, ordered flags, names) for the core; the codes of ordered columns were
    numbered in value order when the rows were read (load_release_rows)."""
    names = list(spec.promise.sensitive or ())
    if rows.sensitive is None or not names:
        return rows.sensitive, False, None
    ordered_names = ordered_sensitive_names(spec)
    return rows.sensitive, [n in ordered_names for n in names], names


def base_parameters(plpy, tbl, roles, qis, sens, k, l, models=None) -> dict:
    """The catalog parameters every Mondrian-family release records."""
    hierarchical = set(catalog.hierarchy_columns(plpy, tbl))
    return {
        "k": k, "l": l, **(models or {}),
        "quasi_identifiers": [c.name for c in qis],
        "sensitive": [c.name for c in sens],
        "hierarchies": [c.name for c in qis if c.name in hierarchical and c.kind == "categorical"],
        "released": [c.name for c, role in roles if role in ("quasi_identifier", "sensitive")],
        "dropped": [c.name for c, role in roles if role in ("identifier", "ignored")],
        "packed_literals": True,        # its run hands back literals as generalization.pack_literals
    }


def release_query(plpy, tbl, roles, parameters, release_id: int,
                  partition_function: str = "anon._mondrian_partition_slices") -> str:
    """The materialized view's query of a Mondrian-family release (a compact release's
    storage: one row per class)."""
    promise, built = Promise.of(parameters), Built.of(parameters)
    hierarchical = set(built.hierarchies)
    by_name = {col.name: col for col, _ in roles}
    qi_types = {name: catalog.output_type(by_name[name], name in hierarchical)
                for name in promise.quasi_identifiers}
    call = f"{partition_function}({int(release_id)})"
    compact = promise.layout == "compact"
    # written from the values the run read, or joined back to the source (columns not read
    # exactly: stored_classes; releases made before)
    if not built.joined_back:
        return (compact_read_query if compact else flat_read_query)(plpy, tbl, roles, qi_types, call)
    return generalized_release_query(plpy, tbl, roles, qi_types, call, sliced=True, compact=compact)


def release_plan(plpy, tbl, roles, parameters: dict, default_name: str,
                 partition_function: str = "anon._mondrian_partition_slices") -> method.Plan:
    """How a Mondrian-family release is built. Compact (the default where every sensitive column
    can be stored so, :func:`unstorable_columns`): a materialized view of one row per class (its
    storage, ``<name>_classes``) and, under the release's own name, the plain view analysts read
    (compact.view_query); a refresh rebuilds the storage and swaps it in under the view
    (refreshing.rebuild_view). Flat: one materialized view of one row per person."""
    unstorable = unstorable_columns(plpy, tbl, roles)
    layout = Promise.of(parameters).layout
    if layout is None:
        layout = "flat" if unstorable else "compact"
        if unstorable:
            plpy.notice(f"{tbl.label} is released flat (one row per person): a compact release "
                        f"cannot store {unstorable}")
    elif layout == "compact" and unstorable:
        raise InvalidParameter(f"layout => 'compact' cannot store {unstorable} of {tbl.label}",
                               hint="Use layout => 'flat' (or omit layout) for this table.")

    # written from the values read where they are read exactly and a class can hold them (an
    # array of each sensitive column: unstorable_columns), unless the session asks for the join
    # back (plpy_anon.join_back = on)
    joined_back = bool(unstorable) or stored_classes.join_back_asked(plpy) \
        or not stored_classes.reads_exactly(plpy, [c for c, role in roles if role == "sensitive"])
    parameters.update(layout=layout, joined_back=joined_back)

    def query(release_id):
        return release_query(plpy, tbl, roles, parameters, release_id, partition_function)

    if layout != "compact":
        return method.Plan(parameters, default_name=default_name, query=query)

    def build(release_id, qualified, name):
        release = release_rows.by_id(plpy, release_id)
        schema, storage = release["release_schema"], Built.of(jsonb(release["parameters"])).storage
        if release_rows.relation_exists(plpy, schema, storage):
            raise DuplicateObject(
                f"relation {schema}.{storage} already exists and is not this release's storage",
                hint="Choose another release_name; plpy_anon never replaces objects it did not create.")
        release_rows.create_frozen_view(plpy, ident(plpy, schema, storage), query(release_id))
        # the very query compact.check_view compares the view with, from the same parameters
        plpy.execute(f"CREATE VIEW {qualified} AS {compact.expected_view(plpy, release)}")

    return method.Plan(parameters, default_name=default_name, build=build,
                       objects=lambda name: {"storage": compact.storage_name_for(name)})


def unstorable_columns(plpy, tbl, roles) -> str | None:
    """What a compact release cannot store, described, or None. Each sensitive column is stored
    as an array of its values, so it must be of a built-in type (another type's array would be a
    column of a type plpy_anon did not give it: release_rows.check_column_types), not an array
    itself (an array of arrays is one multidimensional array, which unnest flattens), and
    ordered (its class x value counts need one); with nothing sensitive released, no column may
    be named like the row-count column."""
    released = [col for col, role in roles if role in ("quasi_identifier", "sensitive")]
    sensitive = [col for col, role in roles if role == "sensitive"]
    builtin = {r["name"] for r in run(plpy, BUILTIN_TYPES, ["oid", "text[]"],
                                      [tbl.oid, [c.name for c in sensitive]])}
    refused = [f'"{c.name}" ({c.display_type})' for c in sensitive
               if c.name not in builtin or c.category == "A" or not orderable(plpy, c.display_type)]
    if refused:
        return f"the sensitive column(s) {', '.join(refused)}: an array, a type without an " \
               "ordering, or a type that is not built in"
    if not sensitive and any(c.name == ROWS_COLUMN for c in released):
        return f'a column named "{ROWS_COLUMN}" (the name of its row-count column)'
    return None


#: the columns (of $2) whose type is pg_catalog's and not an array
BUILTIN_TYPES = """
SELECT a.attname::text AS name FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
WHERE a.attrelid = $1 AND a.attname = ANY($2) AND NOT a.attisdropped
  AND t.typnamespace = 'pg_catalog'::pg_catalog.regnamespace AND t.typcategory <> 'A'"""


# ---------------------------------------------------------------------------- partitioning run

def partition_output(ctx: method.Run, rows: ReleaseRows, labels, n_classes,
                     extra_metrics=None, class_arrays=None,
                     slice_rows: int | None = None) -> tuple[Iterator[dict], dict]:
    """What a Mondrian-family partitioning function returns: its ``anon.partition_slice`` rows
    (an iterator, each slice built when PostgreSQL asks for it: see :func:`partition_slices`);
    and the run's statistics for the catalog (``stash_run``'s keywords). ``class_arrays``: the
    first sensitive column's array literals of the classes of given labels, instead of their
    rows' values (a stable refresh's published multisets; values read only). ``slice_rows``:
    rows per slice (default SLICE_ROWS)."""
    given_labels = np.asarray(labels)
    # classes renumbered in release order and rows listed in it (release_order): SQL gets the
    # ctids in that order and each class's size, not a class id and a position per row
    labels, order = release_order(labels, n_classes)
    index = ClassIndex(order, np.concatenate([[0], np.cumsum(np.bincount(labels,
                                                                         minlength=n_classes))]))
    # categorical QIs' literals come from here; numeric QIs' bounds from SQL (joined back) or,
    # with the values read (rows.read), from here too, as do the sensitive arrays
    listed = [(i, col, enc) for i, (col, enc) in enumerate(zip(rows.qis, rows.encoded))
              if col.kind == "categorical"]
    # each value set's (class, value) pairs, found once for its literals and its NCP
    ranked = {i: class_value_ranks(enc, labels, n_classes)
              for i, _, enc in listed if enc.hierarchy is None}
    # each numeric QI's smallest and largest code per class, gathered once: for its NCP, and for
    # its range literals where it holds no NULL (then they are its values' extremes)
    code_ranges = {enc.name: class_code_range(enc.codes, labels, n_classes, index)
                   for col, enc in zip(rows.qis, rows.encoded) if col.kind == "numeric"}
    metrics = release_metrics(rows.encoded, labels, rows.k, index,
                              distinct={rows.encoded[i].name: np.diff(r[2]) for i, r in ranked.items()},
                              code_ranges=code_ranges)
    metrics.update(extra_metrics or {})
    # value sets straight to their literals, a slice at a time; hierarchy labels through
    # class_bounds
    literals = {f"q{i}": class_set_literals(enc, labels, n_classes, ranked.pop(i))
                for i, _, enc in listed if enc.hierarchy is None}
    hierarchical = [(i, col, enc) for i, col, enc in listed if enc.hierarchy is not None]
    bounds = class_bounds([enc for _, _, enc in hierarchical], labels, n_classes, index)
    literals.update({f"q{i}": class_literals(col, bounds[col.name]) for i, col, _ in hierarchical})
    literals = {f"q{i}": literals[f"q{i}"] for i, _, _ in listed}      # in column order
    del bounds, labels
    if rows.read is not None:
        literals.update(read_literals(ctx.plpy, rows, order, index, code_ranges))
    if class_arrays is not None:
        # each release class's label: that of its first row
        class_label = given_labels[order[index.bounds[:-1]]]
        literals["s0"] = lambda first, last: class_arrays(class_label[first:last])
    # only the rows' ctids (and relations, if joined back) outlive this call, not the columns read
    located = TableData(rows.data.n_rows, rows.data.row_tids, row_relations=rows.data.row_relations)
    slices = partition_slices(located, order, index.bounds, literals, slice_rows,
                              packed=ctx.spec.built.packed_literals,
                              any_character=server_is_utf8(ctx.plpy))
    metrics["seconds"] = {"read": round(ctx.read_s, 4), "partition": round(ctx.fit_s, 4),
                          "python_total": round(ctx.elapsed(), 4)}
    return slices, {"row_count": rows.data.n_rows, "achieved_k": metrics["achieved_k"],
                    "metrics": metrics}


#: rows per anon.partition_slice (whole classes: a slice ends at the class that reaches it)
SLICE_ROWS = 1 << 20


def read_literals(plpy, rows: ReleaseRows, order: np.ndarray, index: ClassIndex,
                  code_ranges: dict | None = None) -> dict:
    """The literals of a release written from the values read (stored_classes): each numeric
    QI's ranges (``q<i>``) and each sensitive column's arrays (``s<j>``), the arrays made a
    slice at a time (a function of the slice's first and last class). ``code_ranges``: some
    numeric QIs' smallest and largest code per class (core.generalize.class_code_range), by
    name."""
    out = {}
    for i, (col, enc) in enumerate(zip(rows.qis, rows.encoded)):
        if col.kind != "numeric":
            continue
        null = (enc.codes == enc.null_code) if enc.null_code is not None \
            else np.zeros(enc.codes.shape[0], dtype=bool)
        if col.type_name in stored_classes.TIME_TYPES:
            # the codes follow float8 epochs, which two microseconds apart may share
            low, high, only_null = stored_classes.class_extremes(rows.read.times[col.name], null, index)
        elif col.type_name == "numeric":
            # and numerics' float8 stand-ins, which 20 digits or 1e400 may share
            text = rows.read.numeric_texts[col.name]
            ranks, by_rank = stored_classes.numeric_ranks(plpy, text.dictionary)
            # NULL's code -1 reads the appended 0; its rows are left out by ``null``
            low, high, only_null = stored_classes.class_extremes(np.append(ranks, 0)[text.codes],
                                                                 null, index)
            low, high = by_rank[low], by_rank[high]
        else:
            if enc.null_code is None and col.name in (code_ranges or {}):
                # no NULL to leave out: each class's extremes are its codes' (a class with no
                # rows, which a partition never has, as class_extremes gives it)
                empty = np.diff(index.bounds) == 0
                low, high = (np.where(empty, 0, c) for c in code_ranges[col.name])
                only_null = empty
            else:
                low, high, only_null = stored_classes.class_extremes(enc.codes, null, index)
            values = rows.read.values_by_code[col.name]
            low, high = values[low], values[high]
        out[f"q{i}"] = stored_classes.class_ranges(plpy, col.type_name, low, high, only_null,
                                                    rows.data.n_rows)
    for j, text in enumerate(rows.read.sensitive):
        elements = class_sets.entry_table(stored_classes.array_elements(text.dictionary),
                                          rows.data.n_rows)
        out[f"s{j}"] = functools.partial(stored_classes.array_literals, text.codes, elements,
                                         order, index.bounds)
    return out


def partition_slices(data: TableData, order: np.ndarray, bounds: np.ndarray,
                     literals: dict, slice_rows: int | None = None,
                     packed: bool = True, any_character: bool = True) -> Iterator[dict]:
    """The ``anon.partition_slice`` rows of a run, one at a time: consecutive whole classes of
    about ``slice_rows`` rows (default ``SLICE_ROWS``; at least one class each), their rows' ctids in release order
    (``order``: row indices by release position; class ``c`` holds the positions
    ``bounds[c]:bounds[c + 1]``; none when ``data`` has no ctids: nothing is joined back), each
    class's size and literals (``literals``: per literal column, one per class, or a function
    of the slice's first and last class returning them), packed (generalization.pack_literals)
    or, for a release made before (``packed`` False: its query reads them so), as jsonb;
    ``any_character``: whether the server encoding spells every separator (UTF-8)."""
    n_classes = bounds.size - 1
    keys = literal_keys(literals)
    first = 0
    while first < n_classes:
        # the classes ending within SLICE_ROWS of this slice's start; at least one
        last = max(first + 1, int(np.searchsorted(bounds, bounds[first] + (slice_rows or SLICE_ROWS),
                                                  side="right")) - 1)
        rows = order[bounds[first]:bounds[last]]
        of_slice = {q: literals[q](first, last) if callable(literals[q]) else literals[q][first:last]
                    for q in keys}
        packed_texts = [pack_literals(of_slice.pop(q), any_character) for q in keys] \
            if packed else []
        yield {
            "first_position": int(bounds[first]),
            "first_class": first,
            "class_sizes": int_array_literal(np.diff(bounds[first:last + 1])),
            "ctids_utf8": None if data.row_tids is None else data.ctid_literal_bytes(rows),
            "row_tableoids": None if data.row_tids is None else data.tableoid_literal(rows),
            "classes": None if packed else json.dumps(of_slice, default=list),
            "literals": [text for text, _ in packed_texts] if packed else None,
            "separators": "".join(marks for _, marks in packed_texts) if packed else None,
        }
        first = last


@dataclass
class ReadValues:
    """The values a compact release's storage is written from (stored_classes): each numeric
    QI's value of each of its codes, and each sensitive column's texts as spelled in the source."""

    values_by_code: dict[str, np.ndarray]
    sensitive: list[TextColumnData]
    times: dict[str, np.ndarray]           # timestamp QIs' microseconds (reader.read_columns)
    numeric_texts: dict[str, TextColumnData]   # numeric QIs' texts (reader.read_columns)


@dataclass
class ReleaseRows:
    """A Mondrian-family release's source, read once: the encoded QIs and what else it needs."""

    tbl: guards.Table
    k: int
    l: int | None
    qis: list
    encoded: list
    sensitive: np.ndarray | None
    target: np.ndarray | None
    data: TableData            # n_rows and the rows' ctids / tableoids; its columns are released
    read: ReadValues | None = None   # what the storage is written from, unless joined back
    people: republication.People | None = None     # refresh_mode 'stable' only

    @functools.cached_property
    def frame(self) -> pd.DataFrame:
        """Original QI values (numbers with NaN for NULL, text with None), rebuilt from the codes
        only for the methods that need them (prioritized, workload): a plain Mondrian run keeps
        no copy of the values beside the codes."""
        frame = {}
        for enc in self.encoded:
            if enc.kind == "numeric":
                offset = numeric_offset(enc)
                labels = np.append(np.asarray(enc.labels, dtype=np.float64), np.nan)
                index = enc.codes.astype(np.int64) - offset
                if enc.null_code is not None:
                    index[enc.codes == enc.null_code] = labels.size - 1
                frame[enc.name] = labels[index]
            else:
                frame[enc.name] = np.asarray(enc.labels, dtype=object)[enc.codes]
        import pandas as pd  # here: only the methods that need the values pay its import

        return pd.DataFrame(frame)


def load_release_rows(plpy, release, spec: ReleaseSpec, *, with_target=True,
                      where: str | None = None, people_state=None) -> ReleaseRows:
    """Read the columns a Mondrian-family release (``spec``) needs in one query and encode its
    QIs; ``where``: only the rows of this SQL condition (a region of an out-of-core run);
    ``people_state``: the stable mode's state its people are matched with (None: the
    release's, read: republication.people_of)."""
    promise = spec.promise
    tbl = guards.table_in_query(plpy, release["source"])
    cols = {c.name: c for c in catalog.columns_as_built(plpy, tbl, spec.built.hierarchies)}
    qis = [column_for(tbl, cols, name) for name in promise.quasi_identifiers]
    l = promise.l
    reads_values = not spec.built.joined_back
    sens = [column_for(tbl, cols, name) for name in promise.sensitive] \
        if l or promise.t is not None or reads_values else []
    if reads_values:
        stored_classes.check_not_renamed(plpy, release, tbl, list(spec.built.released))
        if not stored_classes.reads_exactly(plpy, sens):
            raise InvalidParameter(
                f"the columns of {tbl.label} changed type since the release was created and can "
                "no longer be stored from the values read",
                hint="Recreate the release with replace => true.")
    target_name = spec.settings.target if with_target else None
    target_col = [column_for(tbl, cols, target_name)] if target_name else []
    stable = promise.refresh_mode == "stable"
    identifiers = [column_for(tbl, cols, name) for name in promise.identifiers] if stable else []
    check_float_digits(plpy, tbl, qis + (sens if reads_values else []))
    numeric = [c for c in qis if c.kind == "numeric"]
    categorical = [c for c in qis if c.kind == "categorical"]
    # an integer identifier is read as numbers: its text (its digits) is made from them to hash it
    valued = {c.name for c in sens + target_col}
    id_numbers = [c for c in identifiers if _integer_column(c) and c.name not in valued]
    extra = [c for c in sens + target_col + identifiers
             if c.name not in {q.name for q in categorical} and c not in id_numbers]
    # a stable release's check matches its people with the released classes by their QIs as read
    # (an integer's text, its digits, is made from the number read)
    texts_read = [c for c in numeric if not _integer(c)] if stable else []
    data = read_columns(plpy, tbl, numeric + [c for c in id_numbers if c not in numeric],
                        categorical + _unique(extra), located=not reads_values,
                        exact=reads_values, texts=texts_read, where=where)
    # the stored texts as spelled in the source; l and t count values, not spellings
    spelled = [data.columns[c.name] for c in sens] if reads_values and data.n_rows else []
    merge_equal_spellings(plpy, tbl, data, sens)
    k = promise.k
    if data.n_rows == 0:
        raise InsufficientData(f"table {tbl.label} is empty",
                               hint="Load rows first; a release of no rows protects nothing.")
    check_k(k, data.n_rows, f"table {tbl.label}")
    hierarchical = set(spec.built.hierarchies)
    encoded = []
    values_by_code = {}
    for col in qis:
        d = data.columns[col.name]
        if col.kind == "numeric":
            ordered = finite_for_ordering(d.values, d.null_mask)   # ±inf, NaN: released as is
            encoded.append(encode_numeric(col.name, ordered, d.null_mask))
            if reads_values:
                # codes follow the (stand-in) values' order, one code per distinct value
                values_by_code[col.name] = np.zeros(int(encoded[-1].codes.max()) + 1,
                                                    dtype=d.values.dtype)
                values_by_code[col.name][encoded[-1].codes] = d.values
        else:
            hierarchy = (catalog.load_hierarchy(plpy, tbl, col.name)
                         if col.name in hierarchical else None)
            if col.name in hierarchical and hierarchy is None:
                raise InvalidParameter(
                    f'the hierarchy of column "{col.name}" was dropped after the release was '
                    "created",
                    hint="Register it again with anon.set_hierarchy, or recreate the release "
                         "with replace => true.")
            encoded.append(encode_factorized(col.name, d.codes, d.dictionary, hierarchy))
    sensitive = None
    if sens and (l or promise.t is not None):
        ordered = ordered_sensitive_names(spec)
        sensitive = np.column_stack([
            value_ordered_codes(data.columns[c.name]) if c.name in ordered
            else data.columns[c.name].codes for c in sens])          # NULL: -1, no value
    target = None
    if target_col:
        target = np.asarray([str(v) for v in data.columns[target_name].values], dtype=object)
    people = None
    if stable:
        people = republication.people_of(
            plpy, release["release_id"], spec.stored,
            [republication.Integers(data.columns[c.name].values, data.columns[c.name].null_mask)
             if c in id_numbers else republication.Coded.of(data.columns[c.name])
             for c in identifiers],
            [data.columns[c.name].dictionary for c in sens] if sensitive is not None else [],
            # categorical QIs' text is what they were read as already (codes and their texts)
            [republication.Coded.of_integers(data.columns[c.name].values,
                                             data.columns[c.name].null_mask)
             if c.kind == "numeric" and _integer(c)
             else republication.Coded.of((data.texts if c.kind == "numeric" else data.columns)[c.name])
             for c in qis],
            data.columns[sens[0].name].codes if sensitive is not None else None, people_state)
        data.texts.clear()
    data.columns.clear()             # the values are in the codes now: keep one copy
    read = ReadValues(values_by_code, spelled, data.exact_times, data.numeric_texts) \
        if reads_values else None
    return ReleaseRows(tbl, k, l, qis, encoded, sensitive, target, data, read, people)


def _integer(col) -> bool:
    """Whether a numeric column holds integers (read exactly, printed as their digits)."""
    return catalog.NUMERIC_TYPES[col.type_name][2] == "int"


def _integer_column(col) -> bool:
    """Whether a column is of an integer type (int2, int4, int8)."""
    kind = catalog.NUMERIC_TYPES.get(col.type_name)
    return kind is not None and kind[2] == "int"


def _unique(cols):
    seen, out = set(), []
    for c in cols:
        if c.name not in seen:
            seen.add(c.name)
            out.append(c)
    return out


def read_region(ctx: method.Run, where: str | None, whole: list, people_state=None) -> ReleaseRows:
    """The rows of one region of an out-of-core run (``where``), their QIs encoded against the
    whole table's domain (``whole``: core.regions.widened), so the fit ranks them as the whole
    table's fit would (``people_state``: load_release_rows')."""
    rows = load_release_rows(ctx.plpy, ctx.release, ctx.spec, with_target=False, where=where,
                             people_state=people_state)
    for i, enc in enumerate(rows.encoded):
        rows.encoded[i], shift = widened(enc, whole[i])
        by_code = rows.read.values_by_code if rows.read is not None else {}
        if shift and enc.name in by_code:       # the value of each code, a code added below them
            offset = numeric_offset(enc)
            by_code[enc.name] = np.insert(by_code[enc.name], offset, by_code[enc.name][offset])
    return rows
