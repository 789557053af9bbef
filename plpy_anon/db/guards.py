"""The guards every read of a user relation goes through: the only way to get a ``Table`` is
:func:`table` (a build, a refresh, a call: the table tree locked, then checked) or
:func:`table_in_query` (inside the STABLE functions a release's own query calls, which may not
lock: checked only, after the build or refresh that runs the query guarded it), and
:func:`guard_relation` for what a report reads (views and materialized views too). The reader
refuses a ``Table`` no guard made (``Table.guard``).

What a guard refuses, and why, is the threat model of docs/security.md: code of a role that is
not a superuser that planning a query on the relation would run with the caller's rights
(index predicates, partition keys, statistics, views' rules, range types), tables whose schema
or owner another role could change between the check and the read, foreign tables.
"""
from __future__ import annotations

from dataclasses import dataclass

from plpy_anon.core.errors import AnonError, UnsupportedType
from plpy_anon.db import extschema
from plpy_anon.db.planner_code import INHERITANCE_TREE, PLANNER_CODE
from plpy_anon.db.sqltext import ident, run


@dataclass(frozen=True)
class Table:
    oid: int
    schema: str
    name: str
    quoted_name: str = ""   # format('%I.%I'): how messages name the table (see label)
    guard: str = ""         # "locked" (table) or "checked" (table_in_query); "" no guard made it

    def quoted(self, plpy) -> str:
        """The name queries read the table by: only a Table a guard made has one."""
        if self.guard not in ("locked", "checked"):
            raise RuntimeError(f"{self.label} was not resolved by plpy_anon.db.guards")
        return ident(plpy, self.schema, self.name)

    @property
    def label(self) -> str:
        """The table as messages name it: quoted where SQL needs it (``public."Pat ""ients"``,
        not ``public.Pat "ients``)."""
        return self.quoted_name or f"{self.schema}.{self.name}"



TABLE_QUERY = """
SELECT c.oid::int8 AS oid, n.nspname::text AS schema, c.relname::text AS name, c.relkind::text AS relkind,
       pg_catalog.format('%I.%I', n.nspname, c.relname) AS quoted_name
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = $1::pg_catalog.regclass
"""

RELKIND_NAMES = {"v": "a view", "m": "a materialized view", "p": "a partitioned table",
                 "f": "a foreign table", "S": "a sequence", "i": "an index", "c": "a composite type"}


def table(plpy, source: str) -> Table:
    """The table named by ``source`` (a regclass rendered as text by PL/Python): an ordinary table
    (with its inheritance children, if any) or a partitioned table (with all its partitions).
    Releases read it without ONLY: every row of the hierarchy is released. Locked against new
    planner code and checked (:func:`guard_source`), so that the check holds until the
    transaction ends."""
    row = _table_row(plpy, source)
    # the name this Table will be read by is the one locked and verified
    guard_source(plpy, int(row["oid"]), row["quoted_name"])
    return Table(int(row["oid"]), row["schema"], row["name"], row["quoted_name"], "locked")


def table_in_query(plpy, source: str) -> Table:
    """:func:`table` for the STABLE functions a release's query calls (its run), which may not
    lock: the build or refresh running the query locked and checked the source first; the
    check (:func:`check_planner_code`) again."""
    row = _table_row(plpy, source)
    check_planner_code(plpy, int(row["oid"]), row["quoted_name"])
    return Table(int(row["oid"]), row["schema"], row["name"], row["quoted_name"], "checked")


def _table_row(plpy, source: str) -> dict:
    rows = run(plpy, TABLE_QUERY, ["text"], [source])
    if not rows:       # resolved by name (the catalog's latest state), absent from the snapshot
        raise SourceChanged(
            f"table {extschema.user(source)} was created after this transaction's snapshot was taken (REPEATABLE "
            "READ or SERIALIZABLE), so this call cannot read it",
            hint="Run the call in a new transaction.")
    row = rows[0]
    if row["relkind"] not in ("r", "p"):
        raise UnsupportedType(
            f"{extschema.user(row['schema'] + '.' + row['name'])} is "
            f"{RELKIND_NAMES.get(row['relkind'], 'not a table')}; "
            "releases are made from tables (ordinary, partitioned or inheritance parents)",
            hint="Copy the data into a table first: CREATE TABLE t AS SELECT ...")
    # the catalog's name of a user's table (which may be in a schema anon): never rewritten
    row["quoted_name"] = extschema.user(row["quoted_name"])
    return row


