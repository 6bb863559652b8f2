-- kind_sums: target shape
"kind" text
"total" bigint
"__members" bigint NOT NULL
"__cnt0" bigint NOT NULL
"__sum0" bigint NOT NULL
UNIQUE INDEX NULLS NOT DISTINCT (kind);

-- kind_sums: ledger shape
"k" text COLLATE "C" NOT NULL
"member" boolean NOT NULL DEFAULT false
"g0" text
"a0" integer
PRIMARY KEY (k);

-- kind_sums: capture 1
CREATE OR REPLACE FUNCTION "trellis"."_cap_insert_ab27b6fb6887149e"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_ab27b6fb6887149e$
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
      VALUES ('public.events', NULL, 'schema', pg_current_wal_insert_lsn());
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
  SELECT 'public.events', a.k, 'insert', v_origin, v_hop, v_at FROM (SELECT array_agg((x."id")::text) AS k FROM trellis_new x) a WHERE a.k IS NOT NULL;
  RETURN NULL;
END $cap_ab27b6fb6887149e$;

-- kind_sums: capture 2
REVOKE ALL ON FUNCTION "trellis"."_cap_insert_ab27b6fb6887149e"() FROM PUBLIC;

-- kind_sums: capture 3
CREATE OR REPLACE TRIGGER "trellis_capture_insert" AFTER INSERT ON public.events REFERENCING NEW TABLE AS trellis_new FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_insert_ab27b6fb6887149e"();

-- kind_sums: capture 4
ALTER TABLE public.events ENABLE ALWAYS TRIGGER "trellis_capture_insert";

-- kind_sums: capture 5
CREATE OR REPLACE FUNCTION "trellis"."_cap_update_ab27b6fb6887149e"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_ab27b6fb6887149e$
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
      VALUES ('public.events', NULL, 'schema', pg_current_wal_insert_lsn());
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
  SELECT 'public.events', a.k, 'update', v_origin, v_hop, v_at
  FROM (SELECT array_agg(coalesce(n.k, d.k)) AS k
        FROM      (SELECT (x."id")::text AS k, x AS r FROM trellis_new x) n
        FULL JOIN (SELECT (x."id")::text AS k, x AS r FROM trellis_old x) d ON n.k = d.k COLLATE "C"
        WHERE n.k IS NULL OR d.k IS NULL OR n.r *<> d.r) a   -- no-op filter: binary row images
  WHERE a.k IS NOT NULL;
  RETURN NULL;
END $cap_ab27b6fb6887149e$;

-- kind_sums: capture 6
REVOKE ALL ON FUNCTION "trellis"."_cap_update_ab27b6fb6887149e"() FROM PUBLIC;

-- kind_sums: capture 7
CREATE OR REPLACE TRIGGER "trellis_capture_update" AFTER UPDATE ON public.events REFERENCING OLD TABLE AS trellis_old NEW TABLE AS trellis_new FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_update_ab27b6fb6887149e"();

-- kind_sums: capture 8
ALTER TABLE public.events ENABLE ALWAYS TRIGGER "trellis_capture_update";

-- kind_sums: capture 9
CREATE OR REPLACE FUNCTION "trellis"."_cap_delete_ab27b6fb6887149e"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_ab27b6fb6887149e$
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
      VALUES ('public.events', NULL, 'schema', pg_current_wal_insert_lsn());
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
  SELECT 'public.events', a.k, 'delete', v_origin, v_hop, v_at FROM (SELECT array_agg((x."id")::text) AS k FROM trellis_old x) a WHERE a.k IS NOT NULL;
  RETURN NULL;
END $cap_ab27b6fb6887149e$;

-- kind_sums: capture 10
REVOKE ALL ON FUNCTION "trellis"."_cap_delete_ab27b6fb6887149e"() FROM PUBLIC;

-- kind_sums: capture 11
CREATE OR REPLACE TRIGGER "trellis_capture_delete" AFTER DELETE ON public.events REFERENCING OLD TABLE AS trellis_old FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_delete_ab27b6fb6887149e"();

-- kind_sums: capture 12
ALTER TABLE public.events ENABLE ALWAYS TRIGGER "trellis_capture_delete";

