-- item_calc: target shape
"id" text NOT NULL
"a1" integer
"b10" integer
PRIMARY KEY (id);

-- item_calc: ledger shape
"k" text COLLATE "C" NOT NULL
PRIMARY KEY (k);

-- item_calc: capture 1
CREATE OR REPLACE FUNCTION "trellis"."_cap_insert_1db1606ea2af5bcf"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_1db1606ea2af5bcf$
#variable_conflict use_variable
DECLARE v_origin pg_lsn; v_hop smallint := 0; v_s text; v_ok boolean; v_n bigint; v_at timestamptz;
BEGIN
  -- A key column renamed, dropped or re-typed: never run the keyed INSERT below.
  PERFORM FROM pg_attribute WHERE attrelid = TG_RELID AND attname IN ('id')
    AND NOT attisdropped AND (attname, atttypid) IN (('id'::name, 25::oid)) AND xmax = 0;
  IF NOT FOUND THEN
    -- Changed, or seen through a snapshot that may be stale: ask the current catalog.
    BEGIN
      v_ok := ARRAY[pg_typeof((SELECT x."id" FROM trellis_new x LIMIT 0))::oid] = ARRAY[25::oid];
    EXCEPTION WHEN undefined_column THEN v_ok := false;
    END;
    IF NOT v_ok THEN
      INSERT INTO "trellis"."_change_log" (src_table, key, op, origin_lsn)
      VALUES ('public.items', NULL, 'schema', pg_current_wal_insert_lsn());
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
  SELECT 'public.items', a.k, 'insert', v_origin, v_hop, v_at FROM (SELECT array_agg((x."id")::text) AS k FROM trellis_new x) a WHERE a.k IS NOT NULL;
  RETURN NULL;
END $cap_1db1606ea2af5bcf$;

-- item_calc: capture 2
REVOKE ALL ON FUNCTION "trellis"."_cap_insert_1db1606ea2af5bcf"() FROM PUBLIC;

-- item_calc: capture 3
CREATE OR REPLACE TRIGGER "trellis_capture_insert" AFTER INSERT ON public.items REFERENCING NEW TABLE AS trellis_new FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_insert_1db1606ea2af5bcf"();

-- item_calc: capture 4
ALTER TABLE public.items ENABLE ALWAYS TRIGGER "trellis_capture_insert";

-- item_calc: capture 5
CREATE OR REPLACE FUNCTION "trellis"."_cap_update_1db1606ea2af5bcf"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_1db1606ea2af5bcf$
#variable_conflict use_variable
DECLARE v_origin pg_lsn; v_hop smallint := 0; v_s text; v_ok boolean; v_n bigint; v_at timestamptz;
BEGIN
  -- A key column renamed, dropped or re-typed: never run the keyed INSERT below.
  PERFORM FROM pg_attribute WHERE attrelid = TG_RELID AND attname IN ('id')
    AND NOT attisdropped AND (attname, atttypid) IN (('id'::name, 25::oid)) AND xmax = 0;
  IF NOT FOUND THEN
    -- Changed, or seen through a snapshot that may be stale: ask the current catalog.
    BEGIN
      v_ok := ARRAY[pg_typeof((SELECT x."id" FROM trellis_new x LIMIT 0))::oid] = ARRAY[25::oid];
    EXCEPTION WHEN undefined_column THEN v_ok := false;
    END;
    IF NOT v_ok THEN
      INSERT INTO "trellis"."_change_log" (src_table, key, op, origin_lsn)
      VALUES ('public.items', NULL, 'schema', pg_current_wal_insert_lsn());
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
  SELECT 'public.items', a.k, 'update', v_origin, v_hop, v_at
  FROM (SELECT array_agg(coalesce(n.k, d.k)) AS k
        FROM      (SELECT (x."id")::text AS k, x AS r FROM trellis_new x) n
        FULL JOIN (SELECT (x."id")::text AS k, x AS r FROM trellis_old x) d ON n.k = d.k COLLATE "C"
        WHERE n.k IS NULL OR d.k IS NULL OR n.r *<> d.r) a   -- no-op filter: binary row images
  WHERE a.k IS NOT NULL;
  RETURN NULL;
