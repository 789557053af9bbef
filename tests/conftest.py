"""Test harness: one real PostgreSQL 15 cluster per test session (pytest-postgresql), one database
with the extension installed, and one shared connection so the backend imports numpy/pandas once.

CI runs as root; tests/pg_ctl_as_postgres runs the server as the postgres user. Tests that need
a fresh backend or another role open their own connections with ``connect()``.
"""
from __future__ import annotations

import contextlib
import itertools
import shutil
import tempfile
from pathlib import Path

import psycopg
import pytest
from hypothesis import settings
from psycopg import sql
from pytest_postgresql import factories

from tests.helpers import load_python_stack, release_schema_of
from tests.runs import SLOW_RUN

# The slow run (make test-slow) gives property tests that set no count of their own more examples;
# tests/runs.py's examples() sets the counts of both runs for expensive ones.
settings.register_profile("slow", max_examples=500, deadline=None)
if SLOW_RUN:
    settings.load_profile("slow")

HERE = Path(__file__).resolve().parent
PG_CTL = str(HERE / "pg_ctl_as_postgres")
DBNAME = "anon_test"

# Settings every test cluster gets. shared_preload_libraries / cron.* make pg_cron available.
SERVER_OPTIONS = " ".join([
    "-c shared_preload_libraries=pg_cron",
    f"-c cron.database_name={DBNAME}",
    "-c cron.host=/tmp",
    "-c max_connections=50",
    "-c fsync=off",
    "-c synchronous_commit=off",
    "-c full_page_writes=off",
])

postgresql_proc = factories.postgresql_proc(
    executable=PG_CTL, port=None, unixsocketdir="/tmp", postgres_options=SERVER_OPTIONS)


@pytest.fixture(scope="session")
def pg_server(postgresql_proc):
    """Connection parameters of the session's cluster, with the extension installed in DBNAME."""
    params = {"host": postgresql_proc.host, "port": postgresql_proc.port,
              "user": postgresql_proc.user}
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(DBNAME)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DBNAME)))
    with psycopg.connect(dbname=DBNAME, autocommit=True, **params) as conn:
        conn.execute("CREATE EXTENSION plpy_anon CASCADE")
    return {**params, "dbname": DBNAME}


@pytest.fixture(scope="session")
def connect(pg_server):
    """connect(**overrides) -> a new autocommit connection to the test database."""
    def _connect(**overrides):
        return psycopg.connect(autocommit=True, **dict(pg_server, **overrides))
    return _connect


@pytest.fixture(scope="session")
def db(connect):
    """The shared superuser connection (its backend has the Python stack imported once)."""
    conn = connect()
    load_python_stack(conn)
    yield conn
    conn.close()


_schema_numbers = itertools.count()


@contextlib.contextmanager
def _fresh_schema(db, name):
    """Create schema ``name``; afterwards drop it together with every release made from its tables
    and its release schema, and reset the shared connection's search_path and build budget."""
    db.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    yield name
    if db.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        db.rollback()
    released_in = release_schema_of(name)
    releases = db.execute(
        """SELECT format('%%I.%%I', r.release_schema, r.release_name) FROM anon.releases r
           WHERE r.release_schema IN (%s, %s)
              OR r.source::oid IN (SELECT c.oid FROM pg_class c JOIN pg_namespace n
                                   ON n.oid = c.relnamespace WHERE n.nspname = %s)""",
        (name, released_in, name)).fetchall()
    for (rel,) in releases:
        db.execute("SELECT anon.drop_release(%s, if_exists => true)", (rel,))
    db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(released_in)))
    db.execute("DELETE FROM anon.release_schemas WHERE schema_name = %s", (released_in,))
    db.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))
    db.execute("RESET search_path")
    # a budget a test set on the shared connection would send later tests' builds out of core
    db.execute("RESET plpy_anon.build_memory")


def _schema_name(node_name: str) -> str:
    name = f"t{next(_schema_numbers)}_{node_name[:40]}".lower()
    return "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name)


@pytest.fixture
def schema(db, request):
    """A fresh schema for one test, first on the shared connection's search_path; dropped after
    the test together with every release made from its tables."""
    with _fresh_schema(db, _schema_name(request.node.name)) as name:
        db.execute(sql.SQL("SET search_path = {}, public").format(sql.Identifier(name)))
        yield name


@pytest.fixture(scope="module")
def module_schema(db, request):
    """A fresh schema for the data several tests of a module read (releases that take seconds to
    make), dropped with its releases after the module. It is not on the search_path: a fixture
    using it sets the path while it creates, and resets it."""
    with _fresh_schema(db, _schema_name(request.module.__name__.rpartition(".")[2])) as name:
        yield name


@pytest.fixture
def release_schema(schema):
    """The test's release schema (``release_schema_of(schema)``): it does not exist yet, so
    plpy_anon creates it with the test's first release (releases go only into schemas the
    extension created). The ``schema`` fixture drops it, with its releases, after the test."""
    return release_schema_of(schema)


def pytest_configure(config):
    # A private temp root per run: pytest prunes /tmp/pytest-of-<user>/pytest-<N> directories of
    # earlier runs, which pulls the data directory from under a cluster another run still uses.
    if not config.option.basetemp:
        config.option.basetemp = tempfile.mkdtemp(prefix="plpy_anon_pytest_")
        config._plpy_anon_basetemp = config.option.basetemp


def pytest_unconfigure(config):
    path = getattr(config, "_plpy_anon_basetemp", None)
    if path:
        shutil.rmtree(path, ignore_errors=True)
