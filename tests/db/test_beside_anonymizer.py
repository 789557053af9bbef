"""plpy_anon installed beside PostgreSQL Anonymizer, which also wants schema "anon": the database
has a schema "anon" of someone else's (with a function that must survive), plpy_anon goes into
schema "pa" (CREATE EXTENSION plpy_anon SCHEMA pa), and an unprivileged custodian builds,
refreshes, verifies, reports and drops releases of every kind there, read by an analyst."""
from __future__ import annotations

import json
import re
import subprocess
import uuid

import psycopg
import pytest
from psycopg import sql

from tests.contract.methods import AUXILIARY, METHODS, N_ROWS, ROWS, TABLE, Context
from tests.db.test_upgrade import next_version  # noqa: F401 -- the scratch next version
from tests.helpers import class_sizes, matview

DBNAME = "anon_beside"
QIS = ["age", "zip"]
# PostgreSQL Anonymizer's partial(): what it does does not matter, only that it stays ours
PARTIAL = """CREATE FUNCTION anon.partial(ov text, prefix int, padding text, suffix int) RETURNS text
             LANGUAGE sql IMMUTABLE AS $f$ SELECT substr(ov, 1, prefix) || padding
             || substr(ov, length(ov) - suffix + 1) $f$"""


@pytest.fixture(scope="module")
def beside(pg_server):
    """A database with PostgreSQL Anonymizer's schema "anon" and plpy_anon in schema "pa", a
    custodian (plpy_anon_custodian and CREATE on the database, no more) and an analyst."""
    params = {k: v for k, v in pg_server.items() if k != "dbname"}
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(DBNAME)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DBNAME)))
    suffix = uuid.uuid4().hex[:8]
    custodian, analyst = f"cust_{suffix}", f"analyst_{suffix}"
    dba = psycopg.connect(dbname=DBNAME, autocommit=True, **params)
    dba.execute("CREATE SCHEMA anon")
    dba.execute(PARTIAL)
    dba.execute("CREATE SCHEMA pa")
    dba.execute("CREATE EXTENSION plpy_anon SCHEMA pa CASCADE")
    for role in (custodian, analyst):
        dba.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    dba.execute(sql.SQL("GRANT plpy_anon_custodian TO {}").format(sql.Identifier(custodian)))
    dba.execute(sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(sql.Identifier(DBNAME),
                                                                 sql.Identifier(custodian)))

    def connect(user=None):
        return psycopg.connect(dbname=DBNAME, autocommit=True, **dict(params, **({"user": user} if user else {})))
    yield {"dba": dba, "connect": connect, "custodian": custodian, "analyst": analyst}
    dba.close()
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as admin:
        admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(DBNAME)))
        for role in (custodian, analyst):
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def partial_works(conn) -> bool:
    return conn.execute("SELECT anon.partial('0612345678', 2, 'xxxx', 2)").fetchone()[0] == "06xxxx78"


def test_the_extension_lives_in_pa_and_leaves_anon_to_its_owner(beside):
    dba = beside["dba"]
    members = dba.execute(
        """SELECT DISTINCT o.schema FROM pg_depend d
           JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'plpy_anon',
           LATERAL pg_identify_object(d.classid, d.objid, d.objsubid) o
           WHERE d.deptype = 'e' AND o.schema IS NOT NULL""").fetchall()
    assert {s for (s,) in members} == {"pa", "anon_py"}
    assert dba.execute("SELECT count(*) FROM pg_proc WHERE pronamespace = 'anon'::regnamespace").fetchone()[0] == 1
    assert partial_works(dba)
    # no function body of the extension names schema anon: every reference became pa
    bodies = dba.execute(
        """SELECT p.oid::regprocedure::text, p.prosrc FROM pg_proc p
           JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
           JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'plpy_anon'""").fetchall()
    assert len(bodies) > 100
    naming_anon = [name for name, body in bodies if re.search(r"(?<![\w\"])anon(\.|\\\.|')", body)]
    assert naming_anon == []


