"""Strict multidimensional Mondrian (LeFevre et al., ICDE 2006): k-anonymous (optionally l-diverse)
releases as materialized views.

Declarations: see sql/build.py (the SQL, the error handling and docs/sql-reference.md are
generated from them).
"""

FUNCTIONS = [
    release_function(
        'mondrian',
        comment=("Creates a materialized view holding a k-anonymous Mondrian release of the table and returns its qualified name. Refresh it to re-anonymize current data. Privacy models asked of every class in each sensitive column (a cut is made only if both sides keep them; the whole table must satisfy them, else 22023 naming the figure): l with l_diversity => 'distinct' (>= l distinct values, the default), 'entropy' (entropy >= ln l) or 'recursive' (r1 < c (r_l + ... + r_m), c required); t => t-closeness (EMD to the table's distribution <= t; ordered distance for numeric sensitive columns, equal distance otherwise). split => 'median' (default) or 'utility' (least information loss). Each model is checked again from the released rows before publishing."),
    ),
]
