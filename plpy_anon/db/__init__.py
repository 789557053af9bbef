"""The thin layer between PostgreSQL and the pure core, running inside the backend.

Every function here receives ``plpy`` from a PL/Python body in ``sql/``; none of them is imported
outside the backend. Names are built with ``plpy.quote_ident`` and values travel as bound
parameters (``plpy.prepare``), never pasted into SQL text.
"""
import os

# before numpy's and pyarrow's first import in the backend, so that it stays one thread (it shares
# the server's cores with the other backends): OpenBLAS would start a thread per core, pyarrow's
# bundled jemalloc its background thread (unused: pyarrow allocates with the system's malloc,
# which also factorizes the read's texts ~10 % faster than its default mimalloc); settings in the
# server's environment are kept
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
os.environ.setdefault("JE_ARROW_MALLOC_CONF", "background_thread:false")
