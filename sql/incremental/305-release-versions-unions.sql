-- What an analyst who keeps several versions of a stable release links together
-- (docs/republication.md): each version's unions of classes whose boxes overlapped, so that a
-- later version is checked against the unions of that version as well as its own; and the
-- people the newest version held back with the group whose box held them (salted hashes, as in
-- anon.release_people), so that they keep that group when they are published (a person in the
-- table links the classes that held them in every version).
ALTER TABLE anon.release_versions
    ADD COLUMN linked integer[],          -- each group's union of overlapping groups (its smallest id); NULL: none overlapped
    ADD COLUMN waiting bytea[],           -- the newest version only: the people it held back
    ADD COLUMN waiting_groups integer[];  -- and the group of each
