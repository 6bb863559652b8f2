-- region_sales: target shape
"region" text
"revenue" numeric
"n" bigint
"nq" bigint
"avg_price" numeric
"min_qty" integer
"max_price" numeric
"all_ok" boolean
"any_ok" boolean
"and_flags" integer
"or_flags" integer
"docs" jsonb
"__members" bigint NOT NULL
"__cnt0" bigint NOT NULL
"__sum0" numeric NOT NULL
"__cnt1" bigint NOT NULL
"__cnt2" bigint NOT NULL
"__true2" bigint NOT NULL
"__cnt3" bigint NOT NULL
"__cnt4" bigint NOT NULL
UNIQUE INDEX NULLS NOT DISTINCT (region);

-- region_sales: ledger shape
"k" text COLLATE "C" NOT NULL
"member" boolean NOT NULL DEFAULT false
"g0" text
"a0" numeric
"a1" integer
"a2" boolean
"a3" integer
"a4" jsonb
"sk0" bigint
PRIMARY KEY (k)
INDEX WHERE member (g0);

-- region_sales: capture 1
CREATE OR REPLACE FUNCTION "trellis"."_cap_insert_17a4ccc00c356cae"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_17a4ccc00c356cae$
#variable_conflict use_variable
DECLARE v_origin pg_lsn; v_hop smallint := 0; v_s text; v_ok boolean; v_n bigint; v_at timestamptz;
BEGIN
  -- A key column renamed, dropped or re-typed: never run the keyed INSERT below.
  PERFORM FROM pg_attribute WHERE attrelid = TG_RELID AND attname IN ('id')
    AND NOT attisdropped AND (attname, atttypid) IN (('id'::name, 20::oid)) AND xmax = 0;
  IF NOT FOUND THEN
    -- Changed, or seen through a snapshot that may be stale: ask the current catalog.
    BEGIN
      v_ok := ARRAY[pg_typeof((SELECT x."id" FROM trellis_new x LIMIT 0))::oid] = ARRAY[20::oid];
    EXCEPTION WHEN undefined_column THEN v_ok := false;
    END;
    IF NOT v_ok THEN
      INSERT INTO "trellis"."_change_log" (src_table, key, op, origin_lsn)
      VALUES ('public.sales', NULL, 'schema', pg_current_wal_insert_lsn());
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
  SELECT 'public.sales', a.k, 'insert', v_origin, v_hop, v_at FROM (SELECT array_agg((x."id")::text) AS k FROM trellis_new x) a WHERE a.k IS NOT NULL;
  RETURN NULL;
END $cap_17a4ccc00c356cae$;

-- region_sales: capture 2
REVOKE ALL ON FUNCTION "trellis"."_cap_insert_17a4ccc00c356cae"() FROM PUBLIC;

-- region_sales: capture 3
CREATE OR REPLACE TRIGGER "trellis_capture_insert" AFTER INSERT ON public.sales REFERENCING NEW TABLE AS trellis_new FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_insert_17a4ccc00c356cae"();

-- region_sales: capture 4
ALTER TABLE public.sales ENABLE ALWAYS TRIGGER "trellis_capture_insert";

-- region_sales: capture 5
CREATE OR REPLACE FUNCTION "trellis"."_cap_update_17a4ccc00c356cae"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_17a4ccc00c356cae$
#variable_conflict use_variable
DECLARE v_origin pg_lsn; v_hop smallint := 0; v_s text; v_ok boolean; v_n bigint; v_at timestamptz;
BEGIN
  -- A key column renamed, dropped or re-typed: never run the keyed INSERT below.
  PERFORM FROM pg_attribute WHERE attrelid = TG_RELID AND attname IN ('id')
    AND NOT attisdropped AND (attname, atttypid) IN (('id'::name, 20::oid)) AND xmax = 0;
  IF NOT FOUND THEN
    -- Changed, or seen through a snapshot that may be stale: ask the current catalog.
    BEGIN
      v_ok := ARRAY[pg_typeof((SELECT x."id" FROM trellis_new x LIMIT 0))::oid] = ARRAY[20::oid];
    EXCEPTION WHEN undefined_column THEN v_ok := false;
    END;
    IF NOT v_ok THEN
      INSERT INTO "trellis"."_change_log" (src_table, key, op, origin_lsn)
      VALUES ('public.sales', NULL, 'schema', pg_current_wal_insert_lsn());
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
  SELECT 'public.sales', a.k, 'update', v_origin, v_hop, v_at
  FROM (SELECT array_agg(coalesce(n.k, d.k)) AS k
        FROM      (SELECT (x."id")::text AS k, x AS r FROM trellis_new x) n
        FULL JOIN (SELECT (x."id")::text AS k, x AS r FROM trellis_old x) d ON n.k = d.k COLLATE "C"
        WHERE n.k IS NULL OR d.k IS NULL OR n.r *<> d.r) a   -- no-op filter: binary row images
  WHERE a.k IS NOT NULL;
  RETURN NULL;
