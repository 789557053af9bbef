-- Pattern-preserving releases (localities + random walk, paper 002): numeric columns get new
-- values that keep a sampled fraction of their locality properties, as materialized views.

CREATE OR REPLACE FUNCTION anon.pattern_view(
    source         regclass,
    columns        text[],
    segment        integer          DEFAULT 100,
    sample         double precision DEFAULT 0.3,
    iterations     integer          DEFAULT 4000,
    seed           bigint           DEFAULT NULL,
    bounds         jsonb            DEFAULT NULL,
    sensitive      text[]           DEFAULT NULL,
    identifiers    text[]           DEFAULT NULL,
    release_name   text             DEFAULT NULL,
    release_schema text             DEFAULT 'release',
    replace        boolean          DEFAULT false,
    delta          double precision DEFAULT 16,
    max_unchanged  double precision DEFAULT 0.10
)
RETURNS text
LANGUAGE plpython3u VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import pattern
return pattern.pattern_view(plpy, source, columns=columns, segment=segment, sample=sample,
                            iterations=iterations, seed=seed, bounds=bounds, sensitive=sensitive,
                            identifiers=identifiers, release_name=release_name,
                            release_schema=release_schema, replace=replace, delta=delta,
                            max_unchanged=max_unchanged, GD=GD)
$$;
COMMENT ON FUNCTION anon.pattern_view(regclass, text[], integer, double precision, integer, bigint, jsonb, text[], text[], text, text, boolean, double precision, double precision) IS
    'Creates a materialized view in which the numeric columns are replaced by values from a random walk that keeps a sampled fraction of their locality properties (sorted segments of segment values; bounds default to each column''s observed range), keeps sensitive columns and drops the rest; returns its qualified name. Each locality may bend by delta mean gaps of its sorted segment; a column of which more than max_unchanged of the values come out unchanged (counted in SQL against the source) is refused (22000). Each refresh walks with a new seed unless seed is given.';

-- The walk behind a pattern release, called from the release's own query. STABLE so that it reads
-- the source in the same snapshot as the query that joins its result back to the source by ctid.
CREATE OR REPLACE FUNCTION anon._pattern_run(release_id integer)
RETURNS anon.pattern_values
LANGUAGE plpython3u STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import pattern
return pattern.run_release(plpy, GD, release_id)
$$;
COMMENT ON FUNCTION anon._pattern_run(integer) IS
    'Internal: reads the source of pattern release release_id, walks its columns and returns the new values by row ctid.';

CREATE OR REPLACE FUNCTION anon.distortion(source regclass, release text)
RETURNS TABLE (column_name text, distortion double precision, rank_correlation double precision,
               preserved_fraction double precision)
LANGUAGE plpython3u STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import pattern
return pattern.distortion_report(plpy, source, release)
$$;
COMMENT ON FUNCTION anon.distortion(regclass, text) IS
    'Distortion of a pattern release as measured at its last build or refresh: per substituted column the mean relative error Dst, the Spearman rank correlation with the source and the fraction of sampled localities preserved (1.0); the row with column_name NULL is the overall Dst.';