def test_a_custodian_builds_refreshes_reports_and_drops_every_kind_of_release_in_pa(beside):
    dba, custodian, analyst = beside["dba"], beside["custodian"], beside["analyst"]
    own = f"{custodian}_data"
    with beside["connect"](custodian) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(own)))
        conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(own)))
        conn.execute("CREATE TABLE pat (id int PRIMARY KEY, age int, zip text, dx text)")
        conn.execute("INSERT INTO pat SELECT g, 20 + g % 40, 'z' || g % 5, 'd' || g % 4 "
                     "FROM generate_series(1, 400) g")
        common = "quasi_identifiers => '{age,zip}', sensitive => '{dx}', release_schema => 'released'"
        mondrian = conn.execute(f"SELECT pa.mondrian_view('pat', k => 5, {common}, "
                                "release_name => 'by_mondrian')").fetchone()[0]
        break_merge = conn.execute(f"SELECT pa.break_merge('pat', k => 5, l => 2, {common}, "
                                   "release_name => 'by_break_merge')").fetchone()[0]
        stable = conn.execute(f"SELECT pa.mondrian_view('pat', k => 5, l => 2, {common}, identifiers => '{{id}}', "
                              "refresh_mode => 'stable', release_name => 'stable')").fetchone()[0]
        releases = [mondrian, break_merge, stable]
        conn.execute("INSERT INTO pat SELECT g, 20 + g % 40, 'z' || g % 5, 'd' || g % 4 "
                     "FROM generate_series(401, 460) g")
        for release in releases:
            assert conn.execute("SELECT row_count FROM pa.refresh(%s)", (release,)).fetchone()[0] == 460
            if release != break_merge:      # Break-Merge releases QI and SA in separate tables
                assert min(class_sizes(conn, release, QIS)) >= 5
        # a plain REFRESH goes through the event trigger, which records it in pa.releases
        conn.execute("INSERT INTO pat SELECT g, 30, 'z1', 'd1' FROM generate_series(461, 470) g")
        conn.execute(f"REFRESH MATERIALIZED VIEW {matview(conn, mondrian)}")
        assert conn.execute("SELECT row_count FROM pa.releases WHERE format('%%I.%%I', release_schema, "
                            "release_name) = %s", (mondrian,)).fetchone()[0] == 470
        # pg_cron's job (scheduled from pg_cron's database with cron.schedule_in_database) calls pa
        _job, command, database = conn.execute("SELECT * FROM pa.refresh_job(%s)", (stable,)).fetchone()
        assert database == DBNAME and "pa.refresh(" in command and "anon." not in command
        runs = ("SELECT count(*) FROM pa.refresh_history h JOIN pa.releases r USING (release_id) "
                "WHERE r.release_name = 'stable' AND h.succeeded")
        before = conn.execute(runs).fetchone()[0]
        conn.execute(command)
        assert conn.execute(runs).fetchone()[0] == before + 1
        # what users read names pa
        with pytest.raises(psycopg.errors.UndefinedObject) as refused:
            conn.execute("SELECT pa.refresh('released.nothing')")
        assert refused.value.diag.message_hint == "See SELECT release_schema, release_name FROM pa.releases."
        # a failed refresh is recorded (through a connection of its own) in pa's catalog
        conn.execute("CREATE TABLE few AS SELECT * FROM pat")
        few = conn.execute(f"SELECT pa.mondrian_view('few', k => 5, {common})").fetchone()[0]
        conn.execute("DELETE FROM few WHERE id > 3")
        with pytest.raises(psycopg.Error) as failed:
            conn.execute("SELECT pa.refresh(%s)", (few,))
        assert conn.execute("SELECT h.succeeded, h.error, r.last_error FROM pa.refresh_history h "
                            "JOIN pa.releases r USING (release_id) WHERE r.release_name = 'few_k5'").fetchall() \
            == [(False, failed.value.diag.message_primary, failed.value.diag.message_primary)]
        assert conn.execute("SELECT pa.drop_release(%s)", (few,)).fetchone()[0] is True
        status = dict(conn.execute("SELECT release, verified FROM pa.release_status()").fetchall())
        assert {status[r] for r in releases} == {True}
        report = dict(conn.execute("SELECT measure, value FROM pa.risk_report(%s::regclass, %s)",
                                   (mondrian, QIS)).fetchall())
        assert report["smallest_class"] >= 5 and report["rows"] == 470
    assert dba.execute("SELECT pa.grant_analyst(%s)", (analyst,)).fetchone()[0] >= 1   # the DBA's
    with beside["connect"](analyst) as conn:
        # the stable release holds back the 10 joiners, who all share one class
        for release, rows in ((mondrian, 470), (stable, 460)):
            assert conn.execute(f"SELECT count(*) FROM {release}").fetchone()[0] == rows
        assert conn.execute(f"SELECT count(*) FROM {break_merge}").fetchone()[0] > 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT * FROM pa.releases")
    with beside["connect"](custodian) as conn:
        for release in releases:
            assert conn.execute("SELECT pa.drop_release(%s)", (release,)).fetchone()[0] is True
        assert conn.execute("SELECT count(*) FROM pa.releases").fetchone()[0] == 0
    assert partial_works(dba)


