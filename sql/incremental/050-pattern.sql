-- The result of a pattern-preserving run, handed from Python to the release's SQL in one
-- round trip: the rows' ctids and, per substituted column, the new values as an array literal
-- (parsed by array_in in C, not element by element in Python).

CREATE TYPE anon.pattern_values AS (
    row_ctids text,
    released  text[],
    row_tableoids text        -- per row, when the source has partitions / children; else NULL
);
