-- What the backend really runs: the interpreter, our package, and its dependencies.

CREATE OR REPLACE FUNCTION anon.versions()
RETURNS TABLE (component text, version text, location text)
LANGUAGE plpython3u STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#BOOTSTRAP
from plpy_anon.db import info
return info.versions()
$$;
COMMENT ON FUNCTION anon.versions() IS
    'Python, plpy_anon and dependency versions loaded in this backend, with where each was loaded from.';
