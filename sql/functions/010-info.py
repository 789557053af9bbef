"""What the backend really runs: the interpreter, our package, and its dependencies.

Declarations: see sql/build.py (the SQL, the error handling and docs/sql-reference.md are
generated from them).
"""

FUNCTIONS = [
    function(
        'versions',
        args=[],
        returns='TABLE (component text, version text, location text)',
        volatility='STABLE',
        python='info.versions', plpy=False,
        comment='Python, plpy_anon and dependency versions loaded in this backend, with where each was loaded from.',
    ),
]
