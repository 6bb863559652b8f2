-- item_calc: self-check page
WITH tgt AS MATERIALIZED (SELECT * FROM (SELECT (t."id")::text AS k, t."a1"::text AS c0 FROM "public"."item_calc" AS t) x WHERE ($1::text IS NULL OR x.k > $1 COLLATE "C")),
rec AS MATERIALIZED (SELECT * FROM (SELECT (r."id")::text AS k, r."a1"::text AS c0 FROM (SELECT "__s"."id" AS "id", ("__s"."a" + 1) AS "a1" FROM "public"."items" AS "__s") AS r) x WHERE ($1::text IS NULL OR x.k > $1 COLLATE "C")),
ks AS (SELECT k FROM (SELECT k FROM tgt UNION SELECT k FROM rec) u ORDER BY k COLLATE "C" LIMIT $2),
b AS (SELECT max(k COLLATE "C") AS hi, count(*) AS n FROM ks)
SELECT b.hi, b.n, d.* FROM b LEFT JOIN (SELECT coalesce(tgt.k, rec.k) AS k, tgt.k IS NULL AS missing, rec.k IS NULL AS extra, tgt.c0 AS t0, rec.c0 AS r0 FROM tgt FULL JOIN rec ON tgt.k = rec.k COLLATE "C" WHERE tgt.k IS NULL OR rec.k IS NULL OR tgt.c0 IS DISTINCT FROM rec.c0) d ON d.k <= b.hi COLLATE "C"
ORDER BY d.k COLLATE "C";

-- item_calc: self-check diff
WITH tgt AS MATERIALIZED (SELECT * FROM (SELECT (t."id")::text AS k, t."a1"::text AS c0 FROM "public"."item_calc" AS t) x WHERE x.k = ANY($1::text[])),
rec AS MATERIALIZED (SELECT * FROM (SELECT (r."id")::text AS k, r."a1"::text AS c0 FROM (SELECT "__s"."id" AS "id", ("__s"."a" + 1) AS "a1" FROM "public"."items" AS "__s") AS r) x WHERE x.k = ANY($1::text[]))
SELECT coalesce(tgt.k, rec.k) AS k, tgt.k IS NULL AS missing, rec.k IS NULL AS extra, tgt.c0 AS t0, rec.c0 AS r0 FROM tgt FULL JOIN rec ON tgt.k = rec.k COLLATE "C" WHERE tgt.k IS NULL OR rec.k IS NULL OR tgt.c0 IS DISTINCT FROM rec.c0
ORDER BY coalesce(tgt.k, rec.k) COLLATE "C";

