-- Snapshots (anon.snapshot): a release copied into a plain table that leaves the database with
-- pg_dump -t -- its rows and columns only, no dependency on the source or on the extension.
-- Snapshots live in schemas of their own (default "snapshot"), never in a release schema:
-- release schemas hold releases only, and every analyst registered with anon.grant_analyst gets
-- USAGE on them, whereas a snapshot is read by its owner and whoever the owner grants it to.
-- A snapshot outlives its release: anon.drop_release leaves it (and this row) in place; the row
-- keeps the release's identity and metadata as they were when the snapshot was taken.
CREATE TABLE anon.snapshots (
    snapshot_id     integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    release_id      integer     NOT NULL,   -- anon.releases.release_id at the time (no FK: survives drop_release)
    release         text        NOT NULL,   -- the release's schema.name at the time
    relation        regclass    NOT NULL,   -- the snapshot table (regclass: survives dump and restore)
    snapshot_schema name        NOT NULL,
    snapshot_name   name        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    created_by      name        NOT NULL DEFAULT current_user,
    row_count       bigint      NOT NULL,
    metadata        jsonb       NOT NULL,
    UNIQUE (snapshot_schema, snapshot_name)
);
COMMENT ON TABLE anon.snapshots IS
    'One row per snapshot taken by anon.snapshot: which release (and relation), where the table is, its rows and the release''s metadata at the time. Snapshots survive anon.drop_release.';

SELECT pg_catalog.pg_extension_config_dump('anon.snapshots', '');
SELECT pg_catalog.pg_extension_config_dump('anon.snapshots_snapshot_id_seq', '');
