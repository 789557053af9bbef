-- Trust- and purpose-aware releases (paper 001): requesters, their trust, purposes and the
-- release whose degree of anonymisation follows trust and whose levels follow the purpose.

-- The run behind a trust-aware release, called from the release's own query. STABLE: it reads
-- the source in the query's snapshot, so the ctids it returns are those the join sees.
#WRAP anon._trust_partition(release_id integer) RETURNS anon.partition STABLE
CREATE OR REPLACE FUNCTION anon._trust_partition_py(release_id integer)
RETURNS anon.partition
LANGUAGE plpython3u STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db.methods import trust
return trust.partition(plpy, GD, release_id)
$$;
