"""Running releases in production: analysts' access, refreshing everything, pg_cron schedules and
the status of every release. None of these is executable by PUBLIC (900-privileges.sql); they
are the DBA's. Analysts only ever receive SELECT on releases and USAGE on release schemas, which
plpy_anon creates (anon.release_schemas) and which hold releases only (checked on every grant).

Declarations: see sql/build.py (the SQL, the error handling and docs/sql-reference.md are
generated from them).
"""

FUNCTIONS = [
    function(
        'grant_analyst',
        args=[
            'role text',
        ],
        returns='integer',
        python='grants.grant_analyst', positional=1,
        comment='Lets a role read every current and future release (SELECT, and USAGE on the release schemas plpy_anon created) and nothing else; refused if a release schema holds anything but releases. Returns the number of releases it can read now.',
    ),
    function(
        'revoke_analyst',
        args=[
            'role text',
        ],
        returns='integer',
        python='grants.revoke_analyst', positional=1,
        comment='Takes back what anon.grant_analyst gave: SELECT on every release and USAGE on every release schema. Returns the number of releases revoked.',
    ),
    function(
        'refresh_all',
        args=[],
        returns='TABLE (release text, status text, seconds double precision, error text)',
        python='releases.refresh_all', gd=True,
        comment='Refreshes every release in dependency order, each on its own: status is refreshed, failed (recorded, old release kept) or skipped (built from a release that failed). Each refresh waits for readers as anon.refresh does (plpy_anon.swap_lock_timeout, plpy_anon.swap_wait).',
    ),
    function(
        'schedule_refresh',
        args=[
            'release text',
            'schedule text',
        ],
        returns='bigint',
        python='schedule.schedule_refresh', positional=2,
        comment="Schedules SELECT anon.refresh(release) with pg_cron (cron syntax, e.g. '0 3 * * *'), replacing an earlier schedule of the same release; returns the pg_cron job id.",
    ),
    function(
        'unschedule_refresh',
        args=[
            'release text',
        ],
        returns='boolean',
        python='schedule.unschedule_refresh', positional=1,
        comment='Removes the pg_cron job refreshing a release (also for a dropped release given as schema.name); false if there was none.',
    ),
    function(
        'release_status',
        args=[],
        returns='TABLE (release text, method text, source text, row_count bigint, achieved_k integer, refreshed_at timestamptz, refresh_seconds double precision, last_error text, last_error_at timestamptz, failures bigint, schedule text, jobid bigint, last_run_start timestamptz, last_run_seconds double precision, last_run_status text, last_run_message text, verified boolean, verification jsonb)',
        volatility='STABLE',
        python='schedule.release_status',
        comment='One row per release: last refresh (time, duration, rows, achieved k), the last error and the number of failed refreshes, with pg_cron its schedule and the outcome of its last scheduled run, and whether the release passed the check of its released rows (verified, with the figures).',
    ),
]
