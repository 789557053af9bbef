-- Release schemas are the extension's own: created by it (anon.create_release / ensure_schema),
-- holding releases and nothing else. Analysts get USAGE on these schemas only, so USAGE never
-- hands them a function, type or table someone else put in a schema. A release is refused in an
-- existing schema not listed here, or in one that holds anything but releases.
CREATE TABLE anon.release_schemas (
    schema_name name        PRIMARY KEY,
    created_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE anon.release_schemas IS
    'Schemas plpy_anon created for releases: the only schemas analysts receive USAGE on (anon.grant_analyst).';

SELECT pg_catalog.pg_extension_config_dump('anon.release_schemas', '');
