-- The catalog parts of ALTER TRANSFORM and the readers lookup of ALTER's
-- and DROP's DependentsBlockDrop (D9).


-- Lines "reader.field reads t.col" for every field or GROUP BY key of
-- another definition reading one of cols of def_id's target (all columns
-- when cols is NULL), for the target's owner.
CREATE OR REPLACE FUNCTION {{S}}._field_readers(acting regrole, def_id bigint, cols text[]) RETURNS text[]
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE bare text;
BEGIN
  PERFORM {{S}}._lifecycle_check(acting, def_id);
  SELECT compiled #>> '{spec,target,name}' INTO bare FROM {{S}}._definitions WHERE id = def_id;
  RETURN ARRAY(SELECT format('%s.%s reads %s.%s', x.reader, x.field, bare, x.col)
               FROM {{S}}._column_readers(def_id, cols) x)
      -- readers of no column (constant fields over the key) when all count
      || ARRAY(SELECT format('%s reads %s', o.compiled #>> '{spec,target,name}', bare)
               FROM {{S}}._definitions d JOIN {{S}}._definition_reads r ON r.table_name = d.target_table AND r.definition_id <> d.id
               JOIN {{S}}._definitions o ON o.id = r.definition_id
               WHERE d.id = def_id AND cols IS NULL
                 AND NOT EXISTS (SELECT 1 FROM {{S}}._column_readers(def_id, NULL) x WHERE x.reader_id = o.id)
               ORDER BY 1);
END $fn$;

-- Stores an altered definition: statement and compiled form, version + 1,
-- the columns it reads (bound now, as the caller sees the catalog), and a
-- rebuild when fields were added or changed. A dropped field's pause and
-- failure bookkeeping goes with it. statement NULL is a no-op that returns
-- the current version. joined_columns: a JOIN target's joined tables'
-- columns read ({table: [column, ...]}), bound again at the next pass.
DROP FUNCTION IF EXISTS {{S}}._lifecycle_alter(regrole, bigint, text, jsonb, jsonb, text[], text[]);
CREATE OR REPLACE FUNCTION {{S}}._lifecycle_alter(acting regrole, def_id bigint, statement text, new_compiled jsonb,
    read_columns jsonb, dropped text[], rebuilt text[], joined_columns jsonb DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE d record; v bigint; blockers text;
BEGIN
  SELECT * INTO d FROM {{S}}._lifecycle_check(acting, def_id) AS x(id bigint, status text, owner_role oid, target_table text);
  IF d.status IN ('paused', 'quarantined') THEN
    RAISE EXCEPTION 'transform % is %', d.target_table, d.status USING ERRCODE = '55000',
      DETAIL = 'trellis: conflict/TransformNotLive';
  END IF;
  IF statement IS NULL THEN
    RETURN (SELECT version FROM {{S}}._definitions WHERE id = def_id);
  END IF;
  IF (SELECT kind FROM {{S}}._definitions WHERE id = def_id) <> 'one_to_one' THEN
    RAISE EXCEPTION 'transform % has GROUP BY; only 1-1 transforms can be altered', d.target_table USING ERRCODE = '0A000',
      DETAIL = 'trellis: validation/UnsupportedAlter';
  END IF;
  SELECT string_agg(format('%s.%s reads %s', x.reader, x.field, x.col), '; ') INTO blockers
  FROM {{S}}._column_readers(def_id, dropped) x;
  IF blockers IS NOT NULL THEN
    RAISE EXCEPTION 'cannot drop fields of %: %', d.target_table, blockers USING ERRCODE = '2BP01',
      DETAIL = 'trellis: conflict/DependentsBlockDrop';
  END IF;
  UPDATE {{S}}._definitions SET definition_sql = statement, compiled = new_compiled, version = version + 1,
    verified = {{S}}._trusted_writer(),
    status = CASE WHEN cardinality(rebuilt) > 0 THEN 'waiting_to_backfill' ELSE status END,
    build_started_at = CASE WHEN cardinality(rebuilt) > 0 THEN NULL ELSE build_started_at END,
    build_rows_done = CASE WHEN cardinality(rebuilt) > 0 THEN NULL ELSE build_rows_done END,
    build_rows_estimated = CASE WHEN cardinality(rebuilt) > 0 THEN NULL ELSE build_rows_estimated END,
    status_detail = CASE WHEN cardinality(rebuilt) > 0
      THEN coalesce(status_detail, '{}') || jsonb_build_object('rebuild_reason', 'alter') ELSE status_detail END
  WHERE id = def_id RETURNING version INTO v;
  IF cardinality(rebuilt) > 0 THEN
    -- Skip tasks a chunk holds: it waits on the definition row we lock;
    -- they belong to a superseded build and are never run.
    DELETE FROM {{S}}._build_tasks WHERE id IN (SELECT id FROM {{S}}._build_tasks WHERE definition_id = def_id FOR UPDATE SKIP LOCKED);
  END IF;
  UPDATE {{S}}._definition_reads r SET columns = read_columns, bindings = (
    SELECT coalesce(jsonb_agg(jsonb_build_object('name', c.name, 'attnum', a.attnum, 'typid', a.atttypid,
             'typmod', a.atttypmod, 'coll', a.attcollation, 'type', format_type(a.atttypid, a.atttypmod)) ORDER BY c.name), '[]')
    FROM (SELECT DISTINCT x AS name FROM jsonb_array_elements_text(read_columns ||
            coalesce((SELECT jsonb_agg(k -> 'name') FROM jsonb_array_elements(new_compiled -> 'key') k), '[]')) x) c
    LEFT JOIN pg_attribute a ON a.attrelid = r.table_oid AND a.attname = c.name AND a.attnum > 0 AND NOT a.attisdropped)
  WHERE r.definition_id = def_id AND r.role IN ('source', 'upstream_target');
  UPDATE {{S}}._definition_reads r SET columns = j.cols, bindings = NULL
  FROM jsonb_each(coalesce(joined_columns, '{}')) AS j(tbl, cols)
  WHERE r.definition_id = def_id AND r.role = 'to_one' AND r.table_name = j.tbl;
  DELETE FROM {{S}}._paused_columns WHERE definition_id = def_id AND column_name = ANY (dropped);
  DELETE FROM {{S}}._column_failures WHERE definition_id = def_id AND column_name = ANY (dropped);
  -- Failures and inherited pauses of a changed field were about its old
  -- formula; a local pause survives. Pauses upstream are inherited anew.
  DELETE FROM {{S}}._column_failures f WHERE f.definition_id = def_id AND f.column_name = ANY (rebuilt)
    AND NOT EXISTS (SELECT 1 FROM {{S}}._paused_columns pc WHERE pc.definition_id = def_id AND pc.column_name = f.column_name);
  DELETE FROM {{S}}._column_pause_edges WHERE down_definition_id = def_id AND down_column = ANY (rebuilt);
  DELETE FROM {{S}}._paused_columns WHERE definition_id = def_id AND column_name = ANY (rebuilt) AND NOT local;
  PERFORM {{S}}._pause_inherit(acting, def_id);
  RETURN v;
END $fn$;

-- ALTER TRANSFORM's change of the target's columns, as the workers' role
-- that owns it (D20): names and type oids/typmods, never SQL. Readers of a
-- dropped column block it, as in _lifecycle_alter.
CREATE OR REPLACE FUNCTION {{S}}._alter_target(acting regrole, def_id bigint, dropped text[], added jsonb) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE rel regclass; ddl text[] := '{}'; c jsonb; col text; blockers text;
BEGIN
  PERFORM {{S}}._lifecycle_check(acting, def_id);
  SELECT target_oid::regclass INTO rel FROM {{S}}._definitions WHERE id = def_id;
  SELECT string_agg(format('%s.%s reads %s', x.reader, x.field, x.col), '; ') INTO blockers
  FROM {{S}}._column_readers(def_id, dropped) x;
  IF blockers IS NOT NULL THEN
    RAISE EXCEPTION 'cannot drop fields of %: %', rel, blockers USING ERRCODE = '2BP01',
      DETAIL = 'trellis: conflict/DependentsBlockDrop';
  END IF;
  FOREACH col IN ARRAY coalesce(dropped, '{}') LOOP
    IF col LIKE '\_\_%' OR col = ANY (ARRAY(SELECT k ->> 'name' FROM {{S}}._definitions d, jsonb_array_elements(d.compiled -> 'key') k WHERE d.id = def_id)) THEN
      RAISE EXCEPTION 'column % of % is not a field', col, rel USING ERRCODE = '22023';
    END IF;
    ddl := ddl || format('DROP COLUMN %I', col);
  END LOOP;
  FOR c IN SELECT x FROM jsonb_array_elements(coalesce(added, '[]')) x LOOP
    IF coalesce(c ->> 'n', '') = '' OR NOT EXISTS (SELECT 1 FROM pg_type WHERE oid = (c ->> 't')::oid) THEN
      RAISE EXCEPTION 'malformed column % of %', c ->> 'n', rel USING ERRCODE = '22023';
    END IF;
    IF NOT has_type_privilege(acting, (c ->> 't')::oid, 'USAGE') THEN
      RAISE EXCEPTION 'permission denied for type %', format_type((c ->> 't')::oid, NULL) USING ERRCODE = '42501';
    END IF;
    ddl := ddl || format('ADD COLUMN %I %s', c ->> 'n', format_type((c ->> 't')::oid, coalesce((c ->> 'm')::int4, -1)));
  END LOOP;
  IF cardinality(ddl) > 0 THEN
    EXECUTE format('ALTER TABLE %s %s', rel, array_to_string(ddl, ', '));
  END IF;
END $fn$;

GRANT EXECUTE ON FUNCTION {{S}}._alter_target(regrole, bigint, text[], jsonb), {{S}}._field_readers(regrole, bigint, text[]),
  {{S}}._lifecycle_alter(regrole, bigint, text, jsonb, jsonb, text[], text[], jsonb) TO PUBLIC;
