-- The Mondrian family's two large outputs as bytes (anon.partition's byte layout): the tid[]
-- literal of the rows' ctids (ctids_utf8) and the JSON of the classes' generalized values
-- (classes_utf8), both plain ASCII, with row_ctids and classes NULL. PL/Python hands a bytes
-- result over with one copy; a text result costs a Python copy, a C-string copy and the text
-- copy, and a jsonb one a full parse (measured: ~3.4x the text's size at the call, ~3.5x the
-- JSON's). At 10M rows that is ~600 MB less at the moment the run's result is converted. The
-- release query reads them with convert_from (and the JSON as json, parsed field by field).
-- Only the two-argument partitioning functions (layout 2) return it, so the queries of releases
-- made before keep the fields they read.
ALTER TYPE anon.partition ADD ATTRIBUTE ctids_utf8 bytea, ADD ATTRIBUTE classes_utf8 bytea;
