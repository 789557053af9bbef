-- Running releases in production: analysts' access, refreshing everything, pg_cron schedules and
-- the status of every release. None of these is executable by PUBLIC (900-privileges.sql); they
-- are the DBA's. Analysts only ever receive SELECT on releases and USAGE on release schemas, which
-- plpy_anon creates (anon.release_schemas) and which hold releases only (checked on every grant).

CREATE OR REPLACE FUNCTION anon.grant_analyst(role text)
RETURNS integer
LANGUAGE plpython3u VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import grants
return grants.grant_analyst(plpy, role)
$$;
COMMENT ON FUNCTION anon.grant_analyst(text) IS
    'Lets a role read every current and future release (SELECT, and USAGE on the release schemas plpy_anon created) and nothing else; refused if a release schema holds anything but releases. Returns the number of releases it can read now.';

CREATE OR REPLACE FUNCTION anon.revoke_analyst(role text)
RETURNS integer
LANGUAGE plpython3u VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import grants
return grants.revoke_analyst(plpy, role)
$$;
COMMENT ON FUNCTION anon.revoke_analyst(text) IS
    'Takes back what anon.grant_analyst gave: SELECT on every release and USAGE on every release schema. Returns the number of releases revoked.';

CREATE OR REPLACE FUNCTION anon.refresh_all()
RETURNS TABLE (release text, status text, seconds double precision, error text)
LANGUAGE plpython3u VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import releases
return releases.refresh_all(plpy, GD=GD)
$$;
COMMENT ON FUNCTION anon.refresh_all() IS
    'Refreshes every release in dependency order, each on its own: status is refreshed, failed (recorded, old release kept) or skipped (built from a release that failed). Each refresh waits for readers as anon.refresh does (plpy_anon.swap_lock_timeout, plpy_anon.swap_wait).';

CREATE OR REPLACE FUNCTION anon._refresh_job_name(release_schema name, release_name name)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN octet_length('plpy_anon refresh ' || $1 || '.' || $2) <= 63
                THEN 'plpy_anon refresh ' || $1 || '.' || $2
                ELSE 'plpy_anon refresh ' || md5($1 || '.' || $2) END
$$;

CREATE OR REPLACE FUNCTION anon.schedule_refresh(release text, schedule text)
RETURNS bigint
LANGUAGE plpython3u VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import schedule as sched
return sched.schedule_refresh(plpy, release, schedule)
$$;
COMMENT ON FUNCTION anon.schedule_refresh(text, text) IS
    'Schedules SELECT anon.refresh(release) with pg_cron (cron syntax, e.g. ''0 3 * * *''), replacing an earlier schedule of the same release; returns the pg_cron job id.';

CREATE OR REPLACE FUNCTION anon.unschedule_refresh(release text)
RETURNS boolean
LANGUAGE plpython3u VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import schedule as sched
return sched.unschedule_refresh(plpy, release)
$$;
COMMENT ON FUNCTION anon.unschedule_refresh(text) IS
    'Removes the pg_cron job refreshing a release (also for a dropped release given as schema.name); false if there was none.';

CREATE OR REPLACE FUNCTION anon.release_status()
RETURNS TABLE (release text, method text, source text, row_count bigint, achieved_k integer,
               refreshed_at timestamptz, refresh_seconds double precision,
               last_error text, last_error_at timestamptz, failures bigint,
               schedule text, jobid bigint, last_run_start timestamptz,
               last_run_seconds double precision, last_run_status text, last_run_message text,
               verified boolean, verification jsonb)
LANGUAGE plpython3u STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import schedule as sched
return sched.release_status(plpy)
$$;
COMMENT ON FUNCTION anon.release_status() IS
    'One row per release: last refresh (time, duration, rows, achieved k), the last error and the number of failed refreshes, with pg_cron its schedule and the outcome of its last scheduled run, and whether the release passed the check of its released rows (verified, with the figures).';
