"""Trust- and purpose-aware releases against a real PostgreSQL: requesters, trust, purposes,
anon.trust_view (grants, k, refresh) and bad input. Released rows are checked with SQL that shares
no code with the extension (tests/helpers.py)."""
from __future__ import annotations

import itertools
import json

import psycopg
import pytest
from psycopg import sql

from tests.helpers import class_sizes, release_schema_of

PEOPLE = """
CREATE TABLE people (id int PRIMARY KEY, age int, sex text, job text, salary text);
INSERT INTO people
SELECT i, 18 + (i * 37) % 70, CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END,
       (ARRAY['nurse', 'doctor', 'clerk', 'cashier'])[1 + (i * 7) % 4],
       CASE WHEN (i * 11) % 5 = 0 THEN '>50K' ELSE '<=50K' END
FROM generate_series(1, 400) i;
SELECT anon.set_column_role('people', 'salary', 'sensitive');
SELECT anon.set_hierarchy('people', 'job', ARRAY[
    ARRAY['nurse', 'health', '*'], ARRAY['doctor', 'health', '*'],
    ARRAY['clerk', 'office', '*'], ARRAY['cashier', 'office', '*']]);
"""
_names = itertools.count()


@pytest.fixture
def people(db, schema):
    db.execute(PEOPLE)
    return f'"{schema}".people'


@pytest.fixture
def role(db):
    name = f"requester_role_{next(_names)}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    yield name
    db.execute("DELETE FROM anon.requesters WHERE role_name = %s", (name,))
    db.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
    db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


@pytest.fixture
def requester(db, role):
    name = f"req_{next(_names)}"
    db.execute("SELECT anon.add_requester(%s, role => %s)", (name, role))
    return name


@pytest.fixture
def purpose(db):
    created = []

    def define(priorities=None, **kwargs):
        name = f"purpose_{next(_names)}"
        args = {"priorities": json.dumps(priorities)} if priorities is not None else {}
        args.update(kwargs)
        params = sql.SQL(", ").join(sql.SQL("{} => {}").format(sql.Identifier(k), sql.Literal(v))
                                    for k, v in args.items())
        created.append(name)
        result = db.execute(sql.SQL("SELECT anon.define_purpose({}, {})").format(
            sql.Literal(name), params)).fetchone()[0]
        return name, result

    yield define
    db.execute("DELETE FROM anon.purposes WHERE purpose_name = ANY(%s)", (created,))


def record(db, requester, outcomes):
    for outcome in outcomes:
        db.execute("SELECT anon.record_interaction(%s, outcome => %s)", (requester, outcome))


def trust(db, requester, **kwargs):
    extra = "".join(f", {k} => %({k})s" for k in kwargs)
    row = db.execute(f"SELECT * FROM anon.trust(%(r)s{extra})", dict(r=requester, **kwargs))
    return row.fetchone()


def trust_view(db, schema, source, requester, purpose, **kwargs):
    args = [sql.SQL("{} => {}").format(sql.Identifier(k), sql.Literal(v)) for k, v in kwargs.items()]
    query = sql.SQL("SELECT anon.trust_view({}, requester => {}, purpose => {}, "
                    "release_schema => {}{})").format(
        sql.Literal(source), sql.Literal(requester), sql.Literal(purpose), sql.Literal(release_schema_of(schema)),
        sql.SQL("").join(sql.SQL(", ") + a for a in args))
    return db.execute(query).fetchone()[0]


def metrics(db, relation):
    schema, name = relation.replace('"', "").split(".")
    return db.execute("SELECT metrics FROM anon.releases WHERE release_schema = %s "
                      "AND release_name = %s", (schema, name)).fetchone()[0]


# ---------------------------------------------------------------------------- trust

