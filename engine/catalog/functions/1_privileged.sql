-- D9: clients never write the catalog. A Trellis statement runs as the
-- client's role on the client's connection, so Postgres checks what the
-- client may do (CREATE on the target schema, SELECT on the source); the
-- catalog rows are written by the SECURITY DEFINER functions below, owned by
-- the workers' role and executable by PUBLIC. Each takes the acting role,
-- proves the session may act as it, and derives every permission from facts
-- Postgres established (engine spec §12.8 "Privileges").
--
-- They are code, not data: Migrate replaces them on every run, so they
-- follow the binary without a catalog format bump. Run after the versioned
-- migrations.


CREATE OR REPLACE FUNCTION {{S}}._check_acting(acting regrole) RETURNS void
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  -- A caller may only claim a role it could SET ROLE to.
  IF acting IS NULL OR NOT pg_has_role(session_user, acting, 'MEMBER') THEN
    RAISE EXCEPTION 'permission denied to act as %', acting USING ERRCODE = '42501',
      DETAIL = 'trellis: permission/MissingPrivilege';
  END IF;
END $fn$;

-- D21: a session that holds the workers' privileges gains nothing by
-- handing the catalog a compiled form of its own; its rows are trusted as
-- written. Every other row is verified by the workers (verify.go).
CREATE OR REPLACE FUNCTION {{S}}._trusted_writer() RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT pg_has_role(session_user, (SELECT worker_role FROM {{S}}._instance), 'MEMBER')
$fn$;

CREATE OR REPLACE FUNCTION {{S}}._instance_worker_role() RETURNS name
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT worker_role FROM {{S}}._instance
$fn$;

-- The compiled definition whose target is rel, for a caller that may read
-- that target (it is about to use it as a source). NULL when none.
CREATE OR REPLACE FUNCTION {{S}}._definition_of(acting regrole, rel oid) RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE c jsonb;
BEGIN
  PERFORM {{S}}._check_acting(acting);
  SELECT d.compiled INTO c FROM {{S}}._definitions d WHERE d.target_oid = rel;
  IF c IS NOT NULL AND NOT has_table_privilege(acting, rel, 'SELECT') THEN
    RETURN NULL;
  END IF;
  RETURN c;
END $fn$;

CREATE OR REPLACE FUNCTION {{S}}._is_target(rel oid) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT EXISTS (SELECT 1 FROM {{S}}._definitions WHERE target_oid = rel)
$fn$;

