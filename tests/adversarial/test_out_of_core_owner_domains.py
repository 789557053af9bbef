"""Adversarial: an out-of-core build runs none of the table owner's code.

The top of an out-of-core tree is cut by predicates ``x < <value>`` (out_of_core.Source.literal),
evaluated for every row of the source in the level and counting queries. Were the value cast to
the QI's type, a domain of the table owner's with a CHECK calling the owner's function would run
that CHECK -- once per row and cut -- with the rights of whoever builds the release: a DBA (or
pg_cron) running anon.mondrian_view or anon.refresh with a small plpy_anon.build_memory would run
the owner's function as superuser (and a custodian's build as the custodian). The payload here
makes its owner superuser when run by one; a 1,200-row table at '8kB' is cut thousands of
times."""
from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from tests.helpers import PAYLOAD_FUNCTION, notices, release_schema_of

VALUES = {"int": "i % 97", "text": "'v' || (i % 97)", "date": "date '2000-01-01' + i % 97"}


@pytest.mark.parametrize("base", list(VALUES))
def test_an_out_of_core_build_of_a_domain_quasi_identifier_runs_none_of_the_owners_code(
        db, connect, as_dba, owner_for, schema, base):
    with owner_for(f"{schema[:40]}_own") as (role, s):
        with connect(user=role) as owner:
            owner.execute(PAYLOAD_FUNCTION.format(s=s.as_string(owner), owner=sql.Literal(role).as_string(owner)))
            owner.execute(sql.SQL("CREATE DOMAIN {}.dom AS " + base + " CHECK ({}.payload())").format(s, s))
            owner.execute(sql.SQL("CREATE TABLE {}.t AS SELECT i AS id, (" + VALUES[base] + ")::{}.dom AS a, "
                                  "(i * 7919) % 1000 AS b, 's' || (i % 5) AS s "
                                  "FROM generate_series(1, 1200) i").format(s, s))
        table = sql.SQL("{}.t").format(s).as_string(db)
        with as_dba() as c:
            seen = notices(c)
            c.execute("SET plpy_anon.build_memory = '8kB'")
            c.execute("SET statement_timeout = '15s'")
            try:
                c.execute("SELECT anon.mondrian_view(%s, 4, quasi_identifiers => ARRAY['a', 'b'], "
                          "sensitive => ARRAY['s'], release_schema => %s)",
                          (table, release_schema_of(schema)))
            except psycopg.errors.QueryCanceled:
                pass        # the payload's thousands of runs took longer: it ran all the same
            runs = len([m for m in seen if m.startswith("evil")])
        superuser = db.execute("SELECT rolsuper FROM pg_roles WHERE rolname = %s", (role,)).fetchone()[0]
        if superuser:
            db.execute(sql.SQL("ALTER ROLE {} NOSUPERUSER").format(sql.Identifier(role)))
        assert (runs, superuser) == (0, False)
