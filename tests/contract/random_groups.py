"""A seventh release method, kept in tests: k-anonymous random groups. The rows are shuffled
(seeded) and cut into groups of k (the last group takes the remainder); each group is released as
its ranges and value sets, exactly like a Mondrian class. Poor utility, a true k-anonymous release.

It is added the way a method outside the package would be: a parameter declaration, three hooks
on the shared Mondrian-family machinery, and two SQL functions made by sql/build.py's own
generator. ``install(db)`` runs this file's code in the connection's backend (as PL/Python code,
which only a superuser may run) and registers the method there; the contract suite then checks it
like the six others (methods.py lists it).
"""
from __future__ import annotations

import importlib.util
from dataclasses import make_dataclass
from pathlib import Path

import numpy as np

from plpy_anon import parameters as p
from plpy_anon.db import method
from plpy_anon.db.methods import mondrian_family
from plpy_anon.spec import ReleaseSpec

NAME = "random_groups"
PARTITION_FUNCTION = "anon._random_groups_partition_slices"
SURFACE = p.Surface(NAME, "random_groups_view", (
    p.SOURCE, p.K, p.QUASI_IDENTIFIERS, p.SENSITIVE, p.IDENTIFIERS,
    p.Parameter("seed", "integer", "0", help="Seed of the shuffle."), *p.RELEASE))


def resolve(plpy, tbl, spec: ReleaseSpec) -> method.Plan:
    k = spec.promise.k
    roles, qis, sens, _ = mondrian_family.resolve_release_columns(plpy, tbl, spec.promise)
    parameters = mondrian_family.base_parameters(plpy, tbl, roles, qis, sens, k, None)
    parameters["seed"] = spec.settings.seed
    return method.Plan(
        parameters, default_name=f"{tbl.name}_random_k{k}",
        query=lambda release_id: mondrian_family.release_query(
            plpy, tbl, roles, parameters, release_id, partition_function=PARTITION_FUNCTION))


# made, not declared with a class body: this file runs in the backend as a module sys.modules
# does not hold, where a dataclass cannot resolve its annotations
Settings = make_dataclass("Settings", [("seed", int, 0)], frozen=True)


def read(ctx: method.Run):
    return mondrian_family.load_release_rows(ctx.plpy, ctx.release, ctx.spec, with_target=False)


def fit(rows, spec: ReleaseSpec) -> np.ndarray:
    n, k = rows.data.n_rows, spec.promise.k
    groups = max(n // k, 1)
    labels = np.empty(n, dtype=np.int64)
    labels[np.random.default_rng(spec.settings.seed).permutation(n)] = \
        np.minimum(np.arange(n) // k, groups - 1)
    return labels


def publish(ctx: method.Run, rows, labels):
    return mondrian_family.partition_output(ctx, rows, labels, int(labels.max(initial=-1)) + 1)


RELEASE_METHOD = method.ReleaseMethod(NAME, resolve=resolve, declared=SURFACE, settings=Settings,
                                      read=read, fit=fit, publish=publish)


# ---------------------------------------------------------------------------- in the backend

def _build():
    spec = importlib.util.spec_from_file_location(
        "sql_build", Path(__file__).resolve().parents[2] / "sql" / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    return build


def install_sql() -> str:
    """The method's SQL functions, as the build writes those of the six others."""
    build = _build()
    version = build.package_version()
    public = build.Function(SURFACE.function, args=SURFACE.sql_args(), returns="text",
                            python="creation.create", positional=1, gd=True,
                            constants={"method": NAME}, comment="k-anonymous random groups (test).")
    # the run, wrapped for clean errors as the build wraps the other methods' runs (#WRAP)
    partition = build.WRAP.sub(build.clean_errors_wrapper, f"""
#WRAP {PARTITION_FUNCTION}(release_id integer) RETURNS SETOF anon.partition_slice STABLE ROWS 1
CREATE FUNCTION {PARTITION_FUNCTION}_py(release_id integer)
RETURNS SETOF anon.partition_slice LANGUAGE plpython3u STABLE ROWS 1
SET search_path = pg_catalog, pg_temp AS $$
{build.bootstrap(build.DEFAULT_VENV, version)}
from plpy_anon.db import creation
return creation.run(plpy, GD, "{NAME}", release_id)
$$;""")
    return public.sql(build.DEFAULT_VENV, version) + partition


def register_sql() -> str:
    """A DO block that runs this module's code in the backend and registers the method there."""
    build = _build()
    source = Path(__file__).read_text()
    tag = "$" + "toy_method" + "$"
    return f"""DO {tag}
{build.bootstrap(build.DEFAULT_VENV, build.package_version())}
import types
from plpy_anon.db.methods import registry
module = types.ModuleType("{NAME}")
exec(compile({source!r}, "{NAME}.py", "exec"), module.__dict__)
registry.register(module.RELEASE_METHOD)
{tag} LANGUAGE plpython3u"""


def install(db) -> None:
    db.execute(install_sql())
    db.execute(register_sql())


def uninstall(db) -> None:
    db.execute(f"DROP FUNCTION {PARTITION_FUNCTION}(integer)")
    db.execute(f"DROP FUNCTION {PARTITION_FUNCTION}_py(integer)")
    for schema in ("anon", "anon_py"):
        db.execute(f"DROP FUNCTION {schema}.{SURFACE.function}")
