package virtualtables

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/trellis-proxy/trellis-proxy/engine"
)

func pollTrue(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func sameRows(t *testing.T, q engine.Querier, got, want string) bool {
	t.Helper()
	n := queryStrings(t, q, "SELECT count(*)::text FROM ((("+got+") EXCEPT ALL ("+want+")) UNION ALL (("+want+") EXCEPT ALL ("+got+"))) x")
	return n[0] == "0"
}

func TestQuarantineSurface(t *testing.T) {
	db, pool := testDB(t)
	ctx := context.Background()
	exec(t, pool, `DO $$ BEGIN CREATE ROLE vt_stranger LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$`)
	exec(t, pool, `CREATE TABLE orders (id bigint PRIMARY KEY, price numeric, qty int)`)
	exec(t, pool, `INSERT INTO orders SELECT g, g, 1 + g % 3 FROM generate_series(1, 100) g`)
	e, run := newEngine(t, pool, fastConfig("trellis"))
	define(t, e, pool, engine.Spec{
		Target: engine.TableName{Schema: "public", Name: "unit"}, Source: engine.TableName{Schema: "public", Name: "orders"},
		Statement: "TRANSFORM public.unit FROM public.orders SELECT price / qty AS per",
		Fields:    []engine.Field{{Name: "per", Expr: col("price") + " / " + col("qty"), Reads: []string{"price", "qty"}}},
	})
	run()
	waitStatus(t, pool, "trellis", "unit", "live")

	// Key 7's divisor becomes zero: held for unit, everything else live and exact.
	exec(t, pool, `UPDATE orders SET qty = 0 WHERE id = 7`)
	exec(t, pool, `UPDATE orders SET price = price + 1 WHERE id > 50`)
	pollTrue(t, "key 7 held", func() bool {
		return queryStrings(t, pool, `SELECT count(*)::text FROM trellis.poisoned`)[0] == "1"
	})
	token := queryStrings(t, pool, `SELECT trellis.watermark_token()`)[0]
	pollTrue(t, "others exact", func() bool {
		return sameRows(t, pool, `SELECT id, per FROM unit WHERE id <> 7`, `SELECT id, price / qty FROM orders WHERE id <> 7`)
	})
	st := queryStrings(t, pool, `SELECT status || ' ' || (held_keys ->> 'held_count') || ' ' || problem FROM trellis.status WHERE target = 'unit'`)
	if st[0] != "live 1 1 source keys quarantined" {
		t.Fatalf("status: %v", st)
	}
	if c := queryStrings(t, pool, `SELECT trellis.converged($1)::text`, token); c[0] != "false" {
		t.Fatal("a token above a held key converged")
	}
	rows := queryStrings(t, pool, `SELECT src_table || '|' || key || '|' || error_message || '|' || cursor FROM trellis.sample_quarantined('unit')`)
	if len(rows) != 1 || rows[0] != "public.orders|7|division by zero|13:public.orders7" {
		t.Fatalf("sample_quarantined: %v", rows)
	}
	if r := queryStrings(t, pool, `SELECT key FROM trellis.sample_quarantined('unit', '13:public.orders7', 10)`); len(r) != 0 {
		t.Fatalf("after the last cursor: %v", r)
	}
	if r := queryStrings(t, pool, `SELECT key FROM trellis.sample_quarantined('unit', '13:public.orders6', 10)`); len(r) != 1 {
		t.Fatalf("after an earlier cursor: %v", r)
	}
	if r := queryStrings(t, pool, `SELECT key || ' ' || sqlstate FROM trellis.quarantined_rows`); len(r) != 1 || r[0] != "7 22012" {
		t.Fatalf("quarantined_rows: %v", r)
	}
	_, err := pool.Exec(ctx, `SELECT * FROM trellis.sample_quarantined('unit', '99:x', 10)`)
	wantCode(t, err, "22023", "malformed cursor")
	_, err = pool.Exec(ctx, `SELECT * FROM trellis.sample_quarantined('unit', NULL, 0)`)
	wantCode(t, err, "22023", "max_rows")
	_, err = pool.Exec(ctx, `SELECT * FROM trellis.sample_quarantined('nope')`)
	wantCode(t, err, "42704", "does not exist")
	_, err = pool.Exec(ctx, `SELECT trellis.release_key('unit', 'orders', '8')`)
	wantCode(t, err, "42704", "key '8' of public.orders is not held for unit")
	_, err = pool.Exec(ctx, `SELECT trellis.release_key('nope', 'orders', '7')`)
	wantCode(t, err, "42704", "transform nope does not exist")
	stranger := openPool(t, db, "vt_stranger")
	_, err = stranger.Exec(ctx, `SELECT trellis.release_key('unit', 'public.orders', '7')`)
	wantCode(t, err, "42501", "must be owner")

	// Fix the row, release: exact again and the token converges.
	exec(t, pool, `UPDATE orders SET qty = 5 WHERE id = 7`)
	exec(t, pool, `SELECT trellis.release_key('unit', 'orders', '7')`)
	if n := queryStrings(t, pool, `SELECT count(*)::text FROM trellis.poisoned_since('-infinity')`); n[0] != "0" {
		t.Fatalf("held after release: %v", n)
	}
	pollTrue(t, "token converges", func() bool {
		return queryStrings(t, pool, `SELECT trellis.converged($1)::text`, token)[0] == "true"
	})
	if !sameRows(t, pool, `SELECT id, per FROM unit`, `SELECT id, price / qty FROM orders`) {
		t.Fatal("unit not exact after release")
	}

	// Ten rows failing on one field trip the column fuse: the column is
	// paused, listed, sampled; the transform stays live.
	exec(t, pool, `UPDATE orders SET qty = 0 WHERE id <= 10`)
	pollTrue(t, "unit.per paused", func() bool {
		return queryStrings(t, pool, `SELECT count(*)::text FROM trellis.quarantined WHERE target = 'unit.per' AND state = 'paused'`)[0] == "1"
	})
	if r := queryStrings(t, pool, `SELECT state || ' ' || coalesce(last_error, '') FROM trellis.quarantine_status('unit.per')`); r[0] != "paused division by zero" {
		t.Fatalf("quarantine_status(unit.per): %v", r)
	}
	if r := queryStrings(t, pool, `SELECT state FROM trellis.quarantine_status('unit.other')`); r[0] != "live" {
		t.Fatalf("quarantine_status(unit.other): %v", r)
	}
	if r := queryStrings(t, pool, `SELECT status || ' ' || paused_columns::text || ' ' || problem FROM trellis.status WHERE target = 'unit'`); r[0] != "live {per} column per paused: division by zero" {
		t.Fatalf("status: %v", r)
	}
	if r := queryStrings(t, pool, `SELECT key FROM trellis.sample_quarantined('unit.per', '13:public.orders2', 3)`); strings.Join(r, ",") != "3,4,5" {
		t.Fatalf("sample_quarantined(unit.per): %v", r)
	}
}

func TestQuarantineDrainFailureInStatus(t *testing.T) {
	_, pool := testDB(t)
	exec(t, pool, `CREATE TABLE orders (id bigint PRIMARY KEY, price numeric, tax numeric)`)
	exec(t, pool, `INSERT INTO orders SELECT g, g, 1 FROM generate_series(1, 10) g`)
	cfg := fastConfig("trellis")
	cfg.TestingTargetTriggers = true // the failure is a raising trigger on the target
	e, run := newEngine(t, pool, cfg)
	define(t, e, pool, totalsSpec("totals", "orders"))
	run()
	waitStatus(t, pool, "trellis", "totals", "live")
	exec(t, pool, `CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'target under maintenance' USING ERRCODE = '55006'; END $$`)
	exec(t, pool, `CREATE TRIGGER refuse BEFORE UPDATE ON totals FOR EACH ROW EXECUTE FUNCTION refuse()`)
	exec(t, pool, `UPDATE orders SET tax = 2`)
	pollTrue(t, "drain_failure", func() bool {
		r := queryStrings(t, pool, `SELECT coalesce(drain_failure ->> 'sqlstate', '') || ' ' || coalesce(problem, '') FROM trellis.status WHERE target = 'totals'`)
		return r[0] == "55006 drain held back: target under maintenance"
	})
	exec(t, pool, `DROP TRIGGER refuse ON totals`)
	pollTrue(t, "drain_failure clears", func() bool {
		return queryStrings(t, pool, `SELECT (drain_failure IS NULL AND problem IS NULL)::text FROM trellis.status WHERE target = 'totals'`)[0] == "true" &&
			sameRows(t, pool, `SELECT id, total FROM totals`, `SELECT id, price + tax FROM orders`)
	})
}

// A renamed source column pauses the transform; trellis.status says so in
// problem and capture_failure.
func TestStatusProblemNamesARename(t *testing.T) {
	_, pool := testDB(t)
	exec(t, pool, `CREATE TABLE orders (id bigint PRIMARY KEY, price numeric, tax numeric)`)
	exec(t, pool, `INSERT INTO orders SELECT g, g, 1 FROM generate_series(1, 50) g`)
	e, run := newEngine(t, pool, fastConfig("trellis"))
	define(t, e, pool, totalsSpec("totals", "orders"))
	run()
	waitStatus(t, pool, "trellis", "totals", "live")
	exec(t, pool, `ALTER TABLE orders RENAME COLUMN price TO list_price`)
	exec(t, pool, `UPDATE orders SET tax = 2 WHERE id = 1`)
	waitStatus(t, pool, "trellis", "totals", "paused")
	r := queryStrings(t, pool, `SELECT coalesce(problem, '') || ' | ' || coalesce(capture_failure ->> 'column', '') FROM trellis.status WHERE target = 'totals'`)
	if !strings.Contains(r[0], "renamed to list_price") || !strings.HasSuffix(r[0], "| price") {
		t.Fatalf("status after a rename: %q", r[0])
	}
}
