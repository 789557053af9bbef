-- A stable release created beyond plpy_anon.build_memory is built region by region
-- (docs/out-of-core.md, "The stable mode region by region"): each region is a box of the
-- quasi-identifiers' domain, fixed by the top cuts of its creation, and its rows of
-- anon.release_state say their region. A refresh beyond the budget keeps each region's people
-- in its box, so the boxes are stored beside the state: per region, its cuts (each one's QI,
-- value, side and strictness; a categorical QI cut in its order of frequency, the texts of the
-- side its predicate tests). A refresh that rewrites the state as one region drops them.
-- The cuts are values of the source's columns: read by the release's owner only, through
-- anon.readable_release_regions (035-catalog-guard.sql), as the state is.
CREATE TABLE anon.release_regions (
    release_id integer NOT NULL,
    region     integer NOT NULL,
    bounds     jsonb   NOT NULL,  -- [{"qi": position, "name": column, "value": text, "strict": bool, "left": bool}, ...]
    PRIMARY KEY (release_id, region),
    CONSTRAINT region_not_negative CHECK (region >= 0),
    CONSTRAINT bounds_are_a_list CHECK (pg_catalog.jsonb_typeof(bounds) = 'array')
);
COMMENT ON TABLE anon.release_regions IS
    'Stable releases created beyond plpy_anon.build_memory: the box of each region of their state (anon.release_state.region), as the cuts of its creation.';
SELECT pg_catalog.pg_extension_config_dump('anon.release_regions', '');
ALTER TABLE anon.release_regions ENABLE ROW LEVEL SECURITY;
CREATE POLICY release_owner ON anon.release_regions
    USING (EXISTS (SELECT 1 FROM anon.releases r WHERE r.release_id = release_regions.release_id
                   AND pg_catalog.pg_has_role(r.release_owner, 'MEMBER')));
