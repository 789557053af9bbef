"""Privacy by default: which columns of a table look like they identify people (by name, English
and French, and by a sample of values). A release refuses a table whose undeclared columns look
identifying (SQLSTATE 42P10); this function lists every finding.

Declarations: see sql/build.py (the SQL, the error handling and docs/sql-reference.md are
generated from them).
"""

FUNCTIONS = [
    function(
        'detect_identifiers',
        args=[
            'source regclass',
            'sample_size integer DEFAULT 1000',
        ],
        returns='TABLE (column_name name, data_type text, kind text, confidence text, evidence text, declared_role text, blocks_release boolean)',
        python='identifiers.detect_identifiers', positional=2,
        comment='Columns that look identifying (name, email, phone, national_id, identifier, address, network_id, free_text, near_unique, ...), by column name and a random sample of sample_size rows; blocks_release: an undeclared column a release would refuse (declare it with anon.set_column_role).',
    ),
]
