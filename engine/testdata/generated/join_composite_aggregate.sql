-- j_family_qty: target shape
"family" text
"qty" bigint
"n" bigint
"__members" bigint NOT NULL
"__cnt0" bigint NOT NULL
"__sum0" bigint NOT NULL
UNIQUE INDEX NULLS NOT DISTINCT (family);

-- j_family_qty: ledger shape
"k" text COLLATE "C" NOT NULL
"member" boolean NOT NULL DEFAULT false
"g0" text
"a0" integer
PRIMARY KEY (k);

-- j_family_qty: capture 1
CREATE OR REPLACE FUNCTION "trellis"."_cap_insert_bc3af9ad1078b404"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_bc3af9ad1078b404$
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
      VALUES ('public.j_lines', NULL, 'schema', pg_current_wal_insert_lsn());
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
  SELECT 'public.j_lines', a.k, 'insert', v_origin, v_hop, v_at FROM (SELECT array_agg((x."id")::text) AS k FROM trellis_new x) a WHERE a.k IS NOT NULL;
  RETURN NULL;
END $cap_bc3af9ad1078b404$;

-- j_family_qty: capture 2
REVOKE ALL ON FUNCTION "trellis"."_cap_insert_bc3af9ad1078b404"() FROM PUBLIC;

-- j_family_qty: capture 3
CREATE OR REPLACE TRIGGER "trellis_capture_insert" AFTER INSERT ON public.j_lines REFERENCING NEW TABLE AS trellis_new FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_insert_bc3af9ad1078b404"();

-- j_family_qty: capture 4
ALTER TABLE public.j_lines ENABLE ALWAYS TRIGGER "trellis_capture_insert";

-- j_family_qty: capture 5
CREATE OR REPLACE FUNCTION "trellis"."_cap_update_bc3af9ad1078b404"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_bc3af9ad1078b404$
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
      VALUES ('public.j_lines', NULL, 'schema', pg_current_wal_insert_lsn());
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
  SELECT 'public.j_lines', a.k, 'update', v_origin, v_hop, v_at
  FROM (SELECT array_agg(coalesce(n.k, d.k)) AS k
        FROM      (SELECT (x."id")::text AS k, x AS r FROM trellis_new x) n
        FULL JOIN (SELECT (x."id")::text AS k, x AS r FROM trellis_old x) d ON n.k = d.k COLLATE "C"
        WHERE n.k IS NULL OR d.k IS NULL OR n.r *<> d.r) a   -- no-op filter: binary row images
  WHERE a.k IS NOT NULL;
  RETURN NULL;
END $cap_bc3af9ad1078b404$;

-- j_family_qty: capture 6
REVOKE ALL ON FUNCTION "trellis"."_cap_update_bc3af9ad1078b404"() FROM PUBLIC;

-- j_family_qty: capture 7
CREATE OR REPLACE TRIGGER "trellis_capture_update" AFTER UPDATE ON public.j_lines REFERENCING OLD TABLE AS trellis_old NEW TABLE AS trellis_new FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_update_bc3af9ad1078b404"();

-- j_family_qty: capture 8
ALTER TABLE public.j_lines ENABLE ALWAYS TRIGGER "trellis_capture_update";

-- j_family_qty: capture 9
CREATE OR REPLACE FUNCTION "trellis"."_cap_delete_bc3af9ad1078b404"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_bc3af9ad1078b404$
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
      VALUES ('public.j_lines', NULL, 'schema', pg_current_wal_insert_lsn());
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
  SELECT 'public.j_lines', a.k, 'delete', v_origin, v_hop, v_at FROM (SELECT array_agg((x."id")::text) AS k FROM trellis_old x) a WHERE a.k IS NOT NULL;
  RETURN NULL;
END $cap_bc3af9ad1078b404$;

-- j_family_qty: capture 10
REVOKE ALL ON FUNCTION "trellis"."_cap_delete_bc3af9ad1078b404"() FROM PUBLIC;

-- j_family_qty: capture 11
CREATE OR REPLACE TRIGGER "trellis_capture_delete" AFTER DELETE ON public.j_lines REFERENCING OLD TABLE AS trellis_old FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_delete_bc3af9ad1078b404"();

