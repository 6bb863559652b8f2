package router

import (
	"strings"
	"testing"

	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

var opts = Options{Schema: "trellis"}

func TestClassifyOrdinarySQLIsNil(t *testing.T) {
	for _, q := range []string{
		"SELECT 1",
		"SELECT abalance FROM pgbench_accounts WHERE aid = $1",
		"CREATE TRANSFORM FOR int LANGUAGE plpgsql (FROM SQL WITH FUNCTION f(internal))",
		"DROP TRANSFORM IF EXISTS FOR int LANGUAGE plpgsql",
		"DROP TRANSFORM FOR int LANGUAGE plpgsql",
		"SELECT * FROM trellis.status",                 // a real view: passes through
		"SELECT trellis.watermark_token()",             // a real function
		"ALTER TABLE t ADD COLUMN transform int",       // the word alone is not a statement
		"SELECT trellis.await_converged('0/0', 1) + 1", // misshapen: the catalog stub refuses it
	} {
		if p := Classify(q, opts); p != nil {
			t.Errorf("Classify(%q) = %+v, want nil (pass through)", q, p.Units)
		}
	}
}

func TestClassifyTrellisStatements(t *testing.T) {
	p := Classify("CREATE TABLE s (id int primary key, a int);\nTRANSFORM t FROM s SELECT a + 1 AS b;\nSELECT 1", opts)
	if p == nil || len(p.Units) != 3 {
		t.Fatalf("got %+v", p)
	}
	kinds := []Kind{p.Units[0].Kind, p.Units[1].Kind, p.Units[2].Kind}
	if kinds[0] != PassThrough || kinds[1] != Statement || kinds[2] != PassThrough {
		t.Fatalf("kinds %v", kinds)
	}
	if p.Units[1].Stmt == nil || p.Units[1].Stmt.CommandTag() != "TRANSFORM" {
		t.Fatalf("statement not parsed: %+v", p.Units[1])
	}
}

// A parse error's position is relative to the whole query string, in
// characters, so psql's caret lands under the mistake.
func TestClassifyErrorPositionIsInWholeString(t *testing.T) {
	q := "SELECT 'é';TRANSFORM t FROM s RIGHT JOIN u ON u.id = s.id SELECT a AS b"
	p := Classify(q, opts)
	if p == nil || len(p.Units) != 2 || p.Units[1].Err == nil {
		t.Fatalf("want a parse error in unit 2, got %+v", p)
	}
	e := p.Units[1].Err
	want := strings.Index(q, "RIGHT") // byte index; one 2-byte char before it
	if e.Position != want-1+1 {
		t.Fatalf("position %d, want %d (%s)", e.Position, want, e.Message)
	}
	if pgerr.CodeOf(e) == "" {
		t.Fatal("no SQLSTATE")
	}
}

func TestClassifyProxyCalls(t *testing.T) {
	cases := []struct {
		q      string
		fn     string
		column string
		star   bool
		nargs  int
	}{
		{"SELECT trellis.await_converged('16/B374D848', 5000)", "await_converged", "await_converged", false, 2},
		{"select TRELLIS.await_converged(trellis.watermark_token(), $1) AS ok", "await_converged", "ok", false, 2},
		{"SELECT * FROM trellis.apply('PAUSE TRANSFORM t')", "apply", "apply", true, 1},
		{"SELECT * FROM trellis.define($1) d", "define", "d", true, 1},
		{"SELECT trellis.metrics_text()", "metrics_text", "metrics_text", false, 0},
		{"SELECT tenant.migrate()", "migrate", "migrate", false, 0},
		{"( SELECT /* c */ ALL trellis.metrics_text() )", "metrics_text", "metrics_text", false, 0},
		{`select * from "trellis".apply('PAUSE TRANSFORM t')`, "apply", "apply", true, 1},
		{"SELECT 1; SELECT trellis.await_live('t', 10)", "", "", false, 0},
	}
	for _, c := range cases {
		p := Classify(c.q, Options{Schema: "tenant"})
		if c.fn == "" {
			// A call after another statement is found too.
			if p == nil || len(p.Units) != 2 || p.Units[1].Kind != ProxyCall {
				t.Errorf("Classify(%q) = %+v, want a proxy call second", c.q, p)
			}
			continue
		}
		if p == nil || len(p.Units) != 1 || p.Units[0].Kind != ProxyCall {
			t.Errorf("Classify(%q) = %+v, want one proxy call", c.q, p)
			continue
		}
		call := p.Units[0].Call
		if call.Func != c.fn || call.Column != c.column || call.Star != c.star || call.NArgs != c.nargs {
			t.Errorf("Classify(%q) call = %+v", c.q, call)
		}
		if c.nargs > 0 && !strings.HasPrefix(call.ArgsSQL, "SELECT ") {
			t.Errorf("args SQL %q", call.ArgsSQL)
		}
	}
}