def test_a_requesters_history_goes_with_it_when_deleted_or_renamed(db, role):
    """History tables have no foreign key (a parallel restore loads them in any order): a trigger
    deletes or renames a requester's interactions and recommendations with it."""
    def history(name):
        return [db.execute(f"SELECT count(*) FROM anon.{t} WHERE requester_name = %s",
                           (name,)).fetchone()[0] for t in ("interactions", "recommendations")]
    for name in ("hist_a", "hist_b"):
        db.execute("SELECT anon.add_requester(%s, %s)", (name, role))
        record(db, name, ["good", "bad"])
        db.execute("SELECT anon.add_recommendation(%s, by => 'partner', rating => 0.5)", (name,))
    try:
        db.execute("UPDATE anon.requesters SET requester_name = 'hist_c' WHERE requester_name = 'hist_a'")
        assert history("hist_a") == [0, 0] and history("hist_c") == [2, 1]
        with pytest.raises(psycopg.errors.FeatureNotSupported, match="one at a time"):
            db.execute("UPDATE anon.requesters SET requester_name = requester_name || '_x' "
                       "WHERE requester_name IN ('hist_b', 'hist_c')")
        db.execute("UPDATE anon.requesters SET role_name = role_name WHERE requester_name = 'hist_b'")
        assert history("hist_b") == [2, 1]
        db.execute("DELETE FROM anon.requesters WHERE requester_name IN ('hist_b', 'hist_c')")
        assert history("hist_b") == [0, 0] and history("hist_c") == [0, 0]
        with pytest.raises(psycopg.errors.UndefinedObject, match='requester "hist_b" does not exist'):
            record(db, "hist_b", ["good"])
    finally:
        db.execute("DELETE FROM anon.requesters WHERE requester_name LIKE 'hist_%'")


def test_trust_combines_history_and_weighted_recommendations(db, requester):
    record(db, requester, ["good", "good", "bad"])
    history, recommendation, combined, n_int, n_rec = trust(db, requester,
                                                           half_life_days=float("inf"))
    assert (history, recommendation, combined) == (pytest.approx(3 / 5), None, pytest.approx(3 / 5))
    assert (n_int, n_rec) == (3, 0)
    db.execute("SELECT anon.add_recommendation(%s, by => 'partner_a', rating => 0.9, by_trust => 1)",
               (requester,))
    db.execute("SELECT anon.add_recommendation(%s, by => 'partner_b', rating => 0.1, by_trust => 0.25)",
               (requester,))
    # (0.9 * 1 + 0.1 * 0.25) / 1.25 = 0.74; combined with weight 0.75 on history
    row = trust(db, requester, history_weight=0.75, half_life_days=float("inf"))
    assert row[1] == pytest.approx(0.74)
    assert row[2] == pytest.approx(0.75 * 0.6 + 0.25 * 0.74)


def test_recommender_that_is_a_requester_weighs_with_its_own_history(db, requester, role):
    other = f"req_{next(_names)}"
    db.execute("SELECT anon.add_requester(%s, role => %s)", (other, role))
    record(db, other, ["bad", "bad", "bad"])            # history (0 + 1) / (3 + 2) = 0.2
    db.execute("SELECT anon.add_recommendation(%s, by => %s, rating => 1)", (requester, other))
    db.execute("SELECT anon.add_recommendation(%s, by => 'stranger', rating => 0)", (requester,))
    # weights 0.2 (the requester's history) and 0.5 (unknown recommender): 0.2 / 0.7
    assert trust(db, requester, half_life_days=float("inf"))[1] == pytest.approx(0.2 / 0.7)


def test_old_interactions_count_less(db, requester):
    db.execute("SELECT anon.record_interaction(%s, 'bad', recorded_at => now() - interval '360 days')",
               (requester,))
    # one bad outcome two half-lives old counts 0.25: (0 + 1) / (0.25 + 2)
    assert trust(db, requester, half_life_days=180)[0] == pytest.approx(1 / 2.25, rel=1e-4)


# ---------------------------------------------------------------------------- purposes

def test_derived_purpose_pins_most_and_least(db, people, purpose):
    _, priorities = purpose(derive_from=people, most_useful="job", least_useful="sex")
    assert priorities["job"] == 1 and priorities["sex"] == 0
    assert set(priorities) == {"age", "sex", "job", "salary"}   # the identifier id is left out
    assert all(0 <= p <= 1 for p in priorities.values())
    derivation = db.execute("SELECT derivation FROM anon.purposes WHERE priorities = %s::jsonb",
                            (json.dumps(priorities),)).fetchone()[0]
    assert derivation["order"][0] == "job" and derivation["order"][-1] == "sex"


# ---------------------------------------------------------------------------- the release

