-- 22: batches drain out of order (bulk.go): whatever asks how far the
-- drain has got reads the drained prefix, the newest batch before which
-- every batch drained, not the newest drained batch.


CREATE FUNCTION {{S}}._drained_prefix() RETURNS bigint LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT max(seq) FROM {{S}}._batches WHERE state = 'drained'
    AND seq < coalesce((SELECT min(u.seq) FROM {{S}}._batches u WHERE u.state <> 'drained'), 9223372036854775807);
$fn$;

CREATE OR REPLACE FUNCTION {{S}}._converged(token pg_lsn, viewer name) RETURNS boolean LANGUAGE sql STABLE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  WITH d AS (SELECT snap FROM {{S}}._batches WHERE seq = {{S}}._drained_prefix())
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
