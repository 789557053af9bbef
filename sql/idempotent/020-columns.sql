-- Declaring what each column is (identifier, quasi-identifier, sensitive) and how categorical
-- quasi-identifiers generalize (value-generalization hierarchies).

CREATE OR REPLACE FUNCTION anon.set_column_role(source regclass, column_name text, role text)
RETURNS void
LANGUAGE plpython3u VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import columns
columns.set_column_role(plpy, source, column_name, role)
$$;
COMMENT ON FUNCTION anon.set_column_role(regclass, text, text) IS
    'Declares a column''s role for every release of the table: identifier, quasi_identifier, sensitive or ignored; NULL role removes the declaration.';

CREATE OR REPLACE FUNCTION anon.column_roles(source regclass)
RETURNS TABLE (column_name text, data_type text, role text, declared boolean, generalized_as text)
LANGUAGE plpython3u STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import columns
return columns.describe_roles(plpy, source)
$$;
COMMENT ON FUNCTION anon.column_roles(regclass) IS
    'The role each column of the table takes in a release (declared, or the documented default), and how a quasi-identifier is released.';

CREATE OR REPLACE FUNCTION anon.set_hierarchy(source regclass, column_name text, paths text[])
RETURNS integer
LANGUAGE plpython3u VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import columns
return columns.set_hierarchy(plpy, source, column_name, paths)
$$;
COMMENT ON FUNCTION anon.set_hierarchy(regclass, text, text[]) IS
    'Registers a value-generalization hierarchy for a categorical column: a 2-D array, one row per leaf: leaf, parent, ..., root (rows padded with NULL). Labels are taken literally (surrounding spaces and '''' are values like any other). Returns the number of leaves.';

CREATE OR REPLACE FUNCTION anon.set_hierarchy_csv(source regclass, column_name text, csv text, sep text DEFAULT ';')
RETURNS integer
LANGUAGE plpython3u VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import columns
return columns.set_hierarchy_csv(plpy, source, column_name, csv, sep)
$$;
COMMENT ON FUNCTION anon.set_hierarchy_csv(regclass, text, text, text) IS
    'Registers a hierarchy given as ARX-style CSV text (one line per leaf: leaf;parent;...;*). Unquoted cells are trimmed and empty ones ignored; a cell in double quotes is taken literally (" Private" keeps its space, "" is the empty string). Returns the number of leaves.';

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
