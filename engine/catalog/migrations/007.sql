-- 7: keys a page skipped for a definition a client transaction holds
-- locked (§12.8 "Locks held by a client transaction"): counted by
-- convergence like held keys until the staging worker stages them
-- again (the lock ended with the definition applying) or drops them
-- (paused, rebuilding or dropped: the rebuild covers them). whole: the
-- page also truncated the table, so the definition is rebuilt. No
-- foreign key: its check would share-lock the very definition row the
-- client holds; the staging worker deletes a dropped definition's rows.


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