-- j_family_qty: capture 12
ALTER TABLE public.j_lines ENABLE ALWAYS TRIGGER "trellis_capture_delete";

-- j_family_qty: capture 13
CREATE OR REPLACE FUNCTION "trellis"."_cap_truncate_bc3af9ad1078b404"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $cap_bc3af9ad1078b404$
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
  VALUES ('public.j_lines', NULL, 'truncate', v_origin, v_hop, v_at);
  BEGIN
    UPDATE "trellis"."_captured_tables" SET relfilenode = pg_relation_filenode(TG_RELID)
    WHERE table_name = 'public.j_lines' AND relfilenode IS NOT NULL;
  EXCEPTION WHEN serialization_failure THEN NULL;
  END;
  RETURN NULL;
END $cap_bc3af9ad1078b404$;

-- j_family_qty: capture 14
REVOKE ALL ON FUNCTION "trellis"."_cap_truncate_bc3af9ad1078b404"() FROM PUBLIC;

-- j_family_qty: capture 15
CREATE OR REPLACE TRIGGER "trellis_capture_truncate" AFTER TRUNCATE ON public.j_lines FOR EACH STATEMENT EXECUTE FUNCTION "trellis"."_cap_truncate_bc3af9ad1078b404"();

-- j_family_qty: capture 16
ALTER TABLE public.j_lines ENABLE ALWAYS TRIGGER "trellis_capture_truncate";

-- j_family_qty: lock insert
INSERT INTO "public"."j_family_qty__ledger" (k) SELECT k FROM unnest($1::text[]) AS u(k) ORDER BY k COLLATE "C" ON CONFLICT (k) DO NOTHING;

-- j_family_qty: lock select
SELECT count(*) FROM (SELECT k FROM "public"."j_family_qty__ledger" WHERE k = ANY($1::text[]) ORDER BY k COLLATE "C" FOR UPDATE) l;

-- j_family_qty: derive
WITH u AS (SELECT * FROM unnest($1::text[], $2::text[]) AS u(k, p0)),
live AS (SELECT u.k, ("__j1"."family") AS g0, ("__s"."qty") AS a0 FROM u JOIN "public"."j_lines" AS "__s" ON "__s"."id" = u.p0::bigint AND ("__s"."id")::text = u.k COLLATE "C" JOIN "public"."j_skus" AS "__j1" ON "__j1"."maker" = "__s"."maker" AND "__j1"."code" = "__s"."code"),
want AS (SELECT u.k, (l.k IS NOT NULL) AS member, l.g0, l.a0 FROM u LEFT JOIN live l ON l.k = u.k),
old AS MATERIALIZED (SELECT e.ctid AS at, e.k, e.member, e.g0, e.a0 FROM "public"."j_family_qty__ledger" e WHERE e.k = ANY($1::text[])),
upd AS (UPDATE "public"."j_family_qty__ledger" e SET member = w.member, g0 = w.g0, a0 = w.a0 FROM want w
        WHERE e.ctid = ANY(ARRAY(SELECT at FROM old)) AND e.k = w.k AND e *<> ROW(w.k, w.member, w.g0, w.a0)::"public"."j_family_qty__ledger"
        RETURNING e.k),
moves AS (SELECT o.g0, -1 AS sign, o.a0 FROM old o JOIN upd USING (k) WHERE o.member
          UNION ALL
          SELECT w.g0, 1, w.a0 FROM want w JOIN upd USING (k) WHERE w.member),
d AS (SELECT g0, sum(sign) AS dm, sum(CASE WHEN a0 IS NULL THEN 0 ELSE sign END) AS dc0, coalesce(sum(a0) FILTER (WHERE sign > 0), CAST('0' AS bigint)) - coalesce(sum(a0) FILTER (WHERE sign < 0), CAST('0' AS bigint)) AS ds0 FROM moves GROUP BY g0)
INSERT INTO "public"."j_family_qty" AS t ("family", "__members", "__cnt0", "__sum0", "qty", "n")
SELECT g0, dm, dc0, ds0, CASE WHEN dc0 = 0 THEN NULL ELSE ds0 END, dm FROM d ORDER BY g0
ON CONFLICT ("family") DO UPDATE SET "__members" = t."__members" + excluded."__members", "__cnt0" = t."__cnt0" + excluded."__cnt0", "__sum0" = t."__sum0" + excluded."__sum0", "qty" = CASE WHEN (t."__cnt0" + excluded."__cnt0") = 0 THEN NULL ELSE (t."__sum0" + excluded."__sum0") END, "n" = (t."__members" + excluded."__members")
RETURNING t.ctid;

