package grammar

import (
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// genExpr generates formula text from a grammar covering the accepted
// constructs of spec §5.2, to drive the render → parse fixed point harder
// than byte mutation does.
func genExpr(t *rapid.T, depth int) string {
	leaf := func() string {
		return rapid.SampledFrom([]string{
			"a", "b", "orders.a", "public.orders.b", `"Mixed Case"`, "qty", "name",
			"1", "-1", "0.5", ".5", "1e3", "-2.5", "2147483648", "-2147483648", "0x1F", "1_000",
			"'x'", "'it''s'", `E'a\nb\\c'`, "$$dollar$$", "B'101'", "X'ff'", "TRUE", "FALSE", "NULL",
			"DATE '2024-01-05'", "INTERVAL '1' DAY", "INTERVAL '1 day'", "TIMESTAMP(3) '2024-01-01 10:00'",
			"'1.5'::real", "CAST('1' AS numeric(10,2))", "'x'::varchar(5)", "'y'::char(3)", "'{}'::jsonb",
			"U&\"a\"", "ARRAY[1, 2]", "ROW(1, 'a')",
		}).Draw(t, "leaf")
	}
	if depth <= 0 {
		return leaf()
	}
	sub := func(l string) string { return genExpr(t, depth-1) }
	switch rapid.IntRange(0, 24).Draw(t, "kind") {
	case 0:
		return leaf()
	case 1:
		op := rapid.SampledFrom([]string{"+", "-", "*", "/", "%", "^", "||", "=", "<>", "<", ">=", "~", "@>", "->>"}).Draw(t, "op")
		return sub("l") + " " + op + " " + sub("r")
	case 2:
		return rapid.SampledFrom([]string{"-", "+", "~", "@"}).Draw(t, "prefix") + " " + sub("x")
	case 3:
		return "(" + sub("x") + ")"
	case 4:
		return sub("l") + rapid.SampledFrom([]string{" AND ", " OR "}).Draw(t, "b") + sub("r")
	case 5:
		return "NOT " + sub("x")
	case 6:
		return sub("x") + rapid.SampledFrom([]string{" IS NULL", " IS NOT NULL", " IS TRUE", " IS NOT UNKNOWN", " ISNULL"}).Draw(t, "t")
	case 7:
		return sub("x") + "::" + rapid.SampledFrom([]string{"int", "bigint", "text", "numeric(12,2)", "double precision", "timestamptz", "time(2) with time zone", "int[]", "bit varying(4)", "pg_catalog.bpchar", `"int"`}).Draw(t, "type")
	case 8:
		return "CAST(" + sub("x") + " AS " + rapid.SampledFrom([]string{"integer", "text", "boolean", "interval", "varchar"}).Draw(t, "type") + ")"
	case 9:
		s := "CASE"
		if rapid.Bool().Draw(t, "simple") {
			s += " " + sub("arg")
		}
		for i := rapid.IntRange(1, 3).Draw(t, "whens"); i > 0; i-- {
			s += " WHEN " + sub("c") + " THEN " + sub("r")
		}
		if rapid.Bool().Draw(t, "else") {
			s += " ELSE " + sub("e")
		}
		return s + " END"
	case 10:
		return rapid.SampledFrom([]string{"COALESCE", "GREATEST", "LEAST", "round", "pg_catalog.lower", "f"}).Draw(t, "fn") + "(" + sub("a") + ", " + sub("b") + ")"
	case 11:
		return "NULLIF(" + sub("a") + ", " + sub("b") + ")"
	case 12:
		return sub("x") + rapid.SampledFrom([]string{" IN (", " NOT IN ("}).Draw(t, "in") + sub("a") + ", " + sub("b") + ")"
	case 13:
		return sub("x") + rapid.SampledFrom([]string{" BETWEEN ", " NOT BETWEEN ", " BETWEEN SYMMETRIC "}).Draw(t, "bt") + sub("lo") + " AND " + sub("hi")
	case 14:
		s := sub("x") + rapid.SampledFrom([]string{" LIKE ", " NOT ILIKE ", " SIMILAR TO ", " NOT SIMILAR TO "}).Draw(t, "like") + sub("p")
		if rapid.Bool().Draw(t, "esc") {
			s += " ESCAPE '!'"
		}
		return s
	case 15:
		return "extract(" + rapid.SampledFrom([]string{"year", "epoch", "'Day'"}).Draw(t, "f") + " FROM " + sub("x") + ")"
	case 16:
		return rapid.SampledFrom([]string{"substring(%s FROM 2)", "substring(%s FOR 3)", "substring(%s FROM 1 FOR 2)", "position('a' IN %s)", "trim(%s)", "trim(both 'x' from %s)", "trim(leading from %s)", "overlay(%s placing 'x' from 2)", "%s AT TIME ZONE 'UTC'", "%s AT LOCAL", "collation for (%s)", "normalize(%s, NFKC)", "%s IS NFD NORMALIZED"}).Draw(t, "sql")
	case 17:
		return "(" + sub("x") + ")[" + sub("i") + "]"
	case 18:
		return "(" + sub("x") + ")[1:" + sub("i") + "]"
	case 19:
		return sub("x") + " COLLATE \"C\""
	case 20:
		return sub("l") + rapid.SampledFrom([]string{" IS DISTINCT FROM ", " IS NOT DISTINCT FROM "}).Draw(t, "d") + sub("r")
	case 21:
		return sub("l") + " = " + rapid.SampledFrom([]string{"ANY", "ALL", "SOME"}).Draw(t, "q") + " (" + sub("r") + ")"
	case 22:
		return "(" + sub("a") + ", " + sub("b") + ")"
	case 23:
		return "f(" + rapid.SampledFrom([]string{"n => ", "VARIADIC ", ""}).Draw(t, "argk") + sub("a") + ")"
	default:
		return sub("l") + " OPERATOR(pg_catalog.+) " + sub("r")
	}
}

func TestRenderRoundTripGenerated(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		e := genExpr(t, rapid.IntRange(0, 4).Draw(t, "depth"))
		if strings.Contains(e, "%s") {
			e = strings.ReplaceAll(e, "%s", "name")
		}
		text := "TRANSFORM t FROM orders SELECT " + e + " AS x, " + e + " AS \"y\""
		st, err := Parse(text)
		if err != nil {
			return // e.g. Postgres's own syntax errors (a = b = c)
		}
		checkRoundTrip(t, text, st)
		// The ALTER forms render and round-trip too.
		alt := "ALTER TRANSFORM t ADD " + e + " AS z, ALTER x AS " + e + ", DROP y"
		if st, err := Parse(alt); err == nil {
			checkRoundTrip(t, alt, st)
		} else {
			t.Fatalf("%q parsed in TRANSFORM but not in ALTER: %v", e, err)
		}
	})
}