END $cap_17a4ccc00c356cae$;

-- region_sales: capture 6
REVOKE ALL ON FUNCTION "trellis"."_cap_update_17a4ccc00c356cae"() FROM PUBLIC;

-- region_sales: capture 7
CREATE OR REPLACE TRIGGER "trellis_capture_update" AFTER UPDATE ON public.sales REFERENCING OLD TABLE AS trellis_old NEW TABLE AS trellis_new FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_update_17a4ccc00c356cae"();

-- region_sales: capture 8
ALTER TABLE public.sales ENABLE ALWAYS TRIGGER "trellis_capture_update";

-- region_sales: capture 9
CREATE OR REPLACE FUNCTION "trellis"."_cap_delete_17a4ccc00c356cae"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_17a4ccc00c356cae$
#variable_conflict use_variable
DECLARE v_origin pg_lsn; v_hop smallint := 0; v_s text; v_ok boolean; v_n bigint; v_at timestamptz;
BEGIN
  -- A key column renamed, dropped or re-typed: never run the keyed INSERT below.
  PERFORM FROM pg_attribute WHERE attrelid = TG_RELID AND attname IN ('id')
    AND NOT attisdropped AND (attname, atttypid) IN (('id'::name, 20::oid)) AND xmax = 0;
  IF NOT FOUND THEN
    -- Changed, or seen through a snapshot that may be stale: ask the current catalog.
    BEGIN
      v_ok := ARRAY[pg_typeof((SELECT x."id" FROM trellis_old x LIMIT 0))::oid] = ARRAY[20::oid];
    EXCEPTION WHEN undefined_column THEN v_ok := false;
    END;
    IF NOT v_ok THEN
      INSERT INTO "trellis"."_change_log" (src_table, key, op, origin_lsn)
      VALUES ('public.sales', NULL, 'schema', pg_current_wal_insert_lsn());
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
  SELECT 'public.sales', a.k, 'delete', v_origin, v_hop, v_at FROM (SELECT array_agg((x."id")::text) AS k FROM trellis_old x) a WHERE a.k IS NOT NULL;
  RETURN NULL;
END $cap_17a4ccc00c356cae$;

-- region_sales: capture 10
REVOKE ALL ON FUNCTION "trellis"."_cap_delete_17a4ccc00c356cae"() FROM PUBLIC;

-- region_sales: capture 11
CREATE OR REPLACE TRIGGER "trellis_capture_delete" AFTER DELETE ON public.sales REFERENCING OLD TABLE AS trellis_old FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_delete_17a4ccc00c356cae"();

-- region_sales: capture 12
ALTER TABLE public.sales ENABLE ALWAYS TRIGGER "trellis_capture_delete";

-- region_sales: capture 13
CREATE OR REPLACE FUNCTION "trellis"."_cap_truncate_17a4ccc00c356cae"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_17a4ccc00c356cae$
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
  VALUES ('public.sales', NULL, 'truncate', v_origin, v_hop, v_at);
  BEGIN
    UPDATE "trellis"."_captured_tables" SET relfilenode = pg_relation_filenode(TG_RELID)
    WHERE table_name = 'public.sales' AND relfilenode IS NOT NULL;
  EXCEPTION WHEN serialization_failure THEN NULL;
  END;
  RETURN NULL;
END $cap_17a4ccc00c356cae$;

-- region_sales: capture 14
REVOKE ALL ON FUNCTION "trellis"."_cap_truncate_17a4ccc00c356cae"() FROM PUBLIC;

-- region_sales: capture 15
CREATE OR REPLACE TRIGGER "trellis_capture_truncate" AFTER TRUNCATE ON public.sales FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_truncate_17a4ccc00c356cae"();