def check_planner_code(plpy, oid: int, label: str) -> None:
    """Refuse table ``oid`` (with its children and partitions) if planning a query on it would run
    a function not owned by a superuser (see PLANNER_CODE), or if it has foreign partitions or
    children unless the caller owns the table, each of them and their servers (a postgres_fdw
    partition whose user mapping logs in as the DBA when the DBA is a superuser runs the owner's
    remote view as postgres; what the caller owns, it chose). Catalog reads only: callable
    from any function; :func:`guard_source` adds the lock that keeps it true until the transaction
    ends."""
    rows = run(plpy, PLANNER_CODE, ["oid"], [oid])
    foreign = [r["what"] for r in rows if r["function"] is None]
    if foreign:
        raise UnsafeSource(
            f"table {label} has foreign partitions or children ({', '.join(foreign[:5])}): "
            "reading them runs a query on another server, as the user mapping says, on behalf of "
            "whoever builds or refreshes a release of it",
            hint="Release a local copy of the data (CREATE TABLE ... AS SELECT), detach the "
                 "foreign tables, or build as the role owning them and their servers.")
    refuse_code(rows, "what", "calls",
                f"planning a query on table {label} would run functions not owned by a "
                "superuser, with the rights of whoever builds or refreshes a release of it",
                "Have a superuser review those functions and ALTER FUNCTION ... OWNER TO a "
                "superuser role, or drop the index / constraint / statistics, or release a copy "
                "of the table (CREATE TABLE ... AS SELECT, made by its owner) instead.")


# The source as LOCK names it; whether the caller may take SHARE UPDATE EXCLUSIVE on it (UPDATE,
# DELETE or TRUNCATE); whether the caller is a superuser (who also locks the schema's row); the
# first member of its inheritance tree owned by a role other than the caller and superusers
# (only an owner adds indexes, statistics or children); the table itself if row security applies
# to the caller (whose policies run as the reader; a partition's do not, read through its parent);
# the schema and its owner unless only the caller or a superuser may rename it (owned
# by the caller, a superuser, or pg_database_owner of a database one of them owns)
LOCK_TARGET = f"""
WITH RECURSIVE me AS (SELECT r.oid, r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = current_user),
{INHERITANCE_TREE},
kept(role_oid, kept) AS (
    SELECT r.oid, r.oid = me.oid OR r.rolsuper FROM pg_catalog.pg_roles r, me),
foreign_members AS (
    SELECT pg_catalog.format('%I.%I (owned by %I)', tn.nspname, tc.relname, o.rolname) AS what
    FROM tree JOIN pg_catalog.pg_class tc ON tc.oid = tree.oid
    JOIN pg_catalog.pg_namespace tn ON tn.oid = tc.relnamespace
    JOIN pg_catalog.pg_roles o ON o.oid = tc.relowner
    JOIN kept ON kept.role_oid = tc.relowner WHERE NOT kept.kept)
SELECT pg_catalog.format('%I.%I', n.nspname, c.relname) AS name,
       pg_catalog.has_table_privilege(c.oid, 'UPDATE') OR pg_catalog.has_table_privilege(c.oid, 'DELETE')
       OR pg_catalog.has_table_privilege(c.oid, 'TRUNCATE') AS may_lock,
       (SELECT me.rolsuper FROM me) AS superuser,
       (SELECT min(f.what) FROM foreign_members f) AS foreign_owner,
       CASE WHEN c.relrowsecurity AND (c.relowner <> (SELECT me.oid FROM me) OR c.relforcerowsecurity)
            THEN pg_catalog.format('%I.%I', n.nspname, c.relname) END AS policies_apply,
       (SELECT CASE WHEN kept.kept OR (o.rolname = 'pg_database_owner' AND d.kept) THEN NULL
                    ELSE pg_catalog.format('%I (owned by %I%s)', n.nspname, o.rolname,
                         CASE WHEN o.rolname = 'pg_database_owner'
                              THEN ', the owner of this database: ' || d.rolname ELSE '' END) END
        FROM pg_catalog.pg_roles o JOIN kept ON kept.role_oid = o.oid,
             (SELECT k.kept, r.rolname::text FROM pg_catalog.pg_database db JOIN kept k ON k.role_oid = db.datdba
              JOIN pg_catalog.pg_roles r ON r.oid = db.datdba
              WHERE db.datname = pg_catalog.current_database()) AS d
        WHERE o.oid = n.nspowner) AS open_schema,
       pg_catalog.current_setting('transaction_isolation') AS isolation
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = $1 AND c.relkind IN ('r', 'p')"""

