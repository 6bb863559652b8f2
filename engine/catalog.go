package engine

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// formatVersion is the newest catalog format this build knows.
const formatVersion = 22

// migrations[i] brings the catalog from version i to i+1. {{S}} is the quoted
// catalog schema. Each runs in the migrating transaction.
var migrations = []string{
	`
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
`,
	// 2: quarantine (§12.12): deaths per (definition, table, key); build
	// tasks record their SQLSTATE.
	`
CREATE TABLE {{S}}._key_deaths (
  definition_id bigint NOT NULL REFERENCES {{S}}._definitions ON DELETE CASCADE,
  src_table text NOT NULL, key text NOT NULL,
  deaths int NOT NULL DEFAULT 0, last_error text, last_sqlstate text,
  last_failed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (definition_id, src_table, key));
CREATE INDEX ON {{S}}._key_deaths (src_table, key);
CREATE INDEX ON {{S}}._poison (src_table, key);
ALTER TABLE {{S}}._build_tasks ADD COLUMN last_sqlstate text;
`,
	// 3: capture health (§12.9): the columns each read is bound to, the
	// trigger xmins of an install; rebuild sweeps (RESUME, repairs).
	`
ALTER TABLE {{S}}._definition_reads ADD COLUMN bindings jsonb;
ALTER TABLE {{S}}._captured_tables ADD COLUMN trigger_xmins jsonb, ADD COLUMN relfilenode oid;
ALTER TABLE {{S}}._build_tasks DROP CONSTRAINT _build_tasks_kind_check,
  ADD CONSTRAINT _build_tasks_kind_check CHECK (kind IN ('plan','chunk','sweep'));
`,
	// 4: the column fuse (§12.12, surface §6.1): failing rows per field of a
	// 1-1 definition, and the columns paused by it.
	`
CREATE TABLE {{S}}._column_failures (
  definition_id bigint NOT NULL REFERENCES {{S}}._definitions ON DELETE CASCADE,
  column_name text NOT NULL, src_table text NOT NULL, key text NOT NULL,
  error text NOT NULL, sqlstate text, failed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (definition_id, column_name, src_table, key));
CREATE TABLE {{S}}._paused_columns (
  definition_id bigint NOT NULL REFERENCES {{S}}._definitions ON DELETE CASCADE,
  column_name text NOT NULL, paused_at timestamptz NOT NULL DEFAULT now(),
  last_error text, sqlstate text, cascaded_from text[] NOT NULL DEFAULT '{}',
  PRIMARY KEY (definition_id, column_name));
`,
	// 5: per-field pause state (grammar §4.3, D18). A paused field is local
	// (PAUSE t.c, the column fuse) and/or held by upstream fields it reads,
	// one edge per upstream->downstream pair; the edges replace the
	// cascaded_from array (the surface derives it). A 'refresh' build task
	// rewrites resumed aggregate columns from their accumulators.
	`
ALTER TABLE {{S}}._paused_columns ADD COLUMN local boolean NOT NULL DEFAULT true;
ALTER TABLE {{S}}._paused_columns DROP COLUMN cascaded_from CASCADE;
CREATE TABLE {{S}}._column_pause_edges (
  up_definition_id bigint NOT NULL, up_column text NOT NULL,
  down_definition_id bigint NOT NULL, down_column text NOT NULL,
  PRIMARY KEY (up_definition_id, up_column, down_definition_id, down_column),
  FOREIGN KEY (up_definition_id, up_column) REFERENCES {{S}}._paused_columns ON DELETE CASCADE,
  FOREIGN KEY (down_definition_id, down_column) REFERENCES {{S}}._paused_columns ON DELETE CASCADE);
CREATE INDEX ON {{S}}._column_pause_edges (down_definition_id, down_column);
ALTER TABLE {{S}}._build_tasks DROP CONSTRAINT _build_tasks_kind_check,
  ADD CONSTRAINT _build_tasks_kind_check CHECK (kind IN ('plan','chunk','sweep','refresh'));
`,
	// 6: capture writes one log row per statement and table, its changed
	// keys in an array (B2: a row and two index entries per changed row
	// cost the writer about three times its own write). key stays for
	// single-key rows (rederive) and markers. A big array is compressed
	// and kept out of line (TOAST): ~4 KB of WAL for 1,000 bigint keys.
	`
ALTER TABLE {{S}}._change_log ADD COLUMN keys text[];
`,
	// 7: keys a page skipped for a definition a client transaction holds
	// locked (§12.8 "Locks held by a client transaction"): counted by
	// convergence like held keys until the staging worker stages them
	// again (the lock ended with the definition applying) or drops them
	// (paused, rebuilding or dropped: the rebuild covers them). whole: the
	// page also truncated the table, so the definition is rebuilt. No
	// foreign key: its check would share-lock the very definition row the
	// client holds; the staging worker deletes a dropped definition's rows.
	`
CREATE TABLE {{S}}._deferred (
  definition_id bigint NOT NULL,
  src_table text NOT NULL, key text NOT NULL, whole boolean NOT NULL DEFAULT false,
  origin_lsn pg_lsn, hop smallint NOT NULL DEFAULT 0, deferred_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (definition_id, src_table, key));
CREATE OR REPLACE FUNCTION {{S}}._converged(token pg_lsn) RETURNS boolean LANGUAGE sql STABLE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  WITH d AS (SELECT snap FROM {{S}}._batches WHERE state = 'drained' ORDER BY seq DESC LIMIT 1)
  SELECT NOT EXISTS (SELECT 1 FROM {{S}}._change_log c, d
                     WHERE (c.origin_lsn IS NULL OR c.origin_lsn <= token)
                       AND NOT pg_visible_in_snapshot(c.txid, d.snap))
     AND NOT EXISTS (SELECT 1 FROM {{S}}._poison p
                     WHERE p.origin_lsn IS NULL OR p.origin_lsn <= token)
     AND NOT EXISTS (SELECT 1 FROM {{S}}._deferred x
                     WHERE x.origin_lsn IS NULL OR x.origin_lsn <= token);
$fn$;
`,
	// 8: a fresh aggregate build's last task writes every group row once
	// from the ledger (build.go groupsStep); its chunks write entries only.
	`
ALTER TABLE {{S}}._build_tasks DROP CONSTRAINT _build_tasks_kind_check,
  ADD CONSTRAINT _build_tasks_kind_check CHECK (kind IN ('plan','chunk','sweep','refresh','groups'));
`,
	// 9: the trash of DROP TRANSFORM (privileges.go _drop_transform): a
	// dropped transform's target and ledger are moved into a schema of
	// their own, owned by the workers' role, which the staging worker
	// drops after the statement's COMMIT (trash.go).
	`
CREATE TABLE {{S}}._trash (
  schema_name name PRIMARY KEY, dropped_at timestamptz NOT NULL DEFAULT now(),
  attempts int NOT NULL DEFAULT 0, last_error text, next_attempt_at timestamptz);
`,
	// 10: the log's op CHECK goes (B2 single-row write tax). PostgreSQL
	// re-reads a CHECK constraint's expression from its stored text on every
	// INSERT statement: that cost a capture trigger's one-row INSERT about
	// three quarters of what the application's own single-row INSERT costs
	// in all (54 k against 75 k instructions). Only the engine writes op,
	// from constants in its own SQL.
	`
ALTER TABLE {{S}}._change_log DROP CONSTRAINT IF EXISTS _change_log_op_check;
`,
	// 11: each process records the catalog format it runs, so the staging
	// worker starts a heap build (build.go) only when no live process is
	// older: an older drain worker would write the ledger of a definition
	// whose build keeps pages off it, and its ledger has no key index then.
	// A heap build's 'index' task builds that index beside its groups task.
	`
ALTER TABLE {{S}}._workers ADD COLUMN format int NOT NULL DEFAULT 0;
ALTER TABLE {{S}}._build_tasks DROP CONSTRAINT _build_tasks_kind_check,
  ADD CONSTRAINT _build_tasks_kind_check CHECK (kind IN ('plan','chunk','sweep','refresh','groups','index'));
`,
	// 12-15: the trust boundary (D20, D21), one slot per mechanism so the
	// branches that build them merge without renumbering: 12 ownership and
	// untrusted catalog rows, 13 per-definition failure isolation, 14 locks
	// no other role can take, 15 the workers' execution environment. An
	// empty slot is a no-op.
	//
	// 12: targets and ledgers made before D20 were the defining role's; they
	// become the workers' role's, the owner keeping SELECT WITH GRANT OPTION.
	// A table the workers' role may not take over (it is neither superuser
	// nor a member of the owner) stays as it is and checkTamper pauses its
	// transform with a capture_failure saying so.
	`
DO $m$ DECLARE r record; w name := (SELECT worker_role FROM {{S}}._instance);
BEGIN
  FOR r IN SELECT c.oid::regclass AS rel, d.owner_role::regrole AS owner FROM {{S}}._definitions d
           JOIN pg_class c ON c.oid IN (d.target_oid, d.ledger_oid) WHERE c.relowner <> (SELECT oid FROM pg_roles WHERE rolname = w) LOOP
    BEGIN
      EXECUTE format('ALTER TABLE %s OWNER TO %I', r.rel, w);
      EXECUTE format('GRANT SELECT ON %s TO %s WITH GRANT OPTION', r.rel, r.owner);
    EXCEPTION WHEN insufficient_privilege THEN
      RAISE WARNING 'trellis: % stays owned by %; its transform pauses', r.rel, r.owner;
    END;
  END LOOP;
END $m$;
`,
	// 13: per-definition failure isolation (D21, drain.go applyShare): the
	// definition whose share of a page failed, held (its keys deferred)
	// until next_attempt_at; paused after pageFailuresToPause attempts. No
	// foreign key, as _deferred. _converged with a viewer counts only the
	// held and deferred keys of transforms the viewer can read.
	`
CREATE TABLE {{S}}._page_failures (
  definition_id bigint PRIMARY KEY,
  attempts int NOT NULL DEFAULT 0, error text, sqlstate text,
  since timestamptz NOT NULL DEFAULT now(), last_at timestamptz NOT NULL DEFAULT now(),
  next_attempt_at timestamptz);
CREATE FUNCTION {{S}}._converged(token pg_lsn, viewer name) RETURNS boolean LANGUAGE sql STABLE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  WITH d AS (SELECT snap FROM {{S}}._batches WHERE state = 'drained' ORDER BY seq DESC LIMIT 1)
  SELECT NOT EXISTS (SELECT 1 FROM {{S}}._change_log c, d
                     WHERE (c.origin_lsn IS NULL OR c.origin_lsn <= token)
                       AND NOT pg_visible_in_snapshot(c.txid, d.snap))
     AND NOT EXISTS (SELECT 1 FROM {{S}}._poison p
                     WHERE (p.origin_lsn IS NULL OR p.origin_lsn <= token)
                       AND (viewer IS NULL OR EXISTS (SELECT 1 FROM {{S}}._definitions v WHERE v.id = p.definition_id
                            AND has_table_privilege(viewer, v.target_oid, 'SELECT'))))
     AND NOT EXISTS (SELECT 1 FROM {{S}}._deferred x
                     WHERE (x.origin_lsn IS NULL OR x.origin_lsn <= token)
                       AND (viewer IS NULL OR EXISTS (SELECT 1 FROM {{S}}._definitions v WHERE v.id = x.definition_id
                            AND has_table_privilege(viewer, v.target_oid, 'SELECT'))));
$fn$;
`,
	`SELECT 1;`,
	`SELECT 1;`,
	// 16: self-check jobs (selfcheck.go, surface §9): one row per job, its
	// cursor and claim saved page by page, and its divergences. At most one
	// queued or running job per definition.
	selfCheckMigration,
	// 17: whether the workers verified a definition's row against its
	// statement (verify.go, D21). Rows of earlier formats are verified
	// again: a row crafted before this format must not stay trusted.
	`ALTER TABLE {{S}}._definitions ADD COLUMN verified boolean NOT NULL DEFAULT false;`,
	// 18: the staging singleton's advisory key, random and readable by the
	// workers' role only (staging.go). A key derived from the schema name
	// could be computed and taken by any role before a staging worker.
	`CREATE TABLE {{S}}._staging_key (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  key bigint NOT NULL, rotations bigint NOT NULL DEFAULT 0);
INSERT INTO {{S}}._staging_key (key) VALUES (('x' || substr(md5(gen_random_uuid()::text), 1, 16))::bit(64)::int8);`,
	// 19: the definition fence as relation locks (fence.go): one empty view
	// per definition and the build mark, in a schema without PUBLIC usage,
	// so no other role can name, take or queue for them.
	`CREATE SCHEMA {{SF}};
REVOKE ALL ON SCHEMA {{SF}} FROM PUBLIC;
CREATE VIEW {{SF}}.build_mark AS SELECT;
DO $m$ DECLARE r record;
BEGIN
  FOR r IN SELECT id FROM {{S}}._definitions LOOP
    EXECUTE format('CREATE VIEW %I.%I AS SELECT', {{SFN}}, 'd' || r.id);
  END LOOP;
END $m$;`,
	// 20: what issue 17's status and metrics read. origin_at: the original
	// writer's transaction start of a chained change (NULL for a writer's
	// own change, whose staged_at it is), for the end-to-end latency of a
	// chain. _capture_waits: a capture install that keeps timing out on its
	// table lock, with who holds it (status.capture_wait). table_name of a
	// held share: the table whose page failed (definitions.halt).
	`
ALTER TABLE {{S}}._change_log ADD COLUMN origin_at timestamptz;
CREATE TABLE {{S}}._capture_waits (
  table_name text PRIMARY KEY,
  operation text NOT NULL CHECK (operation IN ('install','reinstall','uninstall')),
  lock_mode text NOT NULL, waiting_since timestamptz NOT NULL DEFAULT now(),
  observed_at timestamptz NOT NULL DEFAULT now(), blockers text[] NOT NULL DEFAULT '{}');
ALTER TABLE {{S}}._page_failures ADD COLUMN table_name text;
`,
	// 21: a large bucket's distinct keys, written once by its first page
	// and read by range by every page after it (bulk.go, issue 18).
	`
CREATE TABLE {{S}}._batch_keys (
  batch_seq bigint NOT NULL, bucket smallint NOT NULL,
  src_table text COLLATE "C" NOT NULL, key text COLLATE "C" NOT NULL,
  unknown_origin boolean NOT NULL, origin_lsn pg_lsn, hop smallint NOT NULL,
  staged_at timestamptz NOT NULL, origin_at timestamptz NOT NULL,
  PRIMARY KEY (batch_seq, bucket, src_table, key))
  WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 20000);
ALTER TABLE {{S}}._batch_buckets ADD COLUMN keyed boolean NOT NULL DEFAULT false;
`,
	// 22: batches drain out of order (bulk.go): convergence reads the
	// drained prefix, not the newest drained batch.
	`
CREATE OR REPLACE FUNCTION {{S}}._converged(token pg_lsn, viewer name) RETURNS boolean LANGUAGE sql STABLE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  WITH d AS (SELECT snap FROM {{S}}._batches WHERE state = 'drained'
    AND seq < coalesce((SELECT min(u.seq) FROM {{S}}._batches u WHERE u.state <> 'drained'), 9223372036854775807)
    ORDER BY seq DESC LIMIT 1)
  SELECT NOT EXISTS (SELECT 1 FROM {{S}}._change_log c, d
                     WHERE (c.origin_lsn IS NULL OR c.origin_lsn <= token)
                       AND NOT pg_visible_in_snapshot(c.txid, d.snap))
     AND NOT EXISTS (SELECT 1 FROM {{S}}._poison p
                     WHERE (p.origin_lsn IS NULL OR p.origin_lsn <= token)
                       AND (viewer IS NULL OR EXISTS (SELECT 1 FROM {{S}}._definitions v WHERE v.id = p.definition_id
                            AND has_table_privilege(viewer, v.target_oid, 'SELECT'))))
     AND NOT EXISTS (SELECT 1 FROM {{S}}._deferred x
                     WHERE (x.origin_lsn IS NULL OR x.origin_lsn <= token)
                       AND (viewer IS NULL OR EXISTS (SELECT 1 FROM {{S}}._definitions v WHERE v.id = x.definition_id
                            AND has_table_privilege(viewer, v.target_oid, 'SELECT'))));
$fn$;
`,
}

