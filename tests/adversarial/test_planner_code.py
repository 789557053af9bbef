"""Adversarial: code the PLANNER runs on a source table, with the rights of whoever plans.

The expressions and predicates of a table's indexes, the CHECK constraints of inheritance
children (constraint exclusion) and extended-statistics expressions are constant-folded when a
query on the table is first planned: an IMMUTABLE function of the table owner's with constant
arguments then runs as the DBA who builds or refreshes a release (an independent review made the
owner superuser through ``CREATE INDEX ON t (age) WHERE owner_function()``, with mondrian_view,
refresh, a pg_cron refresh, detect_identifiers and risk_report). plpy_anon refuses such sources
(42501) before anything plans a query on them, and locks the table against new ones during a
build or refresh. Each test FAILS while the hole is open.
"""
from __future__ import annotations

import threading

import psycopg
import pytest
from psycopg import sql

from tests.helpers import PAYLOAD_FUNCTION, notices
from tests.helpers import assert_payload_not_run as assert_not_run
from tests.waits import wait_until

PAYLOAD = PAYLOAD_FUNCTION + """
CREATE FUNCTION {s}.boom() RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $f$
BEGIN RETURN {s}.payload(); END $f$;
CREATE FUNCTION {s}.shift(int) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $f$
BEGIN PERFORM {s}.payload(); RETURN $1; END $f$;
CREATE TABLE {s}.t (id int PRIMARY KEY, age int, zip text, dx text);
INSERT INTO {s}.t SELECT g, 20 + g % 40, 'z' || g % 5, 'd' || g % 4 FROM generate_series(1, 300) g;
"""

# what the owner adds to the table; each makes the planner call the owner's function
PLANTED = {
    "partial index": "CREATE INDEX ON {s}.t (age) WHERE {s}.boom()",
    "expression index": "CREATE INDEX ON {s}.t ({s}.shift(age + 0 * {s}.shift(1)))",
    "child CHECK": ("CREATE TABLE {s}.c (CHECK ({s}.boom())) INHERITS ({s}.t); "
                    "INSERT INTO {s}.c VALUES (1000, 30, 'z1', 'd1')"),
    "statistics": "CREATE STATISTICS {s}.st ON ({s}.shift(age)), zip FROM {s}.t",
}


@pytest.fixture
def owner(db, connect, schema, owner_for):
    """A plain login role owning a schema with its table t (300 rows) and IMMUTABLE functions
    whose body runs the payload. Yields (role, quoted schema, a connection as the role)."""
    with owner_for(f"{schema}_own") as (role, own), connect(user=role) as a:
        s = own.as_string(a)
        a.execute(PAYLOAD.format(s=s, owner=sql.Literal(role).as_string(a)))
        yield role, s, a


def build(dba, s, release_schema, **extra):
    args = "".join(f", {k} => {v}" for k, v in extra.items())
    return dba.execute(f"SELECT anon.mondrian_view('{s}.t', k => 5, quasi_identifiers => "
                       f"'{{age,zip}}', sensitive => '{{dx}}', release_schema => %s{args})",
                       (release_schema,)).fetchone()[0]