# The members of a table's inheritance tree (partitions and children, recursively) that LOCK takes
# and this backend does not hold in a mode that keeps CREATE INDEX out (SHARE UPDATE EXCLUSIVE or
# one conflicting with SHARE)
TREE_NOT_HELD = f"""
WITH RECURSIVE {INHERITANCE_TREE}
SELECT c.oid FROM tree JOIN pg_catalog.pg_class c ON c.oid = tree.oid
WHERE c.relkind IN ('r', 'p')      -- LOCK takes no foreign table (check_planner_code refuses them)
  AND NOT EXISTS (
    SELECT 1 FROM pg_catalog.pg_locks l
    WHERE l.pid = pg_catalog.pg_backend_pid() AND l.locktype = 'relation' AND l.granted
      AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d
                        WHERE d.datname = pg_catalog.current_database())
      AND l.relation = c.oid
      AND l.mode IN ('ShareUpdateExclusiveLock', 'ShareRowExclusiveLock', 'ExclusiveLock',
                     'AccessExclusiveLock'))"""


def refuse_unkept(name: str, row: dict) -> None:
    """Refuse a source whose code could change between the guard's check and the caller's reads
    (see guard_source), naming what is not kept and why."""
    if row["foreign_owner"] and row["isolation"] not in ("read committed", "read uncommitted"):
        raise SourceChanged(
            f"table {name} belongs in part to another role ({row['foreign_owner']}), and under "
            f"{row['isolation'].upper()} this call's checks would read the catalog as it was "
            "before the call locked the table",
            hint="Run the call in a READ COMMITTED transaction (the default).")
    if row["superuser"]:
        return
    why = None
    if row["open_schema"]:
        why = (f"its schema {row['open_schema']} may be renamed by a role other than you and "
               "superusers, who could swap in another table after the check")
    elif row["policies_apply"]:
        why = ("its row security policies would run with your rights, and no check follows what "
               "they call or read")
    elif row["foreign_owner"] and not row["may_lock"]:
        why = (f"{row['foreign_owner']} may get an index calling its owner's function after the "
               "check, since you may not lock the table (UPDATE, DELETE or TRUNCATE)")
    if why:
        raise UnsafeSource(
            f"table {name} cannot be kept as checked while this call reads it: {why}",
            detail="A role that is not a superuser reads only a table in a schema that only it or "
                   "a superuser can rename, owned with its inheritance tree by it or superusers or "
                   "lockable by it, and with no row security policy that applies to it.",
            hint="Release a copy of the table made by you (CREATE TABLE ... AS SELECT) in a "
                 "schema of yours, or have a superuser build the release.")


def lock_tree(plpy, oid: int, name: str) -> None:
    """SHARE UPDATE EXCLUSIVE on every member of table ``oid``'s inheritance tree, ``name`` being
    the root's name (checked to mean ``oid`` by the caller). LOCK TABLE lists the descendants
    before it waits, so a child attached meanwhile to a member it was waiting for is not locked:
    lock the root again (a new statement: a fresh look at the tree) until this backend holds every
    member, as pg_locks shows by oid -- a member is never taken by a name its owner may have moved
    to another table. Only the root is named: LOCK checks privileges on the table it names."""
    for _ in range(100):
        plpy.execute(f"LOCK TABLE {name} IN SHARE UPDATE EXCLUSIVE MODE")
        if not run(plpy, TREE_NOT_HELD, ["oid"], [oid]):
            return
        if not run(plpy, "SELECT pg_catalog.to_regclass($1)::pg_catalog.oid = $2 AS same",
                   ["text", "oid"], [name, oid])[0]["same"]:
            return                   # locked another table: guard_source refuses it (55000)
    raise SourceChanged(f"the partitions or children of table {name} kept changing while this call "
                        "locked them; nothing was read", hint="Run the call again.")


