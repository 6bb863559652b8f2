-- 18: the staging singleton's advisory key, random and readable by the
-- workers' role only (staging.go). A key derived from the schema name
-- could be computed and taken by any role before a staging worker.

CREATE TABLE {{S}}._staging_key (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  key bigint NOT NULL, rotations bigint NOT NULL DEFAULT 0);
INSERT INTO {{S}}._staging_key (key) VALUES (('x' || substr(md5(gen_random_uuid()::text), 1, 16))::bit(64)::int8);