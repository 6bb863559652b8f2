package router

import (
	"strings"
	"testing"
)

func TestRewriteAlias(t *testing.T) {
	opts := Options{Schema: "tenant_a", CatalogName: "tenant_a"}
	for _, c := range []struct{ in, want string }{
		{`SELECT * FROM trellis.status WHERE status = 'live'`, `SELECT * FROM "tenant_a".status WHERE status = 'live'`},
		{`SELECT * FROM TRELLIS . status s JOIN orders o ON true`, `SELECT * FROM "tenant_a" . status s JOIN orders o ON true`},
		{`select 1 from "trellis".status`, `select 1 from "tenant_a".status`},
		{`SELECT trellis.watermark_token()`, `SELECT "tenant_a".watermark_token()`},
		{`SELECT NULL::trellis.applied`, `SELECT NULL::"tenant_a".applied`},
		{`SELECT trellis.status.target FROM trellis.status`, `SELECT "tenant_a".status.target FROM "tenant_a".status`},
		{`SELECT x FROM (SELECT target AS x FROM trellis.definitions) d WHERE x IN (SELECT target FROM trellis.status)`,
			`SELECT x FROM (SELECT target AS x FROM "tenant_a".definitions) d WHERE x IN (SELECT target FROM "tenant_a".status)`},
	} {
		got, _, ok := Rewrite(c.in, opts)
		if !ok || got != c.want {
			t.Errorf("Rewrite(%q) = %q, %v; want %q", c.in, got, ok, c.want)
		}
	}
	// Not the alias: a string, a comment, a table alias named trellis, a
	// quoted name that differs in case, an unparsable statement.
	for _, in := range []string{
		`SELECT 'trellis.status'`,
		`SELECT 1 -- trellis.status`,
		`SELECT trellis.id FROM orders trellis`,
		`SELECT * FROM "Trellis".status`,
		`SELECT * FROM trellis.status WHERE`,
	} {
		if got, _, ok := Rewrite(in, opts); ok {
			t.Errorf("Rewrite(%q) = %q, want no rewrite", in, got)
		}
	}
}

// psql's \d trellis.status names the schema by a pattern in a literal; under
// a non-default catalog it is pointed at the catalog, and nothing else is.
func TestRewritePsqlDescribePattern(t *testing.T) {
	describe := "SELECT c.oid,\n  n.nspname,\n  c.relname\nFROM pg_catalog.pg_class c\n     LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace\n" +
		"WHERE c.relname OPERATOR(pg_catalog.~) '^(status)$' COLLATE pg_catalog.default\n  AND n.nspname OPERATOR(pg_catalog.~) '^(trellis)$' COLLATE pg_catalog.default\nORDER BY 2, 3;"
	opts := Options{Schema: "tenant_a", CatalogName: "tenant_a"}
	if !needsRewrite(describe, opts) {
		t.Fatal("the prefilter skips psql's describe query")
	}
	got, _, ok := Rewrite(describe, opts)
	want := strings.Replace(describe, "'^(trellis)$'", "'^(tenant_a)$'", 1)
	if !ok || got != want {
		t.Fatalf("Rewrite = %q, %v; want %q", got, ok, want)
	}
	for _, c := range []struct {
		opts    Options
		in      string
		aliased bool
	}{
		{Options{Schema: "trellis", CatalogName: "trellis"}, describe, false},             // the default catalog: nothing to alias
		{Options{Schema: "Tenant", CatalogName: "Tenant"}, describe, false},               // would need quoting in psql's pattern
		{opts, `SELECT '^(trellis)$ ' AS x`, false},                                       // another literal
		{opts, `SELECT 'x' WHERE 'trellis' ~ '^(trellis)$' /* the same pattern */`, true}, // the client's own regex: rewritten, documented
	} {
		got, _, ok := Rewrite(c.in, c.opts)
		if aliased := ok && strings.Contains(got, "'^(tenant_a)$'"); aliased != c.aliased || (!c.aliased && ok) {
			t.Errorf("Rewrite(%q) with catalog %q = %q, %v; want the pattern aliased: %v", c.in, c.opts.CatalogName, got, ok, c.aliased)
		}
	}
}

