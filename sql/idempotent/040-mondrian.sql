-- Strict multidimensional Mondrian (LeFevre et al., ICDE 2006): k-anonymous (optionally
-- l-diverse) releases as materialized views.

-- The partitioning run behind a Mondrian release, called from the release's own query. STABLE so
-- that it reads the source in the same snapshot as the query that joins its result back to the
-- source by ctid.
CREATE OR REPLACE FUNCTION anon._mondrian_partition(release_id integer)
RETURNS anon.partition
LANGUAGE plpython3u STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import mondrian
return mondrian.partition(plpy, GD, release_id)
$$;

-- The rows of a partitioning run as a relation: each kept row's (tableoid, ctid), class and
-- release position; rows of a negative class (suppressed) are left out. row_tableoids is NULL when
-- the source is one relation: every row then belongs to `source`. Not inlinable (it pins
-- search_path), so the planner uses its ROWS estimate and joins the source by hashing on
-- (tableoid, ctid) instead of a million TID scans.
CREATE OR REPLACE FUNCTION anon._partition_rows(p anon.partition, source regclass)
RETURNS TABLE (row_tableoid oid, row_ctid tid, class_id integer, row_position integer)
LANGUAGE sql IMMUTABLE ROWS 100000
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(u.row_tableoid, $2::oid), u.row_ctid, u.class_id, u.row_position
    FROM unnest($1.row_tableoids::oid[], $1.row_ctids::tid[], $1.class_ids::integer[],
                $1.row_positions::integer[]) AS u(row_tableoid, row_ctid, class_id, row_position)
    WHERE u.class_id >= 0
$$;