-- A transform by bare target name (unique across the instance): its
-- schema, table and owner. No row when there is none.
CREATE OR REPLACE FUNCTION {{S}}._find_transform(bare text, OUT schema_name text, OUT table_name text, OUT owner_name text)
RETURNS SETOF record
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  -- A definition whose target is gone is still found by its recorded name,
  -- so it can be paused and dropped (D21).
  SELECT coalesce(n.nspname::text, d.compiled #>> '{spec,target,schema}'), coalesce(c.relname::text, d.compiled #>> '{spec,target,name}'),
         pg_get_userbyid(d.owner_role)::text
  FROM {{S}}._definitions d LEFT JOIN pg_class c ON c.oid = d.target_oid LEFT JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE coalesce(c.relname::text, d.compiled #>> '{spec,target,name}') = bare
$fn$;

-- One table of a transform, created as the workers' role (D20: its owner;
-- no tenant can attach code that runs when the workers write it). shape is
-- structured data, never SQL: column names, type oids and typmods
-- (rendered by format_type), collation names (parsed by regcollation's
-- input), NOT NULL, DEFAULT false on a boolean, and the names of the
-- columns of the primary key, of a UNIQUE NULLS NOT DISTINCT constraint or
-- index, and of the index WHERE member.
CREATE OR REPLACE FUNCTION {{S}}._create_table(acting regrole, tschema text, tname text, shape jsonb) RETURNS regclass
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE cols text[] := '{}'; c jsonb; col text; rel regclass; worker name;
BEGIN
  IF coalesce(tname, '') = '' OR coalesce(tschema, '') = '' OR jsonb_typeof(shape -> 'cols') IS DISTINCT FROM 'array' THEN
    RAISE EXCEPTION 'malformed table shape for %.%', tschema, tname USING ERRCODE = '22023';
  END IF;
  FOR c IN SELECT x FROM jsonb_array_elements(shape -> 'cols') x LOOP
    IF coalesce(c ->> 'n', '') = '' OR NOT EXISTS (SELECT 1 FROM pg_type WHERE oid = (c ->> 't')::oid) THEN
      RAISE EXCEPTION 'malformed column % of %.%', c ->> 'n', tschema, tname USING ERRCODE = '22023';
    END IF;
    IF NOT has_type_privilege(acting, (c ->> 't')::oid, 'USAGE') THEN
      RAISE EXCEPTION 'permission denied for type %', format_type((c ->> 't')::oid, NULL) USING ERRCODE = '42501';
    END IF;
    col := format('%I %s', c ->> 'n', format_type((c ->> 't')::oid, coalesce((c ->> 'm')::int4, -1)));
    IF c ? 'c' THEN
      col := col || ' COLLATE ' || (c ->> 'c')::regcollation::text;
    END IF;
    IF (c ->> 'nn')::boolean THEN
      col := col || ' NOT NULL';
    END IF;
    IF (c ->> 'df')::boolean THEN
      IF (c ->> 't')::oid <> 'boolean'::regtype THEN
        RAISE EXCEPTION 'malformed default on column % of %.%', c ->> 'n', tschema, tname USING ERRCODE = '22023';
      END IF;
      col := col || ' DEFAULT false';
    END IF;
    cols := cols || col;
  END LOOP;
  IF shape ? 'pk' THEN
    cols := cols || format('PRIMARY KEY (%s)', (SELECT string_agg(quote_ident(x), ', ') FROM jsonb_array_elements_text(shape -> 'pk') x));
  END IF;
  IF shape ? 'unnd' THEN
    cols := cols || format('UNIQUE NULLS NOT DISTINCT (%s)', (SELECT string_agg(quote_ident(x), ', ') FROM jsonb_array_elements_text(shape -> 'unnd') x));
  END IF;
  BEGIN
    EXECUTE format('CREATE TABLE %I.%I (%s)', tschema, tname, array_to_string(cols, ', '));
  EXCEPTION WHEN insufficient_privilege THEN
    SELECT worker_role INTO worker FROM {{S}}._instance;
    RAISE EXCEPTION 'the workers'' role % may not create tables in schema %', worker, tschema USING ERRCODE = '42501',
      DETAIL = 'trellis: permission/WorkersCannotCreate',
      HINT = format('GRANT CREATE ON SCHEMA %I TO %I;', tschema, worker);
  END;
  rel := format('%I.%I', tschema, tname)::regclass;
  IF shape ? 'uidx' THEN
    EXECUTE format('CREATE UNIQUE INDEX ON %s (%s) NULLS NOT DISTINCT', rel,
      (SELECT string_agg(quote_ident(x), ', ') FROM jsonb_array_elements_text(shape -> 'uidx') x));
  END IF;
  IF shape ? 'midx' THEN
    EXECUTE format('CREATE INDEX ON %s (%s) WHERE member', rel,
      (SELECT string_agg(quote_ident(x), ', ') FROM jsonb_array_elements_text(shape -> 'midx') x));
  END IF;
  -- The owner reads what she derived and may share it (GRANT SELECT).
  EXECUTE format('GRANT SELECT ON %s TO %s WITH GRANT OPTION', rel, acting);
  RETURN rel;
END $fn$;

-- Records a definition and creates its target and ledger, owned by the
-- workers' role (D20), in the caller's transaction. The defining role is
-- the transform's owner in the catalog (_definitions.owner_role).
CREATE OR REPLACE FUNCTION {{S}}._define(acting regrole, tschema text, tname text, target_shape jsonb, ledger_shape jsonb,
    kind text, source_table text, source_oid oid, definition_sql text, compiled jsonb, read_columns jsonb, read_role text,
    joined jsonb)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE new_id bigint; worker name; src_owner oid; target regclass; ledger regclass; other text; j record;
BEGIN
  PERFORM {{S}}._check_acting(acting);
  IF NOT has_schema_privilege(acting, tschema, 'CREATE') THEN
    RAISE EXCEPTION 'permission denied for schema %', tschema USING ERRCODE = '42501',
      DETAIL = 'trellis: permission/MissingPrivilege',
      HINT = format('GRANT CREATE ON SCHEMA %I TO %I;', tschema, acting::text);
  END IF;
  -- Bare names resolve PAUSE/ALTER/release_key: one per instance.
  SELECT d.target_table INTO other FROM {{S}}._definitions d JOIN pg_class c ON c.oid = d.target_oid WHERE c.relname = tname;
  IF other IS NOT NULL THEN
    RAISE EXCEPTION 'a transform named % already exists (%)', tname, other USING ERRCODE = '42710',
      DETAIL = 'trellis: conflict/TargetNameTaken',
      HINT = 'target names are unique across schemas (statements name transforms by their bare name); choose another target name';
  END IF;
  IF NOT has_table_privilege(acting, source_oid, 'SELECT') THEN
    RAISE EXCEPTION 'permission denied for table %', source_table USING ERRCODE = '42501',
      DETAIL = 'trellis: permission/MissingPrivilege',
      HINT = format('GRANT SELECT ON %s TO %I;', source_table, acting::text);
  END IF;
  -- Capture triggers are ENABLE ALWAYS, which Postgres allows only to the
  -- table's owner: the workers' role must be able to act as it (D9).
  SELECT worker_role INTO worker FROM {{S}}._instance;
  SELECT relowner INTO src_owner FROM pg_class WHERE oid = source_oid;
  IF NOT pg_has_role(worker, src_owner, 'USAGE') THEN
    RAISE EXCEPTION 'the workers'' role % cannot capture changes of %', worker, source_table USING ERRCODE = '42501',
      DETAIL = 'trellis: permission/WorkersCannotCapture',
      HINT = format('GRANT %I TO %I;', pg_get_userbyid(src_owner), worker);
  END IF;
  -- A JOIN target's joined tables: read and captured like the source.
  FOR j IN SELECT x ->> 'table' AS tbl, (x ->> 'oid')::oid AS rel, x -> 'columns' AS cols
           FROM jsonb_array_elements(coalesce(joined, '[]')) x LOOP
    IF NOT has_table_privilege(acting, j.rel, 'SELECT') THEN
      RAISE EXCEPTION 'permission denied for table %', j.tbl USING ERRCODE = '42501',
        DETAIL = 'trellis: permission/MissingPrivilege',
        HINT = format('GRANT SELECT ON %s TO %I;', j.tbl, acting::text);
    END IF;
    SELECT relowner INTO src_owner FROM pg_class WHERE oid = j.rel;
    IF src_owner IS NULL OR NOT pg_has_role(worker, src_owner, 'USAGE') THEN
      RAISE EXCEPTION 'the workers'' role % cannot capture changes of %', worker, j.tbl USING ERRCODE = '42501',
        DETAIL = 'trellis: permission/WorkersCannotCapture',
        HINT = format('GRANT %I TO %I;', pg_get_userbyid(src_owner), worker);
    END IF;
  END LOOP;
  target := {{S}}._create_table(acting, tschema, tname, target_shape);
  ledger := {{S}}._create_table(acting, tschema, tname || '__ledger', ledger_shape);
  INSERT INTO {{S}}._definitions (target_table, target_oid, ledger_oid, owner_role, kind,
      source_table, source_oid, definition_sql, compiled, status, verified)
  VALUES (format('%I.%I', tschema, tname), target, ledger, acting, kind, source_table, source_oid, definition_sql, compiled,
          'waiting_to_backfill', {{S}}._trusted_writer())
  RETURNING id INTO new_id;
  EXECUTE format('CREATE VIEW %I.%I AS SELECT', {{SFN}}, 'd' || new_id); -- its fence (fence.go)
  INSERT INTO {{S}}._definition_reads (definition_id, table_name, table_oid, columns, role)
  VALUES (new_id, source_table, source_oid, read_columns, read_role);
  INSERT INTO {{S}}._definition_reads (definition_id, table_name, table_oid, columns, role)
  SELECT new_id, x ->> 'table', (x ->> 'oid')::oid, x -> 'columns', 'to_one'
  FROM jsonb_array_elements(coalesce(joined, '[]')) x;
  RETURN new_id;
END $fn$;

-- Plain column indexes on a transform's target, for its owner (the
-- workers' role owns the table, D20): names only, default operator
-- classes, no expressions or predicates.
CREATE OR REPLACE FUNCTION {{S}}._create_index(target text, columns text[]) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE d record; col text;
BEGIN
  SELECT x.target_oid, x.owner_role, x.target_table INTO d FROM {{S}}._definitions x
  WHERE x.target_table = target OR x.target_oid = to_regclass(target) OR x.compiled #>> '{spec,target,name}' = target LIMIT 1;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'transform % does not exist', target USING ERRCODE = '42704', DETAIL = 'trellis: not_found/TransformNotFound';
  END IF;
  IF NOT pg_has_role(session_user, d.owner_role, 'MEMBER') THEN
    RAISE EXCEPTION 'must be owner of transform %', d.target_table USING ERRCODE = '42501', DETAIL = 'trellis: permission/NotOwner';
  END IF;
  IF cardinality(columns) IS NULL OR cardinality(columns) = 0 THEN
    RAISE EXCEPTION 'create_index needs at least one column' USING ERRCODE = '22023';
  END IF;
  FOREACH col IN ARRAY columns LOOP
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = d.target_oid AND attname = col AND attnum > 0 AND NOT attisdropped) THEN
      RAISE EXCEPTION 'column % of % does not exist', col, d.target_table USING ERRCODE = '42703';
    END IF;
  END LOOP;
  EXECUTE format('CREATE INDEX ON %s (%s)', d.target_oid::regclass, (SELECT string_agg(quote_ident(c), ', ') FROM unnest(columns) c));
