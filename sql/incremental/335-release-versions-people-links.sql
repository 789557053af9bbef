-- Classes an analyst links by the people in them (docs/republication.md): each version's unions
-- of groups some person (published or held back) could be in at once, so that a later version
-- checks the parts of a union of overlapping boxes that people link, not the union alone.
ALTER TABLE anon.release_versions
    ADD COLUMN people_linked integer[];  -- each group's union of groups linked by people (its smallest id); NULL: stored before, taken as linked