def lock_source(plpy, source: str) -> None:
    """The first lock of a refresh, taken in the order every path takes its locks (docs/
    operations.md, "Locks"): the source tree SHARE UPDATE EXCLUSIVE, as a build's entry takes it,
    before the release's own lock and relations. Only the lock: :func:`guard_source` checks the
    table once the release is locked (and reports a source that is gone, renamed or refused)."""
    try:
        with plpy.subtransaction():
            oid = run(plpy, "SELECT pg_catalog.to_regclass($1)::pg_catalog.oid AS oid", ["text"], [source])[0]["oid"]
            row = run(plpy, LOCK_TARGET, ["oid"], [oid]) if oid is not None else []
            if row and row[0]["may_lock"]:
                plpy.execute(f"LOCK TABLE {extschema.user(row[0]['name'])} IN SHARE UPDATE EXCLUSIVE MODE")
    except (plpy.spiexceptions.DeadlockDetected, plpy.spiexceptions.LockNotAvailable,
            plpy.spiexceptions.QueryCanceled):
        raise                    # going on unlocked would take the release's lock first
    except plpy.SPIError:
        pass                     # the guard, under the release's lock, says what is wrong


def guard_source(plpy, oid: int, name: str | None = None) -> None:
    """Before a release's build or refresh plans anything on its source: lock the table tree
    against new indexes, constraints and statistics (SHARE UPDATE EXCLUSIVE: reads and writes go
    on; concurrent builds of the same source, VACUUM and CREATE INDEX wait), then
    :func:`check_planner_code`. Without the lock an index created during a build would be
    planned, and run, by the build's later queries. A caller that is not a superuser is refused
    unless only it or a superuser may rename the table's schema (the superuser's schema row lock
    needs UPDATE on pg_namespace), the tree is owned by it or superusers or it may take that lock
    (UPDATE, DELETE or TRUNCATE), and no other role's row security applies: otherwise another
    owner could plant code, or swap in another table, between the check and the plan, and run it
    with the caller's rights (refuse_unkept). A tree owned in part by another role is checked only
    under READ COMMITTED, where the check after the lock sees what the lock waited for.
    ``name``: the name the caller
    will read the table by, read before this call (default: the oid's name now); it is the name
    locked, and refused unless it still means ``oid`` (two tables' names swapped between the
    caller's read and this one would have the guard check one and the reads go to the other)."""
    row = run(plpy, LOCK_TARGET, ["oid"], [oid])
    if not row:
        return                   # gone or not a table: the build reports it in its own words
    name = extschema.user(name or row[0]["name"])
    refuse_unkept(name, row[0])
    if row[0]["may_lock"]:
        lock_tree(plpy, oid, name)
        # what the lock waited for (a new owner, row security, a child) is seen only now
        again = run(plpy, LOCK_TARGET, ["oid"], [oid])
        if again:
            refuse_unkept(name, again[0])
        # every later query finds the table by its schema's NAME, and ALTER SCHEMA ... RENAME
        # takes no lock on the tables inside, so two schemas could trade names mid-call. A
        # superuser (the caller who matters) also share-locks the schema's catalog row, which a
        # rename must update: it waits until this transaction ends. Only a superuser may: FOR
        # SHARE needs UPDATE on pg_namespace, checked when the query is planned, whatever it reads
        if row[0]["superuser"]:
            run(plpy, """
                SELECT 1 FROM pg_catalog.pg_namespace n
                WHERE n.oid = (SELECT c.relnamespace FROM pg_catalog.pg_class c WHERE c.oid = $1)
                FOR SHARE OF n""", ["oid"], [oid])
    # LOCK takes a name, and while it waited (or, unlocked, since the caller read it) the owner
    # may have renamed the table and given its name to another one, or turned it into a view: go
    # on only if the name still means this table, and it is
    # still a table. Locked, neither can change any more until the transaction ends.
    after = run(plpy, """
        SELECT c.relkind::text AS relkind, pg_catalog.to_regclass($2)::pg_catalog.oid = c.oid AS same
        FROM pg_catalog.pg_class c WHERE c.oid = $1""", ["oid", "text"], [oid, name])
    if not after or after[0]["relkind"] not in ("r", "p") or not after[0]["same"]:
        when = "while this call waited for it" if row[0]["may_lock"] else "during this call"
        raise SourceChanged(
            f"table {name} was renamed, replaced or turned into a view {when}; nothing was read",
            hint="Check what the table is now, then run the call again.")
    check_planner_code(plpy, oid, name)


