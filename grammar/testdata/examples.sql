-- Worked examples of grammar spec §14, in the order listed there.
-- Each case starts with "-- expect:" and runs to the next one:
--   ok                      accepted by the grammar (Parse, then Resolve / ApplyAlter)
--   <Variant> <SQLSTATE>    refused by the grammar
--   engine <Variant> <SQL>  needs the live catalog or state: the grammar accepts
-- Multi-statement examples are split as the router splits them.

-- expect: ok
TRANSFORM order_calc FROM orders SELECT a AS a, b AS b, a + b AS total
-- expect: ok
TRANSFORM order_flags FROM public.orders SELECT a > b AS a_bigger, char_length(name) AS n
-- expect: ok
TRANSFORM order_consts FROM orders SELECT DATE '2024-01-01' AS d, CAST('\x00ff' AS bytea) AS raw
-- expect: ok
TRANSFORM order_safe FROM orders SELECT COALESCE(qty, 0) + 1 AS qty1
-- expect: ok
TRANSFORM order_rollup FROM orders GROUP BY g SELECT sum(a) AS total
-- expect: ok
TRANSFORM qty_by_g FROM orders GROUP BY g SELECT g AS g, SUM(qty) AS q, COUNT(*) AS n, AVG(a) AS avg_a
-- expect: RelationshipsReplacedByJoin 0A000
RELATIONSHIP author FROM posts.author TO authors.id
-- expect: ok
TRANSFORM post_view FROM posts LEFT JOIN authors AS author ON author.id = posts.author SELECT author.name AS author_name
-- expect: ok
TRANSFORM posts_per_author FROM posts JOIN authors AS author ON author.id = posts.author GROUP BY author.name SELECT COUNT(*) AS n
-- expect: ok
TRANSFORM words_per_post FROM comments JOIN posts p ON p.id = comments.post_id GROUP BY p.id SELECT SUM(words) AS words
-- expect: ok
TRANSFORM comment_view FROM comments c JOIN posts p ON p.id = c.post_id LEFT JOIN authors a ON a.id = p.author SELECT c.words AS words, a.name AS author_name
-- expect: ok
TRANSFORM nested_ok FROM orders GROUP BY g SELECT (g + 1) AS adj, SUM(adj) AS s
-- expect: ok
TRANSFORM by_amount FROM orders GROUP BY a SELECT COUNT(*) AS n
-- expect: ok
ALTER TRANSFORM order_calc ADD a + a AS double_a, ALTER total AS a + b + b
-- expect: ok
PAUSE TRANSFORM order_calc.total
-- expect: ok
RESUME TRANSFORM order_calc.total
-- expect: ok
PAUSE TRANSFORM order_calc
-- expect: ok
RESUME TRANSFORM order_calc
-- expect: ok
PAUSE TRANSFORM order_calc
-- expect: ok
DROP TRANSFORM order_calc
-- expect: ok
TRANSFORM t1 FROM orders SELECT a - b AS x
-- expect: ok
TRANSFORM t2 FROM orders SELECT a * 2 AS x
-- expect: ok
TRANSFORM t3 FROM orders SELECT -a AS x
-- expect: ok
TRANSFORM t4 FROM orders SELECT a::text AS x
-- expect: ok
TRANSFORM t5 FROM orders SELECT a AS x;
-- expect: ok
TRANSFORM t6 FROM orders SELECT round(a) AS x
-- expect: ok
TRANSFORM t7 FROM orders SELECT CAST(a AS text) AS x
-- expect: ok
TRANSFORM t8 FROM orders SELECT COALESCE(a, '0') AS x
-- expect: ok
TRANSFORM t9 FROM orders SELECT regexp_count(name, name) AS x
-- expect: ok
TRANSFORM t10 FROM orders SELECT NULL AS x
-- expect: ok
TRANSFORM t11 FROM orders SELECT DATE '2024-1-5' AS d
-- expect: ok
TRANSFORM T12 FROM ORDERS SELECT A + B AS Total
-- expect: ok
-- nightly rollup
TRANSFORM t13 FROM orders /* v2 */ SELECT a AS x WHERE TRUE
-- expect: ok
TRANSFORM t14 FROM orders SELECT CASE WHEN qty > 10 THEN 'bulk' ELSE 'retail' END AS kind,
       NULLIF(b, 0) AS b_or_null, GREATEST(a, b) AS hi
