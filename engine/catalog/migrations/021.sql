-- 21: a large bucket's distinct keys, written once by its first page
-- and read by range by every page after it (bulk.go, issue 18).


CREATE TABLE {{S}}._batch_keys (
  batch_seq bigint NOT NULL, bucket smallint NOT NULL,
  src_table text COLLATE "C" NOT NULL, key text COLLATE "C" NOT NULL,
  unknown_origin boolean NOT NULL, origin_lsn pg_lsn, hop smallint NOT NULL,
  staged_at timestamptz NOT NULL, origin_at timestamptz NOT NULL,
  PRIMARY KEY (batch_seq, bucket, src_table, key))
  WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 20000);
ALTER TABLE {{S}}._batch_buckets ADD COLUMN keyed boolean NOT NULL DEFAULT false;