-- kind_sums: capture 13
CREATE OR REPLACE FUNCTION "trellis"."_cap_truncate_ab27b6fb6887149e"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_ab27b6fb6887149e$
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
  VALUES ('public.events', NULL, 'truncate', v_origin, v_hop, v_at);
  BEGIN
    UPDATE "trellis"."_captured_tables" SET relfilenode = pg_relation_filenode(TG_RELID)
    WHERE table_name = 'public.events' AND relfilenode IS NOT NULL;
  EXCEPTION WHEN serialization_failure THEN NULL;
  END;
  RETURN NULL;
END $cap_ab27b6fb6887149e$;

-- kind_sums: capture 14
REVOKE ALL ON FUNCTION "trellis"."_cap_truncate_ab27b6fb6887149e"() FROM PUBLIC;

-- kind_sums: capture 15
CREATE OR REPLACE TRIGGER "trellis_capture_truncate" AFTER TRUNCATE ON public.events FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_truncate_ab27b6fb6887149e"();

-- kind_sums: capture 16
ALTER TABLE public.events ENABLE ALWAYS TRIGGER "trellis_capture_truncate";

-- kind_sums: lock insert
INSERT INTO "public"."kind_sums__ledger" (k) SELECT k FROM unnest($1::text[]) AS u(k) ORDER BY k COLLATE "C" ON CONFLICT (k) DO NOTHING;

-- kind_sums: lock select
SELECT count(*) FROM (SELECT k FROM "public"."kind_sums__ledger" WHERE k = ANY($1::text[]) ORDER BY k COLLATE "C" FOR UPDATE) l;

-- kind_sums: derive
WITH u AS (SELECT * FROM unnest($1::text[], $2::text[]) AS u(k, p0)),
live AS (SELECT u.k, ("__s"."kind") AS g0, ("__s"."amount") AS a0 FROM u JOIN "public"."events" AS "__s" ON "__s"."id" = u.p0::bigint AND ("__s"."id")::text = u.k COLLATE "C"),
want AS (SELECT u.k, (l.k IS NOT NULL) AS member, l.g0, l.a0 FROM u LEFT JOIN live l ON l.k = u.k),
old AS MATERIALIZED (SELECT e.ctid AS at, e.k, e.member, e.g0, e.a0 FROM "public"."kind_sums__ledger" e WHERE e.k = ANY($1::text[])),
upd AS (UPDATE "public"."kind_sums__ledger" e SET member = w.member, g0 = w.g0, a0 = w.a0 FROM want w
        WHERE e.ctid = ANY(ARRAY(SELECT at FROM old)) AND e.k = w.k AND e *<> ROW(w.k, w.member, w.g0, w.a0)::"public"."kind_sums__ledger"
        RETURNING e.k),
moves AS (SELECT o.g0, -1 AS sign, o.a0 FROM old o JOIN upd USING (k) WHERE o.member
          UNION ALL
          SELECT w.g0, 1, w.a0 FROM want w JOIN upd USING (k) WHERE w.member),
d AS (SELECT g0, sum(sign) AS dm, sum(CASE WHEN a0 IS NULL THEN 0 ELSE sign END) AS dc0, coalesce(sum(a0) FILTER (WHERE sign > 0), CAST('0' AS bigint)) - coalesce(sum(a0) FILTER (WHERE sign < 0), CAST('0' AS bigint)) AS ds0 FROM moves GROUP BY g0)
INSERT INTO "public"."kind_sums" AS t ("kind", "__members", "__cnt0", "__sum0", "total")
SELECT g0, dm, dc0, ds0, CASE WHEN dc0 = 0 THEN NULL ELSE ds0 END FROM d ORDER BY g0
ON CONFLICT ("kind") DO UPDATE SET "__members" = t."__members" + excluded."__members", "__cnt0" = t."__cnt0" + excluded."__cnt0", "__sum0" = t."__sum0" + excluded."__sum0", "total" = CASE WHEN (t."__cnt0" + excluded."__cnt0") = 0 THEN NULL ELSE (t."__sum0" + excluded."__sum0") END
RETURNING t.ctid;

-- kind_sums: delete empty
DELETE FROM "public"."kind_sums" WHERE ctid = ANY($1::tid[]) AND "__members" = 0;

-- kind_sums: ledger gc
DELETE FROM "public"."kind_sums__ledger" WHERE k = ANY($1::text[]) AND NOT member;

