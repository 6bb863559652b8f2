package grammar

import (
	"errors"
	"path/filepath"
	"testing"
)

// seedFuzz adds every example of the golden files and some edge cases.
func seedFuzz(f *testing.F) {
	for _, name := range []string{"examples", "overview"} {
		for _, c := range readCases(f, filepath.Join("testdata", name+".sql")) {
			f.Add(c.Text)
		}
	}
	for _, s := range []string{
		"", "DROP TRANSFORM IF EXISTS FOR int LANGUAGE sql", "DROP TRANSFORM /* x", "ALTER TRANSFORM t ADD a AS b, DROP c",
		"TRANSFORM t FROM s SELECT x::numeric(10,2)[] AS a, E'\\n' AS b, B'101' AS c, INTERVAL '1' DAY AS d",
		"TRANSFORM t FROM s SELECT a SIMILAR TO 'x' ESCAPE '!' AS b, a NOT ILIKE 'y' AS c, a BETWEEN SYMMETRIC 1 AND 2 AS d",
		"TRANSFORM t FROM s SELECT (a, b) < (c, d) AS x, ROW(1) AS y, a = ANY (ARRAY[1]) AS z, a OPERATOR(pg_catalog.+) 1 AS w",
		"TRANSFORM t FROM s SELECT f(VARIADIC a) AS x, g(n => 1) AS y, lower(a COLLATE \"C\") AS z, a IS NOT TRUE AS v",
	} {
		f.Add(s)
	}
}

// FuzzParse: Parse never panics; an accepted statement renders canonically
// and the rendering is a fixed point of parse → render.
func FuzzParse(f *testing.F) {
	seedFuzz(f)
	f.Fuzz(func(t *testing.T, text string) {
		st, err := Parse(text)
		if err != nil {
			return
		}
		checkRoundTrip(t, text, st)
	})
}

// FuzzRecognize: Recognize agrees with Parse on whether a text is a Trellis
// statement: Recognize(text) == !errors.Is(err, ErrNotTrellis). A Trellis
// syntax error still counts as Trellis.
func FuzzRecognize(f *testing.F) {
	seedFuzz(f)
	f.Fuzz(func(t *testing.T, text string) {
		st, err := Parse(text)
		if got, want := Recognize(text), !errors.Is(err, ErrNotTrellis); got != want {
			t.Fatalf("Recognize(%q) = %v, Parse says Trellis = %v (%v)", text, got, want, err)
		}
		if k, _ := Classify(text); err == nil && k != st.Kind() {
			t.Fatalf("Classify(%q) = %q, Parse says %q", text, k, st.Kind())
		}
	})
}
