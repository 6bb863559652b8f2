-- j_order_wide: target shape
"id" bigint NOT NULL
"amount" numeric
"customer" text
"region" text
PRIMARY KEY (id);

-- j_order_wide: ledger shape
"k" text COLLATE "C" NOT NULL
PRIMARY KEY (k);

-- j_order_wide: capture 1
CREATE OR REPLACE FUNCTION "trellis"."_cap_insert_b5295d7dca4c955d"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_b5295d7dca4c955d$
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
      VALUES ('public.j_orders', NULL, 'schema', pg_current_wal_insert_lsn());
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
  SELECT 'public.j_orders', a.k, 'insert', v_origin, v_hop, v_at FROM (SELECT array_agg((x."id")::text) AS k FROM trellis_new x) a WHERE a.k IS NOT NULL;
  RETURN NULL;
END $cap_b5295d7dca4c955d$;

-- j_order_wide: capture 2
REVOKE ALL ON FUNCTION "trellis"."_cap_insert_b5295d7dca4c955d"() FROM PUBLIC;

-- j_order_wide: capture 3
CREATE OR REPLACE TRIGGER "trellis_capture_insert" AFTER INSERT ON public.j_orders REFERENCING NEW TABLE AS trellis_new FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_insert_b5295d7dca4c955d"();

-- j_order_wide: capture 4
ALTER TABLE public.j_orders ENABLE ALWAYS TRIGGER "trellis_capture_insert";

-- j_order_wide: capture 5
CREATE OR REPLACE FUNCTION "trellis"."_cap_update_b5295d7dca4c955d"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_b5295d7dca4c955d$
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
      VALUES ('public.j_orders', NULL, 'schema', pg_current_wal_insert_lsn());
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
  SELECT 'public.j_orders', a.k, 'update', v_origin, v_hop, v_at
  FROM (SELECT array_agg(coalesce(n.k, d.k)) AS k
        FROM      (SELECT (x."id")::text AS k, x AS r FROM trellis_new x) n
        FULL JOIN (SELECT (x."id")::text AS k, x AS r FROM trellis_old x) d ON n.k = d.k COLLATE "C"
        WHERE n.k IS NULL OR d.k IS NULL OR n.r *<> d.r) a   -- no-op filter: binary row images
  WHERE a.k IS NOT NULL;
  RETURN NULL;
END $cap_b5295d7dca4c955d$;

-- j_order_wide: capture 6
REVOKE ALL ON FUNCTION "trellis"."_cap_update_b5295d7dca4c955d"() FROM PUBLIC;

-- j_order_wide: capture 7
CREATE OR REPLACE TRIGGER "trellis_capture_update" AFTER UPDATE ON public.j_orders REFERENCING OLD TABLE AS trellis_old NEW TABLE AS trellis_new FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_update_b5295d7dca4c955d"();

-- j_order_wide: capture 8
ALTER TABLE public.j_orders ENABLE ALWAYS TRIGGER "trellis_capture_update";

-- j_order_wide: capture 9
CREATE OR REPLACE FUNCTION "trellis"."_cap_delete_b5295d7dca4c955d"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_b5295d7dca4c955d$
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
      VALUES ('public.j_orders', NULL, 'schema', pg_current_wal_insert_lsn());
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
  SELECT 'public.j_orders', a.k, 'delete', v_origin, v_hop, v_at FROM (SELECT array_agg((x."id")::text) AS k FROM trellis_old x) a WHERE a.k IS NOT NULL;
  RETURN NULL;
END $cap_b5295d7dca4c955d$;

-- j_order_wide: capture 10
REVOKE ALL ON FUNCTION "trellis"."_cap_delete_b5295d7dca4c955d"() FROM PUBLIC;

-- j_order_wide: capture 11
CREATE OR REPLACE TRIGGER "trellis_capture_delete" AFTER DELETE ON public.j_orders REFERENCING OLD TABLE AS trellis_old FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_delete_b5295d7dca4c955d"();

-- j_order_wide: capture 12
ALTER TABLE public.j_orders ENABLE ALWAYS TRIGGER "trellis_capture_delete";

-- j_order_wide: capture 13
CREATE OR REPLACE FUNCTION "trellis"."_cap_truncate_b5295d7dca4c955d"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_b5295d7dca4c955d$
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
  VALUES ('public.j_orders', NULL, 'truncate', v_origin, v_hop, v_at);
  BEGIN
    UPDATE "trellis"."_captured_tables" SET relfilenode = pg_relation_filenode(TG_RELID)
    WHERE table_name = 'public.j_orders' AND relfilenode IS NOT NULL;
  EXCEPTION WHEN serialization_failure THEN NULL;
  END;
  RETURN NULL;
