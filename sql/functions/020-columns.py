"""Declaring what each column is (identifier, quasi-identifier, sensitive) and how categorical
quasi-identifiers generalize (value-generalization hierarchies).

Declarations: see sql/build.py (the SQL, the error handling and docs/sql-reference.md are
generated from them).
"""

FUNCTIONS = [
    function(
        'set_column_role',
        args=[
            'source regclass',
            'column_name text',
            'role text',
        ],
        returns='void',
        nullable=['role'],  # NULL removes the declaration
        python='columns.set_column_role', positional=3,
        comment="Declares a column's role for every release of the table: identifier, quasi_identifier, sensitive or ignored; NULL role removes the declaration.",
    ),
    function(
        'column_roles',
        args=[
            'source regclass',
        ],
        returns='TABLE (column_name text, data_type text, role text, declared boolean, generalized_as text)',
        volatility='STABLE',
        python='columns.describe_roles', positional=1,
        comment='The role each column of the table takes in a release (declared, or the documented default), and how a quasi-identifier is released.',
    ),
    function(
        'set_hierarchy',
        args=[
            'source regclass',
            'column_name text',
            'paths text[]',
        ],
        returns='integer',
        python='columns.set_hierarchy', positional=3,
        comment="Registers a value-generalization hierarchy for a categorical column: a 2-D array, one row per leaf: leaf, parent, ..., root (rows padded with NULL). Labels are taken literally (surrounding spaces and '' are values like any other). Returns the number of leaves.",
    ),
    function(
        'set_hierarchy_csv',
        args=[
            'source regclass',
            'column_name text',
            'csv text',
            "sep text DEFAULT ';'",
        ],
        returns='integer',
        python='columns.set_hierarchy_csv', positional=4,
        comment='Registers a hierarchy given as ARX-style CSV text (one line per leaf: leaf;parent;...;*). Unquoted cells are trimmed and empty ones ignored; a cell in double quotes is taken literally (" Private" keeps its space, "" is the empty string). Returns the number of leaves.',
    ),
]
