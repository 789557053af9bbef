-- A hierarchy's leaves are its column's values and go with the column or table
-- (anon._forget_dropped_hierarchies, an event trigger: 035-catalog-guard.sql); the rows of
-- columns and tables dropped before it existed go now.
DELETE FROM anon.hierarchies h
WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                  WHERE a.attrelid = h.source AND a.attname = h.column_name
                    AND a.attnum > 0 AND NOT a.attisdropped);
