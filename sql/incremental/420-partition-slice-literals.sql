-- A slice's literals (anon.partition_slice) as one text per literal column, not one jsonb: each
-- column's class literals joined by a separator character that none of them holds (SQL splits
-- them with string_to_table), as UTF-8 bytes (PL/Python copies a bytes value once). Parsing the
-- jsonb of a 1M-row release (18 MB, character by character) was a quarter of its storage SQL.
-- `classes` stays for the releases made before, whose queries read it (parameters without
-- "packed_literals").
ALTER TYPE anon.partition_slice
    ADD ATTRIBUTE literals bytea[],    -- per literal column (q<i> by i, then s<j> by j): its text
    ADD ATTRIBUTE separators text;     -- per literal column: its separator, then its NULL marker