@pytest.mark.parametrize("planted", list(PLANTED))
def test_a_source_whose_planning_runs_the_owners_code_is_refused(as_dba, db, connect, owner, release_schema,
                                                                 planted):
    role, s, a = owner
    db.execute(f"SELECT anon.set_column_role('{s}.t', 'id', 'identifier')")
    a.execute(PLANTED[planted].format(s=s))
    with as_dba() as dba:                                   # a fresh backend: nothing cached
        seen = notices(dba)
        with pytest.raises(psycopg.errors.InsufficientPrivilege,
                           match="would run functions not owned by a superuser") as error:
            build(dba, s, release_schema)
        assert f"{s.strip(chr(34))}.boom()" in error.value.diag.message_primary \
            or f"{s.strip(chr(34))}.shift(integer)" in error.value.diag.message_primary
        assert "ALTER FUNCTION" in error.value.diag.message_hint
        for call in (f"SELECT * FROM anon.detect_identifiers('{s}.t')",
                     f"SELECT * FROM anon.column_roles('{s}.t')",
                     f"SELECT * FROM anon.risk_report('{s}.t', quasi_identifiers => '{{age,zip}}')"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                dba.execute(call)
    assert_not_run(db, role, seen)
    assert db.execute("SELECT count(*) FROM anon.releases WHERE release_schema = %s",
                      (release_schema,)).fetchone()[0] == 0


def test_a_refresh_after_the_owner_planted_code_is_refused_and_keeps_the_release(as_dba, 
        db, connect, owner, release_schema):
    role, s, a = owner
    with as_dba() as dba:
        db.execute(f"SELECT anon.set_column_role('{s}.t', 'id', 'identifier')")
        name = build(dba, s, release_schema)
    a.execute(PLANTED["partial index"].format(s=s))
    with as_dba() as dba:                                   # the DBA, or the pg_cron job
        seen = notices(dba)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            dba.execute("SELECT anon.refresh(%s)", (name,))
        dba.execute("SELECT anon.refresh_all()")         # records the failure, refreshes nothing
        assert dba.execute(f"SELECT count(*) FROM {name}").fetchone()[0] == 300
        error = dba.execute("SELECT last_error FROM anon.releases WHERE format('%%I.%%I', "
                            "release_schema, release_name) = %s", (name,)).fetchone()[0]
        assert error and "not owned by a superuser" in error
    assert_not_run(db, role, seen)


def test_the_owner_cannot_plant_code_while_a_build_runs(as_dba, db, connect, owner, release_schema):
    """The build locks the table (SHARE UPDATE EXCLUSIVE) until it commits: an index created
    meanwhile would be planned, and run, by the build's later queries. And it share-locks the
    schema's catalog row: later queries find the table by the schema's name, and ALTER SCHEMA
    RENAME locks no table (the sixth review swapped two schemas mid-call, as an owner with CREATE
    on the database). Reads and writes go on."""
    role, s, a = owner
    db.execute(sql.SQL("GRANT CREATE ON DATABASE anon_test TO {}").format(sql.Identifier(role)))
    renamed = f"{s.strip(chr(34))[:40]}_x"
    with as_dba() as dba:
        db.execute(f"SELECT anon.set_column_role('{s}.t', 'id', 'identifier')")
        dba.autocommit = False
        build(dba, s, release_schema)                         # transaction still open
        a.execute("SET lock_timeout = '300ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            a.execute(PLANTED["partial index"].format(s=s))
        # a custodian's source lives in a schema only it or a superuser may rename
        refused = psycopg.errors.InsufficientPrivilege if as_dba.custodian else psycopg.errors.LockNotAvailable
        with pytest.raises(refused):
            a.execute(f"ALTER SCHEMA {s} RENAME TO {renamed}")
        assert a.execute(f"SELECT count(*) FROM {s}.t").fetchone()[0] == 300
        a.execute(f"INSERT INTO {s}.t VALUES (301, 40, 'z1', 'd1')")
        dba.commit()
    assert db.execute("SELECT rolsuper FROM pg_roles WHERE rolname = %s", (role,)).fetchone()[0] is False


def test_superuser_functions_in_indexes_are_fine(as_dba, db, connect, owner, release_schema):
    """Built-in and superuser-owned functions are the server's own: such sources release."""
    _role, s, a = owner
    a.execute(f"CREATE INDEX ON {s}.t (lower(zip)) WHERE age > 30")
    db.execute(f"CREATE FUNCTION {s}.trusted(int) RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT $1'")
    a.execute(f"CREATE INDEX ON {s}.t ({s}.trusted(age))")
    with as_dba() as dba:
        db.execute(f"SELECT anon.set_column_role('{s}.t', 'id', 'identifier')")
        name = build(dba, s, release_schema)
        assert dba.execute(f"SELECT count(*) FROM {name}").fetchone()[0] == 300
        dba.execute("SELECT anon.refresh(%s)", (name,))


def test_a_partition_key_calling_the_owners_code_is_refused_even_when_added_later(as_dba, 
        db, connect, owner, release_schema):
    """A partition key is folded when it is loaded, like an index predicate (the second review's
    bypass). Here the owner adds, after the release, a sub-partition whose key calls its code:
    the next refresh must refuse, not run it."""
    role, s, a = owner
    a.execute(f"CREATE TABLE {s}.p (id int, age int, zip text, dx text) PARTITION BY RANGE (age); "
              f"CREATE TABLE {s}.p1 PARTITION OF {s}.p FOR VALUES FROM (0) TO (40); "
              f"INSERT INTO {s}.p SELECT g, g % 40, 'z' || g % 5, 'd' || g % 4 "
              "FROM generate_series(1, 200) g")
    with as_dba() as dba:
        db.execute(f"SELECT anon.set_column_role('{s}.p', 'id', 'identifier')")
        name = dba.execute(f"SELECT anon.mondrian_view('{s}.p', k => 5, quasi_identifiers => "
                           "'{age,zip}', sensitive => '{dx}', release_schema => %s)",
                           (release_schema,)).fetchone()[0]
    a.execute(f"CREATE TABLE {s}.p2 PARTITION OF {s}.p FOR VALUES FROM (40) TO (100) "
              f"PARTITION BY RANGE (({s}.shift(age))); "
              f"CREATE TABLE {s}.p21 PARTITION OF {s}.p2 FOR VALUES FROM (40) TO (100)")
    with as_dba() as dba:
        seen = notices(dba)
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="the partition key of"):
            dba.execute("SELECT anon.refresh(%s)", (name,))
        assert dba.execute(f"SELECT count(*) FROM {name}").fetchone()[0] == 200
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            dba.execute(f"SELECT * FROM anon.risk_report('{s}.p', quasi_identifiers => '{{age,zip}}')")
    assert_not_run(db, role, seen)


RACED_CALLS = [
    "SELECT count(*) FROM anon.detect_identifiers('{s}.t')",
    "SELECT count(*) FROM anon.risk_report('{s}.t', quasi_identifiers => '{{age,zip}}')",
    "SELECT anon.mondrian_view('{s}.t', k => 5, release_schema => '{r}')",
]


def waiting(db, n: int) -> None:
    """Until ``n`` sessions wait for a table's lock."""
    wait_until(lambda: db.execute("SELECT count(*) FROM pg_locks WHERE NOT granted "
                                  "AND locktype = 'relation'").fetchone()[0] >= n,
               f"{n} sessions waiting for a table")


def race(db, as_dba, owner, release_schema, call, planted):
    """The owner runs ``planted`` in a transaction that also holds the table ACCESS EXCLUSIVE;
    the DBA's ``call`` starts, waits for the table, and goes on once the owner commits. Returns
    the call's result ("ran" or the error) and the NOTICEs it saw."""
    _role, s, a = owner
    db.execute(f"SELECT anon.set_column_role('{s}.t', 'id', 'identifier')")
    a.autocommit = False
    a.execute(f"LOCK TABLE {s}.t IN ACCESS EXCLUSIVE MODE")
    a.execute(planted.format(s=s))
    outcome = {}

    def dba_call():
        with as_dba() as dba:
            seen = notices(dba)
            try:
                dba.execute(call.format(s=s, r=release_schema)).fetchall()
                outcome["result"] = "ran"
            except psycopg.Error as exc:
                outcome["result"] = exc
            outcome["seen"] = seen

    worker = threading.Thread(target=dba_call)
    worker.start()
    waiting(db, 1)                                        # the call must be waiting for the table
    a.commit()
    worker.join(60)
    return outcome["result"], outcome["seen"]


@pytest.mark.parametrize("call", RACED_CALLS)
def test_code_planted_while_the_call_waits_for_the_table_is_refused(as_dba, db, owner, release_schema,
                                                                    call):
    """The third review's race: the owner creates the index in a transaction that also holds the
    table; the call's catalog check does not see it yet, waits for the table, and would plan it
    once the owner commits. The call must lock first and check once the lock is granted."""
    result, seen = race(db, as_dba, owner, release_schema, call, PLANTED["partial index"])
    assert isinstance(result, psycopg.errors.InsufficientPrivilege), result
    assert_not_run(db, owner[0], seen)


SWAPS = {
    # the name now means another table, which carries the owner's index
    "renamed and replaced": ("ALTER TABLE {s}.t RENAME TO t_old; "
                             "CREATE TABLE {s}.t (LIKE {s}.t_old INCLUDING ALL); "
                             "INSERT INTO {s}.t SELECT * FROM {s}.t_old; "
                             "CREATE INDEX ON {s}.t (age) WHERE {s}.boom()"),
    # the same oid, now a view whose query runs the owner's code
    "turned into a view": ("TRUNCATE {s}.t; "
                           "CREATE RULE \"_RETURN\" AS ON SELECT TO {s}.t DO INSTEAD "
                           "SELECT g AS id, 20 + g % 40 AS age, 'z' || g % 5 AS zip, 'd' || g % 4 AS dx "
                           "FROM generate_series(1, 300) g WHERE {s}.payload()"),
}


@pytest.mark.parametrize("swap", list(SWAPS))
@pytest.mark.parametrize("call", RACED_CALLS)
def test_a_table_swapped_while_the_call_waits_is_refused(as_dba, db, owner, release_schema, call, swap):
    """The fourth review: LOCK TABLE takes a name, and while the call waited the owner gave the
    name to another table, or turned the table into a view. The call must see that once locked
    (55000), and run nothing of the owner's."""
    role, s, a = owner
    if swap == "turned into a view":          # a table with indexes cannot become a view
        a.execute(f"ALTER TABLE {s}.t DROP CONSTRAINT t_pkey")
        a.execute(f"VACUUM {s}.t")             # clears relhasindex, which CREATE RULE refuses
    result, seen = race(db, as_dba, owner, release_schema, call, SWAPS[swap])
    assert isinstance(result, psycopg.errors.ObjectNotInPrerequisiteState), result
    assert "while this call waited for it" in result.diag.message_primary
    assert_not_run(db, role, seen)


def test_the_guard_verifies_the_name_its_caller_will_read(db, owner):
    """The fifth review swapped two tables' names between the caller's read of the source's name
    and the guard's own: the guard locked and checked one table, the reads went to the other.
    The guard now locks the caller's name and refuses it unless it still means the oid checked."""
    _role, s, a = owner
    a.execute(f"CREATE TABLE {s}.trap (LIKE {s}.t)")
    seen = []
    db.add_notice_handler(lambda d: seen.append(d.message_primary))
    db.execute(f"""DO $$
from plpy_anon.db import guards
table, trap = '''{s}.t''', '''{s}.trap'''
oid = plpy.execute("SELECT to_regclass(%s)::oid AS o" % plpy.quote_literal(table))[0]["o"]
try:
    guards.guard_source(plpy, oid, trap)
    plpy.notice("accepted")
except guards.SourceChanged as exc:
    plpy.notice("refused: " + str(exc))
guards.guard_source(plpy, oid, table)
plpy.notice("its own name: accepted")
$$ LANGUAGE plpython3u""")
    assert seen[0].startswith("refused: table ") and "renamed" in seen[0], seen
    assert seen[1] == "its own name: accepted", seen


def test_foreign_partitions_are_refused(as_dba, db, connect, owner, release_schema):
    """A foreign partition is read on another server with its user mapping's rights (the fifth
    review: postgres_fdw logs in as the DBA when the DBA is a superuser, and the owner's remote
    view ran as postgres). plpy_anon refuses such trees; file_fdw stands in for any wrapper."""
    if not db.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'file_fdw'").fetchone():
        pytest.skip("file_fdw is not installed")
    _role, s, a = owner
    a.execute(f"CREATE TABLE {s}.p (id int, age int, zip text, dx text) PARTITION BY RANGE (age); "
              f"CREATE TABLE {s}.p1 PARTITION OF {s}.p FOR VALUES FROM (0) TO (40); "
              f"INSERT INTO {s}.p SELECT g, g % 40, 'z' || g % 5, 'd' || g % 4 "
              "FROM generate_series(1, 200) g")
    db.execute("CREATE EXTENSION IF NOT EXISTS file_fdw")
    server = f"{s.strip(chr(34))}_files"
    db.execute(f'CREATE SERVER "{server}" FOREIGN DATA WRAPPER file_fdw')
    try:
        db.execute(f'CREATE FOREIGN TABLE {s}.pf PARTITION OF {s}.p FOR VALUES FROM (40) TO (100) '
                   f'SERVER "{server}" OPTIONS (filename \'/dev/null\')')
        with as_dba() as dba:
            for call in (f"SELECT count(*) FROM anon.detect_identifiers('{s}.p')",
                         f"SELECT anon.set_column_role('{s}.p', 'id', 'identifier')",
                         f"SELECT count(*) FROM anon.risk_report('{s}.p', quasi_identifiers => '{{age,zip}}')"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege, match="foreign partitions"):
                    dba.execute(call)
    finally:
        db.execute(f"DROP FOREIGN TABLE IF EXISTS {s}.pf")
        db.execute(f'DROP SERVER "{server}"')


def test_a_source_renamed_between_its_lookup_and_its_guard_is_refused(db, owner):
    """The fifth review's swap, replayed inside one call: ``guards.table`` reads the source's
    name, then (here, through a wrapper of the guard) the owner's two tables trade names, then
    the guard runs. The Table's later reads would go by the name read first, so that name must
    be the one locked and verified."""
    _role, s, a = owner
    a.execute(f"CREATE TABLE {s}.trap (LIKE {s}.t)")
    seen = []
    db.add_notice_handler(lambda d: seen.append(d.message_primary))
    db.execute(f"""DO $$
from plpy_anon.db import guards
guard = guards.guard_source
def swapped_first(plpy, oid, name=None):
    plpy.execute('''ALTER TABLE {s}.t RENAME TO t_clean''')
    plpy.execute('''ALTER TABLE {s}.trap RENAME TO t''')
    return guard(plpy, oid, name)
guards.guard_source = swapped_first
try:
    tbl = guards.table(plpy, '''{s}.t''')
    plpy.notice("accepted " + tbl.label)
except guards.SourceChanged as exc:
    plpy.notice("refused: " + str(exc))
finally:
    guards.guard_source = guard
$$ LANGUAGE plpython3u""")
    assert seen and seen[-1].startswith("refused: table "), seen


REPORT = "SELECT count(*) FROM anon.risk_report('{rel}', quasi_identifiers => '{{age,zip}}')"


def assert_reports_refused(db, as_dba, role, relations, match):
    """Each of ``relations`` reported by the DBA in a fresh backend: refused, nothing of the
    owner's run."""
    with as_dba() as dba:
        seen = notices(dba)
        for rel in relations:
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match=match):
                dba.execute(REPORT.format(rel=rel))
    assert_not_run(db, role, seen)


