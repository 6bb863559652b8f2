-- order_totals: target shape
"id" bigint NOT NULL
"total" numeric
"loud" text
PRIMARY KEY (id);

-- order_totals: ledger shape
"k" text COLLATE "C" NOT NULL
PRIMARY KEY (k);

-- order_totals: capture 1
CREATE OR REPLACE FUNCTION "trellis"."_cap_insert_154c745eef260792"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_154c745eef260792$
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
      VALUES ('public.orders', NULL, 'schema', pg_current_wal_insert_lsn());
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
  SELECT 'public.orders', a.k, 'insert', v_origin, v_hop, v_at FROM (SELECT array_agg((x."id")::text) AS k FROM trellis_new x) a WHERE a.k IS NOT NULL;
  RETURN NULL;
END $cap_154c745eef260792$;

-- order_totals: capture 2
REVOKE ALL ON FUNCTION "trellis"."_cap_insert_154c745eef260792"() FROM PUBLIC;

-- order_totals: capture 3
CREATE OR REPLACE TRIGGER "trellis_capture_insert" AFTER INSERT ON public.orders REFERENCING NEW TABLE AS trellis_new FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_insert_154c745eef260792"();

-- order_totals: capture 4
ALTER TABLE public.orders ENABLE ALWAYS TRIGGER "trellis_capture_insert";

-- order_totals: capture 5
CREATE OR REPLACE FUNCTION "trellis"."_cap_update_154c745eef260792"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_154c745eef260792$
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
      VALUES ('public.orders', NULL, 'schema', pg_current_wal_insert_lsn());
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
  SELECT 'public.orders', a.k, 'update', v_origin, v_hop, v_at
  FROM (SELECT array_agg(coalesce(n.k, d.k)) AS k
        FROM      (SELECT (x."id")::text AS k, x AS r FROM trellis_new x) n
        FULL JOIN (SELECT (x."id")::text AS k, x AS r FROM trellis_old x) d ON n.k = d.k COLLATE "C"
        WHERE n.k IS NULL OR d.k IS NULL OR n.r *<> d.r) a   -- no-op filter: binary row images
  WHERE a.k IS NOT NULL;
  RETURN NULL;
END $cap_154c745eef260792$;

-- order_totals: capture 6
REVOKE ALL ON FUNCTION "trellis"."_cap_update_154c745eef260792"() FROM PUBLIC;

-- order_totals: capture 7
CREATE OR REPLACE TRIGGER "trellis_capture_update" AFTER UPDATE ON public.orders REFERENCING OLD TABLE AS trellis_old NEW TABLE AS trellis_new FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_update_154c745eef260792"();

-- order_totals: capture 8
ALTER TABLE public.orders ENABLE ALWAYS TRIGGER "trellis_capture_update";

-- order_totals: capture 9
CREATE OR REPLACE FUNCTION "trellis"."_cap_delete_154c745eef260792"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_154c745eef260792$
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
      VALUES ('public.orders', NULL, 'schema', pg_current_wal_insert_lsn());
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
  SELECT 'public.orders', a.k, 'delete', v_origin, v_hop, v_at FROM (SELECT array_agg((x."id")::text) AS k FROM trellis_old x) a WHERE a.k IS NOT NULL;
  RETURN NULL;
END $cap_154c745eef260792$;

-- order_totals: capture 10
REVOKE ALL ON FUNCTION "trellis"."_cap_delete_154c745eef260792"() FROM PUBLIC;

-- order_totals: capture 11
CREATE OR REPLACE TRIGGER "trellis_capture_delete" AFTER DELETE ON public.orders REFERENCING OLD TABLE AS trellis_old FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_delete_154c745eef260792"();

-- order_totals: capture 12
ALTER TABLE public.orders ENABLE ALWAYS TRIGGER "trellis_capture_delete";

-- order_totals: capture 13
CREATE OR REPLACE FUNCTION "trellis"."_cap_truncate_154c745eef260792"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_154c745eef260792$
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
  VALUES ('public.orders', NULL, 'truncate', v_origin, v_hop, v_at);
  BEGIN
    UPDATE "trellis"."_captured_tables" SET relfilenode = pg_relation_filenode(TG_RELID)
    WHERE table_name = 'public.orders' AND relfilenode IS NOT NULL;
  EXCEPTION WHEN serialization_failure THEN NULL;
  END;
  RETURN NULL;
END $cap_154c745eef260792$;

-- order_totals: capture 14
REVOKE ALL ON FUNCTION "trellis"."_cap_truncate_154c745eef260792"() FROM PUBLIC;

-- order_totals: capture 15
CREATE OR REPLACE TRIGGER "trellis_capture_truncate" AFTER TRUNCATE ON public.orders FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_truncate_154c745eef260792"();

