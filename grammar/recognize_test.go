package grammar

import (
	"errors"
	"strings"
	"testing"
)

func TestRecognize(t *testing.T) {
	cases := []struct {
		text string
		want bool
	}{
		{"TRANSFORM t FROM s SELECT a AS b", true},
		{"transform t from s select a as b", true},
		{"  \n\t-- comment\n/* block /* nested */ */ TrAnSfOrM x", true},
		{"RELATIONSHIP r FROM a.b TO c.d", true},
		{"PAUSE TRANSFORM t", true},
		{"PAUSE RELATIONSHIP a.b", true},
		{"RESUME whatever", true},
		{"pause", true},
		{"ALTER TRANSFORM t DROP x", true},
		{"ALTER /* c */ TRANSFORM t", true},
		{"ALTER TABLE t ADD c int", false},
		{"ALTER", false},
		{"DROP RELATIONSHIP a.b", true},
		{"DROP TRANSFORM t", true},
		{"DROP TRANSFORM t.c", true},
		{"DROP TRANSFORM", true},
		{`DROP TRANSFORM "if"`, true},
		{"DROP TRANSFORM iffy", true},
		{"DROP TRANSFORM if$", true},
		{"DROP TRANSFORM IF EXISTS FOR int LANGUAGE plpgsql", false},
		{"DROP TRANSFORM FOR int LANGUAGE plpgsql", false},
		{"drop transform -- x\n for int language sql", false},
		{"DROP TRANSFORM /* unterminated", true},
		{"DROP TABLE t", false},
		{"DROP", false},
		{"CREATE TRANSFORM FOR int LANGUAGE plpgsql (FROM SQL WITH FUNCTION f(internal))", false},
		{"SELECT abalance FROM pgbench_accounts WHERE aid = $1;", false},
		{"transformer", false},
		{"TRANSFORM$1", false},
		{"TRANSFORM_x", false},
		{"TRANSFORM(", true},
		{"TRANSFORM\xff", false},
		{"\"TRANSFORM\" t", false},
		{"/* TRANSFORM */ SELECT 1", false},
		{"/* unterminated TRANSFORM", false},
		{"-- TRANSFORM", false},
		{"", false},
		{"E'x'", false},
		{"\x00TRANSFORM", false},
		{"\vTRANSFORM", true},
	}
	for _, c := range cases {
		if got := Recognize(c.text); got != c.want {
			t.Errorf("Recognize(%q) = %v, want %v", c.text, got, c.want)
		}
		_, err := Parse(c.text)
		if parsed := !errors.Is(err, ErrNotTrellis); parsed != c.want {
			t.Errorf("Parse(%q) claims Trellis = %v, want %v (%v)", c.text, parsed, c.want, err)
		}
	}
}

func TestRecognizeAllocs(t *testing.T) {
	q := ormQuery()
	if n := testing.AllocsPerRun(100, func() { Recognize(q); Recognize("DROP TRANSFORM IF EXISTS FOR x LANGUAGE y") }); n != 0 {
		t.Errorf("Recognize allocates %v times", n)
	}
}

func TestHostileInput(t *testing.T) {
	// A 1 MB statement: many fields, one long formula of literals.
	var b strings.Builder
	b.WriteString("TRANSFORM t FROM orders SELECT ")
	for i := 0; b.Len() < 1<<20; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("a + ")
		b.WriteString(strings.Repeat("'x'", 1))
		b.WriteString(" || name AS f")
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteString(itoa(i))
	}
	st, err := Parse(b.String())
	if err != nil {
		t.Fatalf("1 MB statement: %v", err)
	}
	if n := len(st.(*TransformStmt).Fields); n < 10000 {
		t.Fatalf("fields: %d", n)
	}
	// Deep nesting of every kind stays a clean error, never a crash.
	for _, deep := range []string{
		strings.Repeat("(", 50000) + "a" + strings.Repeat(")", 50000),
		strings.Repeat("- ", 50000) + "a",
		strings.Repeat("NOT ", 50000) + "a",
		strings.Repeat("f(", 50000) + "a" + strings.Repeat(")", 50000),
		strings.Repeat("ARRAY[", 50000) + "a" + strings.Repeat("]", 50000),
		strings.Repeat("a || ", 50000) + "a",
		"a" + strings.Repeat("::text", 50000),
		strings.Repeat("CASE WHEN a THEN ", 50000) + "1" + strings.Repeat(" END", 50000),
	} {
		_, err := Parse("TRANSFORM t FROM orders SELECT " + deep + " AS x")
		if err == nil || !strings.Contains(err.Error(), "54001") {
			t.Errorf("deep formula %.20q: %v", deep, err)
		}
	}
	// Wide but flat formulas are fine.
	wide := "TRANSFORM t FROM orders SELECT a IN (" + strings.Repeat("1, ", 50000) + "1) AS x"
	if _, err := Parse(wide); err != nil {
		t.Errorf("wide IN list: %v", err)
	}
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var d []byte
	for ; i > 0; i /= 10 {
		d = append([]byte{byte('0' + i%10)}, d...)
	}
	return string(d)
}

func TestBackslashInPlainString(t *testing.T) {
	for _, c := range []struct {
		text string
		pos  Pos
	}{
		{`TRANSFORM t FROM s SELECT 'a\b' AS x`, 27},
		{`TRANSFORM t FROM s SELECT E'a\b' AS x`, 0},
		{`TRANSFORM t FROM s SELECT $$a\b$$ AS x, "a\b" AS y -- 'c\d'`, 0},
		{`TRANSFORM t FROM s SELECT 'ab' AS x`, 0},
	} {
		pos, found := BackslashInPlainString(c.text)
		if found != (c.pos != 0) || pos != c.pos {
			t.Errorf("%q: %d %v, want %d", c.text, pos, found, c.pos)
		}
	}
}

func TestClassify(t *testing.T) {
	for text, want := range map[string]Kind{
		"TRANSFORM t FROM s SELECT a AS b": KindTransform, "relationship r": KindRelationship,
		"PAUSE TRANSFORM t": KindPause, "resume transform t.c": KindResume, "DROP TRANSFORM t": KindDrop,
		"DROP RELATIONSHIP a.b": KindDrop, "ALTER TRANSFORM t DROP c": KindAlter, "SELECT 1": "",
	} {
		k, ok := Classify(text)
		if k != want || ok != (want != "") {
			t.Errorf("Classify(%q) = %q %v, want %q", text, k, ok, want)
		}
		if st, err := Parse(text); err == nil && st.Kind() != k {
			t.Errorf("Classify(%q) = %q, Parse says %q", text, k, st.Kind())
		}
	}
}
