-- A stable release's state is rewritten at every refresh (docs/republication.md, "What it
-- remembers"). Each person's group and entries are small integers in the order of the people's
-- hashes: pglz finds matches in their zero bytes, reads every megabyte of them and then keeps
-- them uncompressed (below its 25 % saving), about 40 % of the CPU a state's insert takes at a
-- million people. They are stored uncompressed without the attempt; the versions, last versions
-- and candidate cohorts, which compress well, are still compressed.
ALTER TABLE anon.release_state
    ALTER COLUMN member_groups SET STORAGE EXTERNAL,
    ALTER COLUMN entries SET STORAGE EXTERNAL,
    ALTER COLUMN record_entries SET STORAGE EXTERNAL;
