"""Scheduled refreshes through pg_cron, and the status of every release.

A release's job is named after the release (``plpy_anon refresh <schema>.<name>``, or an md5 of it
when that would not fit pg_cron's 63-byte name; anon._refresh_job_name), so ``schedule_refresh`` on an already scheduled
release replaces its schedule, a release replaced with ``replace => true`` keeps its job, and
``release_status`` finds the job without a table of our own. The job runs
``anon.refresh('<schema>.<name>')`` as the user who scheduled it, so a failure is recorded
by anon.refresh (catalog, anon.refresh_history) and by pg_cron (cron.job_run_details); once
the extension is dropped, the job unschedules itself instead (anon._refresh_job_command).
"""
from __future__ import annotations

from plpy_anon.core.errors import AnonError, InvalidParameter
from plpy_anon.db import extschema, release_rows
from plpy_anon.db.errors import sql_entry
from plpy_anon.db.sqltext import ident, run

JOB_PREFIX = "plpy_anon refresh "


class PrerequisiteMissing(AnonError):
    """pg_cron is not installed or not preloaded (object_not_in_prerequisite_state)."""

    sqlstate = "55000"


def run_cron(plpy, query: str, types=(), args=()):
    """Queries touching pg_cron's objects are planned afresh each time: a cached plan would
    point at the old relations once a DBA drops and re-creates the pg_cron extension."""
    return plpy.execute(plpy.prepare(query, list(types)), list(args))


def job_name(plpy, schema: str, name: str) -> str:
    """The pg_cron job name of a release (anon._refresh_job_name: one definition, used by SQL too)."""
    return run(plpy, "SELECT anon._refresh_job_name($1, $2) AS j", ["name", "name"], [schema, name])[0]["j"]


def cron_installed(plpy) -> bool:
    return bool(run(plpy, "SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'pg_cron'"))


def cron_readable(plpy) -> bool:
    """pg_cron is installed and the caller may read its job tables (a custodian may not)."""
    return bool(run(plpy, """
        SELECT 1 FROM pg_catalog.pg_extension e, pg_catalog.pg_namespace n
        JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = 'job'
        WHERE e.extname = 'pg_cron' AND n.nspname = 'cron'         -- its tables' schema, always
          AND pg_catalog.has_schema_privilege(n.oid, 'USAGE')
          AND pg_catalog.has_table_privilege(c.oid, 'SELECT')"""))


def require_cron(plpy, release: str = "<release>") -> None:
    """Clear errors for the two ways pg_cron can be missing, each with the fix; ``release``: the
    release the call named, for the hint's anon.refresh_job call."""
    if cron_installed(plpy):
        return
    row = run(plpy, """
        SELECT pg_catalog.current_setting('shared_preload_libraries') AS libs,
               pg_catalog.current_setting('cron.database_name', true) AS cron_db,
               pg_catalog.current_database()::text AS db""")[0]
    preloaded = "pg_cron" in [lib.strip().strip('"') for lib in row["libs"].split(",")]
    if not preloaded:
        raise PrerequisiteMissing(
            "pg_cron is not loaded by this server",
            hint="Install Debian's postgresql-15-cron, add pg_cron to shared_preload_libraries, set "
                 f"cron.database_name = '{row['db']}', restart PostgreSQL, then CREATE EXTENSION pg_cron.")
    if row["cron_db"] and row["cron_db"] != row["db"]:
        raise PrerequisiteMissing(
            f"pg_cron runs in database {row['cron_db']}, not in {row['db']}",
            hint=f"Schedule the job from database {row['cron_db']} with "
                 "cron.schedule_in_database(job_name, schedule, command, database_name) and the "
                 f"values SELECT * FROM anon.refresh_job({extschema.user(plpy.quote_literal(release))}) "
                 "gives here ('plpy-anon schedule-refresh' does both), or set cron.database_name and restart.")
    raise PrerequisiteMissing("pg_cron is preloaded but its extension is not installed in this database",
                              hint="CREATE EXTENSION pg_cron;")


def refresh_command(plpy, release: dict) -> str:
    """The job's command: ``anon.refresh(<release>)``, or, once the extension is dropped, the
    job's own unscheduling (anon._refresh_job_command)."""
    qualified = ident(plpy, release["release_schema"], release["release_name"])
    return run(plpy, "SELECT anon._refresh_job_command($1, anon._refresh_job_name($2, $3)) AS c",
               ["text", "name", "name"],
               [extschema.sql(f"anon.refresh({plpy.quote_literal(qualified)})"), release["release_schema"],
                release["release_name"]])[0]["c"]


@sql_entry
def refresh_job(plpy, name: str) -> list[tuple[str, str, str]]:
    """The pg_cron job that refreshes a release: its name, its command and this database, for
    cron.schedule_in_database when pg_cron runs in another database of the server."""
    release = release_rows.find(plpy, name)
    database = run(plpy, "SELECT pg_catalog.current_database()::text AS d")[0]["d"]
    return [(job_name(plpy, release["release_schema"], release["release_name"]),
             refresh_command(plpy, release), database)]


