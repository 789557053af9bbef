"""Creating a release: the one entry point behind every method's SQL function (anon.mondrian_view,
anon.break_merge, ...; sql/build.py generates them from the methods' declarations in sql/functions).

The arguments are decoded once into the release's specification (``ReleaseMethod.spec_of``:
plpy_anon.spec), and the method resolves what it means for the table (``ReleaseMethod.resolve``
-> ``Plan``); the rest is the same for all: the source checked, the declared constraints, the
name, the catalog row, the relations built and verified (publish.py), in the caller's transaction.
"""
from __future__ import annotations

from plpy_anon.db import guards, out_of_core, publish, release_rows
from plpy_anon.db.errors import sql_entry
from plpy_anon.db.method import run as run_method
from plpy_anon.db.methods.registry import REGISTRY

RELEASE_ARGUMENTS = ("release_name", "release_schema", "replace")


@sql_entry
def create(plpy, source, *, method: str, GD=None, **arguments) -> str:
    """Create a release of ``source`` by ``method`` with its SQL function's ``arguments``;
    returns the release's qualified name."""
    release_method = REGISTRY[method]
    release_name, release_schema, replace = (arguments.pop(n) for n in RELEASE_ARGUMENTS)
    tbl = guards.table(plpy, source)
    spec = release_method.spec_of(release_method.validate(**arguments))
    plan = release_method.resolve(plpy, tbl, spec)
    name = release_name or plan.default_name
    parameters = plan.parameters
    if plan.objects is not None:
        parameters = {**parameters, **plan.objects(name)}
    common = {"source": tbl, "method": release_method, "release_schema": release_schema,
                  "release_name": name, "replace": replace, "parameters": parameters,
                  "write_settings": lambda release_id: out_of_core.write_settings(
                      plpy, release_method, release_id)}
    if plan.build is None:
        row = publish.create_view_release(plpy, GD, query=plan.query, **common)
    else:
        row = publish.create_release(
            plpy, GD, build=lambda release_id, qualified: plan.build(release_id, qualified, name),
            **common)
    if plan.created is not None:
        plan.created(row)
    return release_rows.qualified_name(plpy, row)


@sql_entry
def run(plpy, GD, method: str, release_id: int):
    """The run behind a release's query, for a method registered by name (registry.register)."""
    return run_method(REGISTRY[method], plpy, GD, release_id)
