-- site_days: target shape
"site" text
"day" date
"total_ms" bigint
"n" bigint
"__members" bigint NOT NULL
"__cnt0" bigint NOT NULL
"__sum0" bigint NOT NULL
UNIQUE INDEX NULLS NOT DISTINCT (site, day);

-- site_days: ledger shape
"k" text COLLATE "C" NOT NULL
"member" boolean NOT NULL DEFAULT false
"g0" text
"g1" date
"a0" integer
PRIMARY KEY (k);

-- site_days: capture 1
CREATE OR REPLACE FUNCTION "trellis"."_cap_insert_d3cc3c26b2c0dda3"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_d3cc3c26b2c0dda3$
#variable_conflict use_variable
DECLARE v_origin pg_lsn; v_hop smallint := 0; v_s text; v_ok boolean; v_n bigint; v_at timestamptz;
BEGIN
  -- A key column renamed, dropped or re-typed: never run the keyed INSERT below.
  PERFORM FROM pg_attribute WHERE attrelid = TG_RELID AND attname IN ('id')
    AND NOT attisdropped AND (attname, atttypid) IN (('id'::name, 2950::oid)) AND xmax = 0;
  IF NOT FOUND THEN
    -- Changed, or seen through a snapshot that may be stale: ask the current catalog.
    BEGIN
      v_ok := ARRAY[pg_typeof((SELECT x."id" FROM trellis_new x LIMIT 0))::oid] = ARRAY[2950::oid];
    EXCEPTION WHEN undefined_column THEN v_ok := false;
    END;
    IF NOT v_ok THEN
      INSERT INTO "trellis"."_change_log" (src_table, key, op, origin_lsn)
      VALUES ('public.visits', NULL, 'schema', pg_current_wal_insert_lsn());
      RETURN NULL;
    END IF;
  END IF;
  -- Inherit origin and hop only when a Trellis drain is the writer (chains).
  -- An application's writer evaluates one condition here, not a setting
  -- (each PL/pgSQL expression costs a snapshot in a volatile function).
  IF session_user = '{{WORKER}}' AND coalesce(current_setting('trellis.origin', true), '') <> '' THEN
    v_s := current_setting('trellis.origin', true);
    v_origin := CASE v_s WHEN 'unknown' THEN NULL ELSE v_s::pg_lsn END;
    v_hop := coalesce(nullif(current_setting('trellis.hop', true), '')::smallint, 0);
    -- The chain's original write (epoch seconds), for its end-to-end latency.
    v_at := to_timestamp(nullif(current_setting('trellis.origin_at', true), '')::float8);
  ELSE
    v_origin := pg_current_wal_insert_lsn();
  END IF;
  INSERT INTO "trellis"."_change_log" (src_table, keys, op, origin_lsn, hop, origin_at)
  SELECT 'public.visits', a.k, 'insert', v_origin, v_hop, v_at FROM (SELECT array_agg((x."id")::text) AS k FROM trellis_new x) a WHERE a.k IS NOT NULL;
  RETURN NULL;
END $cap_d3cc3c26b2c0dda3$;

-- site_days: capture 2
REVOKE ALL ON FUNCTION "trellis"."_cap_insert_d3cc3c26b2c0dda3"() FROM PUBLIC;

-- site_days: capture 3
CREATE OR REPLACE TRIGGER "trellis_capture_insert" AFTER INSERT ON public.visits REFERENCING NEW TABLE AS trellis_new FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_insert_d3cc3c26b2c0dda3"();

-- site_days: capture 4
ALTER TABLE public.visits ENABLE ALWAYS TRIGGER "trellis_capture_insert";

