-- pg_restore -j loads each configuration table's rows in a worker of its own, in any order, so a
-- foreign key between two of them fails such a restore (interactions before requesters). The
-- link is kept without one: the functions that write history refuse an unknown requester, the
-- trust computation reads history through anon.requesters, and a trigger (sql/idempotent/080-trust.sql)
-- takes a requester's history with it when it is deleted or renamed.
ALTER TABLE anon.interactions DROP CONSTRAINT IF EXISTS interactions_requester_name_fkey;
ALTER TABLE anon.recommendations DROP CONSTRAINT IF EXISTS recommendations_requester_name_fkey;
