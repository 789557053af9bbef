-- Strict multidimensional Mondrian (LeFevre et al., ICDE 2006): k-anonymous (optionally
-- l-diverse) releases as materialized views.

-- Class ids 0, 1, ... each repeated as often as its size says, in that order: the class of each
-- row of a slice whose rows come grouped by class (anon.partition_slice's class_sizes). The
-- LATERAL call makes a nested loop, which emits the inner rows of each outer row in turn, in the
-- outer's order.
CREATE OR REPLACE FUNCTION anon._class_ids_by_size(class_sizes integer[])
RETURNS SETOF integer
LANGUAGE sql IMMUTABLE ROWS 100000
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT (c.class_no - 1)::integer
    FROM unnest($1) WITH ORDINALITY AS c(size, class_no)
    CROSS JOIN LATERAL generate_series(1, c.size) AS r
$$;

-- The rows of a partitioning run that hands back one class id and release position per row
-- (anon.partition: trust, Break-Merge) as a relation: each kept row's (tableoid, ctid), class
-- and position; rows of a negative class (suppressed) are left out. row_tableoids is NULL when
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

-- The rows of one slice of a Mondrian-family run (anon.partition_slice) as a relation: each
-- row's (tableoid, ctid), class and release position, the slice's offsets added. ROWS is a
-- slice's size (plpy_anon.db.methods.mondrian_family.SLICE_ROWS): with 100000 the planner fetched a 10M-row
-- source's rows by 10M TID scans (31.7 s) rather than hashing it once (17.6 s).
CREATE OR REPLACE FUNCTION anon._partition_slice_rows(s anon.partition_slice, source regclass)
RETURNS TABLE (row_tableoid oid, row_ctid tid, class_id integer, row_position bigint)
LANGUAGE sql IMMUTABLE ROWS 1048576
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(g.row_tableoid, $2::oid), g.row_ctid, $1.first_class + g.class_id,
           $1.first_position + g.ordinal - 1
    FROM ROWS FROM (unnest($1.row_tableoids::oid[]),
                    unnest(pg_catalog.convert_from($1.ctids_utf8, 'UTF8')::tid[]),
                    anon._class_ids_by_size($1.class_sizes::integer[]))
         WITH ORDINALITY AS g(row_tableoid, row_ctid, class_id, ordinal)
$$;
