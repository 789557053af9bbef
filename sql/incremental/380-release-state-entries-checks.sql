-- A stable release's entries and steps are followed element by element (docs/republication.md,
-- "What it remembers"): a NULL or nested element, a negative version or group, a held back
-- person's hash cut short or a version without a next one is no state to follow, so a row
-- holding one is refused when written; the refresh reads rows restored from elsewhere the same
-- way.
ALTER TABLE anon.release_state
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
