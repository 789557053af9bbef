"""The contract every release method honours, checked from the released rows in SQL (no code
shared with the extension) and applied to every method of ``methods.METHODS``: pytest ids are
``check_<name>[<method>]``. A method that does not offer a guarantee (k for pattern_view, l for
most) says why in its entry, and the check asserts that it makes no such claim instead."""
from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from plpy_anon.core.k_anonymity import MIN_K
from plpy_anon.spec import ReleaseSpec
from tests.contract import random_groups
from tests.contract.conftest import K, L, drop_role, make_role
from tests.contract.methods import BY_NAME, METHODS, N_ROWS, create_table, insert_rows
from tests.helpers import class_sizes, distinct_sensitive_per_class, release_schema_of

# The hierarchy of the fixture's job column (methods.TABLE), written out again here: a released
# label must be the true value or one of its ancestors.
ANCESTORS = {"nurse": {"health", "*"}, "doctor": {"health", "*"}, "clerk": {"office", "*"},
             "cashier": {"office", "*"}}

CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def catalog(db, relation: str) -> dict:
    schema, name = relation.replace('"', "").split(".")
    cur = db.execute("SELECT * FROM anon.releases WHERE release_schema = %s AND release_name = %s",
                     (schema, name))
    row = cur.fetchone()
    return None if row is None else dict(zip([c.name for c in cur.description], row))


def count(db, relation: str) -> int:
    return db.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.SQL(relation))).fetchone()[0]


def suppressed(row: dict) -> int:
    """Rows the catalog says the method withheld on purpose (trust: ARX-style suppression)."""
    return int(((row["metrics"] or {}).get("cost") or {}).get("rows_suppressed") or 0)


def proargnames(db, function: str) -> set[str]:
    rows = db.execute("SELECT unnest(proargnames) FROM pg_proc WHERE proname = %s "
                      "AND pronamespace = 'anon'::regnamespace", (function,)).fetchall()
    return {r[0] for r in rows}


def bad_call(method, ctx, shared, schema, source, k_value, **options):
    """A call that must be refused; if it is not, whatever it creates lands in the test's own
    release schema (dropped with it), and fusion's auxiliary is the shared one that exists."""
    if method.name == "fusion_resilient_view":
        options.setdefault("auxiliary", f"{shared[1]}_aux")
    return method.call(ctx[0], source, k_value, release_schema=release_schema_of(schema), **options)


def failure(db, query, params=None) -> str:
    """The SQLSTATE of the error ``query`` raises (the test fails if it raises none)."""
    with pytest.raises(psycopg.Error) as info:
        db.execute(query, params)
    return info.value.sqlstate


def qi_relation(method, relation: str) -> str:
    return relation + method.qi_suffix


# ------------------------------------------------------------------------------- guarantees

@check
def check_k_from_released_rows(db, method, released, shared, schema, ctx):
    relation = released(method)
    row = catalog(db, relation)
    if method.k_arg is None:
        # pattern_view makes no k claim (entry's no_k); it promises values move: each
        # substituted column has at most max_unchanged of its values released as they were,
        # and nothing identifying (id, the unlisted QIs) is published.
        assert "k" not in proargnames(db, method.function), method.no_k
        assert "k" not in row["parameters"] and row["achieved_k"] is None
        columns = [c for c, in db.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
            "AND NOT attisdropped", (relation,)).fetchall()]
        assert "id" not in columns and "sex" not in columns and "job" not in columns
        for column in method.qi_columns:
            assert row["metrics"]["columns"][column]["unchanged_fraction"] <= \
                row["parameters"]["max_unchanged"]
        return
    sizes = class_sizes(db, qi_relation(method, relation), list(method.qi_columns))
    assert min(sizes) >= K
    assert row["achieved_k"] >= K and min(sizes) >= row["achieved_k"]


