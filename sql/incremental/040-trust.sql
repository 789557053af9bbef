-- Trust- and purpose-aware releases: who asks for data (requesters and the role they
-- read with), what the provider knows about them (interactions, recommendations), and what they
-- want the data for (purposes = attribute priorities).

CREATE TABLE anon.requesters (
    requester_name text        PRIMARY KEY,
    role_name      name        NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE anon.requesters IS
    'Data requesters: a name and the database role their releases are granted to (anon.add_requester).';

CREATE TABLE anon.interactions (
    interaction_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    requester_name text             NOT NULL REFERENCES anon.requesters ON DELETE CASCADE,
    outcome        double precision NOT NULL CHECK (outcome >= 0 AND outcome <= 1),
    recorded_at    timestamptz      NOT NULL DEFAULT now(),
    note           text
);
CREATE INDEX interactions_requester ON anon.interactions (requester_name);
COMMENT ON TABLE anon.interactions IS
    'The provider''s own history with a requester: outcome 1 = good, 0 = bad (fractions allowed); the history-based trust.';

CREATE TABLE anon.recommendations (
    requester_name    text             NOT NULL REFERENCES anon.requesters ON DELETE CASCADE,
    recommender       text             NOT NULL,
    rating            double precision NOT NULL CHECK (rating >= 0 AND rating <= 1),
    recommender_trust double precision CHECK (recommender_trust >= 0 AND recommender_trust <= 1),
    recorded_at       timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (requester_name, recommender)
);
COMMENT ON TABLE anon.recommendations IS
    'Ratings of a requester by others (latest per recommender); recommender_trust weighs each (NULL = evaluated at trust time).';

CREATE TABLE anon.purposes (
    purpose_name text        PRIMARY KEY,
    priorities   jsonb       NOT NULL,
    source       regclass,
    derivation   jsonb,
    created_at   timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE anon.purposes IS
    'Application purposes: per-attribute priorities in [0, 1], given or derived from a table''s mutual information (source, derivation).';

SELECT pg_catalog.pg_extension_config_dump('anon.requesters', '');
SELECT pg_catalog.pg_extension_config_dump('anon.interactions', '');
SELECT pg_catalog.pg_extension_config_dump('anon.interactions_interaction_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('anon.recommendations', '');
SELECT pg_catalog.pg_extension_config_dump('anon.purposes', '');
