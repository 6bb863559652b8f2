-- 19: the definition fence as relation locks (fence.go): one empty view
-- per definition and the build mark, in a schema without PUBLIC usage,
-- so no other role can name, take or queue for them.

CREATE SCHEMA {{SF}};
REVOKE ALL ON SCHEMA {{SF}} FROM PUBLIC;
CREATE VIEW {{SF}}.build_mark AS SELECT;
DO $m$ DECLARE r record;
BEGIN
  FOR r IN SELECT id FROM {{S}}._definitions LOOP
    EXECUTE format('CREATE VIEW %I.%I AS SELECT', {{SFN}}, 'd' || r.id);
  END LOOP;
END $m$;