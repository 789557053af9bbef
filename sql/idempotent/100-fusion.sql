-- Fusion-resilient enterprise releases (FRED: Kumar, Jaiswal & Gupta): the identifier is kept, the sensitive
-- column suppressed, the numeric attributes microaggregated with MDAV, and k chosen against a
-- simulated fusion attack that joins the release with auxiliary facts on the identifier.

-- The MDAV run behind a fusion-resilient release, called from the release's own query. STABLE so
-- that it reads the source in the same snapshot as the query that joins its result back by ctid.
#WRAP anon._fusion_partition(release_id integer) RETURNS anon.partition STABLE
CREATE OR REPLACE FUNCTION anon._fusion_partition_py(release_id integer)
RETURNS anon.partition
LANGUAGE plpython3u STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db.methods import fusion
return fusion.partition(plpy, GD, release_id)
$$;
