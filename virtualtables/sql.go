package virtualtables

// surfaceSQL creates every API object of surface spec §4 that this version
// has, plus the internal helpers they need. Placeholders: {{S}} the quoted
// catalog schema, {{SN}} the schema name as a SQL string literal (for
// messages), {{TTL_MS}} the
// worker reclaim TTL in milliseconds.
//
// Rules kept throughout:
//   - Storage is the engine's: the views read it through the engine's read
//     views (_read_*, engine/catalog/reads) and its catalog functions, never
//     by a storage table's name (internal/depcheck enforces it).
//   - Views read storage with their owner's (the workers' role) rights, so every
//     view that shows per-target rows filters them with the reader's own
//     privileges (has_table_privilege runs as current_user, which a view does
//     not change) and is a security_barrier view, so a caller's leaky WHERE
//     function cannot see filtered rows (§2.4).
//   - SECURITY DEFINER is used only where a function must read storage and
//     its result carries nothing per-target the caller may not see; inside
//     one, current_user is the owner, so no privilege filtering happens there.
//   - Optional facts the engine may add later (status_detail parts) are read
//     through jsonb, so the views survive small storage changes.
const surfaceSQL = `
CREATE TYPE {{S}}.applied AS (
  kind text, target text, target_table text, id int8, status text, source_table text,
  version int8, source_columns jsonb, cardinality text, relationship jsonb, warnings text[],
  resumed text[], added text[], dropped text[], altered text[]);

-- RFC 3339 UTC with microseconds, as jsonb values carry times (§1.4).
CREATE FUNCTION {{S}}._jsontime(ts timestamptz) RETURNS text LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
$fn$;

-- Raises an error with the given SQLSTATE: the proxy calls it on a client's
-- backend so the upstream transaction agrees that a Trellis statement failed.
CREATE FUNCTION {{S}}._fail(code text, message text, detail text DEFAULT NULL, hint text DEFAULT NULL)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  IF code IS NULL OR code !~ '^[0-9A-Z]{5}$' OR code LIKE '00%' OR code LIKE '01%' OR code LIKE '02%' THEN
    code := 'XX000';
  END IF;
  message := coalesce(message, 'Trellis statement failed');
  IF detail IS NOT NULL AND hint IS NOT NULL THEN
    RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message, DETAIL = detail, HINT = hint;
  ELSIF detail IS NOT NULL THEN
    RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message, DETAIL = detail;
  ELSIF hint IS NOT NULL THEN
    RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message, HINT = hint;
  ELSE
    RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message;
  END IF;
END
$fn$;

-- Body of every proxy-only stub (§11): a direct caller gets 0A000.
CREATE FUNCTION {{S}}._proxy_only(object text) RETURNS boolean LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  RAISE EXCEPTION USING ERRCODE = '0A000',
    MESSAGE = format('%s.%s must be read through trellis-proxy', {{SN}}, object),
    DETAIL = 'trellis: unsupported/ProxyOnly',
    HINT = 'connect to the proxy (default port 6432) instead of to PostgreSQL';
END
$fn$;

CREATE FUNCTION {{S}}._proxy_only_rows(object text) RETURNS SETOF record LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  PERFORM {{S}}._proxy_only(object);
END
$fn$;

-- §7.3 fleet liveness: the staging key held by a backend of the workers'
-- role (usename, which no other role can forge).
CREATE FUNCTION {{S}}.has_live_staging_worker() RETURNS boolean LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT EXISTS (SELECT 1 FROM {{S}}._staging_holder())
$fn$;

CREATE FUNCTION {{S}}.has_live_drain_workers() RETURNS boolean LANGUAGE sql STABLE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT EXISTS (SELECT 1 FROM {{S}}._read_workers
    WHERE kind = 'drain' AND last_seen > now() - {{TTL_MS}} * interval '1 millisecond')
$fn$;

CREATE VIEW {{S}}.fleet_workers AS
  SELECT w.worker_id, w.proxy_id, w.kind, w.registered_at, w.last_seen,
         w.last_seen > now() - {{TTL_MS}} * interval '1 millisecond' AS live
  FROM {{S}}._read_workers w;

CREATE VIEW {{S}}.fleet AS
  WITH h AS (SELECT * FROM {{S}}._staging_holder()),
       w AS (SELECT count(*) FILTER (WHERE kind = 'drain' AND live)::int4 AS drains FROM {{S}}.fleet_workers)
  SELECT EXISTS (SELECT 1 FROM h) AS staging_worker_live,
         (SELECT coalesce(nullif(regexp_replace(h.application_name, '^trellis-(worker|staging) ', ''), ''), 'pid ' || h.pid) || ':staging'
            FROM h) AS staging_worker_id,
         (SELECT h.backend_start FROM h) AS staging_since,
         w.drains > 0 AS drain_workers_live,
         w.drains AS live_drain_workers,
         {{TTL_MS}}::int8 AS reclaim_ttl_ms,
         EXISTS (SELECT 1 FROM h) AND w.drains > 0 AS healthy
  FROM w;

-- §5.1 / §5.2.
CREATE VIEW {{S}}.status WITH (security_barrier = true) AS
WITH RECURSIVE
defs AS (
  SELECT d.id, d.target_oid, d.target_table, d.source_table, d.kind, d.status AS stored, d.status_detail,
         d.build_id, d.build_kind, d.build_started_at, d.build_rows_done, d.build_rows_estimated,
         coalesce(c.relname::text, d.recorded_name, d.target_table) AS bare,
         coalesce(pg_get_userbyid(c.relowner), pg_get_userbyid(d.owner_role))::text AS owner_name,
         -- Only the defining session can see a row of an open transaction,
         -- so a visible row whose inserting (sub)transaction is still in
         -- progress is this session's own. The xid is widened with the
         -- current epoch (rows of a past epoch are long committed).
         coalesce(d.status = 'waiting_to_backfill' AND pg_xact_status(
           (((pg_current_xact_id()::text::bigint >> 32) << 32) | d.row_xmin::text::bigint)::text::xid8) = 'in progress', false) AS mine
  FROM {{S}}._read_definitions d LEFT JOIN pg_class c ON c.oid = d.target_oid),
up AS (   -- direct reads of another definition's target (chains, D15)
  SELECT DISTINCT r.definition_id AS id, u.id AS up_id
  FROM {{S}}._read_definition_reads r JOIN {{S}}._read_definitions u ON u.target_oid = r.table_oid
  WHERE u.id <> r.definition_id),
anc(id, via, anc_id, depth) AS (
  SELECT id, up_id, up_id, 1 FROM up
  UNION ALL
  SELECT a.id, a.via, up.up_id, a.depth + 1 FROM anc a JOIN up ON up.id = a.anc_id WHERE a.depth < 64),
held AS (  -- the first direct upstream that is not live itself or through its own upstreams
  SELECT DISTINCT ON (a.id) a.id, v.bare AS held_back_by
  FROM anc a JOIN defs s ON s.id = a.anc_id AND s.stored <> 'live' JOIN defs v ON v.id = a.via
  ORDER BY a.id, a.via),
bt AS (
  SELECT t.build_id,
         count(*) FILTER (WHERE t.kind = 'chunk')::int4 AS chunks_total,
         count(*) FILTER (WHERE t.kind = 'chunk' AND t.state = 'done')::int4 AS chunks_done,
         coalesce(bool_or(t.kind = 'plan' AND t.state <> 'done'), false) AS planning,
         coalesce(sum(t.rows_done) FILTER (WHERE t.state = 'done'), 0)::int8 AS rows_done
  FROM {{S}}._read_build_tasks t GROUP BY t.build_id),
bf AS (    -- the most-retried failing task of each build
  SELECT DISTINCT ON (t.build_id) t.build_id, t.attempts, t.last_error,
         t.last_sqlstate AS sqlstate, t.next_attempt_at
  FROM {{S}}._read_build_tasks t WHERE t.state <> 'done' AND t.last_error IS NOT NULL
  ORDER BY t.build_id, t.attempts DESC, t.id),
df AS MATERIALIZED (  -- the oldest failing drain page of the instance, and its batch's tables
  SELECT * FROM {{S}}._read_failing_page),
cw AS (    -- capture installs kept waiting for their table lock (engine/capture/capture.go)
  SELECT DISTINCT ON (r.definition_id) r.definition_id AS id, jsonb_build_object(
    'table_name', w.table_name, 'operation', w.operation, 'lock_mode', w.lock_mode,
    'waiting_since', {{S}}._jsontime(w.waiting_since), 'observed_at', {{S}}._jsontime(w.observed_at),
    'blockers', to_jsonb(w.blockers),
    'summary', format('waiting for %s on %s held by %s since %s', w.lock_mode, w.table_name,
      CASE cardinality(w.blockers) WHEN 0 THEN 'another session' WHEN 1 THEN '1 session'
        ELSE cardinality(w.blockers) || ' sessions' END, to_char(w.waiting_since, 'HH24:MI:SS'))) AS wait
  FROM {{S}}._read_capture_waits w JOIN {{S}}._read_definition_reads r ON r.table_name = w.table_name
  ORDER BY r.definition_id, w.waiting_since, w.table_name),
pk AS (
  SELECT p.definition_id AS id, count(*)::int8 AS held_count, min(p.poisoned_at) AS oldest
  FROM {{S}}._read_held_keys p GROUP BY p.definition_id),
pcol AS (  -- columns paused by the column fuse (engine §12.12)
  SELECT pc.definition_id AS id, array_agg(pc.column_name::text ORDER BY pc.column_name) AS cols,
         (array_agg(pc.column_name::text ORDER BY pc.paused_at, pc.column_name))[1] AS first_col,
         (array_agg(pc.last_error ORDER BY pc.paused_at, pc.column_name))[1] AS first_error
  FROM {{S}}._read_paused_columns pc GROUP BY pc.definition_id),
fl AS (SELECT {{S}}.has_live_staging_worker() AS staging, {{S}}.has_live_drain_workers() AS drain),
x AS (
  SELECT d.*, h.held_back_by,
    CASE WHEN d.stored = 'live' AND h.held_back_by IS NOT NULL THEN 'catching_up' ELSE d.stored END AS reported,
    CASE WHEN d.stored = 'backfilling' THEN coalesce(bt.rows_done, d.build_rows_done, 0) END AS done,
    CASE WHEN d.stored = 'backfilling' THEN d.build_rows_estimated END AS est,
    CASE WHEN d.stored = 'backfilling' THEN d.build_started_at END AS started,
    bt.chunks_total, bt.chunks_done, bt.planning,
    CASE WHEN d.stored = 'backfilling' AND bf.build_id IS NOT NULL THEN jsonb_build_object(
        'source_table', d.source_table, 'attempts', bf.attempts, 'last_error', bf.last_error,
        'sqlstate', bf.sqlstate, 'next_attempt_at', {{S}}._jsontime(bf.next_attempt_at))
      ELSE d.status_detail -> 'backfill_failure' END AS backfill_failure,
    coalesce(d.status_detail -> 'capture_failure',
      CASE WHEN d.status_detail ? 'halt' THEN jsonb_build_object('kind', 'halt') || (d.status_detail -> 'halt') END)
      AS capture_failure,
    cw.wait AS capture_wait,
    CASE WHEN d.stored NOT IN ('paused', 'quarantined') AND pf.definition_id IS NOT NULL
      -- This transform's own share of a page failed: it alone is held (D21).
      THEN jsonb_build_object('error', pf.error, 'sqlstate', pf.sqlstate, 'since', {{S}}._jsontime(pf.since),
        'last_seen', {{S}}._jsontime(pf.last_at), 'attempts', pf.attempts, 'next_attempt_at', {{S}}._jsontime(pf.next_attempt_at),
        'held', true)
      WHEN d.stored NOT IN ('paused', 'quarantined') AND df.batch_seq IS NOT NULL
              AND df.tables && ARRAY(SELECT r.table_name FROM {{S}}._read_definition_reads r WHERE r.definition_id = d.id)
      -- A whole page failing is not attributed to one transform: its text
      -- may carry another role's rows, so only pg_monitor members read it.
      THEN jsonb_build_object('batch_seq', df.batch_seq, 'tables', to_jsonb(df.tables),
        'error', CASE WHEN pg_has_role('pg_monitor', 'USAGE') THEN df.last_error
                      ELSE 'a page of the changes this transform reads fails (its text is shown to pg_monitor members)' END,
        'sqlstate', df.last_sqlstate, 'since', {{S}}._jsontime(df.failed_since), 'last_seen', {{S}}._jsontime(df.failed_last), 'attempts', df.attempts)
      ELSE d.status_detail -> 'drain_failure' END AS drain_failure,
    pk.held_count, pk.oldest,
    pcol.cols AS paused_cols, pcol.first_col, pcol.first_error,
    fl.staging, fl.drain
  FROM defs d
  LEFT JOIN held h ON h.id = d.id
  LEFT JOIN bt ON bt.build_id = d.build_id AND d.stored = 'backfilling'
  LEFT JOIN bf ON bf.build_id = d.build_id
  LEFT JOIN pk ON pk.id = d.id
  LEFT JOIN cw ON cw.id = d.id
  LEFT JOIN pcol ON pcol.id = d.id
  LEFT JOIN df ON true
  LEFT JOIN {{S}}._read_page_failures pf ON pf.definition_id = d.id
  CROSS JOIN fl)
SELECT
  x.bare AS target,
  x.reported AS status,
  (CASE
     WHEN x.capture_failure IS NOT NULL THEN
       CASE WHEN x.capture_failure ->> 'kind' = 'halt' THEN 'halted: ' ELSE '' END || coalesce(x.capture_failure ->> 'error', 'capture failed')
     WHEN x.backfill_failure IS NOT NULL THEN 'build failing: ' || coalesce(x.backfill_failure ->> 'last_error', 'unknown error')
     WHEN x.drain_failure IS NOT NULL THEN 'drain held back: ' || coalesce(x.drain_failure ->> 'error', 'unknown error')
     WHEN x.capture_wait IS NOT NULL THEN coalesce(x.capture_wait ->> 'summary',
       format('waiting for %s on %s', x.capture_wait ->> 'lock_mode', x.capture_wait ->> 'table_name'))
     WHEN x.stored = 'waiting_to_backfill' AND x.mine THEN 'defined in this open transaction; building starts at COMMIT'
     WHEN x.held_count > 0 THEN x.held_count || ' source keys quarantined'
     WHEN x.first_col IS NOT NULL THEN 'column ' || x.first_col || ' paused: ' || coalesce(x.first_error, 'paused upstream')
     WHEN x.reported <> 'live' AND NOT x.staging THEN 'no live staging worker'
     WHEN x.reported <> 'live' AND NOT x.drain THEN 'no live drain worker'
   END)::text AS problem,
  (CASE WHEN x.est > 0 THEN least(round(100.0 * x.done / x.est, 1), 99.9) END)::numeric(4,1) AS build_percent,
  x.done::int8 AS build_rows_done,
  x.est::int8 AS build_rows_estimated,
  x.started::timestamptz AS build_started_at,
  (CASE WHEN x.reported IN ('catching_up', 'waiting_to_backfill') THEN x.held_back_by END)::text AS held_back_by,
  coalesce(x.paused_cols, '{}')::text[] AS paused_columns,
  x.target_table::text AS target_table,
  x.source_table::text AS source_table,
  x.id::int8 AS definition_id,
  x.kind::text AS kind,
  x.owner_name::text AS owner,
  (CASE WHEN x.stored = 'backfilling' THEN jsonb_build_object(
     'build_kind', x.build_kind,
     'phase', CASE WHEN coalesce(x.planning, true) THEN 'planning' ELSE 'building' END,
     'started_at', {{S}}._jsontime(x.started), 'rows_done', x.done, 'rows_estimated', x.est,
     'percent', CASE WHEN x.est > 0 THEN least(round(100.0 * x.done / x.est, 1), 99.9) END,
     'chunks_done', x.chunks_done,
     'chunks_total', CASE WHEN coalesce(x.planning, true) THEN NULL ELSE x.chunks_total END,
     'last_progress_at', NULL) END)::jsonb AS build,
  x.backfill_failure::jsonb AS backfill_failure,
  x.capture_wait::jsonb AS capture_wait,
  x.capture_failure::jsonb AS capture_failure,
  (CASE WHEN x.held_count > 0 THEN jsonb_build_object('held_count', x.held_count,
     'oldest_poisoned_at', {{S}}._jsontime(x.oldest)) END)::jsonb AS held_keys,
  x.drain_failure::jsonb AS drain_failure,
  coalesce((SELECT g.gaps FROM {{S}}._read_index_gaps g WHERE g.definition_id = x.id), '[]')::jsonb AS unindexed_joins,
  -- The joins spec's name for the same warning (issue 16).
  coalesce((SELECT g.gaps FROM {{S}}._read_index_gaps g WHERE g.definition_id = x.id), '[]')::jsonb AS source_index_gaps
FROM x
WHERE has_table_privilege(x.target_oid, 'SELECT') OR pg_has_role('pg_monitor', 'USAGE');

-- §5.4.
CREATE VIEW {{S}}.definitions WITH (security_barrier = true) AS
  SELECT s.definition_id AS id, s.target, s.target_table, s.source_table, s.kind, s.owner, s.status,
         d.version::int8 AS version, d.created_at::timestamptz AS created_at,
         ARRAY(SELECT r.table_name::text FROM {{S}}._read_definition_reads r WHERE r.definition_id = d.id
               ORDER BY r.role <> 'source', r.table_name) AS reads,
         s.backfill_failure,
         coalesce(s.capture_failure ->> 'kind' = 'halt', false) AS halted,
         (CASE WHEN s.capture_failure ->> 'kind' = 'halt' THEN s.capture_failure END)::jsonb AS halt,
         d.definition_sql::text AS definition_text,
         d.verified AS statement_verified
  FROM {{S}}.status s JOIN {{S}}._read_definitions d ON d.id = s.definition_id;

-- §5.5: relationships are not stored yet; the view has its final shape.
CREATE VIEW {{S}}.relationships AS
  SELECT NULL::int8 AS id, NULL::text AS address, NULL::text AS name, NULL::text AS from_schema,
         NULL::text AS from_table, NULL::text AS from_col, NULL::text AS to_schema, NULL::text AS to_table,
         NULL::text AS to_col, NULL::text AS cardinality, NULL::text AS owner, NULL::text[] AS warnings,
         NULL::timestamptz AS created_at
  WHERE false;

-- §6.2: quarantined transforms, then paused columns (the column fuse).
CREATE VIEW {{S}}.quarantined AS
  SELECT q.* FROM (
    SELECT s.target, s.target AS transform, NULL::text AS column_name, s.status AS state,
           NULL::timestamptz AS paused_at, NULL::text AS last_error, '{}'::text[] AS cascaded_from,
           coalesce((s.held_keys ->> 'held_count')::int8, 0) AS held_keys
    FROM {{S}}.status s WHERE s.status = 'quarantined'
    UNION ALL
    SELECT s.target || '.' || pc.column_name, s.target, pc.column_name::text, 'paused'::text,
           pc.paused_at::timestamptz, pc.last_error::text,
           ARRAY(SELECT u.recorded_name || '.' || e.up_column
                 FROM {{S}}._read_column_pause_edges e JOIN {{S}}._read_definitions u ON u.id = e.up_definition_id
                 WHERE e.down_definition_id = pc.definition_id AND e.down_column = pc.column_name ORDER BY 1)::text[],
           NULL::int8
    FROM {{S}}.status s JOIN {{S}}._read_paused_columns pc ON pc.definition_id = s.definition_id) q
  ORDER BY q.transform, q.column_name NULLS FIRST;

CREATE FUNCTION {{S}}.quarantine_status(target text) RETURNS SETOF {{S}}.quarantined
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  t text := split_part(quarantine_status.target, '.', 1);
  c text := nullif(substr(quarantine_status.target, length(split_part(quarantine_status.target, '.', 1)) + 2), '');
  s record;
BEGIN
  SELECT st.status, st.held_keys INTO s FROM {{S}}.status st WHERE st.target = t;
  IF NOT FOUND THEN
    IF EXISTS (SELECT 1 FROM {{S}}._definition_targets() d
               WHERE d.target_table IN (SELECT format('%I.%I', n.nspname, k.relname)
                                        FROM pg_class k JOIN pg_namespace n ON n.oid = k.relnamespace
                                        WHERE k.relname = t)) THEN
      RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = format('permission denied for transform %s', t),
        DETAIL = 'trellis: permission/MissingPrivilege';
    END IF;
    RAISE EXCEPTION USING ERRCODE = '42704', MESSAGE = format('transform %s does not exist', t),
      DETAIL = 'trellis: not_found/TransformNotFound';
  END IF;
  IF c IS NULL THEN
    RETURN QUERY SELECT t, t, NULL::text, s.status::text, NULL::timestamptz, NULL::text, '{}'::text[],
      coalesce((s.held_keys ->> 'held_count')::int8, 0);
  ELSE
    RETURN QUERY SELECT quarantine_status.target, q.transform, q.column_name, q.state, q.paused_at, q.last_error,
      q.cascaded_from, q.held_keys FROM {{S}}.quarantined q WHERE q.transform = t AND q.column_name = c;
    IF NOT FOUND THEN
      RETURN QUERY SELECT quarantine_status.target, t, c, 'live'::text, NULL::timestamptz, NULL::text,
        '{}'::text[], NULL::int8;
    END IF;
  END IF;
END
$fn$;

-- §6.4: held keys, visible with SELECT on the target and the key's table.
CREATE VIEW {{S}}.poisoned WITH (security_barrier = true) AS
  SELECT p.definition_id::int8 AS definition_id,
         coalesce(c.relname::text, d.recorded_name) AS transform,
         p.src_table::text AS src_table, p.key::text AS key, p.error::text AS last_error,
         p.sqlstate::text AS sqlstate, p.poisoned_at::timestamptz AS poisoned_at
  FROM {{S}}._read_held_keys p JOIN {{S}}._read_definitions d ON d.id = p.definition_id
  LEFT JOIN pg_class c ON c.oid = d.target_oid
  WHERE has_table_privilege(d.target_oid, 'SELECT')
    AND coalesce(has_table_privilege(to_regclass(p.src_table), 'SELECT'), false);

CREATE FUNCTION {{S}}.poisoned_since(since timestamptz) RETURNS SETOF {{S}}.poisoned
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT * FROM {{S}}.poisoned p WHERE p.poisoned_at > since ORDER BY p.poisoned_at, p.definition_id
$fn$;

-- §8.1.
CREATE FUNCTION {{S}}.watermark_token() RETURNS text LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  IF {{S}}._has_captured_writes() THEN
    RAISE EXCEPTION USING ERRCODE = '25001',
      MESSAGE = 'a watermark token cannot be taken in a transaction that has written to captured tables',
      DETAIL = 'trellis: transaction/RefusedInTransaction', HINT = 'take the token after COMMIT';
  END IF;
  RETURN pg_current_wal_insert_lsn()::text;
END
$fn$;

CREATE FUNCTION {{S}}.converged(token text) RETURNS boolean LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  -- Only Postgres's own canonical LSN spelling is accepted back (§1.4).
  IF token IS NULL OR token !~ '^[0-9A-F]{1,8}/[0-9A-F]{1,8}$' OR token::pg_lsn::text <> token THEN
    RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('malformed watermark token %L', token),
      DETAIL = 'trellis: validation/BadToken', HINT = 'pass back exactly what watermark_token() returned, e.g. 16/B374D848';
  END IF;
  IF {{S}}._has_captured_writes() THEN
    RAISE EXCEPTION USING ERRCODE = '25001',
      MESSAGE = 'convergence cannot be checked in a transaction that has written to captured tables',
      DETAIL = 'trellis: transaction/RefusedInTransaction', HINT = 'check after COMMIT';
  END IF;
  -- Another role's held keys do not fail this role's wait (D21).
  RETURN {{S}}._converged(token::pg_lsn, session_user);
END
$fn$;

-- §7.1. SECURITY INVOKER, no pinned search_path: the table resolves as the
-- caller spells it; the engine's _request_backfill checks ownership (D9).
CREATE FUNCTION {{S}}.request_backfill(source_table text, only_target text DEFAULT NULL) RETURNS text[]
LANGUAGE sql VOLATILE AS $fn$
  SELECT {{S}}._request_backfill(current_user::regrole, pg_catalog.to_regclass(source_table)::oid, source_table, only_target)
$fn$;

-- §7.2: an audit of capture on every captured table, from pg_trigger, pg_proc
-- and pg_inherits at read time (no rows compared). A trigger whose xmin is
-- not the one recorded at install was disabled, re-enabled or replaced since
-- (reported as disabled_trigger). Rows of tables the reader cannot SELECT are
-- hidden.
CREATE VIEW {{S}}.capture_disruptions WITH (security_barrier = true) AS
WITH ct AS (
  SELECT c.table_name, c.table_oid, c.trigger_xmins FROM {{S}}._read_captured_tables c),
ev AS (
  SELECT e AS ev, {{SN}} || '_capture_' || e AS tg FROM unnest(ARRAY['insert', 'update', 'delete', 'truncate']) e),
tr AS (
  SELECT ct.table_name, ct.table_oid, ct.trigger_xmins, ev.ev, ev.tg, t.tgenabled, t.xmin::text AS txmin,
         p.oid AS fn, p.proname, p.pronamespace, p.prosecdef, p.proowner
  FROM ct CROSS JOIN ev
  LEFT JOIN pg_trigger t ON t.tgrelid = ct.table_oid AND t.tgname = ev.tg
  LEFT JOIN pg_proc p ON p.oid = t.tgfoid),
f AS (
  SELECT table_name, table_oid, 'missing_trigger' AS fault,
         format('trigger %s is missing', tg) AS detail FROM tr WHERE tgenabled IS NULL
  UNION ALL
  SELECT table_name, table_oid, 'disabled_trigger',
         format('trigger %s is %s', tg, CASE tgenabled WHEN 'D' THEN 'disabled' WHEN 'O' THEN 'enabled, but not ALWAYS'
                                                      WHEN 'R' THEN 'enabled for replicas only' ELSE tgenabled::text END)
  FROM tr WHERE tgenabled IS NOT NULL AND tgenabled <> 'A'
  UNION ALL
  SELECT table_name, table_oid, 'disabled_trigger',
         format('trigger %s was disabled, re-enabled or replaced since capture was installed', tg)
  FROM tr WHERE tgenabled = 'A' AND trigger_xmins IS NOT NULL AND (trigger_xmins ->> tg) IS DISTINCT FROM txmin
  UNION ALL
  SELECT table_name, table_oid, 'wrong_trigger_function', format('trigger %s calls %s', tg, fn::regproc)
  FROM tr WHERE fn IS NOT NULL AND (pronamespace <> '{{S}}'::regnamespace OR left(proname, length('_cap_' || ev || '_')) <> '_cap_' || ev || '_')
  UNION ALL
  SELECT table_name, table_oid, 'not_security_definer', format('function %s is not SECURITY DEFINER', fn::regproc)
  FROM tr WHERE fn IS NOT NULL AND NOT prosecdef
  UNION ALL
  SELECT table_name, table_oid, 'wrong_owner', format('function %s is owned by %s, not by the workers'' role', fn::regproc, pg_get_userbyid(proowner))
  FROM tr WHERE fn IS NOT NULL AND proowner <> (SELECT r.oid FROM pg_roles r WHERE r.rolname = {{S}}._instance_worker_role())
  UNION ALL
  SELECT ct.table_name, ct.table_oid, 'in_hierarchy', format('%s is part of a partition or inheritance hierarchy', ct.table_name)
  FROM ct WHERE EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = ct.table_oid OR i.inhparent = ct.table_oid)
             OR coalesce((SELECT c.relispartition OR c.relkind = 'p' FROM pg_class c WHERE c.oid = ct.table_oid), false))
SELECT f.table_name::text AS table_name, f.fault::text AS fault, f.detail::text AS detail,
       ARRAY(SELECT DISTINCT d.recorded_name FROM {{S}}._read_definition_reads r
             JOIN {{S}}._read_definitions d ON d.id = r.definition_id WHERE r.table_name = f.table_name ORDER BY 1)::text[] AS definitions
FROM f
WHERE coalesce(has_table_privilege(f.table_oid, 'SELECT'), false) OR pg_has_role('pg_monitor', 'USAGE');

CREATE FUNCTION {{S}}.detect_capture_disruptions() RETURNS SETOF {{S}}.capture_disruptions
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT * FROM {{S}}.capture_disruptions ORDER BY table_name, fault, detail
$fn$;

-- §10.1. SECURITY INVOKER: it reads definitions through the filtered view and
-- checks the caller's SELECT on every target itself.
CREATE FUNCTION {{S}}.dump_definitions_sql(with_pauses boolean DEFAULT true) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  denied text;
  out text;
  r record;
  lvl int := -1;
BEGIN
  SELECT t.target_table INTO denied FROM {{S}}._definition_targets() t
  WHERE NOT coalesce(has_table_privilege(t.target_oid, 'SELECT'), false) ORDER BY t.id LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = format('permission denied for table %s', denied),
      DETAIL = 'a dump needs SELECT on every target; a partial dump would be silently wrong' || chr(10) ||
               'trellis: permission/MissingPrivilege',
      HINT = format('GRANT SELECT ON %s TO %I;', denied, current_user);
  END IF;
  out := format('-- trellis definitions of instance %s/%s, catalog version %s, %s',
                current_database(), {{SN}}, {{S}}._catalog_version(),
                to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || '+00') || chr(10) || 'BEGIN;' || chr(10);
  FOR r IN
    WITH RECURSIVE defs AS (SELECT * FROM {{S}}.definitions),
    edges AS (SELECT d.id, u.id AS up FROM defs d JOIN defs u ON u.target_table = ANY (d.reads) AND u.id <> d.id),
    lv(id, level) AS (
      SELECT id, 0 FROM defs
      UNION ALL
      SELECT e.id, lv.level + 1 FROM edges e JOIN lv ON lv.id = e.up WHERE lv.level < 64)
    SELECT d.id, d.definition_text, d.statement_verified, max(lv.level) AS level
    FROM defs d JOIN lv ON lv.id = d.id GROUP BY d.id, d.definition_text, d.statement_verified ORDER BY 4, 1
  LOOP
    IF r.level <> lvl THEN
      lvl := r.level;
      out := out || format('-- level %s', lvl) || chr(10);
    END IF;
    -- Only a statement the workers re-parsed and re-rendered (or one a
    -- session with their privileges wrote) is replayed: another role's
    -- text could carry a second statement for the administrator to run.
    IF r.statement_verified THEN
      out := out || rtrim(r.definition_text, E'; \n\t') || ';' || chr(10);
    ELSE
      out := out || format('-- definition %s left out: the workers have not verified its statement (see trellis.status)', r.id) || chr(10);
    END IF;
  END LOOP;
  IF with_pauses THEN
    -- Operator pauses only: a capture failure or halt is not the operator's.
    FOR r IN SELECT d.target FROM {{S}}.definitions d
             WHERE d.status = 'paused' AND NOT d.halted
               AND NOT EXISTS (SELECT 1 FROM {{S}}.status s WHERE s.definition_id = d.id AND s.capture_failure IS NOT NULL)
             ORDER BY d.id
    LOOP
      out := out || format('PAUSE TRANSFORM %s;', quote_ident(r.target)) || chr(10);
    END LOOP;
    -- Operator field pauses (not the column fuse's, not cascades: replaying
    -- the pause recreates its cascade).
    FOR r IN SELECT q.transform, q.column_name FROM {{S}}.quarantined q
             WHERE q.column_name IS NOT NULL AND q.last_error IS NULL AND cardinality(q.cascaded_from) = 0
             ORDER BY q.transform, q.column_name
    LOOP
      out := out || format('PAUSE TRANSFORM %s.%s;', quote_ident(r.transform), quote_ident(r.column_name)) || chr(10);
    END LOOP;
  END IF;
  RETURN out || 'COMMIT;' || chr(10);
END
$fn$;

-- §11 proxy-only stubs: same signatures and columns, direct callers get 0A000.
-- The relations read a set-returning function: its output columns are not
-- constants, so no outer WHERE can be folded away without calling it.
CREATE VIEW {{S}}.config AS
  SELECT * FROM {{S}}._proxy_only_rows('config') AS t(schema text, target_schema text, database text,
    upstream text, listen text, http_listen text, staging text, staging_held boolean, drain_workers int4,
    pool_max_size int4, pool_wait_timeout_ms int8, call_budget_ms int8, lock_timeout_ms int8, embedded boolean,
    data_dir text, proxy_id text, proxy_version text, catalog_version int4, started_at timestamptz);

CREATE VIEW {{S}}.proxy_workers AS
  SELECT * FROM {{S}}._proxy_only_rows('proxy_workers') AS t(worker_id text, kind text, state text,
    since timestamptz, detail text);

CREATE FUNCTION {{S}}.await_converged(token text, timeout_ms int8) RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN PERFORM {{S}}._proxy_only('await_converged'); END $fn$;
CREATE FUNCTION {{S}}.try_await_converged(token text, timeout_ms int8) RETURNS boolean LANGUAGE plpgsql AS $fn$
BEGIN PERFORM {{S}}._proxy_only('try_await_converged'); RETURN NULL; END $fn$;
CREATE FUNCTION {{S}}.await_live(target text, timeout_ms int8) RETURNS text LANGUAGE plpgsql AS $fn$
BEGIN PERFORM {{S}}._proxy_only('await_live'); RETURN NULL; END $fn$;
CREATE FUNCTION {{S}}.apply(statement text) RETURNS SETOF {{S}}.applied LANGUAGE plpgsql AS $fn$
BEGIN PERFORM {{S}}._proxy_only('apply'); RETURN; END $fn$;
CREATE FUNCTION {{S}}.define(statement text) RETURNS SETOF {{S}}.applied LANGUAGE plpgsql AS $fn$
BEGIN PERFORM {{S}}._proxy_only('define'); RETURN; END $fn$;
CREATE FUNCTION {{S}}.metrics_text() RETURNS text LANGUAGE plpgsql AS $fn$
BEGIN PERFORM {{S}}._proxy_only('metrics_text'); RETURN NULL; END $fn$;
CREATE FUNCTION {{S}}.migrate() RETURNS text LANGUAGE plpgsql AS $fn$
BEGIN PERFORM {{S}}._proxy_only('migrate'); RETURN NULL; END $fn$;
`

