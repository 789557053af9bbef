"""anon.risk_report: the report of any relation a caller names (table, partitioned table, view,
materialized view, release): which relation and columns to count, checked and guarded, then
``risk.compute``. Above the method registry (a release is read through its method), so that
``risk``, which every build uses to store its report, stays below the methods.
"""
from __future__ import annotations

from plpy_anon.core.errors import InvalidParameter, UnsupportedType
from plpy_anon.db import class_counts, columns, compact, guards, risk, verify
from plpy_anon.db.class_counts import orderable
from plpy_anon.db.errors import sql_entry
from plpy_anon.db.methods.registry import REGISTRY
from plpy_anon.db.release_rows import check_genuine
from plpy_anon.db.sqltext import ident, jsonb, run
from plpy_anon.spec import Built, Promise

RELEASE_QUERY = """
SELECT r.* FROM anon.releases r
JOIN pg_catalog.pg_namespace n ON n.nspname = r.release_schema AND n.oid = r.schema_oid
WHERE r.release_schema = $1 AND r.release_name = $2
"""

CAN_READ_CATALOG = """
SELECT pg_catalog.has_table_privilege('anon.releases', 'SELECT')
   AND pg_catalog.has_table_privilege('anon.column_roles', 'SELECT') AS ok
"""


def resolve(plpy, relation: str, quasi_identifiers, sensitive) -> risk.Target:
    rel = run(plpy, risk.RELATION_QUERY, ["text"], [relation])[0]
    if rel["relkind"] not in risk.READABLE_RELKINDS:
        raise UnsupportedType(
            f"{rel['schema']}.{rel['name']} is {guards.RELKIND_NAMES.get(rel['relkind'], 'not a relation with rows')}",
            hint="Pass a table, partitioned table, view, materialized view or release.")
    for arg, values in (("quasi_identifiers", quasi_identifiers), ("sensitive", sensitive)):
        if values is not None and any(v is None for v in values):
            raise InvalidParameter(f"{arg} must not contain NULL", hint=f"List column names in {arg}.")
        if values is not None and any(not isinstance(v, str) for v in values):
            raise InvalidParameter(f"{arg} must be a one-dimensional array of column names",
                                   hint=f"Pass {arg} => ARRAY['col', ...].")
    if quasi_identifiers is not None and len(quasi_identifiers) == 0:
        raise InvalidParameter("quasi_identifiers is empty: classes need at least one column",
                               hint="Pass quasi_identifiers => ARRAY['col', ...], or omit it for the "
                                    "release's own or the declared ones.")
    catalog = bool(run(plpy, CAN_READ_CATALOG)[0]["ok"])
    release = run(plpy, RELEASE_QUERY, ["text", "text"], [rel["schema"], rel["name"]]) if catalog else []
    if release:
        method = REGISTRY.get(release[0]["method"])
        spec = (verify.spec_for(plpy, release[0], None, method) if method is not None
                else verify.default_spec(plpy, release[0], None))
        target = risk.release_target(plpy, release[0], spec, quasi_identifiers, sensitive)
        if target.relation != ident(plpy, rel["schema"], rel["name"]):
            target_rel = run(plpy, risk.RELATION_QUERY, ["text"], [target.relation])[0]
            oid = int(target_rel["oid"])
        else:
            oid = int(rel["oid"])
    else:
        declared = {}
        if catalog:
            declared = columns.declared_roles(plpy, int(rel["oid"]))
        qis = (list(quasi_identifiers) if quasi_identifiers is not None
               else [c for c, r in declared.items() if r == "quasi_identifier"])
        sens = (list(sensitive) if sensitive is not None
                else [c for c, r in declared.items() if r == "sensitive"])
        if not qis:
            raise InvalidParameter(
                f"no quasi-identifiers for {rel['schema']}.{rel['name']}",
                hint="Pass quasi_identifiers => ARRAY['col', ...], or declare them with "
                     "anon.set_column_role(relation, column, 'quasi_identifier').")
        target = risk.Target(ident(plpy, rel["schema"], rel["name"]),
                        f"{risk.READABLE_RELKINDS[rel['relkind']]} {rel['schema']}.{rel['name']}",
                        qis, sens, {}, {})
        oid = int(rel["oid"])
    # the report's queries plan the relation (and what a view reads): refuse one whose planning
    # or reading runs code of a role that is not a superuser
    guards.guard_relation(plpy, int(rel["oid"]), ident(plpy, rel["schema"], rel["name"]), rel["relkind"])
    if oid != int(rel["oid"]):     # a release read through another of its relations
        # plpy_anon's own view over the release's storage, checked to be the one it built: its
        # owner is whoever created the release, who need not be a superuser
        check_genuine(plpy, release[0])
        method = REGISTRY.get(release[0]["method"])
        if method is None or method.check_relations is None:
            raise guards.UnsafeSource(
                f"{target.label} is not a relation plpy_anon builds for a release of this method",
                hint="Report the release's materialized view itself.")
        method.check_relations(plpy, release[0])      # its views are the queries plpy_anon writes
        guards.guard_relation(plpy, oid, target.relation, target_rel["relkind"], own_view=True)
    cols = {c.name: c for c in columns.relation_columns(plpy, oid)}
    if sensitive is None:      # from the catalog: a column the method does not publish (fusion)
        for s in [s for s in target.sensitive if s not in cols]:
            target.sensitive.remove(s)
            target.skipped[s] = "not applicable: this release does not publish the column"
    for name in target.qis + target.sensitive:
        if name not in cols:
            raise risk.UndefinedColumn(
                f'column "{name}" does not exist in {target.label}',
                hint=f"Columns are: {', '.join(cols)}. Names are case-sensitive as stored.")
    overlap = set(target.qis) & set(target.sensitive)
    if overlap:
        raise InvalidParameter(f"{sorted(overlap)} given both as quasi-identifier and sensitive",
                               hint="A column is either linked on (quasi-identifier) or protected "
                                    "(sensitive), not both.")
    if sensitive is None:      # columns from the catalog: report why, rather than refuse
        for s in [s for s in target.sensitive if not orderable(plpy, cols[s].display_type)]:
            target.sensitive.remove(s)
            target.skipped[s] = f"not computed: type {cols[s].display_type} has no ordering"
    for name in target.qis + target.sensitive:
        if not orderable(plpy, cols[name].display_type):
            raise UnsupportedType(
                f'column "{name}" of {target.label} has type {cols[name].display_type}, which has '
                "no ordering: its values cannot be counted into classes",
                hint="Report a view that casts it to text (or a type with an ordering).")
    target.ordered = {s: cols[s].category in risk.ORDERED_CATEGORIES for s in target.sensitive}
    if release and oid == int(rel["oid"]):
        target.stored = stored_classes(plpy, release[0], target)
    return target