def test_release_is_granted_to_the_requester_role_only(db, connect, schema, people, requester,
                                                        role, purpose):
    record(db, requester, ["good"] * 5)
    name, _ = purpose({"age": 1, "sex": 0.5})
    analyst = f"analyst_{next(_names)}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(analyst)))
    try:
        db.execute("SELECT anon.grant_analyst(%s)", (analyst,))
        relation = trust_view(db, schema, people, requester, name)
        with connect(user=role) as conn:
            assert conn.execute(f"SELECT count(*) FROM {relation}").fetchone()[0] == 400
        with connect(user=analyst) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(f"SELECT count(*) FROM {relation}")
    finally:
        db.execute("SELECT anon.revoke_analyst(%s)", (analyst,))
        db.execute(sql.SQL("DROP OWNED BY {}; DROP ROLE {}").format(
            sql.Identifier(analyst), sql.Identifier(analyst)))


def test_columns_and_levels_follow_the_purpose(db, schema, people, requester, purpose):
    record(db, requester, ["good", "bad"])               # trust 0.5 -> D = 0.75
    name, _ = purpose({"age": 1, "job": 0})
    relation = trust_view(db, schema, people, requester, name, min_share=0)
    columns = [r[0] for r in db.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
        "ORDER BY attnum", (relation,)).fetchall()]
    assert columns == ["age", "sex", "job", "salary"]     # the identifier id is dropped
    m = metrics(db, relation)
    assert m["degree"] == pytest.approx(0.75)
    assert m["levels"]["age"] == 0                         # priority 1 with min_share 0: exact
    assert m["levels"]["job"] == 2 and m["levels"]["sex"] == 1  # priority 0 (unlisted): coarse
    # age released as exact one-value ranges, job fully generalized, salary as is
    assert db.execute(f"SELECT bool_and(lower(age) = upper(age) - 1), bool_and(job = '*'), "
                      f"count(DISTINCT salary) FROM {relation}").fetchone() == (True, True, 2)


def test_explicit_column_roles(db, schema, people, requester, purpose):
    name, _ = purpose({"age": 1})
    relation = trust_view(db, schema, people, requester, name, quasi_identifiers=["age", "sex"],
                          sensitive=["job"])
    columns = [r[0] for r in db.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
        "ORDER BY attnum", (relation,)).fetchall()]
    # job released as is; salary keeps its declared role (sensitive); id is an identifier
    assert columns == ["age", "sex", "job", "salary"]
    assert db.execute(f"SELECT count(DISTINCT job) FROM {relation}").fetchone()[0] == 4
    assert set(metrics(db, relation)["levels"]) == {"age", "sex"}


def test_level_weights_move_the_level_boundaries(db, schema, people, requester, purpose):
    name, _ = purpose({"age": 1, "sex": 1, "job": 0.6})
    fixed = {"gamma": 1, "d_min": 0.2, "d_max": 0.2}      # D = 0.2 whatever the trust
    # shares 0.1, 0.1, 0.5: t = 0.6 / 0.7, d_job = 0.43 -- below 1/2 (equal steps), above 1/10
    plain = trust_view(db, schema, people, requester, name, release_name="plain", **fixed)
    weighted = trust_view(db, schema, people, requester, name, release_name="weighted",
                          level_weights=json.dumps({"job": [1, 9]}), **fixed)
    assert metrics(db, plain)["levels"]["job"] == 0
    assert metrics(db, weighted)["levels"]["job"] == 1
    assert db.execute(f"SELECT array_agg(DISTINCT job ORDER BY job) FROM {weighted}").fetchone()[0] \
        == ["health", "office"]
    fails(db, "SELECT anon.trust_view(%s, requester => %s, purpose => %s, level_weights => %s)",
          (people, requester, name, json.dumps({"job": [1, 2, 3]})), "22023",
          "level weights of 'job' must be 2 positive numbers")


