"""Fusion-resilient releases: ``anon.fusion_scan``, ``anon.fusion_resilient_view``,
``anon.fusion_scan_of`` and the MDAV run behind every refresh.

``fusion_scan`` reads the source (identifier as text, numeric attributes, the sensitive column)
and the auxiliary table in one query each, runs the pure scan (``plpy_anon.core.fusion``) and
returns one row per k. ``fusion_resilient_view`` does the same, chooses k, and creates a
materialized view through the release catalog:

    SELECT s."name", c.a0::float8 AS "perf_1", ...
    FROM anon._fusion_partition(<release_id>) AS p                 -- MDAV at the chosen k
    CROSS JOIN LATERAL unnest(p.row_ctids::tid[], p.class_ids::int4[], p.row_tableoids::oid[])
         AS r(row_ctid, class_id, row_tableoid)       -- tableoids: partitioned/inherited sources
    JOIN <source> AS s ON s.ctid = r.row_ctid AND (r.row_tableoid IS NULL OR s.tableoid = ...)
                                                                    -- the identifier stays in SQL
    JOIN LATERAL ROWS FROM (jsonb_array_elements_text(p.classes -> 'a0'), ...) WITH ORDINALITY
         AS c(a0, ..., class_no) ON c.class_no = r.class_id + 1    -- one row per group
    ORDER BY s."name"                                    -- public anyway; hides the source order

The whole scan, the auxiliary match counts and the attack settings are stored in the catalog row's
``parameters`` (``anon.fusion_scan_of`` reads them back). A refresh re-runs MDAV on current data at
the chosen k; it does not re-scan (the choice is part of the release: recreate it with
``replace => true`` to choose again).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from plpy_anon.core import fusion as core
from plpy_anon.core.errors import InsufficientData, InvalidParameter, UnsupportedType
from plpy_anon.core.k_anonymity import check_k
from plpy_anon.core.mdav import MDAV
from plpy_anon.db import columns as catalog
from plpy_anon.db import guards, method, release_rows, verify
from plpy_anon.db.encodings import refuse_bytes_not_utf8
from plpy_anon.db.errors import sql_entry
from plpy_anon.db.method import ReleaseMethod
from plpy_anon.db.reader import read_columns, refuse_non_finite
from plpy_anon.db.sqltext import ident, int_array_literal, jsonb
from plpy_anon.spec import ReleaseSpec

METHOD = "fusion"
# Numbers MDAV can average and the attacker can estimate: integers and floats, not dates.
NUMBER_KINDS = ("int", "float")


def _is_number(col) -> bool:
    return col.kind == "numeric" and catalog.NUMERIC_TYPES[col.type_name][2] in NUMBER_KINDS


def _frame(data, numeric, categorical) -> pd.DataFrame:
    """The columns read by ``read_columns`` as a DataFrame, NULL numbers as NaN."""
    frame = {}
    for col in numeric:
        d = data.columns[col.name]
        values = d.values.astype(float)
        if d.null_mask is not None:
            values[d.null_mask] = np.nan
        frame[col.name] = values
    for col in categorical:
        frame[col.name] = pd.Series(data.columns[col.name].values, dtype=object)
    return pd.DataFrame(frame)


def _source_columns(plpy, tbl, sensitive, identifier, attributes):
    """(identifier, sensitive, attribute columns, dropped names) of the source table."""
    cols = catalog.table_columns(plpy, tbl)
    for name, what in ((sensitive, "sensitive"), (identifier, "identifier")):
        if name is None:
            raise InvalidParameter(f"{what} must not be NULL",
                                   hint=f"Name the {what} column: {what} => 'column'.")
    id_col = catalog.column_named(tbl, cols, identifier)
    sens_col = catalog.column_named(tbl, cols, sensitive)
    if not _is_number(sens_col):
        raise UnsupportedType(
            f'sensitive column "{sensitive}" has type {sens_col.display_type}; the fusion attack '
            "estimates a number",
            hint="Pick an integer or floating-point column (salary, hours), or cast it in a copy "
                 "of the table.")
    if sensitive == identifier:
        raise InvalidParameter("the sensitive column cannot be the identifier",
                               hint="The identifier is kept in the release; the sensitive column is suppressed.")
    if attributes is not None:
        chosen = [catalog.column_named(tbl, cols, name) for name in attributes]
        for col in chosen:
            if not _is_number(col):
                raise UnsupportedType(
                    f'attribute "{col.name}" has type {col.display_type}; MDAV averages numbers',
                    hint="Leave it out of attributes (it is then not released).")
    else:
        # no identifier detection: only numeric columns are kept, microaggregated; the others dropped
        roles = catalog.resolve_roles(plpy, tbl, sensitive=[sensitive], identifiers=[identifier],
                                      cols=cols)
        chosen = [c for c, role in roles if role == "quasi_identifier" and _is_number(c)]
    names = {c.name for c in chosen}
    if identifier in names or sensitive in names:
        raise InvalidParameter(
            "the attributes must not include the identifier or the sensitive column",
            hint="attributes lists the numeric columns to microaggregate, e.g. ARRAY['perf_1'].")
    dropped = [c.name for c in cols if c.name not in names | {identifier}]
    return id_col, sens_col, chosen, dropped


def _read_source(plpy, tbl, id_col, sens_col, attrs):
    data = read_columns(plpy, tbl, [*attrs, sens_col], [id_col])
    if data.n_rows == 0:
        raise InsufficientData(f"table {tbl.label} is empty",
                               hint="Load rows first; a release of no rows protects nothing.")
    return _frame(data, [*attrs, sens_col], [id_col])


def _auxiliary_columns(plpy, auxiliary, auxiliary_identifier):
    """(table, numeric columns, categorical columns: its identifier first) of the auxiliary
    table the attack reads."""
    tbl = guards.table(plpy, auxiliary)
    cols = catalog.table_columns(plpy, tbl)
    key = catalog.column_named(tbl, cols, auxiliary_identifier)
    facts = [c for c in cols if c.name != key.name]
    skipped = [c.name for c in facts if c.kind is None]
    if skipped:
        plpy.notice(f"auxiliary table {tbl.label}: columns of unsupported types "
                    f"ignored: {', '.join(skipped)}")
    return tbl, [c for c in facts if c.kind == "numeric"], \
        [key] + [c for c in facts if c.kind == "categorical"]


def _read_auxiliary(plpy, tbl, numeric, categorical):
    key = categorical[0]
    data = read_columns(plpy, tbl, numeric, categorical)
    if data.n_rows == 0:
        return pd.DataFrame({key.name: pd.Series(dtype=object)})
    return _frame(data, numeric, categorical)


def _rules(rules):
    if rules is None:
        return None
    parsed = jsonb(rules)
    if not isinstance(parsed, list):
        raise InvalidParameter(
            "rules must be a JSON array of rules",
            hint='E.g. \'[{"if": {"title": "manager"}, "then": "high"}]\'::jsonb')
    return parsed


def run_scan(plpy, tbl, *, sensitive, identifier, auxiliary, attributes, auxiliary_identifier,
             **options):
    """Read both tables and run the core scan: returns (aux_tbl, scan, columns)."""
    id_col, sens_col, attrs, dropped = _source_columns(plpy, tbl, sensitive, identifier, attributes)
    if not attrs:
        raise InvalidParameter(
            f"table {tbl.label} has no numeric attribute to microaggregate",
            hint="Pass attributes => ARRAY[...] naming integer or floating-point columns.")
    aux_key = auxiliary_identifier or identifier
    aux_tbl, aux_numeric, aux_categorical = _auxiliary_columns(plpy, auxiliary, aux_key)
    # a SQL_ASCII database's texts PL/Python cannot read: refused before either table is read
    refuse_bytes_not_utf8(plpy, tbl, [c.name for c in (id_col, sens_col, *attrs)])
    refuse_bytes_not_utf8(plpy, aux_tbl, [c.name for c in (*aux_categorical, *aux_numeric)])
    table = _read_source(plpy, tbl, id_col, sens_col, attrs)
    facts = _read_auxiliary(plpy, aux_tbl, aux_numeric, aux_categorical)
    options["rules"] = _rules(options.get("rules"))
    scan = core.fusion_scan(table, facts, identifier=id_col.name, sensitive=sens_col.name,
                            attributes=[c.name for c in attrs], auxiliary_identifier=aux_key,
                            labels=(tbl.label, aux_tbl.label),
                            **options)
    if scan.n_auxiliary_unmatched:
        plpy.notice(f"{scan.n_auxiliary_unmatched} of the {scan.n_auxiliary_rows} rows of "
                    f"{aux_tbl.label} match no {identifier} of "
                    f"{tbl.label} and were ignored")
    return aux_tbl, scan, (id_col, sens_col, attrs, dropped)


def _scan_rows(scan_table: pd.DataFrame) -> list[dict]:
    """Plain Python ints, floats and bools (numpy scalars are neither JSON nor SQL values)."""
    return [{name: value.item() if hasattr(value, "item") else value for name, value in row.items()}
            for row in scan_table.to_dict(orient="records")]


def _verdict_columns(verdict) -> tuple:
    """The verdict columns ending every row of fusion_scan / fusion_scan_of (VERDICT_COLUMNS)."""
    return tuple(verdict[c] for c in core.VERDICT_COLUMNS)


@sql_entry
def fusion_scan(plpy, source, **options):
    _, scan, _ = run_scan(plpy, guards.table(plpy, source), **options)
    verdict = _verdict_columns(scan.verdict)
    return [tuple(row[c] for c in core.SCAN_COLUMNS) + verdict for row in _scan_rows(scan.table)]


def resolve(plpy, tbl, spec: ReleaseSpec) -> method.Plan:
    settings = spec.settings
    accept_unprotected = bool(settings.accept_unprotected)
    # the scan takes its SQL function's arguments as they were given (fusion_scan shares it)
    arguments = {name: spec.stored[name] for name in spec.given if name != "accept_unprotected"}
    aux_tbl, scan, (id_col, sens_col, attrs, dropped) = run_scan(plpy, tbl, **arguments)
    verdict = scan.verdict
    # Refused before anything is created: a release that no k protects is not fusion-resilient.
    core.refuse_unprotected(verdict, accept_unprotected=accept_unprotected)
    if verdict["verdict"] == core.UNPROTECTED:
        plpy.warning("publishing with accept_unprotected => true although no k protects against "
                     f"{aux_tbl.label}: {core.describe_verdict(verdict)}")
    k = scan.chosen_k()
    parameters = {
        "k": k,
        "identifier": id_col.name,
        "sensitive": sens_col.name,
        "attributes": [c.name for c in attrs],
        "released": [id_col.name] + [c.name for c in attrs],
        "dropped": dropped,
        "auxiliary": aux_tbl.label,
        "auxiliary_identifier": settings.auxiliary_identifier or id_col.name,
        "auxiliary_rows": scan.n_auxiliary_rows,
        "auxiliary_matched": scan.n_auxiliary_matched,
        "auxiliary_unmatched": scan.n_auxiliary_unmatched,
        "n_known": scan.n_known,
        "k_from": settings.k_from,
        "k_to": settings.k_to,
        "rules": _rules(settings.rules),
        **scan.settings,
        "protection_trend": dict(zip(("slope", "standard_error"),
                                     core.protection_trend(scan.table))),
        # where more k stops buying protection (the choice stays at or below it)
        "saturation": scan.saturation,
        "verdict": verdict,
        "accept_unprotected": accept_unprotected,
        "scan": _scan_rows(scan.table),
    }
    return method.Plan(
        parameters, default_name=f"{tbl.name}_fusion_k{k}",
        query=lambda release_id: release_query(plpy, tbl, id_col, attrs, release_id))


def verification_spec(plpy, release, stats) -> verify.Spec:
    """What verify.py checks: every row, and classes of identical released centroids holding at
    least k rows (the identifier is published by design; the sensitive column is not)."""
    spec = ReleaseSpec.decode(METHOD, jsonb(release["parameters"]), checked=False)
    return verify.Spec(relation=ident(plpy, release["release_schema"], release["release_name"]),
                       class_key=list(spec.settings.attributes), k=spec.promise.k,
                       expected_rows=verify.expected_rows(stats))


def release_query(plpy, tbl, id_col, attrs, release_id: int) -> str:
    aliases = [f"a{i}" for i in range(len(attrs))]
    selects = [f"s.{ident(plpy, id_col.name)}"] + [
        f"c.{alias}::float8 AS {ident(plpy, col.name)}" for alias, col in zip(aliases, attrs)]
    groups = ", ".join(f"jsonb_array_elements_text(p.classes -> '{alias}')" for alias in aliases)
    return (
        f"SELECT {', '.join(selects)}\n"
        f"FROM anon._fusion_partition({int(release_id)}) AS p\n"
        f"CROSS JOIN LATERAL unnest(p.row_ctids::tid[], p.class_ids::int4[], p.row_tableoids::oid[])\n"
        f"  AS r(row_ctid, class_id, row_tableoid)\n"
        f"JOIN {tbl.quoted(plpy)} AS s\n"
        f"  ON s.ctid = r.row_ctid AND (r.row_tableoid IS NULL OR s.tableoid = r.row_tableoid)\n"
        f"JOIN LATERAL ROWS FROM ({groups}) WITH ORDINALITY AS c({', '.join(aliases)}, class_no)\n"
        f"  ON c.class_no = r.class_id + 1\n"
        f"ORDER BY s.{ident(plpy, id_col.name)}")


@sql_entry
def fusion_scan_of(plpy, release):
    row = release_rows.find(plpy, release)
    if row["method"] != METHOD:
        raise InvalidParameter(
            f'release "{release}" was made by method {row["method"]}, not by a fusion scan',
            hint="See SELECT release_name FROM anon.releases WHERE method = 'fusion'.")
    spec = ReleaseSpec.decode(METHOD, jsonb(row["parameters"]), checked=False)
    verdict = _verdict_columns(spec.settings.verdict) + (spec.settings.accept_unprotected,)
    # a scan stored before protection_sd or saturated existed: NULL there
    return [tuple(r.get(c) for c in core.SCAN_COLUMNS) + (r["k"] == spec.promise.k,) + verdict
            for r in spec.settings.scan]


# ---------------------------------------------------------------------------- the MDAV run

@sql_entry
def partition(plpy, GD, release_id: int):
    return method.run(RELEASE_METHOD, plpy, GD, release_id)


def read(ctx: method.Run):
    plpy, settings = ctx.plpy, ctx.spec.settings
    identifier = settings.identifier
    tbl = guards.table_in_query(plpy, ctx.release["source"])
    cols = {c.name: c for c in catalog.table_columns(plpy, tbl)}
    missing = [n for n in [identifier, *settings.attributes] if n not in cols]
    if missing:
        raise InvalidParameter(
            f"column(s) {', '.join(missing)} of {tbl.label} used by this release no "
            "longer exist", hint="Recreate the release with replace => true after changing the table.")
    attrs = [cols[n] for n in settings.attributes]
    data = read_columns(plpy, tbl, attrs, [cols[identifier]])
    check_k(ctx.spec.promise.k, data.n_rows, f"table {tbl.label}")
    refuse_non_finite(tbl, data, attrs, "fusion_resilient_view")
    frame = _frame(data, attrs, [cols[identifier]])
    core.require_unique_identifier(frame[identifier], identifier, tbl.label)
    return data, frame


def fit(read_data, spec: ReleaseSpec) -> MDAV:
    _, frame = read_data
    return MDAV(k=spec.promise.k).fit(frame[list(spec.settings.attributes)])


def publish_partition(ctx: method.Run, read_data, mdav) -> tuple[dict, dict]:
    data, _ = read_data
    k = ctx.spec.promise.k
    classes = {f"a{i}": mdav.centroids_[:, i].tolist()
               for i in range(len(ctx.spec.settings.attributes))}
    sizes = mdav.group_sizes_
    metrics = {
        "n_groups": len(sizes),
        "discernibility": core.discernibility_cost(sizes, k),
        "utility_normalized": core.normalized_utility(sizes, k),
        "seconds": {"python_total": round(ctx.elapsed(), 4)},
    }
    # The release is ordered by the identifier (it is published anyway), so a row's position
    # says nothing else; row_positions (grouped by class) only fills anon.partition's field.
    positions = np.empty(data.n_rows, dtype=np.int64)
    positions[np.argsort(mdav.labels_, kind="stable")] = np.arange(data.n_rows)
    return {
        "row_ctids": data.row_ctids,
        "class_ids": int_array_literal(mdav.labels_),
        "row_positions": int_array_literal(positions),
        "classes": json.dumps(classes),
        "row_tableoids": data.row_tableoids,
    }, {"row_count": data.n_rows, "achieved_k": int(sizes.min()), "metrics": metrics}


# the contract (plpy_anon/db/method.py), registered in plpy_anon/db/methods/registry.py
RELEASE_METHOD = ReleaseMethod(METHOD, resolve=resolve, verification_spec=verification_spec,
                               read=read, fit=fit, publish=publish_partition,
                               reads_text=lambda spec: (spec.settings.identifier,
                                                        *spec.settings.attributes))