END $cap_b5295d7dca4c955d$;

-- j_order_wide: capture 14
REVOKE ALL ON FUNCTION "trellis"."_cap_truncate_b5295d7dca4c955d"() FROM PUBLIC;

-- j_order_wide: capture 15
CREATE OR REPLACE TRIGGER "trellis_capture_truncate" AFTER TRUNCATE ON public.j_orders FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_truncate_b5295d7dca4c955d"();

-- j_order_wide: capture 16
ALTER TABLE public.j_orders ENABLE ALWAYS TRIGGER "trellis_capture_truncate";

-- j_order_wide: lock insert
INSERT INTO "public"."j_order_wide__ledger" (k) SELECT k FROM unnest($1::text[]) AS u(k) ORDER BY k COLLATE "C" ON CONFLICT (k) DO NOTHING;

-- j_order_wide: lock select
SELECT count(*) FROM (SELECT k FROM "public"."j_order_wide__ledger" WHERE k = ANY($1::text[]) ORDER BY k COLLATE "C" FOR UPDATE) l;

-- j_order_wide: derive
WITH u AS (SELECT * FROM unnest($1::text[], $2::text[]) AS u(k, p0)),
live AS (SELECT u.k AS __k, "__s"."id" AS __p0, ("__s"."amount") AS __f0, ("__j1"."name") AS __f1, (upper("__j2"."name")) AS __f2 FROM u JOIN "public"."j_orders" AS "__s" ON "__s"."id" = u.p0::bigint AND ("__s"."id")::text = u.k COLLATE "C" LEFT JOIN "public"."j_customers" AS "__j1" ON "__j1"."id" = "__s"."customer_id" JOIN "public"."j_regions" AS "__j2" ON "__j2"."id" = "__j1"."region_id"),
gone AS (SELECT u.* FROM u WHERE NOT EXISTS (SELECT 1 FROM live l WHERE l.__k = u.k)),
up AS (INSERT INTO "public"."j_order_wide" AS t ("id", "amount", "customer", "region") SELECT __p0, __f0, __f1, __f2 FROM live ORDER BY __k COLLATE "C"
       ON CONFLICT ("id") DO UPDATE SET "id" = excluded."id", "amount" = excluded."amount", "customer" = excluded."customer", "region" = excluded."region"
       WHERE record_image_ne(ROW(t."id", t."amount", t."customer", t."region"), ROW(excluded."id", excluded."amount", excluded."customer", excluded."region")) RETURNING 1),
del AS (DELETE FROM "public"."j_order_wide" AS t USING gone WHERE t."id" = gone.p0::bigint AND (t."id")::text = gone.k COLLATE "C" RETURNING 1)
DELETE FROM "public"."j_order_wide__ledger" e USING gone WHERE e.k = gone.k;

-- j_order_wide: field probe amount
WITH u AS (SELECT * FROM unnest($1::text[], $2::text[]) AS u(k, p0)) SELECT ("__s"."amount")::text FROM u JOIN "public"."j_orders" AS "__s" ON "__s"."id" = u.p0::bigint AND ("__s"."id")::text = u.k COLLATE "C" LEFT JOIN "public"."j_customers" AS "__j1" ON "__j1"."id" = "__s"."customer_id" JOIN "public"."j_regions" AS "__j2" ON "__j2"."id" = "__j1"."region_id";

-- j_order_wide: field probe customer
WITH u AS (SELECT * FROM unnest($1::text[], $2::text[]) AS u(k, p0)) SELECT ("__j1"."name")::text FROM u JOIN "public"."j_orders" AS "__s" ON "__s"."id" = u.p0::bigint AND ("__s"."id")::text = u.k COLLATE "C" LEFT JOIN "public"."j_customers" AS "__j1" ON "__j1"."id" = "__s"."customer_id" JOIN "public"."j_regions" AS "__j2" ON "__j2"."id" = "__j1"."region_id";

-- j_order_wide: field probe region
WITH u AS (SELECT * FROM unnest($1::text[], $2::text[]) AS u(k, p0)) SELECT (upper("__j2"."name"))::text FROM u JOIN "public"."j_orders" AS "__s" ON "__s"."id" = u.p0::bigint AND ("__s"."id")::text = u.k COLLATE "C" LEFT JOIN "public"."j_customers" AS "__j1" ON "__j1"."id" = "__s"."customer_id" JOIN "public"."j_regions" AS "__j2" ON "__j2"."id" = "__j1"."region_id";

