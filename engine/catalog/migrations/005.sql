-- 5: per-field pause state (grammar §4.3, D18). A paused field is local
-- (PAUSE t.c, the column fuse) and/or held by upstream fields it reads,
-- one edge per upstream->downstream pair; the edges replace the
-- cascaded_from array (the surface derives it). A 'refresh' build task
-- rewrites resumed aggregate columns from their accumulators.


ALTER TABLE {{S}}._paused_columns ADD COLUMN local boolean NOT NULL DEFAULT true;
ALTER TABLE {{S}}._paused_columns DROP COLUMN cascaded_from CASCADE;
CREATE TABLE {{S}}._column_pause_edges (
  up_definition_id bigint NOT NULL, up_column text NOT NULL,
  down_definition_id bigint NOT NULL, down_column text NOT NULL,
  PRIMARY KEY (up_definition_id, up_column, down_definition_id, down_column),
  FOREIGN KEY (up_definition_id, up_column) REFERENCES {{S}}._paused_columns ON DELETE CASCADE,
  FOREIGN KEY (down_definition_id, down_column) REFERENCES {{S}}._paused_columns ON DELETE CASCADE);
CREATE INDEX ON {{S}}._column_pause_edges (down_definition_id, down_column);
ALTER TABLE {{S}}._build_tasks DROP CONSTRAINT _build_tasks_kind_check,
  ADD CONSTRAINT _build_tasks_kind_check CHECK (kind IN ('plan','chunk','sweep','refresh'));
