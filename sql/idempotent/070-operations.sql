-- Running releases in production: analysts' access, refreshing everything, pg_cron schedules and
-- the status of every release. None of these is executable by PUBLIC (900-privileges.sql); they
-- are the DBA's. Analysts only ever receive SELECT on releases and USAGE on release schemas, which
-- plpy_anon creates (anon.release_schemas) and which hold releases only (checked on every grant).

CREATE OR REPLACE FUNCTION anon._refresh_job_name(release_schema name, release_name name)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN octet_length('plpy_anon refresh ' || $1 || '.' || $2) <= 63
                THEN 'plpy_anon refresh ' || $1 || '.' || $2
                ELSE 'plpy_anon refresh ' || md5($1 || '.' || $2) END
$$;

-- The command of a release's pg_cron job. DROP EXTENSION plpy_anon leaves pg_cron's jobs (rows
-- of another extension), and an event trigger of ours cannot remove them: it is dropped with the
-- extension before a sql_drop trigger would fire. So the job looks for the extension first and,
-- once it is gone, unschedules itself instead of failing every run.
CREATE OR REPLACE FUNCTION anon._refresh_job_command(refresh_call text, job_name text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    body text := format('BEGIN IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = %L) '
                        'THEN PERFORM %s; ELSE PERFORM cron.unschedule(%L); END IF; END',
                        'plpy_anon', $1, $2);
    tag text := 'job';
BEGIN
    -- a dollar quote the body does not hold (a release may be named r$job$x)
    WHILE pg_catalog.strpos(body, '$' || tag || '$') > 0 LOOP
        tag := tag || '_';
    END LOOP;
    RETURN format('DO $%s$ %s $%s$', tag, body, tag);
END
$fn$;

-- Jobs scheduled before their command looked for the extension (a plain SELECT anon.refresh),
-- including those a DROP EXTENSION left behind: given the command above (needs pg_cron >= 1.3
-- and the rights of the superuser who installs or upgrades the extension).
DO $jobs$
BEGIN
    IF pg_catalog.to_regprocedure('cron.alter_job(bigint,text,text,text,text,boolean)') IS NOT NULL
       AND (SELECT a.rolsuper FROM pg_catalog.pg_roles a WHERE a.rolname = current_user) THEN
        PERFORM cron.alter_job(j.jobid, command => anon._refresh_job_command(
                    pg_catalog.substr(j.command, pg_catalog.length('SELECT ') + 1), j.jobname))
        FROM cron.job j
        WHERE j.jobname LIKE 'plpy_anon refresh %' AND j.command ~ '^SELECT anon\.refresh\(''.*''\)$';
    END IF;
END
$jobs$;
