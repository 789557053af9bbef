-- A stable release's state and versions (anon.release_state, anon.release_versions) are written
-- whole at every refresh and read whole at the next: their integer arrays, candidate sets and
-- values are compressed with lz4, not pglz, whose compression took most of the statement that
-- writes a state (a 32,561-person state: its INSERT 94 ms with pglz, 50 ms with lz4). A server
-- built without lz4 keeps pglz.
DO $lz4$
DECLARE
    col record;
BEGIN
    IF 'lz4' = ANY (SELECT pg_catalog.unnest(s.enumvals) FROM pg_catalog.pg_settings s
                    WHERE s.name = 'default_toast_compression') THEN
        FOR col IN
            SELECT a.attrelid::pg_catalog.regclass AS tbl, a.attname
            FROM pg_catalog.pg_attribute a
            WHERE a.attrelid IN ('anon.release_state'::pg_catalog.regclass,
                                 'anon.release_versions'::pg_catalog.regclass)
              AND a.attnum > 0 AND NOT a.attisdropped AND a.attstorage IN ('x', 'm')
            ORDER BY a.attrelid, a.attnum
        LOOP
            EXECUTE pg_catalog.format('ALTER TABLE %s ALTER COLUMN %I SET COMPRESSION lz4',
                                      col.tbl, col.attname);
        END LOOP;
    END IF;
END
$lz4$;
