package engine

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-proxy/trellis-proxy/grammar"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// applyText parses and applies one statement in its own transaction.
func applyText(t *testing.T, e *Engine, text string) (*Applied, error) {
	t.Helper()
	st, err := grammar.Parse(text)
	if err != nil {
		t.Fatalf("parse %q: %v", text, err)
	}
	ctx := context.Background()
	// The proxy runs statements on the client's connection with no
	// statement cache; this helper uses a pgx pool, whose cache can hold a
	// plan from before a test's ALTER TABLE. pgx drops such a statement when
	// Postgres reports it, so one retry is what a client would see.
	for attempt := 0; ; attempt++ {
		a, err := applyOnce(ctx, e, st)
		var pe *pgconn.PgError
		if attempt == 0 && errors.As(err, &pe) && pe.Code == "0A000" && strings.Contains(pe.Message, "cached plan must not change result type") {
			continue
		}
		return a, err
	}
}

func applyOnce(ctx context.Context, e *Engine, st grammar.Statement) (*Applied, error) {
	tx, err := e.w.Pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)
	a, err := e.Apply(ctx, tx, st, ApplyOptions{})
	if err != nil {
		return nil, err
	}
	return a, tx.Commit(ctx)
}

func TestApplyTransformStatementsEndToEnd(t *testing.T) {
	pool := testDB(t)
	exec(t, pool, `CREATE TABLE orders (id bigint PRIMARY KEY, region text, amount numeric(12,2), tax numeric(12,2), qty int, status text)`)
	exec(t, pool, `INSERT INTO orders SELECT g, 'r' || (g % 3), g, g / 10.0, g % 7, CASE WHEN g % 2 = 0 THEN 'shipped' END FROM generate_series(1, 200) g`)
	e, _ := startEngine(t, pool, fastConfig())

	a, err := applyText(t, e, `TRANSFORM order_view FROM orders
		SELECT amount + tax AS gross, CASE WHEN status = 'shipped' THEN 1 ELSE 0 END AS shipped,
		       round(amount * 0.92, 2) AS amount_eur, gross * 2 AS double_gross`)
	if err != nil {
		t.Fatal(err)
	}
	if a.Kind != "transform_defined" || a.Status != "waiting_to_backfill" || a.TargetTable != "public.order_view" ||
		a.SourceTable != "public.orders" || a.SourceColumns["amount"] != "numeric(12,2)" || a.SourceColumns["id"] != "bigint" || a.CommandTag != "TRANSFORM" {
		t.Fatalf("applied = %+v", a)
	}
	if _, err := applyText(t, e, `TRANSFORM region_totals FROM orders GROUP BY region
		SELECT region AS region, SUM(amount) AS total, COUNT(*) AS n, AVG(qty) AS avg_qty, MAX(amount) AS biggest`); err != nil {
		t.Fatal(err)
	}
	awaitLive(t, e, "order_view")
	awaitLive(t, e, "region_totals")
	exec(t, pool, `UPDATE orders SET amount = amount + 1, region = 'r9' WHERE id % 5 = 0`)
	exec(t, pool, `DELETE FROM orders WHERE id % 11 = 0`)
	converge(t, e)
	assertSame(t, pool, `SELECT id, gross, shipped, amount_eur, double_gross FROM order_view`,
		`SELECT id, amount + tax, CASE WHEN status = 'shipped' THEN 1 ELSE 0 END, round(amount * 0.92, 2), (amount + tax) * 2 FROM orders`)
	assertSame(t, pool, `SELECT region, total, n, avg_qty, biggest FROM region_totals`,
		`SELECT region, SUM(amount), COUNT(*), AVG(qty), MAX(amount) FROM orders GROUP BY region`)

	_, err = applyText(t, e, `DROP TRANSFORM order_view`)
	wantErr(t, err, pgerr.ObjectNotInPrerequisiteState, "TransformNotPaused")
	if _, err := applyText(t, e, `PAUSE TRANSFORM order_view`); err != nil {
		t.Fatal(err)
	}
	d, err := applyText(t, e, `DROP TRANSFORM order_view`)
	if err != nil || d.Kind != "dropped" {
		t.Fatalf("drop: %+v %v", d, err)
	}
	if d, err := applyText(t, e, `DROP TRANSFORM order_view`); err != nil || d.Notice != "transform order_view does not exist, skipping" {
		t.Fatalf("second drop must be a no-op: %+v %v", d, err)
	}
}

