-- 9: the trash of DROP TRANSFORM (functions/1_privileged.sql _drop_transform): a
-- dropped transform's target and ledger are moved into a schema of
-- their own, owned by the workers' role, which the staging worker
-- drops after the statement's COMMIT (trash.go).


CREATE TABLE {{S}}._trash (
  schema_name name PRIMARY KEY, dropped_at timestamptz NOT NULL DEFAULT now(),
  attempts int NOT NULL DEFAULT 0, last_error text, next_attempt_at timestamptz);
