-- The release catalog: declared column roles, value-generalization hierarchies, and one row per
-- release. Every release method (Mondrian, Break-Merge, trust-aware, pattern-preserving,
-- fusion-resilient) records itself here, so refresh, grants and reports work the same for all.

CREATE TABLE anon.column_roles (
    source      regclass NOT NULL,
    column_name name     NOT NULL,
    role        text     NOT NULL CHECK (role IN ('identifier', 'quasi_identifier', 'sensitive', 'ignored')),
    PRIMARY KEY (source, column_name)
);
COMMENT ON TABLE anon.column_roles IS
    'Declared role of each column: identifier (dropped), quasi_identifier (generalized), sensitive (kept), ignored (dropped).';

CREATE TABLE anon.hierarchies (
    source      regclass NOT NULL,
    column_name name     NOT NULL,
    leaf        text     NOT NULL,
    path        text[]   NOT NULL CHECK (cardinality(path) >= 2),
    PRIMARY KEY (source, column_name, leaf)
);
COMMENT ON TABLE anon.hierarchies IS
    'Value-generalization hierarchy of a categorical quasi-identifier: one row per leaf, path = leaf, parent, ..., root.';

CREATE TABLE anon.releases (
    release_id     integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    release_schema name        NOT NULL,
    release_name   name        NOT NULL,
    source         regclass    NOT NULL,
    method         text        NOT NULL,
    parameters     jsonb       NOT NULL DEFAULT '{}',
    created_at     timestamptz NOT NULL DEFAULT now(),
    refreshed_at   timestamptz,
    refresh_seconds double precision,
    row_count      bigint,
    achieved_k     integer,
    metrics        jsonb       NOT NULL DEFAULT '{}',
    last_error     text,
    last_error_at  timestamptz,
    UNIQUE (release_schema, release_name)
);
COMMENT ON TABLE anon.releases IS
    'One row per release: where it lives, how it was made (method, parameters) and what it achieved (k, metrics).';

-- pg_dump keeps the catalog's rows with the extension.
SELECT pg_catalog.pg_extension_config_dump('anon.column_roles', '');
SELECT pg_catalog.pg_extension_config_dump('anon.hierarchies', '');
SELECT pg_catalog.pg_extension_config_dump('anon.releases', '');
SELECT pg_catalog.pg_extension_config_dump('anon.releases_release_id_seq', '');

-- The result of a partitioning run, handed from Python to the release's SQL in one round trip:
-- per source row (in the order Python read them) its ctid, its class and its position in the
-- release, as array literals (parsed by array_in in C, not element by element in Python); and the
-- generalized values of each class as JSON arrays of literals, one array per quasi-identifier.
-- A ctid is unique only inside one physical relation: when the source has partitions or
-- inheritance children, row_tableoids holds each row's tableoid (same order), and the release
-- joins on (tableoid, ctid); it is NULL for a source that is one relation.
CREATE TYPE anon.partition AS (
    row_ctids     text,
    class_ids     text,
    row_positions text,
    classes       jsonb,
    row_tableoids text
);