@pytest.mark.parametrize("depth", [1, 2])
def test_a_report_on_the_dbas_view_over_the_owners_table_is_refused(as_dba, db, connect, owner, schema, depth):
    """A seventh review: the guard ran only when the relation reported was a table. The DBA's own
    view, calling no function, over the owner's table with a planted index: planning the view
    planned the table, and the owner became superuser. A view reading that view, too."""
    role, s, a = owner
    a.execute(PLANTED["partial index"].format(s=s))
    db.execute(f"CREATE VIEW {schema}.v1 AS SELECT age, zip, dx FROM {s}.t")
    db.execute(f"CREATE VIEW {schema}.v2 AS SELECT * FROM {schema}.v1 WHERE age > 0")
    assert_reports_refused(db, as_dba, role, [f"{schema}.v{depth}"], r"boom\(\)")


def test_a_report_on_a_view_calling_the_owners_function_is_refused(as_dba, db, connect, owner, schema):
    """Reading a view runs the functions it calls with the reader's rights: the report refuses a
    view, even the DBA's own, whose rules call a function no superuser owns (it used to be a
    documented limit)."""
    role, s, a = owner
    a.execute(f"GRANT USAGE ON SCHEMA {s} TO PUBLIC")
    db.execute(f"CREATE VIEW {schema}.calls AS SELECT {s}.shift(age) AS age, zip, dx FROM {s}.t")
    assert_reports_refused(db, as_dba, role, [f"{schema}.calls"], r"function .*shift\(integer\)")


