-- Privacy by default: which columns of a table look like they identify people (by name, English
-- and French, and by a sample of values). A release refuses a table whose undeclared columns look
-- identifying (SQLSTATE 42P10); this function lists every finding.

CREATE OR REPLACE FUNCTION anon.detect_identifiers(source regclass, sample_size integer DEFAULT 1000)
RETURNS TABLE (column_name name, data_type text, kind text, confidence text, evidence text,
               declared_role text, blocks_release boolean)
LANGUAGE plpython3u VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import identifiers
return identifiers.detect_identifiers(plpy, source, sample_size)
$$;
COMMENT ON FUNCTION anon.detect_identifiers(regclass, integer) IS
    'Columns that look identifying (name, email, phone, national_id, identifier, address, network_id, free_text, near_unique, ...), by column name and a random sample of sample_size rows; blocks_release: an undeclared column a release would refuse (declare it with anon.set_column_role).';