#: a view and the views it reads, recursively (``views``)
VIEW_TREE = """
WITH RECURSIVE views(oid) AS (
    SELECT $1::pg_catalog.oid
    UNION
    SELECT d.refobjid FROM views
    JOIN pg_catalog.pg_rewrite w ON w.ev_class = views.oid
    JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass
         AND d.objid = w.oid AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
         AND d.refobjid <> views.oid
    JOIN pg_catalog.pg_class c ON c.oid = d.refobjid AND c.relkind = 'v')"""

#: what a view reads (through the views it reads, recursively): the relations that are not views;
#: the functions (or operators' functions) its rules call that are not built in (pg_catalog's:
#: another function's body may read relations no check here follows, a superuser's included);
#: and the types it uses (domains, ranges, composite types) owned by a role that is neither a
#: superuser nor the caller (a domain's CHECK runs on a cast to it, a range's subtype_diff when
#: the planner estimates an && on it)
VIEW_READS = VIEW_TREE + """,
rule_refs AS (
    SELECT views.oid AS view, d.refclassid, d.refobjid
    FROM views JOIN pg_catalog.pg_rewrite w ON w.ev_class = views.oid
    JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass
         AND d.objid = w.oid)
SELECT DISTINCT c.oid::int8 AS oid, c.relkind::text AS relkind,
       pg_catalog.format('%I.%I', n.nspname, c.relname) AS name, NULL::text AS function,
       NULL::text AS owner
FROM rule_refs x JOIN pg_catalog.pg_class c ON c.oid = x.refobjid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE x.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass AND x.refobjid <> x.view
  AND c.relkind <> 'v'
UNION
SELECT NULL, NULL, pg_catalog.format('view %s', x.view::pg_catalog.regclass),
       pg_catalog.format('function %s', p.oid::pg_catalog.regprocedure),
       pg_catalog.pg_get_userbyid(p.proowner)::text
FROM rule_refs x
LEFT JOIN pg_catalog.pg_operator o
       ON x.refclassid = 'pg_catalog.pg_operator'::pg_catalog.regclass AND o.oid = x.refobjid
JOIN pg_catalog.pg_proc p
  ON p.oid = CASE WHEN x.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass THEN x.refobjid
                  ELSE o.oprcode::pg_catalog.oid END
WHERE p.pronamespace <> 'pg_catalog'::pg_catalog.regnamespace
UNION
-- built-ins that run SQL text or read relations named at run time: what they read is neither
-- locked nor checked (an index on a table a DBA's view reads through
-- query_to_xml('SELECT ... FROM owner.t') would run unchecked). Built-ins are pinned and leave no pg_depend row:
-- they are found in the rule's node tree by their oid
SELECT NULL, NULL, pg_catalog.format('view %s', views.oid::pg_catalog.regclass),
       pg_catalog.format('function %s', p.oid::pg_catalog.regprocedure),
       pg_catalog.pg_get_userbyid(p.proowner)::text
FROM views JOIN pg_catalog.pg_rewrite w ON w.ev_class = views.oid
JOIN pg_catalog.pg_proc p ON p.pronamespace = 'pg_catalog'::pg_catalog.regnamespace
 AND p.proname IN ('query_to_xml', 'query_to_xmlschema', 'query_to_xml_and_xmlschema',
                   'cursor_to_xml', 'cursor_to_xmlschema', 'table_to_xml', 'table_to_xmlschema',
                   'table_to_xml_and_xmlschema', 'schema_to_xml', 'schema_to_xmlschema',
                   'schema_to_xml_and_xmlschema', 'database_to_xml', 'database_to_xmlschema',
                   'database_to_xml_and_xmlschema', 'ts_stat')
WHERE w.ev_action::text OPERATOR(pg_catalog.~) (':funcid ' || p.oid::text || '\\M')
UNION
-- an operator of another role's: its negator or commutator (which the planner may substitute)
-- is that role's choice, even when its own function is a built-in
SELECT NULL, NULL, pg_catalog.format('view %s', x.view::pg_catalog.regclass),
       pg_catalog.format('operator %s', o.oid::pg_catalog.regoperator),
       pg_catalog.pg_get_userbyid(o.oprowner)::text
FROM rule_refs x
JOIN pg_catalog.pg_operator o
  ON x.refclassid = 'pg_catalog.pg_operator'::pg_catalog.regclass AND o.oid = x.refobjid
JOIN pg_catalog.pg_roles r ON r.oid = o.oprowner
WHERE NOT r.rolsuper AND r.rolname <> current_user
UNION
SELECT NULL, NULL, pg_catalog.format('view %s', x.view::pg_catalog.regclass),
       pg_catalog.format('type %s', t.oid::pg_catalog.regtype),
       pg_catalog.pg_get_userbyid(t.typowner)::text
FROM rule_refs x
JOIN pg_catalog.pg_type t
  ON x.refclassid = 'pg_catalog.pg_type'::pg_catalog.regclass AND t.oid = x.refobjid
JOIN pg_catalog.pg_roles r ON r.oid = t.typowner
LEFT JOIN pg_catalog.pg_class tc ON tc.oid = t.typrelid
WHERE t.typnamespace <> 'pg_catalog'::pg_catalog.regnamespace
  AND NOT r.rolsuper AND r.rolname <> current_user
  AND (t.typrelid = 0 OR tc.relkind = 'c')      -- a table's row type runs nothing
"""