@sql_entry
def schedule_refresh(plpy, name: str, schedule: str) -> int:
    """Create (or reschedule) the pg_cron job refreshing a release; returns its job id."""
    release = release_rows.find(plpy, name)
    if schedule is None or not schedule.strip():
        raise InvalidParameter("a cron schedule is required",
                               hint="Pass e.g. '0 3 * * *' (minute hour day month weekday: nightly at 03:00) or '@daily'.")
    require_cron(plpy, ident(plpy, release["release_schema"], release["release_name"]))
    jobname = job_name(plpy, release["release_schema"], release["release_name"])
    try:
        with plpy.subtransaction():
            rows = run_cron(plpy, "SELECT cron.schedule($1, $2, $3) AS jobid", ["text", "text", "text"],
                       [jobname, schedule, refresh_command(plpy, release)])
    except plpy.SPIError as exc:
        if "schedule" in str(exc):
            raise InvalidParameter(f'invalid cron schedule "{schedule}": {str(exc).strip()}',
                                   hint="Five fields, minute hour day month weekday, e.g. '0 3 * * *', "
                                        "or @hourly, @daily, @weekly.") from None
        raise
    return rows[0]["jobid"]


@sql_entry
def unschedule_refresh(plpy, name: str) -> bool:
    """Remove a release's job; false if it had none. Works for a dropped release given as
    schema.name, so its job can be cleaned up."""
    require_cron(plpy, name)
    try:
        release = release_rows.find(plpy, name, genuine=False)
        schema, rel = release["release_schema"], release["release_name"]
    except AnonError:
        parts = run(plpy, "SELECT pg_catalog.parse_ident($1) AS p", ["text"], [name])[0]["p"]
        if len(parts) != 2:
            raise
        schema, rel = parts
    jobs = run_cron(plpy, "SELECT jobid FROM cron.job WHERE jobname = $1", ["text"], [job_name(plpy, schema, rel)])
    for job in jobs:
        run_cron(plpy, "SELECT cron.unschedule($1)", ["int8"], [job["jobid"]])
    return bool(jobs)


STATUS_COLUMNS = """
    pg_catalog.format('%I.%I', r.release_schema, r.release_name) AS release,
    r.method, r.source::text AS source, r.row_count, r.achieved_k,
    r.refreshed_at, r.refresh_seconds, r.last_error, r.last_error_at,
    (SELECT count(*) FROM anon.refresh_history h WHERE h.release_id = r.release_id AND NOT h.succeeded) AS failures"""

# the check of the release's rows (verify.py): passed?, and its figures. Only relations that are
# what plpy_anon made (in the release's own schema, owned by its creator: its storage a populated
# materialized view, and the relation analysts read that one or the view over it) are called
# verified: a catalog row restored without its relation, refreshed WITH NO DATA, or whose
# relation its owner replaced by a table (the owner writes the row's figures, not the kinds), is not
VERIFICATION_COLUMNS = """
    r.verified
      AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c
                  WHERE c.relnamespace = r.schema_oid AND c.relowner = r.release_owner
                    AND c.relname = coalesce(r.parameters ->> 'storage', r.release_name)
                    AND c.relkind = 'm' AND c.relispopulated)
      AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c
                  WHERE c.relnamespace = r.schema_oid AND c.relowner = r.release_owner
                    AND c.relname = r.release_name
                    AND c.relkind = CASE WHEN r.parameters ->> 'storage' IS NULL THEN 'm' ELSE 'v' END)
      AS verified,
    r.verification"""

STATUS_WITHOUT_CRON = f"""
SELECT {STATUS_COLUMNS},
       NULL::text AS schedule, NULL::bigint AS jobid, NULL::timestamptz AS last_run_start,
       NULL::double precision AS last_run_seconds, NULL::text AS last_run_status, NULL::text AS last_run_message,
       {VERIFICATION_COLUMNS}
FROM anon.releases r ORDER BY 1"""

# pg_cron's run details: the latest run of the release's job: the one schedule_refresh named
# (job_name()), else the newest job of this database whose command calls anon.refresh on the
# release (one made by hand, e.g. with cron.schedule_in_database from pg_cron's database).
STATUS_WITH_CRON = f"""
SELECT {STATUS_COLUMNS},
       j.schedule, j.jobid, d.start_time AS last_run_start,
       extract(epoch FROM d.end_time - d.start_time)::double precision AS last_run_seconds,
       d.status AS last_run_status, d.return_message AS last_run_message,
       {VERIFICATION_COLUMNS}
FROM anon.releases r
LEFT JOIN LATERAL (
    SELECT x.jobid, x.schedule FROM cron.job x
    WHERE x.jobname = anon._refresh_job_name(r.release_schema, r.release_name)
       OR (x.database = pg_catalog.current_database()
           AND pg_catalog.strpos(pg_catalog.regexp_replace(x.command, '\\s+', '', 'g'),
                   pg_catalog.regexp_replace('anon.refresh(' || pg_catalog.quote_literal(
                       pg_catalog.format('%I.%I', r.release_schema, r.release_name)) || ')',
                       '\\s+', '', 'g')) > 0)
    ORDER BY x.jobname = anon._refresh_job_name(r.release_schema, r.release_name) DESC,
             x.jobid DESC
    LIMIT 1) j ON true
LEFT JOIN LATERAL (SELECT * FROM cron.job_run_details x WHERE x.jobid = j.jobid
                   ORDER BY x.start_time DESC NULLS LAST LIMIT 1) d ON true
ORDER BY 1"""


@sql_entry
def release_status(plpy) -> list[dict]:
    if cron_readable(plpy):
        return list(run_cron(plpy, STATUS_WITH_CRON))
    return list(run(plpy, STATUS_WITHOUT_CRON))
