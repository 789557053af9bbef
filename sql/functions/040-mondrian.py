"""Strict multidimensional Mondrian (LeFevre et al., ICDE 2006): k-anonymous (optionally l-diverse)
releases as materialized views.

Declarations: see sql/build.py (the SQL, the error handling and docs/sql-reference.md are
generated from them).
"""

FUNCTIONS = [
    function(
        'mondrian_view',
        args=[
            'source regclass',
            'k integer',
            'l integer DEFAULT NULL',
            'quasi_identifiers text[] DEFAULT NULL',
            'sensitive text[] DEFAULT NULL',
            'identifiers text[] DEFAULT NULL',
            'release_name text DEFAULT NULL',
            "release_schema text DEFAULT 'release'",
            'replace boolean DEFAULT false',
        ],
        returns='text',
        python='mondrian.mondrian_view', positional=1, gd=True,
        comment='Creates a materialized view holding a k-anonymous (and, with l, distinct l-diverse) Mondrian release of the table and returns its qualified name. Refresh it to re-anonymize current data.',
    ),
]