@check
def check_catalog_parameters_are_the_specification_encoded(db, method, released, shared, schema,
                                                           ctx):
    """The catalog row decodes into the release's specification (what it promises, its method's
    settings) and encodes back to the very same jsonb: the catalog format is the specification's."""
    row = catalog(db, released(method))
    settings = random_groups.Settings if row["method"] == random_groups.NAME else None
    spec = ReleaseSpec.decode(row["method"], row["parameters"], settings=settings)
    assert spec.encode() == row["parameters"]
    if method.k_arg is None:
        assert spec.promise.k is None
    elif method.name == "fusion_resilient_view":     # the k its scan chose, from k_from = K
        assert spec.promise.k >= K
    else:
        assert spec.promise.k == K
    assert spec.promise.l == (L if method.l_arg else None)


@check
def check_l_from_released_rows(db, method, released, shared, schema, ctx):
    relation = released(method)
    if method.l_arg is None:
        # no l offered: the function takes no l, so no caller can believe it asked for one
        assert "l" not in proargnames(db, method.function), method.no_l
        return
    assert least_l(db, method, relation) >= L


def least_l(db, method, relation: str) -> int:
    """Distinct sensitive values in the poorest class of the released rows."""
    if method.name == "break_merge":     # sensitive values live in the per-group histogram
        return db.execute(sql.SQL(
            "SELECT min(c) FROM (SELECT count(DISTINCT value) c FROM {} GROUP BY gid) x").format(
            sql.SQL(relation + "_st_salary"))).fetchone()[0]
    return min(distinct_sensitive_per_class(db, relation, list(method.qi_columns), "salary"))


@check
def check_row_count_adds_up(db, method, released, shared, schema, ctx):
    relation = released(method)
    row = catalog(db, relation)
    n = count(db, qi_relation(method, relation))
    assert n == N_ROWS - suppressed(row) == row["row_count"]
    if method.name == "break_merge":
        total = db.execute(sql.SQL("SELECT sum(count) FROM {}").format(
            sql.SQL(relation + "_st_salary"))).fetchone()[0]
        assert total == N_ROWS


def contains(method, column: str, released_type: str) -> sql.Composable:
    """SQL predicate: released r.<column> covers source s.<column>."""
    s, r = sql.Identifier("s", column), sql.Identifier("r", column)
    if released_type.endswith("range"):
        return sql.SQL("{} <@ {}").format(s, r)
    if released_type.endswith("[]"):
        return sql.SQL("{} = ANY({})").format(s, r)
    pairs = sql.SQL(", ").join(sql.SQL("({}, {})").format(sql.Literal(v), sql.Literal(a))
                               for v, ups in ANCESTORS.items() for a in ups)
    return sql.SQL("({s} = {r} OR {r} = '*' OR ({s}, {r}) IN ({pairs}))").format(
        s=s, r=r, pairs=pairs)


