"""plpy_anon: anonymized releases of PostgreSQL tables, computed inside the database.

The package has four layers, imported strictly in this order:

* ``plpy_anon.core``   -- pure algorithms and metrics on numpy/pandas (no database import);
* ``plpy_anon.db``     -- the thin layer running inside the backend, handed ``plpy``;
* SQL in ``sql/``      -- the extension's surface, whose PL/Python bodies call ``plpy_anon.db``;
* ``plpy_anon.client`` -- psycopg client and the ``plpy-anon`` CLI, talking SQL only.
"""

__version__ = "0.2.0"