-- kind_sums: range parameters 2
-- kind_sums: fresh chunk
INSERT INTO "public"."kind_sums__ledger" (k, member, g0, a0)
SELECT k, true, g0, a0 FROM (SELECT ("__s"."id")::text AS k, ("__s"."kind") AS g0, ("__s"."amount") AS a0 FROM "public"."events" AS "__s" WHERE ROW("__s"."id") > ROW($1::text::bigint) AND ROW("__s"."id") <= ROW($2::text::bigint)) live
WHERE (SELECT true FROM "public"."kind_sums__ledger" e WHERE e.k = live.k) IS NULL ORDER BY k COLLATE "C";

-- kind_sums: heap chunk
INSERT INTO "public"."kind_sums__ledger" (k, member, g0, a0)
SELECT k, true, g0, a0 FROM (SELECT ("__s"."id")::text AS k, ("__s"."kind") AS g0, ("__s"."amount") AS a0 FROM "public"."events" AS "__s" WHERE ROW("__s"."id") > ROW($1::text::bigint) AND ROW("__s"."id") <= ROW($2::text::bigint)) live;

-- kind_sums: rebuild chunk
WITH live AS MATERIALIZED (SELECT ("__s"."id")::text AS k, true AS member, ("__s"."kind") AS g0, ("__s"."amount") AS a0 FROM "public"."events" AS "__s" WHERE ROW("__s"."id") > ROW($1::text::bigint) AND ROW("__s"."id") <= ROW($2::text::bigint)),
old AS MATERIALIZED (SELECT e.ctid AS at, e.k, e.member, e.g0, e.a0 FROM "public"."kind_sums__ledger" e WHERE e.k = ANY(ARRAY(SELECT k FROM live))),
upd AS (UPDATE "public"."kind_sums__ledger" e SET member = w.member, g0 = w.g0, a0 = w.a0 FROM live w
        WHERE e.ctid = ANY(ARRAY(SELECT at FROM old)) AND e.k = w.k AND e *<> ROW(w.k, w.member, w.g0, w.a0)::"public"."kind_sums__ledger"
        RETURNING e.k),
ins AS (INSERT INTO "public"."kind_sums__ledger" (k, member, g0, a0) SELECT w.k, w.member, w.g0, w.a0 FROM live w
        WHERE NOT EXISTS (SELECT 1 FROM old o WHERE o.k = w.k) ORDER BY w.k COLLATE "C" RETURNING k),
moves AS (SELECT o.g0, -1 AS sign, o.a0 FROM old o JOIN upd USING (k) WHERE o.member
          UNION ALL
          SELECT w.g0, 1, w.a0 FROM live w WHERE w.k IN (SELECT k FROM upd UNION ALL SELECT k FROM ins)),
d AS (SELECT g0, sum(sign) AS dm, sum(CASE WHEN a0 IS NULL THEN 0 ELSE sign END) AS dc0, coalesce(sum(a0) FILTER (WHERE sign > 0), CAST('0' AS bigint)) - coalesce(sum(a0) FILTER (WHERE sign < 0), CAST('0' AS bigint)) AS ds0 FROM moves GROUP BY g0),
tg AS (INSERT INTO "public"."kind_sums" AS t ("kind", "__members", "__cnt0", "__sum0", "total")
SELECT g0, dm, dc0, ds0, CASE WHEN dc0 = 0 THEN NULL ELSE ds0 END FROM d ORDER BY g0
ON CONFLICT ("kind") DO UPDATE SET "__members" = t."__members" + excluded."__members", "__cnt0" = t."__cnt0" + excluded."__cnt0", "__sum0" = t."__sum0" + excluded."__sum0", "total" = CASE WHEN (t."__cnt0" + excluded."__cnt0") = 0 THEN NULL ELSE (t."__sum0" + excluded."__sum0") END
RETURNING t.ctid)
SELECT (SELECT count(*) FROM live), coalesce(array_agg(ctid), '{}') FROM tg;

-- kind_sums: groups
INSERT INTO "public"."kind_sums" ("kind", "__members", "__cnt0", "__sum0", "total")
SELECT g0, dm, dc0, ds0, CASE WHEN dc0 = 0 THEN NULL ELSE ds0 END FROM (SELECT g0, count(*) AS dm, count(a0) AS dc0, coalesce(sum(a0), CAST('0' AS bigint)) AS ds0
  FROM (SELECT g0, a0 FROM "public"."kind_sums__ledger" WHERE member) e GROUP BY g0) d
ORDER BY g0;

