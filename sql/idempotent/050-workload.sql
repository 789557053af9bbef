-- Issue 3: application-aware releases. The analysts' workload (pg_stat_statements, anon.workload,
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

CREATE OR REPLACE FUNCTION anon.learn_priorities(
    source                 regclass,
    projection_share       double precision DEFAULT 0.5,
    use_pg_stat_statements boolean          DEFAULT true
)
RETURNS TABLE (column_name name, projection bigint, selection bigint, group_by bigint,
               order_by bigint, weight double precision)
LANGUAGE plpython3u VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import workload
return workload.learn_priorities(plpy, source, projection_share=projection_share,
                                 use_pg_stat_statements=use_pg_stat_statements)
$$;
COMMENT ON FUNCTION anon.learn_priorities(regclass, double precision, boolean) IS
    'Parses the workload (anon.workload, and pg_stat_statements when installed), counts how each column of the table is used (SELECT list, WHERE/JOIN/HAVING, GROUP BY, ORDER BY), stores the normalized weights in anon.priorities and the predicate cut points in anon.workload_profiles, and returns the weights. Unparseable statements are counted in a NOTICE, never fatal.';

CREATE OR REPLACE FUNCTION anon.mondrian_view(
    source            regclass,
    k                 integer,
    priorities        text,
    l                 integer          DEFAULT NULL,
    quasi_identifiers text[]           DEFAULT NULL,
    sensitive         text[]           DEFAULT NULL,
    identifiers       text[]           DEFAULT NULL,
    target            text             DEFAULT NULL,
    metric_weights    jsonb            DEFAULT NULL,
    cut_points        boolean          DEFAULT NULL,
    cut_tolerance     double precision DEFAULT 0.5,
    release_name      text             DEFAULT NULL,
    release_schema    text             DEFAULT 'release',
    replace           boolean          DEFAULT false
)
RETURNS text
LANGUAGE plpython3u VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import prioritized_mondrian
return prioritized_mondrian.mondrian_view(
    plpy, source, k=k, priorities=priorities, l=l, quasi_identifiers=quasi_identifiers,
    sensitive=sensitive, identifiers=identifiers, target=target, metric_weights=metric_weights,
    cut_points=cut_points, cut_tolerance=cut_tolerance, release_name=release_name,
    release_schema=release_schema, replace=replace, GD=GD)
$$;
COMMENT ON FUNCTION anon.mondrian_view(regclass, integer, text, integer, text[], text[], text[], text, jsonb, boolean, double precision, text, text, boolean) IS
    'Prioritized Mondrian release (materialized view): priorities => ''learned'' (from anon.learn_priorities), a JSON object of column weights, or ''none''; target => a class column adds information gain to the split score; cut_points => true snaps cuts to the workload''s predicate constants. Returns the release''s qualified name.';

CREATE OR REPLACE FUNCTION anon.mondrian_view(
    source            regclass,
    k                 integer,
    priorities        jsonb,
    l                 integer          DEFAULT NULL,
    quasi_identifiers text[]           DEFAULT NULL,
    sensitive         text[]           DEFAULT NULL,
    identifiers       text[]           DEFAULT NULL,
    target            text             DEFAULT NULL,
    metric_weights    jsonb            DEFAULT NULL,
    cut_points        boolean          DEFAULT NULL,
    cut_tolerance     double precision DEFAULT 0.5,
    release_name      text             DEFAULT NULL,
    release_schema    text             DEFAULT 'release',
    replace           boolean          DEFAULT false
)
RETURNS text
LANGUAGE plpython3u VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import prioritized_mondrian
return prioritized_mondrian.mondrian_view(
    plpy, source, k=k, priorities=priorities, l=l, quasi_identifiers=quasi_identifiers,
    sensitive=sensitive, identifiers=identifiers, target=target, metric_weights=metric_weights,
    cut_points=cut_points, cut_tolerance=cut_tolerance, release_name=release_name,
    release_schema=release_schema, replace=replace, GD=GD)
$$;
COMMENT ON FUNCTION anon.mondrian_view(regclass, integer, jsonb, integer, text[], text[], text[], text, jsonb, boolean, double precision, text, text, boolean) IS
    'Prioritized Mondrian release with explicit weights, e.g. priorities => ''{"age": 1, "sex": 0}''::jsonb (see the text overload for the other arguments).';

-- The partitioning run behind a prioritized Mondrian release (STABLE: same snapshot as the
-- release query that joins its result back to the source by ctid).
CREATE OR REPLACE FUNCTION anon._prioritized_mondrian_partition(release_id integer)
RETURNS anon.partition
LANGUAGE plpython3u STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import prioritized_mondrian
return prioritized_mondrian.partition(plpy, GD, release_id)
$$;

CREATE OR REPLACE FUNCTION anon.release_report(release text, wdm_weights jsonb DEFAULT NULL)
RETURNS TABLE (release_name text, method text, k integer, achieved_k integer, classes integer,
               row_count bigint, c_dm bigint, c_wdm double precision, ncp_percent double precision,
               ncp_per_attribute jsonb, weights jsonb, workload_queries integer,
               mean_precision double precision, mean_recall double precision,
               weighted_precision double precision, weighted_recall double precision)
LANGUAGE plpython3u VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import workload
return workload.release_report(plpy, release, wdm_weights)
$$;
COMMENT ON FUNCTION anon.release_report(text, jsonb) IS
    'Utility of a Mondrian-family release: k, C_DM, weighted discernibility C_WDM (each row charged, per quasi-identifier, the source rows whose value lies in its released region; weights: wdm_weights, else the source''s learned priorities, else equal -- never the release''s own, so that releases of one source compare), NCP overall and per attribute, and the precision/recall of the stored workload''s predicates on the quasi-identifiers; the figures are also stored in anon.releases.metrics.';

CREATE OR REPLACE FUNCTION anon.workload_precision(release text)
RETURNS TABLE (query text, frequency bigint, true_rows bigint, released_rows bigint,
               answer_precision double precision, answer_recall double precision)
LANGUAGE plpython3u VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import workload
return workload.workload_precision(plpy, release)
$$;
COMMENT ON FUNCTION anon.workload_precision(text) IS
    'Per stored query with a predicate on the release''s quasi-identifiers: rows satisfying it in the source, rows whose released class may satisfy it, precision and recall.';
