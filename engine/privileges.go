package engine

// D9: clients never write the catalog. A Trellis statement runs as the
// client's role on the client's connection, so Postgres checks what the
// client may do (CREATE on the target schema, SELECT on the source); the
// catalog rows are written by the SECURITY DEFINER functions below, owned by
// the workers' role and executable by PUBLIC. Each takes the acting role,
// proves the session may act as it, and derives every permission from facts
// Postgres established (engine spec §12.8 "Privileges").
//
// They are code, not data: Migrate replaces them on every run, so they
// follow the binary without a catalog format bump.

// privilegedFunctions is run by Migrate after the versioned migrations.
// {{S}} is the quoted catalog schema.
const privilegedFunctions = `
CREATE OR REPLACE FUNCTION {{S}}._check_acting(acting regrole) RETURNS void
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  -- A caller may only claim a role it could SET ROLE to.
  IF acting IS NULL OR NOT pg_has_role(session_user, acting, 'MEMBER') THEN
    RAISE EXCEPTION 'permission denied to act as %', acting USING ERRCODE = '42501',
      DETAIL = 'trellis: permission/MissingPrivilege';
  END IF;
END $fn$;

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

-- Records a definition whose target and ledger the caller just created.
CREATE OR REPLACE FUNCTION {{S}}._define(acting regrole, target regclass, ledger regclass, kind text,
    source_table text, source_oid oid, definition_sql text, compiled jsonb, read_columns jsonb, read_role text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE new_id bigint; worker name; src_owner oid;
BEGIN
  PERFORM {{S}}._check_acting(acting);
  IF NOT pg_has_role(acting, (SELECT relowner FROM pg_class WHERE oid = target), 'USAGE')
     OR NOT pg_has_role(acting, (SELECT relowner FROM pg_class WHERE oid = ledger), 'USAGE') THEN
    RAISE EXCEPTION 'must be owner of table %', target USING ERRCODE = '42501',
      DETAIL = 'trellis: permission/NotOwner';
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
  INSERT INTO {{S}}._definitions (target_table, target_oid, ledger_oid, owner_role, kind,
      source_table, source_oid, definition_sql, compiled, status)
  VALUES (format('%I.%I', (SELECT nspname FROM pg_namespace n JOIN pg_class c ON c.relnamespace = n.oid WHERE c.oid = target),
                          (SELECT relname FROM pg_class WHERE oid = target)),
          target, ledger, acting, kind, source_table, source_oid, definition_sql, compiled, 'waiting_to_backfill')
  RETURNING id INTO new_id;
  INSERT INTO {{S}}._definition_reads (definition_id, table_name, table_oid, columns, role)
  VALUES (new_id, source_table, source_oid, read_columns, read_role);
  RETURN new_id;
END $fn$;

-- Deletes a definition for its owner, refusing while another definition
-- reads its target; returns the compiled definition (NULL when there is no
-- such transform) so the caller can drop the tables it owns.
CREATE OR REPLACE FUNCTION {{S}}._drop_definition(acting regrole, tschema text, tname text) RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE d record; readers text;
BEGIN
  PERFORM {{S}}._check_acting(acting);
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
  RETURN d.compiled;
END $fn$;

-- DROP TRANSFORM's catalog half: _drop_definition, then a trash schema of
-- the target's own (named by its oid, unique in the database while the
-- table exists), owned by the workers' role, in which the caller may
-- create: _trash_tables, run as the caller, moves the target and ledger
-- there, and the staging worker drops the schema after the COMMIT. trash
-- is NULL when the schema cannot be made (the workers' role may not
-- create schemas): the caller then drops the tables itself.
CREATE OR REPLACE FUNCTION {{S}}._drop_transform(acting regrole, tschema text, tname text, OUT compiled jsonb, OUT trash name)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE toid oid;
BEGIN
  SELECT target_oid INTO toid FROM {{S}}._definitions WHERE target_table = format('%I.%I', tschema, tname);
  compiled := {{S}}._drop_definition(acting, tschema, tname);
  IF compiled IS NULL THEN
    RETURN;
  END IF;
  trash := left((SELECT schema_name FROM {{S}}._instance), 40) || '_trash_' || toid;
  BEGIN
    EXECUTE format('CREATE SCHEMA %I', trash);
    EXECUTE format('GRANT CREATE ON SCHEMA %I TO %s', trash, acting);
  EXCEPTION WHEN insufficient_privilege OR duplicate_schema THEN
    trash := NULL;
    RETURN;
  END;
  INSERT INTO {{S}}._trash (schema_name) VALUES (trash);
END $fn$;

-- DROP TRANSFORM's caller half, run as the caller (it owns the tables):
-- PostgreSQL's own dependency checks, made by trying DROP TABLE and
-- undoing it, then the move out of the caller's namespace. Moving files
-- costs nothing; dropping them costs their size at COMMIT.
CREATE OR REPLACE FUNCTION {{S}}._trash_tables(trash name, tables text[]) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE rels regclass[];
BEGIN
  SELECT array_agg(r) INTO rels FROM unnest(tables) t, to_regclass(t) r WHERE r IS NOT NULL;
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
  FOR i IN 1 .. cardinality(rels) LOOP
    EXECUTE format('ALTER TABLE %s SET SCHEMA %I', rels[i], trash);
  END LOOP;
END $fn$;

GRANT EXECUTE ON FUNCTION {{S}}._drop_transform(regrole, text, text), {{S}}._trash_tables(name, text[]) TO PUBLIC;

GRANT EXECUTE ON FUNCTION {{S}}._check_acting(regrole), {{S}}._instance_worker_role(),
  {{S}}._definition_of(regrole, oid), {{S}}._is_target(oid), {{S}}._find_transform(text),
  {{S}}._define(regrole, regclass, regclass, text, text, oid, text, jsonb, jsonb, text),
  {{S}}._drop_definition(regrole, text, text) TO PUBLIC;
`
