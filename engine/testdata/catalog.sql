-- migration 1
CREATE TABLE "trellis"._instance (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  schema_name text NOT NULL, format_version int NOT NULL, target_schema text NOT NULL,
  worker_role name NOT NULL, created_at timestamptz NOT NULL DEFAULT now());

CREATE TABLE "trellis"._definitions (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  target_table text NOT NULL UNIQUE, target_oid oid NOT NULL, ledger_oid oid NOT NULL,
  owner_role oid NOT NULL,
  kind text NOT NULL CHECK (kind IN ('one_to_one','aggregate')),
  source_table text NOT NULL, source_oid oid NOT NULL,
  definition_sql text NOT NULL,
  compiled jsonb NOT NULL,
  status text NOT NULL CHECK (status IN
    ('waiting_to_backfill','backfilling','live','paused','quarantined')),
  status_detail jsonb,
  version bigint NOT NULL DEFAULT 1,
  build_id bigint, build_kind text, build_started_at timestamptz,
  build_rows_estimated bigint, build_rows_done bigint,
  created_at timestamptz NOT NULL DEFAULT now());
CREATE SEQUENCE "trellis"._build_seq;

CREATE TABLE "trellis"._definition_reads (
  definition_id bigint NOT NULL REFERENCES "trellis"._definitions ON DELETE CASCADE,
  table_name text NOT NULL, table_oid oid NOT NULL,
  columns jsonb NOT NULL DEFAULT '[]',
  role text NOT NULL CHECK (role IN ('source','to_one','to_many','upstream_target')),
  PRIMARY KEY (definition_id, table_name, role));
CREATE INDEX ON "trellis"._definition_reads (table_name);

CREATE TABLE "trellis"._captured_tables (
  table_name text PRIMARY KEY, table_oid oid NOT NULL,
  key_columns jsonb NOT NULL, key_nullable boolean NOT NULL,
  enable_mode "char" NOT NULL, function_hash text NOT NULL,
  installed_at timestamptz);

CREATE SEQUENCE "trellis"._change_seq CACHE 32;

CREATE TABLE "trellis"._change_log (
  change_id bigint NOT NULL DEFAULT nextval('"trellis"._change_seq'),
  txid xid8 NOT NULL DEFAULT pg_current_xact_id(),
  src_table text NOT NULL,
  key text,
  op text NOT NULL CHECK (op IN ('insert','update','delete','truncate','rederive','schema')),
  definition_id bigint,
  join_vals jsonb,
  origin_lsn pg_lsn,
  hop smallint NOT NULL DEFAULT 0, staged_at timestamptz NOT NULL DEFAULT now()
) WITH (fillfactor = 100, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 20000);
CREATE INDEX ON "trellis"._change_log (txid);
CREATE INDEX ON "trellis"._change_log (origin_lsn);

CREATE TABLE "trellis"._batches (
  seq bigint PRIMARY KEY, snap pg_snapshot NOT NULL,
  sealed_at timestamptz NOT NULL DEFAULT now(), row_count bigint NOT NULL,
  bucket_count smallint NOT NULL, has_truncate boolean NOT NULL,
  done_mask bigint NOT NULL DEFAULT 0,
  state text NOT NULL CHECK (state IN ('sealed','drained')), drained_at timestamptz);
INSERT INTO "trellis"._batches (seq, snap, row_count, bucket_count, has_truncate, done_mask, state, drained_at)
VALUES (0, '1:1:', 0, 1, false, 1, 'drained', now());

CREATE TABLE "trellis"._seal_lock (id boolean PRIMARY KEY DEFAULT true CHECK (id));
INSERT INTO "trellis"._seal_lock VALUES (true);

CREATE TABLE "trellis"._batch_buckets (
  batch_seq bigint NOT NULL REFERENCES "trellis"._batches ON DELETE CASCADE,
  bucket smallint NOT NULL,
  state text NOT NULL DEFAULT 'open' CHECK (state IN ('open','done')),
  after_table text, after_key text,
  pages int NOT NULL DEFAULT 0,
  attempts int NOT NULL DEFAULT 0, last_error text, last_sqlstate text,
  next_attempt_at timestamptz,
  PRIMARY KEY (batch_seq, bucket));

CREATE TABLE "trellis"._workers (
  worker_id text PRIMARY KEY, proxy_id text NOT NULL,
  kind text NOT NULL CHECK (kind IN ('staging','drain')),
  registered_at timestamptz NOT NULL DEFAULT now(), last_seen timestamptz NOT NULL);

CREATE TABLE "trellis"._build_tasks (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  definition_id bigint NOT NULL REFERENCES "trellis"._definitions ON DELETE CASCADE,
  build_id bigint NOT NULL,
  kind text NOT NULL CHECK (kind IN ('plan','chunk')), lo text, hi text,
  state text NOT NULL DEFAULT 'open' CHECK (state IN ('open','done')),
  attempts int NOT NULL DEFAULT 0, rows_done bigint, last_error text, next_attempt_at timestamptz);
CREATE INDEX ON "trellis"._build_tasks (build_id, state);

CREATE TABLE "trellis"._poison (
  definition_id bigint NOT NULL REFERENCES "trellis"._definitions ON DELETE CASCADE,
  src_table text NOT NULL, key text NOT NULL, error text NOT NULL, sqlstate text,
  origin_lsn pg_lsn,
  poisoned_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (definition_id, src_table, key));

CREATE FUNCTION "trellis"._converged(token pg_lsn) RETURNS boolean LANGUAGE sql STABLE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  WITH d AS (SELECT snap FROM "trellis"._batches WHERE state = 'drained' ORDER BY seq DESC LIMIT 1)
  SELECT NOT EXISTS (SELECT 1 FROM "trellis"._change_log c, d
                     WHERE (c.origin_lsn IS NULL OR c.origin_lsn <= token)
                       AND NOT pg_visible_in_snapshot(c.txid, d.snap))
     AND NOT EXISTS (SELECT 1 FROM "trellis"._poison p
                     WHERE p.origin_lsn IS NULL OR p.origin_lsn <= token);
$fn$;
-- migration 2
CREATE TABLE "trellis"._key_deaths (
  definition_id bigint NOT NULL REFERENCES "trellis"._definitions ON DELETE CASCADE,
  src_table text NOT NULL, key text NOT NULL,
  deaths int NOT NULL DEFAULT 0, last_error text, last_sqlstate text,
  last_failed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (definition_id, src_table, key));
CREATE INDEX ON "trellis"._key_deaths (src_table, key);
CREATE INDEX ON "trellis"._poison (src_table, key);
ALTER TABLE "trellis"._build_tasks ADD COLUMN last_sqlstate text;
-- migration 3
ALTER TABLE "trellis"._definition_reads ADD COLUMN bindings jsonb;
ALTER TABLE "trellis"._captured_tables ADD COLUMN trigger_xmins jsonb, ADD COLUMN relfilenode oid;
ALTER TABLE "trellis"._build_tasks DROP CONSTRAINT _build_tasks_kind_check,
  ADD CONSTRAINT _build_tasks_kind_check CHECK (kind IN ('plan','chunk','sweep'));
-- migration 4
CREATE TABLE "trellis"._column_failures (
  definition_id bigint NOT NULL REFERENCES "trellis"._definitions ON DELETE CASCADE,
  column_name text NOT NULL, src_table text NOT NULL, key text NOT NULL,
  error text NOT NULL, sqlstate text, failed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (definition_id, column_name, src_table, key));
CREATE TABLE "trellis"._paused_columns (
  definition_id bigint NOT NULL REFERENCES "trellis"._definitions ON DELETE CASCADE,
  column_name text NOT NULL, paused_at timestamptz NOT NULL DEFAULT now(),
  last_error text, sqlstate text, cascaded_from text[] NOT NULL DEFAULT '{}',
  PRIMARY KEY (definition_id, column_name));
-- migration 5
ALTER TABLE "trellis"._paused_columns ADD COLUMN local boolean NOT NULL DEFAULT true;
ALTER TABLE "trellis"._paused_columns DROP COLUMN cascaded_from CASCADE;
CREATE TABLE "trellis"._column_pause_edges (
  up_definition_id bigint NOT NULL, up_column text NOT NULL,
  down_definition_id bigint NOT NULL, down_column text NOT NULL,
  PRIMARY KEY (up_definition_id, up_column, down_definition_id, down_column),
  FOREIGN KEY (up_definition_id, up_column) REFERENCES "trellis"._paused_columns ON DELETE CASCADE,
  FOREIGN KEY (down_definition_id, down_column) REFERENCES "trellis"._paused_columns ON DELETE CASCADE);
CREATE INDEX ON "trellis"._column_pause_edges (down_definition_id, down_column);
ALTER TABLE "trellis"._build_tasks DROP CONSTRAINT _build_tasks_kind_check,
  ADD CONSTRAINT _build_tasks_kind_check CHECK (kind IN ('plan','chunk','sweep','refresh'));
-- migration 6
ALTER TABLE "trellis"._change_log ADD COLUMN keys text[];
-- migration 7
CREATE TABLE "trellis"._deferred (
  definition_id bigint NOT NULL,
  src_table text NOT NULL, key text NOT NULL, whole boolean NOT NULL DEFAULT false,
  origin_lsn pg_lsn, hop smallint NOT NULL DEFAULT 0, deferred_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (definition_id, src_table, key));
CREATE OR REPLACE FUNCTION "trellis"._converged(token pg_lsn) RETURNS boolean LANGUAGE sql STABLE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  WITH d AS (SELECT snap FROM "trellis"._batches WHERE state = 'drained' ORDER BY seq DESC LIMIT 1)
  SELECT NOT EXISTS (SELECT 1 FROM "trellis"._change_log c, d
                     WHERE (c.origin_lsn IS NULL OR c.origin_lsn <= token)
                       AND NOT pg_visible_in_snapshot(c.txid, d.snap))
     AND NOT EXISTS (SELECT 1 FROM "trellis"._poison p
                     WHERE p.origin_lsn IS NULL OR p.origin_lsn <= token)
     AND NOT EXISTS (SELECT 1 FROM "trellis"._deferred x
                     WHERE x.origin_lsn IS NULL OR x.origin_lsn <= token);