# views of the owner's that run its code when read, in ways no catalog walk of the view sees
# (an eighth review made the owner superuser with each, through anon.risk_report)
OWNER_VIEWS = {
    "plain": "CREATE VIEW {s}.v AS SELECT age, zip, dx FROM {s}.t",
    "domain CHECK": ("CREATE DOMAIN {s}.checked AS int CHECK ({s}.boom()); "
                     "CREATE VIEW {s}.v AS SELECT age::{s}.checked AS age, zip, dx FROM {s}.t"),
    "SQL text": ("CREATE VIEW {s}.v AS SELECT age, zip, dx FROM {s}.t WHERE length(pg_catalog."
                 "query_to_xml('SELECT {s}.payload()', false, false, '')::text) > 0"),
    "row security": ("CREATE TABLE {s}.r AS SELECT * FROM {s}.t; ALTER TABLE {s}.r ENABLE ROW LEVEL "
                     "SECURITY; ALTER TABLE {s}.r FORCE ROW LEVEL SECURITY; CREATE POLICY p ON {s}.r "
                     "USING ({s}.payload()); CREATE VIEW {s}.v AS SELECT age, zip, dx FROM {s}.r"),
}


@pytest.mark.parametrize("view", list(OWNER_VIEWS))
def test_a_report_on_another_roles_view_is_refused(as_dba, db, connect, owner, schema, view):
    """A view is code its owner wrote, run as its reader: the report refuses views (read
    directly or through the DBA's own view) owned by a role that is neither a superuser nor the
    caller."""
    role, s, a = owner
    a.execute(OWNER_VIEWS[view].format(s=s))
    a.execute(f"GRANT USAGE ON SCHEMA {s} TO PUBLIC; GRANT SELECT ON {s}.v TO PUBLIC")
    db.execute(f"CREATE VIEW {schema}.over AS SELECT * FROM {s}.v")
    assert_reports_refused(db, as_dba, role, [f"{s}.v", f"{schema}.over"],
                           f"neither superusers nor you.*owned by {role}")