-- kind_sums: reconcile
INSERT INTO "public"."kind_sums" AS t ("kind", "__members", "__cnt0", "__sum0", "total")
SELECT g0, dm, dc0, ds0, CASE WHEN dc0 = 0 THEN NULL ELSE ds0 END FROM (SELECT g0, count(*) AS dm, count(a0) AS dc0, coalesce(sum(a0), CAST('0' AS bigint)) AS ds0
  FROM (SELECT g0, a0 FROM "public"."kind_sums__ledger" WHERE member) e GROUP BY g0) d
ON CONFLICT ("kind") DO UPDATE SET "__members" = excluded."__members", "__cnt0" = excluded."__cnt0", "__sum0" = excluded."__sum0", "total" = excluded."total" WHERE record_image_ne(ROW(t."__members", t."__cnt0", t."__sum0", t."total"), ROW(excluded."__members", excluded."__cnt0", excluded."__sum0", excluded."total"));

-- kind_sums: prune
DELETE FROM "public"."kind_sums" AS t WHERE NOT EXISTS (SELECT 1 FROM (SELECT g0 AS "kind" FROM "public"."kind_sums__ledger" WHERE member) e WHERE (CASE WHEN num_nulls(e."kind") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', e."kind"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END) = (CASE WHEN num_nulls(t."kind") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', t."kind"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END));

-- kind_sums: refresh
UPDATE "public"."kind_sums" AS t SET "total" = m.__v0 FROM (SELECT t2.ctid AS __c, CASE WHEN t2."__cnt0" = 0 THEN NULL ELSE t2."__sum0" END AS __v0 FROM "public"."kind_sums" t2) m WHERE t.ctid = m.__c AND (t."total"::text IS DISTINCT FROM m.__v0::text);

-- kind_labels: target shape
"kind" text
"doubled" bigint
UNIQUE NULLS NOT DISTINCT (kind);

-- kind_labels: ledger shape
"k" text COLLATE "C" NOT NULL
PRIMARY KEY (k);

