-- Release schemas are the extension's own: created by it (anon.create_release / ensure_schema),
-- holding releases and nothing else. Analysts get USAGE on these schemas only, so USAGE never
-- hands them a function, type or table someone else put in a schema. A release is refused in an
-- existing schema not listed here, or in one that holds anything but releases.
--
-- A schema is identified by its OID, never by its name alone: a schema dropped outside
-- plpy_anon (DROP SCHEMA ... CASCADE) leaves its row here, and anyone with CREATE on the
-- database may create a new schema of that name. That schema has another OID and is not a
-- release schema: no release goes into it, nothing is granted on it, and no release recorded
-- in the old one is refreshed, verified or granted there. When plpy_anon itself creates a schema
-- of that name again, the row takes the new OID.
-- The OID is kept as regnamespace (and the release's owner as regrole): pg_dump writes them as
-- names and a restore reads them back as the new cluster's OIDs, so restored releases are
-- recognised by what a dump preserves.
CREATE TABLE anon.release_schemas (
    schema_name name        PRIMARY KEY,
    created_at  timestamptz NOT NULL DEFAULT now(),
    schema_oid  regnamespace NOT NULL
);
COMMENT ON TABLE anon.release_schemas IS
    'Schemas plpy_anon created for releases: the only schemas analysts receive USAGE on (anon.grant_analyst).';
COMMENT ON COLUMN anon.release_schemas.schema_oid IS
    'pg_namespace OID of the schema plpy_anon created: a schema of this name with another OID was re-created outside plpy_anon and is not a release schema.';

SELECT pg_catalog.pg_extension_config_dump('anon.release_schemas', '');

-- Likewise a release: the OID of the schema it was created in, and the role that created (owns)
-- its relations. A relation carrying a release's name in another schema of the same name, or
-- owned by another role, is not the release: refresh, verification, grants and drop leave it
-- alone (a refresh says the release is stale; anon.drop_release removes the catalog row).
ALTER TABLE anon.releases
    ADD COLUMN schema_oid    regnamespace NOT NULL,
    ADD COLUMN release_owner regrole NOT NULL,
    ADD COLUMN definitions   jsonb;

COMMENT ON COLUMN anon.releases.schema_oid IS
    'pg_namespace OID of the release schema the release was created in.';
COMMENT ON COLUMN anon.releases.release_owner IS
    'pg_authid OID of the role that created the release and owns its relations.';
COMMENT ON COLUMN anon.releases.definitions IS
    'md5 of pg_get_viewdef of each of the release''s relations as plpy_anon last built them (names, not OIDs: a restored release keeps them): a relation whose definition differs was changed outside plpy_anon, and nothing runs its query on the release''s behalf.';
