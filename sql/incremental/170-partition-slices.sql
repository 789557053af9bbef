-- The Mondrian family's partitioning run returns its result in slices (SETOF
-- anon.partition_slice): consecutive whole classes of about a million rows each, in release
-- order. A slice carries the ctids of its rows in that order (the tid[] literal's ASCII text as
-- bytes: PL/Python copies a bytes value into a bytea once, a str into a text three times), each
-- class's size, and each class's generalized literals. PostgreSQL frees the memory of converting
-- one slice before asking for the next, and the release query reads the slices one at a time:
-- one result of ~230 MB (10M rows) held, copied and re-read whole cost ~0.5 GB of the backend's
-- peak. anon.partition stays for the methods that hand back one row per source row.
CREATE TYPE anon.partition_slice AS (
    first_position bigint,     -- release position (0-based) of the slice's first row
    first_class    integer,    -- class id of the slice's first class
    class_sizes    text,       -- int4[] literal: rows of each class of the slice, in order
    ctids_utf8     bytea,      -- tid[] literal (ASCII) of the slice's rows in release order
    row_tableoids  text,       -- oid[] literal of their relations, NULL for a one-relation source
    classes        jsonb       -- {"q<i>": [literal per class of the slice]} for literal QIs
);
