-- A stable release's record fingerprints (anon.release_state.records, waiting_records) are
-- keyed by its salt (docs/republication.md, "What it remembers"): a fingerprint is a hash of a
-- person's quasi-identifier and sensitive texts under a public key, so whoever read it and knew
-- the person's quasi-identifiers could test each possible sensitive value. A row stored before
-- holds public fingerprints (false: its refresh keys them as it reads them); a row written
-- since holds keyed ones (the default of a new row).
ALTER TABLE anon.release_state ADD COLUMN records_keyed boolean NOT NULL DEFAULT false;
ALTER TABLE anon.release_state ALTER COLUMN records_keyed SET DEFAULT true;
