-- Which groups of each stored version of a stable release still have someone in the table
-- (docs/republication.md, "What it remembers"): an analyst links an earlier class to the
-- classes now only through people in both versions, so the release forms the same parts. Each
-- person's entry (the version that first held them, published or held back, and their group
-- then) and each version's step (the group of the next version holding each of its groups) give
-- every person's group in every stored version. Releases stored before have no entries: their
-- first refresh takes each person's group of the newest version as their entry, and versions
-- older than that keep following every earlier group to the group holding it now.
ALTER TABLE anon.release_state
    ADD COLUMN entries         integer[],  -- each person's entry: a position (from 0) in entry_versions/entry_groups; NULL: stored before
    ADD COLUMN entry_versions  integer[],  -- the distinct entries: the version that first held them
    ADD COLUMN entry_groups    integer[],  -- and their group in it
    ADD COLUMN waiting_persons bytea,      -- the people the newest version held back (SHA-256, ascending)
    ADD COLUMN waiting_entries integer[],  -- and the entry of each
    ADD COLUMN version         integer,    -- the version the state is of
    ADD COLUMN entries_since   integer,    -- the oldest version the entries follow people in
    ADD CONSTRAINT entries_aligned CHECK (
        entries IS NULL OR (
            pg_catalog.cardinality(entries) = pg_catalog.cardinality(member_groups)
            AND pg_catalog.cardinality(entry_versions) = pg_catalog.cardinality(entry_groups)
            AND pg_catalog.octet_length(waiting_persons) = 32 * pg_catalog.cardinality(waiting_entries)
            AND version IS NOT NULL AND entries_since IS NOT NULL));
ALTER TABLE anon.release_state ALTER COLUMN waiting_persons SET STORAGE EXTERNAL;
ALTER TABLE anon.release_versions
    ADD COLUMN next_groups integer[];  -- the group of the next version holding each group; NULL: the newest, or stored before