// grantSQL opens the API to PUBLIC (§2.5). It runs only when the surface
// is (re)created, so a DBA who revoked these grants from PUBLIC and granted
// them to chosen roles keeps that choice across restarts.
const grantSQL = `
GRANT USAGE ON SCHEMA {{S}} TO PUBLIC;
GRANT SELECT ON {{S}}.status, {{S}}.definitions, {{S}}.capture_disruptions, {{S}}.relationships, {{S}}.quarantined, {{S}}.poisoned,
  {{S}}.fleet, {{S}}.fleet_workers, {{S}}.config, {{S}}.proxy_workers TO PUBLIC;
GRANT USAGE ON TYPE {{S}}.applied TO PUBLIC;
`

// storageGrantsSQL lists the REVOKEs that close storage relations (leading
// underscore) to PUBLIC; it runs at every Install, so a storage table a
// newer engine migration added is covered too, and is empty (no catalog
// writes) when nothing is open.
const storageGrantsSQL = `
SELECT DISTINCT format('REVOKE ALL ON %s %I.%I FROM PUBLIC',
                       CASE c.relkind WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END, n.nspname, c.relname)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace, aclexplode(c.relacl) a
WHERE n.nspname = $1 AND left(c.relname, 1) = '_' AND a.grantee = 0
`