-- region_sales: capture 16
ALTER TABLE public.sales ENABLE ALWAYS TRIGGER "trellis_capture_truncate";

-- region_sales: lock insert
INSERT INTO "public"."region_sales__ledger" (k) SELECT k FROM unnest($1::text[]) AS u(k) ORDER BY k COLLATE "C" ON CONFLICT (k) DO NOTHING;

-- region_sales: lock select
SELECT count(*) FROM (SELECT k FROM "public"."region_sales__ledger" WHERE k = ANY($1::text[]) ORDER BY k COLLATE "C" FOR UPDATE) l;

-- region_sales: derive
WITH u AS (SELECT * FROM unnest($1::text[], $2::text[]) AS u(k, p0)),
live AS (SELECT u.k, ("__s"."region") AS g0, ("__s"."price") AS a0, ("__s"."qty") AS a1, ("__s"."ok") AS a2, ("__s"."flags") AS a3, ("__s"."doc") AS a4, "__s"."id" AS sk0 FROM u JOIN "public"."sales" AS "__s" ON "__s"."id" = u.p0::bigint AND ("__s"."id")::text = u.k COLLATE "C"),
want AS (SELECT u.k, (l.k IS NOT NULL) AS member, l.g0, l.a0, l.a1, l.a2, l.a3, l.a4, l.sk0 FROM u LEFT JOIN live l ON l.k = u.k),
old AS MATERIALIZED (SELECT e.ctid AS at, e.k, e.member, e.g0, e.a0, e.a1, e.a2, e.a3, e.a4 FROM "public"."region_sales__ledger" e WHERE e.k = ANY($1::text[])),
upd AS (UPDATE "public"."region_sales__ledger" e SET member = w.member, g0 = w.g0, a0 = w.a0, a1 = w.a1, a2 = w.a2, a3 = w.a3, a4 = w.a4, sk0 = w.sk0 FROM want w
        WHERE e.ctid = ANY(ARRAY(SELECT at FROM old)) AND e.k = w.k AND e *<> ROW(w.k, w.member, w.g0, w.a0, w.a1, w.a2, w.a3, w.a4, w.sk0)::"public"."region_sales__ledger"
        RETURNING e.k),
moves AS (SELECT o.g0, -1 AS sign, o.a0, o.a1, o.a2, o.a3, o.a4 FROM old o JOIN upd USING (k) WHERE o.member
          UNION ALL
          SELECT w.g0, 1, w.a0, w.a1, w.a2, w.a3, w.a4 FROM want w JOIN upd USING (k) WHERE w.member),
d AS (SELECT g0, sum(sign) AS dm, sum(CASE WHEN a0 IS NULL THEN 0 ELSE sign END) AS dc0, coalesce(sum(a0) FILTER (WHERE sign > 0), CAST('0' AS numeric)) - coalesce(sum(a0) FILTER (WHERE sign < 0), CAST('0' AS numeric)) AS ds0, sum(CASE WHEN a1 IS NULL THEN 0 ELSE sign END) AS dc1, sum(CASE WHEN a2 IS NULL THEN 0 ELSE sign END) AS dc2, sum(CASE WHEN a2 THEN sign ELSE 0 END) AS dt2, sum(CASE WHEN a3 IS NULL THEN 0 ELSE sign END) AS dc3, sum(CASE WHEN a4 IS NULL THEN 0 ELSE sign END) AS dc4 FROM moves GROUP BY g0)
INSERT INTO "public"."region_sales" AS t ("region", "__members", "__cnt0", "__sum0", "__cnt1", "__cnt2", "__true2", "__cnt3", "__cnt4", "revenue", "n", "nq", "all_ok", "any_ok")
SELECT g0, dm, dc0, ds0, dc1, dc2, dt2, dc3, dc4, CASE WHEN dc0 = 0 THEN NULL ELSE ds0 END, dm, dc1, CASE WHEN dc2 = 0 THEN NULL ELSE dt2 = dc2 END, CASE WHEN dc2 = 0 THEN NULL ELSE dt2 > 0 END FROM d ORDER BY g0
ON CONFLICT ("region") DO UPDATE SET "__members" = t."__members" + excluded."__members", "__cnt0" = t."__cnt0" + excluded."__cnt0", "__sum0" = t."__sum0" + excluded."__sum0", "__cnt1" = t."__cnt1" + excluded."__cnt1", "__cnt2" = t."__cnt2" + excluded."__cnt2", "__true2" = t."__true2" + excluded."__true2", "__cnt3" = t."__cnt3" + excluded."__cnt3", "__cnt4" = t."__cnt4" + excluded."__cnt4", "revenue" = CASE WHEN (t."__cnt0" + excluded."__cnt0") = 0 THEN NULL ELSE (t."__sum0" + excluded."__sum0") END, "n" = (t."__members" + excluded."__members"), "nq" = (t."__cnt1" + excluded."__cnt1"), "all_ok" = CASE WHEN (t."__cnt2" + excluded."__cnt2") = 0 THEN NULL ELSE (t."__true2" + excluded."__true2") = (t."__cnt2" + excluded."__cnt2") END, "any_ok" = CASE WHEN (t."__cnt2" + excluded."__cnt2") = 0 THEN NULL ELSE (t."__true2" + excluded."__true2") > 0 END
RETURNING t.ctid;

