-- The catalog parts of PAUSE and RESUME (engine spec §12.8 table): SECURITY
-- DEFINER, owned by the workers' role, executable by PUBLIC; each proves the
-- session may act as the claimed role and that the role owns the transform
-- (D9). Migrate replaces them on every run, like 1_privileged.sql.


-- The definition fence (fence.go), exclusive, until the transaction ends:
-- taken before the definition row's FOR UPDATE by every lifecycle function.
-- When it is held, the build steps holding this definition's fence and the
-- build mark are cancelled first (they retry after us, uncharged); pages are
-- waited for. A backend we may not signal (another role's superuser) is
-- waited for too. A definition without its fence relation (being dropped, or
-- from before format 19) is ordered by its row lock alone.
CREATE OR REPLACE FUNCTION {{S}}._fence_definition(def_id bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE rel regclass := to_regclass(format('%I.%I', {{SFN}}, 'd' || def_id)); p int;
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
                    AND m.relation = '{{SFL}}.build_mark'::regclass) LOOP
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
CREATE OR REPLACE FUNCTION {{S}}._fence_staging(def_id bigint) RETURNS boolean
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE rel regclass := to_regclass(format('%I.%I', {{SFN}}, 'd' || def_id));
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
               AND a.usename IS DISTINCT FROM (SELECT worker_role FROM {{S}}._instance)) THEN
    RETURN false;
  END IF;
  EXECUTE format('LOCK TABLE %s IN EXCLUSIVE MODE', rel);
  RETURN true;
END $fn$;

-- The shared side of the fence, for pages and build steps (the workers
-- only): which of ids' fences it took without waiting. mark also takes the
-- build mark (a build step). A fence relation that does not exist is no
-- fence, as in _fence_definition.
CREATE OR REPLACE FUNCTION {{S}}._try_fences(ids bigint[], mark boolean) RETURNS bigint[]
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE id bigint; rel regclass; got bigint[] := '{}';
BEGIN
  FOREACH id IN ARRAY coalesce(ids, '{}') LOOP
    rel := to_regclass(format('%I.%I', {{SFN}}, 'd' || id));
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
    LOCK TABLE {{SF}}.build_mark IN ROW SHARE MODE;
  END IF;
  RETURN got;
END $fn$;

CREATE OR REPLACE FUNCTION {{S}}._lifecycle_check(acting regrole, def_id bigint) RETURNS record
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE d record;
BEGIN
  PERFORM {{S}}._check_acting(acting);
  -- Ownership before the fence: a non-owner must not make anyone wait.
  -- owner_role never changes, so the unlocked read decides.
  IF EXISTS (SELECT 1 FROM {{S}}._definitions x WHERE x.id = def_id AND NOT pg_has_role(acting, x.owner_role, 'USAGE')) THEN
    RAISE EXCEPTION 'must be owner of transform %', (SELECT target_table FROM {{S}}._definitions WHERE id = def_id) USING ERRCODE = '42501',
      DETAIL = 'trellis: permission/NotOwner';
  END IF;
  PERFORM {{S}}._fence_definition(def_id);
  SELECT id, status, owner_role, target_table INTO d FROM {{S}}._definitions WHERE id = def_id FOR UPDATE;
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
CREATE OR REPLACE FUNCTION {{S}}._lifecycle_lock(acting regrole, tschema text, tname text,
    OUT id bigint, OUT status text, OUT target_table text, OUT source_table text, OUT definition_sql text, OUT compiled jsonb)
RETURNS SETOF record
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE def_id bigint;
BEGIN
  SELECT d.id INTO def_id FROM {{S}}._definitions d WHERE d.target_table = format('%I.%I', tschema, tname);
  IF NOT FOUND THEN
    RETURN;
  END IF;
  PERFORM {{S}}._lifecycle_check(acting, def_id);
  RETURN QUERY SELECT d.id, d.status, d.target_table, d.source_table, d.definition_sql, d.compiled
    FROM {{S}}._definitions d WHERE d.id = def_id;
END $fn$;

-- PAUSE: freeze an applying definition and drop its build work.
CREATE OR REPLACE FUNCTION {{S}}._lifecycle_pause(acting regrole, def_id bigint) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE d record;
BEGIN
  SELECT * INTO d FROM {{S}}._lifecycle_check(acting, def_id) AS x(id bigint, status text, owner_role oid, target_table text);
  IF d.status IN ('paused', 'quarantined') THEN
    RETURN d.status;
  END IF;
  UPDATE {{S}}._definitions SET status = 'paused', version = version + 1,
    build_started_at = NULL, build_rows_done = NULL, build_rows_estimated = NULL,
    status_detail = nullif(coalesce(status_detail, '{}') - 'rebuild_reason', '{}')
  WHERE id = def_id;
  -- Skip tasks a chunk holds: it waits on the definition row we lock (a
  -- deadlock otherwise); they belong to a superseded build and are never run.
  DELETE FROM {{S}}._build_tasks WHERE id IN (SELECT id FROM {{S}}._build_tasks WHERE definition_id = def_id FOR UPDATE SKIP LOCKED);
  RETURN 'paused';
END $fn$;

