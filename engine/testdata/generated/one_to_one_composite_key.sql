-- line_skus: target shape
"order_id" bigint NOT NULL
"line" integer NOT NULL
"sku_lc" text
"twice" integer
PRIMARY KEY (order_id, line);

-- line_skus: ledger shape
"k" text COLLATE "C" NOT NULL
PRIMARY KEY (k);

-- line_skus: capture 1
CREATE OR REPLACE FUNCTION "trellis"."_cap_insert_b5d071e940ca610f"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_b5d071e940ca610f$
#variable_conflict use_variable
DECLARE v_origin pg_lsn; v_hop smallint := 0; v_s text; v_ok boolean; v_n bigint; v_at timestamptz;
BEGIN
  -- A key column renamed, dropped or re-typed: never run the keyed INSERT below.
  PERFORM FROM pg_attribute WHERE attrelid = TG_RELID AND attname IN ('order_id', 'line')
    AND NOT attisdropped AND (attname, atttypid) IN (('order_id'::name, 20::oid), ('line'::name, 23::oid)) AND xmax = 0;
  GET DIAGNOSTICS v_n = ROW_COUNT;
  IF v_n <> 2 THEN
    -- Changed, or seen through a snapshot that may be stale: ask the current catalog.
    BEGIN
      v_ok := ARRAY[pg_typeof((SELECT x."order_id" FROM trellis_new x LIMIT 0))::oid, pg_typeof((SELECT x."line" FROM trellis_new x LIMIT 0))::oid] = ARRAY[20::oid, 23::oid];
    EXCEPTION WHEN undefined_column THEN v_ok := false;
    END;
    IF NOT v_ok THEN
      INSERT INTO "trellis"."_change_log" (src_table, key, op, origin_lsn)
      VALUES ('public.lines', NULL, 'schema', pg_current_wal_insert_lsn());
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
  SELECT 'public.lines', a.k, 'insert', v_origin, v_hop, v_at FROM (SELECT array_agg((CASE WHEN num_nulls(x."order_id") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', x."order_id"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END || chr(31) || CASE WHEN num_nulls(x."line") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', x."line"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END)) AS k FROM trellis_new x) a WHERE a.k IS NOT NULL;
  RETURN NULL;
END $cap_b5d071e940ca610f$;

-- line_skus: capture 2
REVOKE ALL ON FUNCTION "trellis"."_cap_insert_b5d071e940ca610f"() FROM PUBLIC;

-- line_skus: capture 3
CREATE OR REPLACE TRIGGER "trellis_capture_insert" AFTER INSERT ON public.lines REFERENCING NEW TABLE AS trellis_new FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_insert_b5d071e940ca610f"();

-- line_skus: capture 4
ALTER TABLE public.lines ENABLE ALWAYS TRIGGER "trellis_capture_insert";

