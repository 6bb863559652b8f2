package router

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func texts(ps []Piece) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Text
	}
	return out
}

func TestSplit(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want []string
	}{
		{"single", "SELECT 1", []string{"SELECT 1"}},
		{"trailing semicolon", "SELECT 1;", []string{"SELECT 1"}},
		{"two", "SELECT 1; TRANSFORM t FROM s SELECT a AS b;", []string{"SELECT 1", " TRANSFORM t FROM s SELECT a AS b"}},
		{"empty statements dropped", ";; SELECT 1;  -- c\n ;", []string{" SELECT 1"}},
		{"string with semicolon", "SELECT 'a;b'; SELECT 2", []string{"SELECT 'a;b'", " SELECT 2"}},
		{"doubled quote", "SELECT 'it''s;'; SELECT 2", []string{"SELECT 'it''s;'", " SELECT 2"}},
		{"E string backslash", `SELECT E'\';'; SELECT 2`, []string{`SELECT E'\';'`, " SELECT 2"}},
		{"plain string backslash", `SELECT '\'; SELECT 2`, []string{`SELECT '\'`, " SELECT 2"}},
		{"quoted identifier", `SELECT 1 AS "x;y"; SELECT 2`, []string{`SELECT 1 AS "x;y"`, " SELECT 2"}},
		{"line comment", "SELECT 1 -- ; no\n; SELECT 2", []string{"SELECT 1 -- ; no\n", " SELECT 2"}},
		{"nested block comment", "SELECT /* a /* ; */ ; */ 1; SELECT 2", []string{"SELECT /* a /* ; */ ; */ 1", " SELECT 2"}},
		{"dollar quote", "DO $$ BEGIN; END $$; SELECT 2", []string{"DO $$ BEGIN; END $$", " SELECT 2"}},
		{"tagged dollar quote", "SELECT $fn$ ; $x$ ; $fn$; SELECT 2", []string{"SELECT $fn$ ; $x$ ; $fn$", " SELECT 2"}},
		{"parameter is not a dollar quote", "SELECT $1; SELECT $2", []string{"SELECT $1", " SELECT $2"}},
		{"begin atomic", "CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT CASE WHEN true THEN 1 END; SELECT 2; END; SELECT 3",
			[]string{"CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT CASE WHEN true THEN 1 END; SELECT 2; END", " SELECT 3"}},
		{"plain begin is not atomic", "BEGIN; SELECT 1; COMMIT", []string{"BEGIN", " SELECT 1", " COMMIT"}},
		{"unterminated string runs to end", "SELECT 'abc; SELECT 2", []string{"SELECT 'abc; SELECT 2"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := texts(Split(c.in)); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("Split(%q)\n got %q\nwant %q", c.in, got, c.want)
			}
		})
	}
}

func TestSplitOffsets(t *testing.T) {
	in := "SELECT 'é'; TRANSFORM x FROM y SELECT a AS b"
	ps := Split(in)
	if len(ps) != 2 {
		t.Fatalf("got %d pieces", len(ps))
	}
	if in[ps[1].Offset:ps[1].Offset+len(ps[1].Text)] != ps[1].Text {
		t.Fatalf("byte offset wrong: %d", ps[1].Offset)
	}
	// 'é' is two bytes but one character: the character offset is one less.
	if ps[1].CharOffset != ps[1].Offset-1 {
		t.Fatalf("char offset %d, byte offset %d", ps[1].CharOffset, ps[1].Offset)
	}
}

func TestMayConcernTrellis(t *testing.T) {
	yes := []string{
		"TRANSFORM t FROM s SELECT a AS b",
		"  /* c */ -- x\n transform t FROM s SELECT a AS b",
		"SELECT 1; RELATIONSHIP r FROM a.b TO c.d",
		"pause transform t", "RESUME TRANSFORM t", "ALTER TRANSFORM t DROP x",
		"DROP RELATIONSHIP a.b", "DROP TRANSFORM t",
		"SELECT * FROM trellis.status", "select * from TRELLIS.status", `SELECT * FROM "trellis".status`,
		"SELECT * FROM tenant_a.status",
	}
	for _, s := range yes {
		if !MayConcernTrellis(s, "tenant_a") {
			t.Errorf("prefilter missed %q", s)
		}
	}
	no := []string{
		"SELECT abalance FROM pgbench_accounts WHERE aid = $1",
		"UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2",
		"INSERT INTO t VALUES (1); SELECT 2",
		"BEGIN", "CREATE TABLE transforms (id int)",
		"SELECT 1 FROM t WHERE note = 'see trellis.status'", // the catalog named in data, not at a call's head
		ormQuery(),
	}
	for _, s := range no {
		if MayConcernTrellis(s, "tenant_a") {
			t.Errorf("prefilter flagged ordinary SQL %q", s)
		}
	}
}

func BenchmarkMayConcernTrellis(b *testing.B) {
	q := "SELECT abalance FROM pgbench_accounts WHERE aid = $1"
	for b.Loop() {
		MayConcernTrellis(q, "trellis")
	}
}

func TestLeadingWord(t *testing.T) {
	for in, want := range map[string]string{
		"BEGIN":                          "BEGIN",
		"  /* a /* nested */ */ commit;": "commit",
		"-- c\n\tSAVEPOINT s":            "SAVEPOINT",
		"(SELECT 1)":                     "",
		"":                               "",
	} {
		if got := LeadingWord(in); got != want {
			t.Errorf("LeadingWord(%q) = %q, want %q", in, got, want)
		}
	}
}

// ormQuery is a ~10 KB ORM-style SELECT: the prefilter must cost it no more
// than its leading words.
func ormQuery() string {
	var b strings.Builder
	b.WriteString("/* app:checkout controller:orders action:index */ SELECT ")
	for i := 0; i < 120; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, `"orders"."column_%d" AS "t0_r%d"`, i, i)
	}
	b.WriteString(` FROM "orders" LEFT OUTER JOIN "customers" ON "customers"."id" = "orders"."customer_id" WHERE "orders"."id" IN (`)
	for i := 0; b.Len() < 10*1024-40; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprint(&b, 100000+i)
	}
	b.WriteString(`) ORDER BY "orders"."id" DESC LIMIT 50`)
	return b.String()
}

func BenchmarkMayConcernTrellisORM(b *testing.B) {
	q := ormQuery()
	for b.Loop() {
		if MayConcernTrellis(q, "trellis") {
			b.Fatal("ordinary SQL flagged")
		}
	}
}