-- RESUME (after the caller re-validated): back to waiting_to_backfill for a
-- rebuild, failure and build state cleared, columns re-bound at the next
-- staging pass, held keys released. Returns the number released.
CREATE OR REPLACE FUNCTION {{S}}._lifecycle_resume(acting regrole, def_id bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE d record; released bigint;
BEGIN
  SELECT * INTO d FROM {{S}}._lifecycle_check(acting, def_id) AS x(id bigint, status text, owner_role oid, target_table text);
  IF d.status NOT IN ('paused', 'quarantined') THEN
    RAISE EXCEPTION 'transform % is %, not paused', d.target_table, d.status USING ERRCODE = '55000',
      DETAIL = 'trellis: conflict/TransformNotPaused';
  END IF;
  UPDATE {{S}}._definitions SET status = 'waiting_to_backfill', version = version + 1,
    build_started_at = NULL, build_rows_done = NULL, build_rows_estimated = NULL,
    status_detail = coalesce(status_detail, '{}') - 'capture_failure' - 'halt' || jsonb_build_object('rebuild_reason', 'resume')
  WHERE id = def_id;
  -- Skip tasks a chunk holds: it waits on the definition row we lock (a
  -- deadlock otherwise); they belong to a superseded build and are never run.
  DELETE FROM {{S}}._build_tasks WHERE id IN (SELECT id FROM {{S}}._build_tasks WHERE definition_id = def_id FOR UPDATE SKIP LOCKED);
  UPDATE {{S}}._definition_reads SET bindings = NULL WHERE definition_id = def_id;
  WITH p AS (DELETE FROM {{S}}._poison WHERE definition_id = def_id RETURNING 1) SELECT count(*) INTO released FROM p;
  DELETE FROM {{S}}._key_deaths WHERE definition_id = def_id;
  RETURN released;
END $fn$;

-- request_backfill (surface §7.1; rel resolved through the caller's search_path): every applying transform reading the
-- table (or only only_target) goes back to waiting_to_backfill; the staging
-- worker rebuilds it (every source key re-derived, ledger keys swept) while
-- its target stays readable. Takes effect at the caller's COMMIT.
CREATE OR REPLACE FUNCTION {{S}}._request_backfill(acting regrole, rel oid, source_table text, only_target text) RETURNS text[]
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE canon text; canon_other text; d record; fid bigint; out text[] := '{}';
BEGIN
  PERFORM {{S}}._check_acting(acting);
  IF rel IS NULL THEN
    RAISE EXCEPTION 'relation "%" does not exist', source_table USING ERRCODE = '42P01',
      DETAIL = 'trellis: not_found/SourceTableNotFound';
  END IF;
  SELECT format('%I.%I', n.nspname, c.relname) INTO canon FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = rel;
  IF only_target IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {{S}}._definitions x JOIN {{S}}._definition_reads r ON r.definition_id = x.id
      WHERE r.table_oid = rel AND x.compiled #>> '{spec,target,name}' = only_target) THEN
    RAISE EXCEPTION 'transform % does not read %', only_target, canon USING ERRCODE = '42704',
      DETAIL = 'trellis: not_found/TransformNotFound';
  END IF;
  -- Fences first, in id order, so no page overtakes the row locks below;
  -- whatever the status: one waiting_to_backfill now may be building by the
  -- time the loop below reads it.
  -- Ownership of every applying reader before any fence (see _lifecycle_check).
  SELECT x.target_table INTO canon_other FROM {{S}}._definitions x
  WHERE x.status IN ('backfilling', 'live') AND (only_target IS NULL OR x.compiled #>> '{spec,target,name}' = only_target)
    AND EXISTS (SELECT 1 FROM {{S}}._definition_reads r WHERE r.definition_id = x.id AND r.table_oid = rel)
    AND NOT pg_has_role(acting, x.owner_role, 'USAGE') LIMIT 1;
  IF canon_other IS NOT NULL THEN
    RAISE EXCEPTION 'must be owner of transform %', canon_other USING ERRCODE = '42501',
      DETAIL = 'trellis: permission/NotOwner';
  END IF;
  FOR fid IN SELECT x.id FROM {{S}}._definitions x
             WHERE (only_target IS NULL OR x.compiled #>> '{spec,target,name}' = only_target)
               AND EXISTS (SELECT 1 FROM {{S}}._definition_reads r WHERE r.definition_id = x.id AND r.table_oid = rel)
             ORDER BY x.id
  LOOP
    PERFORM {{S}}._fence_definition(fid);
  END LOOP;
  FOR d IN SELECT x.id, x.owner_role, x.target_table, x.compiled #>> '{spec,target,name}' AS bare
           FROM {{S}}._definitions x
           WHERE x.status IN ('backfilling', 'live') AND (only_target IS NULL OR x.compiled #>> '{spec,target,name}' = only_target)
             AND EXISTS (SELECT 1 FROM {{S}}._definition_reads r WHERE r.definition_id = x.id AND r.table_oid = rel)
           ORDER BY x.id FOR UPDATE OF x
  LOOP
    IF NOT pg_has_role(acting, d.owner_role, 'USAGE') THEN
      RAISE EXCEPTION 'must be owner of transform %', d.target_table USING ERRCODE = '42501',
        DETAIL = 'trellis: permission/NotOwner';
    END IF;
    UPDATE {{S}}._definitions SET status = 'waiting_to_backfill', version = version + 1,
      build_started_at = NULL, build_rows_done = NULL, build_rows_estimated = NULL,
      status_detail = coalesce(status_detail, '{}') || jsonb_build_object('rebuild_reason', 'request_backfill')
    WHERE id = d.id;
    DELETE FROM {{S}}._build_tasks WHERE id IN (SELECT id FROM {{S}}._build_tasks WHERE definition_id = d.id FOR UPDATE SKIP LOCKED);
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

REVOKE ALL ON FUNCTION {{S}}._lifecycle_check(regrole, bigint), {{S}}._fence_definition(bigint), {{S}}._fence_staging(bigint), {{S}}._try_fences(bigint[], boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION {{S}}._request_backfill(regrole, oid, text, text) TO PUBLIC;
GRANT EXECUTE ON FUNCTION {{S}}._lifecycle_lock(regrole, text, text), {{S}}._lifecycle_pause(regrole, bigint),
  {{S}}._lifecycle_resume(regrole, bigint) TO PUBLIC;