@pytest.fixture
def empty_database(pg_server):
    """A database without plpy_anon; yields a superuser connection to it."""
    params = {k: v for k, v in pg_server.items() if k != "dbname"}
    name = f"{DBNAME}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    conn = psycopg.connect(dbname=name, autocommit=True, **params)
    yield conn
    conn.close()
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as admin:
        admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def test_a_schema_that_is_not_empty_or_not_a_superusers_is_refused(empty_database):
    """Whatever the schema holds could be replaced (CREATE OR REPLACE) and its owner may drop and
    replace the extension's objects: the install refuses both, and installs nothing."""
    dba = empty_database
    dba.execute("CREATE SCHEMA anon")
    dba.execute(PARTIAL)
    with pytest.raises(psycopg.errors.DuplicateSchema, match="already holds objects") as refused:
        dba.execute("CREATE EXTENSION plpy_anon SCHEMA anon CASCADE")
    assert "function anon.partial" in refused.value.diag.message_detail
    with pytest.raises(psycopg.errors.DuplicateSchema, match='a schema "anon"'):
        dba.execute("CREATE EXTENSION plpy_anon CASCADE")        # the default: its own anon
    role = f"owner_{uuid.uuid4().hex[:8]}"
    dba.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(role)))
    try:
        dba.execute(sql.SQL("CREATE SCHEMA theirs AUTHORIZATION {}").format(sql.Identifier(role)))
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="not a superuser"):
            dba.execute("CREATE EXTENSION plpy_anon SCHEMA theirs CASCADE")
        dba.execute('CREATE SCHEMA "Mixed"')
        with pytest.raises(psycopg.errors.InvalidName, match="cannot be installed"):
            dba.execute('CREATE EXTENSION plpy_anon SCHEMA "Mixed" CASCADE')
        assert dba.execute("SELECT count(*) FROM pg_extension WHERE extname = 'plpy_anon'").fetchone()[0] == 0
        assert partial_works(dba)
    finally:
        dba.execute("DROP SCHEMA theirs")
        dba.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_dropped_and_created_again_in_another_schema_the_same_backend_follows(empty_database):
    """The schema is written into each function body, not cached: a backend that ran plpy_anon in
    pa runs it in pb once the extension moved, and DROP EXTENSION leaves schema anon alone. A
    source in schema anon (PostgreSQL Anonymizer's) keeps its name through create and refresh."""
    dba = empty_database
    dba.execute("CREATE SCHEMA anon")
    dba.execute(PARTIAL)
    dba.execute("CREATE TABLE anon.pat AS SELECT g AS id, 20 + g % 40 AS age, 'z' || g % 5 AS zip "
                "FROM generate_series(1, 100) g")
    for rows, schema in ((110, "pa"), (120, "pb")):
        dba.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        dba.execute(sql.SQL("CREATE EXTENSION plpy_anon SCHEMA {} CASCADE").format(sql.Identifier(schema)))
        release = dba.execute(sql.SQL("SELECT {}.mondrian_view('anon.pat', k => 5, quasi_identifiers => "
                                      "'{{age,zip}}', release_schema => 'released')").format(
            sql.Identifier(schema))).fetchone()[0]
        assert dba.execute(sql.SQL("SELECT count(*) FROM {}.releases").format(
            sql.Identifier(schema))).fetchone()[0] == 1
        dba.execute("INSERT INTO anon.pat SELECT g, 30, 'z1' FROM generate_series(%s::int, %s::int) g", (rows - 9, rows))
        dba.execute(sql.SQL("SELECT {}.refresh(%s)").format(sql.Identifier(schema)), (release,))
        assert dba.execute(f"SELECT count(*) FROM {release}").fetchone()[0] == rows
        assert min(class_sizes(dba, release, QIS)) >= 5
        dba.execute(sql.SQL("SELECT {}.drop_release(%s)").format(sql.Identifier(schema)), (release,))
        dba.execute("DROP SCHEMA released")
        dba.execute("DROP EXTENSION plpy_anon")
    assert partial_works(dba)