-- line_skus: capture 5
CREATE OR REPLACE FUNCTION "trellis"."_cap_update_b5d071e940ca610f"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_b5d071e940ca610f$
#variable_conflict use_variable
DECLARE v_origin pg_lsn; v_hop smallint := 0; v_s text; v_ok boolean; v_n bigint; v_at timestamptz;
BEGIN
  -- A key column renamed, dropped or re-typed: never run the keyed INSERT below.
  PERFORM FROM pg_attribute WHERE attrelid = TG_RELID AND attname IN ('order_id', 'line')
    AND NOT attisdropped AND (attname, atttypid) IN (('order_id'::name, 20::oid), ('line'::name, 23::oid)) AND xmax = 0;
  GET DIAGNOSTICS v_n = ROW_COUNT;
  IF v_n <> 2 THEN
    -- Changed, or seen through a snapshot that may be stale: ask the current catalog.
    BEGIN
      v_ok := ARRAY[pg_typeof((SELECT x."order_id" FROM trellis_new x LIMIT 0))::oid, pg_typeof((SELECT x."line" FROM trellis_new x LIMIT 0))::oid] = ARRAY[20::oid, 23::oid];
    EXCEPTION WHEN undefined_column THEN v_ok := false;
    END;
    IF NOT v_ok THEN
      INSERT INTO "trellis"."_change_log" (src_table, key, op, origin_lsn)
      VALUES ('public.lines', NULL, 'schema', pg_current_wal_insert_lsn());
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
  SELECT 'public.lines', a.k, 'update', v_origin, v_hop, v_at
  FROM (SELECT array_agg(coalesce(n.k, d.k)) AS k
        FROM      (SELECT (CASE WHEN num_nulls(x."order_id") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', x."order_id"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END || chr(31) || CASE WHEN num_nulls(x."line") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', x."line"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END) AS k, x AS r FROM trellis_new x) n
        FULL JOIN (SELECT (CASE WHEN num_nulls(x."order_id") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', x."order_id"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END || chr(31) || CASE WHEN num_nulls(x."line") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', x."line"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END) AS k, x AS r FROM trellis_old x) d ON n.k = d.k COLLATE "C"
        WHERE n.k IS NULL OR d.k IS NULL OR n.r *<> d.r) a   -- no-op filter: binary row images
  WHERE a.k IS NOT NULL;
  RETURN NULL;
END $cap_b5d071e940ca610f$;

-- line_skus: capture 6
REVOKE ALL ON FUNCTION "trellis"."_cap_update_b5d071e940ca610f"() FROM PUBLIC;

-- line_skus: capture 7
CREATE OR REPLACE TRIGGER "trellis_capture_update" AFTER UPDATE ON public.lines REFERENCING OLD TABLE AS trellis_old NEW TABLE AS trellis_new FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_update_b5d071e940ca610f"();

-- line_skus: capture 8
ALTER TABLE public.lines ENABLE ALWAYS TRIGGER "trellis_capture_update";

-- line_skus: capture 9
CREATE OR REPLACE FUNCTION "trellis"."_cap_delete_b5d071e940ca610f"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_b5d071e940ca610f$
#variable_conflict use_variable
DECLARE v_origin pg_lsn; v_hop smallint := 0; v_s text; v_ok boolean; v_n bigint; v_at timestamptz;
BEGIN
  -- A key column renamed, dropped or re-typed: never run the keyed INSERT below.
  PERFORM FROM pg_attribute WHERE attrelid = TG_RELID AND attname IN ('order_id', 'line')
    AND NOT attisdropped AND (attname, atttypid) IN (('order_id'::name, 20::oid), ('line'::name, 23::oid)) AND xmax = 0;
  GET DIAGNOSTICS v_n = ROW_COUNT;
  IF v_n <> 2 THEN
    -- Changed, or seen through a snapshot that may be stale: ask the current catalog.
    BEGIN
      v_ok := ARRAY[pg_typeof((SELECT x."order_id" FROM trellis_old x LIMIT 0))::oid, pg_typeof((SELECT x."line" FROM trellis_old x LIMIT 0))::oid] = ARRAY[20::oid, 23::oid];
    EXCEPTION WHEN undefined_column THEN v_ok := false;
    END;
    IF NOT v_ok THEN
      INSERT INTO "trellis"."_change_log" (src_table, key, op, origin_lsn)
      VALUES ('public.lines', NULL, 'schema', pg_current_wal_insert_lsn());
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
  SELECT 'public.lines', a.k, 'delete', v_origin, v_hop, v_at FROM (SELECT array_agg((CASE WHEN num_nulls(x."order_id") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', x."order_id"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END || chr(31) || CASE WHEN num_nulls(x."line") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', x."line"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END)) AS k FROM trellis_old x) a WHERE a.k IS NOT NULL;
  RETURN NULL;
END $cap_b5d071e940ca610f$;

