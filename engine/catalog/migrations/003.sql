-- 3: capture health (§12.9): the columns each read is bound to, the
-- trigger xmins of an install; rebuild sweeps (RESUME, repairs).


ALTER TABLE {{S}}._definition_reads ADD COLUMN bindings jsonb;
ALTER TABLE {{S}}._captured_tables ADD COLUMN trigger_xmins jsonb, ADD COLUMN relfilenode oid;
ALTER TABLE {{S}}._build_tasks DROP CONSTRAINT _build_tasks_kind_check,
  ADD CONSTRAINT _build_tasks_kind_check CHECK (kind IN ('plan','chunk','sweep'));