func (e *Engine) renderCatalogSQL(s string) string {
	s = strings.ReplaceAll(s, "{{SL}}", strings.ReplaceAll(ident(e.cfg.Schema), "'", "''"))
	s = strings.ReplaceAll(s, "{{SFL}}", strings.ReplaceAll(ident(e.fenceSchema()), "'", "''"))
	s = strings.ReplaceAll(s, "{{SFN}}", lit(e.fenceSchema()))
	s = strings.ReplaceAll(s, "{{SF}}", ident(e.fenceSchema()))
	return strings.ReplaceAll(s, "{{S}}", ident(e.cfg.Schema))
}

// lockKey derives a 64-bit advisory lock key from a name.
func lockKey(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64())
}

func catalogErr(format string, args ...any) *pgerr.Error {
	return pgerr.Newf(pgerr.ObjectNotInPrerequisiteState, format, args...).WithClass("conflict", "CatalogSchemaRefused")
}

// Migrate creates or upgrades the instance's catalog schema. It is
// idempotent and safe to run from several processes at once (it serializes
// on a lock of the catalog, locks.go).
func (e *Engine) Migrate(ctx context.Context) error {
	if e.cfg.Schema == "public" || e.cfg.Schema == "pg_catalog" || strings.HasPrefix(e.cfg.Schema, "pg_") {
		return catalogErr("schema %q cannot be a Trellis catalog schema", e.cfg.Schema).WithHint("choose a dedicated schema, e.g. trellis")
	}
	if e.cfg.Schema == e.cfg.TargetSchema {
		return catalogErr("the catalog schema %q cannot also be the target schema", e.cfg.Schema)
	}
	tx, err := e.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if err := e.migrateLock(ctx, tx); err != nil {
		return err
	}
	others, err := e.otherInstances(ctx, tx)
	if err != nil {
		return err
	}
	for _, o := range others {
		if o[1] == e.cfg.Schema {
			return catalogErr("schema %q is the target schema of the Trellis instance in %q", e.cfg.Schema, o[0])
		}
		if o[0] == e.cfg.TargetSchema {
			return catalogErr("target schema %q is another Trellis instance's catalog", e.cfg.TargetSchema)
		}
	}
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", e.cfg.Schema).Scan(&exists); err != nil {
		return err
	}
	version := 0
	if exists {
		var marker, objects int
		if err := tx.QueryRow(ctx, `
			SELECT count(*) FILTER (WHERE c.relname = '_instance'), count(*)
			FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1`,
			e.cfg.Schema).Scan(&marker, &objects); err != nil {
			return err
		}
		if marker == 0 && objects > 0 {
			return catalogErr("schema %q holds objects but no Trellis instance marker", e.cfg.Schema).
				WithHint("use an empty or new schema for the Trellis catalog")
		}
		if marker > 0 {
			var name string
			if err := tx.QueryRow(ctx, fmt.Sprintf("SELECT schema_name, format_version FROM %s._instance", ident(e.cfg.Schema))).Scan(&name, &version); err != nil {
				return err
			}
			if name != e.cfg.Schema {
				return catalogErr("schema %q carries the marker of Trellis instance %q", e.cfg.Schema, name)
			}
			if version > formatVersion {
				return catalogErr("catalog %q has format %d, newer than this build's %d", e.cfg.Schema, version, formatVersion).
					WithHint("upgrade trellis-proxy")
			}
		}
	} else if _, err := tx.Exec(ctx, "CREATE SCHEMA "+ident(e.cfg.Schema)); err != nil {
		return err
	}
	if version == formatVersion {
		if _, err := tx.Exec(ctx, e.renderCatalogSQL(catalogFunctions())); err != nil {
			return fmt.Errorf("catalog functions: %w", err)
		}
		return tx.Commit(ctx)
	}
	for v := version; v < formatVersion; v++ {
		if _, err := tx.Exec(ctx, e.renderCatalogSQL(migrations[v])); err != nil {
			return fmt.Errorf("catalog migration %d: %w", v+1, err)
		}
	}
	if version == 0 {
		_, err = tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s._instance (schema_name, format_version, target_schema, worker_role)
			VALUES ($1, $2, $3, current_user)`, ident(e.cfg.Schema)), e.cfg.Schema, formatVersion, e.cfg.TargetSchema)
	} else {
		_, err = tx.Exec(ctx, fmt.Sprintf(`UPDATE %s._instance SET format_version = $1`, ident(e.cfg.Schema)), formatVersion)
	}
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, e.renderCatalogSQL(catalogFunctions())); err != nil {
		return fmt.Errorf("catalog functions: %w", err)
	}
	return tx.Commit(ctx)
}

// otherInstances lists (catalog schema, target schema) of other instances
// whose marker this role can read.
func (e *Engine) otherInstances(ctx context.Context, tx pgx.Tx) ([][2]string, error) {
	rows, err := tx.Query(ctx, `
		SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relname = '_instance' AND c.relkind = 'r' AND n.nspname <> $1
		  AND has_table_privilege(c.oid, 'SELECT')
		  AND (SELECT count(*) FROM pg_attribute a WHERE a.attrelid = c.oid AND NOT a.attisdropped
		       AND a.attname IN ('schema_name', 'target_schema')) = 2`, e.cfg.Schema)
	if err != nil {
		return nil, err
	}
	schemas, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	var out [][2]string
	for _, s := range schemas {
		var tgt string
		err := tx.QueryRow(ctx, fmt.Sprintf("SELECT target_schema FROM %s._instance WHERE schema_name = $1", ident(s)), s).Scan(&tgt)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, [2]string{s, tgt})
	}
	return out, nil
}