-- site_days: capture 5
CREATE OR REPLACE FUNCTION "trellis"."_cap_update_d3cc3c26b2c0dda3"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_d3cc3c26b2c0dda3$
#variable_conflict use_variable
DECLARE v_origin pg_lsn; v_hop smallint := 0; v_s text; v_ok boolean; v_n bigint; v_at timestamptz;
BEGIN
  -- A key column renamed, dropped or re-typed: never run the keyed INSERT below.
  PERFORM FROM pg_attribute WHERE attrelid = TG_RELID AND attname IN ('id')
    AND NOT attisdropped AND (attname, atttypid) IN (('id'::name, 2950::oid)) AND xmax = 0;
  IF NOT FOUND THEN
    -- Changed, or seen through a snapshot that may be stale: ask the current catalog.
    BEGIN
      v_ok := ARRAY[pg_typeof((SELECT x."id" FROM trellis_new x LIMIT 0))::oid] = ARRAY[2950::oid];
    EXCEPTION WHEN undefined_column THEN v_ok := false;
    END;
    IF NOT v_ok THEN
      INSERT INTO "trellis"."_change_log" (src_table, key, op, origin_lsn)
      VALUES ('public.visits', NULL, 'schema', pg_current_wal_insert_lsn());
      RETURN NULL;
    END IF;
  END IF;
  -- Inherit origin and hop only when a Trellis drain is the writer (chains).
  -- An application's writer evaluates one condition here, not a setting
  -- (each PL/pgSQL expression costs a snapshot in a volatile function).
  IF session_user = '{{WORKER}}' AND coalesce(current_setting('trellis.origin', true), '') <> '' THEN
    v_s := current_setting('trellis.origin', true);
    v_origin := CASE v_s WHEN 'unknown' THEN NULL ELSE v_s::pg_lsn END;
    v_hop := coalesce(nullif(current_setting('trellis.hop', true), '')::smallint, 0);
    -- The chain's original write (epoch seconds), for its end-to-end latency.
    v_at := to_timestamp(nullif(current_setting('trellis.origin_at', true), '')::float8);
  ELSE
    v_origin := pg_current_wal_insert_lsn();
  END IF;
  INSERT INTO "trellis"."_change_log" (src_table, keys, op, origin_lsn, hop, origin_at)
  SELECT 'public.visits', a.k, 'update', v_origin, v_hop, v_at
  FROM (SELECT array_agg(coalesce(n.k, d.k)) AS k
        FROM      (SELECT (x."id")::text AS k, x AS r FROM trellis_new x) n
        FULL JOIN (SELECT (x."id")::text AS k, x AS r FROM trellis_old x) d ON n.k = d.k COLLATE "C"
        WHERE n.k IS NULL OR d.k IS NULL OR n.r *<> d.r) a   -- no-op filter: binary row images
  WHERE a.k IS NOT NULL;
  RETURN NULL;
END $cap_d3cc3c26b2c0dda3$;

-- site_days: capture 6
REVOKE ALL ON FUNCTION "trellis"."_cap_update_d3cc3c26b2c0dda3"() FROM PUBLIC;

-- site_days: capture 7
CREATE OR REPLACE TRIGGER "trellis_capture_update" AFTER UPDATE ON public.visits REFERENCING OLD TABLE AS trellis_old NEW TABLE AS trellis_new FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_update_d3cc3c26b2c0dda3"();

-- site_days: capture 8
ALTER TABLE public.visits ENABLE ALWAYS TRIGGER "trellis_capture_update";

-- site_days: capture 9
CREATE OR REPLACE FUNCTION "trellis"."_cap_delete_d3cc3c26b2c0dda3"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_d3cc3c26b2c0dda3$
#variable_conflict use_variable
DECLARE v_origin pg_lsn; v_hop smallint := 0; v_s text; v_ok boolean; v_n bigint; v_at timestamptz;
BEGIN
  -- A key column renamed, dropped or re-typed: never run the keyed INSERT below.
  PERFORM FROM pg_attribute WHERE attrelid = TG_RELID AND attname IN ('id')
    AND NOT attisdropped AND (attname, atttypid) IN (('id'::name, 2950::oid)) AND xmax = 0;
  IF NOT FOUND THEN
    -- Changed, or seen through a snapshot that may be stale: ask the current catalog.
    BEGIN
      v_ok := ARRAY[pg_typeof((SELECT x."id" FROM trellis_old x LIMIT 0))::oid] = ARRAY[2950::oid];
    EXCEPTION WHEN undefined_column THEN v_ok := false;
    END;
    IF NOT v_ok THEN
      INSERT INTO "trellis"."_change_log" (src_table, key, op, origin_lsn)
      VALUES ('public.visits', NULL, 'schema', pg_current_wal_insert_lsn());
      RETURN NULL;
    END IF;
  END IF;
  -- Inherit origin and hop only when a Trellis drain is the writer (chains).
  -- An application's writer evaluates one condition here, not a setting
  -- (each PL/pgSQL expression costs a snapshot in a volatile function).
  IF session_user = '{{WORKER}}' AND coalesce(current_setting('trellis.origin', true), '') <> '' THEN
    v_s := current_setting('trellis.origin', true);
    v_origin := CASE v_s WHEN 'unknown' THEN NULL ELSE v_s::pg_lsn END;
    v_hop := coalesce(nullif(current_setting('trellis.hop', true), '')::smallint, 0);
    -- The chain's original write (epoch seconds), for its end-to-end latency.
    v_at := to_timestamp(nullif(current_setting('trellis.origin_at', true), '')::float8);
  ELSE
    v_origin := pg_current_wal_insert_lsn();
  END IF;
  INSERT INTO "trellis"."_change_log" (src_table, keys, op, origin_lsn, hop, origin_at)
  SELECT 'public.visits', a.k, 'delete', v_origin, v_hop, v_at FROM (SELECT array_agg((x."id")::text) AS k FROM trellis_old x) a WHERE a.k IS NOT NULL;
  RETURN NULL;