-- j_family_qty: delete empty
DELETE FROM "public"."j_family_qty" WHERE ctid = ANY($1::tid[]) AND "__members" = 0;

-- j_family_qty: ledger gc
DELETE FROM "public"."j_family_qty__ledger" WHERE k = ANY($1::text[]) AND NOT member;

-- j_family_qty: fan-out of join 1
SELECT DISTINCT 'public.j_lines', ("__s"."id")::text, 'fanout', $4::int8, $5::text::pg_lsn, $6::int2
FROM unnest($1::text[], $2::text[], $3::text[]) AS u(k, p0, p1) JOIN "public"."j_lines" AS "__s" ON "__s"."maker" = u.p0::text AND "__s"."code" = u.p1::integer;

-- j_family_qty: truncate fan-out of join 1
SELECT DISTINCT 'public.j_lines', ("__s"."id")::text, 'fanout', $1::int8, $2::text::pg_lsn, $3::int2
FROM "public"."j_lines" AS "__s"
WHERE "__s"."maker" IS NOT NULL AND "__s"."code" IS NOT NULL;

-- j_family_qty: range parameters 2
-- j_family_qty: fresh chunk
INSERT INTO "public"."j_family_qty__ledger" (k, member, g0, a0)
SELECT k, true, g0, a0 FROM (SELECT ("__s"."id")::text AS k, ("__j1"."family") AS g0, ("__s"."qty") AS a0 FROM "public"."j_lines" AS "__s" JOIN "public"."j_skus" AS "__j1" ON "__j1"."maker" = "__s"."maker" AND "__j1"."code" = "__s"."code" WHERE ROW("__s"."id") > ROW($1::text::bigint) AND ROW("__s"."id") <= ROW($2::text::bigint)) live
WHERE (SELECT true FROM "public"."j_family_qty__ledger" e WHERE e.k = live.k) IS NULL ORDER BY k COLLATE "C";

-- j_family_qty: heap chunk
INSERT INTO "public"."j_family_qty__ledger" (k, member, g0, a0)
SELECT k, true, g0, a0 FROM (SELECT ("__s"."id")::text AS k, ("__j1"."family") AS g0, ("__s"."qty") AS a0 FROM "public"."j_lines" AS "__s" JOIN "public"."j_skus" AS "__j1" ON "__j1"."maker" = "__s"."maker" AND "__j1"."code" = "__s"."code" WHERE ROW("__s"."id") > ROW($1::text::bigint) AND ROW("__s"."id") <= ROW($2::text::bigint)) live;

-- j_family_qty: rebuild chunk
WITH live AS MATERIALIZED (SELECT ("__s"."id")::text AS k, true AS member, ("__j1"."family") AS g0, ("__s"."qty") AS a0 FROM "public"."j_lines" AS "__s" JOIN "public"."j_skus" AS "__j1" ON "__j1"."maker" = "__s"."maker" AND "__j1"."code" = "__s"."code" WHERE ROW("__s"."id") > ROW($1::text::bigint) AND ROW("__s"."id") <= ROW($2::text::bigint)),
old AS MATERIALIZED (SELECT e.ctid AS at, e.k, e.member, e.g0, e.a0 FROM "public"."j_family_qty__ledger" e WHERE e.k = ANY(ARRAY(SELECT k FROM live))),
upd AS (UPDATE "public"."j_family_qty__ledger" e SET member = w.member, g0 = w.g0, a0 = w.a0 FROM live w
        WHERE e.ctid = ANY(ARRAY(SELECT at FROM old)) AND e.k = w.k AND e *<> ROW(w.k, w.member, w.g0, w.a0)::"public"."j_family_qty__ledger"
        RETURNING e.k),
ins AS (INSERT INTO "public"."j_family_qty__ledger" (k, member, g0, a0) SELECT w.k, w.member, w.g0, w.a0 FROM live w
        WHERE NOT EXISTS (SELECT 1 FROM old o WHERE o.k = w.k) ORDER BY w.k COLLATE "C" RETURNING k),
