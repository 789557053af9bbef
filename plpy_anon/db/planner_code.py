"""The catalog query of the code the planner runs on a table (and its inheritance tree): the
guards check a source with it before reading it, release_rows a release's relations before
reading them on its behalf. Text only, imported by both."""

# Table $1 and its inheritance tree (partitions and children, recursively), as the CTE ``tree``
INHERITANCE_TREE = """tree(oid) AS (
    SELECT $1::pg_catalog.oid
    UNION
    SELECT i.inhrelid FROM pg_catalog.pg_inherits i JOIN tree ON i.inhparent = tree.oid)"""


# Code the PLANNER runs on a table, with the rights of whoever plans a query on it: the expressions
# and predicates of its indexes, its partition key, the CHECK constraints of inheritance children
# (constraint exclusion) and the expressions of extended statistics are constant-folded when first
# loaded, so an IMMUTABLE function of the owner's, with constant arguments, runs as the DBA building
# or refreshing a release, before any line of ours (CREATE INDEX ON t (age) WHERE
# owner_function() would make the owner superuser). Functions (and operators'
# functions) owned by a superuser are the server's own; any other owner's is refused. Foreign
# members are listed too (function NULL): reading them runs a query on another server.
PLANNER_CODE = f"""
WITH RECURSIVE {INHERITANCE_TREE},
attached(classid, objid, what) AS (
    -- the tables themselves: partition keys (folded when the key is loaded)
    SELECT 'pg_catalog.pg_class'::pg_catalog.regclass, tree.oid,
           pg_catalog.format('the partition key of %s', tree.oid::pg_catalog.regclass)
    FROM tree
    UNION ALL
    SELECT 'pg_catalog.pg_class'::pg_catalog.regclass, x.indexrelid,
           pg_catalog.format('index %s', x.indexrelid::pg_catalog.regclass)
    FROM pg_catalog.pg_index x JOIN tree ON x.indrelid = tree.oid
    UNION ALL
    SELECT 'pg_catalog.pg_constraint'::pg_catalog.regclass, c.oid,
           pg_catalog.format('constraint %I of %s', c.conname, c.conrelid::pg_catalog.regclass)
    FROM pg_catalog.pg_constraint c JOIN tree ON c.conrelid = tree.oid
    UNION ALL
    SELECT 'pg_catalog.pg_statistic_ext'::pg_catalog.regclass, s.oid,
           pg_catalog.format('statistics %I.%I', sn.nspname, s.stxname)
    FROM pg_catalog.pg_statistic_ext s JOIN tree ON s.stxrelid = tree.oid
    JOIN pg_catalog.pg_namespace sn ON sn.oid = s.stxnamespace)
SELECT DISTINCT a.what, p.oid::pg_catalog.regprocedure::text AS function,
       pg_catalog.pg_get_userbyid(p.proowner)::text AS owner
FROM attached a
JOIN pg_catalog.pg_depend d ON d.classid = a.classid AND d.objid = a.objid
LEFT JOIN pg_catalog.pg_operator o
       ON d.refclassid = 'pg_catalog.pg_operator'::pg_catalog.regclass AND o.oid = d.refobjid
JOIN pg_catalog.pg_proc p
  ON p.oid = CASE WHEN d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass THEN d.refobjid
                  ELSE o.oprcode::pg_catalog.oid END
JOIN pg_catalog.pg_roles r ON r.oid = p.proowner
WHERE NOT r.rolsuper
UNION
SELECT c.oid::pg_catalog.regclass::text, NULL, NULL
FROM tree JOIN pg_catalog.pg_class c ON c.oid = tree.oid
LEFT JOIN pg_catalog.pg_foreign_table ft ON ft.ftrelid = c.oid
LEFT JOIN pg_catalog.pg_foreign_server fs ON fs.oid = ft.ftserver
WHERE c.relkind = 'f'
  -- unless the caller chose all of it: it owns the table, the foreign member and its server
  AND NOT (c.relowner = (SELECT u.oid FROM pg_catalog.pg_roles u WHERE u.rolname = current_user)
           AND fs.srvowner = c.relowner
           AND (SELECT t.relowner FROM pg_catalog.pg_class t WHERE t.oid = $1) = c.relowner)
ORDER BY 1, 2
"""