END $cap_1db1606ea2af5bcf$;

-- item_calc: capture 6
REVOKE ALL ON FUNCTION "trellis"."_cap_update_1db1606ea2af5bcf"() FROM PUBLIC;

-- item_calc: capture 7
CREATE OR REPLACE TRIGGER "trellis_capture_update" AFTER UPDATE ON public.items REFERENCING OLD TABLE AS trellis_old NEW TABLE AS trellis_new FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_update_1db1606ea2af5bcf"();

-- item_calc: capture 8
ALTER TABLE public.items ENABLE ALWAYS TRIGGER "trellis_capture_update";

-- item_calc: capture 9
CREATE OR REPLACE FUNCTION "trellis"."_cap_delete_1db1606ea2af5bcf"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_1db1606ea2af5bcf$
#variable_conflict use_variable
DECLARE v_origin pg_lsn; v_hop smallint := 0; v_s text; v_ok boolean; v_n bigint; v_at timestamptz;
BEGIN
  -- A key column renamed, dropped or re-typed: never run the keyed INSERT below.
  PERFORM FROM pg_attribute WHERE attrelid = TG_RELID AND attname IN ('id')
    AND NOT attisdropped AND (attname, atttypid) IN (('id'::name, 25::oid)) AND xmax = 0;
  IF NOT FOUND THEN
    -- Changed, or seen through a snapshot that may be stale: ask the current catalog.
    BEGIN
      v_ok := ARRAY[pg_typeof((SELECT x."id" FROM trellis_old x LIMIT 0))::oid] = ARRAY[25::oid];
    EXCEPTION WHEN undefined_column THEN v_ok := false;
    END;
    IF NOT v_ok THEN
      INSERT INTO "trellis"."_change_log" (src_table, key, op, origin_lsn)
      VALUES ('public.items', NULL, 'schema', pg_current_wal_insert_lsn());
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
  SELECT 'public.items', a.k, 'delete', v_origin, v_hop, v_at FROM (SELECT array_agg((x."id")::text) AS k FROM trellis_old x) a WHERE a.k IS NOT NULL;
  RETURN NULL;
END $cap_1db1606ea2af5bcf$;

-- item_calc: capture 10
REVOKE ALL ON FUNCTION "trellis"."_cap_delete_1db1606ea2af5bcf"() FROM PUBLIC;

-- item_calc: capture 11
CREATE OR REPLACE TRIGGER "trellis_capture_delete" AFTER DELETE ON public.items REFERENCING OLD TABLE AS trellis_old FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_delete_1db1606ea2af5bcf"();

-- item_calc: capture 12
ALTER TABLE public.items ENABLE ALWAYS TRIGGER "trellis_capture_delete";

-- item_calc: capture 13
CREATE OR REPLACE FUNCTION "trellis"."_cap_truncate_1db1606ea2af5bcf"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_1db1606ea2af5bcf$
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
  VALUES ('public.items', NULL, 'truncate', v_origin, v_hop, v_at);
  BEGIN
    UPDATE "trellis"."_captured_tables" SET relfilenode = pg_relation_filenode(TG_RELID)
    WHERE table_name = 'public.items' AND relfilenode IS NOT NULL;
  EXCEPTION WHEN serialization_failure THEN NULL;
  END;
  RETURN NULL;
END $cap_1db1606ea2af5bcf$;

-- item_calc: capture 14
REVOKE ALL ON FUNCTION "trellis"."_cap_truncate_1db1606ea2af5bcf"() FROM PUBLIC;

-- item_calc: capture 15
CREATE OR REPLACE TRIGGER "trellis_capture_truncate" AFTER TRUNCATE ON public.items FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_truncate_1db1606ea2af5bcf"();

