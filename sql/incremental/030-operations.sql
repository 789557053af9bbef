-- Running releases in production: which roles are analysts, and every refresh's outcome.

-- Roles that read every release (anon.grant_analyst): each new release is granted to them.
CREATE TABLE anon.analysts (
    role_name  name        PRIMARY KEY,
    granted_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE anon.analysts IS
    'Roles granted SELECT on every current and future release by anon.grant_analyst.';

-- One row per refresh attempt. Failures are written by a separate (autonomous) connection, so
-- they survive the rollback of the failed refresh; no foreign key, for the same reason (the
-- failing release's row may be locked or not yet committed).
CREATE TABLE anon.refresh_history (
    refresh_id   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    release_id   integer          NOT NULL,
    release_name text             NOT NULL,   -- schema.name at the time, for dropped releases
    started_at   timestamptz      NOT NULL,
    seconds      double precision NOT NULL,
    succeeded    boolean          NOT NULL,
    row_count    bigint,
    achieved_k   integer,
    error        text,
    sqlstate     text
);
CREATE INDEX refresh_history_release ON anon.refresh_history (release_id, started_at DESC);
COMMENT ON TABLE anon.refresh_history IS
    'Every refresh of a release: when, how long, rows and k achieved, or the error that made it fail.';

SELECT pg_catalog.pg_extension_config_dump('anon.analysts', '');
SELECT pg_catalog.pg_extension_config_dump('anon.refresh_history', '');
SELECT pg_catalog.pg_extension_config_dump('anon.refresh_history_refresh_id_seq', '');
