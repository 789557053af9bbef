"""The thin layer between PostgreSQL and the pure core, running inside the backend.

Every function here receives ``plpy`` from a PL/Python body in ``sql/``; none of them is imported
outside the backend. Names are built with ``plpy.quote_ident`` and values travel as bound
parameters (``plpy.prepare``), never pasted into SQL text.
"""