-- region_sales: delete empty
DELETE FROM "public"."region_sales" WHERE ctid = ANY($1::tid[]) AND "__members" = 0;

-- region_sales: recompute
UPDATE "public"."region_sales" AS t SET "avg_price" = m.__r3, "min_qty" = m.__r4, "max_price" = m.__r5, "and_flags" = m.__r8, "or_flags" = m.__r9, "docs" = m.__r10 FROM (SELECT t2.ctid AS __c, r.* FROM "public"."region_sales" t2 CROSS JOIN LATERAL (SELECT avg(e.a0) AS __r3, min(e.a1) AS __r4, max(e.a0) AS __r5, bit_and(e.a3) AS __r8, bit_or(e.a3) AS __r9, jsonb_agg(e.a4 ORDER BY e.sk0) AS __r10 FROM "public"."region_sales__ledger" e WHERE e.member AND (e.g0 = t2."region" OR (e.g0 IS NULL AND t2."region" IS NULL))) r WHERE t2.ctid = ANY($1::tid[])) m WHERE t.ctid = m.__c AND (t."avg_price"::text IS DISTINCT FROM m.__r3::text OR t."min_qty"::text IS DISTINCT FROM m.__r4::text OR t."max_price"::text IS DISTINCT FROM m.__r5::text OR t."and_flags"::text IS DISTINCT FROM m.__r8::text OR t."or_flags"::text IS DISTINCT FROM m.__r9::text OR t."docs"::text IS DISTINCT FROM m.__r10::text);

-- region_sales: ledger gc
DELETE FROM "public"."region_sales__ledger" WHERE k = ANY($1::text[]) AND NOT member;

-- region_sales: range parameters 2
-- region_sales: fresh chunk
INSERT INTO "public"."region_sales__ledger" (k, member, g0, a0, a1, a2, a3, a4, sk0)
SELECT k, true, g0, a0, a1, a2, a3, a4, sk0 FROM (SELECT ("__s"."id")::text AS k, ("__s"."region") AS g0, ("__s"."price") AS a0, ("__s"."qty") AS a1, ("__s"."ok") AS a2, ("__s"."flags") AS a3, ("__s"."doc") AS a4, "__s"."id" AS sk0 FROM "public"."sales" AS "__s" WHERE ROW("__s"."id") > ROW($1::text::bigint) AND ROW("__s"."id") <= ROW($2::text::bigint)) live
WHERE (SELECT true FROM "public"."region_sales__ledger" e WHERE e.k = live.k) IS NULL ORDER BY k COLLATE "C";

-- region_sales: heap chunk
INSERT INTO "public"."region_sales__ledger" (k, member, g0, a0, a1, a2, a3, a4, sk0)
SELECT k, true, g0, a0, a1, a2, a3, a4, sk0 FROM (SELECT ("__s"."id")::text AS k, ("__s"."region") AS g0, ("__s"."price") AS a0, ("__s"."qty") AS a1, ("__s"."ok") AS a2, ("__s"."flags") AS a3, ("__s"."doc") AS a4, "__s"."id" AS sk0 FROM "public"."sales" AS "__s" WHERE ROW("__s"."id") > ROW($1::text::bigint) AND ROW("__s"."id") <= ROW($2::text::bigint)) live;

