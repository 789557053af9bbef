"""Fixtures of the contract suite: one module-scoped schema with the shared fixture table, a
requester and a purpose (trust_view needs them), and one release per method made lazily and
shared by the read-only checks. Checks that change a source make their own table in the
per-test ``schema``."""
from __future__ import annotations

import itertools
import json

import pytest
from psycopg import sql

from tests.contract import random_groups
from tests.contract.methods import Context, create_table
from tests.helpers import release_schema_of

_names = itertools.count()


def make_role(db, prefix: str) -> str:
    name = f"contract_{prefix}_{next(_names)}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    return name


def drop_role(db, name: str) -> None:
    db.execute("DELETE FROM anon.analysts WHERE role_name = %s", (name,))
    db.execute("DELETE FROM anon.requesters WHERE role_name = %s", (name,))
    db.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
    db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


@pytest.fixture(scope="package", autouse=True)
def seventh_method(db):
    """The method kept in tests (random_groups.py), installed for the contract suite only."""
    random_groups.install(db)
    yield
    random_groups.uninstall(db)


@pytest.fixture(scope="module")
def ctx(db):
    """trust_view's requester (with its own login role) and purpose."""
    role = make_role(db, "requester")
    requester = f"contract_req_{next(_names)}"
    purpose = f"contract_purpose_{next(_names)}"
    db.execute("SELECT anon.add_requester(%s, role => %s)", (requester, role))
    db.execute("SELECT anon.define_purpose(%s, priorities => %s::jsonb)",
               (purpose, json.dumps({"age": 1, "job": 0.2})))
    yield Context(requester=requester, purpose=purpose), role
    db.execute("DELETE FROM anon.purposes WHERE purpose_name = %s", (purpose,))
    drop_role(db, role)


@pytest.fixture(scope="module")
def shared(db):
    """(schema, source table, release schema) holding the shared fixture table, once per module."""
    name = f"contract_shared_{next(_names)}"
    db.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    source = create_table(db, f"{name}.people")
    yield name, source, release_schema_of(name)
    released_in = release_schema_of(name)
    for (rel,) in db.execute(
            "SELECT format('%%I.%%I', release_schema, release_name) FROM anon.releases "
            "WHERE release_schema = %s", (released_in,)).fetchall():
        db.execute("SELECT anon.drop_release(%s, if_exists => true)", (rel,))
    db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(released_in)))
    db.execute("DELETE FROM anon.release_schemas WHERE schema_name = %s", (released_in,))
    db.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture(scope="module")
def released(db, shared, ctx):
    """released(method) -> qualified name of the method's release of the shared table (k = 5,
    l = 2 where offered), made on first use."""
    _, source, release_schema = shared
    made: dict[str, str] = {}

    def get(method):
        if method.name not in made:
            made[method.name] = method.create(
                db, ctx[0], source, K, L if method.l_arg else None,
                release_name=f"{method.name}_shared", release_schema=release_schema)
        return made[method.name]
    return get


K, L = 5, 2