def dsn_of(pg_server, dbname: str) -> str:
    return " ".join(f"{k}={v}" for k, v in dict(pg_server, dbname=dbname).items())


def test_the_client_and_the_cli_find_the_extension_in_pa(beside, pg_server, tmp_path):
    from click.testing import CliRunner

    from plpy_anon.cli import main
    from plpy_anon.client import AnonClient, errors
    dba = beside["dba"]
    dba.execute("CREATE TABLE public.visits AS SELECT g AS id, 20 + g % 40 AS age, 'z' || g % 5 AS zip, "
                "'d' || g % 3 AS dx FROM generate_series(1, 300) g")
    dsn = dsn_of(pg_server, DBNAME)
    with AnonClient(dsn) as client:
        assert client.schema == "pa"
        release = client.mondrian_view("public.visits", k=10, quasi_identifiers=QIS, sensitive=["dx"],
                                       identifiers=["id"], release_schema="client_released")
        assert len(client.release_frame(release)) == 300
        assert client.release(release)["verified"] is True
        meta = client.export(release, tmp_path / "visits.csv")
        assert meta["exported_rows"] == 300
        assert set(client.risk_report(release, quasi_identifiers=QIS)["measure"]) >= {"smallest_class"}
        snapshot = client.snapshot(release, snapshot_schema="client_snapshots")
        assert client.query(f"SELECT count(*) AS n FROM {snapshot}")[0]["n"] == 300
        with pytest.raises(errors.InvalidParameter, match='snapshots do not go into schema "pa"'):
            client.snapshot(release, snapshot_schema="pa")
        assert client.drop_release(release) is True

    def cli(*args):
        result = CliRunner().invoke(main, ["--dsn", dsn, "--format", "json", *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)
    created = cli("mondrian-view", "public.visits", "--k", "10", "--quasi-identifiers", "age,zip",
                  "--sensitive", "dx", "--identifiers", "id", "--release-schema", "cli_released")
    release = created[0]["release"]
    assert {r["release"]: r["verified"] for r in cli("release-status")}[release] is True
    assert cli("refresh", release)[0]["row_count"] == 300
    report = {r["measure"]: r["value"] for r in cli("risk-report", release, "--quasi-identifiers", "age,zip")}
    assert report["smallest_class"] >= 10
    cli("report", release, "-o", str(tmp_path / "report.html"))
    html = (tmp_path / "report.html").read_text()
    assert "cli_released" in html and "Traceback" not in html
    assert cli("--schema", "pa", "drop-release", release)[0]["dropped"] is True
    assert partial_works(dba)


def test_the_cli_installs_into_the_schema_it_is_given(empty_database, pg_server):
    from click.testing import CliRunner

    from plpy_anon.cli import main
    dba = empty_database
    dba.execute("CREATE SCHEMA anon")
    dba.execute(PARTIAL)
    result = CliRunner().invoke(main, ["--dsn", dsn_of(pg_server, dba.info.dbname), "--schema", "pb",
                                       "--format", "json", "install"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)[0]["installed"]
    assert dba.execute("SELECT count(*) FROM pg_proc WHERE pronamespace = 'pb'::regnamespace").fetchone()[0] > 50
    assert dba.execute("SELECT count(*) FROM pb.releases").fetchone()[0] == 0
    assert partial_works(dba)


def test_a_dump_restores_plpy_anon_in_pa_beside_anon(empty_database, pg_server, connect, tmp_path):
    """pg_dump writes CREATE SCHEMA pa (not the extension's: it was given) before CREATE EXTENSION
    plpy_anon WITH SCHEMA pa, and the catalog's rows; schema anon and its function come back as
    they were, and the release is refreshed in pa."""
    from tests.db.test_snapshot import libpq_env, pg_bin
    dba = empty_database
    dba.execute("CREATE SCHEMA anon")
    dba.execute(PARTIAL)
    dba.execute("CREATE SCHEMA pa")
    dba.execute("CREATE EXTENSION plpy_anon SCHEMA pa CASCADE")
    dba.execute("CREATE TABLE public.pat AS SELECT g AS id, 20 + g % 40 AS age, 'z' || g % 5 AS zip "
                "FROM generate_series(1, 100) g")
    release = dba.execute("SELECT pa.mondrian_view('public.pat', k => 5, quasi_identifiers => '{age,zip}', "
                          "release_schema => 'released')").fetchone()[0]
    archive, restored = tmp_path / "beside.dump", f"{dba.info.dbname}_restored"
    env = libpq_env(pg_server)
    done = subprocess.run([pg_bin("pg_dump"), "-Fc", "-f", str(archive), dba.info.dbname], env=env,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    with connect(dbname="postgres") as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(restored)))
    try:
        done = subprocess.run([pg_bin("pg_restore"), "--exit-on-error", "-d", restored, str(archive)],
                              env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        with connect(dbname=restored) as conn:
            assert partial_works(conn)
            assert conn.execute("SELECT count(*) FROM pa.releases").fetchone()[0] == 1
            assert conn.execute(f"SELECT count(*) FROM {release}").fetchone()[0] == 100
            assert conn.execute("SELECT row_count FROM pa.refresh(%s)", (release,)).fetchone()[0] == 100
            assert min(class_sizes(conn, release, QIS)) >= 5
    finally:
        with connect(dbname="postgres") as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(restored)))


