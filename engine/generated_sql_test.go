package engine

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/catalog"
	"github.com/trellis-proxy/trellis-proxy/engine/model"
	"github.com/trellis-proxy/trellis-proxy/engine/sqlgen"
)

// Golden files of the SQL the engine generates, so a change to a generator
// is reviewed as a diff of SQL (testdata/generated/*.sql) and a move of the
// code is proven byte for byte. `go test ./engine -run Golden -update`
// rewrites them.

var updateGolden = flag.Bool("update", false, "rewrite the golden files under testdata/")

// goldenSpecs are representative definitions: each key shape, a paused
// field, and every aggregate kind.
type goldenSpec struct {
	name   string
	setup  []string
	define string
	pause  []string // fields paused by the column fuse
}

var goldenSpecs = []goldenSpec{
	{name: "one_to_one_keyed",
		setup:  []string{`CREATE TABLE orders (id bigint PRIMARY KEY, price numeric, tax numeric, note text)`},
		define: `TRANSFORM order_totals FROM orders SELECT price + tax AS total, upper(note) AS loud`},
	{name: "one_to_one_composite_key",
		setup:  []string{`CREATE TABLE lines (order_id bigint, line int, sku text, qty int, PRIMARY KEY (order_id, line))`},
		define: `TRANSFORM line_skus FROM lines SELECT lower(sku) AS sku_lc, qty * 2 AS twice`},
	{name: "one_to_one_paused_field",
		setup:  []string{`CREATE TABLE items (id text PRIMARY KEY, a int, b int)`},
		define: `TRANSFORM item_calc FROM items SELECT a + 1 AS a1, b * 10 AS b10`,
		pause:  []string{"b10"}},
	{name: "aggregate_every_kind",
		setup: []string{`CREATE TABLE sales (id bigint PRIMARY KEY, region text, price numeric, qty int, ok boolean, flags int, doc jsonb)`},
		define: `TRANSFORM region_sales FROM sales GROUP BY region SELECT SUM(price) AS revenue, COUNT(*) AS n, COUNT(qty) AS nq,
			AVG(price) AS avg_price, MIN(qty) AS min_qty, MAX(price) AS max_price, BOOL_AND(ok) AS all_ok, BOOL_OR(ok) AS any_ok,
			BIT_AND(flags) AS and_flags, BIT_OR(flags) AS or_flags, JSONB_AGG(doc) AS docs`},
	{name: "aggregate_composite_group",
		setup:  []string{`CREATE TABLE visits (id uuid PRIMARY KEY, site text, day date, ms int)`},
		define: `TRANSFORM site_days FROM visits GROUP BY site, day SELECT SUM(ms) AS total_ms, COUNT(*) AS n`},
	{name: "join_snowflake_one_to_one",
		setup: []string{`CREATE TABLE j_regions (id int PRIMARY KEY, name text)`,
			`CREATE TABLE j_customers (id bigint PRIMARY KEY, name text, region_id int)`, `CREATE INDEX ON j_customers (region_id)`,
			`CREATE TABLE j_orders (id bigint PRIMARY KEY, customer_id bigint, amount numeric)`, `CREATE INDEX ON j_orders (customer_id)`},
		define: `TRANSFORM j_order_wide FROM j_orders o LEFT JOIN j_customers c ON c.id = o.customer_id JOIN j_regions r ON r.id = c.region_id
			SELECT o.amount AS amount, c.name AS customer, upper(r.name) AS region`},
	{name: "join_composite_aggregate",
		setup: []string{`CREATE TABLE j_skus (maker text, code int, family text, PRIMARY KEY (maker, code))`,
			`CREATE TABLE j_lines (id bigint PRIMARY KEY, maker text, code int, qty int)`, `CREATE INDEX ON j_lines (maker, code)`},
		define: `TRANSFORM j_family_qty FROM j_lines l JOIN j_skus s ON s.maker = l.maker AND s.code = l.code
			GROUP BY s.family SELECT SUM(l.qty) AS qty, COUNT(*) AS n`},
	{name: "nullable_identity_chain",
		setup:  []string{`CREATE TABLE events (id bigint PRIMARY KEY, kind text, amount int)`},
		define: `TRANSFORM kind_sums FROM events GROUP BY kind SELECT SUM(amount) AS total`},
}

