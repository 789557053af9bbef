-- The Mondrian family's ctid list as bytes (ctids_utf8: the tid[] literal's ASCII text, with
-- row_ctids NULL). PL/Python hands a bytes result to a bytea field with one copy; a str handed to
-- a text field costs a UTF-8 copy, a C-string copy and the text value, and the C string and the
-- text both stay until the whole result is converted: at 10M rows ~260 MB less at that moment.
-- anon._partition_rows reads either field; the other methods keep row_ctids.
ALTER TYPE anon.partition ADD ATTRIBUTE ctids_utf8 bytea;
