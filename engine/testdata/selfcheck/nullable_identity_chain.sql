-- kind_sums: self-check page
WITH tgt AS MATERIALIZED (SELECT t."kind" AS p0, (CASE WHEN num_nulls(t."kind") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', t."kind"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END) AS k, t."total"::text AS c0 FROM (SELECT * FROM "public"."kind_sums" AS t WHERE ($1::boolean OR t."kind" > $2::text OR (t."kind" IS NULL AND $2::text IS NOT NULL)) ORDER BY t."kind" LIMIT $3) t),
bnd AS MATERIALIZED (SELECT count(*) >= $3 AS full, bool_or(p0 IS NULL) AS has_null, max(p0) AS hi FROM tgt),
rec AS MATERIALIZED (SELECT r."kind" AS p0, (CASE WHEN num_nulls(r."kind") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', r."kind"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END) AS k, r."total"::text AS c0 FROM (SELECT ("__s"."kind") AS "kind", sum(("__s"."amount")) AS "total" FROM "public"."events" AS "__s" WHERE ($1::boolean OR ("__s"."kind") > $2::text OR (("__s"."kind") IS NULL AND $2::text IS NOT NULL)) AND ((SELECT NOT b.full OR b.has_null FROM bnd b) OR ("__s"."kind") <= (SELECT b.hi FROM bnd b)) GROUP BY ("__s"."kind")) r),
ks AS (SELECT p0, k FROM tgt UNION SELECT p0, k FROM rec),
b AS (SELECT (SELECT k FROM ks ORDER BY p0 DESC NULLS FIRST LIMIT 1) AS hi, (SELECT count(*) FROM ks) AS n)
SELECT b.hi, b.n, d.* FROM b LEFT JOIN (SELECT coalesce(tgt.k, rec.k) AS k, tgt.k IS NULL AS missing, rec.k IS NULL AS extra, tgt.c0 AS t0, rec.c0 AS r0 FROM tgt FULL JOIN rec ON tgt.k = rec.k COLLATE "C" WHERE tgt.k IS NULL OR rec.k IS NULL OR tgt.c0 IS DISTINCT FROM rec.c0) d ON true
ORDER BY d.k COLLATE "C";

-- kind_sums: self-check diff
WITH tgt AS MATERIALIZED (SELECT * FROM (SELECT (CASE WHEN num_nulls(t."kind") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', t."kind"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END) AS k, t."total"::text AS c0 FROM "public"."kind_sums" AS t) x WHERE x.k = ANY($1::text[])),
rec AS MATERIALIZED (SELECT * FROM (SELECT (CASE WHEN num_nulls(r."kind") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', r."kind"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END) AS k, r."total"::text AS c0 FROM (SELECT ("__s"."kind") AS "kind", sum(("__s"."amount")) AS "total" FROM "public"."events" AS "__s" GROUP BY ("__s"."kind")) AS r) x WHERE x.k = ANY($1::text[]))
SELECT coalesce(tgt.k, rec.k) AS k, tgt.k IS NULL AS missing, rec.k IS NULL AS extra, tgt.c0 AS t0, rec.c0 AS r0 FROM tgt FULL JOIN rec ON tgt.k = rec.k COLLATE "C" WHERE tgt.k IS NULL OR rec.k IS NULL OR tgt.c0 IS DISTINCT FROM rec.c0
ORDER BY coalesce(tgt.k, rec.k) COLLATE "C";

-- kind_sums: self-check groups of
SELECT (CASE WHEN num_nulls(x."kind") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', x."kind"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END) FROM (SELECT e.g0 AS "kind" FROM "public"."kind_sums__ledger" e WHERE e.k = ANY($1::text[]) AND e.member) x UNION SELECT (CASE WHEN num_nulls(y."kind") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', y."kind"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END) FROM (SELECT ("__s"."kind") AS "kind" FROM "public"."events" AS "__s" WHERE ("__s"."id")::text = ANY($1::text[])) y;