def test_dates_timestamps_and_floats_are_released_as_ranges(db, schema, requester, purpose):
    db.execute("""
        CREATE TABLE visits (born date, seen timestamp, weight float8, sex text);
        INSERT INTO visits
        SELECT DATE '1950-01-01' + (i * 97) % 20000, TIMESTAMP '2024-01-01' + make_interval(hours => (i * 7) % 5000),
               40 + ((i * 53) % 600) / 10.0, CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END
        FROM generate_series(1, 200) i""")
    name, _ = purpose({"sex": 1})
    relation = trust_view(db, schema, "visits", requester, name, gamma=1, d_min=0.5, d_max=0.5,
                          min_share=0.5)
    levels = metrics(db, relation)["levels"]
    assert 0 < levels["born"] < 5 and 0 < levels["seen"] < 5 and 0 < levels["weight"] < 5
    types = dict(db.execute("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                            "WHERE attrelid = %s::regclass AND attnum > 0", (relation,)).fetchall())
    assert types == {"born": "daterange", "seen": "tsrange", "weight": "numrange", "sex": "text"}
    # every source row is covered by some released row (the release order is shuffled, so rows
    # are not matched one to one)
    uncovered = db.execute(f"""
        SELECT count(*) FROM visits v
        WHERE NOT EXISTS (SELECT 1 FROM {relation} r
                          WHERE r.born @> v.born AND r.seen @> v.seen AND r.weight @> v.weight::numeric
                            AND r.sex = v.sex)""").fetchone()[0]
    assert uncovered == 0


@pytest.mark.parametrize("level", [0, 1])
def test_values_at_their_types_extremes_are_released_truthfully(db, schema, requester, purpose, level):
    """A review's int4 column holding 2^31 - 1 failed with a bare "integer out of range": the
    range [v, v] of a discrete type is stored as [v, v + 1), which overflows at the maximum; the
    next review's values near -2^31 got an interval starting below it, and timestamps before
    year 1 or after 9999 failed in Python's datetime.
    Such ranges are released upper-unbounded (as Mondrian's are); integers a float8 cannot hold
    (int8 near 2^63) are refused by name, since the interval hierarchies are built on float8."""
    db.execute("""
        CREATE TABLE edges (a int4, b int8, c date, near int4, ts timestamp, tz timestamptz,
                            last timestamp, tag text);
        INSERT INTO edges SELECT
            CASE WHEN i % 2 = 0 THEN 2147483647 ELSE -2147483648 END,
            CASE WHEN i % 3 = 0 THEN 9007199254740992 WHEN i % 3 = 1 THEN 9007199254740991
                 ELSE -9007199254740992 END,
            CASE WHEN i % 2 = 0 THEN DATE '5874897-12-31' ELSE DATE '4713-01-01 BC' END,
            -2147483648 + (i * 11) % 648,
            CASE WHEN i % 2 = 0 THEN TIMESTAMP '0044-03-15 12:00:00 BC' ELSE TIMESTAMP '20000-01-01 00:00:00' END,
            CASE WHEN i % 2 = 0 THEN TIMESTAMPTZ '4713-01-01 00:00:00+00 BC' ELSE TIMESTAMPTZ '294276-12-31 23:59:59+00' END,
            CASE WHEN i % 2 = 0 THEN TIMESTAMP '294276-12-31 23:59:59.999999' ELSE TIMESTAMP '294276-12-31 23:59:59.9999' END,
            't' || i
        FROM generate_series(1, 60) i""")
    name, _ = purpose({"a": 1, "b": 1, "c": 1, "near": 1, "ts": 1, "tz": 1, "last": 1})
    shares = {"d_min": float(level), "d_max": float(level)}
    relation = trust_view(db, schema, "edges", requester, name, k=2, sensitive=["tag"],
                          gamma=1, min_share=0.5, **shares)
    released, untrue = db.execute(f"""
        SELECT count(*), count(*) FILTER (WHERE NOT (r.a @> e.a AND r.b @> e.b AND r.c @> e.c
                                                     AND r.near @> e.near AND r.ts @> e.ts
                                                     AND r.tz @> e.tz AND r.last @> e.last))
        FROM {relation} r JOIN edges e USING (tag)""").fetchone()
    assert released == 60 and untrue == 0
    db.execute("UPDATE edges SET b = 9223372036854775807 WHERE tag = 't3'")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match='column "b" .* beyond 2\\^53'):
        trust_view(db, schema, "edges", requester, name, k=2, sensitive=["tag"], gamma=1,
                   min_share=0.5, replace=True, **shares)


def test_values_closer_than_float8_resolves_are_refused_by_name(db, schema, requester, purpose):
    # microseconds in 1650: epoch seconds of ~1e10 resolve ~2e-6 in float8, and the default
    # interval hierarchy's nodes got two parents (a review)
    db.execute("CREATE TABLE fine (ts timestamp, tag text); INSERT INTO fine SELECT TIMESTAMP "
               "'1650-06-01 12:00:00' + i * interval '1 microsecond', 't' || i "
               "FROM generate_series(1, 20) i")
    name, _ = purpose({"ts": 1})
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="column 'ts' lie closer together"):
        trust_view(db, schema, "fine", requester, name, k=2, sensitive=["tag"], gamma=1,
                   min_share=0.5, d_min=1.0, d_max=1.0)


