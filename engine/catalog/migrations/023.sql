-- 23: a bulk bucket's key remembers whether every log row of it was a
-- JOIN target's fan-out (op 'fanout', fanout.go), and for which
-- definitions: such a key re-derives for those alone and never fans out
-- again.


ALTER TABLE {{S}}._batch_keys ADD COLUMN fanned boolean NOT NULL DEFAULT false,
  ADD COLUMN fan_defs bigint[];