func TestRewriteProxyRelations(t *testing.T) {
	v := func(s string) *string { return &s }
	opts := Options{Schema: "trellis", CatalogName: "trellis", Relations: func(name string) *Relation {
		switch name {
		case "config":
			return &Relation{Columns: []Column{{"schema", "text"}, {"drain_workers", "int4"}, {"data_dir", "text"}},
				Rows: [][]*string{{v(`it's \ odd`), v("2"), nil}}}
		case "proxy_workers":
			return &Relation{Columns: []Column{{"worker_id", "text"}, {"kind", "text"}}}
		}
		return nil
	}}
	got, _, ok := Rewrite(`SELECT schema, drain_workers FROM trellis.config WHERE drain_workers > 1`, opts)
	want := `SELECT schema, drain_workers FROM (SELECT E'it''s \\ odd'::text AS "schema", E'2'::int4 AS "drain_workers", NULL::text AS "data_dir") AS "config" WHERE drain_workers > 1`
	if !ok || got != want {
		t.Fatalf("config:\n got %s\nwant %s", got, want)
	}
	got, _, _ = Rewrite(`SELECT c.schema FROM trellis.config c, trellis.proxy_workers`, opts)
	if !strings.Contains(got, `"drain_workers", NULL::text AS "data_dir") c,`) || !strings.Contains(got, `AS "kind" WHERE false) AS "proxy_workers"`) {
		t.Fatalf("aliased config and empty proxy_workers: %s", got)
	}
	// Only where a relation is read: the stub answers anything else.
	if got, _, ok := Rewrite(`INSERT INTO trellis.config VALUES (1)`, opts); ok {
		t.Fatalf("INSERT target rewritten: %s", got)
	}
}

func TestRewritePrefilter(t *testing.T) {
	rel := func(string) *Relation { return &Relation{Columns: []Column{{"a", "text"}}} }
	for _, c := range []struct {
		opts Options
		sql  string
		want bool
	}{
		{Options{Schema: "trellis", CatalogName: "trellis"}, `SELECT * FROM trellis.config`, false},
		{Options{Schema: "trellis", CatalogName: "trellis", Relations: rel}, `SELECT * FROM trellis.config`, true},
		{Options{Schema: "trellis", CatalogName: "trellis", Relations: rel}, `SELECT * FROM trellis.status`, false},
		{Options{Schema: "trellis", CatalogName: "trellis", Relations: rel}, `SELECT abalance FROM pgbench_accounts WHERE aid = $1`, false},
		{Options{Schema: "tenant_a", CatalogName: "tenant_a", Relations: rel}, `SELECT * FROM trellis.status`, true},
		{Options{Schema: "tenant_a", CatalogName: "tenant_a", Relations: rel}, `SELECT * FROM tenant_a.config`, true},
		{Options{Schema: "tenant_a", CatalogName: "tenant_a", Relations: rel}, `SELECT * FROM orders`, false},
	} {
		if got := needsRewrite(c.sql, c.opts); got != c.want {
			t.Errorf("needsRewrite(%q, %s) = %v", c.sql, c.opts.Schema, got)
		}
	}
	// Ordinary SQL is not parsed: Classify says pass-through.
	if p := Classify(`SELECT * FROM orders WHERE note = 'config'`, Options{Schema: "tenant_a", CatalogName: "tenant_a", Relations: rel}); p != nil {
		t.Fatalf("ordinary SQL classified: %+v", p)
	}
}

func TestRewritePositionsMapBack(t *testing.T) {
	opts := Options{Schema: "tenant_a", CatalogName: "tenant_a"}
	q := `SELECT 'é', nope FROM trellis.status WHERE bad_column = 1`
	p := Classify("SELECT 1; "+q, opts)
	if p == nil || len(p.Units) != 2 || len(p.Units[1].Splices) != 1 {
		t.Fatalf("plan %+v", p)
	}
	u := p.Units[1]
	// Postgres reports positions in the rewritten text, 1-based characters.
	posIn := func(text, word string) int { return len([]rune(text[:strings.Index(text, word)])) + 1 }
	whole := "SELECT 1; " + q
	for _, word := range []string{"nope", "bad_column"} {
		if got, want := u.MapPosition(posIn(u.Text, word)), posIn(whole, word); got != want {
			t.Errorf("%s: mapped to %d, want %d", word, got, want)
		}
	}
	if got, want := u.MapPosition(posIn(u.Text, `"tenant_a"`)+3), posIn(whole, "trellis"); got != want {
		t.Errorf("inside the replacement: %d, want %d", got, want)
	}
	if s, ok := (&Plan{Units: []Unit{u}}).Rewritten(); !ok || !strings.Contains(s, `"tenant_a".status`) {
		t.Errorf("Rewritten() = %q %v", s, ok)
	}
}

// The cost routing adds to ordinary SQL with the relations on, as the
// proxy runs: the prefilters of D5 and nothing else.
func BenchmarkClassifyOrdinary(b *testing.B) {
	rel := func(string) *Relation { return nil }
	for _, c := range []struct {
		name, sql string
		opts      Options
	}{
		{"pgbench", "SELECT abalance FROM pgbench_accounts WHERE aid = $1;", Options{Schema: "trellis", CatalogName: "trellis", Relations: rel}},
		{"orm-10KB", ormQuery(), Options{Schema: "trellis", CatalogName: "trellis", Relations: rel}},
		{"orm-10KB-tenant", ormQuery(), Options{Schema: "tenant_a", CatalogName: "tenant_a", Relations: rel}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.sql)))
			for b.Loop() {
				if Classify(c.sql, c.opts) != nil {
					b.Fatal("ordinary SQL classified")
				}
			}
		})
	}
}