-- kind_labels: capture 1
CREATE OR REPLACE FUNCTION "trellis"."_cap_insert_1c7f45d2df7a21d5"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_1c7f45d2df7a21d5$
#variable_conflict use_variable
DECLARE v_origin pg_lsn; v_hop smallint := 0; v_s text; v_ok boolean; v_n bigint; v_at timestamptz;
BEGIN
  -- A key column renamed, dropped or re-typed: never run the keyed INSERT below.
  PERFORM FROM pg_attribute WHERE attrelid = TG_RELID AND attname IN ('kind')
    AND NOT attisdropped AND (attname, atttypid) IN (('kind'::name, 25::oid)) AND xmax = 0;
  IF NOT FOUND THEN
    -- Changed, or seen through a snapshot that may be stale: ask the current catalog.
    BEGIN
      v_ok := ARRAY[pg_typeof((SELECT x."kind" FROM trellis_new x LIMIT 0))::oid] = ARRAY[25::oid];
    EXCEPTION WHEN undefined_column THEN v_ok := false;
    END;
    IF NOT v_ok THEN
      INSERT INTO "trellis"."_change_log" (src_table, key, op, origin_lsn)
      VALUES ('public.kind_sums', NULL, 'schema', pg_current_wal_insert_lsn());
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
  SELECT 'public.kind_sums', a.k, 'insert', v_origin, v_hop, v_at FROM (SELECT array_agg((CASE WHEN num_nulls(x."kind") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', x."kind"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END)) AS k FROM trellis_new x) a WHERE a.k IS NOT NULL;
  RETURN NULL;
END $cap_1c7f45d2df7a21d5$;

-- kind_labels: capture 2
REVOKE ALL ON FUNCTION "trellis"."_cap_insert_1c7f45d2df7a21d5"() FROM PUBLIC;

-- kind_labels: capture 3
CREATE OR REPLACE TRIGGER "trellis_capture_insert" AFTER INSERT ON public.kind_sums REFERENCING NEW TABLE AS trellis_new FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_insert_1c7f45d2df7a21d5"();

-- kind_labels: capture 4
ALTER TABLE public.kind_sums ENABLE ALWAYS TRIGGER "trellis_capture_insert";

-- kind_labels: capture 5
CREATE OR REPLACE FUNCTION "trellis"."_cap_update_1c7f45d2df7a21d5"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_1c7f45d2df7a21d5$
#variable_conflict use_variable
DECLARE v_origin pg_lsn; v_hop smallint := 0; v_s text; v_ok boolean; v_n bigint; v_at timestamptz;
BEGIN
  -- A key column renamed, dropped or re-typed: never run the keyed INSERT below.
  PERFORM FROM pg_attribute WHERE attrelid = TG_RELID AND attname IN ('kind')
    AND NOT attisdropped AND (attname, atttypid) IN (('kind'::name, 25::oid)) AND xmax = 0;
  IF NOT FOUND THEN
    -- Changed, or seen through a snapshot that may be stale: ask the current catalog.
    BEGIN
      v_ok := ARRAY[pg_typeof((SELECT x."kind" FROM trellis_new x LIMIT 0))::oid] = ARRAY[25::oid];
    EXCEPTION WHEN undefined_column THEN v_ok := false;
    END;
    IF NOT v_ok THEN
      INSERT INTO "trellis"."_change_log" (src_table, key, op, origin_lsn)
      VALUES ('public.kind_sums', NULL, 'schema', pg_current_wal_insert_lsn());
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
  SELECT 'public.kind_sums', a.k, 'update', v_origin, v_hop, v_at
  FROM (SELECT array_agg(coalesce(n.k, d.k)) AS k
        FROM      (SELECT (CASE WHEN num_nulls(x."kind") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', x."kind"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END) AS k, x AS r FROM trellis_new x) n
        FULL JOIN (SELECT (CASE WHEN num_nulls(x."kind") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', x."kind"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END) AS k, x AS r FROM trellis_old x) d ON n.k = d.k COLLATE "C"
        WHERE n.k IS NULL OR d.k IS NULL OR n.r *<> d.r) a   -- no-op filter: binary row images
  WHERE a.k IS NOT NULL;
  RETURN NULL;
END $cap_1c7f45d2df7a21d5$;

-- kind_labels: capture 6
REVOKE ALL ON FUNCTION "trellis"."_cap_update_1c7f45d2df7a21d5"() FROM PUBLIC;

-- kind_labels: capture 7
CREATE OR REPLACE TRIGGER "trellis_capture_update" AFTER UPDATE ON public.kind_sums REFERENCING OLD TABLE AS trellis_old NEW TABLE AS trellis_new FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_update_1c7f45d2df7a21d5"();

-- kind_labels: capture 8
ALTER TABLE public.kind_sums ENABLE ALWAYS TRIGGER "trellis_capture_update";

-- kind_labels: capture 9
CREATE OR REPLACE FUNCTION "trellis"."_cap_delete_1c7f45d2df7a21d5"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_1c7f45d2df7a21d5$
#variable_conflict use_variable
DECLARE v_origin pg_lsn; v_hop smallint := 0; v_s text; v_ok boolean; v_n bigint; v_at timestamptz;
BEGIN
  -- A key column renamed, dropped or re-typed: never run the keyed INSERT below.
  PERFORM FROM pg_attribute WHERE attrelid = TG_RELID AND attname IN ('kind')
    AND NOT attisdropped AND (attname, atttypid) IN (('kind'::name, 25::oid)) AND xmax = 0;
  IF NOT FOUND THEN
    -- Changed, or seen through a snapshot that may be stale: ask the current catalog.
    BEGIN
      v_ok := ARRAY[pg_typeof((SELECT x."kind" FROM trellis_old x LIMIT 0))::oid] = ARRAY[25::oid];
    EXCEPTION WHEN undefined_column THEN v_ok := false;
    END;
    IF NOT v_ok THEN
      INSERT INTO "trellis"."_change_log" (src_table, key, op, origin_lsn)
      VALUES ('public.kind_sums', NULL, 'schema', pg_current_wal_insert_lsn());
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
  SELECT 'public.kind_sums', a.k, 'delete', v_origin, v_hop, v_at FROM (SELECT array_agg((CASE WHEN num_nulls(x."kind") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', x."kind"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END)) AS k FROM trellis_old x) a WHERE a.k IS NOT NULL;
  RETURN NULL;
END $cap_1c7f45d2df7a21d5$;

-- kind_labels: capture 10
REVOKE ALL ON FUNCTION "trellis"."_cap_delete_1c7f45d2df7a21d5"() FROM PUBLIC;

-- kind_labels: capture 11
CREATE OR REPLACE TRIGGER "trellis_capture_delete" AFTER DELETE ON public.kind_sums REFERENCING OLD TABLE AS trellis_old FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_delete_1c7f45d2df7a21d5"();

-- kind_labels: capture 12
ALTER TABLE public.kind_sums ENABLE ALWAYS TRIGGER "trellis_capture_delete";

-- kind_labels: capture 13
CREATE OR REPLACE FUNCTION "trellis"."_cap_truncate_1c7f45d2df7a21d5"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_1c7f45d2df7a21d5$
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
  VALUES ('public.kind_sums', NULL, 'truncate', v_origin, v_hop, v_at);
  BEGIN
    UPDATE "trellis"."_captured_tables" SET relfilenode = pg_relation_filenode(TG_RELID)
    WHERE table_name = 'public.kind_sums' AND relfilenode IS NOT NULL;
  EXCEPTION WHEN serialization_failure THEN NULL;
  END;
  RETURN NULL;
END $cap_1c7f45d2df7a21d5$;

-- kind_labels: capture 14
REVOKE ALL ON FUNCTION "trellis"."_cap_truncate_1c7f45d2df7a21d5"() FROM PUBLIC;

-- kind_labels: capture 15
CREATE OR REPLACE TRIGGER "trellis_capture_truncate" AFTER TRUNCATE ON public.kind_sums FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_truncate_1c7f45d2df7a21d5"();

-- kind_labels: capture 16
ALTER TABLE public.kind_sums ENABLE ALWAYS TRIGGER "trellis_capture_truncate";

-- kind_labels: lock insert
INSERT INTO "public"."kind_labels__ledger" (k) SELECT k FROM unnest($1::text[]) AS u(k) ORDER BY k COLLATE "C" ON CONFLICT (k) DO NOTHING;

-- kind_labels: lock select
SELECT count(*) FROM (SELECT k FROM "public"."kind_labels__ledger" WHERE k = ANY($1::text[]) ORDER BY k COLLATE "C" FOR UPDATE) l;

-- kind_labels: derive
WITH u AS (SELECT * FROM unnest($1::text[], $2::text[]) AS u(k, p0)),
live AS (SELECT u.k AS __k, "__s"."kind" AS __p0, ("__s"."total" * 2) AS __f0 FROM u JOIN "public"."kind_sums" AS "__s" ON ("__s"."kind" = u.p0::text OR ("__s"."kind" IS NULL AND u.p0 IS NULL)) AND (CASE WHEN num_nulls("__s"."kind") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', "__s"."kind"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END) = u.k COLLATE "C"),
gone AS (SELECT u.* FROM u WHERE NOT EXISTS (SELECT 1 FROM live l WHERE l.__k = u.k)),
up AS (INSERT INTO "public"."kind_labels" AS t ("kind", "doubled") SELECT __p0, __f0 FROM live ORDER BY __k COLLATE "C"
       ON CONFLICT ("kind") DO UPDATE SET "kind" = excluded."kind", "doubled" = excluded."doubled"
       WHERE record_image_ne(ROW(t."kind", t."doubled"), ROW(excluded."kind", excluded."doubled")) RETURNING 1),
del AS (DELETE FROM "public"."kind_labels" AS t USING gone WHERE (t."kind" = gone.p0::text OR (t."kind" IS NULL AND gone.p0 IS NULL)) AND (CASE WHEN num_nulls(t."kind") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', t."kind"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END) = gone.k COLLATE "C" RETURNING 1)
DELETE FROM "public"."kind_labels__ledger" e USING gone WHERE e.k = gone.k;

-- kind_labels: field probe doubled
WITH u AS (SELECT * FROM unnest($1::text[], $2::text[]) AS u(k, p0)) SELECT ("__s"."total" * 2)::text FROM u JOIN "public"."kind_sums" AS "__s" ON ("__s"."kind" = u.p0::text OR ("__s"."kind" IS NULL AND u.p0 IS NULL)) AND (CASE WHEN num_nulls("__s"."kind") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', "__s"."kind"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END) = u.k COLLATE "C";

-- kind_labels: range parameters 0
-- kind_labels: fresh chunk
INSERT INTO "public"."kind_labels" AS t ("kind", "doubled") SELECT __p0, __f0 FROM (SELECT "__s"."kind" AS __p0, ("__s"."total" * 2) AS __f0 FROM "public"."kind_sums" AS "__s") live ON CONFLICT ("kind") DO NOTHING;

