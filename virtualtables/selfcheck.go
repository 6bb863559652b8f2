package virtualtables

// selfCheckSQL is the part of the surface script for self-checks (surface
// §9): the jobs and their divergences, visible to who can SELECT the target
// (jobs also to pg_monitor), and self_check, which registers a job through
// the engine's privileged _self_check_start. Drain workers run the jobs
// (engine/selfcheck); await_self_check is answered by the proxy.
const selfCheckSQL = `
CREATE VIEW {{S}}.self_checks WITH (security_barrier = true) AS
  SELECT j.id::int8 AS id, coalesce(c.relname::text, d.recorded_name) AS target,
         j.mode::text AS mode, j.state::text AS state, j.state IN ('done','failed','cancelled') AS finished,
         j.rows_compared::int8 AS rows_compared, j.created_at::timestamptz AS created_at,
         j.started_at::timestamptz AS started_at, j.finished_at::timestamptz AS finished_at,
         CASE WHEN j.state = 'running' THEN j.claimed_by END::text AS claimed_by, j.error::text AS error,
         j.outcome::text AS outcome, j.not_live_status::text AS not_live_status, j.truncated AS truncated,
         j.checked_through::text AS checked_through, j.divergence_count::int4 AS divergence_count,
         (SELECT coalesce(jsonb_agg(jsonb_build_object('src_table', p.src_table, 'key', p.key) ORDER BY p.src_table, p.key), '[]')
          FROM {{S}}._read_held_keys p WHERE p.definition_id = d.id) AS held_keys,
         (SELECT coalesce(jsonb_agg(jsonb_build_object('batch', b.batch_seq, 'bucket', b.bucket, 'attempts', b.attempts,
                                                       'error', b.last_error, 'sqlstate', b.last_sqlstate)
                                    ORDER BY b.batch_seq, b.bucket), '[]')
          FROM {{S}}._read_failing_buckets b) AS drain_failures
  FROM {{S}}._read_self_checks j JOIN {{S}}._read_definitions d ON d.id = j.definition_id
  LEFT JOIN pg_class c ON c.oid = d.target_oid
  WHERE has_table_privilege(d.target_oid, 'SELECT') OR pg_has_role('pg_monitor', 'MEMBER');

CREATE VIEW {{S}}.self_check_divergences WITH (security_barrier = true) AS
  SELECT v.job_id::int8 AS job_id, v.ordinal::int4 AS ordinal, v.kind::text AS kind, v.key::text AS key,
         v.column_name::text AS column_name, v.persisted::text AS persisted, v.recomputed::text AS recomputed,
         v.table_name::text AS table_name, v.detail::text AS detail
  FROM {{S}}._read_self_check_divergences v JOIN {{S}}._read_self_checks j ON j.id = v.job_id
  JOIN {{S}}._read_definitions d ON d.id = j.definition_id
  WHERE has_table_privilege(d.target_oid, 'SELECT');

CREATE FUNCTION {{S}}.self_check(target text, timeout_ms int8, mode text DEFAULT 'standard') RETURNS SETOF {{S}}.self_checks
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  job int8 := {{S}}._self_check_start(pg_catalog.quote_ident(current_user)::regrole, target, timeout_ms, mode);
BEGIN
  IF NOT {{S}}.has_live_drain_workers() THEN
    RAISE WARNING 'no drain worker is alive: self-check % stays queued until one starts', job;
  END IF;
  RETURN QUERY SELECT * FROM {{S}}.self_checks s WHERE s.id = job;
END
$fn$;

CREATE FUNCTION {{S}}.await_self_check(id int8, timeout_ms int8) RETURNS text LANGUAGE plpgsql AS $fn$
BEGIN PERFORM {{S}}._proxy_only('await_self_check'); RETURN NULL; END $fn$;

GRANT SELECT ON {{S}}.self_checks, {{S}}.self_check_divergences TO PUBLIC;
`
