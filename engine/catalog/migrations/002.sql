-- 2: quarantine (§12.12): deaths per (definition, table, key); build
-- tasks record their SQLSTATE.


CREATE TABLE {{S}}._key_deaths (
  definition_id bigint NOT NULL REFERENCES {{S}}._definitions ON DELETE CASCADE,
  src_table text NOT NULL, key text NOT NULL,
  deaths int NOT NULL DEFAULT 0, last_error text, last_sqlstate text,
  last_failed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (definition_id, src_table, key));
CREATE INDEX ON {{S}}._key_deaths (src_table, key);
CREATE INDEX ON {{S}}._poison (src_table, key);
ALTER TABLE {{S}}._build_tasks ADD COLUMN last_sqlstate text;
