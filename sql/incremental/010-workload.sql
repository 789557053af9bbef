-- The workload store (the analysts' queries) and what is learned from it.

CREATE TABLE anon.workload (
    query_id    bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    query       text        NOT NULL CHECK (pg_catalog.btrim(query) <> ''),
    frequency   bigint      NOT NULL DEFAULT 1 CHECK (frequency > 0),
    executed_at timestamptz,
    origin      text        NOT NULL DEFAULT 'sql',
    added_at    timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE anon.workload IS
    'Query texts of the analysts'' workload (with how often they ran): filled by INSERT, anon.add_queries or the client''s load-queries; read by anon.learn_priorities together with pg_stat_statements.';

CREATE TABLE anon.priorities (
    source      regclass         NOT NULL,
    column_name name             NOT NULL,
    projection  bigint           NOT NULL,
    selection   bigint           NOT NULL,
    group_by    bigint           NOT NULL,
    order_by    bigint           NOT NULL,
    weight      double precision NOT NULL CHECK (weight >= 0),
    PRIMARY KEY (source, column_name)
);
COMMENT ON TABLE anon.priorities IS
    'Priority weight of each column learned from the workload (weight = share * projection/total projection + (1 - share) * selection/total selection); used by mondrian_view(priorities => ''learned'').';

CREATE TABLE anon.workload_profiles (
    source           regclass         PRIMARY KEY,
    learned_at       timestamptz      NOT NULL DEFAULT pg_catalog.now(),
    projection_share double precision NOT NULL,
    report           jsonb            NOT NULL,
    cut_points       jsonb            NOT NULL DEFAULT '{}',
    constants        jsonb            NOT NULL DEFAULT '{}'
);
COMMENT ON TABLE anon.workload_profiles IS
    'Per source table: when priorities were learned, what happened to the statements (report), and the predicate constants and cut points of the workload.';

SELECT pg_catalog.pg_extension_config_dump('anon.workload', '');
SELECT pg_catalog.pg_extension_config_dump('anon.workload_query_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('anon.priorities', '');
SELECT pg_catalog.pg_extension_config_dump('anon.workload_profiles', '');