END $cap_d3cc3c26b2c0dda3$;

-- site_days: capture 10
REVOKE ALL ON FUNCTION "trellis"."_cap_delete_d3cc3c26b2c0dda3"() FROM PUBLIC;

-- site_days: capture 11
CREATE OR REPLACE TRIGGER "trellis_capture_delete" AFTER DELETE ON public.visits REFERENCING OLD TABLE AS trellis_old FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_delete_d3cc3c26b2c0dda3"();

-- site_days: capture 12
ALTER TABLE public.visits ENABLE ALWAYS TRIGGER "trellis_capture_delete";

-- site_days: capture 13
CREATE OR REPLACE FUNCTION "trellis"."_cap_truncate_d3cc3c26b2c0dda3"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_d3cc3c26b2c0dda3$
#variable_conflict use_variable
DECLARE v_origin pg_lsn; v_hop smallint := 0; v_s text; v_ok boolean; v_n bigint; v_at timestamptz;
BEGIN

  -- Inherit origin and hop only when a Trellis drain is the writer (chains).
  -- An application's writer evaluates one condition here, not a setting
  -- (each PL/pgSQL expression costs a snapshot in a volatile function).
  IF session_user = '{{WORKER}}' AND coalesce(current_setting('trellis.origin', true), '') <> '' THEN
    v_s := current_setting('trellis.origin', true);
    v_origin := CASE v_s WHEN 'unknown' THEN NULL ELSE v_s::pg_lsn END;
    v_hop := coalesce(nullif(current_setting('trellis.hop', true), '')::smallint, 0);
    -- The chain's original write (epoch seconds), for its end-to-end latency.
    v_at := to_timestamp(nullif(current_setting('trellis.origin_at', true), '')::float8);
  ELSE
    v_origin := pg_current_wal_insert_lsn();
  END IF;
  INSERT INTO "trellis"."_change_log" (src_table, key, op, origin_lsn, hop, origin_at)
  VALUES ('public.visits', NULL, 'truncate', v_origin, v_hop, v_at);
  BEGIN
    UPDATE "trellis"."_captured_tables" SET relfilenode = pg_relation_filenode(TG_RELID)
    WHERE table_name = 'public.visits' AND relfilenode IS NOT NULL;
  EXCEPTION WHEN serialization_failure THEN NULL;
  END;
  RETURN NULL;
END $cap_d3cc3c26b2c0dda3$;

-- site_days: capture 14
REVOKE ALL ON FUNCTION "trellis"."_cap_truncate_d3cc3c26b2c0dda3"() FROM PUBLIC;

-- site_days: capture 15
CREATE OR REPLACE TRIGGER "trellis_capture_truncate" AFTER TRUNCATE ON public.visits FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_truncate_d3cc3c26b2c0dda3"();

-- site_days: capture 16
ALTER TABLE public.visits ENABLE ALWAYS TRIGGER "trellis_capture_truncate";

-- site_days: lock insert
INSERT INTO "public"."site_days__ledger" (k) SELECT k FROM unnest($1::text[]) AS u(k) ORDER BY k COLLATE "C" ON CONFLICT (k) DO NOTHING;

-- site_days: lock select
SELECT count(*) FROM (SELECT k FROM "public"."site_days__ledger" WHERE k = ANY($1::text[]) ORDER BY k COLLATE "C" FOR UPDATE) l;

-- site_days: derive
WITH u AS (SELECT * FROM unnest($1::text[], $2::text[]) AS u(k, p0)),
live AS (SELECT u.k, ("__s"."site") AS g0, ("__s"."day") AS g1, ("__s"."ms") AS a0 FROM u JOIN "public"."visits" AS "__s" ON "__s"."id" = u.p0::uuid AND ("__s"."id")::text = u.k COLLATE "C"),
want AS (SELECT u.k, (l.k IS NOT NULL) AS member, l.g0, l.g1, l.a0 FROM u LEFT JOIN live l ON l.k = u.k),
old AS MATERIALIZED (SELECT e.ctid AS at, e.k, e.member, e.g0, e.g1, e.a0 FROM "public"."site_days__ledger" e WHERE e.k = ANY($1::text[])),
upd AS (UPDATE "public"."site_days__ledger" e SET member = w.member, g0 = w.g0, g1 = w.g1, a0 = w.a0 FROM want w
        WHERE e.ctid = ANY(ARRAY(SELECT at FROM old)) AND e.k = w.k AND e *<> ROW(w.k, w.member, w.g0, w.g1, w.a0)::"public"."site_days__ledger"
        RETURNING e.k),