@check
def check_truthful_values(db, method, released, shared, schema, ctx):
    _, source, _ = shared
    relation = released(method)
    row = catalog(db, relation)
    if method.values == "substituted":
        # pattern_view publishes new values by design (not truthful); what it promises instead:
        # inside the column's bounds (the observed range), on its integer grid, sensitive as is
        for column in method.qi_columns:
            lo, hi = row["metrics"]["columns"][column]["bounds"]
            bad = db.execute(sql.SQL(
                "SELECT count(*) FROM {} WHERE {c} < %s OR {c} > %s OR {c} <> round({c})").format(
                sql.SQL(relation), c=sql.Identifier(column)), (lo, hi)).fetchone()[0]
            assert bad == 0, column
        assert db.execute(sql.SQL("SELECT count(*) FROM ((SELECT salary FROM {} EXCEPT ALL "
                                  "SELECT salary FROM {}) UNION ALL (SELECT salary FROM {} "
                                  "EXCEPT ALL SELECT salary FROM {})) d").format(
            sql.SQL(relation), sql.SQL(source), sql.SQL(source), sql.SQL(relation))).fetchone()[0] == 0
        return
    if method.values == "microaggregated":
        # fusion publishes the identifier: join back; each released value is its group's mean
        for column in method.qi_columns:
            bad = db.execute(sql.SQL(
                "SELECT count(*) FROM (SELECT r.{c} AS released, avg(s.{c}) AS mean, "
                "count(*) AS n FROM {rel} r JOIN {src} s USING (id) GROUP BY r.age, r.hours) g "
                "WHERE abs(released - mean) > 1e-6 OR n < %s").format(
                c=sql.Identifier(column), rel=sql.SQL(relation), src=sql.SQL(source)),
                (K,)).fetchone()[0]
            assert bad == 0, column
        assert db.execute(sql.SQL("SELECT count(*) FROM {} r JOIN {} s USING (id)").format(
            sql.SQL(relation), sql.SQL(source))).fetchone()[0] == N_ROWS
        return
    # generalized: every released class covers at least as many source rows as it holds, and
    # every source row but the suppressed ones lies in some class
    qrel = qi_relation(method, relation)
    types = dict(db.execute("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                            "WHERE attrelid = %s::regclass AND attnum > 0", (qrel,)).fetchall())
    cols = list(method.qi_columns)
    inside = sql.SQL(" AND ").join(contains(method, c, types[c]) for c in cols)
    qis = sql.SQL(", ").join(sql.Identifier(c) for c in cols)
    short = db.execute(sql.SQL(
        "SELECT count(*) FROM (SELECT {qis}, count(*) AS n FROM {rel} GROUP BY {qis}) r "
        "WHERE n > (SELECT count(*) FROM {src} s WHERE {inside})").format(
        qis=qis, rel=sql.SQL(qrel), src=sql.SQL(source), inside=inside)).fetchone()[0]
    assert short == 0
    uncovered = db.execute(sql.SQL(
        "SELECT count(*) FROM {src} s WHERE NOT EXISTS "
        "(SELECT 1 FROM (SELECT DISTINCT {qis} FROM {rel}) r WHERE {inside})").format(
        qis=qis, rel=sql.SQL(qrel), src=sql.SQL(source), inside=inside)).fetchone()[0]
    assert uncovered <= suppressed(row)


# ------------------------------------------------------------------------------- lifecycle

def fresh_release(db, method, schema, ctx, name="contract", **options):
    source = create_table(db, f"{schema}.people")
    relation = method.create(db, ctx[0], source, K, L if method.l_arg else None,
                             release_name=name, release_schema=release_schema_of(schema),
                             **options)
    return source, relation


def guarantee_holds(db, method, relation):
    row = catalog(db, relation)
    n = count(db, qi_relation(method, relation))
    assert n == row["row_count"]
    if method.k_arg:
        assert min(class_sizes(db, qi_relation(method, relation), list(method.qi_columns))) >= K
    else:
        for column in method.qi_columns:
            assert row["metrics"]["columns"][column]["unchanged_fraction"] <= 0.1
    if method.l_arg:
        assert least_l(db, method, relation) >= L
    return row


@check
def check_refresh_follows_the_source(db, method, released, shared, schema, ctx):
    source, relation = fresh_release(db, method, schema, ctx)
    before = catalog(db, relation)
    insert_rows(db, source, N_ROWS + 1, N_ROWS + 60)
    db.execute("SELECT anon.refresh(%s)", (relation,))
    after = guarantee_holds(db, method, relation)
    assert after["row_count"] == N_ROWS + 60 - suppressed(after)
    assert count(db, qi_relation(method, relation)) == N_ROWS + 60 - suppressed(after)
    assert after["refreshed_at"] > (before["refreshed_at"] or before["created_at"])
    assert after["last_error"] is None


def break_source(db, method, source):
    """Make the source impossible to release again."""
    if method.k_arg is None:       # pattern: constant columns cannot move (all values unchanged)
        db.execute(f"UPDATE {source} SET age = 40, hours = 30")
    else:                          # fewer rows than k
        db.execute(f"DELETE FROM {source} WHERE id > 3")


@check
def check_failed_refresh_keeps_the_old_release(db, method, released, shared, schema, ctx):
    source, relation = fresh_release(db, method, schema, ctx)
    qrel = qi_relation(method, relation)
    old = sorted(map(repr, db.execute(f"SELECT * FROM {qrel}").fetchall()))
    break_source(db, method, source)
    failure(db, "SELECT anon.refresh(%s)", (relation,))
    assert sorted(map(repr, db.execute(f"SELECT * FROM {qrel}").fetchall())) == old
    row = catalog(db, relation)
    assert row["row_count"] == len(old)          # the catalog still describes the old release
    assert row["last_error"] and row["last_error_at"] is not None
    last = db.execute("SELECT succeeded, sqlstate FROM anon.refresh_history WHERE release_id = %s "
                      "ORDER BY refresh_id DESC LIMIT 1", (row["release_id"],)).fetchone()
    assert last is not None and last[0] is False and last[1]


@check
def check_failed_plain_refresh_reports_the_error_alone(db, method, released, shared, schema, ctx):
    """A plain REFRESH MATERIALIZED VIEW of a release whose source can no longer be released fails
    with the message alone (no "plpy.Error: " prefix, no Python traceback), its SQLSTATE, and the
    old rows (issue 27, point 7)."""
    source, relation = fresh_release(db, method, schema, ctx)
    old = count(db, relation)
    break_source(db, method, source)
    with pytest.raises(psycopg.Error) as info:
        db.execute(f"REFRESH MATERIALIZED VIEW {relation}{method.storage_suffix}")
    diag = info.value.diag
    assert diag.message_primary and "plpy." not in diag.message_primary
    assert "Traceback" not in diag.message_primary and "Traceback" not in (diag.context or "")
    assert info.value.sqlstate not in (None, "38000", "XX000")
    assert count(db, relation) == old


@check
def check_drop_removes_everything(db, method, released, shared, schema, ctx):
    _, relation = fresh_release(db, method, schema, ctx)
    row = catalog(db, relation)
    names = [row["release_name"] + s for s in method.published_suffixes]
    present = "SELECT count(*) FROM pg_class WHERE relnamespace = %s::regnamespace AND relname = ANY(%s)"
    assert db.execute(present, (row["release_schema"], names)).fetchone()[0] == len(names)
    db.execute("SELECT anon.drop_release(%s)", (relation,))
    assert db.execute(present, (row["release_schema"], names)).fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM pg_class WHERE relnamespace = %s::regnamespace "
                      "AND relname LIKE %s", (row["release_schema"], row["release_name"] + "%")
                      ).fetchone()[0] == 0
    assert catalog(db, relation) is None


@check
def check_grants(db, method, released, shared, schema, ctx, connect):
    _, source, _ = shared
    relation = released(method)
    analyst = make_role(db, "analyst")
    try:
        db.execute("SELECT anon.grant_analyst(%s)", (analyst,))
        reader = ctx[1] if method.reader == "requester" else analyst
        with connect(user=reader) as conn:
            assert count(conn, relation) > 0
            assert failure(conn, f"SELECT * FROM {source}") == "42501"
            assert failure(conn, method.call(ctx[0], source, K, release_name="mine")) == "42501"
        if method.reader == "requester":   # a release for one requester: analysts do not read it
            with connect(user=analyst) as conn:
                assert failure(conn, f"SELECT * FROM {relation}") == "42501"
    finally:
        drop_role(db, analyst)


@check
def check_release_audit_tells_the_promise_readers_and_verdict(db, method, released, shared, schema, ctx):
    """anon.release_audit's row of the release: the catalog's promise and figures, the readers
    from the relation's grants, and a verdict whose reasons name the k asked and found."""
    relation = released(method)
    row = catalog(db, relation)
    cursor = db.execute("SELECT * FROM anon.release_audit(%s)", (relation,))
    [audit] = [dict(zip([c.name for c in cursor.description], r)) for r in cursor.fetchall()]
    assert (audit["release"], audit["method"]) == (relation, row["method"])
    assert audit["k"] == row["parameters"].get("k") and audit["achieved_k"] == row["achieved_k"]
    assert audit["l"] == row["parameters"].get("l") == (L if method.l_arg else None)
    grantees = db.execute(
        "SELECT coalesce(array_agg(DISTINCT grantee::regrole::text ORDER BY grantee::regrole::text), '{}') "
        "FROM pg_class c, aclexplode(c.relacl) a WHERE c.oid = %s::regclass "
        "AND a.privilege_type = 'SELECT' AND a.grantee <> c.relowner", (relation,)).fetchone()[0]
    assert audit["readers"] == grantees
    verified = db.execute("SELECT verified FROM anon.release_status() WHERE release = %s",
                          (relation,)).fetchone()[0]
    assert audit["verified"] is verified is True and audit["versions"] >= 1
    assert isinstance(audit["safe"], bool) and audit["why"]
    if audit["k"] is not None:
        assert f"k {audit['k']} asked, smallest class {row['achieved_k']}" in audit["why"]
    if method.l_arg:
        assert audit["distinct_l"] is None or audit["distinct_l"] >= L


# ------------------------------------------------------------------------------- bad inputs

@check
def check_unknown_source_42P01(db, method, released, shared, schema, ctx):
    assert failure(db, bad_call(method, ctx, shared, schema, f"{schema}.no_such_table", K)) \
        == "42P01"


@check
def check_unknown_quasi_identifier_42704(db, method, released, shared, schema, ctx):
    # 42704 (undefined_object) as documented in docs/mondrian.md, pattern.md, fusion.md; not
    # PostgreSQL's 42703 (undefined_column), the same for every method
    _, source, _ = shared
    argument = {"pattern_view": "columns", "fusion_resilient_view": "attributes"}.get(
        method.name, "quasi_identifiers")
    columns = list(method.qi_columns) + ["no_such_column"]
    assert failure(db, bad_call(method, ctx, shared, schema, source, K,
                                **{argument: columns})) == "42704"


def bad_k(db, method, ctx, shared, schema, k):
    if method.k_arg is None:   # no k argument: passing one is refused, never ignored
        assert failure(db, bad_call(method, ctx, shared, schema, shared[1], None, k=k)) == "42883"
        return
    if k is None:
        assert failure(db, bad_call(method, ctx, shared, schema, shared[1], k)) == "22023"
        return
    # one minimum for every method, refused with one message (fusion's k is the smallest scanned)
    name = "k_from" if method.name == "fusion_resilient_view" else method.k_arg
    with pytest.raises(psycopg.Error) as info:
        db.execute(bad_call(method, ctx, shared, schema, shared[1], k))
    assert (info.value.sqlstate, info.value.diag.message_primary) == \
        ("22023", f"{name} must be at least {MIN_K}, got {k}")


@check
def check_k_1_22023(db, method, released, shared, schema, ctx):
    bad_k(db, method, ctx, shared, schema, 1)


@check
def check_k_0_22023(db, method, released, shared, schema, ctx):
    bad_k(db, method, ctx, shared, schema, 0)


def k_has_default(db, method) -> bool:
    """Whether anon.<function>'s k argument has a default (pg_proc, not a hand list)."""
    row = db.execute(
        """SELECT p.proargnames, p.pronargs, p.pronargdefaults
           FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
           WHERE n.nspname = 'anon' AND p.proname = %s AND %s = ANY (p.proargnames)""",
        (method.function, method.k_arg if method.name != "fusion_resilient_view" else "k_from"),
    ).fetchone()
    names, nargs, ndefaults = row
    name = method.k_arg if method.name != "fusion_resilient_view" else "k_from"
    return names.index(name) >= nargs - ndefaults


@check
def check_k_null_is_refused_or_the_default(db, method, released, shared, schema, ctx):
    """The NULL rule every function follows: NULL for an argument without a default is refused
    (22023); NULL for one with a default means the default, so the release made with k => NULL
    records exactly the parameters of the release made without k."""
    if method.k_arg is None or not k_has_default(db, method):
        bad_k(db, method, ctx, shared, schema, None)
        return
    _, source, _ = shared
    target = release_schema_of(schema)
    k_name = "k_from" if method.name == "fusion_resilient_view" else method.k_arg
    with_null = method.call(ctx[0], source, None, release_schema=target, release_name="k_null")
    # the same call with the k argument left out altogether
    args = {**method.arguments(ctx[0], source, None), "release_schema": target,
            "release_name": "k_omitted"}
    assert args.pop(k_name) is None
    parts = [sql.SQL("{} => {}{}").format(
                 sql.Identifier(n), sql.Literal(v),
                 sql.SQL("::text[]" if isinstance(v, list) else "::jsonb" if n == "priorities" else ""))
             for n, v in args.items()]
    omitted = sql.SQL("SELECT anon.{}({}::regclass, {})").format(
        sql.Identifier(method.function), sql.Literal(source), sql.SQL(", ").join(parts))
    db.execute(with_null)
    db.execute(omitted)
    params = dict(db.execute(
        "SELECT release_name, parameters - 'objects' - 'grantees' FROM anon.releases "
        "WHERE release_schema = %s AND release_name IN ('k_null', 'k_omitted')", (target,)
    ).fetchall())
    assert set(params) == {"k_null", "k_omitted"}
    assert params["k_null"] == params["k_omitted"]


@check
def check_empty_table_22000(db, method, released, shared, schema, ctx):
    source = create_table(db, f"{schema}.people", n=0)
    assert failure(db, bad_call(method, ctx, shared, schema, source, K)) == "22000"


@check
def check_replace_false_42710(db, method, released, shared, schema, ctx):
    # 42710 (duplicate_object) as documented in docs/mondrian.md ("release exists (without
    # replace => true)")
    _, source, release_schema = shared
    relation = released(method)
    name = relation.split(".")[-1].replace('"', "")
    assert failure(db, method.call(ctx[0], source, K, release_name=name,
                                   release_schema=release_schema)) == "42710"
    assert count(db, qi_relation(method, relation)) > 0      # the existing release is untouched


@check
def check_view_source_42804(db, method, released, shared, schema, ctx):
    _, source, _ = shared
    db.execute(f"CREATE VIEW {schema}.people_view AS SELECT * FROM {source}")
    assert failure(db, bad_call(method, ctx, shared, schema, f"{schema}.people_view", K)) \
        == "42804"


# Known deviations from the contract, as the code behaves today (strict: they turn the check
# red when fixed, so the mark must then be removed). (check, method) -> reason.
XFAIL: dict[tuple[str, str], str] = {}


def cases():
    for fn in CHECKS:
        for method in METHODS:
            reason = XFAIL.get((fn.__name__, method.name))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            yield pytest.param(fn, method, marks=marks, id=f"{fn.__name__}[{method.name}]")


@pytest.mark.parametrize(("contract_check", "method"), list(cases()))
def test_contract(contract_check, method, request):
    fixtures = {name: request.getfixturevalue(name)
                for name in contract_check.__code__.co_varnames[:contract_check.__code__.co_argcount]
                if name != "method"}
    contract_check(method=method, **fixtures)




def test_every_release_function_is_under_contract(db):
    """A public function that publishes releases (it takes release_schema; the _-prefixed ones
    are internal) and is missing from
    methods.METHODS would escape every check above: list them from pg_proc, not by hand."""
    functions = {r[0] for r in db.execute(
        "SELECT DISTINCT proname::text FROM pg_proc WHERE pronamespace = 'anon'::regnamespace "
        "AND 'release_schema' = ANY(proargnames) AND proname !~ '^_'").fetchall()}
    assert functions == {m.function for m in METHODS}
    # both mondrian_view overloads (plain, and priorities text / jsonb) are covered
    overloads = db.execute("SELECT count(*) FROM pg_proc WHERE proname = 'mondrian_view' "
                           "AND pronamespace = 'anon'::regnamespace "
                           "AND 'priorities' = ANY(proargnames)").fetchone()[0]
    assert overloads >= 1 and "prioritized_mondrian_view" in BY_NAME
