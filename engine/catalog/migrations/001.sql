-- 1: the catalog: the instance marker, definitions, the change log,
-- batches and their buckets, build tasks, workers.


CREATE TABLE {{S}}._instance (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  schema_name text NOT NULL, format_version int NOT NULL, target_schema text NOT NULL,
  worker_role name NOT NULL, created_at timestamptz NOT NULL DEFAULT now());

CREATE TABLE {{S}}._definitions (
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
CREATE SEQUENCE {{S}}._build_seq;

CREATE TABLE {{S}}._definition_reads (
  definition_id bigint NOT NULL REFERENCES {{S}}._definitions ON DELETE CASCADE,
  table_name text NOT NULL, table_oid oid NOT NULL,
  columns jsonb NOT NULL DEFAULT '[]',
  role text NOT NULL CHECK (role IN ('source','to_one','to_many','upstream_target')),
  PRIMARY KEY (definition_id, table_name, role));
CREATE INDEX ON {{S}}._definition_reads (table_name);

CREATE TABLE {{S}}._captured_tables (
  table_name text PRIMARY KEY, table_oid oid NOT NULL,
  key_columns jsonb NOT NULL, key_nullable boolean NOT NULL,
  enable_mode "char" NOT NULL, function_hash text NOT NULL,
  installed_at timestamptz);

CREATE SEQUENCE {{S}}._change_seq CACHE 32;

CREATE TABLE {{S}}._change_log (
  change_id bigint NOT NULL DEFAULT nextval('{{SL}}._change_seq'),
  txid xid8 NOT NULL DEFAULT pg_current_xact_id(),
  src_table text NOT NULL,
  key text,
  op text NOT NULL CHECK (op IN ('insert','update','delete','truncate','rederive','schema')),
  definition_id bigint,
  join_vals jsonb,
  origin_lsn pg_lsn,
  hop smallint NOT NULL DEFAULT 0, staged_at timestamptz NOT NULL DEFAULT now()
) WITH (fillfactor = 100, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 20000);
CREATE INDEX ON {{S}}._change_log (txid);
CREATE INDEX ON {{S}}._change_log (origin_lsn);

CREATE TABLE {{S}}._batches (
  seq bigint PRIMARY KEY, snap pg_snapshot NOT NULL,
  sealed_at timestamptz NOT NULL DEFAULT now(), row_count bigint NOT NULL,
  bucket_count smallint NOT NULL, has_truncate boolean NOT NULL,
  done_mask bigint NOT NULL DEFAULT 0,
  state text NOT NULL CHECK (state IN ('sealed','drained')), drained_at timestamptz);
INSERT INTO {{S}}._batches (seq, snap, row_count, bucket_count, has_truncate, done_mask, state, drained_at)
VALUES (0, '1:1:', 0, 1, false, 1, 'drained', now());

CREATE TABLE {{S}}._seal_lock (id boolean PRIMARY KEY DEFAULT true CHECK (id));
INSERT INTO {{S}}._seal_lock VALUES (true);

CREATE TABLE {{S}}._batch_buckets (
  batch_seq bigint NOT NULL REFERENCES {{S}}._batches ON DELETE CASCADE,
  bucket smallint NOT NULL,
  state text NOT NULL DEFAULT 'open' CHECK (state IN ('open','done')),
  after_table text, after_key text,
  pages int NOT NULL DEFAULT 0,
  attempts int NOT NULL DEFAULT 0, last_error text, last_sqlstate text,
  next_attempt_at timestamptz,
  PRIMARY KEY (batch_seq, bucket));

CREATE TABLE {{S}}._workers (
  worker_id text PRIMARY KEY, proxy_id text NOT NULL,
  kind text NOT NULL CHECK (kind IN ('staging','drain')),
  registered_at timestamptz NOT NULL DEFAULT now(), last_seen timestamptz NOT NULL);

CREATE TABLE {{S}}._build_tasks (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  definition_id bigint NOT NULL REFERENCES {{S}}._definitions ON DELETE CASCADE,
  build_id bigint NOT NULL,
  kind text NOT NULL CHECK (kind IN ('plan','chunk')), lo text, hi text,
  state text NOT NULL DEFAULT 'open' CHECK (state IN ('open','done')),
  attempts int NOT NULL DEFAULT 0, rows_done bigint, last_error text, next_attempt_at timestamptz);
CREATE INDEX ON {{S}}._build_tasks (build_id, state);

CREATE TABLE {{S}}._poison (
  definition_id bigint NOT NULL REFERENCES {{S}}._definitions ON DELETE CASCADE,
  src_table text NOT NULL, key text NOT NULL, error text NOT NULL, sqlstate text,
  origin_lsn pg_lsn,
  poisoned_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (definition_id, src_table, key));

CREATE FUNCTION {{S}}._converged(token pg_lsn) RETURNS boolean LANGUAGE sql STABLE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  WITH d AS (SELECT snap FROM {{S}}._batches WHERE state = 'drained' ORDER BY seq DESC LIMIT 1)
  SELECT NOT EXISTS (SELECT 1 FROM {{S}}._change_log c, d
                     WHERE (c.origin_lsn IS NULL OR c.origin_lsn <= token)
                       AND NOT pg_visible_in_snapshot(c.txid, d.snap))
     AND NOT EXISTS (SELECT 1 FROM {{S}}._poison p
                     WHERE p.origin_lsn IS NULL OR p.origin_lsn <= token);
$fn$;