# the DBA's own views that ran the owner's code (a ninth review made the owner superuser with
# each): a cast to the owner's domain, a range type whose subtype_diff the planner calls to
# estimate &&, and a superuser's function whose body reads the owner's table with a planted
# partial index (no check follows a function's body)
# the owner's range type, whose subtype_diff ANALYZE and the planner's estimates call, on t
RANGE_COLUMN = (
    "CREATE FUNCTION {s}.diff(float8, float8) RETURNS float8 LANGUAGE plpgsql IMMUTABLE AS "
    "$f$ BEGIN PERFORM {s}.payload(); RETURN $1 - $2; END $f$; "
    "CREATE TYPE {s}.span AS RANGE (subtype = float8, subtype_diff = {s}.diff); "
    "ALTER TABLE {s}.t ADD COLUMN stay {s}.span; UPDATE {s}.t SET stay = {s}.span(age, age + 1); "
    "ANALYZE {s}.t")

DBA_VIEWS = {
    "domain cast": ("CREATE DOMAIN {s}.label AS text CHECK ({s}.boom())",
                    "SELECT age, coalesce(zip, 'x'::{s}.label) AS zip, dx FROM {s}.t"),
    "range subtype_diff": (RANGE_COLUMN, "SELECT age, zip, dx FROM {s}.t WHERE stay && '[10,20)'::{s}.span"),
    "function body": ("CREATE INDEX ON {s}.t (age) WHERE {s}.boom()",
                      "SELECT age, zip, dx FROM {schema}.rows_of_t()"),
    # a tenth review: a filter on the range column itself (no range constant to see), SQL text
    # naming the owner's table, and the owner's operator whose negator is the owner's code
    "range element filter": (RANGE_COLUMN, "SELECT age, zip, dx FROM {s}.t WHERE stay @> 15.0::float8"),
    "SQL text": ("CREATE INDEX ON {s}.t (age) WHERE {s}.boom()",
                 ("SELECT length(pg_catalog.query_to_xml('SELECT age FROM {s}.t', false, false, "
                  "'')::text) AS age, 'z1'::text AS zip, 'd1'::text AS dx")),
    "operator negator": (
        ("CREATE FUNCTION {s}.ne(text, text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS "
         "$f$ BEGIN PERFORM {s}.payload(); RETURN $1 <> $2; END $f$; "
         "CREATE OPERATOR {s}.<> (LEFTARG = text, RIGHTARG = text, FUNCTION = {s}.ne); "
         "CREATE OPERATOR {s}.= (LEFTARG = text, RIGHTARG = text, FUNCTION = pg_catalog.texteq, "
         "NEGATOR = OPERATOR({s}.<>))"),
        "SELECT age, zip, dx FROM {s}.t WHERE NOT (zip OPERATOR({s}.=) 'z1')"),
}


