-- kind_sums: self-check page
WITH tgt AS MATERIALIZED (SELECT * FROM (SELECT (CASE WHEN num_nulls(t."kind") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', t."kind"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END) AS k, t."total"::text AS c0 FROM "public"."kind_sums" AS t) x WHERE ($1::text IS NULL OR x.k > $1 COLLATE "C")),
rec AS MATERIALIZED (SELECT * FROM (SELECT (CASE WHEN num_nulls(r."kind") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', r."kind"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END) AS k, r."total"::text AS c0 FROM (SELECT ("__s"."kind") AS "kind", sum(("__s"."amount")) AS "total" FROM "public"."events" AS "__s" GROUP BY ("__s"."kind")) AS r) x WHERE ($1::text IS NULL OR x.k > $1 COLLATE "C")),
ks AS (SELECT k FROM (SELECT k FROM tgt UNION SELECT k FROM rec) u ORDER BY k COLLATE "C" LIMIT $2),
b AS (SELECT max(k COLLATE "C") AS hi, count(*) AS n FROM ks)
SELECT b.hi, b.n, d.* FROM b LEFT JOIN (SELECT coalesce(tgt.k, rec.k) AS k, tgt.k IS NULL AS missing, rec.k IS NULL AS extra, tgt.c0 AS t0, rec.c0 AS r0 FROM tgt FULL JOIN rec ON tgt.k = rec.k COLLATE "C" WHERE tgt.k IS NULL OR rec.k IS NULL OR tgt.c0 IS DISTINCT FROM rec.c0) d ON d.k <= b.hi COLLATE "C"
ORDER BY d.k COLLATE "C";

-- kind_sums: self-check diff
WITH tgt AS MATERIALIZED (SELECT * FROM (SELECT (CASE WHEN num_nulls(t."kind") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', t."kind"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END) AS k, t."total"::text AS c0 FROM "public"."kind_sums" AS t) x WHERE x.k = ANY($1::text[])),
rec AS MATERIALIZED (SELECT * FROM (SELECT (CASE WHEN num_nulls(r."kind") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', r."kind"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END) AS k, r."total"::text AS c0 FROM (SELECT ("__s"."kind") AS "kind", sum(("__s"."amount")) AS "total" FROM "public"."events" AS "__s" GROUP BY ("__s"."kind")) AS r) x WHERE x.k = ANY($1::text[]))
SELECT coalesce(tgt.k, rec.k) AS k, tgt.k IS NULL AS missing, rec.k IS NULL AS extra, tgt.c0 AS t0, rec.c0 AS r0 FROM tgt FULL JOIN rec ON tgt.k = rec.k COLLATE "C" WHERE tgt.k IS NULL OR rec.k IS NULL OR tgt.c0 IS DISTINCT FROM rec.c0
ORDER BY coalesce(tgt.k, rec.k) COLLATE "C";

-- kind_sums: self-check groups of
SELECT (CASE WHEN num_nulls(x."kind") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', x."kind"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END) FROM (SELECT e.g0 AS "kind" FROM "public"."kind_sums__ledger" e WHERE e.k = ANY($1::text[]) AND e.member) x UNION SELECT (CASE WHEN num_nulls(y."kind") = 1 THEN chr(1) ELSE replace(replace(replace(format('%s', y."kind"), chr(27), chr(27) || chr(27)), chr(31), chr(27) || 'f'), chr(1), chr(27) || 'a') END) FROM (SELECT ("__s"."kind") AS "kind" FROM "public"."events" AS "__s" WHERE ("__s"."id")::text = ANY($1::text[])) y;

