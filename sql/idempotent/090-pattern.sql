-- Pattern-preserving releases (localities + random walk): numeric columns get new
-- values that keep a sampled fraction of their locality properties, as materialized views.

-- The walk behind a pattern release, called from the release's own query. STABLE so that it reads
-- the source in the same snapshot as the query that joins its result back to the source by ctid.
#WRAP anon._pattern_run(release_id integer) RETURNS anon.pattern_values STABLE
CREATE OR REPLACE FUNCTION anon._pattern_run_py(release_id integer)
RETURNS anon.pattern_values
LANGUAGE plpython3u STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db.methods import pattern
return pattern.run_release(plpy, GD, release_id)
$$;
COMMENT ON FUNCTION anon._pattern_run_py(integer) IS
    'Internal: reads the source of pattern release release_id, walks its columns and returns the new values by row ctid.';
