-- 4: the column fuse (§12.12, surface §6.1): failing rows per field of a
-- 1-1 definition, and the columns paused by it.


CREATE TABLE {{S}}._column_failures (
  definition_id bigint NOT NULL REFERENCES {{S}}._definitions ON DELETE CASCADE,
  column_name text NOT NULL, src_table text NOT NULL, key text NOT NULL,
  error text NOT NULL, sqlstate text, failed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (definition_id, column_name, src_table, key));
CREATE TABLE {{S}}._paused_columns (
  definition_id bigint NOT NULL REFERENCES {{S}}._definitions ON DELETE CASCADE,
  column_name text NOT NULL, paused_at timestamptz NOT NULL DEFAULT now(),
  last_error text, sqlstate text, cascaded_from text[] NOT NULL DEFAULT '{}',
  PRIMARY KEY (definition_id, column_name));
