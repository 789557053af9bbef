"""Independent checks over released rows, written in SQL so they share no code with the extension."""
from __future__ import annotations

import contextlib
import uuid

from psycopg import sql


@contextlib.contextmanager
def encoded_database(connect, encoding: str, extension: bool = True):
    """A throwaway database of ``encoding`` (C locale), with plpy_anon in it unless
    ``extension`` is false: its name, dropped afterwards."""
    name = f"{encoding.lower()}_{uuid.uuid4().hex[:8]}"
    with connect(dbname="postgres") as admin:
        admin.execute(sql.SQL("CREATE DATABASE {} ENCODING {} TEMPLATE template0 "
                              "LC_COLLATE 'C' LC_CTYPE 'C'").format(sql.Identifier(name),
                                                                    sql.Literal(encoding)))
    try:
        if extension:
            with connect(dbname=name) as conn:
                conn.execute("CREATE EXTENSION plpy_anon CASCADE")
        yield name
    finally:
        with connect(dbname="postgres") as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


@contextlib.contextmanager
def budget(conn, size: str):
    """plpy_anon.build_memory = ``size`` in ``conn``'s session for the block (a tiny one stands in
    for a table larger than the memory a build may take)."""
    conn.execute("SELECT set_config('plpy_anon.build_memory', %s, false)", (size,))
    try:
        yield
    finally:
        conn.execute("RESET plpy_anon.build_memory")


def class_sizes(conn, relation: str, qi_columns: list[str]) -> list[int]:
    """Sizes of the equivalence classes of a released relation: rows with identical generalized QIs
    (ranges compare by bounds, arrays element-wise, NULLs group together)."""
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in qi_columns)
    query = sql.SQL("SELECT count(*) FROM {} GROUP BY {}").format(
        sql.SQL(relation), cols)
    return [r[0] for r in conn.execute(query).fetchall()]


def distinct_sensitive_per_class(conn, relation: str, qi_columns: list[str], sensitive: str) -> list[int]:
    """Per class, the sensitive values an attacker is unsure between: SQL's count(DISTINCT),
    which leaves NULL out (a NULL is no value)."""
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in qi_columns)
    query = sql.SQL("SELECT count(DISTINCT {}) FROM {} GROUP BY {}").format(
        sql.Identifier(sensitive), sql.SQL(relation), cols)
    return [r[0] for r in conn.execute(query).fetchall()]


def release_columns(conn, relation: str) -> list[tuple[str, str]]:
    rows = conn.execute(
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        (relation,)).fetchall()
    return [(r[0], r[1]) for r in rows]


def release_schema_of(schema: str) -> str:
    """The release schema of a test whose source tables live in ``schema``: a schema that does not
    exist before the test's first release (plpy_anon creates it, releases go only into schemas it
    created); the ``schema`` fixture drops it with its releases."""
    return f"{schema[:58]}_rel"


# A function that only says who runs it: planted by attackers in the adversarial tests, it must
# never appear among the notices of a session that refreshes or verifies a release.
EVIL = """
CREATE FUNCTION {schema}.evil() RETURNS int LANGUAGE plpgsql AS $f$
BEGIN
  RAISE NOTICE 'evil as % super=%', current_user,
        (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user);
  RETURN 1;
END $f$"""


def notices(conn) -> list[str]:
    """The primary messages of the NOTICEs ``conn`` receives from now on (a live list)."""
    seen: list[str] = []
    conn.add_notice_handler(lambda d: seen.append(d.message_primary))
    return seen


@contextlib.contextmanager
def role_owning_schema(db, name: str):
    """A new plain login role (no grants) owning a new schema ``name``: the owner of a source table
    in the adversarial tests. Yields (role, schema identifier); drops both afterwards."""
    role = f"adv_{uuid.uuid4().hex[:8]}"
    schema = sql.Identifier(name)
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    db.execute(sql.SQL("CREATE SCHEMA {} AUTHORIZATION {}").format(schema, sql.Identifier(role)))
    try:
        yield role, schema
    finally:
        db.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(schema))
        db.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(role)))
        db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def assert_payload_not_run(db, role: str, seen: list[str]) -> None:
    """No NOTICE of the owner's payload ('evil as ...') and the owner did not become superuser."""
    evil = [m for m in seen if m.startswith("evil")]
    superuser = db.execute("SELECT rolsuper FROM pg_roles WHERE rolname = %s", (role,)).fetchone()[0]
    assert not evil and not superuser, (evil, superuser)


