"""The victim of the adversarial tests -- the role that builds and refreshes releases -- is played
twice: by a superuser (the DBA, a pg_cron job) and by a member of ``plpy_anon_custodian`` who is
not one (docs/operations.md, "Custodians who are not superusers"). The owner's code must not run
with the custodian's rights either: a custodian may change its own rows of the catalog and read
what it was granted (here every table, through ``pg_read_all_data``).

A custodian builds only from tables it may lock whose schema no other role may rename
(guards.guard_source): for the custodian, the table owner's schema is therefore a superuser's in
which the owner may create, and the owner grants the custodian UPDATE on its tables, so the
attacks meet the same defences as with a superuser. ``test_custodian_guard.py`` attacks that rule.
"""
from __future__ import annotations

import contextlib
import uuid

import pytest
from psycopg import sql

from tests.adversarial.test_stable_refresh_concurrency import churn, make_table, release_id, stable
from tests.db import test_custodian


class Victim:
    """as_dba(**overrides) -> a new connection as the role building and refreshing releases."""

    def __init__(self, connect, role: str | None):
        self.connect, self.role = connect, role

    @property
    def custodian(self) -> bool:
        return self.role is not None

    def __call__(self, **overrides):
        return self.connect(**({"user": self.role} if self.role else {}), **overrides)


@contextlib.contextmanager
def custodian_role(db, connect):
    """A new login role in plpy_anon_custodian, reading every table (pg_read_all_data), with CREATE
    on the database; its releases and the role are dropped afterwards."""
    role = f"cust_{uuid.uuid4().hex[:8]}"
    r = sql.Identifier(role)
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(r))
    db.execute(sql.SQL("GRANT plpy_anon_custodian, pg_read_all_data TO {}").format(r))
    db.execute(sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(sql.Identifier(db.info.dbname), r))
    try:
        yield Victim(connect, role)
    finally:
        for (name,) in db.execute("SELECT format('%%I.%%I', release_schema, release_name) FROM anon.releases "
                                  "WHERE release_owner = %s::regrole", (role,)).fetchall():
            db.execute("SELECT anon.drop_release(%s, if_exists => true)", (name,))
        db.execute(sql.SQL("REVOKE CREATE ON DATABASE {} FROM {}").format(sql.Identifier(db.info.dbname), r))
        db.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(r))
        db.execute(sql.SQL("DROP ROLE {}").format(r))


@pytest.fixture(params=["superuser", "custodian"])
def as_dba(request, db, connect):
    if request.param == "superuser":
        yield Victim(connect, None)
        return
    with custodian_role(db, connect) as victim:
        yield victim


@pytest.fixture
def custodian(db, connect):
    """The custodian victim alone."""
    with custodian_role(db, connect) as victim:
        yield victim


@pytest.fixture
def owner_for(db, as_dba):
    """owner_for(name) -> context manager yielding (role, schema identifier): a new plain login role
    whose tables live in schema ``name`` -- its own schema when the victim is a superuser; a
    superuser's schema it may create in, its tables' UPDATE granted to the victim, when the victim
    is a custodian. Drops both afterwards."""
    @contextlib.contextmanager
    def make(name: str):
        role = f"adv_{uuid.uuid4().hex[:8]}"
        schema, r = sql.Identifier(name), sql.Identifier(role)
        db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(r))
        if as_dba.custodian:
            db.execute(sql.SQL("CREATE SCHEMA {}").format(schema))
            db.execute(sql.SQL("GRANT USAGE, CREATE ON SCHEMA {} TO {}").format(schema, r))
            db.execute(sql.SQL("ALTER DEFAULT PRIVILEGES FOR ROLE {} IN SCHEMA {} GRANT UPDATE ON TABLES TO {}")
                       .format(r, schema, sql.Identifier(as_dba.role)))
        else:
            db.execute(sql.SQL("CREATE SCHEMA {} AUTHORIZATION {}").format(schema, r))
        try:
            yield role, schema
        finally:
            db.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(schema))
            db.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(r))
            db.execute(sql.SQL("DROP ROLE {}").format(r))
    return make


@pytest.fixture
def owner(db, connect):
    """A custodian with a table of its own (tests.db.test_custodian.custodian_role: (role,
    schema)), whose release the intruder attacks."""
    yield from test_custodian.custodian_role(db, connect)


@pytest.fixture
def intruder(db, connect):
    """Another custodian like ``owner``, attacking the owner's release."""
    yield from test_custodian.custodian_role(db, connect)


@pytest.fixture
def churned_stable_release(db, schema) -> tuple[str, int]:
    """(qualified name, release_id) of a flat stable release of make_table's 2,000 rows, whose
    source was churned once since."""
    make_table(db, 2000)
    release = stable(db, schema, layout="flat")
    rid = release_id(db, release)
    churn(db, 0, 2000)
    return release, rid