@pytest.mark.parametrize("view", list(DBA_VIEWS))
def test_a_report_on_the_dbas_view_using_the_owners_types_or_any_function_is_refused(as_dba, 
        db, connect, owner, schema, view):
    role, s, a = owner
    planted, query = DBA_VIEWS[view]
    a.execute(planted.format(s=s))
    a.execute(f"GRANT USAGE ON SCHEMA {s} TO PUBLIC")
    db.execute(f"CREATE FUNCTION {schema}.rows_of_t() RETURNS SETOF {s}.t LANGUAGE sql "
               f"AS 'SELECT * FROM {s}.t'")
    db.execute(f"CREATE VIEW {schema}.dv AS {query.format(s=s, schema=schema)}")
    assert_reports_refused(db, as_dba, role, [f"{schema}.dv"],
                           "outside PostgreSQL's built-ins|range types whose functions")


def test_a_release_keeping_a_column_of_the_owners_range_type_is_refused(as_dba, db, connect, owner,
                                                                         release_schema):
    """A tenth review kept a column of the owner's range type as a sensitive column: the release
    is a materialized view owned by the DBA, and autovacuum's ANALYZE of it ran the range's
    subtype_diff as the DBA (the owner became superuser seconds after the build)."""
    role, s, a = owner
    a.execute(RANGE_COLUMN.format(s=s))
    with as_dba() as dba:
        seen = notices(dba)
        db.execute(f"SELECT anon.set_column_role('{s}.t', 'id', 'identifier')")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match='column "stay"'):
            dba.execute(f"SELECT anon.mondrian_view('{s}.t', k => 5, quasi_identifiers => "
                        "'{age,zip}', sensitive => '{dx,stay}', release_schema => %s)",
                        (release_schema,))
        # not kept, it is no obstacle
        dba.execute(f"SELECT anon.mondrian_view('{s}.t', k => 5, quasi_identifiers => "
                    "'{age,zip}', sensitive => '{dx}', release_schema => %s)", (release_schema,))
    assert_not_run(db, role, seen)


def test_a_report_on_clean_views_and_materialized_views_still_works(db, owner, schema):
    _role, s, _a = owner
    db.execute(f"CREATE VIEW {schema}.v AS SELECT age, zip, dx FROM {s}.t WHERE age > 25")
    db.execute(f"CREATE MATERIALIZED VIEW {schema}.m AS SELECT age, zip, dx FROM {s}.t")
    for rel in (f"{schema}.v", f"{schema}.m"):
        got = db.execute(f"SELECT value FROM anon.risk_report('{rel}', quasi_identifiers => "
                         "'{age,zip}') WHERE measure = 'rows'").fetchone()[0]
        assert 0 < float(got) == db.execute(f"SELECT count(*) FROM {rel}").fetchone()[0]