-- line_skus: capture 10
REVOKE ALL ON FUNCTION "trellis"."_cap_delete_b5d071e940ca610f"() FROM PUBLIC;

-- line_skus: capture 11
CREATE OR REPLACE TRIGGER "trellis_capture_delete" AFTER DELETE ON public.lines REFERENCING OLD TABLE AS trellis_old FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_delete_b5d071e940ca610f"();

-- line_skus: capture 12
ALTER TABLE public.lines ENABLE ALWAYS TRIGGER "trellis_capture_delete";

-- line_skus: capture 13
CREATE OR REPLACE FUNCTION "trellis"."_cap_truncate_b5d071e940ca610f"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_b5d071e940ca610f$
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
  VALUES ('public.lines', NULL, 'truncate', v_origin, v_hop, v_at);
  BEGIN
    UPDATE "trellis"."_captured_tables" SET relfilenode = pg_relation_filenode(TG_RELID)
    WHERE table_name = 'public.lines' AND relfilenode IS NOT NULL;
  EXCEPTION WHEN serialization_failure THEN NULL;
  END;
  RETURN NULL;
END $cap_b5d071e940ca610f$;

-- line_skus: capture 14
REVOKE ALL ON FUNCTION "trellis"."_cap_truncate_b5d071e940ca610f"() FROM PUBLIC;

-- line_skus: capture 15
CREATE OR REPLACE TRIGGER "trellis_capture_truncate" AFTER TRUNCATE ON public.lines FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_truncate_b5d071e940ca610f"();

-- line_skus: capture 16
ALTER TABLE public.lines ENABLE ALWAYS TRIGGER "trellis_capture_truncate";

-- line_skus: lock insert
INSERT INTO "public"."line_skus__ledger" (k) SELECT k FROM unnest($1::text[]) AS u(k) ORDER BY k COLLATE "C" ON CONFLICT (k) DO NOTHING;

-- line_skus: lock select
SELECT count(*) FROM (SELECT k FROM "public"."line_skus__ledger" WHERE k = ANY($1::text[]) ORDER BY k COLLATE "C" FOR UPDATE) l;

-- line_skus: derive
WITH u AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) AS u(k, p0, p1)),
live AS (SELECT u.k AS __k, "__s"."order_id" AS __p0, "__s"."line" AS __p1, (lower("__s"."sku")) AS __f0, ("__s"."qty" * 2) AS __f1 FROM u JOIN "public"."lines" AS "__s" ON "__s"."order_id" = u.p0::bigint AND "__s"."line" = u.p1::integer AND (CASE WHEN num_nulls("__s"."order_id") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', "__s"."order_id"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END || chr(31) || CASE WHEN num_nulls("__s"."line") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', "__s"."line"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END) = u.k COLLATE "C"),
gone AS (SELECT u.* FROM u WHERE NOT EXISTS (SELECT 1 FROM live l WHERE l.__k = u.k)),
up AS (INSERT INTO "public"."line_skus" AS t ("order_id", "line", "sku_lc", "twice") SELECT __p0, __p1, __f0, __f1 FROM live ORDER BY __k COLLATE "C"
       ON CONFLICT ("order_id", "line") DO UPDATE SET "order_id" = excluded."order_id", "line" = excluded."line", "sku_lc" = excluded."sku_lc", "twice" = excluded."twice"
       WHERE record_image_ne(ROW(t."order_id", t."line", t."sku_lc", t."twice"), ROW(excluded."order_id", excluded."line", excluded."sku_lc", excluded."twice")) RETURNING 1),
del AS (DELETE FROM "public"."line_skus" AS t USING gone WHERE t."order_id" = gone.p0::bigint AND t."line" = gone.p1::integer AND (CASE WHEN num_nulls(t."order_id") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', t."order_id"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END || chr(31) || CASE WHEN num_nulls(t."line") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', t."line"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END) = gone.k COLLATE "C" RETURNING 1)
DELETE FROM "public"."line_skus__ledger" e USING gone WHERE e.k = gone.k;

