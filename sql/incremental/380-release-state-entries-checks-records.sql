-- A stable release's entries and steps are followed element by element (docs/republication.md,
-- "What it remembers"): a NULL or nested element, a negative version or group, a held back
-- person's hash cut short or a version without a next one is no state to follow, so a row
-- holding one is refused when written; the refresh reads rows restored from elsewhere the same
-- way. Beside each person's entry, their record's fingerprint and the entry since which it is
-- unchanged: an analyst may take a person whose quasi-identifiers or sensitive value changed for a
-- leaver and a joiner, which links fewer classes than everyone in both versions does, so the
-- release checks the parts he forms so too.
ALTER TABLE anon.release_state
    ADD COLUMN records                bytea,      -- each person's record fingerprint (8 bytes, aligned with persons); NULL: stored before
    ADD COLUMN record_entries         integer[],  -- the entry since which each person's record is unchanged
    ADD COLUMN waiting_records        bytea,      -- the same for the people the newest version held back
    ADD COLUMN waiting_record_entries integer[],
    ADD CONSTRAINT records_aligned CHECK (
        records IS NULL OR (
            pg_catalog.octet_length(records) = 8 * pg_catalog.cardinality(member_groups)
            AND pg_catalog.cardinality(record_entries) = pg_catalog.cardinality(member_groups)
            AND COALESCE(pg_catalog.array_ndims(record_entries), 1) = 1
            AND pg_catalog.array_position(record_entries, NULL) IS NULL
            AND 0 <= ALL (record_entries)
            AND pg_catalog.octet_length(waiting_records) = 8 * pg_catalog.cardinality(waiting_entries)
            AND pg_catalog.cardinality(waiting_record_entries) = pg_catalog.cardinality(waiting_entries)
            AND COALESCE(pg_catalog.array_ndims(waiting_record_entries), 1) = 1
            AND pg_catalog.array_position(waiting_record_entries, NULL) IS NULL
            AND 0 <= ALL (waiting_record_entries))),
    ADD CONSTRAINT entries_well_formed CHECK (
        (entries IS NULL OR (COALESCE(pg_catalog.array_ndims(entries), 1) = 1
                             AND pg_catalog.array_position(entries, NULL) IS NULL
                             AND 0 <= ALL (entries)))
        AND (entry_versions IS NULL OR (COALESCE(pg_catalog.array_ndims(entry_versions), 1) = 1
                                        AND pg_catalog.array_position(entry_versions, NULL) IS NULL
                                        AND 0 <= ALL (entry_versions)))
        AND (entry_groups IS NULL OR (COALESCE(pg_catalog.array_ndims(entry_groups), 1) = 1
                                      AND pg_catalog.array_position(entry_groups, NULL) IS NULL
                                      AND 0 <= ALL (entry_groups)))
        AND (waiting_entries IS NULL OR (COALESCE(pg_catalog.array_ndims(waiting_entries), 1) = 1
                                         AND pg_catalog.array_position(waiting_entries, NULL) IS NULL
                                         AND 0 <= ALL (waiting_entries)))
        AND (waiting_persons IS NULL OR pg_catalog.octet_length(waiting_persons) % 32 = 0)
        AND (version IS NULL OR version BETWEEN 0 AND 2147483646)
        AND (entries_since IS NULL OR entries_since >= 0));
ALTER TABLE anon.release_versions
    ADD CONSTRAINT next_groups_well_formed CHECK (
        next_groups IS NULL OR (COALESCE(pg_catalog.array_ndims(next_groups), 1) = 1
                                AND pg_catalog.array_position(next_groups, NULL) IS NULL));