def test_a_report_on_the_owners_materialized_view_with_planted_code_is_refused(as_dba, db, connect, owner):
    role, s, a = owner
    a.execute(f"CREATE MATERIALIZED VIEW {s}.m AS SELECT age, zip, dx FROM {s}.t; "
              f"CREATE INDEX ON {s}.m (age) WHERE {s}.boom(); "
              f"GRANT USAGE ON SCHEMA {s} TO PUBLIC; GRANT SELECT ON {s}.m TO PUBLIC")
    # refused before its indexes are looked at: another role's materialized view may get an
    # index between any check and the read (LOCK TABLE does not take materialized views)
    assert_reports_refused(db, as_dba, role, [f"{s}.m"], f"belongs to {role}")


def test_a_report_on_a_foreign_table_is_refused(as_dba, db, connect, owner, schema):
    if not db.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'file_fdw'").fetchone():
        pytest.skip("file_fdw is not installed")
    _role, s, _a = owner
    db.execute("CREATE EXTENSION IF NOT EXISTS file_fdw")
    server = f"{s.strip(chr(34))}_report_files"
    db.execute(f'CREATE SERVER "{server}" FOREIGN DATA WRAPPER file_fdw')
    try:
        db.execute(f"CREATE FOREIGN TABLE {schema}.ft (age int, zip text, dx text) "
                   f'SERVER "{server}" OPTIONS (filename \'/dev/null\')')
        db.execute(f"CREATE VIEW {schema}.fv AS SELECT * FROM {schema}.ft")
        with as_dba() as dba:
            for rel in (f"{schema}.ft", f"{schema}.fv"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege, match="foreign table"):
                    dba.execute(REPORT.format(rel=rel))
    finally:
        db.execute(f"DROP FOREIGN TABLE IF EXISTS {schema}.ft CASCADE")
        db.execute(f'DROP SERVER "{server}"')


def test_a_child_attached_while_the_call_waits_is_locked_and_checked(as_dba, db, connect, owner, release_schema):
    """A review: LOCK TABLE lists the descendants before it waits, so a grandchild the owner
    attaches to a child the call was waiting for is never locked, and the owner indexes it with
    its function after the check. The guard locks the tree until no member is new."""
    role, s, a = owner
    a.execute(f"CREATE TABLE {s}.c () INHERITS ({s}.t)")
    a.execute(f"CREATE TABLE {s}.gc (id int NOT NULL, age int, zip text, dx text)")
    db.execute(f"SELECT anon.set_column_role('{s}.t', 'id', 'identifier')")
    with connect(user=role) as a2:
        a.autocommit = False
        a.execute(f"LOCK TABLE {s}.c IN ACCESS EXCLUSIVE MODE")
        a.execute(f"ALTER TABLE {s}.gc INHERIT {s}.c")
        outcome = {}

        def dba_call():
            with as_dba() as dba:
                seen = notices(dba)
                try:
                    build(dba, s, release_schema)
                    outcome["result"] = "ran"
                except psycopg.Error as exc:
                    outcome["result"] = exc
                outcome["seen"] = seen

        worker = threading.Thread(target=dba_call)
        worker.start()
        waiting(db, 1)                                            # the call waits for c
        a2.autocommit = False
        locker = threading.Thread(target=lambda: a2.execute(f"LOCK TABLE {s}.gc IN ACCESS EXCLUSIVE MODE"))
        locker.start()
        waiting(db, 2)                                            # the owner's second session waits for gc
        a.commit()                                            # c and gc free: the call gets c, a2 gets gc
        locker.join(30)
        waiting(db, 1)                                            # the call waits for gc
        a2.execute(f"CREATE INDEX ON {s}.gc (age) WHERE {s}.boom()")
        a2.commit()
        worker.join(60)
    assert isinstance(outcome["result"], psycopg.errors.InsufficientPrivilege), outcome["result"]
    assert "boom()" in outcome["result"].diag.message_primary
    assert_not_run(db, role, outcome["seen"])


@pytest.mark.parametrize("isolation", ["REPEATABLE READ", "SERIALIZABLE"])
def test_a_call_on_another_roles_table_outside_read_committed_is_refused(as_dba, db, owner, release_schema,
                                                                         isolation):
    """A review: under REPEATABLE READ the checks run in the transaction's snapshot, taken before
    the lock, while the planner reads the current catalog: an index the owner created while the
    call waited was planned, unchecked. Such calls are refused before anything is read."""
    role, s, _a = owner
    db.execute(f"SELECT anon.set_column_role('{s}.t', 'id', 'identifier')")
    with as_dba() as dba:
        seen = notices(dba)
        dba.autocommit = False
        dba.execute(f"SET TRANSACTION ISOLATION LEVEL {isolation}")
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="READ COMMITTED") as error:
            build(dba, s, release_schema)
        assert f"owned by {role}" in error.value.diag.message_primary
        dba.rollback()
        dba.autocommit = True
        assert build(dba, s, release_schema)                    # READ COMMITTED: released
    assert_not_run(db, role, seen)