-- j_order_wide: fan-out of join 1
SELECT DISTINCT 'public.j_orders', ("__s"."id")::text, 'fanout', $3::int8, $4::text::pg_lsn, $5::int2
FROM unnest($1::text[], $2::text[]) AS u(k, p0) JOIN "public"."j_orders" AS "__s" ON "__s"."customer_id" = u.p0::bigint;

-- j_order_wide: truncate fan-out of join 1
SELECT DISTINCT 'public.j_orders', ("__s"."id")::text, 'fanout', $1::int8, $2::text::pg_lsn, $3::int2
FROM "public"."j_orders" AS "__s"
WHERE "__s"."customer_id" IS NOT NULL;

-- j_order_wide: fan-out of join 2
SELECT DISTINCT 'public.j_orders', ("__s"."id")::text, 'fanout', $3::int8, $4::text::pg_lsn, $5::int2
FROM unnest($1::text[], $2::text[]) AS u(k, p0) JOIN "public"."j_customers" AS "__j1" ON "__j1"."region_id" = u.p0::integer
JOIN "public"."j_orders" AS "__s" ON "__j1"."id" = "__s"."customer_id";

-- j_order_wide: truncate fan-out of join 2
SELECT DISTINCT 'public.j_orders', ("__s"."id")::text, 'fanout', $1::int8, $2::text::pg_lsn, $3::int2
FROM "public"."j_customers" AS "__j1"
JOIN "public"."j_orders" AS "__s" ON "__j1"."id" = "__s"."customer_id"
WHERE "__j1"."region_id" IS NOT NULL;

-- j_order_wide: range parameters 2
-- j_order_wide: fresh chunk
INSERT INTO "public"."j_order_wide" AS t ("id", "amount", "customer", "region") SELECT __p0, __f0, __f1, __f2 FROM (SELECT "__s"."id" AS __p0, ("__s"."amount") AS __f0, ("__j1"."name") AS __f1, (upper("__j2"."name")) AS __f2 FROM "public"."j_orders" AS "__s" LEFT JOIN "public"."j_customers" AS "__j1" ON "__j1"."id" = "__s"."customer_id" JOIN "public"."j_regions" AS "__j2" ON "__j2"."id" = "__j1"."region_id" WHERE ROW("__s"."id") > ROW($1::text::bigint) AND ROW("__s"."id") <= ROW($2::text::bigint)) live WHERE NOT EXISTS (SELECT 1 FROM "public"."j_order_wide" AS t2 WHERE ROW(t2."id") > ROW($1::text::bigint) AND ROW(t2."id") <= ROW($2::text::bigint) AND t2."id" = live.__p0);

-- j_order_wide: rebuild chunk
WITH live AS MATERIALIZED (SELECT "__s"."id" AS __p0, ("__s"."amount") AS __f0, ("__j1"."name") AS __f1, (upper("__j2"."name")) AS __f2 FROM "public"."j_orders" AS "__s" LEFT JOIN "public"."j_customers" AS "__j1" ON "__j1"."id" = "__s"."customer_id" JOIN "public"."j_regions" AS "__j2" ON "__j2"."id" = "__j1"."region_id" WHERE ROW("__s"."id") > ROW($1::text::bigint) AND ROW("__s"."id") <= ROW($2::text::bigint)),
upd AS (UPDATE "public"."j_order_wide" AS t2 SET "amount" = live.__f0, "customer" = live.__f1, "region" = live.__f2 FROM live WHERE ROW(t2."id") > ROW($1::text::bigint) AND ROW(t2."id") <= ROW($2::text::bigint) AND t2."id" = live.__p0 AND (t2."amount"::text IS DISTINCT FROM live.__f0::text OR t2."customer"::text IS DISTINCT FROM live.__f1::text OR t2."region"::text IS DISTINCT FROM live.__f2::text) RETURNING 1),
ins AS (INSERT INTO "public"."j_order_wide" AS t ("id", "amount", "customer", "region") SELECT __p0, __f0, __f1, __f2 FROM live WHERE NOT EXISTS (SELECT 1 FROM "public"."j_order_wide" AS t2 WHERE ROW(t2."id") > ROW($1::text::bigint) AND ROW(t2."id") <= ROW($2::text::bigint) AND t2."id" = live.__p0) ORDER BY __p0 RETURNING 1)
SELECT count(*) FROM live;

