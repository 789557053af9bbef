-- Declaring what each column is (identifier, quasi-identifier, sensitive) and how categorical
-- quasi-identifiers generalize (value-generalization hierarchies).

CREATE OR REPLACE FUNCTION anon.drop_hierarchy(source regclass, column_name text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    dropped boolean;
BEGIN
    IF $1 IS NULL OR $2 IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = pg_catalog.format('anon.drop_hierarchy: argument %s must not be NULL',
                                        CASE WHEN $1 IS NULL THEN 'source' ELSE 'column_name' END),
            HINT = 'Name the table and the column whose hierarchy to remove.';
    END IF;
    WITH d AS (DELETE FROM anon.hierarchies h WHERE h.source = $1 AND h.column_name = $2 RETURNING 1)
    SELECT count(*) > 0 INTO dropped FROM d;
    RETURN dropped;
END
$$;
COMMENT ON FUNCTION anon.drop_hierarchy(regclass, text) IS
    'Removes the hierarchy of a column (its values are then generalized to value sets). True if one existed.';