-- item_calc: capture 16
ALTER TABLE public.items ENABLE ALWAYS TRIGGER "trellis_capture_truncate";

-- item_calc: lock insert
INSERT INTO "public"."item_calc__ledger" (k) SELECT k FROM unnest($1::text[]) AS u(k) ORDER BY k COLLATE "C" ON CONFLICT (k) DO NOTHING;

-- item_calc: lock select
SELECT count(*) FROM (SELECT k FROM "public"."item_calc__ledger" WHERE k = ANY($1::text[]) ORDER BY k COLLATE "C" FOR UPDATE) l;

-- item_calc: derive
WITH u AS (SELECT * FROM unnest($1::text[], $2::text[]) AS u(k, p0)),
live AS (SELECT u.k AS __k, "__s"."id" AS __p0, ("__s"."a" + 1) AS __f0 FROM u JOIN "public"."items" AS "__s" ON "__s"."id" = u.p0::text AND ("__s"."id")::text = u.k COLLATE "C"),
gone AS (SELECT u.* FROM u WHERE NOT EXISTS (SELECT 1 FROM live l WHERE l.__k = u.k)),
up AS (INSERT INTO "public"."item_calc" AS t ("id", "a1") SELECT __p0, __f0 FROM live ORDER BY __k COLLATE "C"
       ON CONFLICT ("id") DO UPDATE SET "id" = excluded."id", "a1" = excluded."a1"
       WHERE record_image_ne(ROW(t."id", t."a1"), ROW(excluded."id", excluded."a1")) RETURNING 1),
del AS (DELETE FROM "public"."item_calc" AS t USING gone WHERE t."id" = gone.p0::text AND (t."id")::text = gone.k COLLATE "C" RETURNING 1)
DELETE FROM "public"."item_calc__ledger" e USING gone WHERE e.k = gone.k;

-- item_calc: field probe a1
WITH u AS (SELECT * FROM unnest($1::text[], $2::text[]) AS u(k, p0)) SELECT ("__s"."a" + 1)::text FROM u JOIN "public"."items" AS "__s" ON "__s"."id" = u.p0::text AND ("__s"."id")::text = u.k COLLATE "C";

-- item_calc: range parameters 2
-- item_calc: fresh chunk
INSERT INTO "public"."item_calc" AS t ("id", "a1") SELECT __p0, __f0 FROM (SELECT "__s"."id" AS __p0, ("__s"."a" + 1) AS __f0 FROM "public"."items" AS "__s" WHERE ROW("__s"."id") > ROW($1::text::text) AND ROW("__s"."id") <= ROW($2::text::text)) live WHERE NOT EXISTS (SELECT 1 FROM "public"."item_calc" AS t2 WHERE ROW(t2."id") > ROW($1::text::text) AND ROW(t2."id") <= ROW($2::text::text) AND t2."id" = live.__p0);

-- item_calc: rebuild chunk
WITH live AS MATERIALIZED (SELECT "__s"."id" AS __p0, ("__s"."a" + 1) AS __f0 FROM "public"."items" AS "__s" WHERE ROW("__s"."id") > ROW($1::text::text) AND ROW("__s"."id") <= ROW($2::text::text)),
upd AS (UPDATE "public"."item_calc" AS t2 SET "a1" = live.__f0 FROM live WHERE ROW(t2."id") > ROW($1::text::text) AND ROW(t2."id") <= ROW($2::text::text) AND t2."id" = live.__p0 AND (t2."a1"::text IS DISTINCT FROM live.__f0::text) RETURNING 1),
ins AS (INSERT INTO "public"."item_calc" AS t ("id", "a1") SELECT __p0, __f0 FROM live WHERE NOT EXISTS (SELECT 1 FROM "public"."item_calc" AS t2 WHERE ROW(t2."id") > ROW($1::text::text) AND ROW(t2."id") <= ROW($2::text::text) AND t2."id" = live.__p0) ORDER BY __p0 RETURNING 1)
SELECT count(*) FROM live;