#: the views a view reads (itself included, through nested views) that are owned neither by a
#: superuser nor by the caller
FOREIGN_VIEWS = VIEW_TREE + """
SELECT pg_catalog.format('%s (owned by %s)', c.oid::pg_catalog.regclass,
                         pg_catalog.pg_get_userbyid(c.relowner)) AS view
FROM views JOIN pg_catalog.pg_class c ON c.oid = views.oid
JOIN pg_catalog.pg_roles r ON r.oid = c.relowner
WHERE NOT r.rolsuper AND r.rolname <> current_user
"""


#: columns (all, or those named) whose type -- through domains -- is a range or multirange type
#: whose subtype_diff or canonical function no superuser owns: ANALYZE of any relation holding
#: such a column (autovacuum's included, as the relation's owner) and the planner's estimate of
#: a range operator on it call that function
UNSAFE_RANGES = """
WITH RECURSIVE flat(name, type) AS (
    SELECT a.attname::text, a.atttypid FROM pg_catalog.pg_attribute a
    WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
      AND ($2::text[] IS NULL OR a.attname = ANY($2))
    UNION ALL
    SELECT f.name, t.typbasetype FROM flat f JOIN pg_catalog.pg_type t ON t.oid = f.type
    WHERE t.typtype = 'd')
SELECT DISTINCT f.name, p.oid::pg_catalog.regprocedure::text AS function,
       pg_catalog.pg_get_userbyid(p.proowner)::text AS owner
FROM flat f
JOIN pg_catalog.pg_range rg ON rg.rngtypid = f.type OR rg.rngmultitypid = f.type
JOIN pg_catalog.pg_proc p ON p.oid IN (rg.rngsubdiff, rg.rngcanonical)
JOIN pg_catalog.pg_roles o ON o.oid = p.proowner
WHERE NOT o.rolsuper
"""