-- region_sales: rebuild chunk
WITH live AS MATERIALIZED (SELECT ("__s"."id")::text AS k, true AS member, ("__s"."region") AS g0, ("__s"."price") AS a0, ("__s"."qty") AS a1, ("__s"."ok") AS a2, ("__s"."flags") AS a3, ("__s"."doc") AS a4, "__s"."id" AS sk0 FROM "public"."sales" AS "__s" WHERE ROW("__s"."id") > ROW($1::text::bigint) AND ROW("__s"."id") <= ROW($2::text::bigint)),
old AS MATERIALIZED (SELECT e.ctid AS at, e.k, e.member, e.g0, e.a0, e.a1, e.a2, e.a3, e.a4 FROM "public"."region_sales__ledger" e WHERE e.k = ANY(ARRAY(SELECT k FROM live))),
upd AS (UPDATE "public"."region_sales__ledger" e SET member = w.member, g0 = w.g0, a0 = w.a0, a1 = w.a1, a2 = w.a2, a3 = w.a3, a4 = w.a4, sk0 = w.sk0 FROM live w
        WHERE e.ctid = ANY(ARRAY(SELECT at FROM old)) AND e.k = w.k AND e *<> ROW(w.k, w.member, w.g0, w.a0, w.a1, w.a2, w.a3, w.a4, w.sk0)::"public"."region_sales__ledger"
        RETURNING e.k),
ins AS (INSERT INTO "public"."region_sales__ledger" (k, member, g0, a0, a1, a2, a3, a4, sk0) SELECT w.k, w.member, w.g0, w.a0, w.a1, w.a2, w.a3, w.a4, w.sk0 FROM live w
        WHERE NOT EXISTS (SELECT 1 FROM old o WHERE o.k = w.k) ORDER BY w.k COLLATE "C" RETURNING k),
moves AS (SELECT o.g0, -1 AS sign, o.a0, o.a1, o.a2, o.a3, o.a4 FROM old o JOIN upd USING (k) WHERE o.member
          UNION ALL
          SELECT w.g0, 1, w.a0, w.a1, w.a2, w.a3, w.a4 FROM live w WHERE w.k IN (SELECT k FROM upd UNION ALL SELECT k FROM ins)),
d AS (SELECT g0, sum(sign) AS dm, sum(CASE WHEN a0 IS NULL THEN 0 ELSE sign END) AS dc0, coalesce(sum(a0) FILTER (WHERE sign > 0), CAST('0' AS numeric)) - coalesce(sum(a0) FILTER (WHERE sign < 0), CAST('0' AS numeric)) AS ds0, sum(CASE WHEN a1 IS NULL THEN 0 ELSE sign END) AS dc1, sum(CASE WHEN a2 IS NULL THEN 0 ELSE sign END) AS dc2, sum(CASE WHEN a2 THEN sign ELSE 0 END) AS dt2, sum(CASE WHEN a3 IS NULL THEN 0 ELSE sign END) AS dc3, sum(CASE WHEN a4 IS NULL THEN 0 ELSE sign END) AS dc4 FROM moves GROUP BY g0),
tg AS (INSERT INTO "public"."region_sales" AS t ("region", "__members", "__cnt0", "__sum0", "__cnt1", "__cnt2", "__true2", "__cnt3", "__cnt4", "revenue", "n", "nq", "all_ok", "any_ok")
SELECT g0, dm, dc0, ds0, dc1, dc2, dt2, dc3, dc4, CASE WHEN dc0 = 0 THEN NULL ELSE ds0 END, dm, dc1, CASE WHEN dc2 = 0 THEN NULL ELSE dt2 = dc2 END, CASE WHEN dc2 = 0 THEN NULL ELSE dt2 > 0 END FROM d ORDER BY g0
ON CONFLICT ("region") DO UPDATE SET "__members" = t."__members" + excluded."__members", "__cnt0" = t."__cnt0" + excluded."__cnt0", "__sum0" = t."__sum0" + excluded."__sum0", "__cnt1" = t."__cnt1" + excluded."__cnt1", "__cnt2" = t."__cnt2" + excluded."__cnt2", "__true2" = t."__true2" + excluded."__true2", "__cnt3" = t."__cnt3" + excluded."__cnt3", "__cnt4" = t."__cnt4" + excluded."__cnt4", "revenue" = CASE WHEN (t."__cnt0" + excluded."__cnt0") = 0 THEN NULL ELSE (t."__sum0" + excluded."__sum0") END, "n" = (t."__members" + excluded."__members"), "nq" = (t."__cnt1" + excluded."__cnt1"), "all_ok" = CASE WHEN (t."__cnt2" + excluded."__cnt2") = 0 THEN NULL ELSE (t."__true2" + excluded."__true2") = (t."__cnt2" + excluded."__cnt2") END, "any_ok" = CASE WHEN (t."__cnt2" + excluded."__cnt2") = 0 THEN NULL ELSE (t."__true2" + excluded."__true2") > 0 END
RETURNING t.ctid)
SELECT (SELECT count(*) FROM live), coalesce(array_agg(ctid), '{}') FROM tg;