def test_k_is_enforced_and_its_cost_reported(db, schema, people, requester, purpose):
    record(db, requester, ["good"] * 20)                   # high trust: a fine view
    name, _ = purpose({"age": 1, "sex": 1, "job": 1})
    relation = trust_view(db, schema, people, requester, name, k=10, max_suppression=0.05)
    sizes = class_sizes(db, relation, ["age", "sex", "job"])
    assert min(sizes) >= 10
    m = metrics(db, relation)
    cost = m["cost"]
    assert cost["rows_suppressed"] == 400 - sum(sizes) <= 20
    assert cost["final_degree"] >= cost["requested_degree"]
    assert all(m["levels"][a] >= m["requested_levels"][a] for a in m["levels"])


def test_more_trust_never_gives_a_coarser_release_and_refresh_follows_trust(db, schema, people,
                                                                           requester, purpose):
    name, _ = purpose({"age": 0.8, "sex": 0.2, "job": 0.5})
    record(db, requester, ["good"] * 10)
    relation = trust_view(db, schema, people, requester, name, k=3)
    before = metrics(db, relation)
    record(db, requester, ["bad"] * 30)                    # trust falls: the release coarsens
    db.execute("SELECT anon.refresh(%s)", (relation.replace('"', ""),))
    after = metrics(db, relation)
    assert after["trust"]["trust"] < before["trust"]["trust"]
    assert after["degree"] > before["degree"]
    assert all(after["levels"][a] >= before["levels"][a] for a in before["levels"])
    assert min(class_sizes(db, relation, ["age", "sex", "job"])) >= 3


def test_local_recoding_is_k_anonymous_truthful_and_finer_with_more_trust(db, schema, people,
                                                                         requester, purpose):
    """k = 5 on 500 rows, 400 of them spread over 70 ages: at high trust most classes are too
    small, so the rows of small classes -- only they -- are generalized further; one column then
    holds several levels."""
    db.execute("INSERT INTO people SELECT i, 40, 'F', 'nurse', '<=50K' "
               "FROM generate_series(401, 500) i")          # one class that is big already
    name, _ = purpose({"age": 0.5, "sex": 1, "job": 0.9})
    roles = {"quasi_identifiers": ["age", "sex", "job"], "sensitive": ["salary", "id"]}
    fixed = {"gamma": 1, "k": 5, "max_suppression": 0.02}
    fine = trust_view(db, schema, people, requester, name, release_name="fine",
                      d_min=0.05, d_max=0.05, **roles, **fixed)
    coarse = trust_view(db, schema, people, requester, name, release_name="coarse",
                        d_min=0.4, d_max=0.4, **roles, **fixed)
    for relation in (fine, coarse):
        # k from the released rows themselves
        assert min(class_sizes(db, relation, ["age", "sex", "job"])) >= 5
        # every released value holds the row's true value (joined back on the identifier)
        wrong, released = db.execute(f"""
            SELECT count(*) FILTER (WHERE NOT (r.age @> p.age AND r.sex IN (p.sex, '*')
                                               AND r.job IN (p.job, h.parent, '*'))), count(*)
            FROM {relation} r JOIN people p USING (id)
            JOIN (VALUES ('nurse', 'health'), ('doctor', 'health'), ('clerk', 'office'),
                         ('cashier', 'office')) h(job, parent) ON h.job = p.job""").fetchone()
        assert wrong == 0
        cost = metrics(db, relation)["cost"]
        assert released == 500 - cost["rows_suppressed"] and cost["rows_suppressed"] <= 10
    # local, not whole-column: the fine release's ages come in more than one width, and the big
    # class is left at its values
    widths = db.execute(f"SELECT count(DISTINCT upper(age) - lower(age)) FILTER "
                        f"(WHERE NOT lower_inf(age)), count(*) FILTER (WHERE lower_inf(age)) "
                        f"FROM {fine}").fetchone()
    assert widths[0] + (widths[1] > 0) >= 2
    cost = metrics(db, fine)["cost"]
    assert 0 < cost["rows_recoded"] <= 400
    assert db.execute(f"SELECT count(*) FROM {fine} WHERE age = int4range(40, 40, '[]') "
                      f"AND sex = 'F' AND job = 'nurse'").fetchone()[0] >= 100
    # more trust (lower D), strictly finer: the view degree falls, read from the catalog
    degrees = [db.execute("SELECT (metrics ->> 'view_degree')::float8, metrics -> 'requested_levels' "
                          "FROM anon.releases WHERE release_name = %s", (n,)).fetchone()
               for n in ("fine", "coarse")]
    assert degrees[0][1] != degrees[1][1]
    assert degrees[0][0] < degrees[1][0]


