"""A compact release's two relations: its storage (a materialized view of one row per class,
``<name>_classes``) and, under the release's own name, the plain view analysts read, which unfolds
each class into its rows. What the rest of the machinery needs to know about that shape lives
here, below everything that reads a release: the names, the view's query, and the check that the
view is that query.

The view is checked, not trusted: the check and the stored risk report count the storage's
classes, and analysts read the view, so a view its owner redefined (``CREATE OR REPLACE VIEW``
reading the source directly, say) would be published under the storage's figures. Recorded
digests do not settle it (the owner may clear them); its text is compared with the query
plpy_anon would write, from the release's parameters (which no owner may change), as
Break-Merge's views are.
"""
from __future__ import annotations

from plpy_anon.core.errors import AnonError
from plpy_anon.db.sqltext import ident, jsonb, run
from plpy_anon.spec import Built, Promise

#: the storage's name is the release's plus this
STORAGE_SUFFIX = "_classes"
#: the storage column of each class's row count when nothing sensitive is released
ROWS_COLUMN = "_rows"


class ChangedView(AnonError):
    """A compact release's view is not the query plpy_anon writes for it (insufficient_privilege:
    reading it would publish something the check did not count)."""

    sqlstate = "42501"


class MissingView(AnonError):
    """A compact release's view was dropped outside plpy_anon (undefined_object)."""

    sqlstate = "42704"


def storage_name_for(name: str) -> str:
    """The storage relation of a compact release named ``name``: the name, cut to leave room
    for the suffix within 63 bytes (a name already taken is refused at creation)."""
    return name.encode()[: 63 - len(STORAGE_SUFFIX)].decode(errors="ignore") + STORAGE_SUFFIX


def view_query(plpy, storage: str, released: list[tuple[str, bool]],
               types: dict[str, str] | None = None) -> str:
    """The view analysts read: one row per person, with a flat release's columns in its order
    (``released``: (name, is sensitive)), from ``storage`` (quoted, or a subquery): the class's
    QIs repeated for each element of its sensitive arrays, unnested side by side, or ``_rows``
    times when nothing sensitive is released. ``types``: sensitive columns cast to these (a flat
    release keeps its columns' modifiers)."""
    types = types or {}
    sensitive = [ident(plpy, name) for name, is_sensitive in released if is_sensitive]
    columns = ", ".join(
        f"u.{ident(plpy, name)}::{types[name]} AS {ident(plpy, name)}" if name in types
        else f"{'u' if is_sensitive else 'c'}.{ident(plpy, name)}"
        for name, is_sensitive in released)
    if sensitive:
        rows = (f"ROWS FROM ({', '.join(f'pg_catalog.unnest(c.{s})' for s in sensitive)}) "
                f"AS u({', '.join(sensitive)})")
    else:
        rows = f"pg_catalog.generate_series(1, c.{ROWS_COLUMN}) AS u(n)"
    return f"SELECT {columns} FROM {storage} AS c CROSS JOIN LATERAL {rows}"


def stored_rows(plpy, params: dict, alias: str = "s") -> str:
    """The SQL of the rows :func:`view_query` makes of one stored class (``alias``): its
    sensitive arrays unnested side by side give as many as the longest (NULLs pad the others),
    else ``_rows``."""
    lengths = [f"pg_catalog.cardinality({alias}.{ident(plpy, c)})"
               for c in Promise.of(params).sensitive or ()]
    return (f"coalesce(GREATEST({', '.join(lengths)}), 0)" if lengths
            else f"{alias}.{ident(plpy, ROWS_COLUMN)}")


def expected_view(plpy, release: dict) -> str:
    """The view query of a compact release, from its catalog parameters."""
    stored = jsonb(release["parameters"])
    built, sensitive = Built.of(stored), set(Promise.of(stored).sensitive or ())
    released = [(name, name in sensitive) for name in built.released]
    return view_query(plpy, ident(plpy, release["release_schema"], built.storage), released)


def check_view(plpy, release: dict) -> None:
    """Refuse (42501) a compact release whose view is not :func:`expected_view`: both printed by
    pg_get_viewdef under the same search_path, the expected one from a temporary view. Nothing
    for other releases. The method's ``check_relations``: publish.record calls it before the
    check and the stored report read the storage (outside the owner's security-restricted
    check, where no temporary view may be created)."""
    if not Built.of(jsonb(release["parameters"])).storage:
        return
    same = view_prints_as(plpy, release, release["release_name"], expected_view(plpy, release))
    if same is None:
        q = ident(plpy, release["release_schema"], release["release_name"])
        raise MissingView(
            f"release {q}'s view no longer exists (dropped outside plpy_anon)",
            hint=f"Drop the release with SELECT anon.drop_release({plpy.quote_literal(q)}) and create it again.")
    if not same:
        q = ident(plpy, release["release_schema"], release["release_name"])
        raise ChangedView(
            f"release {q}'s view is not the query plpy_anon wrote for it",
            detail="A compact release is checked from its storage; its view must unfold exactly "
                   "that storage, or analysts would read what no check counted.",
            hint=f"Drop the release with SELECT anon.drop_release({plpy.quote_literal(q)}) and create it again.")


def view_prints_as(plpy, release: dict, view: str, query: str) -> bool | None:
    """Whether the release's plain view ``view`` (in its schema, owned by its creator) prints
    (``pg_get_viewdef``, under the caller's search_path: pg_catalog's in plpy_anon's functions)
    exactly as a temporary view of ``query``; None when there is no such view."""
    plpy.execute(f"CREATE TEMPORARY VIEW plpy_anon_expected_view AS {query}")
    try:
        same = run(plpy, """
            SELECT pg_catalog.pg_get_viewdef('pg_temp.plpy_anon_expected_view'::pg_catalog.regclass)
                   = pg_catalog.pg_get_viewdef(c.oid) AS same
            FROM pg_catalog.pg_class c
            WHERE c.relnamespace = $1::pg_catalog.regnamespace AND c.relname = $2 AND c.relkind = 'v'
              AND c.relowner = $3::pg_catalog.regrole""",
            ["text", "text", "text"], [release["schema_oid"], view, release["release_owner"]])
    finally:
        plpy.execute("DROP VIEW pg_temp.plpy_anon_expected_view")
    return bool(same[0]["same"]) if same else None
