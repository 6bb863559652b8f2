package virtualtables

func init() {
	internalHelpers = append(internalHelpers, "_self_check_start")
}

// selfCheckSQL is the part of the surface script for self-checks (surface
// §9): the jobs and their divergences, visible to who can SELECT the target
// (jobs also to pg_monitor), and self_check, which registers a job through
// the privileged _self_check_start. Drain workers run the jobs
// (engine/selfcheck.go); await_self_check is answered by the proxy.
const selfCheckSQL = `
CREATE VIEW {{S}}.self_checks WITH (security_barrier = true) AS
  SELECT j.id::int8 AS id, coalesce(c.relname::text, d.compiled #>> '{spec,target,name}') AS target,
         j.mode::text AS mode, j.state::text AS state, j.state IN ('done','failed','cancelled') AS finished,
         j.rows_compared::int8 AS rows_compared, j.created_at::timestamptz AS created_at,
         j.started_at::timestamptz AS started_at, j.finished_at::timestamptz AS finished_at,
         CASE WHEN j.state = 'running' THEN j.claimed_by END::text AS claimed_by, j.error::text AS error,
         j.outcome::text AS outcome, j.not_live_status::text AS not_live_status, j.truncated AS truncated,
         j.checked_through::text AS checked_through, j.divergence_count::int4 AS divergence_count,
         (SELECT coalesce(jsonb_agg(jsonb_build_object('src_table', p.src_table, 'key', p.key) ORDER BY p.src_table, p.key), '[]')
          FROM {{S}}._poison p WHERE p.definition_id = d.id) AS held_keys,
         (SELECT coalesce(jsonb_agg(jsonb_build_object('batch', b.batch_seq, 'bucket', b.bucket, 'attempts', b.attempts,
                                                       'error', b.last_error, 'sqlstate', b.last_sqlstate)
                                    ORDER BY b.batch_seq, b.bucket), '[]')
          FROM {{S}}._batch_buckets b WHERE b.state = 'open' AND b.last_error IS NOT NULL) AS drain_failures
  FROM {{S}}._self_checks j JOIN {{S}}._definitions d ON d.id = j.definition_id
  LEFT JOIN pg_class c ON c.oid = d.target_oid
  WHERE has_table_privilege(d.target_oid, 'SELECT') OR pg_has_role('pg_monitor', 'MEMBER');

CREATE VIEW {{S}}.self_check_divergences WITH (security_barrier = true) AS
  SELECT v.job_id::int8 AS job_id, v.ordinal::int4 AS ordinal, v.kind::text AS kind, v.key::text AS key,
         v.column_name::text AS column_name, v.persisted::text AS persisted, v.recomputed::text AS recomputed,
         v.table_name::text AS table_name, v.detail::text AS detail
  FROM {{S}}._self_check_divergences v JOIN {{S}}._self_checks j ON j.id = v.job_id
  JOIN {{S}}._definitions d ON d.id = j.definition_id
  WHERE has_table_privilege(d.target_oid, 'SELECT');

-- §9.1, the privileged part: runs as the workers' role. The acting role
-- must be one the session could become, must be able to SELECT the target
-- and must own it (as release_key).
CREATE FUNCTION {{S}}._self_check_start(acting regrole, target text, timeout_ms int8, mode text) RETURNS int8
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  def_id int8;
  t_oid oid;
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
  SELECT d.id, d.target_oid INTO def_id, t_oid
  FROM {{S}}._definitions d LEFT JOIN pg_class c ON c.oid = d.target_oid
  WHERE coalesce(c.relname::text, d.compiled #>> '{spec,target,name}') = _self_check_start.target
     OR d.target_table = _self_check_start.target
  ORDER BY d.id LIMIT 1
  FOR UPDATE OF d;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = '42704', MESSAGE = format('transform %s does not exist', _self_check_start.target),
      DETAIL = 'trellis: not_found/TransformNotFound';
  END IF;
  IF NOT coalesce(has_table_privilege(acting, t_oid, 'SELECT'), false) THEN
    RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = format('permission denied for table %s', _self_check_start.target),
      DETAIL = 'trellis: permission/MissingPrivilege',
      HINT = format('GRANT SELECT ON %s TO %s;', _self_check_start.target, acting);
  END IF;
  IF NOT coalesce(pg_has_role(acting, (SELECT c.relowner FROM pg_class c WHERE c.oid = t_oid), 'USAGE'), false) THEN
    RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = format('must be owner of transform %s', _self_check_start.target),
      DETAIL = 'trellis: permission/NotOwner';
  END IF;
  -- One open job per target: an open one is returned whatever was passed.
  SELECT j.id INTO job FROM {{S}}._self_checks j WHERE j.definition_id = def_id AND j.state IN ('queued', 'running');
  IF FOUND THEN
    RETURN job;
  END IF;
  DELETE FROM {{S}}._self_checks j WHERE j.definition_id = def_id;
  INSERT INTO {{S}}._self_checks (definition_id, mode, timeout_ms) VALUES (def_id, mode, timeout_ms) RETURNING id INTO job;
  PERFORM pg_notify({{SN}} || '_wake', '');
  RETURN job;
END
$fn$;

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
