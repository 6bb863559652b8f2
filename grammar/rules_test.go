package grammar

import (
	"fmt"
	"strings"
	"testing"

	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// ruleCase is one statement and the variant the grammar must refuse it with
// ("" = accepted). Cases come in pairs: each refusal has an accepted twin
// that differs as little as possible.
type ruleCase struct {
	text string
	want string
	pos  int // expected position when non-zero
}

func runRules(t *testing.T, cases []ruleCase) {
	t.Helper()
	for _, c := range cases {
		cat := exampleCatalog()
		// Stored definitions the ALTER cases edit.
		for _, d := range []string{
			"TRANSFORM order_calc FROM orders SELECT a AS a, b AS b, a + b AS total",
			"TRANSFORM order_rollup FROM orders GROUP BY g SELECT sum(a) AS total",
			"TRANSFORM post_view FROM posts JOIN authors AS author ON author.id = posts.author SELECT author.name AS author_name, author.id AS author_id",
		} {
			if _, _, err := cat.outcome(d); err != nil {
				t.Fatal(err)
			}
		}
		st, _, err := cat.outcome(c.text)
		got := ""
		var e *pgerr.Error
		if err != nil {
			var ok bool
			if e, ok = pgerr.As(err); !ok {
				t.Errorf("%q: not a pgerr.Error: %v", c.text, err)
				continue
			}
			got = e.Variant
			if e.Code != variantCode[e.Variant][1] || e.Class != variantCode[e.Variant][0] {
				t.Errorf("%q: %s carries %s/%s", c.text, e.Variant, e.Class, e.Code)
			}
			if e.Position <= 0 {
				t.Errorf("%q: %s without position", c.text, e.Variant)
			}
		}
		if got != c.want {
			t.Errorf("%q: got %q (%v), want %q", c.text, got, err, c.want)
			continue
		}
		if c.pos != 0 && e != nil && e.Position != c.pos {
			t.Errorf("%q: position %d, want %d (near %q)", c.text, e.Position, c.pos, near(c.text, e.Position))
		}
		if err == nil {
			checkRoundTrip(t, c.text, st)
		}
	}
}

func TestLexicalRules(t *testing.T) {
	long := strings.Repeat("x", 64)
	runRules(t, []ruleCase{
		{"TRANSFORM t FROM orders SELECT a AS x /* open", UnterminatedComment, 39},
		{"TRANSFORM t FROM orders SELECT a AS x /* a /* nested */ comment */", "", 0},
		{"TRANSFORM t FROM orders SELECT 'abc AS x", UnterminatedString, 32},
		{"TRANSFORM t FROM orders SELECT 'abc' AS x", "", 0},
		{"TRANSFORM t FROM orders SELECT $$abc AS x", UnterminatedString, 32},
		{"TRANSFORM t FROM orders SELECT $q$it's$q$ AS x", "", 0},
		{`TRANSFORM t FROM orders SELECT a AS "x`, UnterminatedString, 37},
		{`TRANSFORM t FROM orders SELECT a AS "x"`, "", 0},
		{`TRANSFORM "" FROM orders SELECT a AS x`, ZeroLengthIdentifier, 11},
		{`TRANSFORM "t" FROM orders SELECT a AS x`, "", 0},
		{"TRANSFORM t FROM orders SELECT a \\ b AS x", UnexpectedChar, 34},
		{"TRANSFORM t FROM orders SELECT a / b AS x", "", 0},
		{"TRANSFORM t FROM orders SELECT a AS " + long, NameTooLong, 37},
		{"TRANSFORM t FROM orders SELECT a AS " + long[:63], "", 0},
		{"TRANSFORM t FROM orders SELECT " + long + " AS x", NameTooLong, 32},
		{`TRANSFORM "` + long + `" FROM orders SELECT a AS x`, NameTooLong, 11},
		{"TRANSFORM " + strings.Repeat("t", 56) + " FROM orders SELECT a AS x", NameTooLong, 11},
		{"TRANSFORM " + strings.Repeat("t", 55) + " FROM orders SELECT a AS x", "", 0},
		{`TRANSFORM U&"t" FROM orders SELECT a AS x`, UnsupportedIdentifierSyntax, 11},
		{`TRANSFORM t FROM orders SELECT U&"a" AS x`, "", 0},
		{"TRANSFORM t FROM orders SELECT a + $1 AS x", ParameterNotAllowed, 36},
		{"TRANSFORM t FROM orders SELECT a + '$1' AS x", "", 0},
		{"TRANSFORM t FROM orders SELECT a AS x\x00", UnexpectedChar, 38},
		{"TRANSFORM t FROM orders SELECT a AS x\n", "", 0},
		{"TRANSFORM t FROM orders SELECT a AS \xff", InvalidEncoding, 37},
		{"TRANSFORM t FROM orders SELECT a AS é", "", 0},
		{"TRANSFORM t FROM orders SELECT a AS x; SELECT 1", UnexpectedToken, 40},
		{"TRANSFORM t FROM orders SELECT a AS x; -- done", "", 0},
		{"TRANSFORM t FROM orders SELECT 'é' || nope + AS x", UnexpectedToken, 46},
		{"TRANSFORM t FROM orders SELECT 'é' || name AS x", "", 0},
		{"TRANSFORM t FROM orders SELECT a +", UnexpectedEOF, 35},
		{"TRANSFORM t FROM orders SELECT a + 1 AS x", "", 0},
	})
}

func TestSyntaxRules(t *testing.T) {
	runRules(t, []ruleCase{
		{"TRANSFORM t orders SELECT a AS x", UnexpectedToken, 13},
		{"TRANSFORM t FROM orders o o2 SELECT a AS x", UnexpectedToken, 27},
		{"TRANSFORM t FROM orders o SELECT a AS x", "", 0},
		{"TRANSFORM t FROM orders AS select SELECT a AS x", UnexpectedToken, 28},
		{"TRANSFORM t FROM orders AS o SELECT o.a AS x", "", 0},
		{"TRANSFORM t FROM orders, x SELECT a AS x", UnsupportedJoinKind, 24},
		{"TRANSFORM t FROM orders RIGHT JOIN posts ON posts.id = orders.id SELECT a AS x", UnsupportedJoinKind, 25},
		{"TRANSFORM t FROM orders FULL JOIN posts ON posts.id = orders.id SELECT a AS x", UnsupportedJoinKind, 25},
		{"TRANSFORM t FROM orders CROSS JOIN posts SELECT a AS x", UnsupportedJoinKind, 25},
		{"TRANSFORM t FROM orders NATURAL JOIN posts SELECT a AS x", UnsupportedJoinKind, 25},
		{"TRANSFORM t FROM orders JOIN LATERAL posts ON posts.id = orders.id SELECT a AS x", UnsupportedJoinKind, 30},
		{"TRANSFORM t FROM orders JOIN (SELECT 1) p ON p.id = orders.id SELECT a AS x", UnsupportedJoinKind, 30},
		{"TRANSFORM t FROM orders LEFT OUTER JOIN posts ON posts.id = orders.id SELECT a AS x", "", 0},
		{"TRANSFORM t FROM orders INNER JOIN posts ON posts.id = orders.id SELECT a AS x", "", 0},
		{"TRANSFORM t FROM orders JOIN posts ON posts.id = orders.id SELECT a AS x WITHOUT SOURCE INDEX", "", 0},
		{"TRANSFORM t FROM orders JOIN posts ON posts.id = orders.id SELECT a AS x WHERE TRUE WITHOUT SOURCE INDEX", "", 0},
		{"TRANSFORM t FROM orders JOIN posts ON posts.id = orders.id SELECT a AS x WITHOUT INDEX", UnexpectedToken, 0},
		{"TRANSFORM t FROM orders LEFT JOIN posts USING (id) SELECT a AS x", UnsupportedJoinCondition, 41},
		{"TRANSFORM t FROM orders LEFT JOIN posts SELECT a AS x", UnexpectedToken, 41},
		{"TRANSFORM t FROM orders JOIN posts ON posts.id < orders.id SELECT a AS x", UnsupportedJoinCondition, 48},
		{"TRANSFORM t FROM orders JOIN posts ON posts.id = orders.id OR posts.id = orders.g SELECT a AS x", UnsupportedJoinCondition, 60},
		{"TRANSFORM t FROM orders JOIN posts ON posts.id = 1 SELECT a AS x", UnsupportedJoinCondition, 50},
		{"TRANSFORM t FROM orders JOIN posts ON posts.id = abs(orders.id) SELECT a AS x", UnsupportedJoinCondition, 53},
		{"TRANSFORM t FROM orders JOIN posts ON posts.id = orders.id + 1 SELECT a AS x", UnsupportedJoinCondition, 60},
		{"TRANSFORM t FROM orders JOIN posts ON (posts.id = orders.id AND posts.author = orders.g) SELECT a AS x", "", 0},
		{"TRANSFORM t FROM orders JOIN posts ON (posts.id = orders.id SELECT a AS x", UnsupportedJoinCondition, 61},
		{"TRANSFORM t FROM orders JOIN orders ON orders.id = orders.g SELECT a AS x", DuplicateTableName, 30},
		{"TRANSFORM t FROM orders JOIN orders AS parent ON parent.id = orders.g SELECT orders.a AS x", "", 0},
		{"TRANSFORM t FROM orders o JOIN posts o ON o.id = o.id SELECT a AS x", DuplicateTableName, 32},
		{"TRANSFORM orders2 FROM orders JOIN orders2 AS p ON p.id = orders.id SELECT a AS x", TargetEqualsSource, 11},
		{"TRANSFORM t FROM orders" + joinsN(16) + " SELECT orders.a AS x", "", 0},
		{"TRANSFORM t FROM orders" + joinsN(17) + " SELECT a AS x", TooManyJoins, 0},
		{"TRANSFORM t FROM public.orders SELECT a AS x", "", 0},
		{"TRANSFORM a.b.t FROM orders SELECT a AS x", TooManyQualifiedNameParts, 11},
		{"TRANSFORM b.t FROM orders SELECT a AS x", "", 0},
		{"TRANSFORM t FROM orders GROUP BY a.b.c.d SELECT COUNT(*) AS n", TooManyQualifiedNameParts, 34},
		{"TRANSFORM t FROM orders GROUP BY public.orders.g SELECT COUNT(*) AS n", "", 0},
		{"TRANSFORM t FROM orders GROUP BY g + 1 SELECT COUNT(*) AS n", UnexpectedToken, 36},
		{"TRANSFORM t FROM orders GROUP BY g AS k SELECT COUNT(*) AS n", UnexpectedToken, 36},
		{"TRANSFORM t FROM orders GROUP BY g SELECT COUNT(*) AS n", "", 0},
		{"TRANSFORM t FROM orders GROUP BY order SELECT COUNT(*) AS n", UnexpectedToken, 34},
		{"TRANSFORM t FROM orders SELECT", UnexpectedEOF, 0},
		{"TRANSFORM t FROM orders SELECT a", UnexpectedEOF, 33},
		{"TRANSFORM t FROM orders SELECT a AS x FROM orders", UnsupportedConstruct, 39},
		{"TRANSFORM t FROM orders SELECT a IS DISTINCT FROM b AS x", "", 0},
		{"TRANSFORM t FROM orders SELECT DISTINCT a AS x", UnsupportedConstruct, 32},
		{"TRANSFORM t FROM orders SELECT a AS x LIMIT 1", UnsupportedConstruct, 39},
		{"TRANSFORM t FROM orders SELECT a AS x OFFSET 1", UnsupportedConstruct, 39},
		{"TRANSFORM t FROM orders SELECT a AS x HAVING TRUE", UnsupportedConstruct, 39},
		{"TRANSFORM t FROM orders SELECT a AS x UNION SELECT b AS x", UnsupportedConstruct, 39},
		{"TRANSFORM t FROM orders SELECT a AS x FOR UPDATE", UnsupportedConstruct, 39},
		{"TRANSFORM t FROM orders SELECT orders.* ", UnsupportedConstruct, 32},
		{"TRANSFORM t FROM orders SELECT a AS x WHERE true", "", 0},
		{"TRANSFORM t FROM orders SELECT a AS x WHERE NOT FALSE", UnsupportedPredicate, 39},
		{"TRANSFORM t FROM orders SELECT a AS x, b y", UnexpectedToken, 42},
		{"TRANSFORM t FROM orders SELECT a AS x, b AS y", "", 0},
		{"TRANSFORM t FROM orders SELECT 1 AS select", "", 0},
		{"TRANSFORM t FROM orders SELECT a AS x trailing garbage", UnexpectedToken, 0},
		{"RELATIONSHIP r FROM posts TO authors.id", UnexpectedToken, 21},
		{"RELATIONSHIP r FROM public.posts.author TO authors.id", TooManyQualifiedNameParts, 21},
		{"RELATIONSHIP r FROM posts.author TO authors.id", RelationshipsReplacedByJoin, 1},
		{"RELATIONSHIP r FROM posts.author authors.id", UnexpectedToken, 34},
		{"PAUSE TRANSFORM a.b.c", MalformedDefinitionAddress, 17},
		{"PAUSE TRANSFORM a.b", "", 0},
		{"RESUME t", UnexpectedToken, 8},
		{"RESUME TRANSFORM t", "", 0},
		{"DROP TRANSFORM t CASCADE", UnexpectedToken, 18},
		{"DROP TRANSFORM t", "", 0},
		{"DROP RELATIONSHIP a.b.c.d", MalformedDefinitionAddress, 19},
		{"DROP RELATIONSHIP public.posts.author", RelationshipsReplacedByJoin, 1},
		{`DROP TRANSFORM "if"`, "", 0},
		{"ALTER TRANSFORM t RENAME x", UnexpectedToken, 19},
		{"ALTER TRANSFORM order_calc DROP total", "", 0},
		{"ALTER TRANSFORM s.t DROP x", MalformedDefinitionAddress, 17},
		{"ALTER TRANSFORM order_calc ADD a * 3", UnexpectedEOF, 0},
		{"ALTER TRANSFORM order_calc ADD a * 3 AS triple", "", 0},
		{"ALTER TRANSFORM order_calc ALTER total AS a + 1 AS y", UnexpectedToken, 0},
		{"ALTER TRANSFORM order_calc ALTER total AS a + 1", "", 0},
		{"ALTER TRANSFORM order_calc DROP total extra", UnexpectedToken, 39},
		{"ALTER TRANSFORM order_calc ADD x AS y FROM orders", UnsupportedConstruct, 0},
	})
}

func TestShapeRules(t *testing.T) {
	runRules(t, []ruleCase{
		{"TRANSFORM t FROM orders SELECT EXISTS (SELECT 1) AS x", SubqueryNotAllowed, 32},
		{"TRANSFORM t FROM orders SELECT a IN (SELECT 1) AS x", SubqueryNotAllowed, 34},
		{"TRANSFORM t FROM orders SELECT a IN (1, 2) AS x", "", 0},
		{"TRANSFORM t FROM orders SELECT ARRAY(SELECT 1) AS x", SubqueryNotAllowed, 32},
		{"TRANSFORM t FROM orders SELECT ARRAY[a, b] AS x", "", 0},
		{"TRANSFORM t FROM orders GROUP BY g SELECT sum(a) OVER (PARTITION BY g) AS x", WindowFunctionNotAllowed, 43},
		{"TRANSFORM t FROM orders GROUP BY g SELECT sum(a) AS x", "", 0},
		{"TRANSFORM t FROM orders SELECT CURRENT_TIMESTAMP(3) AS x", NonImmutableConstruct, 32},
		{"TRANSFORM t FROM orders SELECT current_user AS x", NonImmutableConstruct, 32},
		{"TRANSFORM t FROM orders SELECT \"current_user\" AS x", UnresolvedColumn, 32},
		{"TRANSFORM t FROM orders GROUP BY g SELECT sum(a ORDER BY a) AS x", AggregateModifierNotAllowed, 43},
		{"TRANSFORM t FROM orders GROUP BY g SELECT count(*) FILTER (WHERE a > 0) AS x", AggregateModifierNotAllowed, 43},
		{"TRANSFORM t FROM orders GROUP BY g SELECT count(a) AS x", "", 0},
		{"TRANSFORM t FROM orders GROUP BY g SELECT count(a, b) AS x", FunctionArityMismatch, 43},
		{"TRANSFORM t FROM orders GROUP BY g SELECT sum() AS x", FunctionArityMismatch, 43},
		{"TRANSFORM t FROM orders GROUP BY g SELECT sum(*) AS x", FunctionArityMismatch, 43},
		{"TRANSFORM t FROM orders GROUP BY g SELECT pg_catalog.sum(a) AS x", "", 0},
		{"TRANSFORM t FROM orders GROUP BY g SELECT myschema.sum(a, b) AS x", UngroupedColumnReference, 0},
		{"TRANSFORM t FROM orders GROUP BY g SELECT max(a) + sum(b) AS x", "", 0},
		{"TRANSFORM t FROM orders GROUP BY g SELECT max(a + sum(b)) AS x", AggregateOfAggregateField, 51},
		{"TRANSFORM t FROM orders SELECT XMLELEMENT(name foo) AS x", UnsupportedConstruct, 32},
		{"TRANSFORM t FROM orders SELECT GROUPING(a) AS x", UnsupportedConstruct, 32},
		{"TRANSFORM t FROM orders SELECT unnest(ARRAY[a]) AS x", SetReturningFunctionNotAllowed, 32},
		{"TRANSFORM t FROM orders GROUP BY g SELECT array_agg(a) AS x", UnsupportedAggregate, 43},
		{"TRANSFORM t FROM orders SELECT a.b.c.d AS x", TooManyQualifiedNameParts, 32},
		{"TRANSFORM t FROM orders SELECT public.orders.a AS x", "", 0},
		{"TRANSFORM t FROM orders SELECT (ROW(a, b)).f1 AS x", UnsupportedConstruct, 0},
		{"TRANSFORM t FROM orders SELECT (string_to_array(name, ','))[1] AS x", "", 0},
		{"TRANSFORM t FROM orders SELECT " + strings.Repeat("(", MaxExprDepth+1) + "a" + strings.Repeat(")", MaxExprDepth+1) + " AS x", ExpressionTooComplex, 0},
		{"TRANSFORM t FROM orders SELECT " + strings.Repeat("(", 200) + "a" + strings.Repeat(")", 200) + " AS x", "", 0},
		{"TRANSFORM t FROM orders SELECT " + strings.Repeat("a + ", MaxExprDepth+1) + "a AS x", ExpressionTooComplex, 0},
		{"TRANSFORM t FROM orders SELECT " + strings.Repeat("a + ", 500) + "a AS x", "", 0},
	})
}

func TestDefinitionRules(t *testing.T) {
	runRules(t, []ruleCase{
		// Naming.
		{"TRANSFORM t FROM orders SELECT a AS x, b AS x", DuplicateFieldName, 45},
		{"TRANSFORM t FROM orders SELECT a AS x, b AS \"X\"", "", 0},
		{"TRANSFORM t FROM orders SELECT id AS id", FieldNamedAfterKeyColumn, 38},
		{"TRANSFORM t FROM orders SELECT id AS order_id", "", 0},
		{"TRANSFORM t FROM orders SELECT a AS __x", ReservedColumnName, 37},
		{"TRANSFORM t FROM orders SELECT a AS _x", "", 0},
		{"TRANSFORM t FROM orders SELECT a + 1 AS a", CalculatedFieldShadowsSourceColumn, 41},
		{"TRANSFORM t FROM orders SELECT orders.a AS a", "", 0},
		{"TRANSFORM t FROM orders GROUP BY g SELECT g + 1 AS g", GroupingColumnFieldMustBePassthrough, 52},
		{"TRANSFORM t FROM orders GROUP BY g SELECT orders.g AS g", "", 0},
		{"TRANSFORM t FROM posts JOIN authors AS author ON author.id = posts.author GROUP BY author.name, nope SELECT COUNT(*) AS n", UnresolvedGroupByColumn, 97},
		{"TRANSFORM t FROM posts JOIN authors AS author ON author.id = posts.author GROUP BY author.name, posts.id SELECT COUNT(*) AS n", "", 0},
		{"TRANSFORM t FROM posts JOIN authors AS author ON author.id = posts.author GROUP BY author.name, id SELECT COUNT(*) AS n", AmbiguousColumnReference, 97},
		{"TRANSFORM t FROM orders GROUP BY name, orders.name SELECT COUNT(*) AS n", DuplicateGroupByColumn, 40},
		{"TRANSFORM t FROM orders GROUP BY name, g SELECT COUNT(*) AS n", "", 0},
		{"TRANSFORM t FROM posts JOIN authors AS author ON author.id = posts.author GROUP BY author.name SELECT author.name AS name", "", 0},
		{"TRANSFORM t FROM posts JOIN authors AS author ON author.id = posts.author GROUP BY author.name SELECT name AS name", "", 0},
		{"TRANSFORM t FROM posts JOIN authors AS author ON author.id = posts.author GROUP BY author.name SELECT author.id AS name", GroupingColumnFieldMustBePassthrough, 0},
		// Joins: names and ON conditions.
		{"TRANSFORM t FROM posts JOIN authors ON authors.id = posts.author SELECT name AS n", "", 0},
		{"TRANSFORM t FROM posts JOIN authors ON authors.id = posts.author SELECT id AS n", AmbiguousColumnReference, 73},
		{"TRANSFORM t FROM posts JOIN authors ON authors.id = posts.author SELECT posts.id AS n", "", 0},
		{"TRANSFORM t FROM posts p JOIN authors a ON a.id = p.author SELECT posts.id AS n", QualifiedColumnNotFromTable, 67},
		{"TRANSFORM t FROM posts p JOIN authors a ON a.id = p.author SELECT p.id AS n, a.name AS who", "", 0},
		{"TRANSFORM t FROM posts p JOIN authors a ON a.id = p.author SELECT public.posts.id AS n", QualifiedColumnNotFromTable, 67},
		{"TRANSFORM t FROM posts JOIN authors a ON a.id = posts.author SELECT public.posts.id AS n", "", 0},
		{"TRANSFORM t FROM posts JOIN authors ON author = authors.id SELECT name AS n", "", 0},
		{"TRANSFORM t FROM posts JOIN authors ON authors.nope = posts.author SELECT name AS n", UnresolvedColumn, 40},
		{"TRANSFORM t FROM posts JOIN authors ON nope = posts.author SELECT name AS n", UnresolvedColumn, 40},
		{"TRANSFORM t FROM posts JOIN authors ON id = posts.author SELECT name AS n", AmbiguousColumnReference, 40},
		{"TRANSFORM t FROM posts JOIN authors ON posts.id = posts.author SELECT name AS n", UnsupportedJoinCondition, 40},
		{"TRANSFORM t FROM posts JOIN authors ON authors.id = authors.id SELECT name AS n", UnsupportedJoinCondition, 40},
		{"TRANSFORM t FROM posts JOIN authors ON authors.id = comments.id SELECT name AS n", QualifiedColumnNotFromTable, 53},
		{"TRANSFORM t FROM posts JOIN authors ON authors.id = posts.author JOIN comments ON comments.post_id = posts.id AND comments.id = authors.id SELECT name AS n", UnsupportedJoinCondition, 115},
		{"TRANSFORM t FROM posts JOIN authors ON authors.id = posts.author JOIN comments ON comments.post_id = posts.id AND comments.id = posts.author SELECT name AS n", "", 0},
		{"TRANSFORM t FROM comments JOIN posts ON posts.id = comments.post_id JOIN authors ON authors.id = posts.author SELECT words AS w, name AS who", "", 0},
		{"TRANSFORM t FROM posts JOIN authors ON authors.id = comments.id JOIN comments ON comments.post_id = posts.id SELECT name AS n", QualifiedColumnNotFromTable, 53},
		{"TRANSFORM t FROM orders JOIN orders AS parent ON parent.id = orders.g SELECT parent.name AS parent_name", "", 0},
		{"TRANSFORM t FROM orders JOIN orders AS parent ON parent.id = orders.g SELECT name AS parent_name", AmbiguousColumnReference, 78},
		// Names inside formulas.
		{"TRANSFORM t FROM orders SELECT amout AS x", UnresolvedColumn, 32},
		{"TRANSFORM t FROM orders SELECT a AS x, x + 1 AS y", "", 0},
		{"TRANSFORM t FROM orders SELECT nope AS nope", UnresolvedColumn, 32},
		{"TRANSFORM t FROM orders SELECT orders.nope AS x", UnresolvedColumn, 32},
		{"TRANSFORM t FROM orders SELECT other.orders.a AS x", QualifiedColumnNotFromTable, 32},
		{"TRANSFORM t FROM orders GROUP BY other.orders.g SELECT COUNT(*) AS n", QualifiedColumnNotFromTable, 34},
		{"TRANSFORM t FROM orders GROUP BY g SELECT (g + 1) AS a, SUM(a) AS s", AmbiguousColumnReference, 61},
		{"TRANSFORM t FROM orders GROUP BY g SELECT (g + 1) AS a, SUM(orders.a) AS s", "", 0},
		{"TRANSFORM t FROM orders GROUP BY g SELECT g AS g, SUM(a) AS a, MIN(a) AS lo", "", 0},
		{"TRANSFORM t FROM orders GROUP BY g SELECT SUM(a) AS total, MAX(total) AS m", AggregateOfAggregateField, 0},
		{"TRANSFORM t FROM orders GROUP BY g SELECT SUM(a) AS total, total + 1 AS t2, MAX(t2) AS m", AggregateOfAggregateField, 0},
		{"TRANSFORM t FROM orders GROUP BY g SELECT SUM(a) AS total, total + 1 AS t2", "", 0},
		// Key space.
		{"TRANSFORM t FROM orders GROUP BY g SELECT a AS x", UngroupedColumnReference, 43},
		{"TRANSFORM t FROM orders GROUP BY g SELECT g * 2 AS x", "", 0},
		{"TRANSFORM t FROM posts JOIN authors AS author ON author.id = posts.author GROUP BY posts.id SELECT author.name AS x", UngroupedColumnReference, 100},
		{"TRANSFORM t FROM posts JOIN authors AS author ON author.id = posts.author GROUP BY author.name SELECT author.name || '!' AS x", "", 0},
		{"TRANSFORM t FROM posts JOIN authors AS author ON author.id = posts.author GROUP BY posts.id SELECT max(author.name) AS x", "", 0},
		{"TRANSFORM t FROM posts SELECT SUM(posts.id) AS s", UnsupportedKeySpace, 31},
		{"TRANSFORM t FROM posts SELECT posts.id * 2 AS s", "", 0},
		{"TRANSFORM t FROM posts JOIN authors AS author ON author.id = posts.author SELECT max(author.name) AS s", UnsupportedKeySpace, 82},
		{"TRANSFORM t FROM posts JOIN authors AS author ON author.id = posts.author SELECT author.name AS s", "", 0},
		{"TRANSFORM t FROM posts JOIN authors AS author ON author.id = posts.author SELECT author.nope AS x", UnresolvedColumn, 82},
		{"TRANSFORM t FROM posts SELECT author.name AS x", QualifiedColumnNotFromTable, 31},
		{"TRANSFORM t FROM posts GROUP BY editor.name SELECT COUNT(*) AS n", QualifiedColumnNotFromTable, 33},
		// Cycles.
		{"TRANSFORM t FROM orders SELECT z + 1 AS x, x + 1 AS y, y + 1 AS z", Cycle, 0},
		{"TRANSFORM t FROM orders SELECT a + 1 AS x, x + 1 AS y, y + 1 AS z", "", 0},
		// ALTER.
		{"ALTER TRANSFORM order_calc ADD a AS total", AlterFieldAlreadyExists, 37},
		{"ALTER TRANSFORM order_calc ADD a + b AS total", "", 0},
		{"ALTER TRANSFORM order_calc ALTER nope AS a", AlterFieldNotFound, 34},
		{"ALTER TRANSFORM order_calc ALTER a AS a + 1", CalculatedFieldShadowsSourceColumn, 0},
		{"ALTER TRANSFORM order_calc ALTER total AS a - b", "", 0},
		{"ALTER TRANSFORM order_calc ADD SUM(a) AS s", UnsupportedKeySpace, 32},
		{"ALTER TRANSFORM order_calc ADD total * 2 AS t2", "", 0},
		{"ALTER TRANSFORM order_calc ADD t2 + 1 AS t3, ADD t3 AS t2", Cycle, 0},
		{"ALTER TRANSFORM order_calc ADD total + 1 AS t3, ADD t3 AS t2", "", 0},
		{"ALTER TRANSFORM order_rollup DROP total", UnsupportedAlter, 17},
		{"ALTER TRANSFORM post_view DROP author_id", "", 0},
		{"ALTER TRANSFORM post_view ADD upper(author.name) AS loud", "", 0},
		{"ALTER TRANSFORM post_view ADD upper(editor.name) AS loud", QualifiedColumnNotFromTable, 0},
		{"ALTER TRANSFORM post_view ADD SUM(author.id) AS s", UnsupportedKeySpace, 31},
		// Target and source.
		{"TRANSFORM a.orders FROM b.orders SELECT a AS x", TargetEqualsSource, 13},
		{"TRANSFORM a.orders2 FROM b.orders SELECT a AS x", "", 0},
	})
}

func TestApplyAlterResult(t *testing.T) {
	def := mustParse(t, "TRANSFORM v FROM orders SELECT a AS a, a + b AS total, b * 2 AS dbl").(*TransformStmt)
	alt := mustParse(t, "ALTER TRANSFORM v ADD a + b AS total, ADD a * 3 AS triple, ALTER dbl AS b * 2, DROP nope, DROP a").(*AlterTransformStmt)
	m, res, err := ApplyAlter(def, alt)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(res.Added, ","); got != "triple" {
		t.Errorf("added %q", got)
	}
	if got := strings.Join(res.Dropped, ","); got != "a" {
		t.Errorf("dropped %q", got)
	}
	if len(res.Altered) != 0 || !res.Changed() {
		t.Errorf("altered %v changed %v", res.Altered, res.Changed())
	}
	want := `TRANSFORM "v" FROM "orders" SELECT "a" + "b" AS "total", "b" * 2 AS "dbl", "a" * 3 AS "triple"`
	if got := Canonical(m); got != want {
		t.Errorf("merged %s\nwant   %s", got, want)
	}
	noop := mustParse(t, "ALTER TRANSFORM v ADD a + b AS total, DROP nope").(*AlterTransformStmt)
	if _, res, err := ApplyAlter(def, noop); err != nil || res.Changed() {
		t.Errorf("no-op alter: %v %+v", err, res)
	}
}

// joinsN is n JOIN items of the orders table under the aliases j1..jn.
func joinsN(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, " JOIN orders AS j%d ON j%d.id = orders.id", i, i)
	}
	return b.String()
}

func mustParse(t testing.TB, text string) Statement {
	t.Helper()
	st, err := Parse(text)
	if err != nil {
		t.Fatalf("%q: %v", text, err)
	}
	return st
}
