-- 20: what issue 17's status and metrics read. origin_at: the original
-- writer's transaction start of a chained change (NULL for a writer's
-- own change, whose staged_at it is), for the end-to-end latency of a
-- chain. _capture_waits: a capture install that keeps timing out on its
-- table lock, with who holds it (status.capture_wait). table_name of a
-- held share: the table whose page failed (definitions.halt).


ALTER TABLE {{S}}._change_log ADD COLUMN origin_at timestamptz;
CREATE TABLE {{S}}._capture_waits (
  table_name text PRIMARY KEY,
  operation text NOT NULL CHECK (operation IN ('install','reinstall','uninstall')),
  lock_mode text NOT NULL, waiting_since timestamptz NOT NULL DEFAULT now(),
  observed_at timestamptz NOT NULL DEFAULT now(), blockers text[] NOT NULL DEFAULT '{}');
ALTER TABLE {{S}}._page_failures ADD COLUMN table_name text;