#: whether the caller may read the release's view and each of these columns of its storage, and
#: whether the storage is a populated materialized view, as plpy_anon makes it: one that shows
#: the caller every row it shows the view's owner (no row security, which a table put under its
#: name might have). Columns by their number: a relation put there need not have them (a view
#: has no ctid), which is no error but a no (no row: no such relation)
CAN_READ_STORAGE = """
SELECT pg_catalog.has_table_privilege($1::pg_catalog.regclass, 'SELECT')
   AND c.relkind = 'm' AND c.relispopulated
   AND (SELECT pg_catalog.count(*) = pg_catalog.cardinality($3::pg_catalog.text[])
               AND pg_catalog.bool_and(pg_catalog.has_column_privilege(c.oid, a.attnum, 'SELECT'))
        FROM pg_catalog.pg_attribute a
        WHERE a.attrelid = c.oid AND a.attname = ANY ($3::pg_catalog.text[])
          AND NOT a.attisdropped) AS ok
FROM pg_catalog.pg_class c WHERE c.oid = pg_catalog.to_regclass($2)
"""


def stored_classes(plpy, release: dict, target: risk.Target):
    """(the view, its class_counts.Storage) when ``target`` (resolved) is a compact release's
    view counted the way its build's check counts it: from the stored classes, one row per
    class rather than the view's rows grouped (10M release rows: 18 s rather than 100 s,
    docs/risk.md), the same figures. Only where that reads nothing the caller could not select through the
    view: its QIs are stored columns and its sensitive ones the stored arrays, the view is the
    one plpy_anon wrote (compact.check_view), and the caller, whose rights the read runs with,
    may select the view and the storage's columns it reads. Else None: the view is grouped."""
    stored = class_counts.storage_for(plpy, release)
    if stored is None or stored[0] != target.relation:
        return None
    params = jsonb(release["parameters"])
    arrays = list(Promise.of(params).sensitive or ())
    scalars = [c for c in Built.of(params).released if c not in arrays]
    if not set(target.qis) <= set(scalars) or not set(target.sensitive) <= set(arrays):
        return None         # e.g. a sensitive column asked for as a QI: its array is no value
    # ctid: the storage is read a range of blocks at a time (class_counts.stored_chunk_query)
    read = list(dict.fromkeys(["ctid", *target.qis, *target.sensitive,
                               *(arrays or [compact.ROWS_COLUMN])]))
    readable = run(plpy, CAN_READ_STORAGE, ["text", "text", "text[]"],
                   [target.relation, stored[1].relation, read])
    if not readable or not readable[0]["ok"]:
        return None
    if class_counts.concurrently_refreshable(plpy, stored[1]):
        return None     # read in one query through the view (class_counts.UNIQUE_INDEX)
    try:
        with plpy.subtransaction():
            compact.check_view(plpy, release)
    except (compact.ChangedView, compact.MissingView, plpy.spiexceptions.InsufficientPrivilege,
            plpy.spiexceptions.ReadOnlySqlTransaction, plpy.spiexceptions.DuplicateTable):
        # no temporary view here (or the caller's own under its name), or the view counts what
        # the storage does not
        return None
    return stored



@sql_entry
def risk_report(plpy, relation: str, quasi_identifiers=None, sensitive=None, population=None,
                risk_threshold=0.2, recursive_c=3.0) -> list[dict]:
    target = resolve(plpy, relation, quasi_identifiers, sensitive)
    return risk.compute(plpy, target, population=population, risk_threshold=risk_threshold,
                   recursive_c=recursive_c)


@sql_entry
def class_sizes(plpy, relation: str, quasi_identifiers=None) -> list[dict]:
    """The class-size histogram of ``relation`` (its classes over the quasi-identifiers
    :func:`resolve` finds), read through the same guards as the risk report."""
    target = resolve(plpy, relation, quasi_identifiers, [])
    counts = class_counts.count(plpy, target.relation, target.qis, [],
                                target.stored[1] if target.stored else None,
                                budget=risk.report_budget(plpy, target))
    return [{"class_size": int(size), "classes": int(n)}
            for size, n in sorted(zip(counts.sizes.tolist(), counts.classes.tolist())) if n > 0]