-- order_totals: capture 16
ALTER TABLE public.orders ENABLE ALWAYS TRIGGER "trellis_capture_truncate";

-- order_totals: lock insert
INSERT INTO "public"."order_totals__ledger" (k) SELECT k FROM unnest($1::text[]) AS u(k) ORDER BY k COLLATE "C" ON CONFLICT (k) DO NOTHING;

-- order_totals: lock select
SELECT count(*) FROM (SELECT k FROM "public"."order_totals__ledger" WHERE k = ANY($1::text[]) ORDER BY k COLLATE "C" FOR UPDATE) l;

-- order_totals: derive
WITH u AS (SELECT * FROM unnest($1::text[], $2::text[]) AS u(k, p0)),
live AS (SELECT u.k AS __k, "__s"."id" AS __p0, ("__s"."price" + "__s"."tax") AS __f0, (upper("__s"."note")) AS __f1 FROM u JOIN "public"."orders" AS "__s" ON "__s"."id" = u.p0::bigint AND ("__s"."id")::text = u.k COLLATE "C"),
gone AS (SELECT u.* FROM u WHERE NOT EXISTS (SELECT 1 FROM live l WHERE l.__k = u.k)),
up AS (INSERT INTO "public"."order_totals" AS t ("id", "total", "loud") SELECT __p0, __f0, __f1 FROM live ORDER BY __k COLLATE "C"
       ON CONFLICT ("id") DO UPDATE SET "id" = excluded."id", "total" = excluded."total", "loud" = excluded."loud"
       WHERE record_image_ne(ROW(t."id", t."total", t."loud"), ROW(excluded."id", excluded."total", excluded."loud")) RETURNING 1),
del AS (DELETE FROM "public"."order_totals" AS t USING gone WHERE t."id" = gone.p0::bigint AND (t."id")::text = gone.k COLLATE "C" RETURNING 1)
DELETE FROM "public"."order_totals__ledger" e USING gone WHERE e.k = gone.k;

-- order_totals: field probe total
WITH u AS (SELECT * FROM unnest($1::text[], $2::text[]) AS u(k, p0)) SELECT ("__s"."price" + "__s"."tax")::text FROM u JOIN "public"."orders" AS "__s" ON "__s"."id" = u.p0::bigint AND ("__s"."id")::text = u.k COLLATE "C";

-- order_totals: field probe loud
WITH u AS (SELECT * FROM unnest($1::text[], $2::text[]) AS u(k, p0)) SELECT (upper("__s"."note"))::text FROM u JOIN "public"."orders" AS "__s" ON "__s"."id" = u.p0::bigint AND ("__s"."id")::text = u.k COLLATE "C";

-- order_totals: range parameters 2
-- order_totals: fresh chunk
INSERT INTO "public"."order_totals" AS t ("id", "total", "loud") SELECT __p0, __f0, __f1 FROM (SELECT "__s"."id" AS __p0, ("__s"."price" + "__s"."tax") AS __f0, (upper("__s"."note")) AS __f1 FROM "public"."orders" AS "__s" WHERE ROW("__s"."id") > ROW($1::text::bigint) AND ROW("__s"."id") <= ROW($2::text::bigint)) live WHERE NOT EXISTS (SELECT 1 FROM "public"."order_totals" AS t2 WHERE ROW(t2."id") > ROW($1::text::bigint) AND ROW(t2."id") <= ROW($2::text::bigint) AND t2."id" = live.__p0);

-- order_totals: rebuild chunk
WITH live AS MATERIALIZED (SELECT "__s"."id" AS __p0, ("__s"."price" + "__s"."tax") AS __f0, (upper("__s"."note")) AS __f1 FROM "public"."orders" AS "__s" WHERE ROW("__s"."id") > ROW($1::text::bigint) AND ROW("__s"."id") <= ROW($2::text::bigint)),
upd AS (UPDATE "public"."order_totals" AS t2 SET "total" = live.__f0, "loud" = live.__f1 FROM live WHERE ROW(t2."id") > ROW($1::text::bigint) AND ROW(t2."id") <= ROW($2::text::bigint) AND t2."id" = live.__p0 AND (t2."total"::text IS DISTINCT FROM live.__f0::text OR t2."loud"::text IS DISTINCT FROM live.__f1::text) RETURNING 1),
ins AS (INSERT INTO "public"."order_totals" AS t ("id", "total", "loud") SELECT __p0, __f0, __f1 FROM live WHERE NOT EXISTS (SELECT 1 FROM "public"."order_totals" AS t2 WHERE ROW(t2."id") > ROW($1::text::bigint) AND ROW(t2."id") <= ROW($2::text::bigint) AND t2."id" = live.__p0) ORDER BY __p0 RETURNING 1)
SELECT count(*) FROM live;

