-- A second layout of anon.partition (the Mondrian family's): the rows already in release order,
-- grouped by class, classes numbered in that order, and only each class's size (class_sizes;
-- class_ids and row_positions NULL). A row's position is then its ordinal and its class follows
-- from the sizes, so two per-row arrays fewer travel from Python to SQL (at 10M rows: ~150 MB
-- of text and its copies). The per-row layout (class_sizes NULL) stays for the other methods.
-- anon._partition_rows reads both.
ALTER TYPE anon.partition ADD ATTRIBUTE class_sizes text;