moves AS (SELECT o.g0, o.g1, -1 AS sign, o.a0 FROM old o JOIN upd USING (k) WHERE o.member
          UNION ALL
          SELECT w.g0, w.g1, 1, w.a0 FROM want w JOIN upd USING (k) WHERE w.member),
d AS (SELECT g0, g1, sum(sign) AS dm, sum(CASE WHEN a0 IS NULL THEN 0 ELSE sign END) AS dc0, coalesce(sum(a0) FILTER (WHERE sign > 0), CAST('0' AS bigint)) - coalesce(sum(a0) FILTER (WHERE sign < 0), CAST('0' AS bigint)) AS ds0 FROM moves GROUP BY g0, g1)
INSERT INTO "public"."site_days" AS t ("site", "day", "__members", "__cnt0", "__sum0", "total_ms", "n")
SELECT g0, g1, dm, dc0, ds0, CASE WHEN dc0 = 0 THEN NULL ELSE ds0 END, dm FROM d ORDER BY g0, g1
ON CONFLICT ("site", "day") DO UPDATE SET "__members" = t."__members" + excluded."__members", "__cnt0" = t."__cnt0" + excluded."__cnt0", "__sum0" = t."__sum0" + excluded."__sum0", "total_ms" = CASE WHEN (t."__cnt0" + excluded."__cnt0") = 0 THEN NULL ELSE (t."__sum0" + excluded."__sum0") END, "n" = (t."__members" + excluded."__members")
RETURNING t.ctid;

-- site_days: delete empty
DELETE FROM "public"."site_days" WHERE ctid = ANY($1::tid[]) AND "__members" = 0;

-- site_days: ledger gc
DELETE FROM "public"."site_days__ledger" WHERE k = ANY($1::text[]) AND NOT member;

-- site_days: range parameters 2
-- site_days: fresh chunk
INSERT INTO "public"."site_days__ledger" (k, member, g0, g1, a0)
SELECT k, true, g0, g1, a0 FROM (SELECT ("__s"."id")::text AS k, ("__s"."site") AS g0, ("__s"."day") AS g1, ("__s"."ms") AS a0 FROM "public"."visits" AS "__s" WHERE ROW("__s"."id") > ROW($1::text::uuid) AND ROW("__s"."id") <= ROW($2::text::uuid)) live
WHERE (SELECT true FROM "public"."site_days__ledger" e WHERE e.k = live.k) IS NULL ORDER BY k COLLATE "C";

-- site_days: heap chunk
INSERT INTO "public"."site_days__ledger" (k, member, g0, g1, a0)
SELECT k, true, g0, g1, a0 FROM (SELECT ("__s"."id")::text AS k, ("__s"."site") AS g0, ("__s"."day") AS g1, ("__s"."ms") AS a0 FROM "public"."visits" AS "__s" WHERE ROW("__s"."id") > ROW($1::text::uuid) AND ROW("__s"."id") <= ROW($2::text::uuid)) live;

-- site_days: rebuild chunk
WITH live AS MATERIALIZED (SELECT ("__s"."id")::text AS k, true AS member, ("__s"."site") AS g0, ("__s"."day") AS g1, ("__s"."ms") AS a0 FROM "public"."visits" AS "__s" WHERE ROW("__s"."id") > ROW($1::text::uuid) AND ROW("__s"."id") <= ROW($2::text::uuid)),
old AS MATERIALIZED (SELECT e.ctid AS at, e.k, e.member, e.g0, e.g1, e.a0 FROM "public"."site_days__ledger" e WHERE e.k = ANY(ARRAY(SELECT k FROM live))),
upd AS (UPDATE "public"."site_days__ledger" e SET member = w.member, g0 = w.g0, g1 = w.g1, a0 = w.a0 FROM live w
        WHERE e.ctid = ANY(ARRAY(SELECT at FROM old)) AND e.k = w.k AND e *<> ROW(w.k, w.member, w.g0, w.g1, w.a0)::"public"."site_days__ledger"
        RETURNING e.k),
