-- 11: each process records the catalog format it runs, so the staging
-- worker starts a heap build (build.go) only when no live process is
-- older: an older drain worker would write the ledger of a definition
-- whose build keeps pages off it, and its ledger has no key index then.
-- A heap build's 'index' task builds that index beside its groups task.


ALTER TABLE {{S}}._workers ADD COLUMN format int NOT NULL DEFAULT 0;
ALTER TABLE {{S}}._build_tasks DROP CONSTRAINT _build_tasks_kind_check,
  ADD CONSTRAINT _build_tasks_kind_check CHECK (kind IN ('plan','chunk','sweep','refresh','groups','index'));
