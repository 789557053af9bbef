"""8 writers and 2 analysts on shared releases for 60 s (PLPY_ANON_LOAD_SECONDS shortens it):
no deadlock, no unclean error, and afterwards every release is whole, readable and k-anonymous
(issue 27, point 5; the 10-minute run is in make bench)."""
from __future__ import annotations

import itertools
import os

import pytest
from psycopg import sql

from tests.helpers import class_sizes
from tests.soak import ROWS, Soak, setup

SECONDS = float(os.environ.get("PLPY_ANON_LOAD_SECONDS", "60"))
_roles = itertools.count()


@pytest.fixture
def analyst(db):
    role = f"soak_analyst_{next(_roles)}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    db.execute("SELECT anon.grant_analyst(%s)", (role,))
    yield role
    db.execute("SELECT anon.revoke_analyst(%s)", (role,))
    db.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
    db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@pytest.mark.slow
def test_writers_and_analysts_on_shared_releases_never_deadlock(db, connect, schema, release_schema, analyst):
    setup(db, schema)
    soak = Soak(connect, schema, release_schema, analyst).run(SECONDS)
    print("\nsoak:", soak.summary())
    for failure in soak.failures[:10]:
        print("  ", failure)
    assert soak.by_sqlstate().get("40P01", 0) == 0
    assert soak.failures == []
    for op in ("create", "replace", "refresh", "refresh_matview", "drop"):
        assert soak.ops[op, "ok"] > 0, (op, soak.ops)
    # afterwards: catalog and relations agree, no leftovers, every release whole and k-anonymous
    catalog = {n for (n,) in db.execute("SELECT release_name::text FROM anon.releases WHERE release_schema = %s",
                                        (release_schema,))}
    relations = {n for (n,) in db.execute("SELECT c.relname::text FROM pg_class c JOIN pg_namespace n "
                                          "ON n.oid = c.relnamespace WHERE n.nspname = %s", (release_schema,))}
    assert catalog == relations
    for name in catalog:
        rel = sql.Identifier(release_schema, name).as_string(db)
        assert db.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == ROWS
        assert min(class_sizes(db, rel, ["age", "sex", "zip"])) >= 5