ins AS (INSERT INTO "public"."site_days__ledger" (k, member, g0, g1, a0) SELECT w.k, w.member, w.g0, w.g1, w.a0 FROM live w
        WHERE NOT EXISTS (SELECT 1 FROM old o WHERE o.k = w.k) ORDER BY w.k COLLATE "C" RETURNING k),
moves AS (SELECT o.g0, o.g1, -1 AS sign, o.a0 FROM old o JOIN upd USING (k) WHERE o.member
          UNION ALL
          SELECT w.g0, w.g1, 1, w.a0 FROM live w WHERE w.k IN (SELECT k FROM upd UNION ALL SELECT k FROM ins)),
d AS (SELECT g0, g1, sum(sign) AS dm, sum(CASE WHEN a0 IS NULL THEN 0 ELSE sign END) AS dc0, coalesce(sum(a0) FILTER (WHERE sign > 0), CAST('0' AS bigint)) - coalesce(sum(a0) FILTER (WHERE sign < 0), CAST('0' AS bigint)) AS ds0 FROM moves GROUP BY g0, g1),
tg AS (INSERT INTO "public"."site_days" AS t ("site", "day", "__members", "__cnt0", "__sum0", "total_ms", "n")
SELECT g0, g1, dm, dc0, ds0, CASE WHEN dc0 = 0 THEN NULL ELSE ds0 END, dm FROM d ORDER BY g0, g1
ON CONFLICT ("site", "day") DO UPDATE SET "__members" = t."__members" + excluded."__members", "__cnt0" = t."__cnt0" + excluded."__cnt0", "__sum0" = t."__sum0" + excluded."__sum0", "total_ms" = CASE WHEN (t."__cnt0" + excluded."__cnt0") = 0 THEN NULL ELSE (t."__sum0" + excluded."__sum0") END, "n" = (t."__members" + excluded."__members")
RETURNING t.ctid)
SELECT (SELECT count(*) FROM live), coalesce(array_agg(ctid), '{}') FROM tg;

-- site_days: groups
INSERT INTO "public"."site_days" ("site", "day", "__members", "__cnt0", "__sum0", "total_ms", "n")
SELECT g0, g1, dm, dc0, ds0, CASE WHEN dc0 = 0 THEN NULL ELSE ds0 END, dm FROM (SELECT g0, g1, count(*) AS dm, count(a0) AS dc0, coalesce(sum(a0), CAST('0' AS bigint)) AS ds0
  FROM (SELECT g0, g1, a0 FROM "public"."site_days__ledger" WHERE member) e GROUP BY g0, g1) d
ORDER BY g0, g1;

-- site_days: reconcile
INSERT INTO "public"."site_days" AS t ("site", "day", "__members", "__cnt0", "__sum0", "total_ms", "n")
SELECT g0, g1, dm, dc0, ds0, CASE WHEN dc0 = 0 THEN NULL ELSE ds0 END, dm FROM (SELECT g0, g1, count(*) AS dm, count(a0) AS dc0, coalesce(sum(a0), CAST('0' AS bigint)) AS ds0
  FROM (SELECT g0, g1, a0 FROM "public"."site_days__ledger" WHERE member) e GROUP BY g0, g1) d
ON CONFLICT ("site", "day") DO UPDATE SET "__members" = excluded."__members", "__cnt0" = excluded."__cnt0", "__sum0" = excluded."__sum0", "total_ms" = excluded."total_ms", "n" = excluded."n" WHERE record_image_ne(ROW(t."__members", t."__cnt0", t."__sum0", t."total_ms", t."n"), ROW(excluded."__members", excluded."__cnt0", excluded."__sum0", excluded."total_ms", excluded."n"));

-- site_days: prune
DELETE FROM "public"."site_days" AS t WHERE NOT EXISTS (SELECT 1 FROM (SELECT g0 AS "site", g1 AS "day" FROM "public"."site_days__ledger" WHERE member) e WHERE (CASE WHEN num_nulls(e."site") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', e."site"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END || chr(31) || CASE WHEN num_nulls(e."day") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', e."day"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END) = (CASE WHEN num_nulls(t."site") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', t."site"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END || chr(31) || CASE WHEN num_nulls(t."day") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', t."day"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END));

-- site_days: refresh
UPDATE "public"."site_days" AS t SET "total_ms" = m.__v0, "n" = m.__v1 FROM (SELECT t2.ctid AS __c, CASE WHEN t2."__cnt0" = 0 THEN NULL ELSE t2."__sum0" END AS __v0, t2."__members" AS __v1 FROM "public"."site_days" t2) m WHERE t.ctid = m.__c AND (t."total_ms"::text IS DISTINCT FROM m.__v0::text OR t."n"::text IS DISTINCT FROM m.__v1::text);