def test_another_roles_row_security_is_not_run_by_a_custodian(as_dba, db, owner, release_schema):
    """A review: a policy of the table's owner runs with the reader's rights (superusers bypass
    row security); a custodian does not read such a table."""
    role, s, a = owner
    a.execute(f"CREATE POLICY p ON {s}.t USING ({s}.payload())")
    a.execute(f"ALTER TABLE {s}.t ENABLE ROW LEVEL SECURITY")
    db.execute(f"SELECT anon.set_column_role('{s}.t', 'id', 'identifier')")
    with as_dba() as dba:
        seen = notices(dba)
        if as_dba.custodian:
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row security policies would run"):
                build(dba, s, release_schema)
        else:
            assert build(dba, s, release_schema)
    assert_not_run(db, role, seen)


def test_a_child_renamed_away_while_the_tree_is_locked_is_still_locked_and_checked(as_dba, db, connect, owner,
                                                                                    release_schema):
    """A seventh review: the guard locked new members by NAME, and the owner renamed an unlocked
    member away and gave its name to another table, then indexed the real member after the check
    (the superuser became the owner's tool). Members are now held by oid (pg_locks), the root
    alone named."""
    role, s, a = owner
    cols = "(id int NOT NULL, age int, zip text, dx text)"
    a.execute(f"CREATE TABLE {s}.c () INHERITS ({s}.t)")
    for name in ("g1", "g2", "z"):
        a.execute(f"CREATE TABLE {s}.{name} {cols}")
    db.execute(f"SELECT anon.set_column_role('{s}.t', 'id', 'identifier')")
    outcome = {}

    def dba_call():
        with as_dba() as dba:
            seen = notices(dba)
            try:
                build(dba, s, release_schema)
                outcome["result"] = "ran"
            except psycopg.Error as exc:
                outcome["result"] = exc
            outcome["seen"] = seen

    with connect(user=role) as a2, connect(user=role) as a3:
        a.autocommit = False
        a.execute(f"LOCK TABLE {s}.c IN ACCESS EXCLUSIVE MODE")
        a.execute(f"ALTER TABLE {s}.g1 INHERIT {s}.c")
        a.execute(f"ALTER TABLE {s}.g2 INHERIT {s}.c")
        worker = threading.Thread(target=dba_call)
        worker.start()
        waiting(db, 1)                                             # the call waits for c
        a2.autocommit = False
        locker = threading.Thread(target=lambda: a2.execute(f"LOCK TABLE {s}.g1 IN ACCESS EXCLUSIVE MODE"))
        locker.start()
        waiting(db, 2)
        a.commit()                                             # the call gets c, then waits for g1
        locker.join(30)
        waiting(db, 1)
        a3.execute(f"ALTER TABLE {s}.g2 RENAME TO g2x")          # g2 not locked yet: renamed away,
        a3.execute(f"ALTER TABLE {s}.z RENAME TO g2")            # its name given to another table
        a3.autocommit = False
        a3.execute(f"LOCK TABLE {s}.g2x IN ACCESS EXCLUSIVE MODE")
        a2.commit()                                            # the call gets g1, then waits for g2x
        waiting(db, 1)
        a3.execute(f"CREATE INDEX ON {s}.g2x (age) WHERE {s}.boom()")
        a3.commit()
        worker.join(60)
    assert isinstance(outcome["result"], psycopg.errors.InsufficientPrivilege), outcome["result"]
    assert "boom()" in outcome["result"].diag.message_primary
    assert_not_run(db, role, outcome["seen"])


def test_a_table_created_after_a_repeatable_read_snapshot_is_refused_cleanly(db, connect, schema, release_schema):
    """A seventh review: the name resolves (the catalog's latest state) but the table is not in
    the transaction's snapshot; the call failed with a Python IndexError."""
    with connect() as dba:
        dba.autocommit = False
        dba.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        dba.execute("SELECT 1")                                  # the snapshot is taken
        db.execute("CREATE TABLE late (id int, age int, zip text)")
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="created after this transaction"):
            dba.execute("SELECT anon.mondrian_view(%s, k => 5, release_schema => %s)",
                        (f"{schema}.late", release_schema))
        dba.rollback()
