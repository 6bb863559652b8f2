-- 12-15: the trust boundary (D20, D21), one slot per mechanism so the
-- branches that build them merge without renumbering: 12 ownership and
-- untrusted catalog rows, 13 per-definition failure isolation, 14 locks
-- no other role can take, 15 the workers' execution environment. An
-- empty slot is a no-op.
--
-- 12: targets and ledgers made before D20 were the defining role's; they
-- become the workers' role's, the owner keeping SELECT WITH GRANT OPTION.
-- A table the workers' role may not take over (it is neither superuser
-- nor a member of the owner) stays as it is and checkTamper pauses its
-- transform with a capture_failure saying so.


DO $m$ DECLARE r record; w name := (SELECT worker_role FROM {{S}}._instance);
BEGIN
  FOR r IN SELECT c.oid::regclass AS rel, d.owner_role::regrole AS owner FROM {{S}}._definitions d
           JOIN pg_class c ON c.oid IN (d.target_oid, d.ledger_oid) WHERE c.relowner <> (SELECT oid FROM pg_roles WHERE rolname = w) LOOP
    BEGIN
      EXECUTE format('ALTER TABLE %s OWNER TO %I', r.rel, w);
      EXECUTE format('GRANT SELECT ON %s TO %s WITH GRANT OPTION', r.rel, r.owner);
    EXCEPTION WHEN insufficient_privilege THEN
      RAISE WARNING 'trellis: % stays owned by %; its transform pauses', r.rel, r.owner;
    END;
  END LOOP;
END $m$;