PA_METHODS = [m for m in METHODS if m.name != "random_groups_view"]   # that one is the tests'


@pytest.fixture(scope="module")
def contract_source(beside):
    """The release methods' contract table (tests/contract/methods.py) in the database beside
    PostgreSQL Anonymizer, its declarations made with pa's functions; trust's requester."""
    dba = beside["dba"]
    dba.execute("CREATE SCHEMA contract")
    dba.execute(TABLE.format(table="contract.people", rows=ROWS.format(table="contract.people", lo=1, hi=N_ROWS))
                .replace("anon.", "pa."))
    dba.execute(AUXILIARY.format(table="contract.people", n=N_ROWS))
    dba.execute("SELECT pa.add_requester('contract_requester', role => %s)", (beside["analyst"],))
    dba.execute("SELECT pa.define_purpose('contract_purpose', priorities => '{\"age\": 1, \"job\": 0.2}')")
    return Context(requester="contract_requester", purpose="contract_purpose")


@pytest.mark.parametrize("method", PA_METHODS, ids=lambda m: m.name)
def test_every_release_method_builds_refreshes_and_drops_in_pa(beside, contract_source, method):
    dba = beside["dba"]
    call = method.call(contract_source, "contract.people", 5, 2 if method.l_arg else None,
                       release_name=f"{method.name}_pa", release_schema="contract_released")
    release = dba.execute(call.as_string(dba).replace("SELECT anon.", "SELECT pa.", 1)).fetchone()[0]
    name = ("SELECT verified, row_count FROM pa.releases "
            "WHERE format('%%I.%%I', release_schema, release_name) = %s")
    assert dba.execute(name, (release,)).fetchone() == (True, N_ROWS)
    dba.execute(ROWS.format(table="contract.people", lo=N_ROWS + 1, hi=N_ROWS + 20))
    try:
        assert dba.execute("SELECT row_count FROM pa.refresh(%s)", (release,)).fetchone()[0] == N_ROWS + 20
        assert dba.execute(name, (release,)).fetchone() == (True, N_ROWS + 20)
    finally:
        dba.execute("DELETE FROM contract.people WHERE id > %s", (N_ROWS,))
    assert dba.execute("SELECT pa.drop_release(%s)", (release,)).fetchone()[0] is True
    assert partial_works(dba)


