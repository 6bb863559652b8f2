-- 8: a fresh aggregate build's last task writes every group row once
-- from the ledger (build.go groupsStep); its chunks write entries only.


ALTER TABLE {{S}}._build_tasks DROP CONSTRAINT _build_tasks_kind_check,
  ADD CONSTRAINT _build_tasks_kind_check CHECK (kind IN ('plan','chunk','sweep','refresh','groups'));
