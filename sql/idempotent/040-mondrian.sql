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

-- Class ids 0, 1, ... each repeated as often as its size says, in that order: the class of each
-- row of a partition whose rows come grouped by class (class_sizes). The LATERAL call makes a
-- nested loop, which emits the inner rows of each outer row in turn, in the outer's order.
CREATE OR REPLACE FUNCTION anon._class_ids_by_size(class_sizes integer[])
RETURNS SETOF integer
LANGUAGE sql IMMUTABLE ROWS 100000
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT (c.class_no - 1)::integer
    FROM unnest($1) WITH ORDINALITY AS c(size, class_no)
    CROSS JOIN LATERAL generate_series(1, c.size) AS r
$$;

-- The rows of a partitioning run as a relation: each kept row's (tableoid, ctid), class and
-- release position; rows of a negative class (suppressed) are left out. Two layouts (see
-- anon.partition): per-row class ids and positions, or rows in release order with class sizes
-- (position = ordinal; their ctids as text, row_ctids, or as bytes, ctids_utf8: see
-- sql/incremental/170-partition-ctid-bytes.sql). row_tableoids is NULL when the source is one relation: every row then
-- belongs to `source`. The layout test has no row variable, so the planner makes it a one-time
-- filter and the other branch never runs. Not inlinable (it pins search_path), so the planner
-- uses its ROWS estimate and joins the source by hashing on (tableoid, ctid) instead of a
-- million TID scans.
CREATE OR REPLACE FUNCTION anon._partition_rows(p anon.partition, source regclass)
RETURNS TABLE (row_tableoid oid, row_ctid tid, class_id integer, row_position integer)
LANGUAGE sql IMMUTABLE ROWS 100000
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(u.row_tableoid, $2::oid), u.row_ctid, u.class_id, u.row_position
    FROM unnest($1.row_tableoids::oid[], $1.row_ctids::tid[], $1.class_ids::integer[],
                $1.row_positions::integer[]) AS u(row_tableoid, row_ctid, class_id, row_position)
    WHERE $1.class_sizes IS NULL AND u.class_id >= 0
    UNION ALL
    SELECT coalesce(g.row_tableoid, $2::oid), g.row_ctid, g.class_id, g.row_position::integer
    FROM ROWS FROM (unnest($1.row_tableoids::oid[]),
                    unnest(coalesce($1.row_ctids,
                                    pg_catalog.convert_from($1.ctids_utf8, 'UTF8'))::tid[]),
                    anon._class_ids_by_size($1.class_sizes::integer[]))
         WITH ORDINALITY AS g(row_tableoid, row_ctid, class_id, row_position)
    WHERE $1.class_sizes IS NOT NULL
$$;