END $fn$;

-- Deletes a definition for its owner, refusing while another definition
-- reads its target; returns the compiled definition (NULL when there is no
-- such transform) so the caller can drop the tables it owns.
CREATE OR REPLACE FUNCTION {{S}}._drop_definition(acting regrole, tschema text, tname text) RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE d record; readers text;
BEGIN
  PERFORM {{S}}._check_acting(acting);
  -- Ownership before the fence: a non-owner must not make anyone wait.
  SELECT id, target_table, owner_role INTO d FROM {{S}}._definitions WHERE target_table = format('%I.%I', tschema, tname);
  IF FOUND AND NOT pg_has_role(acting, d.owner_role, 'USAGE') THEN
    RAISE EXCEPTION 'must be owner of transform %', d.target_table USING ERRCODE = '42501',
      DETAIL = 'trellis: permission/NotOwner',
      HINT = format('run it as %I or a member of that role', pg_get_userbyid(d.owner_role));
  END IF;
  PERFORM {{S}}._fence_definition(x.id) FROM {{S}}._definitions x WHERE x.target_table = format('%I.%I', tschema, tname);
  SELECT id, compiled, target_table, owner_role, status INTO d FROM {{S}}._definitions
  WHERE target_table = format('%I.%I', tschema, tname) FOR UPDATE;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  IF NOT pg_has_role(acting, d.owner_role, 'USAGE') THEN
    RAISE EXCEPTION 'must be owner of transform %', d.target_table USING ERRCODE = '42501',
      DETAIL = 'trellis: permission/NotOwner',
      HINT = format('run it as %I or a member of that role', pg_get_userbyid(d.owner_role));
  END IF;
  -- No live-to-gone step (grammar §4.5): pause first.
  IF d.status NOT IN ('paused', 'quarantined') THEN
    RAISE EXCEPTION 'transform % is %, not paused', d.target_table, d.status USING ERRCODE = '55000',
      DETAIL = 'trellis: conflict/TransformNotPaused',
      HINT = format('PAUSE TRANSFORM %s first', d.compiled #>> '{spec,target,name}');
  END IF;
  SELECT string_agg(o.target_table, ', ' ORDER BY o.target_table) INTO readers
  FROM {{S}}._definition_reads r JOIN {{S}}._definitions o ON o.id = r.definition_id
  WHERE r.table_name = d.target_table AND o.id <> d.id;
  IF readers IS NOT NULL THEN
    RAISE EXCEPTION 'cannot drop transform %: % read(s) it', d.target_table, readers USING ERRCODE = '2BP01',
      DETAIL = 'trellis: conflict/DependentsBlockDrop', HINT = 'drop the readers first';
  END IF;
  DELETE FROM {{S}}._definitions WHERE id = d.id;
  EXECUTE format('DROP VIEW IF EXISTS %I.%I', {{SFN}}, 'd' || d.id);
  RETURN d.compiled;
END $fn$;

-- DROP TRANSFORM: _drop_definition, then the target and ledger (owned by
-- the workers' role, D20) leave the caller's namespace. PostgreSQL's own
-- dependency checks are made by trying DROP TABLE and undoing it (a view
-- on the target refuses with PostgreSQL's error); then the tables move to
-- a trash schema of the target's own (named by its oid, unique in the
-- database while the table exists) that the staging worker drops after the
-- COMMIT: moving files costs nothing, dropping them costs their size at
-- COMMIT. trash is NULL when the schema cannot be made (the workers' role
-- may not create schemas): the tables are dropped here then. The tables
-- are the definition row's own oids, never names from the caller.
CREATE OR REPLACE FUNCTION {{S}}._drop_transform(acting regrole, tschema text, tname text, OUT compiled jsonb, OUT trash name)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE toid oid; loid oid; rels regclass[];
BEGIN
  SELECT target_oid, ledger_oid INTO toid, loid FROM {{S}}._definitions WHERE target_table = format('%I.%I', tschema, tname);
  compiled := {{S}}._drop_definition(acting, tschema, tname);
  IF compiled IS NULL THEN
    RETURN;
  END IF;
  SELECT array_agg(c.oid::regclass ORDER BY c.oid = toid DESC) INTO rels FROM pg_class c WHERE c.oid IN (toid, loid);
  IF rels IS NULL THEN
    RETURN;
  END IF;
  BEGIN
    FOR i IN 1 .. cardinality(rels) LOOP
      EXECUTE format('DROP TABLE %s', rels[i]);
    END LOOP;
    RAISE EXCEPTION 'trellis: dependency probe' USING ERRCODE = 'TRL01';
  EXCEPTION WHEN SQLSTATE 'TRL01' THEN NULL;
  END;
  trash := left((SELECT schema_name FROM {{S}}._instance), 40) || '_trash_' || toid;
  BEGIN
    EXECUTE format('CREATE SCHEMA %I', trash);
  EXCEPTION WHEN insufficient_privilege OR duplicate_schema THEN
    trash := NULL;
  END;
  IF trash IS NULL THEN
    FOR i IN 1 .. cardinality(rels) LOOP
      EXECUTE format('DROP TABLE %s', rels[i]);
    END LOOP;
    RETURN;
  END IF;
  INSERT INTO {{S}}._trash (schema_name) VALUES (trash);
  FOR i IN 1 .. cardinality(rels) LOOP
    EXECUTE format('ALTER TABLE %s SET SCHEMA %I', rels[i], trash);
  END LOOP;
END $fn$;

-- Replaced by the above: the tables are the workers' now, and a function
-- moving tables named by the caller would move anyone's.
DROP FUNCTION IF EXISTS {{S}}._trash_tables(name, text[]);
DROP FUNCTION IF EXISTS {{S}}._define(regrole, regclass, regclass, text, text, oid, text, jsonb, jsonb, text);
DROP FUNCTION IF EXISTS {{S}}._define(regrole, text, text, jsonb, jsonb, text, text, oid, text, jsonb, jsonb, text);
REVOKE ALL ON FUNCTION {{S}}._create_table(regrole, text, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION {{S}}._create_index(text, text[]) TO PUBLIC;

GRANT EXECUTE ON FUNCTION {{S}}._drop_transform(regrole, text, text) TO PUBLIC;

GRANT EXECUTE ON FUNCTION {{S}}._check_acting(regrole), {{S}}._instance_worker_role(),
  {{S}}._definition_of(regrole, oid), {{S}}._is_target(oid), {{S}}._find_transform(text),
  {{S}}._define(regrole, text, text, jsonb, jsonb, text, text, oid, text, jsonb, jsonb, text, jsonb),
  {{S}}._drop_definition(regrole, text, text) TO PUBLIC;