#: the owner's payload in the adversarial tests (format with s = quoted schema, owner = quoted
#: role literal): a NOTICE naming who runs it and, run by a superuser, the owner made superuser
PAYLOAD_FUNCTION = """
CREATE FUNCTION {s}.payload() RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN
  RAISE NOTICE 'evil as % super=%', current_user, current_setting('is_superuser');
  IF current_setting('is_superuser') = 'on' THEN
    EXECUTE pg_catalog.format('ALTER ROLE %I SUPERUSER', {owner});
  END IF;
  RETURN true;
END $f$;
"""


def matview(conn, release: str) -> str:
    """The materialized view a plain REFRESH MATERIALIZED VIEW of ``release`` (quoted, qualified)
    names: a compact release's storage (the release itself is a view over it), else the release."""
    kind = conn.execute("SELECT relkind::text FROM pg_class WHERE oid = to_regclass(%s)",
                        (release,)).fetchone()
    if not kind or kind[0] != "v":
        return release
    return release[:-1] + '_classes"' if release.endswith('"') else release + "_classes"


def drop_statement(conn, relation: str) -> str:
    """DROP MATERIALIZED VIEW or DROP VIEW (a compact release) of ``relation``, as it is."""
    kind = conn.execute("SELECT relkind::text FROM pg_class WHERE oid = to_regclass(%s)",
                        (relation,)).fetchone()
    return f"DROP {'VIEW' if kind and kind[0] == 'v' else 'MATERIALIZED VIEW'} {relation}"


def create_release(db, function: str, schema: str, table: str, **arguments) -> str:
    """SELECT anon.<function>('"schema".table', name => value, ..., release_schema => the test's
    release schema): every argument named and literal; returns the release's name."""
    args = [sql.SQL("{} => {}").format(sql.Identifier(k), sql.Literal(v)) for k, v in arguments.items()]
    args.append(sql.SQL("release_schema => {}").format(sql.Literal(release_schema_of(schema))))
    query = sql.SQL("SELECT anon.{}({}, {})").format(
        sql.Identifier(function), sql.Literal(f'"{schema}".{table}'), sql.SQL(", ").join(args))
    return db.execute(query).fetchone()[0]


def load_python_stack(conn) -> None:
    """Import the backend's whole Python stack now, in ``conn``'s backend (calls import only what
    they need, so a test or benchmark that must not pay for imports inside what it measures or
    interrupts loads them first). Needs a superuser (a plpython3u DO block)."""
    conn.execute("SELECT * FROM anon.versions()").fetchall()      # activates the environment
    conn.execute("DO LANGUAGE plpython3u $$ import numpy, pandas, scipy, sklearn, sqlglot $$")


def keep_released_version(conn, release: str, table: str, key: str, qis: dict[str, str], sensitive: str) -> dict:
    """What an analyst keeps of one version: who is in ``table`` (he knows people's ``key`` and
    QIs) and the classes each could sit in (every released class whose ranges and sets hold their
    QIs: ``qis`` maps each QI to 'range' or 'set'), and each class's multiset of ``sensitive``
    values, from the released rows alone. Returns {"people": {key: [class, ...]}, "classes":
    {class: [values]}} (NULL is no value)."""
    q = [sql.Identifier(c) for c in qis]
    on = sql.SQL(" AND ").join(
        sql.SQL("c.{0} @> p.{0}").format(c) if kind == "range" else sql.SQL("p.{0} = ANY(c.{0})").format(c)
        for c, kind in zip(q, qis.values()))
    classes = sql.SQL("""SELECT row_number() OVER (ORDER BY {q}) AS n, g.* FROM (
            SELECT {q}, array_agg({s} ORDER BY {s}) FILTER (WHERE {s} IS NOT NULL) AS vals, count(*) AS size
            FROM {rel} GROUP BY {q}) g""").format(
        q=sql.SQL(", ").join(q), s=sql.Identifier(sensitive), rel=sql.SQL(release))
    rows = conn.execute(sql.SQL("""WITH c AS ({classes})
        SELECT p.{key}, array_agg(c.n ORDER BY c.n) FILTER (WHERE c.n IS NOT NULL)
        FROM {table} p LEFT JOIN c ON {on} GROUP BY p.{key}""").format(
        classes=classes, key=sql.Identifier(key), table=sql.SQL(table), on=on)).fetchall()
    multisets = conn.execute(sql.SQL("SELECT n, vals FROM ({}) AS c").format(classes)).fetchall()
    return {"people": {p: (cs or []) for p, cs in rows},
            "classes": {n: (vals or []) for n, vals in multisets}}


