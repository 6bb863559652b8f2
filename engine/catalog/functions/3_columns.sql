-- The catalog parts of per-field pauses (D9: SECURITY DEFINER, owned by the
-- workers' role). The underscore helpers without an acting role are
-- internal: closed to PUBLIC, called by the functions below and by the
-- workers (the column fuse). Migrate replaces them on every run.
--
-- Addresses they return (transform.field) are written as a statement would
-- take them, each part as quote_ident renders it: notices, hints and the
-- applied row's resumed list show them as they are typed back.


DROP FUNCTION IF EXISTS {{S}}._resume_column(regrole, bigint, text);

-- Who reads columns of a definition's target: per downstream definition,
-- each field whose formula reads one of cols (via_key false) and each
-- GROUP BY key that reads one (field = the key's name, via_key true).
-- cols NULL means every column.
CREATE OR REPLACE FUNCTION {{S}}._column_readers(def_id bigint, cols text[])
RETURNS TABLE (reader_id bigint, reader text, field text, col text, via_key boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT o.id, o.compiled #>> '{spec,target,name}', x.name, x.col, x.via_key
  FROM {{S}}._definitions d
  JOIN {{S}}._definition_reads r ON r.table_name = d.target_table AND r.definition_id <> d.id
  JOIN {{S}}._definitions o ON o.id = r.definition_id
  CROSS JOIN LATERAL (
    SELECT f ->> 'name' AS name, c AS col, false AS via_key, fs.ord
    FROM jsonb_array_elements(o.compiled #> '{spec,fields}') WITH ORDINALITY AS fs(f, ord),
         jsonb_array_elements_text(coalesce(f -> 'reads', '[]')) AS c
    UNION ALL
    SELECT g ->> 'name', c, true, gs.ord
    FROM jsonb_array_elements(coalesce(o.compiled #> '{spec,group_by}', '[]')) WITH ORDINALITY AS gs(g, ord),
         jsonb_array_elements_text(coalesce(g -> 'reads', '[]')) AS c) x
  WHERE d.id = def_id AND (cols IS NULL OR x.col = ANY (cols))
  ORDER BY 2, x.via_key DESC, x.ord, 4
$fn$;

-- Pauses, by cascade, every field reading the paused field col of def_id,
-- recording the edges; recurses into fields paused afresh. Returns the
-- transform.field addresses it paused.
CREATE OR REPLACE FUNCTION {{S}}._pause_cascade(def_id bigint, col text) RETURNS text[]
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE r record; fresh boolean; out text[] := '{}';
BEGIN
  FOR r IN SELECT DISTINCT x.reader_id, x.reader, f ->> 'name' AS field
           FROM {{S}}._column_readers(def_id, ARRAY[col]) x
           JOIN {{S}}._definitions o ON o.id = x.reader_id
           CROSS JOIN LATERAL jsonb_array_elements(o.compiled #> '{spec,fields}') f
           WHERE f ->> 'name' = x.field OR x.via_key
           ORDER BY 2, 3
  LOOP
    -- Before any lock of it: the reader's pages and tasks in flight, which
    -- read the pause set before this pause, end first, so none writes the
    -- field after the pause commits (a whole-transform pause does the same).
    PERFORM {{S}}._fence_definition(r.reader_id);
    INSERT INTO {{S}}._paused_columns (definition_id, column_name, local) VALUES (r.reader_id, r.field, false)
      ON CONFLICT (definition_id, column_name) DO NOTHING;
    fresh := FOUND;
    INSERT INTO {{S}}._column_pause_edges (up_definition_id, up_column, down_definition_id, down_column)
      VALUES (def_id, col, r.reader_id, r.field) ON CONFLICT DO NOTHING;
    IF fresh THEN
      out := out || (quote_ident(r.reader) || '.' || quote_ident(r.field)) || {{S}}._pause_cascade(r.reader_id, r.field);
    END IF;
  END LOOP;
  RETURN out;
END $fn$;

-- Schedules a field build: the definition is rebuilt (waiting_to_backfill,
-- then backfilling until done); an aggregate one also refreshes col.
CREATE OR REPLACE FUNCTION {{S}}._field_build(def_id bigint, col text) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  UPDATE {{S}}._definitions SET status = 'waiting_to_backfill', version = version + 1,
    build_started_at = NULL, build_rows_done = NULL, build_rows_estimated = NULL,
    status_detail = coalesce(status_detail, '{}') || jsonb_build_object('rebuild_reason', 'field_build')
      || CASE WHEN kind = 'aggregate' AND col IS NOT NULL THEN jsonb_build_object('refresh_columns',
           coalesce(status_detail -> 'refresh_columns', '[]') - col || to_jsonb(col)) ELSE '{}' END
  WHERE id = def_id AND status IN ('waiting_to_backfill', 'backfilling', 'live');
  IF FOUND THEN
    -- Skip tasks a chunk holds: it waits on the definition row we lock;
    -- they belong to a superseded build and are never run.
    DELETE FROM {{S}}._build_tasks WHERE id IN (SELECT id FROM {{S}}._build_tasks WHERE definition_id = def_id FOR UPDATE SKIP LOCKED);
  END IF;
END $fn$;

-- Unpauses field col of def_id (which has no paused upstream), schedules
-- its field build, and releases downstream fields left with no local pause
-- and no other paused upstream whose definitions are not frozen. Returns
-- the released downstream addresses.
CREATE OR REPLACE FUNCTION {{S}}._release_column(def_id bigint, col text) RETURNS text[]
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE downs bigint[]; dcols text[]; i int; dlocal boolean; dstat text; dname text; out text[] := '{}';
BEGIN
  SELECT coalesce(array_agg(e.down_definition_id ORDER BY e.down_definition_id, e.down_column), '{}'),
         coalesce(array_agg(e.down_column ORDER BY e.down_definition_id, e.down_column), '{}')
    INTO downs, dcols
  FROM {{S}}._column_pause_edges e WHERE e.up_definition_id = def_id AND e.up_column = col;
  -- Its edges go with the row (foreign keys).
  DELETE FROM {{S}}._paused_columns WHERE definition_id = def_id AND column_name = col;
  DELETE FROM {{S}}._column_failures WHERE definition_id = def_id AND column_name = col;
  PERFORM {{S}}._field_build(def_id, col);
  FOR i IN 1 .. coalesce(cardinality(downs), 0) LOOP
    PERFORM {{S}}._fence_definition(downs[i]); -- before any lock of it, as everywhere
    SELECT pc.local INTO dlocal FROM {{S}}._paused_columns pc
    WHERE pc.definition_id = downs[i] AND pc.column_name = dcols[i] FOR UPDATE;
    CONTINUE WHEN NOT FOUND OR dlocal;
    CONTINUE WHEN EXISTS (SELECT 1 FROM {{S}}._column_pause_edges e
                          WHERE e.down_definition_id = downs[i] AND e.down_column = dcols[i]);
    SELECT d.status, d.compiled #>> '{spec,target,name}' INTO dstat, dname FROM {{S}}._definitions d WHERE d.id = downs[i] FOR UPDATE;
    CONTINUE WHEN dstat IN ('paused', 'quarantined');
    out := out || (quote_ident(dname) || '.' || quote_ident(dcols[i])) || {{S}}._release_column(downs[i], dcols[i]);
  END LOOP;
  RETURN out;
END $fn$;

-- The paused fields of a transform, for its owner: local or not, and the
-- upstream fields (transform.field) holding each.
CREATE OR REPLACE FUNCTION {{S}}._paused_fields(acting regrole, def_id bigint)
RETURNS TABLE (column_name text, local boolean, upstream text[])
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  PERFORM {{S}}._lifecycle_check(acting, def_id);
  RETURN QUERY SELECT pc.column_name, pc.local,
      ARRAY(SELECT quote_ident(u.compiled #>> '{spec,target,name}') || '.' || quote_ident(e.up_column)
            FROM {{S}}._column_pause_edges e JOIN {{S}}._definitions u ON u.id = e.up_definition_id
            WHERE e.down_definition_id = pc.definition_id AND e.down_column = pc.column_name ORDER BY 1)
    FROM {{S}}._paused_columns pc WHERE pc.definition_id = def_id ORDER BY 1;
END $fn$;

-- PAUSE TRANSFORM t.c: was is 'local' (already paused: nothing changes),
-- 'cascade' (paused only by an upstream pause, now local too) or 'none'
-- (paused now, with the cascade it caused).
CREATE OR REPLACE FUNCTION {{S}}._lifecycle_pause_column(acting regrole, def_id bigint, col text,
    OUT was text, OUT cascaded text[])
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE d record; loc boolean;
BEGIN
  SELECT * INTO d FROM {{S}}._lifecycle_check(acting, def_id) AS x(id bigint, status text, owner_role oid, target_table text);
  IF NOT EXISTS (SELECT 1 FROM {{S}}._definitions x, jsonb_array_elements(x.compiled #> '{spec,fields}') f
                 WHERE x.id = def_id AND f ->> 'name' = col) THEN
    RAISE EXCEPTION 'column % of transform % is not a field', col, d.target_table USING ERRCODE = '42703',
      DETAIL = 'trellis: not_found/ColumnNotFound';
  END IF;
  cascaded := '{}';
  SELECT pc.local INTO loc FROM {{S}}._paused_columns pc WHERE pc.definition_id = def_id AND pc.column_name = col FOR UPDATE;
  IF FOUND THEN
    was := CASE WHEN loc THEN 'local' ELSE 'cascade' END;
    UPDATE {{S}}._paused_columns SET local = true WHERE definition_id = def_id AND column_name = col AND NOT local;
    RETURN;
  END IF;
  was := 'none';
  INSERT INTO {{S}}._paused_columns (definition_id, column_name, local) VALUES (def_id, col, true);
  UPDATE {{S}}._definitions SET version = version + 1 WHERE id = def_id;
  cascaded := {{S}}._pause_cascade(def_id, col);
END $fn$;

-- RESUME TRANSFORM t.c: returns every transform.field resumed, the named
-- one first.
CREATE OR REPLACE FUNCTION {{S}}._lifecycle_resume_column(acting regrole, def_id bigint, col text) RETURNS text[]
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE d record; up text;
BEGIN
  SELECT * INTO d FROM {{S}}._lifecycle_check(acting, def_id) AS x(id bigint, status text, owner_role oid, target_table text);
  PERFORM 1 FROM {{S}}._paused_columns WHERE definition_id = def_id AND column_name = col FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'column % of % is not paused', col, d.target_table USING ERRCODE = '55000',
      DETAIL = 'trellis: not_found/ColumnNotPaused';
  END IF;
  IF d.status <> 'live' THEN
    RAISE EXCEPTION 'transform % is %, not live', d.target_table, d.status USING ERRCODE = '55000',
      DETAIL = 'trellis: conflict/DefinitionNotLive';
  END IF;
  SELECT string_agg(quote_ident(u.compiled #>> '{spec,target,name}') || '.' || quote_ident(e.up_column), ', ' ORDER BY 1) INTO up
  FROM {{S}}._column_pause_edges e JOIN {{S}}._definitions u ON u.id = e.up_definition_id
  WHERE e.down_definition_id = def_id AND e.down_column = col;
  IF up IS NOT NULL THEN
    RAISE EXCEPTION 'column % of % is held by paused %', col, d.target_table, up USING ERRCODE = '55000',
      DETAIL = 'trellis: conflict/UpstreamColumnPaused';
  END IF;
  RETURN ARRAY[(SELECT quote_ident(x.compiled #>> '{spec,target,name}') FROM {{S}}._definitions x WHERE x.id = def_id) || '.' || quote_ident(col)]
    || {{S}}._release_column(def_id, col);
END $fn$;

-- A new definition reading fields paused upstream is born with the
-- dependent fields paused (grammar §4.1).
CREATE OR REPLACE FUNCTION {{S}}._pause_inherit(acting regrole, def_id bigint) RETURNS text[]
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE p record; out text[] := '{}';
BEGIN
  PERFORM {{S}}._lifecycle_check(acting, def_id);
  FOR p IN SELECT pc.definition_id, pc.column_name
           FROM {{S}}._definition_reads r JOIN {{S}}._definitions u ON u.target_table = r.table_name
           JOIN {{S}}._paused_columns pc ON pc.definition_id = u.id
           WHERE r.definition_id = def_id ORDER BY 1, 2
  LOOP
    out := out || {{S}}._pause_cascade(p.definition_id, p.column_name);
  END LOOP;
  RETURN out;
END $fn$;

REVOKE ALL ON FUNCTION {{S}}._column_readers(bigint, text[]), {{S}}._pause_cascade(bigint, text),
  {{S}}._field_build(bigint, text), {{S}}._release_column(bigint, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION {{S}}._paused_fields(regrole, bigint), {{S}}._lifecycle_pause_column(regrole, bigint, text),
  {{S}}._lifecycle_resume_column(regrole, bigint, text), {{S}}._pause_inherit(regrole, bigint) TO PUBLIC;