moves AS (SELECT o.g0, -1 AS sign, o.a0 FROM old o JOIN upd USING (k) WHERE o.member
          UNION ALL
          SELECT w.g0, 1, w.a0 FROM live w WHERE w.k IN (SELECT k FROM upd UNION ALL SELECT k FROM ins)),
d AS (SELECT g0, sum(sign) AS dm, sum(CASE WHEN a0 IS NULL THEN 0 ELSE sign END) AS dc0, coalesce(sum(a0) FILTER (WHERE sign > 0), CAST('0' AS bigint)) - coalesce(sum(a0) FILTER (WHERE sign < 0), CAST('0' AS bigint)) AS ds0 FROM moves GROUP BY g0),
tg AS (INSERT INTO "public"."j_family_qty" AS t ("family", "__members", "__cnt0", "__sum0", "qty", "n")
SELECT g0, dm, dc0, ds0, CASE WHEN dc0 = 0 THEN NULL ELSE ds0 END, dm FROM d ORDER BY g0
ON CONFLICT ("family") DO UPDATE SET "__members" = t."__members" + excluded."__members", "__cnt0" = t."__cnt0" + excluded."__cnt0", "__sum0" = t."__sum0" + excluded."__sum0", "qty" = CASE WHEN (t."__cnt0" + excluded."__cnt0") = 0 THEN NULL ELSE (t."__sum0" + excluded."__sum0") END, "n" = (t."__members" + excluded."__members")
RETURNING t.ctid)
SELECT (SELECT count(*) FROM live), coalesce(array_agg(ctid), '{}') FROM tg;

-- j_family_qty: groups
INSERT INTO "public"."j_family_qty" ("family", "__members", "__cnt0", "__sum0", "qty", "n")
SELECT g0, dm, dc0, ds0, CASE WHEN dc0 = 0 THEN NULL ELSE ds0 END, dm FROM (SELECT g0, count(*) AS dm, count(a0) AS dc0, coalesce(sum(a0), CAST('0' AS bigint)) AS ds0
  FROM (SELECT g0, a0 FROM "public"."j_family_qty__ledger" WHERE member) e GROUP BY g0) d
ORDER BY g0;

-- j_family_qty: reconcile
INSERT INTO "public"."j_family_qty" AS t ("family", "__members", "__cnt0", "__sum0", "qty", "n")
SELECT g0, dm, dc0, ds0, CASE WHEN dc0 = 0 THEN NULL ELSE ds0 END, dm FROM (SELECT g0, count(*) AS dm, count(a0) AS dc0, coalesce(sum(a0), CAST('0' AS bigint)) AS ds0
  FROM (SELECT g0, a0 FROM "public"."j_family_qty__ledger" WHERE member) e GROUP BY g0) d
ON CONFLICT ("family") DO UPDATE SET "__members" = excluded."__members", "__cnt0" = excluded."__cnt0", "__sum0" = excluded."__sum0", "qty" = excluded."qty", "n" = excluded."n" WHERE record_image_ne(ROW(t."__members", t."__cnt0", t."__sum0", t."qty", t."n"), ROW(excluded."__members", excluded."__cnt0", excluded."__sum0", excluded."qty", excluded."n"));

-- j_family_qty: prune
DELETE FROM "public"."j_family_qty" AS t WHERE NOT EXISTS (SELECT 1 FROM (SELECT g0 AS "family" FROM "public"."j_family_qty__ledger" WHERE member) e WHERE (CASE WHEN num_nulls(e."family") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', e."family"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END) = (CASE WHEN num_nulls(t."family") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', t."family"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END));

-- j_family_qty: refresh
UPDATE "public"."j_family_qty" AS t SET "qty" = m.__v0, "n" = m.__v1 FROM (SELECT t2.ctid AS __c, CASE WHEN t2."__cnt0" = 0 THEN NULL ELSE t2."__sum0" END AS __v0, t2."__members" AS __v1 FROM "public"."j_family_qty" t2) m WHERE t.ctid = m.__c AND (t."qty"::text IS DISTINCT FROM m.__v0::text OR t."n"::text IS DISTINCT FROM m.__v1::text);

