-- 16: self-check jobs (selfcheck.go, surface §9): one row per job, its
-- cursor and claim saved page by page, and its divergences. At most one
-- queued or running job per definition.


CREATE TABLE {{S}}._self_checks (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  definition_id bigint NOT NULL REFERENCES {{S}}._definitions ON DELETE CASCADE,
  mode text NOT NULL CHECK (mode IN ('standard','strict')),
  timeout_ms bigint NOT NULL CHECK (timeout_ms >= 0),
  state text NOT NULL DEFAULT 'queued' CHECK (state IN ('queued','running','done','failed','cancelled')),
  created_at timestamptz NOT NULL DEFAULT now(), started_at timestamptz, finished_at timestamptz,
  claimed_by text, claimed_proc text, claim bigint NOT NULL DEFAULT 0, saved_at timestamptz,
  cursor text, rows_compared bigint NOT NULL DEFAULT 0, pages int NOT NULL DEFAULT 0,
  divergence_count int NOT NULL DEFAULT 0, outcome text, not_live_status text,
  truncated boolean NOT NULL DEFAULT false, checked_through text, error text);
CREATE UNIQUE INDEX _self_checks_one_open ON {{S}}._self_checks (definition_id) WHERE state IN ('queued','running');
CREATE TABLE {{S}}._self_check_divergences (
  job_id bigint NOT NULL REFERENCES {{S}}._self_checks ON DELETE CASCADE,
  ordinal int NOT NULL,
  kind text NOT NULL CHECK (kind IN ('cell','missing_row','extra_row','missing_column','extra_column','capture')),
  key text, column_name text, persisted text, recomputed text, table_name text, detail text,
  PRIMARY KEY (job_id, ordinal));
-- status.drain_failure.since / last_seen: when a bucket's failing run of
-- pages began and when it last failed (cleared by its next committed page).
ALTER TABLE {{S}}._batch_buckets ADD COLUMN failed_since timestamptz, ADD COLUMN failed_last timestamptz;
