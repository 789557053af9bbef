"""A new backend pays only for what its first call needs: the catalog's calls load no numerical or
SQL-parsing library, a Mondrian release loads neither scikit-learn, SciPy nor sqlglot, nor pandas
where it runs on compiled kernels. Each call
runs in a fresh connection (a new backend, as pg_cron's jobs get), and the modules it left loaded
are read from the same backend's interpreter afterwards."""
from __future__ import annotations

import pytest
from psycopg import sql

from tests.helpers import release_schema_of

HEAVY = ("numpy", "pandas", "pyarrow", "pyarrow.compute", "scipy", "sklearn", "sqlglot",
         "matplotlib", "numba", "yaml", "llvmlite.binding")

PEOPLE = """
CREATE TABLE people (id int PRIMARY KEY, age int, zip text, diagnosis text);
INSERT INTO people SELECT i, 20 + i % 50, lpad((i % 23)::text, 5, '0'), 'd' || i % 4
FROM generate_series(1, 300) i;
"""

MONDRIAN = ("SELECT anon.mondrian_view('people', k => 5, quasi_identifiers => ARRAY['age', 'zip'], "
            "sensitive => ARRAY['diagnosis'], identifiers => ARRAY['id'], release_schema => '{}')")


@pytest.fixture
def fresh(connect, db, schema):
    """fresh(query) -> the heavy modules a new backend holds after running ``query`` as its first
    call of the extension."""
    db.execute(sql.SQL("""CREATE FUNCTION {}.loaded_modules() RETURNS text[] LANGUAGE plpython3u AS $$
import sys
return sorted(m for m in {} if m in sys.modules)
$$""").format(sql.Identifier(schema), sql.SQL(repr(HEAVY))))

    def run(query: str) -> set[str]:
        with connect(options=f"-c search_path={schema},public") as conn:
            conn.execute(query)
            return set(conn.execute("SELECT loaded_modules()").fetchone()[0])
    return run


@pytest.mark.parametrize("query", [
    "SELECT * FROM anon.versions()",
    "SELECT * FROM anon.release_status()",
    "SELECT * FROM anon.column_roles('people')",
    "SELECT anon.set_column_role('people', 'zip', 'quasi_identifier')",
])
def test_a_catalog_call_in_a_new_backend_loads_no_heavy_library(fresh, db, query):
    db.execute(PEOPLE)
    assert fresh(query) == set()


def test_versions_reports_installed_components_without_loading_them(fresh, connect):
    assert fresh("SELECT * FROM anon.versions()") == set()
    with connect() as conn:
        rows = {r[0]: (r[1], r[2]) for r in conn.execute("SELECT * FROM anon.versions()").fetchall()}
    for name in ("numpy", "pandas", "scipy", "sklearn", "sqlglot"):
        version, location = rows[name]
        assert version and location.endswith(f"/{name}/__init__.py"), (name, rows[name])


#: what a Mondrian release of a small table never needs: a table below
#: mondrian_jit.COMPILED_FROM_ROWS fits on numpy (numba, which imports scipy, would cost more to
#: load than that fit), no step of the build needs pandas, and the read's one pyarrow kernel is
#: called without pyarrow.compute (which writes a wrapper for each of its ~300 kernels on import)
NOT_FOR_MONDRIAN = {"sklearn", "sqlglot", "matplotlib", "numba", "llvmlite.binding", "scipy",
                    "pandas", "pyarrow.compute"}


def test_a_small_mondrian_release_in_a_new_backend_loads_only_numpy_and_pyarrow(fresh, db, schema):
    db.execute(PEOPLE)
    assert not fresh(MONDRIAN.format(release_schema_of(schema))) & NOT_FOR_MONDRIAN
    release = f"{release_schema_of(schema)}.people_k5"
    assert not fresh(f"SELECT * FROM anon.refresh('{release}')") & NOT_FOR_MONDRIAN
    # and the release is a real one: k holds in its rows
    smallest = db.execute(sql.SQL("SELECT min(n) FROM (SELECT count(*) AS n FROM {} GROUP BY age, zip) c")
                          .format(sql.Identifier(release_schema_of(schema), "people_k5"))).fetchone()[0]
    assert smallest >= 5


def test_the_first_call_of_a_backend_still_activates_the_environment(connect):
    """The call that imports nothing heavy still puts the venv first: a later import of numpy in
    that backend comes from the venv (the same one anon.versions names)."""
    with connect() as conn:
        conn.execute("SELECT * FROM anon.release_status()").fetchall()
        location = conn.execute("SELECT location FROM anon.versions() WHERE component = 'numpy'").fetchone()[0]
        conn.execute("DO LANGUAGE plpython3u $$ import numpy $$")
        loaded = conn.execute("SELECT location FROM anon.versions() WHERE component = 'numpy'").fetchone()[0]
    assert loaded == location



def test_a_release_on_the_compiled_kernels_loads_them_without_numba_scipy_pandas_or_yaml(
        fresh, db, schema):
    """From mondrian_jit.COMPILED_FROM_ROWS rows the fit and the class literals run on the
    compiled kernels, loaded from the object file make install wrote (core.kernel_objects):
    through llvmlite, without numba nor what numba imports (scipy for BLAS, yaml for a config
    file), nor pandas."""
    from plpy_anon.core.mondrian_jit import COMPILED_FROM_ROWS
    db.execute(f"""CREATE TABLE people (id int PRIMARY KEY, age int, zip text, diagnosis text);
        INSERT INTO people SELECT i, 20 + i % 50, lpad((i % 97)::text, 5, '0'), 'd' || i % 4
        FROM generate_series(1, {COMPILED_FROM_ROWS}) i""")
    loaded = fresh(MONDRIAN.format(release_schema_of(schema)))
    assert "llvmlite.binding" in loaded
    assert not loaded & {"numba", "scipy", "yaml", "pandas", "sklearn", "sqlglot",
                         "pyarrow.compute"}
    smallest = db.execute(sql.SQL("SELECT min(n) FROM (SELECT count(*) AS n FROM {} GROUP BY age, zip) c")
                          .format(sql.Identifier(release_schema_of(schema), "people_k5"))).fetchone()[0]
    assert smallest >= 5


def test_a_stable_release_in_a_new_backend_loads_neither_pandas_scipy_sklearn_nor_sqlglot(
        fresh, db, schema):
    """A release with l and a primary key is stable by default; its creation and its refresh
    (which checks the new version against the stored one) load no scipy, nor pandas (record
    fingerprints, stored versions and the check run on numpy and pyarrow's kernels)."""
    db.execute(PEOPLE)
    stable = MONDRIAN.replace("k => 5,", "k => 5, l => 2,").format(release_schema_of(schema))
    assert not fresh(stable) & {"pandas", "scipy", "sklearn", "sqlglot", "matplotlib"}
    release, mode = db.execute("SELECT release_schema || '.' || release_name, parameters->>'refresh_mode' "
                               "FROM anon.releases WHERE release_schema = %s",
                               [release_schema_of(schema)]).fetchone()
    assert mode == "stable"
    db.execute("UPDATE people SET age = age + 1 WHERE id % 7 = 0")
    assert not fresh(f"SELECT * FROM anon.refresh('{release}')") & {"pandas", "scipy", "sklearn",
                                                                       "sqlglot"}
    # k and l hold in the refreshed rows
    k, l = db.execute(sql.SQL("SELECT min(n), min(d) FROM (SELECT count(*) AS n, count(DISTINCT diagnosis) AS d "
                              "FROM {} GROUP BY age, zip) c")
                      .format(sql.Identifier(*release.split(".")))).fetchone()
    assert k >= 5 and l >= 2