-- expect: ok
TRANSFORM t15 FROM orders SELECT a / NULLIF(b, 0) AS ratio, upper(name) || '!' AS shout
-- expect: ok
TRANSFORM t16 FROM orders GROUP BY g
SELECT SUM(a) / NULLIF(COUNT(*), 0) AS mean, BOOL_OR(qty > 100) AS any_big
-- expect: ok
TRANSFORM t17 FROM orders SELECT name AS "Name", "name" AS name2
-- expect: ok
TRANSFORM t18 FROM orders SELECT a AS a2
-- expect: ok
TRANSFORM t19 FROM t18 GROUP BY a2 SELECT COUNT(*) AS n

-- §14.2 refused

-- expect: engine NonImmutableConstruct 42P17
TRANSFORM t FROM orders SELECT a + now() AS x
-- expect: engine NonImmutableConstruct 42P17
TRANSFORM t FROM orders SELECT random() AS x
-- expect: NonImmutableConstruct 42P17
TRANSFORM t FROM orders SELECT CURRENT_DATE AS d
-- expect: engine NonImmutableConstruct 42P17
TRANSFORM t FROM orders SELECT to_char(a, '999') AS x
-- expect: engine NonImmutableConstruct 42P17
TRANSFORM t FROM orders SELECT DATE 'today' AS d
-- expect: engine UserDefinedFunction 0A000
TRANSFORM t FROM orders SELECT my_fn(a) AS x
-- expect: SubqueryNotAllowed 0A000
TRANSFORM t FROM orders SELECT (SELECT max(a) FROM orders) AS x
-- expect: WindowFunctionNotAllowed 42P20
TRANSFORM t FROM orders SELECT row_number() OVER () AS x
-- expect: SetReturningFunctionNotAllowed 0A000
TRANSFORM t FROM orders SELECT generate_series(1, qty) AS x
-- expect: ParameterNotAllowed 0A000
TRANSFORM t FROM orders SELECT a + $1 AS x
-- expect: UnsupportedKeySpace 0A000
TRANSFORM t FROM orders SELECT SUM(a) AS x
-- expect: UnsupportedKeySpace 0A000
TRANSFORM t FROM orders SELECT COUNT(*) AS x
-- expect: UnsupportedKeySpace 0A000
TRANSFORM t FROM orders SELECT a AS x GROUP BY g
-- expect: UnsupportedJoinKind 0A000
TRANSFORM t FROM orders, posts SELECT a AS y
-- expect: UnsupportedJoinCondition 0A000
TRANSFORM t FROM orders JOIN posts ON posts.id > orders.id SELECT a AS y
-- expect: DuplicateTableName 42712
TRANSFORM t FROM orders JOIN orders ON orders.id = orders.g SELECT a AS y
-- expect: UnsupportedPredicate 0A000
TRANSFORM t FROM orders SELECT a AS x WHERE a > 1
-- expect: TooManyQualifiedNameParts 42601
TRANSFORM t FROM a.b.orders SELECT a AS x
-- expect: UnexpectedToken 42601
TRANSFORM t FROM orders SELECT a x
-- expect: UnsupportedConstruct 0A000
TRANSFORM t FROM orders SELECT *
-- expect: UnsupportedConstruct 0A000
TRANSFORM t FROM orders SELECT a AS x ORDER BY a
-- expect: UnsupportedIdentifierSyntax 0A000
TRANSFORM U&"t\0031" FROM orders SELECT a AS x
-- expect: UnsupportedAggregate 0A000
TRANSFORM t FROM orders GROUP BY g SELECT string_agg(name, ',') AS names
-- expect: AggregateModifierNotAllowed 0A000
TRANSFORM t FROM orders GROUP BY g SELECT COUNT(DISTINCT name) AS n
-- expect: AggregateOfAggregateField 42803
TRANSFORM t FROM orders GROUP BY g SELECT SUM(MAX(a)) AS x
-- expect: engine FunctionArgTypeMismatch 42804
TRANSFORM t FROM orders GROUP BY g SELECT SUM(name) AS s
-- expect: engine InvalidTypedLiteral 22008
TRANSFORM t FROM orders SELECT DATE '2024-02-30' AS d
-- expect: engine TypeMismatch 42883
TRANSFORM t FROM orders SELECT name + 1 AS x
-- expect: engine TypeMismatch 42804
TRANSFORM t FROM orders SELECT COALESCE(a, 'zero'::text) AS x
-- expect: engine UnsupportedFunction 42883
TRANSFORM t FROM orders SELECT lower(qty) AS x
-- expect: engine InvalidRegexPattern 2201B
TRANSFORM t FROM orders SELECT regexp_count(name, '(') AS x
-- expect: engine InvalidExpression 22012
TRANSFORM t FROM orders SELECT qty + 1 / 0 AS x
-- expect: engine UnsupportedResultType 0A000
TRANSFORM t FROM orders SELECT string_to_array(name, ',') AS p
-- expect: UnresolvedColumn 42703
TRANSFORM t FROM orders SELECT nope AS x
-- expect: QualifiedColumnNotFromTable 42P01
TRANSFORM t FROM orders SELECT other.orders.a AS x
-- expect: CalculatedFieldShadowsSourceColumn 42702
TRANSFORM t FROM orders SELECT a + 1 AS a
-- expect: FieldNamedAfterKeyColumn 42701
TRANSFORM t FROM orders SELECT id AS id
-- expect: ReservedColumnName 42939
TRANSFORM t FROM orders SELECT a AS __x
-- expect: DuplicateFieldName 42701
TRANSFORM t FROM orders SELECT a AS x, b AS x
-- expect: Cycle 42P17
TRANSFORM t FROM orders SELECT y + 1 AS x, x + 1 AS y
-- expect: UngroupedColumnReference 42803
TRANSFORM t FROM orders GROUP BY g SELECT a AS x
-- expect: GroupingColumnFieldMustBePassthrough 42803
TRANSFORM t FROM orders GROUP BY g SELECT SUM(g) AS g
-- expect: AggregateOfAggregateField 42803
TRANSFORM t FROM orders GROUP BY g SELECT SUM(a) AS s, MAX(s) AS m
-- expect: AmbiguousColumnReference 42702
TRANSFORM t FROM orders GROUP BY g SELECT (g + 1) AS a, SUM(a) AS s
-- expect: UnresolvedGroupByColumn 42703
TRANSFORM t FROM orders GROUP BY nope SELECT COUNT(*) AS n
-- expect: QualifiedColumnNotFromTable 42P01
TRANSFORM t FROM posts SELECT comments.words AS w
-- expect: UnsupportedKeySpace 0A000
TRANSFORM t FROM posts JOIN authors AS author ON author.id = posts.author SELECT SUM(author.id) AS s
-- expect: AmbiguousColumnReference 42702
TRANSFORM t FROM posts JOIN authors ON authors.id = posts.author SELECT id AS i
-- expect: UngroupedColumnReference 42803
TRANSFORM t FROM comments JOIN posts ON posts.id = comments.post_id GROUP BY posts.author SELECT words AS w
-- expect: engine JoinNotToOne 0A000
TRANSFORM t FROM posts JOIN comments ON comments.post_id = posts.id SELECT words AS w
-- expect: engine JoinTypeMismatch 42804
TRANSFORM t FROM posts JOIN authors ON authors.name = posts.author SELECT posts.id AS i
-- expect: TargetEqualsSource 22023
TRANSFORM orders FROM orders SELECT a AS x
-- expect: engine TargetTableExists 42P07
TRANSFORM order_flags FROM orders SELECT a AS x
-- expect: engine SourceTableNotFound 42P01
TRANSFORM t FROM nosuch SELECT a AS x
-- expect: engine MissingPrivilege 42501
TRANSFORM t FROM orders SELECT a AS x
-- expect: UnresolvedColumn 42703
TRANSFORM t FROM orders SELECT nope AS x;
-- expect: UnexpectedToken 42601
PAUSE RELATIONSHIP posts.author
-- expect: MalformedDefinitionAddress 42601
DROP TRANSFORM order_flags.n
-- expect: UnscopedRelationshipAddress 42601
DROP RELATIONSHIP author
-- expect: RelationshipsReplacedByJoin 0A000
DROP RELATIONSHIP posts.author
-- expect: engine TransformNotPaused 55000
DROP TRANSFORM order_flags
-- expect: engine TransformNotPaused 55000
RESUME TRANSFORM order_flags
-- expect: engine TransformNotFound 42704
PAUSE TRANSFORM nope
-- expect: engine ColumnNotFound 42703
PAUSE TRANSFORM order_flags.nope
-- expect: engine ColumnNotPaused 55000
RESUME TRANSFORM order_flags.n
-- expect: AlterFieldAlreadyExists 42701
ALTER TRANSFORM order_safe ADD qty AS qty1
-- expect: AlterFieldNotFound 42703
ALTER TRANSFORM order_safe ALTER nope AS qty
-- expect: engine UnsupportedAlter 0A000
ALTER TRANSFORM order_flags ALTER a_bigger AS a + b
-- expect: UnsupportedAlter 0A000
ALTER TRANSFORM order_rollup ADD g AS g2
-- expect: ok
ALTER TRANSFORM post_view ADD author.id AS author_id
