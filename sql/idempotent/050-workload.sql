-- Application-aware releases. The analysts' workload (pg_stat_statements, anon.workload,
-- server logs loaded by the client) -> attribute priorities and predicate cut points ->
-- prioritized Mondrian -> the release report (C_DM, C_WDM, NCP, workload precision).

CREATE OR REPLACE FUNCTION anon.add_queries(
    queries     text[],
    frequencies bigint[]      DEFAULT NULL,
    executed_at timestamptz[] DEFAULT NULL,
    origin      text          DEFAULT 'sql'
)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    added bigint;
BEGIN
    IF queries IS NULL THEN
        RAISE EXCEPTION 'anon.add_queries: argument queries must not be NULL'
            USING ERRCODE = '22023', HINT = 'Pass an array of query texts: ARRAY[''SELECT ...''].';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(frequencies) f WHERE f < 1) THEN
        RAISE EXCEPTION 'anon.add_queries: argument frequencies must hold positive counts, not %',
                        (SELECT min(f) FROM unnest(frequencies) f)
            USING ERRCODE = '22023',
                  HINT = 'A frequency is how many times the query ran: 1 or more (NULL means 1).';
    END IF;
    IF frequencies IS NOT NULL AND cardinality(frequencies) <> cardinality(queries) THEN
        RAISE EXCEPTION 'add_queries got % queries but % frequencies', cardinality(queries), cardinality(frequencies)
            USING ERRCODE = '22023', HINT = 'Give one frequency per query, or leave frequencies NULL (each query ran once).';
    END IF;
    IF executed_at IS NOT NULL AND cardinality(executed_at) <> cardinality(queries) THEN
        RAISE EXCEPTION 'add_queries got % queries but % timestamps', cardinality(queries), cardinality(executed_at)
            USING ERRCODE = '22023', HINT = 'Give one timestamp per query, or leave executed_at NULL.';
    END IF;
    INSERT INTO anon.workload (query, frequency, executed_at, origin)
    SELECT q.query, coalesce(q.frequency, 1), q.executed_at, coalesce(add_queries.origin, 'sql')
    FROM unnest(queries, frequencies, executed_at) AS q(query, frequency, executed_at)
    WHERE q.query IS NOT NULL AND btrim(q.query) <> '';
    GET DIAGNOSTICS added = ROW_COUNT;
    RETURN added;
END
$$;
COMMENT ON FUNCTION anon.add_queries(text[], bigint[], timestamptz[], text) IS
    'Adds query texts (with optional frequencies and execution times) to the workload store anon.workload; returns how many were added.';
