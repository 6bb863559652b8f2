-- The read views: what code outside the engine may read of the catalog's
-- storage (issue 15). The SQL surface (package virtualtables) builds its
-- views on these, never on the storage tables, so the engine can reshape
-- its tables and keep these columns; Migrate (re)creates them whenever
-- this script changed (engine/catalog/migrate.go), with CREATE OR REPLACE
-- VIEW, which keeps the surface's views that depend on them. A change that
-- drops, renames or retypes a column starts with its own DROP VIEW ...
-- CASCADE (the proxy's next Install recreates the surface), and a
-- migration that must alter a column read here drops the view first.
--
-- They are views, not SECURITY DEFINER functions, on purpose: a view reads
-- its relations with its owner's rights (the workers' role owns these and
-- the surface's views) while has_table_privilege and pg_has_role still
-- answer for the reader, so the surface filters per target as before and
-- the planner sees through to the tables. Their names start with an
-- underscore: closed to PUBLIC like storage (virtualtables Install).


-- One row per definition. recorded_name is the target's name as defined
-- (still known when the table is gone); row_xmin is the inserting
-- transaction (status tells a definition of this session's open one).
CREATE OR REPLACE VIEW {{S}}._read_definitions AS
  SELECT d.id, d.target_oid, d.target_table, d.source_table, d.kind, d.status, d.status_detail,
         d.build_id, d.build_kind, d.build_started_at, d.build_rows_done, d.build_rows_estimated,
         d.compiled #>> '{spec,target,name}' AS recorded_name, d.owner_role, d.xmin AS row_xmin,
         d.version, d.created_at, d.definition_sql, d.verified
  FROM {{S}}._definitions d;

-- The tables each definition reads, by role (source, to_one, to_many,
-- upstream_target).
CREATE OR REPLACE VIEW {{S}}._read_definition_reads AS
  SELECT r.definition_id, r.table_name, r.table_oid, r.role FROM {{S}}._definition_reads r;

-- A build's tasks: its plan and its chunks.
CREATE OR REPLACE VIEW {{S}}._read_build_tasks AS
  SELECT t.id, t.build_id, t.kind, t.state, t.rows_done, t.attempts, t.last_error, t.last_sqlstate, t.next_attempt_at
  FROM {{S}}._build_tasks t;

-- The oldest failing drain page of the instance (no row while none fails)
-- and the source tables with changes in its batch.
CREATE OR REPLACE VIEW {{S}}._read_failing_page AS
  SELECT df.batch_seq, df.attempts, df.last_error, df.last_sqlstate, df.failed_since, df.failed_last,
         (SELECT coalesce(array_agg(DISTINCT c.src_table ORDER BY c.src_table), '{}')
          FROM {{S}}._change_log c
          WHERE pg_visible_in_snapshot(c.txid, df.snap)
            AND NOT pg_visible_in_snapshot(c.txid, (SELECT b.snap FROM {{S}}._batches b
              WHERE b.state = 'drained' AND b.seq < df.batch_seq ORDER BY b.seq DESC LIMIT 1))) AS tables
  FROM (
    SELECT b.batch_seq, b.attempts, b.last_error, b.last_sqlstate, b.failed_since, b.failed_last, ba.snap
    FROM {{S}}._batch_buckets b JOIN {{S}}._batches ba ON ba.seq = b.batch_seq
    WHERE b.last_error IS NOT NULL AND b.state <> 'done' AND ba.state <> 'drained'
    ORDER BY b.batch_seq, b.bucket LIMIT 1) df;

-- Every undrained bucket whose last page failed.
CREATE OR REPLACE VIEW {{S}}._read_failing_buckets AS
  SELECT b.batch_seq, b.bucket, b.attempts, b.last_error, b.last_sqlstate
  FROM {{S}}._batch_buckets b WHERE b.state = 'open' AND b.last_error IS NOT NULL;

-- Capture installs kept waiting for their table lock (capture.go).
CREATE OR REPLACE VIEW {{S}}._read_capture_waits AS
  SELECT w.table_name, w.operation, w.lock_mode, w.waiting_since, w.observed_at, w.blockers
  FROM {{S}}._capture_waits w;

-- Held (poisoned) keys.
CREATE OR REPLACE VIEW {{S}}._read_held_keys AS
  SELECT p.definition_id, p.src_table, p.key, p.error, p.sqlstate, p.poisoned_at FROM {{S}}._poison p;

-- Paused fields, by the operator, the column fuse (last_error set) or a
-- cascade (the edges below); local: paused on this definition itself.
CREATE OR REPLACE VIEW {{S}}._read_paused_columns AS
  SELECT pc.definition_id, pc.column_name, pc.paused_at, pc.last_error, pc.local FROM {{S}}._paused_columns pc;

CREATE OR REPLACE VIEW {{S}}._read_column_pause_edges AS
  SELECT e.up_definition_id, e.up_column, e.down_definition_id, e.down_column FROM {{S}}._column_pause_edges e;

-- The failing rows of columns the column fuse paused.
CREATE OR REPLACE VIEW {{S}}._read_column_failures AS
  SELECT f.definition_id, f.column_name, f.src_table, f.key, f.error, f.sqlstate, f.failed_at
  FROM {{S}}._column_failures f;

-- A transform's own share of a drain page that fails (D21).
CREATE OR REPLACE VIEW {{S}}._read_page_failures AS
  SELECT pf.definition_id, pf.error, pf.sqlstate, pf.since, pf.last_at, pf.attempts, pf.next_attempt_at
  FROM {{S}}._page_failures pf;

-- Captured tables and the xmins of their triggers at install.
CREATE OR REPLACE VIEW {{S}}._read_captured_tables AS
  SELECT c.table_name, c.table_oid, c.trigger_xmins FROM {{S}}._captured_tables c;

-- Self-check jobs and their divergences (engine/selfcheck).
CREATE OR REPLACE VIEW {{S}}._read_self_checks AS
  SELECT j.id, j.definition_id, j.mode, j.state, j.rows_compared, j.created_at, j.started_at, j.finished_at,
         j.claimed_by, j.error, j.outcome, j.not_live_status, j.truncated, j.checked_through, j.divergence_count
  FROM {{S}}._self_checks j;

CREATE OR REPLACE VIEW {{S}}._read_self_check_divergences AS
  SELECT v.job_id, v.ordinal, v.kind, v.key, v.column_name, v.persisted, v.recomputed, v.table_name, v.detail
  FROM {{S}}._self_check_divergences v;

-- Registered workers and their heartbeats.
CREATE OR REPLACE VIEW {{S}}._read_workers AS
  SELECT w.worker_id, w.proxy_id, w.kind, w.registered_at, w.last_seen FROM {{S}}._workers w;

-- A JOIN target's fan-out indexes missing now (joins spec §5 item 5): per
-- join edge, a btree index leading with the earlier item's join columns,
-- as define requires unless WITHOUT SOURCE INDEX. One jsonb array per
-- definition that has a gap: [{table, columns, role, create_index}].
CREATE OR REPLACE VIEW {{S}}._read_index_gaps AS
  SELECT d.id AS definition_id,
         jsonb_agg(jsonb_build_object('table', e.tbl, 'columns', e.cols, 'role', 'join',
           'create_index', format('CREATE INDEX ON %s (%s);', e.tbl,
             (SELECT string_agg(quote_ident(c), ', ') FROM jsonb_array_elements_text(e.cols) c))) ORDER BY e.n) AS gaps
  FROM {{S}}._definitions d
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