def intersected_candidates(kept: list[dict]) -> dict:
    """Each person's candidate values: those of every class that could hold them (from the
    released rows), intersected over every kept version (:func:`keep_released_version`) in
    which some class holds them. Published or held back, an analyst who knows a person is in
    the table cannot tell which."""
    candidates: dict = {}
    for version in kept:
        for p, classes in version["people"].items():
            values = {v for n in classes for v in version["classes"][n]}
            if values:          # a version where no class holds them tells the analyst nothing
                candidates[p] = candidates.get(p, values) & values
    return candidates


def pinned_by_intersection(kept: list[dict]) -> dict:
    """People whose :func:`intersected_candidates` are one: that value."""
    return {p: min(v) for p, v in intersected_candidates(kept).items() if len(v) == 1}


def intersected_below_l(kept: list[dict], l: int) -> dict:
    """People whose :func:`intersected_candidates` are fewer than ``l``: {person: the values
    left}."""
    return {p: sorted(v) for p, v in intersected_candidates(kept).items() if len(v) < l}


def pinned_by_difference(before: dict, after: dict) -> dict:
    """People whose sensitive value an analyst reads off two kept versions (:func:`keep_released_version`)
    by subtraction: classes are linked into components by the people in both versions (a person
    links every class that could hold them, in either); in each component, the values added (the
    multiset difference after - before) when they are as many as the people who joined it and
    all one value pin those joiners to it; the values removed likewise pin the leavers. Returns
    {person: value}."""
    parent: dict = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def link(nodes):
        nodes = list(nodes)
        for other in nodes[1:]:
            parent[find(other)] = find(nodes[0])

    for version, kept in (("b", before), ("a", after)):
        for n in kept["classes"]:
            find((version, n))
        for person, classes in kept["people"].items():
            link([(version, n) for n in classes])
    for person in before["people"].keys() & after["people"].keys():
        link([("b", n) for n in before["people"][person]] + [("a", n) for n in after["people"][person]])
    totals: dict = {}
    for version, kept in (("b", before), ("a", after)):
        for n, vals in kept["classes"].items():
            bucket = totals.setdefault(find((version, n)), ({}, {}))[version == "a"]
            for v in vals:
                bucket[v] = bucket.get(v, 0) + 1
    movers: dict = {}
    for version, kept, other in (("b", before, after), ("a", after, before)):
        for person, classes in kept["people"].items():
            if person not in other["people"] and classes:
                movers.setdefault((find((version, classes[0])), version), []).append(person)
    pinned = {}
    for root, (old, new) in totals.items():
        added = {v: c - old.get(v, 0) for v, c in new.items() if c > old.get(v, 0)}
        removed = {v: c - new.get(v, 0) for v, c in old.items() if c > new.get(v, 0)}
        for change, version in ((added, "a"), (removed, "b")):
            people = movers.get((root, version), [])
            if people and len(change) == 1 and sum(change.values()) == len(people):
                pinned.update(dict.fromkeys(people, next(iter(change))))
    return pinned


class Interrupted(Exception):
    """What a CountingCheck raises: a cancel, as the database layer's installed check raises one."""


class CountingCheck:
    """An interrupt check to install (core.interrupts.checking) that counts its calls and raises
    Interrupted on call number ``raise_at`` (never if None): a cancel pending from that call on."""

    def __init__(self, raise_at=None):
        self.calls, self.raise_at = 0, raise_at

    def __call__(self):
        self.calls += 1
        if self.calls == self.raise_at:
            raise Interrupted
