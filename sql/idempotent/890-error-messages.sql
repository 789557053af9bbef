-- Clean error messages. PL/Python writes the Python exception's name before every message raised
-- from Python ("ERROR:  plpy.Error: k must be at least 2"); there is no way to avoid it from
-- inside PL/Python. So every user-facing PL/Python function anon.f is renamed anon._py_f and
-- anon.f becomes a PL/pgSQL function with the same signature, defaults, comment and volatility
-- that calls it and re-raises its errors without the prefix (same SQLSTATE, DETAIL and HINT; an
-- unexpected Python exception keeps its traceback as DETAIL). It runs after every code file, on
-- install and on upgrade: an upgrade's CREATE OR REPLACE turns anon.f back into PL/Python, and
-- this block wraps it again, replacing the previous version's anon._py_f.
--
-- NULL arguments, the same rule for every function: an argument without a default must not be
-- NULL (SQLSTATE 22023, the message names it: "anon.mondrian_view: argument k must not be NULL"),
-- checked here before any Python runs; an argument with a default takes NULL as "use the
-- default" (release_schema => NULL means 'release'). NULLABLE lists the exceptions: arguments
-- without a default whose NULL has a documented meaning.
DO $wrap$
DECLARE
    f record;
    inner_name text;
    call text;
    statement text;
    volatility text;
    checks text;
    arg record;
    note text := ' NULL for an argument with a default means the default; other arguments must not be NULL unless said above.';
    nullable constant text[] := ARRAY[
        'set_column_role.role'              -- NULL removes the declaration
    ];
BEGIN
    FOR f IN
        SELECT p.oid, p.proname::text AS name, p.pronargs, p.proretset, p.provolatile,
               p.prorettype = 'pg_catalog.void'::pg_catalog.regtype AS returns_void,
               pg_catalog.pg_get_function_arguments(p.oid) AS args,
               pg_catalog.pg_get_function_identity_arguments(p.oid) AS identity_args,
               pg_catalog.pg_get_function_result(p.oid) AS result,
               pg_catalog.obj_description(p.oid, 'pg_proc') AS comment,
               p.proargnames AS argnames, p.proargmodes AS argmodes, p.proargtypes AS argtypes
        FROM pg_catalog.pg_proc p
        JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace AND n.nspname = 'anon'
        JOIN pg_catalog.pg_language l ON l.oid = p.prolang AND l.lanname = 'plpython3u'
        WHERE p.prokind = 'f' AND p.proname NOT LIKE '\_%'
    LOOP
        inner_name := '_py_' || f.name;
        EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS anon.%I(%s)', inner_name, f.identity_args);
        EXECUTE pg_catalog.format('ALTER FUNCTION anon.%I(%s) RENAME TO %I',
                                  f.name, f.identity_args, inner_name);
        checks := '';
        call := '';
        FOR arg IN
            -- the input arguments in order: n counts them, ord is the position among all
            -- arguments (RETURNS TABLE columns are arguments too) that pg_proc's arrays use
            SELECT pg_catalog.row_number() OVER (ORDER BY a.ord) AS n, a.ord,
                   f.argnames[a.ord] AS name,
                   pg_catalog.pg_get_function_arg_default(f.oid, a.ord::integer) AS dflt
            FROM pg_catalog.generate_series(1, coalesce(pg_catalog.cardinality(f.argmodes), f.pronargs)) AS a(ord)
            WHERE coalesce(f.argmodes[a.ord], 'i') IN ('i', 'b', 'v')
            ORDER BY a.ord
        LOOP
            call := call || CASE WHEN arg.n > 1 THEN ', ' ELSE '' END;
            IF arg.dflt IS NULL AND NOT (f.name || '.' || arg.name) = ANY (nullable) THEN
                checks := checks || pg_catalog.format($check$
    IF $%s IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = %L, HINT = %L;
    END IF;$check$, arg.n,
                    pg_catalog.format('anon.%s: argument %s must not be NULL', f.name, arg.name),
                    pg_catalog.format('Pass a value for %s (only arguments with a default may be NULL, '
                                      'meaning the default).', arg.name));
                call := call || '$' || arg.n;
            ELSIF arg.dflt IS NULL OR arg.dflt ~* '^NULL(::.*)?$' THEN
                call := call || '$' || arg.n;
            ELSE
                call := call || pg_catalog.format('coalesce($%s, (%s)::%s)', arg.n, arg.dflt,
                    pg_catalog.format_type(f.argtypes[arg.n - 1], NULL));
            END IF;
        END LOOP;
        call := pg_catalog.format('anon.%I(%s)', inner_name, call);
        statement := CASE
            WHEN f.proretset THEN 'RETURN QUERY SELECT * FROM ' || call || ';'
            WHEN f.returns_void THEN 'PERFORM ' || call || ';'
            ELSE 'RETURN ' || call || ';' END;
        volatility := CASE f.provolatile WHEN 'i' THEN 'IMMUTABLE' WHEN 's' THEN 'STABLE'
                                         ELSE 'VOLATILE' END;
        EXECUTE pg_catalog.format($create$
CREATE FUNCTION anon.%I(%s) RETURNS %s LANGUAGE plpgsql %s
SET search_path = pg_catalog, pg_temp
AS $body$
DECLARE
    message text; detail text; hint text; state text; context text;
BEGIN%s
    %s
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS message = MESSAGE_TEXT, detail = PG_EXCEPTION_DETAIL,
                            hint = PG_EXCEPTION_HINT, state = RETURNED_SQLSTATE,
                            context = PG_EXCEPTION_CONTEXT;
    message := pg_catalog.regexp_replace(message, '^((plpy|spiexceptions)\.[A-Za-z]+: )+', '');
    IF state = '38000' AND detail = '' THEN   -- an unexpected Python exception: keep where
        detail := context;                    -- it happened
    END IF;
    IF detail <> '' AND hint <> '' THEN
        RAISE EXCEPTION USING MESSAGE = message, ERRCODE = state, DETAIL = detail, HINT = hint;
    ELSIF detail <> '' THEN
        RAISE EXCEPTION USING MESSAGE = message, ERRCODE = state, DETAIL = detail;
    ELSIF hint <> '' THEN
        RAISE EXCEPTION USING MESSAGE = message, ERRCODE = state, HINT = hint;
    ELSE
        RAISE EXCEPTION USING MESSAGE = message, ERRCODE = state;
    END IF;
END
$body$$create$, f.name, f.args, f.result, volatility, checks, statement);
        IF f.comment IS NOT NULL OR f.pronargs > 0 THEN
            EXECUTE pg_catalog.format('COMMENT ON FUNCTION anon.%I(%s) IS %L',
                                      f.name, f.identity_args,
                                      coalesce(f.comment, '') || CASE WHEN f.pronargs > 0 THEN note ELSE '' END);
        END IF;
    END LOOP;
END
$wrap$;
