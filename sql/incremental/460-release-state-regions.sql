-- A stable release created beyond plpy_anon.build_memory (docs/out-of-core.md, "The stable mode
-- region by region") is checked and remembered one region of its source at a time: each region's
-- people are written as rows of their own, a run in the order of their hashes, after the rows of
-- the regions before. A row says which region wrote it, so the order of hashes is checked within
-- a region; a state of several regions is put in the order of its hashes when it is read whole.
ALTER TABLE anon.release_state
    ADD COLUMN region integer NOT NULL DEFAULT 0,  -- the region whose check wrote the row (0: the whole table)
    ADD CONSTRAINT region_not_negative CHECK (region >= 0);