// goldenEach defines each golden spec in a subtest on an engine without
// workers (nothing builds or drains: only the generated SQL is looked at)
// and hands it to check.
func goldenEach(t *testing.T, check func(t *testing.T, e *Engine, g goldenSpec)) {
	pool := testDB(t)
	cfg := fastConfig()
	cfg.Staging, cfg.DrainWorkers = StagingOff, -1
	e, _ := startEngine(t, pool, cfg)
	for _, g := range goldenSpecs {
		t.Run(g.name, func(t *testing.T) {
			for _, s := range g.setup {
				exec(t, pool, s)
			}
			if _, err := e.ApplyText(context.Background(), pool, g.define, ApplyOptions{}); err != nil {
				t.Fatal(err)
			}
			check(t, e, g)
		})
	}
}

func TestGoldenGeneratedSQL(t *testing.T) {
	ctx := context.Background()
	goldenEach(t, func(t *testing.T, e *Engine, g goldenSpec) {
		pool := e.w.Pool
		text := goldenRender(t, e, goldenTarget(t, g.define), g.pause)
		if g.name == "nullable_identity_chain" {
			// A 1-1 transform over an aggregate target: keyed by the
			// groups, which may be NULL.
			if _, err := e.ApplyText(ctx, pool, `TRANSFORM kind_labels FROM kind_sums SELECT total * 2 AS doubled`, ApplyOptions{}); err != nil {
				t.Fatal(err)
			}
			text += goldenRender(t, e, "kind_labels", nil)
		}
		goldenCompare(t, filepath.Join("testdata", "generated", g.name+".sql"), goldenNormalize(e, text))
	})
}

// TestGoldenCatalogSQL pins the rendered catalog migrations, functions and
// read views: a change to the catalog is a reviewed diff, never an
// accident of a move.
func TestGoldenCatalogSQL(t *testing.T) {
	e := New(testDB(t), Config{})
	defer e.Close()
	var b strings.Builder
	for i, m := range catalog.Migrations() {
		fmt.Fprintf(&b, "-- migration %d\n%s\n", i+1, strings.TrimSpace(e.renderCatalogSQL(m)))
	}
	fmt.Fprintf(&b, "-- functions\n%s\n", strings.TrimSpace(e.renderCatalogSQL(catalog.Functions())))
	fmt.Fprintf(&b, "-- read views\n%s\n", strings.TrimSpace(e.renderCatalogSQL(catalog.Reads())))
	goldenCompare(t, filepath.Join("testdata", "catalog.sql"), b.String())
}

// goldenNormalize replaces the workers' role, which is the test cluster's
// superuser and so differs between machines.
func goldenNormalize(e *Engine, text string) string {
	text = strings.ReplaceAll(text, base.Ident(e.w.WorkerRole()), `"{{WORKER}}"`)
	return strings.ReplaceAll(text, base.Lit(e.w.WorkerRole()), `'{{WORKER}}'`)
}

func goldenTarget(t *testing.T, stmt string) string {
	f := strings.Fields(stmt)
	if len(f) < 2 {
		t.Fatalf("no target in %q", stmt)
	}
	return f[1]
}