-- region_sales: groups
INSERT INTO "public"."region_sales" ("region", "__members", "__cnt0", "__sum0", "__cnt1", "__cnt2", "__true2", "__cnt3", "__cnt4", "revenue", "n", "nq", "all_ok", "any_ok", "avg_price", "min_qty", "max_price", "and_flags", "or_flags", "docs")
SELECT g0, dm, dc0, ds0, dc1, dc2, dt2, dc3, dc4, CASE WHEN dc0 = 0 THEN NULL ELSE ds0 END, dm, dc1, CASE WHEN dc2 = 0 THEN NULL ELSE dt2 = dc2 END, CASE WHEN dc2 = 0 THEN NULL ELSE dt2 > 0 END, __r3, __r4, __r5, __r8, __r9, __r10 FROM (SELECT g0, count(*) AS dm, count(a0) AS dc0, coalesce(sum(a0), CAST('0' AS numeric)) AS ds0, count(a1) AS dc1, count(a2) AS dc2, count(*) FILTER (WHERE a2) AS dt2, count(a3) AS dc3, count(a4) AS dc4, avg(e.a0) AS __r3, min(e.a1) AS __r4, max(e.a0) AS __r5, bit_and(e.a3) AS __r8, bit_or(e.a3) AS __r9, jsonb_agg(e.a4 ORDER BY e.sk0) AS __r10
  FROM (SELECT g0, a0, a1, a2, a3, a4, sk0 FROM "public"."region_sales__ledger" WHERE member) e GROUP BY g0) d
ORDER BY g0;

-- region_sales: reconcile
INSERT INTO "public"."region_sales" AS t ("region", "__members", "__cnt0", "__sum0", "__cnt1", "__cnt2", "__true2", "__cnt3", "__cnt4", "revenue", "n", "nq", "all_ok", "any_ok", "avg_price", "min_qty", "max_price", "and_flags", "or_flags", "docs")
SELECT g0, dm, dc0, ds0, dc1, dc2, dt2, dc3, dc4, CASE WHEN dc0 = 0 THEN NULL ELSE ds0 END, dm, dc1, CASE WHEN dc2 = 0 THEN NULL ELSE dt2 = dc2 END, CASE WHEN dc2 = 0 THEN NULL ELSE dt2 > 0 END, __r3, __r4, __r5, __r8, __r9, __r10 FROM (SELECT g0, count(*) AS dm, count(a0) AS dc0, coalesce(sum(a0), CAST('0' AS numeric)) AS ds0, count(a1) AS dc1, count(a2) AS dc2, count(*) FILTER (WHERE a2) AS dt2, count(a3) AS dc3, count(a4) AS dc4, avg(e.a0) AS __r3, min(e.a1) AS __r4, max(e.a0) AS __r5, bit_and(e.a3) AS __r8, bit_or(e.a3) AS __r9, jsonb_agg(e.a4 ORDER BY e.sk0) AS __r10
  FROM (SELECT g0, a0, a1, a2, a3, a4, sk0 FROM "public"."region_sales__ledger" WHERE member) e GROUP BY g0) d
