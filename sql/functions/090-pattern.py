"""Pattern-preserving releases (localities + random walk, paper 002): numeric columns get new
values that keep a sampled fraction of their locality properties, as materialized views.

Declarations: see sql/build.py (the SQL, the error handling and docs/sql-reference.md are
generated from them).
"""

FUNCTIONS = [
    release_function(
        'pattern',
        comment="Creates a materialized view in which the numeric columns are replaced by values from a random walk that keeps a sampled fraction of their locality properties (sorted segments of segment values; bounds default to each column's observed range), keeps sensitive columns and drops the rest; returns its qualified name. Each locality may bend by delta mean gaps of its sorted segment; a column of which more than max_unchanged of the values come out unchanged (counted in SQL against the source) is refused (22000). Each refresh walks with a new seed unless seed is given.",
    ),
    function(
        'distortion',
        args=[
            'source regclass',
            'release text',
        ],
        returns='TABLE (column_name text, distortion double precision, rank_correlation double precision, preserved_fraction double precision)',
        python='pattern.distortion_report', positional=2,
        comment='Distortion of a pattern release as measured at its last build or refresh: per substituted column the mean relative error Dst, the Spearman rank correlation with the source and the fraction of sampled localities preserved (1.0); the row with column_name NULL is the overall Dst.',
    ),
]
