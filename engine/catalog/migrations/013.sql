-- 13: per-definition failure isolation (D21, drain.go applyShare): the
-- definition whose share of a page failed, held (its keys deferred)
-- until next_attempt_at; paused after pageFailuresToPause attempts. No
-- foreign key, as _deferred. _converged with a viewer counts only the
-- held and deferred keys of transforms the viewer can read.


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