// goldenRender writes every statement generated for target's definition,
// each under a comment naming it.
func goldenRender(t *testing.T, e *Engine, target string, paused []string) string {
	t.Helper()
	var id, version int64
	var raw []byte
	if err := e.w.Pool.QueryRow(context.Background(), fmt.Sprintf(
		"SELECT id, version, compiled FROM %s WHERE target_table = format('%%I.%%I', 'public', $1::text)", e.w.Tbl("_definitions")),
		target).Scan(&id, &version, &raw); err != nil {
		t.Fatal(err)
	}
	cd, err := e.w.CompiledForPaused(id, version, raw, paused)
	if err != nil {
		t.Fatal(err)
	}
	c := cd.C
	var b strings.Builder
	section := func(name, sql string) {
		if sql != "" {
			fmt.Fprintf(&b, "-- %s: %s\n%s;\n\n", target, name, strings.TrimSpace(sql))
		}
	}
	tgt, led := c.Shapes()
	section("target shape", goldenShape(tgt))
	section("ledger shape", goldenShape(led))
	p := e.w.Inst().NewCapturePlan(c.SourceText, c.Key, c.KeyNullable)
	// As installCapture resolves them.
	if err := e.w.Pool.QueryRow(context.Background(), `SELECT array_agg(to_regtype(t)::oid ORDER BY i) FROM unnest($1::text[]) WITH ORDINALITY u(t, i)`,
		p.KeyTypeNames()).Scan(&p.KeyTypes); err != nil {
		t.Fatal(err)
	}
	for i, s := range e.w.Inst().CaptureDDL(p) {
		section(fmt.Sprintf("capture %d", i+1), s)
	}
	section("lock insert", cd.LockInsert)
	section("lock select", cd.LockSelect)
	section("derive", cd.Derive)
	section("delete empty", cd.DeleteEmpty)
	section("recompute", cd.Recompute)
	section("ledger gc", cd.LedgerGC)
	for _, f := range c.Spec.Fields {
		section("field probe "+f.Name, cd.FieldProbe[f.Name])
	}
	for i := range c.Spec.Joins {
		section(fmt.Sprintf("fan-out of join %d", i+1), cd.FanOut[i])
		section(fmt.Sprintf("truncate fan-out of join %d", i+1), cd.FanOutAll[i])
	}
	where, args := sqlgen.RangeWhere(c, goldenBound("lo", len(c.Key)), goldenBound("hi", len(c.Key)), 1)
	fmt.Fprintf(&b, "-- %s: range parameters %d\n", target, len(args))
	tconds, _ := sqlgen.RangeConds(c, "t2", goldenBound("lo", len(c.Key)), goldenBound("hi", len(c.Key)), 1)
	section("fresh chunk", cd.FreshSQL(where, tconds))
	if c.Spec.IsAggregate() {
		section("heap chunk", cd.HeapSQL(where))
		section("rebuild chunk", cd.RebuildAggSQL(where))
		section("groups", cd.GroupsSQL)
		section("reconcile", cd.ReconcileSQL)
		section("prune", cd.PruneSQL)
		var cols []string
		for _, f := range c.Spec.Fields {
			cols = append(cols, f.Name)
		}
		section("refresh", cd.RefreshSQL(cols))
	} else if !c.KeyNullable {
		section("rebuild chunk", cd.RebuildSQL(where, tconds))
	}
	return b.String()
}

// renderCatalogSQL renders a catalog script for e's instance.
func (e *Engine) renderCatalogSQL(s string) string {
	return catalog.Render(s, e.w.Cfg.Schema, e.w.FenceSchema())
}

// goldenShape writes a table shape (_create_table's input) as a column
// list a reviewer reads like CREATE TABLE.
func goldenShape(sh *model.TableShape) string {
	var b strings.Builder
	for _, c := range sh.Cols {
		fmt.Fprintf(&b, "%s %s", base.Ident(c.Name), c.Type)
		if c.Coll != "" {
			fmt.Fprintf(&b, " COLLATE %s", c.Coll)
		}
		if c.NotNull {
			b.WriteString(" NOT NULL")
		}
		if c.DefFalse {
			b.WriteString(" DEFAULT false")
		}
		b.WriteString("\n")
	}
	for _, k := range []struct {
		name string
		cols []string
	}{{"PRIMARY KEY", sh.PK}, {"UNIQUE NULLS NOT DISTINCT", sh.Unique}, {"UNIQUE INDEX NULLS NOT DISTINCT", sh.UIdx}, {"INDEX WHERE member", sh.MIdx}} {
		if len(k.cols) > 0 {
			fmt.Fprintf(&b, "%s (%s)\n", k.name, strings.Join(k.cols, ", "))
		}
	}
	return b.String()
}

// goldenBound is an encoded key bound of n parts, as a build task stores it.
func goldenBound(s string, n int) *string {
	parts := make([]*string, n)
	for i := range parts {
		v := s
		parts[i] = &v
	}
	k := model.EncodeKey(parts, false)
	return &k
}

func goldenCompare(t *testing.T, path, got string) {
	t.Helper()
	if *updateGolden {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./engine -run Golden -update)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from the generated SQL; run go test ./engine -run Golden -update and review the diff", path)
	}
}