def check_range_columns(plpy, oid: int, label: str, names: list[str] | None = None) -> None:
    """Refuse a relation whose columns (``names``, default all) are of a range type whose
    subtype_diff or canonical function no superuser owns. Kept as a sensitive column of a
    Mondrian release (a materialized view owned by the DBA), autovacuum's ANALYZE of it would run
    the range owner's subtype_diff as the DBA; a DBA's view filtering it with ``@>`` would run it
    when anon.risk_report plans the view."""
    found = run(plpy, UNSAFE_RANGES, ["oid", "text[]"], [oid, names])
    if found:
        listing = "; ".join(f'column "{r["name"]}" ({r["function"]}, owned by {r["owner"]})'
                            for r in found[:5])
        raise UnsafeSource(
            f"{label} has columns of range types whose functions are not owned by a superuser, "
            f"which ANALYZE and the planner run with the rights of whoever holds or plans the "
            f"relation: {listing}",
            hint="Release or report a copy with the column cast to text, or declare the column "
                 "ignored, or have a superuser take over the range type's functions.")


# the owner of relation $1 unless it is a superuser, or the caller in a session it logged in to
# itself: under SET ROLE or SET SESSION AUTHORIZATION, code planned as the owner can switch back
# to the superuser who logged in (pg_stat_activity keeps the role that authenticated)
FOREIGN_OWNER = """
SELECT o.rolname::text AS owner
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_roles o ON o.oid = c.relowner
WHERE c.oid = $1 AND NOT o.rolsuper
  AND (o.rolname <> current_user OR current_user <> session_user
       OR o.oid IS DISTINCT FROM (SELECT a.usesysid FROM pg_catalog.pg_stat_activity a
                                  WHERE a.pid = pg_catalog.pg_backend_pid()))"""


def refuse_foreign_matview(plpy, oid: int, name: str) -> None:
    """Refuse to read a materialized view owned by a role that is neither a superuser nor the
    caller. Its owner may add an index whose predicate calls its function at any moment, and
    planning any query on the view runs that function with the reader's rights: LOCK TABLE does
    not take materialized views, and the ACCESS SHARE a read takes does not keep CREATE INDEX
    out, so no check before the read can stay true. Its owner reads it, or plpy_anon does as its
    owner (a refresh's check and stored risk report: publish.checked_as_owner)."""
    row = run(plpy, FOREIGN_OWNER, ["oid"], [oid])
    if row:
        raise UnsafeSource(
            f"{name} belongs to {row[0]['owner']}, who may add an index at any moment whose "
            "predicate planning a read would run with your rights",
            hint=f"Have {row[0]['owner']} run it, in a session of its own; a release's risk report, "
                 "computed with its owner's rights at every build, is in anon.releases.risk.")


def refuse_foreign_release(plpy, release: dict, relation: str | None = None) -> None:
    """:func:`refuse_foreign_matview` for ``relation`` of a release (default: its main one; one
    owner for them all)."""
    relation = relation or release["release_name"]
    oid = run(plpy, "SELECT pg_catalog.to_regclass(pg_catalog.format('%I.%I', $1::text, $2::text))::pg_catalog.oid AS o",
              ["text", "text"], [release["release_schema"], relation])[0]["o"]
    if oid is not None:
        refuse_foreign_matview(plpy, int(oid), ident(plpy, release["release_schema"], relation))