ON CONFLICT ("region") DO UPDATE SET "__members" = excluded."__members", "__cnt0" = excluded."__cnt0", "__sum0" = excluded."__sum0", "__cnt1" = excluded."__cnt1", "__cnt2" = excluded."__cnt2", "__true2" = excluded."__true2", "__cnt3" = excluded."__cnt3", "__cnt4" = excluded."__cnt4", "revenue" = excluded."revenue", "n" = excluded."n", "nq" = excluded."nq", "all_ok" = excluded."all_ok", "any_ok" = excluded."any_ok", "avg_price" = excluded."avg_price", "min_qty" = excluded."min_qty", "max_price" = excluded."max_price", "and_flags" = excluded."and_flags", "or_flags" = excluded."or_flags", "docs" = excluded."docs" WHERE record_image_ne(ROW(t."__members", t."__cnt0", t."__sum0", t."__cnt1", t."__cnt2", t."__true2", t."__cnt3", t."__cnt4", t."revenue", t."n", t."nq", t."all_ok", t."any_ok", t."avg_price", t."min_qty", t."max_price", t."and_flags", t."or_flags", t."docs"), ROW(excluded."__members", excluded."__cnt0", excluded."__sum0", excluded."__cnt1", excluded."__cnt2", excluded."__true2", excluded."__cnt3", excluded."__cnt4", excluded."revenue", excluded."n", excluded."nq", excluded."all_ok", excluded."any_ok", excluded."avg_price", excluded."min_qty", excluded."max_price", excluded."and_flags", excluded."or_flags", excluded."docs"));

-- region_sales: prune
DELETE FROM "public"."region_sales" AS t WHERE NOT EXISTS (SELECT 1 FROM (SELECT g0 AS "region" FROM "public"."region_sales__ledger" WHERE member) e WHERE (CASE WHEN num_nulls(e."region") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', e."region"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END) = (CASE WHEN num_nulls(t."region") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', t."region"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END));

-- region_sales: refresh
UPDATE "public"."region_sales" AS t SET "revenue" = m.__v0, "n" = m.__v1, "nq" = m.__v2, "avg_price" = m.__v3, "min_qty" = m.__v4, "max_price" = m.__v5, "all_ok" = m.__v6, "any_ok" = m.__v7, "and_flags" = m.__v8, "or_flags" = m.__v9, "docs" = m.__v10 FROM (SELECT t2.ctid AS __c, CASE WHEN t2."__cnt0" = 0 THEN NULL ELSE t2."__sum0" END AS __v0, t2."__members" AS __v1, t2."__cnt1" AS __v2, (SELECT avg(e.a0) FROM "public"."region_sales__ledger" e WHERE e.member AND (e.g0 = t2."region" OR (e.g0 IS NULL AND t2."region" IS NULL))) AS __v3, (SELECT min(e.a1) FROM "public"."region_sales__ledger" e WHERE e.member AND (e.g0 = t2."region" OR (e.g0 IS NULL AND t2."region" IS NULL))) AS __v4, (SELECT max(e.a0) FROM "public"."region_sales__ledger" e WHERE e.member AND (e.g0 = t2."region" OR (e.g0 IS NULL AND t2."region" IS NULL))) AS __v5, CASE WHEN t2."__cnt2" = 0 THEN NULL ELSE t2."__true2" = t2."__cnt2" END AS __v6, CASE WHEN t2."__cnt2" = 0 THEN NULL ELSE t2."__true2" > 0 END AS __v7, (SELECT bit_and(e.a3) FROM "public"."region_sales__ledger" e WHERE e.member AND (e.g0 = t2."region" OR (e.g0 IS NULL AND t2."region" IS NULL))) AS __v8, (SELECT bit_or(e.a3) FROM "public"."region_sales__ledger" e WHERE e.member AND (e.g0 = t2."region" OR (e.g0 IS NULL AND t2."region" IS NULL))) AS __v9, (SELECT jsonb_agg(e.a4 ORDER BY e.sk0) FROM "public"."region_sales__ledger" e WHERE e.member AND (e.g0 = t2."region" OR (e.g0 IS NULL AND t2."region" IS NULL))) AS __v10 FROM "public"."region_sales" t2) m WHERE t.ctid = m.__c AND (t."revenue"::text IS DISTINCT FROM m.__v0::text OR t."n"::text IS DISTINCT FROM m.__v1::text OR t."nq"::text IS DISTINCT FROM m.__v2::text OR t."avg_price"::text IS DISTINCT FROM m.__v3::text OR t."min_qty"::text IS DISTINCT FROM m.__v4::text OR t."max_price"::text IS DISTINCT FROM m.__v5::text OR t."all_ok"::text IS DISTINCT FROM m.__v6::text OR t."any_ok"::text IS DISTINCT FROM m.__v7::text OR t."and_flags"::text IS DISTINCT FROM m.__v8::text OR t."or_flags"::text IS DISTINCT FROM m.__v9::text OR t."docs"::text IS DISTINCT FROM m.__v10::text);