# ---------------------------------------------------------------------------- bad input

def fails(db, query, params, sqlstate, match):
    with pytest.raises(psycopg.Error) as caught:
        db.execute(query, params)
    assert caught.value.sqlstate == sqlstate
    assert match in caught.value.diag.message_primary


def test_bad_input_is_rejected_clearly(db, schema, people, requester, purpose):
    fails(db, "SELECT anon.record_interaction('nobody', 'good')", (), "42704",
          'requester "nobody" does not exist')
    fails(db, "SELECT anon.record_interaction(%s, 'meh')", (requester,), "22023",
          'outcome "meh"')
    fails(db, "SELECT anon.add_recommendation(%s, by => 'x', rating => 1.5)", (requester,),
          "22023", "rating must lie in [0, 1]")
    fails(db, "SELECT anon.define_purpose('p', priorities => '{\"age\": 2}')", (), "22023",
          "priority of 'age' must lie in [0, 1]")
    # jsonb keeps 1e400 exactly: beyond double precision, not a Python traceback (38000)
    fails(db, "SELECT anon.define_purpose('p', priorities => '{\"age\": 1e400}')", (), "22023",
          "priority of 'age' must lie in [0, 1]; got inf")
    fails(db, "SELECT anon.define_purpose('p', priorities => '{\"a\": 1e400}')", (), "22023",
          "priority of 'a' must lie in [0, 1]; got inf")
    fails(db, "SELECT anon.define_purpose('p', priorities => '{\"age\": \"high\"}')", (), "22023",
          "priority of 'age' is 'high', not a number")
    fails(db, "SELECT anon.trust_view(%s, requester => %s, purpose => 'no_such_purpose')",
          (people, requester), "42704", 'purpose "no_such_purpose" does not exist')
    zip_purpose, _ = purpose({"zip": 1})
    fails(db, "SELECT anon.trust_view(%s, requester => %s, purpose => %s)",
          (people, requester, zip_purpose), "42704", 'priority to "zip", which is not a column')


def test_empty_table_and_nulls_are_refused(db, schema, requester, purpose):
    name, _ = purpose({"sex": 1})
    db.execute("CREATE TABLE empty (age int, sex text)")
    fails(db, "SELECT anon.trust_view('empty', requester => %s, purpose => %s)",
          (requester, name), "22000", "is empty")
    db.execute("INSERT INTO empty VALUES (30, NULL), (40, 'F')")
    fails(db, "SELECT anon.trust_view('empty', requester => %s, purpose => %s)",
          (requester, name), "42804", 'column "sex" of')


def test_hierarchy_not_covering_a_value_names_it(db, schema, people, requester, purpose):
    name, _ = purpose({"job": 1})
    db.execute("SELECT anon.set_hierarchy('people', 'job', ARRAY[ARRAY['nurse', '*'], "
               "ARRAY['doctor', '*'], ARRAY['clerk', '*'], ARRAY['cashier', '*']])")
    db.execute("INSERT INTO people VALUES (999, 40, 'F', 'pilot', '<=50K')")
    fails(db, "SELECT anon.trust_view(%s, requester => %s, purpose => %s)",
          (people, requester, name), "42704", "column 'job' does not cover 1 value(s)")


def test_release_stays_private_after_refresh_and_for_new_analysts(db, connect, schema, people,
                                                                  requester, purpose):
    name, _ = purpose({"age": 1})
    relation = trust_view(db, schema, people, requester, name)
    analyst = f"analyst_{next(_names)}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(analyst)))
    try:
        db.execute("SELECT anon.grant_analyst(%s)", (analyst,))
        db.execute("SELECT anon.refresh(%s)", (relation.replace('"', ""),))
        with connect(user=analyst) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(f"SELECT count(*) FROM {relation}")
    finally:
        db.execute("SELECT anon.revoke_analyst(%s)", (analyst,))
        db.execute(sql.SQL("DROP OWNED BY {}; DROP ROLE {}").format(
            sql.Identifier(analyst), sql.Identifier(analyst)))