def test_the_workload_is_learned_in_pa(beside, contract_source):
    """Logged queries are parsed against the database's tables (not the extension's own) and the
    priorities stored in pa."""
    dba = beside["dba"]
    dba.execute("SELECT pa.add_queries(ARRAY['SELECT job FROM contract.people WHERE age > 30', "
                "'SELECT count(*) FROM contract.people GROUP BY job'])")
    weights = dict(dba.execute("SELECT column_name::text, selection FROM pa.learn_priorities('contract.people', "
                               "use_pg_stat_statements => false)").fetchall())
    assert weights["age"] == 1
    assert dba.execute("SELECT count(*) FROM pa.priorities WHERE source = 'contract.people'::regclass").fetchone()[0] > 0


def test_an_update_runs_in_pa(empty_database, next_version):  # noqa: F811
    """ALTER EXTENSION plpy_anon UPDATE of an install in pa (tests/db/test_upgrade.py's scratch next
    version: a new table, a changed signature) changes pa, and leaves schema anon alone."""
    from tests.db.test_upgrade import CURRENT, NEXT
    dba = empty_database
    dba.execute("CREATE SCHEMA anon")
    dba.execute(PARTIAL)
    dba.execute("CREATE SCHEMA pa")
    dba.execute(sql.SQL("CREATE EXTENSION plpy_anon VERSION {} SCHEMA pa CASCADE").format(sql.Literal(CURRENT)))
    dba.execute("CREATE TABLE public.pat AS SELECT g AS id, 20 + g % 40 AS age, 'z' || g % 5 AS zip "
                "FROM generate_series(1, 100) g")
    release = dba.execute("SELECT pa.mondrian_view('public.pat', k => 5, quasi_identifiers => '{age,zip}', "
                          "release_schema => 'released')").fetchone()[0]
    dba.execute(sql.SQL("ALTER EXTENSION plpy_anon UPDATE TO {}").format(sql.Literal(NEXT)))
    assert dba.execute("SELECT to_regclass('pa.upgrade_probe') IS NOT NULL, "
                       "to_regclass('anon.upgrade_probe') IS NULL").fetchone() == (True, True)
    signatures = dba.execute("SELECT oid::regprocedure::text FROM pg_proc WHERE proname = 'unschedule_refresh' "
                             "ORDER BY 1").fetchall()
    assert signatures == [("anon_py.unschedule_refresh(text,boolean)",), ("pa.unschedule_refresh(text,boolean)",)]
    with psycopg.connect(**{**dba.info.get_parameters(), "autocommit": True}) as new:   # the new package
        versions = {r[0]: r[2] for r in new.execute("SELECT * FROM pa.versions()").fetchall()}
        assert versions["plpy_anon"].startswith(str(next_version["venv"]))
        assert new.execute("SELECT row_count FROM pa.refresh(%s)", (release,)).fetchone()[0] == 100
    assert partial_works(dba)
