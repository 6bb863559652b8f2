package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trellis-proxy/trellis-proxy/engine/derive"
	"github.com/trellis-proxy/trellis-proxy/engine/quarantine"
	"github.com/trellis-proxy/trellis-proxy/engine/sqlgen"
)

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func scalar[T any](t *testing.T, q Querier, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := q.QueryRow(context.Background(), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// releaseKey does what trellis.release_key does (virtualtables): delete the
// hold and the deaths, stage a rederive row carrying the hold's origin.
func releaseKey(t *testing.T, q Querier, def int64, table, key string) {
	t.Helper()
	exec(t, q, `WITH p AS (DELETE FROM trellis._poison WHERE definition_id = $1 AND src_table = $2 AND key = $3 RETURNING *),
		d AS (DELETE FROM trellis._key_deaths WHERE definition_id = $1 AND src_table = $2 AND key = $3)
		INSERT INTO trellis._change_log (src_table, key, op, definition_id, origin_lsn)
		SELECT p.src_table, p.Key, 'rederive', p.definition_id, p.origin_lsn FROM p`, def, table, key)
}

func TestQuarantineHoldsOneKeyForOneTransform(t *testing.T) {
	pool := testDB(t)
	exec(t, pool, `CREATE TABLE orders (id bigint PRIMARY KEY, region text, price numeric, qty int)`)
	exec(t, pool, `INSERT INTO orders SELECT g, 'r' || (g % 3), g, 1 + g % 4 FROM generate_series(1, 200) g`)
	e, _ := startEngine(t, pool, fastConfig())
	unit := define(t, e, Spec{Target: TableName{Name: "unit"}, Source: TableName{Name: "orders"},
		Fields: []Field{{Name: "per", Expr: col("price") + " / " + col("qty"), Reads: []string{"price", "qty"}}}})
	define(t, e, Spec{Target: TableName{Name: "plain"}, Source: TableName{Name: "orders"},
		Fields: []Field{{Name: "price", Expr: col("price"), Reads: []string{"price"}}}})
	define(t, e, Spec{Target: TableName{Name: "by_region"}, Source: TableName{Name: "orders"},
		GroupBy: []GroupKey{{Name: "region", Expr: col("region")}},
		Fields:  []Field{{Name: "total", Agg: AggSum, Expr: col("price")}, {Name: "n", Agg: AggCountStar}}})
	for _, n := range []string{"unit", "plain", "by_region"} {
		awaitLive(t, e, n)
	}
	// One row's divisor becomes zero: only unit fails on key 7.
	exec(t, pool, `UPDATE orders SET qty = 0, price = 700 WHERE id = 7`)
	waitFor(t, "key 7 held for unit", 30*time.Second, func() bool {
		return count(t, pool, `SELECT 1 FROM trellis._poison WHERE key = '7'`) == 1
	})
	var defID int64
	var sqlstate, msg string
	if err := pool.QueryRow(t.Context(), `SELECT definition_id, sqlstate, error FROM trellis._poison`).Scan(&defID, &sqlstate, &msg); err != nil {
		t.Fatal(err)
	}
	if defID != unit.ID || sqlstate != "22012" || !strings.Contains(msg, "division by zero") {
		t.Fatalf("poison row: def %d (want %d) %s %q", defID, unit.ID, sqlstate, msg)
	}
	// A token taken now does not converge while the key is held.
	tok, err := e.WatermarkToken(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// Everything else keeps flowing, for every transform.
	exec(t, pool, `UPDATE orders SET price = price + 1 WHERE id <> 7`)
	exec(t, pool, `INSERT INTO orders VALUES (1000, 'r1', 5, 5)`)
	waitFor(t, "other keys applied", 30*time.Second, func() bool {
		return diff(t, pool, `SELECT id, per FROM unit WHERE id <> 7`, `SELECT id, price / qty FROM orders WHERE id <> 7`) == "" &&
			diff(t, pool, `SELECT id, price FROM plain`, `SELECT id, price FROM orders`) == "" &&
			diff(t, pool, `SELECT region, total, n FROM by_region`, `SELECT region, sum(price), count(*) FROM orders GROUP BY region`) == ""
	})
	if ok, err := e.Converged(t.Context(), tok); err != nil || ok {
		t.Fatalf("token converged while a key below it is held: %v %v", ok, err)
	}
	if s, _ := e.StatusOf(t.Context(), TableName{Name: "unit"}); s == nil || s.Status != "live" {
		t.Fatalf("unit status %+v", s)
	}
	// Later changes of the held key are skipped by unit only.
	exec(t, pool, `UPDATE orders SET price = 800 WHERE id = 7`)
	waitFor(t, "plain applies the held key", 30*time.Second, func() bool {
		return count(t, pool, `SELECT 1 FROM plain WHERE id = 7 AND price = 800`) == 1
	})
	// Fix the row, release: exact again, token converges.
	exec(t, pool, `UPDATE orders SET qty = 2 WHERE id = 7`)
	releaseKey(t, pool, unit.ID, "public.orders", "7")
	converge(t, e)
	if err := e.AwaitConverged(t.Context(), tok, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	assertSame(t, pool, `SELECT id, per FROM unit`, `SELECT id, price / qty FROM orders`)
	assertSame(t, pool, `SELECT id, price FROM plain`, `SELECT id, price FROM orders`)
	if n := count(t, pool, `SELECT 1 FROM trellis._key_deaths`); n != 0 {
		t.Fatalf("%d death rows left", n)
	}
}

func TestQuarantineUniqueIndexOnTargetHoldsKey(t *testing.T) {
	pool := testDB(t)
	exec(t, pool, `CREATE TABLE users (id int PRIMARY KEY, email text)`)
	exec(t, pool, `INSERT INTO users SELECT g, 'u' || g || '@x' FROM generate_series(1, 50) g`)
	e, _ := startEngine(t, pool, fastConfig())
	d := define(t, e, Spec{Target: TableName{Name: "emails"}, Source: TableName{Name: "users"},
		Fields: []Field{{Name: "email", Expr: "lower(" + col("email") + ")", Reads: []string{"email"}}}})
	awaitLive(t, e, "emails")
	exec(t, pool, `CREATE UNIQUE INDEX ON emails (email)`)
	exec(t, pool, `UPDATE users SET email = 'U1@x' WHERE id = 2`) // collides with user 1
	exec(t, pool, `INSERT INTO users VALUES (51, 'u51@x')`)
	waitFor(t, "key 2 held", 30*time.Second, func() bool {
		return count(t, pool, `SELECT 1 FROM trellis._poison WHERE key = '2' AND sqlstate = '23505'`) == 1
	})
	waitFor(t, "the rest applied", 30*time.Second, func() bool {
		return count(t, pool, `SELECT 1 FROM emails WHERE id = 51`) == 1
	})
	// No stuck bucket.
	waitFor(t, "batches drained", 30*time.Second, func() bool {
		return count(t, pool, `SELECT 1 FROM trellis._batches WHERE state <> 'drained'`) == 0
	})
	exec(t, pool, `UPDATE users SET email = 'u2@x' WHERE id = 2`)
	releaseKey(t, pool, d.ID, "public.users", "2")
	converge(t, e)
	assertSame(t, pool, `SELECT id, email FROM emails`, `SELECT id, lower(email) FROM users`)
}

// faultConfig is fastConfig with triggers on targets allowed: these tests
// make pages and build steps fail with a raising trigger.
func faultConfig() Config {
	cfg := fastConfig()
	cfg.TestingTargetTriggers = true
	return cfg
}

func TestQuarantineFuseQuarantinesTransform(t *testing.T) {
	pool := testDB(t)
	exec(t, pool, `CREATE TABLE m (id int PRIMARY KEY, a int, b int)`)
	exec(t, pool, `INSERT INTO m SELECT g, g, 1 FROM generate_series(1, 20) g`)
	e, _ := startEngine(t, pool, faultConfig())
	define(t, e, Spec{Target: TableName{Name: "ratio"}, Source: TableName{Name: "m"},
		Fields: []Field{{Name: "r", Expr: col("a") + " / " + col("b"), Reads: []string{"a", "b"}}}})
	define(t, e, Spec{Target: TableName{Name: "copy"}, Source: TableName{Name: "m"},
		Fields: []Field{{Name: "a", Expr: col("a"), Reads: []string{"a"}}}})
	awaitLive(t, e, "ratio")
	awaitLive(t, e, "copy")
	// Every row refused by a constraint on the target: attributable to keys,
	// not to a column (the formula alone is fine).
	exec(t, pool, `ALTER TABLE ratio ADD CONSTRAINT small CHECK (r < 1000)`)
	exec(t, pool, `UPDATE m SET a = a + 100000`)
	waitFor(t, "ratio quarantined", 60*time.Second, func() bool {
		s, _ := e.StatusOf(t.Context(), TableName{Name: "ratio"})
		return s != nil && s.Status == "quarantined"
	})
	// The other transform reading every failing key stays exact.
	waitFor(t, "copy exact", 30*time.Second, func() bool {
		return diff(t, pool, `SELECT id, a FROM copy`, `SELECT id, a FROM m`) == ""
	})
	if n := count(t, pool, `SELECT 1 FROM trellis._poison`); n < quarantine.HeldKeysToQuarantine {
		t.Fatalf("%d held keys", n)
	}
}

func TestQuarantineBuildChunkHoldsBadRow(t *testing.T) {
	pool := testDB(t)
	exec(t, pool, `CREATE TABLE m (id int PRIMARY KEY, a int, b int)`)
	exec(t, pool, `INSERT INTO m SELECT g, g, CASE WHEN g = 13 THEN 0 ELSE 1 END FROM generate_series(1, 100) g`)
	e, _ := startEngine(t, pool, fastConfig())
	define(t, e, Spec{Target: TableName{Name: "ratio"}, Source: TableName{Name: "m"},
		Fields: []Field{{Name: "r", Expr: col("a") + " / " + col("b"), Reads: []string{"a", "b"}}}})
	awaitLive(t, e, "ratio")
	waitFor(t, "key 13 held", 30*time.Second, func() bool {
		return count(t, pool, `SELECT 1 FROM trellis._poison WHERE key = '13'`) == 1
	})
	assertSame(t, pool, `SELECT id, r FROM ratio`, `SELECT id, a / b FROM m WHERE b <> 0`)
}

func TestQuarantineUnattributableIsDrainFailure(t *testing.T) {
	pool := testDB(t)
	exec(t, pool, `CREATE TABLE m (id int PRIMARY KEY, a int)`)
	exec(t, pool, `INSERT INTO m SELECT g, g FROM generate_series(1, 10) g`)
	e, _ := startEngine(t, pool, faultConfig())
	define(t, e, Spec{Target: TableName{Name: "c"}, Source: TableName{Name: "m"},
		Fields: []Field{{Name: "a", Expr: col("a"), Reads: []string{"a"}}}})
	awaitLive(t, e, "c")
	// Every write to the target fails with a state error: nothing is attributable.
	exec(t, pool, `CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'maintenance' USING ERRCODE = '55006'; END $$`)
	exec(t, pool, `CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON c FOR EACH ROW EXECUTE FUNCTION refuse()`)
	exec(t, pool, `UPDATE m SET a = a + 1`)
	waitFor(t, "drain_failure", 30*time.Second, func() bool {
		s, _ := e.StatusOf(t.Context(), TableName{Name: "c"})
		return s != nil && s.DrainFailure != nil && strings.Contains(*s.DrainFailure, "maintenance")
	})
	// The failure holds this definition alone (D21), not the bucket.
	var sqlstate string
	if err := pool.QueryRow(t.Context(), `SELECT sqlstate FROM trellis._page_failures`).Scan(&sqlstate); err != nil || sqlstate != "55006" {
		t.Fatalf("held definition's sqlstate %q %v", sqlstate, err)
	}
	if n := count(t, pool, `SELECT 1 FROM trellis._batch_buckets WHERE last_error IS NOT NULL`); n != 0 {
		t.Fatalf("%d buckets held back by one definition's failure", n)
	}
	if n := count(t, pool, `SELECT 1 FROM trellis._poison`); n != 0 {
		t.Fatalf("unattributable failure poisoned %d keys", n)
	}
	exec(t, pool, `DROP TRIGGER refuse ON c`)
	converge(t, e)
	assertSame(t, pool, `SELECT id, a FROM c`, `SELECT id, a FROM m`)
	if s, _ := e.StatusOf(t.Context(), TableName{Name: "c"}); s == nil || s.DrainFailure != nil {
		t.Fatalf("drain failure did not clear: %+v", s)
	}
}

func TestQuarantineBuildFailurePausesAfterFiveAttempts(t *testing.T) {
	pool := testDB(t)
	exec(t, pool, `CREATE TABLE m (id int PRIMARY KEY, a int)`)
	exec(t, pool, `INSERT INTO m SELECT g, g FROM generate_series(1, 10) g`)
	exec(t, pool, `CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'target offline' USING ERRCODE = '55006'; END $$`)
	e, _ := startEngine(t, pool, faultConfig())
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Define(t.Context(), tx, Spec{Target: TableName{Name: "c"}, Source: TableName{Name: "m"},
		Statement: "TRANSFORM c FROM m SELECT a + 0 AS a2",
		Fields:    []Field{{Name: "a2", Expr: col("a") + " + 0", Reads: []string{"a"}}}}); err != nil {
		t.Fatal(err)
	}
	exec(t, tx, `CREATE TRIGGER refuse BEFORE INSERT ON c FOR EACH ROW EXECUTE FUNCTION refuse()`)
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	defined := scalar[time.Time](t, pool, `SELECT now()`)
	// First charged attempt: backoff 1 s, SQLSTATE recorded. The charge
	// came after the definition committed and before it is seen, so its
	// retry is at least 1 s after the first and at most 1 s after the
	// second (a window around the observation alone was missed when the
	// poll ran late on a loaded machine).
	waitFor(t, "first charged attempt", 30*time.Second, func() bool {
		var n int
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM trellis._build_tasks WHERE attempts = 1 AND last_sqlstate = '55006'
			AND next_attempt_at BETWEEN $1::timestamptz + interval '1 s' AND now() + interval '1.1 s'`, defined).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	})
	waitFor(t, "paused after the fifth", 40*time.Second, func() bool {
		return scalar[string](t, pool, `SELECT status FROM trellis._definitions`) == "paused"
	})
	bf := scalar[string](t, pool, `SELECT (status_detail -> 'backfill_failure')::text FROM trellis._definitions`)
	if !strings.Contains(bf, `"attempts": 5`) || !strings.Contains(bf, "target offline") || !strings.Contains(bf, `"sqlstate": "55006"`) {
		t.Fatalf("backfill_failure %s", bf)
	}
	// Fixed and resumed: the rebuild clears the recorded failure.
	exec(t, pool, `DROP TRIGGER refuse ON c`)
	if _, err := applyText(t, e, `RESUME TRANSFORM c`); err != nil {
		t.Fatal(err)
	}
	awaitLive(t, e, "c")
	if bf := scalar[*string](t, pool, `SELECT (status_detail -> 'backfill_failure')::text FROM trellis._definitions`); bf != nil {
		t.Fatalf("backfill_failure after a successful rebuild: %s", *bf)
	}
	assertSame(t, pool, `SELECT id, a2 FROM c`, `SELECT id, a + 0 FROM m`)
}

func TestQuarantineColumnFusePausesOneColumn(t *testing.T) {
	pool := testDB(t)
	exec(t, pool, `CREATE TABLE m (id int PRIMARY KEY, a int, b int)`)
	exec(t, pool, `INSERT INTO m SELECT g, g, 1 FROM generate_series(1, 40) g`)
	e, _ := startEngine(t, pool, fastConfig())
	define(t, e, Spec{Target: TableName{Name: "two"}, Source: TableName{Name: "m"},
		Fields: []Field{{Name: "ratio", Expr: col("a") + " / " + col("b"), Reads: []string{"a", "b"}},
			{Name: "plus", Expr: col("a") + " + 1", Reads: []string{"a"}}}})
	awaitLive(t, e, "two")
	exec(t, pool, `UPDATE m SET b = 0, a = a * 10 WHERE id <= 8`) // 8 rows fail on ratio only
	waitFor(t, "ratio paused", 30*time.Second, func() bool {
		return count(t, pool, `SELECT 1 FROM trellis._paused_columns WHERE column_name = 'ratio'`) == 1
	})
	exec(t, pool, `UPDATE m SET a = a + 1 WHERE id > 30`)
	exec(t, pool, `INSERT INTO m VALUES (100, 5, 1)`)
	converge(t, e)
	// plus is exact everywhere; ratio keeps its last values (new rows: NULL).
	assertSame(t, pool, `SELECT id, plus FROM two`, `SELECT id, a + 1 FROM m`)
	assertSame(t, pool, `SELECT id, ratio FROM two WHERE id <= 30`, `SELECT g, g FROM generate_series(1, 30) g`)
	assertSame(t, pool, `SELECT id, ratio FROM two WHERE id > 30`, `SELECT id, CASE WHEN id = 100 THEN NULL ELSE a - 1 END FROM m WHERE id > 30`)
	if n := count(t, pool, `SELECT 1 FROM trellis._poison`); n != 0 {
		t.Fatalf("%d keys held; the column fuse should have taken them", n)
	}
	if s, _ := e.StatusOf(t.Context(), TableName{Name: "two"}); s == nil || s.Status != "live" {
		t.Fatalf("status %+v", s)
	}
}

// A held key written in a tight loop does not stop other keys: a paced
// writer's changes on other keys keep reaching both transforms while key 7
// is held. The commit-to-visible figures are logged for a person; speed is
// judged by the benchmarks (B7), never asserted by a timed test.
func TestQuarantineLatencyUnderPoisonedKey(t *testing.T) {
	if testing.Short() {
		t.Skip("latency run")
	}
	pool := testDB(t)
	exec(t, pool, `CREATE TABLE m (id int PRIMARY KEY, a int, b int)`)
	exec(t, pool, `INSERT INTO m SELECT g, g, 1 FROM generate_series(1, 1000) g`)
	e, _ := startEngine(t, pool, Config{Logger: testLogger()})
	define(t, e, Spec{Target: TableName{Name: "ratio"}, Source: TableName{Name: "m"},
		Fields: []Field{{Name: "r", Expr: col("a") + " / " + col("b"), Reads: []string{"a", "b"}}}})
	define(t, e, Spec{Target: TableName{Name: "copy"}, Source: TableName{Name: "m"},
		Fields: []Field{{Name: "a", Expr: col("a"), Reads: []string{"a"}}}})
	awaitLive(t, e, "ratio")
	awaitLive(t, e, "copy")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	hammer := make(chan struct{})
	go func() {
		defer close(hammer)
		for i := 0; ctx.Err() == nil; i++ {
			pool.Exec(context.Background(), `UPDATE m SET b = 0, a = $1 WHERE id = 7`, i)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	waitFor(t, "key 7 held", 30*time.Second, func() bool {
		return count(t, pool, `SELECT 1 FROM trellis._poison WHERE key = '7'`) == 1
	})
	var lat []time.Duration
	for i := range 60 {
		id := 100 + i
		v := 100000 + i
		t0 := time.Now()
		exec(t, pool, `UPDATE m SET a = $2 WHERE id = $1`, id, v)
		for {
			var n int
			pool.QueryRow(t.Context(), `SELECT count(*) FROM ratio r JOIN copy c USING (id) WHERE id = $1 AND r.r = $2 AND c.a = $2`, id, v).Scan(&n)
			if n == 1 {
				break
			}
			if time.Since(t0) > time.Minute {
				t.Fatalf("change of key %d never became visible while key 7 was held", id)
			}
			time.Sleep(2 * time.Millisecond)
		}
		lat = append(lat, time.Since(t0))
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-hammer
	slices.Sort(lat)
	p50, p99, worst := lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
	t.Logf("commit-to-visible with a held key written in a tight loop: p50 %v p99 %v max %v", p50, p99, worst)
}

// Two pages charge the same key for one definition: the first reaches the
// fifth death and holds the key; the second read the holds before that
// commit, so it still applied the key and failed. Its death must not be
// counted: a held key is skipped by every later page, so nothing would clear
// a death recorded after the hold (the differential quarantine test never
// settled, seed 1796115132893343322).
func TestQuarantineChargeAfterHoldIsDropped(t *testing.T) {
	pool := testDB(t)
	exec(t, pool, `CREATE TABLE orders (id bigint PRIMARY KEY, price numeric, qty int)`)
	exec(t, pool, `INSERT INTO orders VALUES (7, 700, 0)`)
	e, stop := startEngine(t, pool, fastConfig())
	unit := define(t, e, Spec{Target: TableName{Name: "unit"}, Source: TableName{Name: "orders"},
		Fields: []Field{{Name: "per", Expr: col("price") + " / " + col("qty"), Reads: []string{"price", "qty"}}}})
	waitFor(t, "key 7 held", 60*time.Second, func() bool {
		return count(t, pool, `SELECT 1 FROM trellis._poison WHERE key = '7'`) == 1
	})
	stop() // the two pages below are the only writers of the quarantine tables
	exec(t, pool, `DELETE FROM trellis._poison`)
	exec(t, pool, `DELETE FROM trellis._change_log`)
	exec(t, pool, `INSERT INTO trellis._key_deaths (definition_id, src_table, key, deaths) VALUES ($1, 'public.orders', '7', 4)`, unit.ID)

	cd := &derive.CompiledDef{ID: unit.ID, Def: &sqlgen.Def{C: &Compiled{TargetText: "public.unit", SourceText: "public.orders"}}}
	failed := []quarantine.KeyFailure{{Def: unit.ID, Table: "public.orders", Key: "7", Err: errors.New("division by zero")}}
	origin := "0/1"
	meta := map[derive.PageKey]derive.KeyMeta{{Table: "public.orders", Key: "7"}: {Origin: &origin, Hop: 1}}
	ctx := t.Context()
	first, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback(context.Background())
	if err := e.w.ChargeFailures(ctx, first, cd, failed, meta); err != nil {
		t.Fatal(err)
	}
	second := make(chan error, 1)
	go func() {
		tx, err := pool.Begin(ctx)
		if err != nil {
			second <- err
			return
		}
		defer tx.Rollback(context.Background())
		if err := e.w.ChargeFailures(ctx, tx, cd, failed, meta); err != nil {
			second <- err
			return
		}
		second <- tx.Commit(ctx)
	}()
	// The second page's death upsert waits on the first page's death row.
	waitFor(t, "the second charge to wait on the first", 60*time.Second, func() bool {
		return count(t, pool, `SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%_key_deaths%'`) == 1
	})
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM trellis._poison WHERE definition_id = $1 AND key = '7'`, unit.ID); n != 1 {
		t.Fatalf("key 7: %d holds, want 1", n)
	}
	if n := count(t, pool, `SELECT 1 FROM trellis._key_deaths`); n != 0 {
		t.Fatalf("%d death rows left for a held key", n)
	}
	if n := count(t, pool, `SELECT 1 FROM trellis._change_log WHERE op = 'rederive'`); n != 0 {
		t.Fatalf("%d rederive rows staged for a held key", n)
	}
}