$fn$;
-- migration 8
ALTER TABLE "trellis"._build_tasks DROP CONSTRAINT _build_tasks_kind_check,
  ADD CONSTRAINT _build_tasks_kind_check CHECK (kind IN ('plan','chunk','sweep','refresh','groups'));
-- migration 9
CREATE TABLE "trellis"._trash (
  schema_name name PRIMARY KEY, dropped_at timestamptz NOT NULL DEFAULT now(),
  attempts int NOT NULL DEFAULT 0, last_error text, next_attempt_at timestamptz);
-- migration 10
ALTER TABLE "trellis"._change_log DROP CONSTRAINT IF EXISTS _change_log_op_check;
-- migration 11
ALTER TABLE "trellis"._workers ADD COLUMN format int NOT NULL DEFAULT 0;
ALTER TABLE "trellis"._build_tasks DROP CONSTRAINT _build_tasks_kind_check,
  ADD CONSTRAINT _build_tasks_kind_check CHECK (kind IN ('plan','chunk','sweep','refresh','groups','index'));
-- migration 12
DO $m$ DECLARE r record; w name := (SELECT worker_role FROM "trellis"._instance);
BEGIN
  FOR r IN SELECT c.oid::regclass AS rel, d.owner_role::regrole AS owner FROM "trellis"._definitions d
           JOIN pg_class c ON c.oid IN (d.target_oid, d.ledger_oid) WHERE c.relowner <> (SELECT oid FROM pg_roles WHERE rolname = w) LOOP
    BEGIN
      EXECUTE format('ALTER TABLE %s OWNER TO %I', r.rel, w);
      EXECUTE format('GRANT SELECT ON %s TO %s WITH GRANT OPTION', r.rel, r.owner);
    EXCEPTION WHEN insufficient_privilege THEN
      RAISE WARNING 'trellis: % stays owned by %; its transform pauses', r.rel, r.owner;
    END;
  END LOOP;
END $m$;
-- migration 13
CREATE TABLE "trellis"._page_failures (
  definition_id bigint PRIMARY KEY,
  attempts int NOT NULL DEFAULT 0, error text, sqlstate text,
  since timestamptz NOT NULL DEFAULT now(), last_at timestamptz NOT NULL DEFAULT now(),
  next_attempt_at timestamptz);
CREATE FUNCTION "trellis"._converged(token pg_lsn, viewer name) RETURNS boolean LANGUAGE sql STABLE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  WITH d AS (SELECT snap FROM "trellis"._batches WHERE state = 'drained' ORDER BY seq DESC LIMIT 1)
  SELECT NOT EXISTS (SELECT 1 FROM "trellis"._change_log c, d
                     WHERE (c.origin_lsn IS NULL OR c.origin_lsn <= token)
                       AND NOT pg_visible_in_snapshot(c.txid, d.snap))
     AND NOT EXISTS (SELECT 1 FROM "trellis"._poison p
                     WHERE (p.origin_lsn IS NULL OR p.origin_lsn <= token)
                       AND (viewer IS NULL OR EXISTS (SELECT 1 FROM "trellis"._definitions v WHERE v.id = p.definition_id
                            AND has_table_privilege(viewer, v.target_oid, 'SELECT'))))
     AND NOT EXISTS (SELECT 1 FROM "trellis"._deferred x
                     WHERE (x.origin_lsn IS NULL OR x.origin_lsn <= token)
                       AND (viewer IS NULL OR EXISTS (SELECT 1 FROM "trellis"._definitions v WHERE v.id = x.definition_id
                            AND has_table_privilege(viewer, v.target_oid, 'SELECT'))));
$fn$;
-- migration 14
SELECT 1;
-- migration 15
SELECT 1;
-- migration 16
CREATE TABLE "trellis"._self_checks (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  definition_id bigint NOT NULL REFERENCES "trellis"._definitions ON DELETE CASCADE,
  mode text NOT NULL CHECK (mode IN ('standard','strict')),
  timeout_ms bigint NOT NULL CHECK (timeout_ms >= 0),
  state text NOT NULL DEFAULT 'queued' CHECK (state IN ('queued','running','done','failed','cancelled')),
  created_at timestamptz NOT NULL DEFAULT now(), started_at timestamptz, finished_at timestamptz,
  claimed_by text, claimed_proc text, claim bigint NOT NULL DEFAULT 0, saved_at timestamptz,
  cursor text, rows_compared bigint NOT NULL DEFAULT 0, pages int NOT NULL DEFAULT 0,
  divergence_count int NOT NULL DEFAULT 0, outcome text, not_live_status text,
  truncated boolean NOT NULL DEFAULT false, checked_through text, error text);
CREATE UNIQUE INDEX _self_checks_one_open ON "trellis"._self_checks (definition_id) WHERE state IN ('queued','running');
CREATE TABLE "trellis"._self_check_divergences (
  job_id bigint NOT NULL REFERENCES "trellis"._self_checks ON DELETE CASCADE,
  ordinal int NOT NULL,
  kind text NOT NULL CHECK (kind IN ('cell','missing_row','extra_row','missing_column','extra_column','capture')),
  key text, column_name text, persisted text, recomputed text, table_name text, detail text,
  PRIMARY KEY (job_id, ordinal));
-- status.drain_failure.since / last_seen: when a bucket's failing run of
-- pages began and when it last failed (cleared by its next committed page).
ALTER TABLE "trellis"._batch_buckets ADD COLUMN failed_since timestamptz, ADD COLUMN failed_last timestamptz;
-- migration 17
ALTER TABLE "trellis"._definitions ADD COLUMN verified boolean NOT NULL DEFAULT false;
-- migration 18
CREATE TABLE "trellis"._staging_key (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  key bigint NOT NULL, rotations bigint NOT NULL DEFAULT 0);
INSERT INTO "trellis"._staging_key (key) VALUES (('x' || substr(md5(gen_random_uuid()::text), 1, 16))::bit(64)::int8);
-- migration 19
CREATE SCHEMA "trellis_fence";
REVOKE ALL ON SCHEMA "trellis_fence" FROM PUBLIC;
CREATE VIEW "trellis_fence".build_mark AS SELECT;
DO $m$ DECLARE r record;
BEGIN
  FOR r IN SELECT id FROM "trellis"._definitions LOOP
    EXECUTE format('CREATE VIEW %I.%I AS SELECT', 'trellis_fence', 'd' || r.id);
  END LOOP;
END $m$;
-- migration 20
ALTER TABLE "trellis"._change_log ADD COLUMN origin_at timestamptz;
CREATE TABLE "trellis"._capture_waits (
  table_name text PRIMARY KEY,
  operation text NOT NULL CHECK (operation IN ('install','reinstall','uninstall')),
  lock_mode text NOT NULL, waiting_since timestamptz NOT NULL DEFAULT now(),
  observed_at timestamptz NOT NULL DEFAULT now(), blockers text[] NOT NULL DEFAULT '{}');
ALTER TABLE "trellis"._page_failures ADD COLUMN table_name text;
-- migration 21
CREATE TABLE "trellis"._batch_keys (
  batch_seq bigint NOT NULL, bucket smallint NOT NULL,
  src_table text COLLATE "C" NOT NULL, key text COLLATE "C" NOT NULL,
  unknown_origin boolean NOT NULL, origin_lsn pg_lsn, hop smallint NOT NULL,
  staged_at timestamptz NOT NULL, origin_at timestamptz NOT NULL,
  PRIMARY KEY (batch_seq, bucket, src_table, key))
  WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 20000);
ALTER TABLE "trellis"._batch_buckets ADD COLUMN keyed boolean NOT NULL DEFAULT false;
-- migration 22
CREATE FUNCTION "trellis"._drained_prefix() RETURNS bigint LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT max(seq) FROM "trellis"._batches WHERE state = 'drained'
    AND seq < coalesce((SELECT min(u.seq) FROM "trellis"._batches u WHERE u.state <> 'drained'), 9223372036854775807);
$fn$;

CREATE OR REPLACE FUNCTION "trellis"._converged(token pg_lsn, viewer name) RETURNS boolean LANGUAGE sql STABLE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  WITH d AS (SELECT snap FROM "trellis"._batches WHERE seq = "trellis"._drained_prefix())
  SELECT NOT EXISTS (SELECT 1 FROM "trellis"._change_log c, d
                     WHERE (c.origin_lsn IS NULL OR c.origin_lsn <= token)
                       AND NOT pg_visible_in_snapshot(c.txid, d.snap))
     AND NOT EXISTS (SELECT 1 FROM "trellis"._poison p
                     WHERE (p.origin_lsn IS NULL OR p.origin_lsn <= token)
                       AND (viewer IS NULL OR EXISTS (SELECT 1 FROM "trellis"._definitions v WHERE v.id = p.definition_id
                            AND has_table_privilege(viewer, v.target_oid, 'SELECT'))))
     AND NOT EXISTS (SELECT 1 FROM "trellis"._deferred x
                     WHERE (x.origin_lsn IS NULL OR x.origin_lsn <= token)
                       AND (viewer IS NULL OR EXISTS (SELECT 1 FROM "trellis"._definitions v WHERE v.id = x.definition_id
                            AND has_table_privilege(viewer, v.target_oid, 'SELECT'))));
$fn$;
-- migration 23
ALTER TABLE "trellis"._batch_keys ADD COLUMN fanned boolean NOT NULL DEFAULT false,
  ADD COLUMN fan_defs bigint[];
