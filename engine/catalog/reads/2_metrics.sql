-- Read views of the proxy's metrics poller (internal/proxy catalog.go),
-- which reads as the workers' role, in one repeatable-read snapshot.


-- Pending changes per source table: keys of log rows (a row holds a
-- statement's keys) not yet covered by the drained prefix (batches drain
-- out of order, bulk.go), and the age of the oldest in seconds. Its cost
-- grows with the backlog.
CREATE OR REPLACE VIEW {{S}}._read_pending_changes AS
  WITH d AS (SELECT snap FROM {{S}}._batches WHERE seq = {{S}}._drained_prefix())
  SELECT c.src_table, sum(coalesce(cardinality(c.keys), 1))::int8 AS keys,
         extract(epoch FROM now() - min(c.staged_at))::float8 AS oldest_seconds
  FROM {{S}}._change_log c, d WHERE NOT pg_visible_in_snapshot(c.txid, d.snap) GROUP BY c.src_table;

-- Sealed batches (seq 0 is the catalog's bootstrap batch).
CREATE OR REPLACE VIEW {{S}}._read_batches AS
  SELECT b.seq, b.row_count, b.state FROM {{S}}._batches b;