-- line_skus: field probe sku_lc
WITH u AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) AS u(k, p0, p1)) SELECT (lower("__s"."sku"))::text FROM u JOIN "public"."lines" AS "__s" ON "__s"."order_id" = u.p0::bigint AND "__s"."line" = u.p1::integer AND (CASE WHEN num_nulls("__s"."order_id") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', "__s"."order_id"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END || chr(31) || CASE WHEN num_nulls("__s"."line") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', "__s"."line"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END) = u.k COLLATE "C";

-- line_skus: field probe twice
WITH u AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) AS u(k, p0, p1)) SELECT ("__s"."qty" * 2)::text FROM u JOIN "public"."lines" AS "__s" ON "__s"."order_id" = u.p0::bigint AND "__s"."line" = u.p1::integer AND (CASE WHEN num_nulls("__s"."order_id") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', "__s"."order_id"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END || chr(31) || CASE WHEN num_nulls("__s"."line") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', "__s"."line"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END) = u.k COLLATE "C";

-- line_skus: range parameters 4
-- line_skus: fresh chunk
INSERT INTO "public"."line_skus" AS t ("order_id", "line", "sku_lc", "twice") SELECT __p0, __p1, __f0, __f1 FROM (SELECT "__s"."order_id" AS __p0, "__s"."line" AS __p1, (lower("__s"."sku")) AS __f0, ("__s"."qty" * 2) AS __f1 FROM "public"."lines" AS "__s" WHERE ROW("__s"."order_id", "__s"."line") > ROW($1::text::bigint, $2::text::integer) AND ROW("__s"."order_id", "__s"."line") <= ROW($3::text::bigint, $4::text::integer)) live WHERE NOT EXISTS (SELECT 1 FROM "public"."line_skus" AS t2 WHERE ROW(t2."order_id", t2."line") > ROW($1::text::bigint, $2::text::integer) AND ROW(t2."order_id", t2."line") <= ROW($3::text::bigint, $4::text::integer) AND t2."order_id" = live.__p0 AND t2."line" = live.__p1);

-- line_skus: rebuild chunk
WITH live AS MATERIALIZED (SELECT "__s"."order_id" AS __p0, "__s"."line" AS __p1, (lower("__s"."sku")) AS __f0, ("__s"."qty" * 2) AS __f1 FROM "public"."lines" AS "__s" WHERE ROW("__s"."order_id", "__s"."line") > ROW($1::text::bigint, $2::text::integer) AND ROW("__s"."order_id", "__s"."line") <= ROW($3::text::bigint, $4::text::integer)),
upd AS (UPDATE "public"."line_skus" AS t2 SET "sku_lc" = live.__f0, "twice" = live.__f1 FROM live WHERE ROW(t2."order_id", t2."line") > ROW($1::text::bigint, $2::text::integer) AND ROW(t2."order_id", t2."line") <= ROW($3::text::bigint, $4::text::integer) AND t2."order_id" = live.__p0 AND t2."line" = live.__p1 AND (t2."sku_lc"::text IS DISTINCT FROM live.__f0::text OR t2."twice"::text IS DISTINCT FROM live.__f1::text) RETURNING 1),
ins AS (INSERT INTO "public"."line_skus" AS t ("order_id", "line", "sku_lc", "twice") SELECT __p0, __p1, __f0, __f1 FROM live WHERE NOT EXISTS (SELECT 1 FROM "public"."line_skus" AS t2 WHERE ROW(t2."order_id", t2."line") > ROW($1::text::bigint, $2::text::integer) AND ROW(t2."order_id", t2."line") <= ROW($3::text::bigint, $4::text::integer) AND t2."order_id" = live.__p0 AND t2."line" = live.__p1) ORDER BY __p0, __p1 RETURNING 1)
SELECT count(*) FROM live;