-- functions
CREATE OR REPLACE FUNCTION "trellis"._check_acting(acting regrole) RETURNS void
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
CREATE OR REPLACE FUNCTION "trellis"._trusted_writer() RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT pg_has_role(session_user, (SELECT worker_role FROM "trellis"._instance), 'MEMBER')
$fn$;

CREATE OR REPLACE FUNCTION "trellis"._instance_worker_role() RETURNS name
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT worker_role FROM "trellis"._instance
$fn$;

-- The compiled definition whose target is rel, for a caller that may read
-- that target (it is about to use it as a source). NULL when none.
CREATE OR REPLACE FUNCTION "trellis"._definition_of(acting regrole, rel oid) RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE c jsonb;
BEGIN
  PERFORM "trellis"._check_acting(acting);
  SELECT d.compiled INTO c FROM "trellis"._definitions d WHERE d.target_oid = rel;
  IF c IS NOT NULL AND NOT has_table_privilege(acting, rel, 'SELECT') THEN
    RETURN NULL;
  END IF;
  RETURN c;
END $fn$;

CREATE OR REPLACE FUNCTION "trellis"._is_target(rel oid) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT EXISTS (SELECT 1 FROM "trellis"._definitions WHERE target_oid = rel)
$fn$;

-- A transform by bare target name (unique across the instance): its
-- schema, table and owner. No row when there is none.
CREATE OR REPLACE FUNCTION "trellis"._find_transform(bare text, OUT schema_name text, OUT table_name text, OUT owner_name text)
RETURNS SETOF record
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  -- A definition whose target is gone is still found by its recorded name,
  -- so it can be paused and dropped (D21).
  SELECT coalesce(n.nspname::text, d.compiled #>> '{spec,target,schema}'), coalesce(c.relname::text, d.compiled #>> '{spec,target,name}'),
         pg_get_userbyid(d.owner_role)::text
  FROM "trellis"._definitions d LEFT JOIN pg_class c ON c.oid = d.target_oid LEFT JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE coalesce(c.relname::text, d.compiled #>> '{spec,target,name}') = bare
$fn$;

-- One table of a transform, created as the workers' role (D20: its owner;
-- no tenant can attach code that runs when the workers write it). shape is
-- structured data, never SQL: column names, type oids and typmods
-- (rendered by format_type), collation names (parsed by regcollation's
-- input), NOT NULL, DEFAULT false on a boolean, and the names of the
-- columns of the primary key, of a UNIQUE NULLS NOT DISTINCT constraint or
-- index, and of the index WHERE member.
CREATE OR REPLACE FUNCTION "trellis"._create_table(acting regrole, tschema text, tname text, shape jsonb) RETURNS regclass
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
    SELECT worker_role INTO worker FROM "trellis"._instance;
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
CREATE OR REPLACE FUNCTION "trellis"._define(acting regrole, tschema text, tname text, target_shape jsonb, ledger_shape jsonb,
    kind text, source_table text, source_oid oid, definition_sql text, compiled jsonb, read_columns jsonb, read_role text,
    joined jsonb)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE new_id bigint; worker name; src_owner oid; target regclass; ledger regclass; other text; j record;
BEGIN
  PERFORM "trellis"._check_acting(acting);
  IF NOT has_schema_privilege(acting, tschema, 'CREATE') THEN
    RAISE EXCEPTION 'permission denied for schema %', tschema USING ERRCODE = '42501',
      DETAIL = 'trellis: permission/MissingPrivilege',
      HINT = format('GRANT CREATE ON SCHEMA %I TO %I;', tschema, acting::text);
  END IF;
  -- Bare names resolve PAUSE/ALTER/release_key: one per instance.
  SELECT d.target_table INTO other FROM "trellis"._definitions d JOIN pg_class c ON c.oid = d.target_oid WHERE c.relname = tname;
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
  SELECT worker_role INTO worker FROM "trellis"._instance;
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
  target := "trellis"._create_table(acting, tschema, tname, target_shape);
  ledger := "trellis"._create_table(acting, tschema, tname || '__ledger', ledger_shape);
  INSERT INTO "trellis"._definitions (target_table, target_oid, ledger_oid, owner_role, kind,
      source_table, source_oid, definition_sql, compiled, status, verified)
  VALUES (format('%I.%I', tschema, tname), target, ledger, acting, kind, source_table, source_oid, definition_sql, compiled,
          'waiting_to_backfill', "trellis"._trusted_writer())
  RETURNING id INTO new_id;
  EXECUTE format('CREATE VIEW %I.%I AS SELECT', 'trellis_fence', 'd' || new_id); -- its fence (fence.go)
  INSERT INTO "trellis"._definition_reads (definition_id, table_name, table_oid, columns, role)
  VALUES (new_id, source_table, source_oid, read_columns, read_role);
  INSERT INTO "trellis"._definition_reads (definition_id, table_name, table_oid, columns, role)
  SELECT new_id, x ->> 'table', (x ->> 'oid')::oid, x -> 'columns', 'to_one'
  FROM jsonb_array_elements(coalesce(joined, '[]')) x;
  RETURN new_id;
END $fn$;

-- Plain column indexes on a transform's target, for its owner (the
-- workers' role owns the table, D20): names only, default operator
-- classes, no expressions or predicates.
CREATE OR REPLACE FUNCTION "trellis"._create_index(target text, columns text[]) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE d record; col text;
BEGIN
  SELECT x.target_oid, x.owner_role, x.target_table INTO d FROM "trellis"._definitions x
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
CREATE OR REPLACE FUNCTION "trellis"._drop_definition(acting regrole, tschema text, tname text) RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE d record; readers text;
BEGIN
  PERFORM "trellis"._check_acting(acting);
  -- Ownership before the fence: a non-owner must not make anyone wait.
  SELECT id, target_table, owner_role INTO d FROM "trellis"._definitions WHERE target_table = format('%I.%I', tschema, tname);
  IF FOUND AND NOT pg_has_role(acting, d.owner_role, 'USAGE') THEN
    RAISE EXCEPTION 'must be owner of transform %', d.target_table USING ERRCODE = '42501',
      DETAIL = 'trellis: permission/NotOwner',
      HINT = format('run it as %I or a member of that role', pg_get_userbyid(d.owner_role));
  END IF;
  PERFORM "trellis"._fence_definition(x.id) FROM "trellis"._definitions x WHERE x.target_table = format('%I.%I', tschema, tname);
  SELECT id, compiled, target_table, owner_role, status INTO d FROM "trellis"._definitions
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
  FROM "trellis"._definition_reads r JOIN "trellis"._definitions o ON o.id = r.definition_id
  WHERE r.table_name = d.target_table AND o.id <> d.id;
  IF readers IS NOT NULL THEN
    RAISE EXCEPTION 'cannot drop transform %: % read(s) it', d.target_table, readers USING ERRCODE = '2BP01',
      DETAIL = 'trellis: conflict/DependentsBlockDrop', HINT = 'drop the readers first';
  END IF;
  DELETE FROM "trellis"._definitions WHERE id = d.id;
  EXECUTE format('DROP VIEW IF EXISTS %I.%I', 'trellis_fence', 'd' || d.id);
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
CREATE OR REPLACE FUNCTION "trellis"._drop_transform(acting regrole, tschema text, tname text, OUT compiled jsonb, OUT trash name)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE toid oid; loid oid; rels regclass[];
BEGIN
  SELECT target_oid, ledger_oid INTO toid, loid FROM "trellis"._definitions WHERE target_table = format('%I.%I', tschema, tname);
  compiled := "trellis"._drop_definition(acting, tschema, tname);
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
  trash := left((SELECT schema_name FROM "trellis"._instance), 40) || '_trash_' || toid;
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
  INSERT INTO "trellis"._trash (schema_name) VALUES (trash);
  FOR i IN 1 .. cardinality(rels) LOOP
    EXECUTE format('ALTER TABLE %s SET SCHEMA %I', rels[i], trash);
  END LOOP;
END $fn$;

-- Replaced by the above: the tables are the workers' now, and a function
-- moving tables named by the caller would move anyone's.
DROP FUNCTION IF EXISTS "trellis"._trash_tables(name, text[]);
DROP FUNCTION IF EXISTS "trellis"._define(regrole, regclass, regclass, text, text, oid, text, jsonb, jsonb, text);
DROP FUNCTION IF EXISTS "trellis"._define(regrole, text, text, jsonb, jsonb, text, text, oid, text, jsonb, jsonb, text);
REVOKE ALL ON FUNCTION "trellis"._create_table(regrole, text, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION "trellis"._create_index(text, text[]) TO PUBLIC;

GRANT EXECUTE ON FUNCTION "trellis"._drop_transform(regrole, text, text) TO PUBLIC;

GRANT EXECUTE ON FUNCTION "trellis"._check_acting(regrole), "trellis"._instance_worker_role(),
  "trellis"._definition_of(regrole, oid), "trellis"._is_target(oid), "trellis"._find_transform(text),
  "trellis"._define(regrole, text, text, jsonb, jsonb, text, text, oid, text, jsonb, jsonb, text, jsonb),
  "trellis"._drop_definition(regrole, text, text) TO PUBLIC;

-- The definition fence (fence.go), exclusive, until the transaction ends:
-- taken before the definition row's FOR UPDATE by every lifecycle function.
-- When it is held, the build steps holding this definition's fence and the
-- build mark are cancelled first (they retry after us, uncharged); pages are
-- waited for. A backend we may not signal (another role's superuser) is
-- waited for too. A definition without its fence relation (being dropped, or
-- from before format 19) is ordered by its row lock alone.
CREATE OR REPLACE FUNCTION "trellis"._fence_definition(def_id bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE rel regclass := to_regclass(format('%I.%I', 'trellis_fence', 'd' || def_id)); p int;
BEGIN
  IF rel IS NULL THEN
    RETURN;
  END IF;
  BEGIN
    EXECUTE format('LOCK TABLE %s IN EXCLUSIVE MODE NOWAIT', rel);
    RETURN;
  EXCEPTION WHEN lock_not_available THEN NULL;
  END;
  FOR p IN SELECT l.pid FROM pg_locks l
      WHERE l.locktype = 'relation' AND l.granted AND l.relation = rel AND l.pid <> pg_backend_pid()
        AND EXISTS (SELECT 1 FROM pg_locks m WHERE m.pid = l.pid AND m.locktype = 'relation' AND m.granted
                    AND m.relation = '"trellis_fence".build_mark'::regclass) LOOP
    BEGIN
      PERFORM pg_cancel_backend(p);
    EXCEPTION WHEN insufficient_privilege THEN NULL;
    END;
  END LOOP;
  EXECUTE format('LOCK TABLE %s IN EXCLUSIVE MODE', rel);
END $fn$;

-- The fence for the staging worker's own steps (auto-pause, build start,
-- going live): false, at once, when a session outside the workers' role
-- holds it (its owner's lifecycle statement in a transaction still open,
-- D21: never wait for another role's transaction); else it waits for the
-- pages in flight, under the caller's lock_timeout.
CREATE OR REPLACE FUNCTION "trellis"._fence_staging(def_id bigint) RETURNS boolean
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE rel regclass := to_regclass(format('%I.%I', 'trellis_fence', 'd' || def_id));
BEGIN
  IF rel IS NULL THEN
    RETURN true;
  END IF;
  BEGIN
    EXECUTE format('LOCK TABLE %s IN EXCLUSIVE MODE NOWAIT', rel);
    RETURN true;
  EXCEPTION WHEN lock_not_available THEN NULL;
  END;
  IF EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
             WHERE l.locktype = 'relation' AND l.relation = rel AND l.mode = 'ExclusiveLock'
               AND a.usename IS DISTINCT FROM (SELECT worker_role FROM "trellis"._instance)) THEN
    RETURN false;
  END IF;
  EXECUTE format('LOCK TABLE %s IN EXCLUSIVE MODE', rel);
  RETURN true;
END $fn$;

-- The shared side of the fence, for pages and build steps (the workers
-- only): which of ids' fences it took without waiting. mark also takes the
-- build mark (a build step). A fence relation that does not exist is no
-- fence, as in _fence_definition.
CREATE OR REPLACE FUNCTION "trellis"._try_fences(ids bigint[], mark boolean) RETURNS bigint[]
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE id bigint; rel regclass; got bigint[] := '{}';
BEGIN
  FOREACH id IN ARRAY coalesce(ids, '{}') LOOP
    rel := to_regclass(format('%I.%I', 'trellis_fence', 'd' || id));
    IF rel IS NULL THEN
      got := got || id;
      CONTINUE;
    END IF;
    BEGIN
      EXECUTE format('LOCK TABLE %s IN ROW SHARE MODE NOWAIT', rel);
      got := got || id;
    EXCEPTION WHEN lock_not_available THEN NULL;
    END;
  END LOOP;
  IF mark AND cardinality(got) > 0 THEN
    LOCK TABLE "trellis_fence".build_mark IN ROW SHARE MODE;
  END IF;
  RETURN got;
END $fn$;

CREATE OR REPLACE FUNCTION "trellis"._lifecycle_check(acting regrole, def_id bigint) RETURNS record
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE d record;
BEGIN
  PERFORM "trellis"._check_acting(acting);
  -- Ownership before the fence: a non-owner must not make anyone wait.
  -- owner_role never changes, so the unlocked read decides.
  IF EXISTS (SELECT 1 FROM "trellis"._definitions x WHERE x.id = def_id AND NOT pg_has_role(acting, x.owner_role, 'USAGE')) THEN
    RAISE EXCEPTION 'must be owner of transform %', (SELECT target_table FROM "trellis"._definitions WHERE id = def_id) USING ERRCODE = '42501',
      DETAIL = 'trellis: permission/NotOwner';
  END IF;
  PERFORM "trellis"._fence_definition(def_id);
  SELECT id, status, owner_role, target_table INTO d FROM "trellis"._definitions WHERE id = def_id FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'transform % does not exist', def_id USING ERRCODE = '42704',
      DETAIL = 'trellis: not_found/TransformNotFound';
  END IF;
  IF NOT pg_has_role(acting, d.owner_role, 'USAGE') THEN
    RAISE EXCEPTION 'must be owner of transform %', d.target_table USING ERRCODE = '42501',
      DETAIL = 'trellis: permission/NotOwner';
  END IF;
  RETURN d;
END $fn$;

-- The definition row of a transform, locked FOR UPDATE until the caller's
-- transaction ends, for its owner.
CREATE OR REPLACE FUNCTION "trellis"._lifecycle_lock(acting regrole, tschema text, tname text,
    OUT id bigint, OUT status text, OUT target_table text, OUT source_table text, OUT definition_sql text, OUT compiled jsonb)
RETURNS SETOF record
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE def_id bigint;
BEGIN
  SELECT d.id INTO def_id FROM "trellis"._definitions d WHERE d.target_table = format('%I.%I', tschema, tname);
  IF NOT FOUND THEN
    RETURN;
  END IF;
  PERFORM "trellis"._lifecycle_check(acting, def_id);
  RETURN QUERY SELECT d.id, d.status, d.target_table, d.source_table, d.definition_sql, d.compiled
    FROM "trellis"._definitions d WHERE d.id = def_id;
END $fn$;

-- PAUSE: freeze an applying definition and drop its build work.
CREATE OR REPLACE FUNCTION "trellis"._lifecycle_pause(acting regrole, def_id bigint) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE d record;
BEGIN
  SELECT * INTO d FROM "trellis"._lifecycle_check(acting, def_id) AS x(id bigint, status text, owner_role oid, target_table text);
  IF d.status IN ('paused', 'quarantined') THEN
    RETURN d.status;
  END IF;
  UPDATE "trellis"._definitions SET status = 'paused', version = version + 1,
    build_started_at = NULL, build_rows_done = NULL, build_rows_estimated = NULL,
    status_detail = nullif(coalesce(status_detail, '{}') - 'rebuild_reason', '{}')
  WHERE id = def_id;
  -- Skip tasks a chunk holds: it waits on the definition row we lock (a
  -- deadlock otherwise); they belong to a superseded build and are never run.
  DELETE FROM "trellis"._build_tasks WHERE id IN (SELECT id FROM "trellis"._build_tasks WHERE definition_id = def_id FOR UPDATE SKIP LOCKED);
  RETURN 'paused';
END $fn$;

-- RESUME (after the caller re-validated): back to waiting_to_backfill for a
-- rebuild, failure and build state cleared, columns re-bound at the next
-- staging pass, held keys released. Returns the number released.
CREATE OR REPLACE FUNCTION "trellis"._lifecycle_resume(acting regrole, def_id bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE d record; released bigint;
BEGIN
  SELECT * INTO d FROM "trellis"._lifecycle_check(acting, def_id) AS x(id bigint, status text, owner_role oid, target_table text);
  IF d.status NOT IN ('paused', 'quarantined') THEN
    RAISE EXCEPTION 'transform % is %, not paused', d.target_table, d.status USING ERRCODE = '55000',
      DETAIL = 'trellis: conflict/TransformNotPaused';
  END IF;
  UPDATE "trellis"._definitions SET status = 'waiting_to_backfill', version = version + 1,
    build_started_at = NULL, build_rows_done = NULL, build_rows_estimated = NULL,
    status_detail = coalesce(status_detail, '{}') - 'capture_failure' - 'halt' || jsonb_build_object('rebuild_reason', 'resume')
  WHERE id = def_id;
  -- Skip tasks a chunk holds: it waits on the definition row we lock (a
  -- deadlock otherwise); they belong to a superseded build and are never run.
  DELETE FROM "trellis"._build_tasks WHERE id IN (SELECT id FROM "trellis"._build_tasks WHERE definition_id = def_id FOR UPDATE SKIP LOCKED);
  UPDATE "trellis"._definition_reads SET bindings = NULL WHERE definition_id = def_id;
  WITH p AS (DELETE FROM "trellis"._poison WHERE definition_id = def_id RETURNING 1) SELECT count(*) INTO released FROM p;
  DELETE FROM "trellis"._key_deaths WHERE definition_id = def_id;
  RETURN released;
END $fn$;

-- request_backfill (surface §7.1; rel resolved through the caller's search_path): every applying transform reading the
-- table (or only only_target) goes back to waiting_to_backfill; the staging
-- worker rebuilds it (every source key re-derived, ledger keys swept) while
-- its target stays readable. Takes effect at the caller's COMMIT.
CREATE OR REPLACE FUNCTION "trellis"._request_backfill(acting regrole, rel oid, source_table text, only_target text) RETURNS text[]
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE canon text; canon_other text; d record; fid bigint; out text[] := '{}';
BEGIN
  PERFORM "trellis"._check_acting(acting);
  IF rel IS NULL THEN
    RAISE EXCEPTION 'relation "%" does not exist', source_table USING ERRCODE = '42P01',
      DETAIL = 'trellis: not_found/SourceTableNotFound';
  END IF;
  SELECT format('%I.%I', n.nspname, c.relname) INTO canon FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = rel;
  IF only_target IS NOT NULL AND NOT EXISTS (SELECT 1 FROM "trellis"._definitions x JOIN "trellis"._definition_reads r ON r.definition_id = x.id
      WHERE r.table_oid = rel AND x.compiled #>> '{spec,target,name}' = only_target) THEN
    RAISE EXCEPTION 'transform % does not read %', only_target, canon USING ERRCODE = '42704',
      DETAIL = 'trellis: not_found/TransformNotFound';
  END IF;
  -- Fences first, in id order, so no page overtakes the row locks below;
  -- whatever the status: one waiting_to_backfill now may be building by the
  -- time the loop below reads it.
  -- Ownership of every applying reader before any fence (see _lifecycle_check).
  SELECT x.target_table INTO canon_other FROM "trellis"._definitions x
  WHERE x.status IN ('backfilling', 'live') AND (only_target IS NULL OR x.compiled #>> '{spec,target,name}' = only_target)
    AND EXISTS (SELECT 1 FROM "trellis"._definition_reads r WHERE r.definition_id = x.id AND r.table_oid = rel)
    AND NOT pg_has_role(acting, x.owner_role, 'USAGE') LIMIT 1;
  IF canon_other IS NOT NULL THEN
    RAISE EXCEPTION 'must be owner of transform %', canon_other USING ERRCODE = '42501',
      DETAIL = 'trellis: permission/NotOwner';
  END IF;
  FOR fid IN SELECT x.id FROM "trellis"._definitions x
             WHERE (only_target IS NULL OR x.compiled #>> '{spec,target,name}' = only_target)
               AND EXISTS (SELECT 1 FROM "trellis"._definition_reads r WHERE r.definition_id = x.id AND r.table_oid = rel)
             ORDER BY x.id
  LOOP
    PERFORM "trellis"._fence_definition(fid);
  END LOOP;
  FOR d IN SELECT x.id, x.owner_role, x.target_table, x.compiled #>> '{spec,target,name}' AS bare
           FROM "trellis"._definitions x
           WHERE x.status IN ('backfilling', 'live') AND (only_target IS NULL OR x.compiled #>> '{spec,target,name}' = only_target)
             AND EXISTS (SELECT 1 FROM "trellis"._definition_reads r WHERE r.definition_id = x.id AND r.table_oid = rel)
           ORDER BY x.id FOR UPDATE OF x
  LOOP
    IF NOT pg_has_role(acting, d.owner_role, 'USAGE') THEN
      RAISE EXCEPTION 'must be owner of transform %', d.target_table USING ERRCODE = '42501',
        DETAIL = 'trellis: permission/NotOwner';
    END IF;
    UPDATE "trellis"._definitions SET status = 'waiting_to_backfill', version = version + 1,
      build_started_at = NULL, build_rows_done = NULL, build_rows_estimated = NULL,
      status_detail = coalesce(status_detail, '{}') || jsonb_build_object('rebuild_reason', 'request_backfill')
    WHERE id = d.id;
    DELETE FROM "trellis"._build_tasks WHERE id IN (SELECT id FROM "trellis"._build_tasks WHERE definition_id = d.id FOR UPDATE SKIP LOCKED);
    out := out || d.bare;
  END LOOP;
  IF cardinality(out) = 0 THEN
    RAISE EXCEPTION 'no transform reads %', canon USING ERRCODE = '55000',
      DETAIL = 'trellis: conflict/NoApplyingReader',
      HINT = 'only live or building transforms are rebuilt; RESUME TRANSFORM rebuilds a paused one';
  END IF;
  RETURN out;
END $fn$;

-- The surface's trellis.request_backfill(source_table, only_target) (package
-- virtualtables) resolves the table as the caller spells it and calls this.

REVOKE ALL ON FUNCTION "trellis"._lifecycle_check(regrole, bigint), "trellis"._fence_definition(bigint), "trellis"._fence_staging(bigint), "trellis"._try_fences(bigint[], boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION "trellis"._request_backfill(regrole, oid, text, text) TO PUBLIC;
GRANT EXECUTE ON FUNCTION "trellis"._lifecycle_lock(regrole, text, text), "trellis"._lifecycle_pause(regrole, bigint),
  "trellis"._lifecycle_resume(regrole, bigint) TO PUBLIC;

DROP FUNCTION IF EXISTS "trellis"._resume_column(regrole, bigint, text);

-- Who reads columns of a definition's target: per downstream definition,
-- each field whose formula reads one of cols (via_key false) and each
-- GROUP BY key that reads one (field = the key's name, via_key true).
-- cols NULL means every column.
CREATE OR REPLACE FUNCTION "trellis"._column_readers(def_id bigint, cols text[])
RETURNS TABLE (reader_id bigint, reader text, field text, col text, via_key boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT o.id, o.compiled #>> '{spec,target,name}', x.name, x.col, x.via_key
  FROM "trellis"._definitions d
  JOIN "trellis"._definition_reads r ON r.table_name = d.target_table AND r.definition_id <> d.id
  JOIN "trellis"._definitions o ON o.id = r.definition_id
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
CREATE OR REPLACE FUNCTION "trellis"._pause_cascade(def_id bigint, col text) RETURNS text[]
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE r record; fresh boolean; out text[] := '{}';
BEGIN
  FOR r IN SELECT DISTINCT x.reader_id, x.reader, f ->> 'name' AS field
           FROM "trellis"._column_readers(def_id, ARRAY[col]) x
           JOIN "trellis"._definitions o ON o.id = x.reader_id
           CROSS JOIN LATERAL jsonb_array_elements(o.compiled #> '{spec,fields}') f
           WHERE f ->> 'name' = x.field OR x.via_key
           ORDER BY 2, 3
  LOOP
    -- Before any lock of it: the reader's pages and tasks in flight, which
    -- read the pause set before this pause, end first, so none writes the
    -- field after the pause commits (a whole-transform pause does the same).
    PERFORM "trellis"._fence_definition(r.reader_id);
    INSERT INTO "trellis"._paused_columns (definition_id, column_name, local) VALUES (r.reader_id, r.field, false)
      ON CONFLICT (definition_id, column_name) DO NOTHING;
    fresh := FOUND;
    INSERT INTO "trellis"._column_pause_edges (up_definition_id, up_column, down_definition_id, down_column)
      VALUES (def_id, col, r.reader_id, r.field) ON CONFLICT DO NOTHING;
    IF fresh THEN
      out := out || (quote_ident(r.reader) || '.' || quote_ident(r.field)) || "trellis"._pause_cascade(r.reader_id, r.field);
    END IF;
  END LOOP;
  RETURN out;
END $fn$;

-- Schedules a field build: the definition is rebuilt (waiting_to_backfill,
-- then backfilling until done); an aggregate one also refreshes col.
CREATE OR REPLACE FUNCTION "trellis"._field_build(def_id bigint, col text) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  UPDATE "trellis"._definitions SET status = 'waiting_to_backfill', version = version + 1,
    build_started_at = NULL, build_rows_done = NULL, build_rows_estimated = NULL,
    status_detail = coalesce(status_detail, '{}') || jsonb_build_object('rebuild_reason', 'field_build')
      || CASE WHEN kind = 'aggregate' AND col IS NOT NULL THEN jsonb_build_object('refresh_columns',
           coalesce(status_detail -> 'refresh_columns', '[]') - col || to_jsonb(col)) ELSE '{}' END
  WHERE id = def_id AND status IN ('waiting_to_backfill', 'backfilling', 'live');
  IF FOUND THEN
    -- Skip tasks a chunk holds: it waits on the definition row we lock;
    -- they belong to a superseded build and are never run.
    DELETE FROM "trellis"._build_tasks WHERE id IN (SELECT id FROM "trellis"._build_tasks WHERE definition_id = def_id FOR UPDATE SKIP LOCKED);
  END IF;
END $fn$;

-- Unpauses field col of def_id (which has no paused upstream), schedules
-- its field build, and releases downstream fields left with no local pause
-- and no other paused upstream whose definitions are not frozen. Returns
-- the released downstream addresses.
CREATE OR REPLACE FUNCTION "trellis"._release_column(def_id bigint, col text) RETURNS text[]
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE downs bigint[]; dcols text[]; i int; dlocal boolean; dstat text; dname text; out text[] := '{}';
BEGIN
  SELECT coalesce(array_agg(e.down_definition_id ORDER BY e.down_definition_id, e.down_column), '{}'),
         coalesce(array_agg(e.down_column ORDER BY e.down_definition_id, e.down_column), '{}')
    INTO downs, dcols
  FROM "trellis"._column_pause_edges e WHERE e.up_definition_id = def_id AND e.up_column = col;
  -- Its edges go with the row (foreign keys).
  DELETE FROM "trellis"._paused_columns WHERE definition_id = def_id AND column_name = col;
  DELETE FROM "trellis"._column_failures WHERE definition_id = def_id AND column_name = col;
  PERFORM "trellis"._field_build(def_id, col);
  FOR i IN 1 .. coalesce(cardinality(downs), 0) LOOP
    PERFORM "trellis"._fence_definition(downs[i]); -- before any lock of it, as everywhere
    SELECT pc.local INTO dlocal FROM "trellis"._paused_columns pc
    WHERE pc.definition_id = downs[i] AND pc.column_name = dcols[i] FOR UPDATE;
    CONTINUE WHEN NOT FOUND OR dlocal;
    CONTINUE WHEN EXISTS (SELECT 1 FROM "trellis"._column_pause_edges e
                          WHERE e.down_definition_id = downs[i] AND e.down_column = dcols[i]);
    SELECT d.status, d.compiled #>> '{spec,target,name}' INTO dstat, dname FROM "trellis"._definitions d WHERE d.id = downs[i] FOR UPDATE;
    CONTINUE WHEN dstat IN ('paused', 'quarantined');
    out := out || (quote_ident(dname) || '.' || quote_ident(dcols[i])) || "trellis"._release_column(downs[i], dcols[i]);
  END LOOP;
  RETURN out;
END $fn$;

-- The paused fields of a transform, for its owner: local or not, and the
-- upstream fields (transform.field) holding each.
CREATE OR REPLACE FUNCTION "trellis"._paused_fields(acting regrole, def_id bigint)
RETURNS TABLE (column_name text, local boolean, upstream text[])
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  PERFORM "trellis"._lifecycle_check(acting, def_id);
  RETURN QUERY SELECT pc.column_name, pc.local,
      ARRAY(SELECT quote_ident(u.compiled #>> '{spec,target,name}') || '.' || quote_ident(e.up_column)
            FROM "trellis"._column_pause_edges e JOIN "trellis"._definitions u ON u.id = e.up_definition_id
            WHERE e.down_definition_id = pc.definition_id AND e.down_column = pc.column_name ORDER BY 1)
    FROM "trellis"._paused_columns pc WHERE pc.definition_id = def_id ORDER BY 1;
END $fn$;

-- PAUSE TRANSFORM t.c: was is 'local' (already paused: nothing changes),
-- 'cascade' (paused only by an upstream pause, now local too) or 'none'
-- (paused now, with the cascade it caused).
CREATE OR REPLACE FUNCTION "trellis"._lifecycle_pause_column(acting regrole, def_id bigint, col text,
    OUT was text, OUT cascaded text[])
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE d record; loc boolean;
BEGIN
  SELECT * INTO d FROM "trellis"._lifecycle_check(acting, def_id) AS x(id bigint, status text, owner_role oid, target_table text);
  IF NOT EXISTS (SELECT 1 FROM "trellis"._definitions x, jsonb_array_elements(x.compiled #> '{spec,fields}') f
                 WHERE x.id = def_id AND f ->> 'name' = col) THEN
    RAISE EXCEPTION 'column % of transform % is not a field', col, d.target_table USING ERRCODE = '42703',
      DETAIL = 'trellis: not_found/ColumnNotFound';
  END IF;
  cascaded := '{}';
  SELECT pc.local INTO loc FROM "trellis"._paused_columns pc WHERE pc.definition_id = def_id AND pc.column_name = col FOR UPDATE;
  IF FOUND THEN
    was := CASE WHEN loc THEN 'local' ELSE 'cascade' END;
    UPDATE "trellis"._paused_columns SET local = true WHERE definition_id = def_id AND column_name = col AND NOT local;
    RETURN;
  END IF;
  was := 'none';
  INSERT INTO "trellis"._paused_columns (definition_id, column_name, local) VALUES (def_id, col, true);
  UPDATE "trellis"._definitions SET version = version + 1 WHERE id = def_id;
  cascaded := "trellis"._pause_cascade(def_id, col);
END $fn$;

-- RESUME TRANSFORM t.c: returns every transform.field resumed, the named
-- one first.
CREATE OR REPLACE FUNCTION "trellis"._lifecycle_resume_column(acting regrole, def_id bigint, col text) RETURNS text[]
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE d record; up text;
BEGIN
  SELECT * INTO d FROM "trellis"._lifecycle_check(acting, def_id) AS x(id bigint, status text, owner_role oid, target_table text);
  PERFORM 1 FROM "trellis"._paused_columns WHERE definition_id = def_id AND column_name = col FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'column % of % is not paused', col, d.target_table USING ERRCODE = '55000',
      DETAIL = 'trellis: not_found/ColumnNotPaused';
  END IF;
  IF d.status <> 'live' THEN
    RAISE EXCEPTION 'transform % is %, not live', d.target_table, d.status USING ERRCODE = '55000',
      DETAIL = 'trellis: conflict/DefinitionNotLive';
  END IF;
  SELECT string_agg(quote_ident(u.compiled #>> '{spec,target,name}') || '.' || quote_ident(e.up_column), ', ' ORDER BY 1) INTO up
  FROM "trellis"._column_pause_edges e JOIN "trellis"._definitions u ON u.id = e.up_definition_id
  WHERE e.down_definition_id = def_id AND e.down_column = col;
  IF up IS NOT NULL THEN
    RAISE EXCEPTION 'column % of % is held by paused %', col, d.target_table, up USING ERRCODE = '55000',
      DETAIL = 'trellis: conflict/UpstreamColumnPaused';
  END IF;
  RETURN ARRAY[(SELECT quote_ident(x.compiled #>> '{spec,target,name}') FROM "trellis"._definitions x WHERE x.id = def_id) || '.' || quote_ident(col)]
    || "trellis"._release_column(def_id, col);
END $fn$;

-- A new definition reading fields paused upstream is born with the
-- dependent fields paused (grammar §4.1).
CREATE OR REPLACE FUNCTION "trellis"._pause_inherit(acting regrole, def_id bigint) RETURNS text[]
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE p record; out text[] := '{}';
BEGIN
  PERFORM "trellis"._lifecycle_check(acting, def_id);
  FOR p IN SELECT pc.definition_id, pc.column_name
           FROM "trellis"._definition_reads r JOIN "trellis"._definitions u ON u.target_table = r.table_name
           JOIN "trellis"._paused_columns pc ON pc.definition_id = u.id
           WHERE r.definition_id = def_id ORDER BY 1, 2
  LOOP
    out := out || "trellis"._pause_cascade(p.definition_id, p.column_name);
  END LOOP;
  RETURN out;
END $fn$;

REVOKE ALL ON FUNCTION "trellis"._column_readers(bigint, text[]), "trellis"._pause_cascade(bigint, text),
  "trellis"._field_build(bigint, text), "trellis"._release_column(bigint, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION "trellis"._paused_fields(regrole, bigint), "trellis"._lifecycle_pause_column(regrole, bigint, text),
  "trellis"._lifecycle_resume_column(regrole, bigint, text), "trellis"._pause_inherit(regrole, bigint) TO PUBLIC;

-- Lines "reader.field reads t.col" for every field or GROUP BY key of
-- another definition reading one of cols of def_id's target (all columns
-- when cols is NULL), for the target's owner.
CREATE OR REPLACE FUNCTION "trellis"._field_readers(acting regrole, def_id bigint, cols text[]) RETURNS text[]
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE bare text;
BEGIN
  PERFORM "trellis"._lifecycle_check(acting, def_id);
  SELECT compiled #>> '{spec,target,name}' INTO bare FROM "trellis"._definitions WHERE id = def_id;
  RETURN ARRAY(SELECT format('%s.%s reads %s.%s', x.reader, x.field, bare, x.col)
               FROM "trellis"._column_readers(def_id, cols) x)
      -- readers of no column (constant fields over the key) when all count
      || ARRAY(SELECT format('%s reads %s', o.compiled #>> '{spec,target,name}', bare)
               FROM "trellis"._definitions d JOIN "trellis"._definition_reads r ON r.table_name = d.target_table AND r.definition_id <> d.id
               JOIN "trellis"._definitions o ON o.id = r.definition_id
               WHERE d.id = def_id AND cols IS NULL
                 AND NOT EXISTS (SELECT 1 FROM "trellis"._column_readers(def_id, NULL) x WHERE x.reader_id = o.id)
               ORDER BY 1);
END $fn$;

-- Stores an altered definition: statement and compiled form, version + 1,
-- the columns it reads (bound now, as the caller sees the catalog), and a
-- rebuild when fields were added or changed. A dropped field's pause and
-- failure bookkeeping goes with it. statement NULL is a no-op that returns
-- the current version. joined_columns: a JOIN target's joined tables'
-- columns read ({table: [column, ...]}), bound again at the next pass.
DROP FUNCTION IF EXISTS "trellis"._lifecycle_alter(regrole, bigint, text, jsonb, jsonb, text[], text[]);
CREATE OR REPLACE FUNCTION "trellis"._lifecycle_alter(acting regrole, def_id bigint, statement text, new_compiled jsonb,
    read_columns jsonb, dropped text[], rebuilt text[], joined_columns jsonb DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE d record; v bigint; blockers text;
BEGIN
  SELECT * INTO d FROM "trellis"._lifecycle_check(acting, def_id) AS x(id bigint, status text, owner_role oid, target_table text);
  IF d.status IN ('paused', 'quarantined') THEN
    RAISE EXCEPTION 'transform % is %', d.target_table, d.status USING ERRCODE = '55000',
      DETAIL = 'trellis: conflict/TransformNotLive';
  END IF;
  IF statement IS NULL THEN
    RETURN (SELECT version FROM "trellis"._definitions WHERE id = def_id);
  END IF;
  IF (SELECT kind FROM "trellis"._definitions WHERE id = def_id) <> 'one_to_one' THEN
    RAISE EXCEPTION 'transform % has GROUP BY; only 1-1 transforms can be altered', d.target_table USING ERRCODE = '0A000',
      DETAIL = 'trellis: validation/UnsupportedAlter';
  END IF;
  SELECT string_agg(format('%s.%s reads %s', x.reader, x.field, x.col), '; ') INTO blockers
  FROM "trellis"._column_readers(def_id, dropped) x;
  IF blockers IS NOT NULL THEN
    RAISE EXCEPTION 'cannot drop fields of %: %', d.target_table, blockers USING ERRCODE = '2BP01',
      DETAIL = 'trellis: conflict/DependentsBlockDrop';
  END IF;
  UPDATE "trellis"._definitions SET definition_sql = statement, compiled = new_compiled, version = version + 1,
    verified = "trellis"._trusted_writer(),
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
    DELETE FROM "trellis"._build_tasks WHERE id IN (SELECT id FROM "trellis"._build_tasks WHERE definition_id = def_id FOR UPDATE SKIP LOCKED);
  END IF;
  UPDATE "trellis"._definition_reads r SET columns = read_columns, bindings = (
    SELECT coalesce(jsonb_agg(jsonb_build_object('name', c.name, 'attnum', a.attnum, 'typid', a.atttypid,
             'typmod', a.atttypmod, 'coll', a.attcollation, 'type', format_type(a.atttypid, a.atttypmod)) ORDER BY c.name), '[]')
    FROM (SELECT DISTINCT x AS name FROM jsonb_array_elements_text(read_columns ||
            coalesce((SELECT jsonb_agg(k -> 'name') FROM jsonb_array_elements(new_compiled -> 'key') k), '[]')) x) c
    LEFT JOIN pg_attribute a ON a.attrelid = r.table_oid AND a.attname = c.name AND a.attnum > 0 AND NOT a.attisdropped)
  WHERE r.definition_id = def_id AND r.role IN ('source', 'upstream_target');
  UPDATE "trellis"._definition_reads r SET columns = j.cols, bindings = NULL
  FROM jsonb_each(coalesce(joined_columns, '{}')) AS j(tbl, cols)
  WHERE r.definition_id = def_id AND r.role = 'to_one' AND r.table_name = j.tbl;
  DELETE FROM "trellis"._paused_columns WHERE definition_id = def_id AND column_name = ANY (dropped);
  DELETE FROM "trellis"._column_failures WHERE definition_id = def_id AND column_name = ANY (dropped);
  -- Failures and inherited pauses of a changed field were about its old
  -- formula; a local pause survives. Pauses upstream are inherited anew.
  DELETE FROM "trellis"._column_failures f WHERE f.definition_id = def_id AND f.column_name = ANY (rebuilt)
    AND NOT EXISTS (SELECT 1 FROM "trellis"._paused_columns pc WHERE pc.definition_id = def_id AND pc.column_name = f.column_name);
  DELETE FROM "trellis"._column_pause_edges WHERE down_definition_id = def_id AND down_column = ANY (rebuilt);
  DELETE FROM "trellis"._paused_columns WHERE definition_id = def_id AND column_name = ANY (rebuilt) AND NOT local;
  PERFORM "trellis"._pause_inherit(acting, def_id);
  RETURN v;
END $fn$;

-- ALTER TRANSFORM's change of the target's columns, as the workers' role
-- that owns it (D20): names and type oids/typmods, never SQL. Readers of a
-- dropped column block it, as in _lifecycle_alter.
CREATE OR REPLACE FUNCTION "trellis"._alter_target(acting regrole, def_id bigint, dropped text[], added jsonb) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE rel regclass; ddl text[] := '{}'; c jsonb; col text; blockers text;
BEGIN
  PERFORM "trellis"._lifecycle_check(acting, def_id);
  SELECT target_oid::regclass INTO rel FROM "trellis"._definitions WHERE id = def_id;
  SELECT string_agg(format('%s.%s reads %s', x.reader, x.field, x.col), '; ') INTO blockers
  FROM "trellis"._column_readers(def_id, dropped) x;
  IF blockers IS NOT NULL THEN
    RAISE EXCEPTION 'cannot drop fields of %: %', rel, blockers USING ERRCODE = '2BP01',
      DETAIL = 'trellis: conflict/DependentsBlockDrop';
  END IF;
  FOREACH col IN ARRAY coalesce(dropped, '{}') LOOP
    IF col LIKE '\_\_%' OR col = ANY (ARRAY(SELECT k ->> 'name' FROM "trellis"._definitions d, jsonb_array_elements(d.compiled -> 'key') k WHERE d.id = def_id)) THEN
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

GRANT EXECUTE ON FUNCTION "trellis"._alter_target(regrole, bigint, text[], jsonb), "trellis"._field_readers(regrole, bigint, text[]),
  "trellis"._lifecycle_alter(regrole, bigint, text, jsonb, jsonb, text[], text[], jsonb) TO PUBLIC;

-- Whether the current transaction has captured writes: the capture triggers
-- log them under the writer's top-level xid (engine §12.3), which is indexed.
CREATE OR REPLACE FUNCTION "trellis"._has_captured_writes() RETURNS boolean LANGUAGE sql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT pg_current_xact_id_if_assigned() IS NOT NULL
     AND EXISTS (SELECT 1 FROM "trellis"._change_log WHERE txid = pg_current_xact_id_if_assigned())
$fn$;

-- The session holding the staging lock, read as the workers' role, which
-- owns it, so its application_name is visible to every caller. Only a
-- backend of the workers' role counts: any role can take an advisory key
-- and set any application_name, but not log in as the workers.
CREATE OR REPLACE FUNCTION "trellis"._staging_holder(OUT pid int4, OUT application_name text, OUT backend_start timestamptz)
RETURNS SETOF record LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT l.pid, a.application_name, a.backend_start
  FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid AND a.usename = "trellis"._instance_worker_role()
  WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
    AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND ((l.classid::int8 << 32) | l.objid::int8) = (SELECT key FROM "trellis"._staging_key)
  LIMIT 1
$fn$;

-- Every definition's target, for the dump's all-or-nothing privilege check.
-- Table names are public in pg_class anyway; no definition text leaves here.
CREATE OR REPLACE FUNCTION "trellis"._definition_targets(OUT id int8, OUT target_table text, OUT target_oid oid)
RETURNS SETOF record LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT d.id, d.target_table, d.target_oid FROM "trellis"._definitions d ORDER BY d.id
$fn$;

CREATE OR REPLACE FUNCTION "trellis"._catalog_version() RETURNS int4 LANGUAGE sql STABLE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT format_version FROM "trellis"._instance
$fn$;

-- §6.5, the privileged part: runs as the workers' role. The acting role must
-- be one the session could become and must own the transform (as PAUSE).
CREATE OR REPLACE FUNCTION "trellis"._release_key(acting regrole, transform text, src regclass, key text) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET lock_timeout = '30s' AS $fn$
DECLARE
  def_id int8;
  target_oid oid;
  owner oid;
  tname text;
  o pg_lsn;
BEGIN
  IF acting IS NULL OR NOT pg_has_role(session_user, acting, 'MEMBER') THEN
    RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = format('permission denied to act as %s', acting),
      DETAIL = 'trellis: permission/MissingPrivilege';
  END IF;
  SELECT d.id, d.target_oid, d.owner_role INTO def_id, target_oid, owner
  FROM "trellis"._definitions d LEFT JOIN pg_class c ON c.oid = d.target_oid
  WHERE coalesce(c.relname::text, d.compiled #>> '{spec,target,name}') = _release_key.transform
  ORDER BY d.id LIMIT 1;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = '42704', MESSAGE = format('transform %s does not exist', _release_key.transform),
      DETAIL = 'trellis: not_found/TransformNotFound';
  END IF;
  -- The transform's owner (as PAUSE), not the target's: the workers' role
  -- owns every target (D20).
  IF NOT coalesce(pg_has_role(acting, owner, 'USAGE'), false) THEN
    RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = format('must be owner of transform %s', _release_key.transform),
      DETAIL = 'trellis: permission/NotOwner';
  END IF;
  SELECT format('%I.%I', n.nspname, c.relname) INTO tname
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = src;
  -- Waits (lock_timeout 30 s) for a drain page skipping the key.
  DELETE FROM "trellis"._poison p WHERE p.definition_id = def_id AND p.src_table = tname AND p.key = _release_key.key
  RETURNING p.origin_lsn INTO o;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = '42704',
      MESSAGE = format('key %L of %s is not held for %s', _release_key.key, coalesce(tname, src::text), _release_key.transform),
      DETAIL = 'trellis: not_found/KeyNotHeld';
  END IF;
  DELETE FROM "trellis"._key_deaths k WHERE k.definition_id = def_id AND k.src_table = tname AND k.key = _release_key.key;
  -- One re-derive of the key from its current row, carrying the least origin
  -- of the changes skipped while it was held (NULL: unknown, blocks every token).
  INSERT INTO "trellis"._change_log (src_table, key, op, definition_id, origin_lsn, hop)
  VALUES (tname, _release_key.key, 'rederive', def_id, o, 0);
  RAISE NOTICE '%', format('released key %s of %s for %s; it is re-derived from its current row',
    _release_key.key, tname, _release_key.transform);
END
$fn$;

-- §9.1, the privileged part: runs as the workers' role. The acting role
-- must be one the session could become, must be able to SELECT the target
-- and must own the transform (as release_key).
CREATE OR REPLACE FUNCTION "trellis"._self_check_start(acting regrole, target text, timeout_ms int8, mode text) RETURNS int8
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  def_id int8;
  t_oid oid;
  owner oid;
  job int8;
BEGIN
  IF acting IS NULL OR NOT pg_has_role(session_user, acting, 'MEMBER') THEN
    RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = format('permission denied to act as %s', acting),
      DETAIL = 'trellis: permission/MissingPrivilege';
  END IF;
  IF mode IS NULL OR mode NOT IN ('standard', 'strict') THEN
    RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('invalid self-check mode %L', mode),
      DETAIL = 'trellis: validation/BadArgument', HINT = 'use ''standard'' (safe under writes) or ''strict''';
  END IF;
  IF timeout_ms IS NULL OR timeout_ms < 0 THEN
    RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('timeout_ms must be zero or more, not %s', coalesce(timeout_ms::text, 'NULL')),
      DETAIL = 'trellis: validation/BadArgument';
  END IF;
  SELECT d.id, d.target_oid, d.owner_role INTO def_id, t_oid, owner
  FROM "trellis"._definitions d LEFT JOIN pg_class c ON c.oid = d.target_oid
  WHERE coalesce(c.relname::text, d.compiled #>> '{spec,target,name}') = _self_check_start.target
     OR d.target_table = _self_check_start.target
  ORDER BY d.id LIMIT 1;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = '42704', MESSAGE = format('transform %s does not exist', _self_check_start.target),
      DETAIL = 'trellis: not_found/TransformNotFound';
  END IF;
  IF NOT coalesce(has_table_privilege(acting, t_oid, 'SELECT'), false) THEN
    RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = format('permission denied for table %s', _self_check_start.target),
      DETAIL = 'trellis: permission/MissingPrivilege',
      HINT = format('GRANT SELECT ON %s TO %s;', _self_check_start.target, acting);
  END IF;
  -- The transform's owner (as PAUSE), not the target's: the workers' role
  -- owns every target (D20).
  IF NOT coalesce(pg_has_role(acting, owner, 'USAGE'), false) THEN
    RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = format('must be owner of transform %s', _self_check_start.target),
      DETAIL = 'trellis: permission/NotOwner';
  END IF;
  -- One job per target, serialized on the definition row, behind its fence
  -- as every lifecycle function (fence.go): the staging worker's steps on
  -- this row then skip it at once while the caller's transaction stays
  -- open, instead of waiting for it at every pass (D21).
  PERFORM "trellis"._fence_definition(def_id);
  PERFORM 1 FROM "trellis"._definitions d WHERE d.id = def_id FOR UPDATE;
  -- One open job per target: an open one is returned whatever was passed.
  SELECT j.id INTO job FROM "trellis"._self_checks j WHERE j.definition_id = def_id AND j.state IN ('queued', 'running');
  IF FOUND THEN
    RETURN job;
  END IF;
  DELETE FROM "trellis"._self_checks j WHERE j.definition_id = def_id;
  INSERT INTO "trellis"._self_checks (definition_id, mode, timeout_ms) VALUES (def_id, mode, timeout_ms) RETURNING id INTO job;
  PERFORM pg_notify('trellis' || '_wake', '');
  RETURN job;
END
$fn$;

GRANT EXECUTE ON FUNCTION "trellis"._has_captured_writes(), "trellis"._staging_holder(), "trellis"._definition_targets(),
  "trellis"._catalog_version(), "trellis"._release_key(regrole, text, regclass, text),
  "trellis"._self_check_start(regrole, text, bigint, text) TO PUBLIC;
-- read views
-- One row per definition. recorded_name is the target's name as defined
-- (still known when the table is gone); row_xmin is the inserting
-- transaction (status tells a definition of this session's open one).
CREATE OR REPLACE VIEW "trellis"._read_definitions AS
  SELECT d.id, d.target_oid, d.target_table, d.source_table, d.kind, d.status, d.status_detail,
         d.build_id, d.build_kind, d.build_started_at, d.build_rows_done, d.build_rows_estimated,
         d.compiled #>> '{spec,target,name}' AS recorded_name, d.owner_role, d.xmin AS row_xmin,
         d.version, d.created_at, d.definition_sql, d.verified
  FROM "trellis"._definitions d;

-- The tables each definition reads, by role (source, to_one, to_many,
-- upstream_target).
CREATE OR REPLACE VIEW "trellis"._read_definition_reads AS
  SELECT r.definition_id, r.table_name, r.table_oid, r.role FROM "trellis"._definition_reads r;

-- A build's tasks: its plan and its chunks.
CREATE OR REPLACE VIEW "trellis"._read_build_tasks AS
  SELECT t.id, t.build_id, t.kind, t.state, t.rows_done, t.attempts, t.last_error, t.last_sqlstate, t.next_attempt_at
  FROM "trellis"._build_tasks t;

-- The oldest failing drain page of the instance (no row while none fails)
-- and the source tables with changes in its batch.
CREATE OR REPLACE VIEW "trellis"._read_failing_page AS
  SELECT df.batch_seq, df.attempts, df.last_error, df.last_sqlstate, df.failed_since, df.failed_last,
         (SELECT coalesce(array_agg(DISTINCT c.src_table ORDER BY c.src_table), '{}')
          FROM "trellis"._change_log c
          WHERE pg_visible_in_snapshot(c.txid, df.snap)
            AND NOT pg_visible_in_snapshot(c.txid, (SELECT b.snap FROM "trellis"._batches b
              WHERE b.state = 'drained' AND b.seq < df.batch_seq ORDER BY b.seq DESC LIMIT 1))) AS tables
  FROM (
    SELECT b.batch_seq, b.attempts, b.last_error, b.last_sqlstate, b.failed_since, b.failed_last, ba.snap
    FROM "trellis"._batch_buckets b JOIN "trellis"._batches ba ON ba.seq = b.batch_seq
    WHERE b.last_error IS NOT NULL AND b.state <> 'done' AND ba.state <> 'drained'
    ORDER BY b.batch_seq, b.bucket LIMIT 1) df;

-- Every undrained bucket whose last page failed.
CREATE OR REPLACE VIEW "trellis"._read_failing_buckets AS
  SELECT b.batch_seq, b.bucket, b.attempts, b.last_error, b.last_sqlstate
  FROM "trellis"._batch_buckets b WHERE b.state = 'open' AND b.last_error IS NOT NULL;

-- Capture installs kept waiting for their table lock (capture.go).
CREATE OR REPLACE VIEW "trellis"._read_capture_waits AS
  SELECT w.table_name, w.operation, w.lock_mode, w.waiting_since, w.observed_at, w.blockers
  FROM "trellis"._capture_waits w;

-- Held (poisoned) keys.
CREATE OR REPLACE VIEW "trellis"._read_held_keys AS
  SELECT p.definition_id, p.src_table, p.key, p.error, p.sqlstate, p.poisoned_at FROM "trellis"._poison p;

-- Paused fields, by the operator, the column fuse (last_error set) or a
-- cascade (the edges below); local: paused on this definition itself.
CREATE OR REPLACE VIEW "trellis"._read_paused_columns AS
  SELECT pc.definition_id, pc.column_name, pc.paused_at, pc.last_error, pc.local FROM "trellis"._paused_columns pc;

CREATE OR REPLACE VIEW "trellis"._read_column_pause_edges AS
  SELECT e.up_definition_id, e.up_column, e.down_definition_id, e.down_column FROM "trellis"._column_pause_edges e;

-- The failing rows of columns the column fuse paused.
CREATE OR REPLACE VIEW "trellis"._read_column_failures AS
  SELECT f.definition_id, f.column_name, f.src_table, f.key, f.error, f.sqlstate, f.failed_at
  FROM "trellis"._column_failures f;

-- A transform's own share of a drain page that fails (D21).
CREATE OR REPLACE VIEW "trellis"._read_page_failures AS
  SELECT pf.definition_id, pf.error, pf.sqlstate, pf.since, pf.last_at, pf.attempts, pf.next_attempt_at
  FROM "trellis"._page_failures pf;

-- Captured tables and the xmins of their triggers at install.
CREATE OR REPLACE VIEW "trellis"._read_captured_tables AS
  SELECT c.table_name, c.table_oid, c.trigger_xmins FROM "trellis"._captured_tables c;

-- Self-check jobs and their divergences (engine/selfcheck).
CREATE OR REPLACE VIEW "trellis"._read_self_checks AS
  SELECT j.id, j.definition_id, j.mode, j.state, j.rows_compared, j.created_at, j.started_at, j.finished_at,
         j.claimed_by, j.error, j.outcome, j.not_live_status, j.truncated, j.checked_through, j.divergence_count
  FROM "trellis"._self_checks j;

CREATE OR REPLACE VIEW "trellis"._read_self_check_divergences AS
  SELECT v.job_id, v.ordinal, v.kind, v.key, v.column_name, v.persisted, v.recomputed, v.table_name, v.detail
  FROM "trellis"._self_check_divergences v;

-- Registered workers and their heartbeats.
CREATE OR REPLACE VIEW "trellis"._read_workers AS
  SELECT w.worker_id, w.proxy_id, w.kind, w.registered_at, w.last_seen FROM "trellis"._workers w;

-- A JOIN target's fan-out indexes missing now (joins spec §5 item 5): per
-- join edge, a btree index leading with the earlier item's join columns,
-- as define requires unless WITHOUT SOURCE INDEX. One jsonb array per
-- definition that has a gap: [{table, columns, role, create_index}].
CREATE OR REPLACE VIEW "trellis"._read_index_gaps AS
  SELECT d.id AS definition_id,
         jsonb_agg(jsonb_build_object('table', e.tbl, 'columns', e.cols, 'role', 'join',
           'create_index', format('CREATE INDEX ON %s (%s);', e.tbl,
             (SELECT string_agg(quote_ident(c), ', ') FROM jsonb_array_elements_text(e.cols) c))) ORDER BY e.n) AS gaps
  FROM "trellis"._definitions d
  CROSS JOIN LATERAL (
    SELECT j.n, j.j -> 'parent_columns' AS cols,
           CASE WHEN (j.j ->> 'parent')::int = 0 THEN d.source_table
                ELSE d.compiled #>> ARRAY['spec', 'joins', ((j.j ->> 'parent')::int - 1)::text, 'text'] END AS tbl
    FROM jsonb_array_elements(coalesce(d.compiled #> '{spec,joins}', '[]')) WITH ORDINALITY AS j(j, n)) e
  WHERE to_regclass(e.tbl) IS NOT NULL AND NOT EXISTS (
    SELECT 1 FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_am am ON am.oid = ic.relam
    WHERE i.indrelid = to_regclass(e.tbl) AND am.amname = 'btree' AND i.indpred IS NULL
      AND i.indnkeyatts >= jsonb_array_length(e.cols)
      AND (SELECT array_agg(a.attname::text ORDER BY a.attname)
           FROM unnest((i.indkey::int2[])[0:jsonb_array_length(e.cols) - 1]) AS k(attnum)
           JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum)
        = (SELECT array_agg(c ORDER BY c) FROM jsonb_array_elements_text(e.cols) c))
  GROUP BY d.id;

-- Pending changes per source table: keys of log rows (a row holds a
-- statement's keys) not yet covered by the drained prefix (batches drain
-- out of order, bulk.go), and the age of the oldest in seconds. Its cost
-- grows with the backlog.
CREATE OR REPLACE VIEW "trellis"._read_pending_changes AS
  WITH d AS (SELECT snap FROM "trellis"._batches WHERE seq = "trellis"._drained_prefix())
  SELECT c.src_table, sum(coalesce(cardinality(c.keys), 1))::int8 AS keys,
         extract(epoch FROM now() - min(c.staged_at))::float8 AS oldest_seconds
  FROM "trellis"._change_log c, d WHERE NOT pg_visible_in_snapshot(c.txid, d.snap) GROUP BY c.src_table;

-- Sealed batches (seq 0 is the catalog's bootstrap batch).
CREATE OR REPLACE VIEW "trellis"._read_batches AS
  SELECT b.seq, b.row_count, b.state FROM "trellis"._batches b;
