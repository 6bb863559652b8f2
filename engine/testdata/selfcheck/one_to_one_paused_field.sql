-- item_calc: self-check bounds
WITH tgt AS MATERIALIZED (SELECT * FROM (SELECT (t."id")::text AS k, t."a1"::text AS c0 FROM "public"."item_calc" AS t) x WHERE ($1::text IS NULL OR x.k > $1 COLLATE "C")), rec AS MATERIALIZED (SELECT * FROM (SELECT (r."id")::text AS k, r."a1"::text AS c0 FROM (SELECT "__s"."id" AS "id", ("__s"."a" + 1) AS "a1" FROM "public"."items" AS "__s") AS r) x WHERE ($1::text IS NULL OR x.k > $1 COLLATE "C")),
ks AS (SELECT k FROM (SELECT k FROM tgt UNION SELECT k FROM rec) u ORDER BY k COLLATE "C" LIMIT $2)
SELECT max(k COLLATE "C"), count(*) FROM ks;

-- item_calc: self-check diff
WITH tgt AS MATERIALIZED (SELECT * FROM (SELECT (t."id")::text AS k, t."a1"::text AS c0 FROM "public"."item_calc" AS t) x WHERE ($1::text IS NULL OR x.k > $1 COLLATE "C")), rec AS MATERIALIZED (SELECT * FROM (SELECT (r."id")::text AS k, r."a1"::text AS c0 FROM (SELECT "__s"."id" AS "id", ("__s"."a" + 1) AS "a1" FROM "public"."items" AS "__s") AS r) x WHERE ($1::text IS NULL OR x.k > $1 COLLATE "C"))
SELECT coalesce(tgt.k, rec.k), tgt.k IS NULL, rec.k IS NULL, tgt.c0, rec.c0 FROM tgt FULL JOIN rec ON tgt.k = rec.k COLLATE "C"
WHERE (tgt.k IS NULL OR rec.k IS NULL OR tgt.c0 IS DISTINCT FROM rec.c0) AND ($2::text IS NULL OR coalesce(tgt.k, rec.k) <= $2 COLLATE "C")
  AND ($3::text[] IS NULL OR coalesce(tgt.k, rec.k) = ANY($3::text[]))
ORDER BY coalesce(tgt.k, rec.k) COLLATE "C";

