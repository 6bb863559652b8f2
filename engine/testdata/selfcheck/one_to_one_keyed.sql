-- order_totals: self-check page
WITH tgt AS MATERIALIZED (SELECT t."id" AS p0, (t."id")::text AS k, t."total"::text AS c0, t."loud"::text AS c1 FROM (SELECT * FROM "public"."order_totals" AS t WHERE ($1::boolean OR (t."id") > ($2::bigint)) ORDER BY t."id" LIMIT $3) t),
rec AS MATERIALIZED (SELECT r."id" AS p0, (r."id")::text AS k, r."total"::text AS c0, r."loud"::text AS c1 FROM (SELECT "__s"."id", ("__s"."price" + "__s"."tax") AS "total", (upper("__s"."note")) AS "loud" FROM "public"."orders" AS "__s" WHERE ($1::boolean OR ("__s"."id") > ($2::bigint)) ORDER BY "__s"."id" LIMIT $3) r),
ks AS (SELECT p0, k FROM (SELECT p0, k FROM tgt UNION SELECT p0, k FROM rec) u ORDER BY p0 LIMIT $3),
b AS (SELECT (SELECT k FROM ks ORDER BY p0 DESC LIMIT 1) AS hi, (SELECT count(*) FROM ks) AS n)
SELECT b.hi, b.n, d.* FROM b LEFT JOIN (SELECT * FROM (SELECT coalesce(tgt.k, rec.k) AS k, tgt.k IS NULL AS missing, rec.k IS NULL AS extra, tgt.c0 AS t0, rec.c0 AS r0, tgt.c1 AS t1, rec.c1 AS r1 FROM tgt FULL JOIN rec ON tgt.k = rec.k COLLATE "C" WHERE tgt.k IS NULL OR rec.k IS NULL OR tgt.c0 IS DISTINCT FROM rec.c0 OR tgt.c1 IS DISTINCT FROM rec.c1) j WHERE j.k IN (SELECT k FROM ks)) d ON true
LEFT JOIN ks o ON o.k = d.k ORDER BY o.p0;

-- order_totals: self-check diff
WITH tgt AS MATERIALIZED (SELECT t."id" AS p0, (t."id")::text AS k, t."total"::text AS c0, t."loud"::text AS c1 FROM (SELECT * FROM "public"."order_totals" AS t WHERE (t."id") IN (SELECT u.p0::bigint FROM unnest($2::text[]) AS u(p0)) AND (t."id")::text = ANY($1::text[])) t),
rec AS MATERIALIZED (SELECT r."id" AS p0, (r."id")::text AS k, r."total"::text AS c0, r."loud"::text AS c1 FROM (SELECT "__s"."id", ("__s"."price" + "__s"."tax") AS "total", (upper("__s"."note")) AS "loud" FROM "public"."orders" AS "__s" WHERE ("__s"."id") IN (SELECT u.p0::bigint FROM unnest($2::text[]) AS u(p0)) AND ("__s"."id")::text = ANY($1::text[])) r)
SELECT coalesce(tgt.k, rec.k) AS k, tgt.k IS NULL AS missing, rec.k IS NULL AS extra, tgt.c0 AS t0, rec.c0 AS r0, tgt.c1 AS t1, rec.c1 AS r1 FROM tgt FULL JOIN rec ON tgt.k = rec.k COLLATE "C" WHERE tgt.k IS NULL OR rec.k IS NULL OR tgt.c0 IS DISTINCT FROM rec.c0 OR tgt.c1 IS DISTINCT FROM rec.c1
ORDER BY coalesce(tgt.k, rec.k) COLLATE "C";