func TestApplyTransformRefusals(t *testing.T) {
	pool := testDB(t)
	exec(t, pool, `CREATE TABLE orders (id bigint PRIMARY KEY, amount numeric, placed_at timestamptz, note text)`)
	exec(t, pool, `CREATE FUNCTION public.double_it(numeric) RETURNS numeric IMMUTABLE LANGUAGE sql AS 'SELECT $1 * 2'`)
	exec(t, pool, `CREATE TABLE nokey (a int)`)
	exec(t, pool, `CREATE TABLE taken (a int)`)
	e, _ := startEngine(t, pool, fastConfig())

	cases := []struct {
		name, stmt, code, variant string
		pos                       int // 1-based, 0 = don't care
	}{
		{"volatile", "TRANSFORM t1 FROM orders SELECT random() * amount AS x", pgerr.InvalidObjectDefinition, "NonImmutableConstruct", 33},
		{"stable cast", "TRANSFORM t2 FROM orders SELECT placed_at::text AS x", pgerr.InvalidObjectDefinition, "NonImmutableConstruct", 42},
		// The caret is on the call that is not immutable, not on the formula.
		{"volatile operand", "TRANSFORM t14 FROM orders SELECT amount * random() AS x", pgerr.InvalidObjectDefinition, "NonImmutableConstruct", 43},
		{"stable cast inside", "TRANSFORM t10 FROM orders SELECT coalesce(note, '') || length(placed_at::text) AS x", pgerr.InvalidObjectDefinition, "NonImmutableConstruct", 72},
		{"stable operator", "TRANSFORM t11 FROM orders SELECT abs(amount) + extract(epoch FROM placed_at + interval '1 day') AS x", pgerr.InvalidObjectDefinition, "NonImmutableConstruct", 77},
		{"through a field", "TRANSFORM t12 FROM orders SELECT a2 * 2 AS b, amount + amount * random() AS a2", pgerr.InvalidObjectDefinition, "NonImmutableConstruct", 65},
		{"aggregate argument", "TRANSFORM t13 FROM orders GROUP BY note SELECT SUM(amount * random()) AS s", pgerr.InvalidObjectDefinition, "NonImmutableConstruct", 61},
		// The formulas are probed together first; the one-by-one fallback
		// still names the second.
		{"second of two", "TRANSFORM t9 FROM orders SELECT amount AS a, random() * amount AS x", pgerr.InvalidObjectDefinition, "NonImmutableConstruct", 46},
		{"user function", "TRANSFORM t3 FROM orders SELECT public.double_it(amount) AS x", pgerr.FeatureNotSupported, "UserDefinedFunction", 0},
		{"unknown function", "TRANSFORM t4 FROM orders SELECT no_such_fn(amount) AS x", pgerr.UndefinedFunction, "FunctionArgTypeMismatch", 33},
		{"type mismatch", "TRANSFORM t5 FROM orders SELECT note + 1 AS x", pgerr.UndefinedFunction, "FunctionArgTypeMismatch", 33},
		{"missing source", "TRANSFORM t6 FROM nope SELECT a AS x", pgerr.UndefinedTable, "SourceTableNotFound", 19},
		{"no key", "TRANSFORM t7 FROM nokey SELECT a AS x", pgerr.ObjectNotInPrerequisiteState, "NoPrimaryKey", 19},
		{"unknown column", "TRANSFORM t8 FROM orders SELECT amount + nope AS x", pgerr.UndefinedColumn, "", 0},
		{"target exists", "TRANSFORM taken FROM orders SELECT amount AS x", pgerr.DuplicateTable, "TargetTableExists", 11},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := applyText(t, e, c.stmt)
			if err == nil {
				t.Fatalf("%s accepted", c.stmt)
			}
			pe, ok := pgerr.As(err)
			if !ok {
				t.Fatalf("not a pgerr: %T %v", err, err)
			}
			if c.code != "" && pe.Code != c.code {
				t.Fatalf("code %s (%s), want %s", pe.Code, pe.Message, c.code)
			}
			if c.variant != "" && pe.Variant != c.variant {
				t.Fatalf("variant %q (%s), want %q", pe.Variant, pe.Message, c.variant)
			}
			if c.pos != 0 && pe.Position != c.pos {
				t.Fatalf("position %d, want %d (%s)", pe.Position, c.pos, pe.Message)
			}
		})
	}
	// Nothing was left behind by the refused statements.
	var n int64
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM trellis._definitions").Scan(&n); err != nil || n != 0 {
		t.Fatalf("definitions after refusals: %d %v", n, err)
	}
	var temps int64
	pool.QueryRow(context.Background(), "SELECT count(*) FROM pg_class WHERE relname LIKE 'trellis_formula_probe%'").Scan(&temps)
	if temps != 0 {
		t.Fatalf("probe objects left behind: %d", temps)
	}
}

func TestDropTransformNeedsOwnership(t *testing.T) {
	pool := testDB(t)
	exec(t, pool, `CREATE TABLE src (id int PRIMARY KEY, a int)`)
	exec(t, pool, `DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'intruder') THEN CREATE ROLE intruder; END IF; END $$`)
	e, _ := startEngine(t, pool, fastConfig())
	exec(t, pool, `GRANT USAGE ON SCHEMA trellis TO intruder`)
	exec(t, pool, `GRANT SELECT ON ALL TABLES IN SCHEMA trellis TO intruder`)
	if _, err := applyText(t, e, `TRANSFORM owned FROM src SELECT a AS b`); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	exec(t, tx, "SET LOCAL ROLE intruder")
	st, _ := grammar.Parse("DROP TRANSFORM owned")
	_, err = e.Apply(ctx, tx, st, ApplyOptions{})
	pe, ok := pgerr.As(err)
	if !ok || pe.Code != pgerr.InsufficientPrivilege || pe.Variant != "NotOwner" || pe.Position != 16 {
		t.Fatalf("drop by another role: %v", err)
	}
}
