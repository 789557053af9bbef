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
