package router

import (
	"reflect"
	"testing"

	"github.com/trellis-proxy/trellis-proxy/grammar"
)

// scanCases are the lexical cases the router must read as Postgres's lexer
// does: where a Trellis statement starts, and where it is hidden.
var scanCases = []struct {
	name   string
	in     string
	pieces []string
	flag   bool // the prefilter must flag it (a piece is Trellis)
}{
	{"transform after -- comment ended by CR", "-- x\rTRANSFORM t FROM s SELECT a AS b",
		[]string{"-- x\rTRANSFORM t FROM s SELECT a AS b"}, true},
	{"transform after ; and CR comment", "SELECT 1; -- x\rTRANSFORM t FROM s SELECT a AS b",
		[]string{"SELECT 1", " -- x\rTRANSFORM t FROM s SELECT a AS b"}, true},
	{"inside dollar quote", "SELECT $q$; TRANSFORM t FROM s SELECT a AS b $q$", []string{"SELECT $q$; TRANSFORM t FROM s SELECT a AS b $q$"}, false},
	{"after dollar quote", "SELECT $q$ x $q$; TRANSFORM t", []string{"SELECT $q$ x $q$", " TRANSFORM t"}, true},
	{"E string with \\' escape", `SELECT E'\'; TRANSFORM t'`, []string{`SELECT E'\'; TRANSFORM t'`}, false},
	{"E string continued over a newline", "SELECT E'a'\n'\\'; TRANSFORM t'", []string{"SELECT E'a'\n'\\'; TRANSFORM t'"}, false},
	{"plain string ends at backslash quote", `SELECT '\'; TRANSFORM t`, []string{`SELECT '\'`, " TRANSFORM t"}, true},
	{"nested comment", "SELECT 1 /* a /* ; */ ; TRANSFORM t */; TRANSFORM t", []string{"SELECT 1 /* a /* ; */ ; TRANSFORM t */", " TRANSFORM t"}, true},
	{"a$b$ is an identifier", "SELECT a$b$; TRANSFORM t; $b$", []string{"SELECT a$b$", " TRANSFORM t", " $b$"}, true},
	{"digit then $b$ opens a dollar quote", "SELECT 1$b$; TRANSFORM t; $b$", []string{"SELECT 1$b$; TRANSFORM t; $b$"}, false},
	{"U& quoted identifier", `SELECT U&"x;y"; TRANSFORM t`, []string{`SELECT U&"x;y"`, " TRANSFORM t"}, true},
	{"U& string", `SELECT U&'x;y'; TRANSFORM t`, []string{`SELECT U&'x;y'`, " TRANSFORM t"}, true},
	{"quoted identifier with doubled quote", `SELECT "a"";"; TRANSFORM t`, []string{`SELECT "a"";"`, " TRANSFORM t"}, true},
	{"unterminated comment is kept for Postgres", "SELECT 1; /* x", []string{"SELECT 1", " /* x"}, false},
}

func TestScanCases(t *testing.T) {
	for _, c := range scanCases {
		t.Run(c.name, func(t *testing.T) {
			ps := Split(c.in)
			if got := texts(ps); !reflect.DeepEqual(got, c.pieces) {
				t.Fatalf("Split(%q)\n got %q\nwant %q", c.in, got, c.pieces)
			}
			trellis := false
			for _, p := range ps {
				trellis = trellis || grammar.Recognize(p.Text)
			}
			if trellis != c.flag {
				t.Fatalf("a piece of %q recognised as Trellis = %v, want %v", c.in, trellis, c.flag)
			}
			if c.flag && !MayConcernTrellis(c.in, "tenant_a") {
				t.Fatalf("prefilter missed %q", c.in)
			}
		})
	}
}

// FuzzPrefilter holds the prefilter to the classifier: for any text, if a
// piece the splitter yields is a Trellis statement (grammar.Recognize) or
// a proxy-only call, the prefilter must have flagged the whole text.
func FuzzPrefilter(f *testing.F) {
	for _, c := range scanCases {
		f.Add(c.in)
	}
	for _, s := range []string{
		"SELECT trellis.await_converged()", "SELECT * FROM tenant_a.apply('x')", `SELECT U&"trellis".migrate()`,
		"DROP TRANSFORM t", "/**/ALTER TRANSFORM t", "SELECT 1;\r\n--\rPAUSE", "E'\\'';RESUME",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		flagged := MayConcernTrellis(sql, "tenant_a")
		for _, p := range Split(sql) {
			if grammar.Recognize(p.Text) && !flagged {
				t.Fatalf("piece %q of %q is Trellis, prefilter said no", p.Text, sql)
			}
			if !flagged && parseCall(p.Text, "tenant_a") != nil {
				t.Fatalf("piece %q of %q is a proxy-only call, prefilter said no", p.Text, sql)
			}
		}
	})
}
