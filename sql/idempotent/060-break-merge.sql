-- Break-Merge releases (Nadimpalli & Vatsavayi): a QI table (generalized QIs + gid) and one sensitive table
-- (gid, value, count) per sensitive attribute; Bayesian-network dependency detection over any
-- release; knowledge-breach probabilities of a plain vs a Break-Merge release.

-- The run behind a Break-Merge release, called once by the storage view's query (MATERIALIZED
-- CTE). STABLE: it reads the source in the query's snapshot.
#WRAP anon._break_merge_run(release_id integer) RETURNS jsonb STABLE
CREATE OR REPLACE FUNCTION anon._break_merge_run_py(release_id integer)
RETURNS jsonb
LANGUAGE plpython3u STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db.methods import break_merge
return break_merge.run_release(plpy, GD, release_id)
$$;