def guard_relation(plpy, oid: int, name: str, relkind: str, own_view: bool = False) -> None:
    """:func:`guard_source` for any relation a report reads (``anon.risk_report`` takes views and
    materialized views too). Planning even the DBA's own, function-free view over another role's
    table plans the table, whose index predicate would run its owner's code as the DBA. So:

    * a table: :func:`guard_source`;
    * a foreign table: refused (reading it runs a query on another server, as its user mapping
      says);
    * a materialized view: refused when its owner is neither a superuser nor the caller
      (:func:`refuse_foreign_matview`), else :func:`check_planner_code` (its indexes and
      statistics);
    * a view: locked ``ACCESS SHARE`` first (its definition, and those of the views it reads,
      cannot be replaced until the transaction ends), re-checked by name; refused if it, or a
      view it reads, is owned by a role that is neither a superuser nor the caller (unless
      ``own_view``: a release's own view, checked genuine by the caller), or if its rules use
      anything :data:`VIEW_READS` lists (functions outside pg_catalog, built-ins running SQL
      text, other roles' operators and types); then each relation it reads guarded as above,
      and refused if it has a column of a range type running another role's code
      (:func:`check_range_columns`).

    Why the owner test: a view's owner can run its code as the DBA in three ways no catalog walk
    of the view sees -- a cast to its domain whose CHECK calls its function,
    a built-in that runs SQL text (``query_to_xml('SELECT payload()', ...)``; pinned built-ins
    leave no pg_depend row), and a row-level security policy on its table (relations under a
    view are read with the view owner's rights, so the superuser's bypass does not apply). A
    view is code its owner wrote, and reading it runs that code as the reader."""
    if relkind in ("r", "p"):
        guard_source(plpy, oid, name)
    elif relkind == "f":
        raise UnsafeSource(
            f"{name} is a foreign table: reading it runs a query on another server, as the user "
            "mapping says, on behalf of whoever reads it",
            hint="Report a local copy of the data (CREATE TABLE ... AS SELECT).")
    elif relkind == "m":
        refuse_foreign_matview(plpy, oid, name)
        check_planner_code(plpy, oid, name)
    elif relkind == "v":
        plpy.execute(f"LOCK TABLE {name} IN ACCESS SHARE MODE")
        same = run(plpy, """
            SELECT c.relkind = 'v' AND pg_catalog.to_regclass($2)::pg_catalog.oid = c.oid AS same
            FROM pg_catalog.pg_class c WHERE c.oid = $1""", ["oid", "text"], [oid, name])
        if not same or not same[0]["same"]:
            raise SourceChanged(f"view {name} was renamed or replaced while this call waited for "
                                "it; nothing was read",
                                hint="Check what the view is now, then run the call again.")
        # own_view: a release's own view, whose definition the caller checked is plpy_anon's
        # (release_rows.check_genuine); its owner is the release's creator, any role
        foreign = [] if own_view else [r["view"] for r in run(plpy, FOREIGN_VIEWS, ["oid"], [oid])]
        if foreign:
            raise UnsafeSource(
                f"reading view {name} would run code of roles that are neither superusers nor "
                f"you, with your rights: {', '.join(foreign[:5])} (a view's expressions, the "
                "domains it casts to and the policies of the tables it reads run as its reader)",
                hint="Report the tables it reads, or a view of your own over them, or have its "
                     "owner run the report.")
        reads = run(plpy, VIEW_READS, ["oid"], [oid])
        refuse_code(reads, "name", "uses",
                    f"reading view {name} would run code outside PostgreSQL's built-ins, with "
                    "your rights, that no check here can follow",
                    "Report the tables the view reads, or a view that calls only built-in "
                    "functions and uses only your own or a superuser's types.")
        for r in reads:
            if r["function"] is None:
                guard_relation(plpy, int(r["oid"]), r["name"], r["relkind"])
                check_range_columns(plpy, int(r["oid"]), r["name"])


def refuse_code(rows, subject: str, verb: str, message: str, hint: str) -> None:
    """42501 when a catalog walk found code (rows with a ``function``): ``message: <subject>
    <verb> <function> (owned by <owner>); ...`` for the first five."""
    found = [r for r in rows if r["function"] is not None]
    if found:
        listing = "; ".join(f"{r[subject]} {verb} {r['function']} (owned by {r['owner']})"
                            for r in found[:5])
        raise UnsafeSource(f"{message}: {listing}", hint=hint)


class SourceChanged(AnonError):
    """A source that changed identity while a call waited for its lock
    (object_not_in_prerequisite_state)."""

    sqlstate = "55000"


class UnsafeSource(AnonError):
    """A source whose planning would run code of a role that is not a superuser
    (insufficient_privilege)."""

    sqlstate = "42501"


