-- The catalog functions the SQL surface (package virtualtables) calls: its
-- reads that must see storage whatever the caller's rights, and its two
-- privileged writes (release_key, self_check). Outside the engine nothing
-- names a storage table (issue 15); these were the surface's own helpers
-- until then and keep their names and signatures, so a catalog a previous
-- build installed is taken over in place (Migrate replaces them on every
-- run, after the versioned migrations).


-- Whether the current transaction has captured writes: the capture triggers
-- log them under the writer's top-level xid (engine §12.3), which is indexed.
CREATE OR REPLACE FUNCTION {{S}}._has_captured_writes() RETURNS boolean LANGUAGE sql VOLATILE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT pg_current_xact_id_if_assigned() IS NOT NULL
     AND EXISTS (SELECT 1 FROM {{S}}._change_log WHERE txid = pg_current_xact_id_if_assigned())
$fn$;

-- The session holding the staging lock, read as the workers' role, which
-- owns it, so its application_name is visible to every caller. Only a
-- backend of the workers' role counts: any role can take an advisory key
-- and set any application_name, but not log in as the workers.
CREATE OR REPLACE FUNCTION {{S}}._staging_holder(OUT pid int4, OUT application_name text, OUT backend_start timestamptz)
RETURNS SETOF record LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT l.pid, a.application_name, a.backend_start
  FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid AND a.usename = {{S}}._instance_worker_role()
  WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
    AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND ((l.classid::int8 << 32) | l.objid::int8) = (SELECT key FROM {{S}}._staging_key)
  LIMIT 1
$fn$;

-- Every definition's target, for the dump's all-or-nothing privilege check.
-- Table names are public in pg_class anyway; no definition text leaves here.
CREATE OR REPLACE FUNCTION {{S}}._definition_targets(OUT id int8, OUT target_table text, OUT target_oid oid)
RETURNS SETOF record LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT d.id, d.target_table, d.target_oid FROM {{S}}._definitions d ORDER BY d.id
$fn$;

CREATE OR REPLACE FUNCTION {{S}}._catalog_version() RETURNS int4 LANGUAGE sql STABLE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT format_version FROM {{S}}._instance
$fn$;

-- §6.5, the privileged part: runs as the workers' role. The acting role must
-- be one the session could become and must own the transform (as PAUSE).
CREATE OR REPLACE FUNCTION {{S}}._release_key(acting regrole, transform text, src regclass, key text) RETURNS void
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
  FROM {{S}}._definitions d LEFT JOIN pg_class c ON c.oid = d.target_oid
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
  DELETE FROM {{S}}._poison p WHERE p.definition_id = def_id AND p.src_table = tname AND p.key = _release_key.key
  RETURNING p.origin_lsn INTO o;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = '42704',
      MESSAGE = format('key %L of %s is not held for %s', _release_key.key, coalesce(tname, src::text), _release_key.transform),
      DETAIL = 'trellis: not_found/KeyNotHeld';
  END IF;
  DELETE FROM {{S}}._key_deaths k WHERE k.definition_id = def_id AND k.src_table = tname AND k.key = _release_key.key;
  -- One re-derive of the key from its current row, carrying the least origin
  -- of the changes skipped while it was held (NULL: unknown, blocks every token).
  INSERT INTO {{S}}._change_log (src_table, key, op, definition_id, origin_lsn, hop)
  VALUES (tname, _release_key.key, 'rederive', def_id, o, 0);
  RAISE NOTICE '%', format('released key %s of %s for %s; it is re-derived from its current row',
    _release_key.key, tname, _release_key.transform);
END
$fn$;

-- §9.1, the privileged part: runs as the workers' role. The acting role
-- must be one the session could become, must be able to SELECT the target
-- and must own the transform (as release_key).
CREATE OR REPLACE FUNCTION {{S}}._self_check_start(acting regrole, target text, timeout_ms int8, mode text) RETURNS int8
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
  FROM {{S}}._definitions d LEFT JOIN pg_class c ON c.oid = d.target_oid
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
  PERFORM {{S}}._fence_definition(def_id);
  PERFORM 1 FROM {{S}}._definitions d WHERE d.id = def_id FOR UPDATE;
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

GRANT EXECUTE ON FUNCTION {{S}}._has_captured_writes(), {{S}}._staging_holder(), {{S}}._definition_targets(),
  {{S}}._catalog_version(), {{S}}._release_key(regrole, text, regclass, text),
  {{S}}._self_check_start(regrole, text, bigint, text) TO PUBLIC;
