package engine

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// bulkSpecs are a 1-1 and a SUM/COUNT target over bulk_src(id, g, v).
func bulkSpecs() []Spec {
	return []Spec{
		{Target: TableName{Name: "bulk_t"}, Source: TableName{Name: "bulk_src"}, Statement: "TRANSFORM bulk_t FROM bulk_src ...",
			Fields: []Field{{Name: "w", Expr: col("v") + " * 2", Reads: []string{"v"}}}},
		{Target: TableName{Name: "bulk_g"}, Source: TableName{Name: "bulk_src"}, Statement: "TRANSFORM bulk_g FROM bulk_src ...",
			GroupBy: []GroupKey{{Name: "g", Expr: col("g")}},
			Fields:  []Field{{Name: "s", Agg: AggSum, Expr: col("v")}, {Name: "n", Agg: AggCountStar}}},
	}
}

const (
	bulkOneGot  = `SELECT id, w FROM bulk_t`
	bulkOneWant = `SELECT id, v * 2 FROM bulk_src`
	bulkAggGot  = `SELECT g, s, n FROM bulk_g`
	bulkAggWant = `SELECT g, sum(v), count(*) FROM bulk_src GROUP BY g`
)

// One statement's keys are one change-log row, so one bucket: a bulk
// INSERT, a bulk UPDATE (keys moving between groups), a bulk DELETE, and a
// TRUNCATE followed by a bulk INSERT in one transaction (one batch, its
// truncate first) each span many pages of one bucket, whose keys the first
// page materialises (engine/drain/bulk.go). Every target stays exact.
func TestBulkBucketsDrainExact(t *testing.T) {
	pool := testDB(t)
	exec(t, pool, `CREATE TABLE bulk_src (id bigint PRIMARY KEY, g int, v bigint)`)
	cfg := fastConfig()
	cfg.PageSize = 100 // a bucket of more than 400 keys is materialised
	e, _ := startEngine(t, pool, cfg)
	for _, s := range bulkSpecs() {
		define(t, e, s)
	}
	awaitLive(t, e, "bulk_t")
	awaitLive(t, e, "bulk_g")
	check := func(step string) {
		t.Helper()
		converge(t, e)
		if d := diff(t, pool, bulkOneGot, bulkOneWant); d != "" {
			t.Fatalf("%s: bulk_t: %s", step, d)
		}
		if d := diff(t, pool, bulkAggGot, bulkAggWant); d != "" {
			t.Fatalf("%s: bulk_g: %s", step, d)
		}
	}
	exec(t, pool, `INSERT INTO bulk_src SELECT i, i % 37, i FROM generate_series(1, 20000) i`)
	check("bulk insert")
	exec(t, pool, `UPDATE bulk_src SET g = (g + 1) % 41, v = v + 1 WHERE id % 3 <> 0`)
	check("bulk update")
	exec(t, pool, `DELETE FROM bulk_src WHERE id % 5 = 0`)
	check("bulk delete")
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`TRUNCATE bulk_src`, `INSERT INTO bulk_src SELECT i, i % 7, -i FROM generate_series(5000, 12000) i`} {
		if _, err := tx.Exec(t.Context(), q); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	check("truncate and bulk insert")
	if n := count(t, pool, "SELECT * FROM bulk_t"); n != 7001 {
		t.Fatalf("bulk_t has %d rows, want 7001", n)
	}
	// Every materialised key retires once its batch drained (keyRetirer,
	// on its own connection).
	for deadline := time.Now().Add(30 * time.Second); count(t, pool, "SELECT 1 FROM trellis._batch_keys") > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d materialised keys left 30 s after every batch drained", count(t, pool, "SELECT 1 FROM trellis._batch_keys"))
		}
	}
}

// The materialised path is the one taken: with the plant that loses one
// materialised key in three, a bulk INSERT of 5,000 rows leaves 1,667 rows
// out of the 1-1 target (and the differential test catches the plant too).
func TestBulkBucketsUseMaterialisedKeys(t *testing.T) {
	pool := testDB(t)
	exec(t, pool, `CREATE TABLE bulk_src (id bigint PRIMARY KEY, g int, v bigint)`)
	cfg := fastConfig()
	cfg.PageSize = 100
	e, _ := startPlanted(t, pool, cfg, func(e *Engine) { e.w.Plant.BulkKeyLost = true })
	define(t, e, bulkSpecs()[0])
	awaitLive(t, e, "bulk_t")
	exec(t, pool, `INSERT INTO bulk_src SELECT i, i % 37, i FROM generate_series(1, 5000) i`)
	converge(t, e)
	if n := count(t, pool, "SELECT * FROM bulk_t"); n != 3333 {
		t.Fatalf("bulk_t has %d rows with one materialised key in three lost, want 3333", n)
	}
	// A small statement's bucket is not materialised, so the plant is idle.
	exec(t, pool, `INSERT INTO bulk_src SELECT i, 0, i FROM generate_series(6001, 6100) i`)
	converge(t, e)
	if n := count(t, pool, "SELECT * FROM bulk_t WHERE id > 6000"); n != 100 {
		t.Fatalf("a 100-row insert reached bulk_t with %d rows, want 100", n)
	}
}

// A bulk batch does not hold back the batches sealed after it: a row
// written to another table while a 20,000-key batch drains (slowed to
// 10 ms a page) reaches its target before the bulk batch has drained, and a
// token taken after that row is still not converged until the bulk batch
// is (convergence reads the drained prefix). Both targets end exact.
func TestBulkBatchHandsOff(t *testing.T) {
	pool := testDB(t)
	exec(t, pool, `CREATE TABLE bulk_src (id bigint PRIMARY KEY, g int, v bigint)`)
	exec(t, pool, `CREATE TABLE side_src (id bigint PRIMARY KEY, v bigint)`)
	cfg := fastConfig()
	cfg.PageSize = 100
	e, _ := startPlanted(t, pool, cfg, func(e *Engine) {
		e.w.Plant.PageHook = func(string) { time.Sleep(10 * time.Millisecond) }
	})
	define(t, e, bulkSpecs()[0])
	define(t, e, Spec{Target: TableName{Name: "side_t"}, Source: TableName{Name: "side_src"}, Statement: "TRANSFORM side_t FROM side_src ...",
		Fields: []Field{{Name: "w", Expr: col("v"), Reads: []string{"v"}}}})
	awaitLive(t, e, "bulk_t")
	awaitLive(t, e, "side_t")
	exec(t, pool, `INSERT INTO bulk_src SELECT i, i % 37, i FROM generate_series(1, 20000) i`)
	bulkPending := func() bool {
		return count(t, pool, `SELECT 1 FROM trellis._batches WHERE state <> 'drained' AND row_count >= 20000`) > 0
	}
	// The bulk batch sealed alone first, so every side row is in a later batch.
	for deadline := time.Now().Add(30 * time.Second); !bulkPending(); {
		if time.Now().After(deadline) {
			t.Fatal("the bulk batch was not sealed")
		}
		time.Sleep(time.Millisecond)
	}
	ctx := t.Context()
	overtook := 0
	for i := int64(1); i <= 5; i++ {
		exec(t, pool, `INSERT INTO side_src VALUES ($1, $1)`, i)
		tok, err := e.WatermarkToken(ctx)
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for count(t, pool, fmt.Sprintf(`SELECT 1 FROM side_t WHERE id = %d`, i)) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("side row %d not visible after 30 s", i)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if bulkPending() {
			overtook++
			if ok, err := e.Converged(ctx, tok); err != nil || ok {
				t.Fatalf("a token after side row %d reads converged (%v, %v) while the bulk batch before it is undrained", i, ok, err)
			}
		}
	}
	if overtook < 3 {
		t.Fatalf("%d of 5 side rows became visible before the bulk batch drained, want at least 3", overtook)
	}
	converge(t, e)
	assertSame(t, pool, bulkOneGot, bulkOneWant)
	assertSame(t, pool, `SELECT id, w FROM side_t`, `SELECT id, v FROM side_src`)
}

// A later batch's page reads only its own log rows: with a 20,000-key bulk
// statement's log row still in the log (every page held open, so nothing
// drains or retires), the page query of the batch sealed after it unnests
// only that batch's keys, not the bulk row's array (it did, and threw it
// away, when the window was checked after the unnest: 0.9 s a page at
// 1,000,000 keys). Both targets end exact once the pages are let go.
func TestLaterPageSkipsBulkLogRow(t *testing.T) {
	pool := testDB(t)
	exec(t, pool, `CREATE TABLE bulk_src (id bigint PRIMARY KEY, g int, v bigint)`)
	exec(t, pool, `CREATE TABLE side_src (id bigint PRIMARY KEY, v bigint)`)
	cfg := fastConfig()
	cfg.PageSize = 100
	var hold atomic.Bool
	release := make(chan struct{})
	e, _ := startPlanted(t, pool, cfg, func(e *Engine) {
		e.w.Plant.PageHook = func(string) {
			if hold.Load() {
				<-release
			}
		}
	})
	define(t, e, bulkSpecs()[0])
	define(t, e, Spec{Target: TableName{Name: "side_t"}, Source: TableName{Name: "side_src"}, Statement: "TRANSFORM side_t FROM side_src ...",
		Fields: []Field{{Name: "w", Expr: col("v"), Reads: []string{"v"}}}})
	awaitLive(t, e, "bulk_t")
	awaitLive(t, e, "side_t")
	converge(t, e)
	hold.Store(true)
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	exec(t, pool, `INSERT INTO bulk_src SELECT i, i % 37, i FROM generate_series(1, 20000) i`)
	sealedAfter := func(q string) int64 {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
			if n := count(t, pool, q); n > 0 {
				return scalar[int64](t, pool, `SELECT max(seq) FROM trellis._batches`)
			}
			if time.Now().After(deadline) {
				t.Fatalf("no batch sealed: %s", q)
			}
		}
	}
	bulk := sealedAfter(`SELECT 1 FROM trellis._batches WHERE row_count >= 20000`)
	exec(t, pool, `INSERT INTO side_src VALUES (1, 1), (2, 2), (3, 3)`)
	later := sealedAfter(fmt.Sprintf(`SELECT 1 FROM trellis._batches WHERE seq > %d`, bulk))
	if n := count(t, pool, fmt.Sprintf(`SELECT 1 FROM trellis._change_log WHERE cardinality(keys) >= 20000`)); n != 1 {
		t.Fatalf("%d bulk log rows in the log, want 1 (nothing may drain yet)", n)
	}
	plan, raw := explainAnalyze(t, pool, e.w.LogPageKeysSQL(), later, 1, 0, "", "", cfg.PageSize)
	var unnested float64
	walkPlan(plan, func(p map[string]any) {
		if p["Node Type"] == "Function Scan" && p["Function Name"] == "unnest" {
			rows, _ := p["Actual Rows"].(float64)
			loops, _ := p["Actual Loops"].(float64)
			unnested += rows * loops
		}
	})
	if unnested > 10 {
		t.Fatalf("batch %d's page unnested %v keys with batch %d's 20,000-key row in the log, want its own few:\n%s", later, unnested, bulk, raw)
	}
	released = true
	close(release)
	converge(t, e)
	assertSame(t, pool, bulkOneGot, bulkOneWant)
	assertSame(t, pool, `SELECT id, w FROM side_t`, `SELECT id, v FROM side_src`)
}

// explainAnalyze runs sql under EXPLAIN (ANALYZE, BUFFERS) in a
// transaction it rolls back and returns the top plan node and the raw plan.
func explainAnalyze(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) (map[string]any, []byte) {
	t.Helper()
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(t.Context())
	var raw []byte
	if err := tx.QueryRow(t.Context(), `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+sql, args...).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var doc []struct{ Plan map[string]any }
	if err := json.Unmarshal(raw, &doc); err != nil || len(doc) != 1 {
		t.Fatalf("plan %s: %v", raw, err)
	}
	return doc[0].Plan, raw
}

// walkPlan calls fn on a plan node and every node under it.
func walkPlan(p map[string]any, fn func(map[string]any)) {
	fn(p)
	subs, _ := p["Plans"].([]any)
	for _, s := range subs {
		if m, ok := s.(map[string]any); ok {
			walkPlan(m, fn)
		}
	}
}

// Retirement reads only the keys it deletes. With 50,000 materialised keys
// of a batch still draining, listing what retires and deleting a chunk of
// it touch a few buffers, not the draining batch's pages (a LIMIT over
// batch_seq < (SELECT min(seq)) walked them all on every staging pass, and
// the seal waited: the side writer's p50 was 1 s beside 10,000,000 keys).
// The keys of a drained batch and of a batch already retired go; the
// draining batch's stay.
func TestRetiringBatchKeysSkipsDrainingBatch(t *testing.T) {
	pool := testDB(t)
	ctx := t.Context()
	exec(t, pool, `CREATE TABLE bulk_src (id bigint PRIMARY KEY, g int, v bigint)`)
	cfg := fastConfig()
	cfg.PageSize = 100
	cfg.RetireChunk = 1000
	e, stop := startPlanted(t, pool, cfg, func(e *Engine) { e.w.Plant.KeepLog = true })
	define(t, e, bulkSpecs()[0])
	awaitLive(t, e, "bulk_t")
	exec(t, pool, `INSERT INTO bulk_src SELECT i, i % 37, i FROM generate_series(1, 5000) i`)
	converge(t, e)
	stop()
	drained := scalar[int64](t, pool, `SELECT max(batch_seq) FROM trellis._batch_keys`)
	if n := count(t, pool, fmt.Sprintf(`SELECT 1 FROM trellis._batch_keys WHERE batch_seq = %d`, drained)); n != 5000 {
		t.Fatalf("the drained bulk batch has %d materialised keys, want 5000", n)
	}
	draining := scalar[int64](t, pool, `SELECT max(seq) + 1000 FROM trellis._batches`)
	fake := `INSERT INTO trellis._batch_keys (batch_seq, bucket, src_table, key, unknown_origin, hop, staged_at, origin_at)
		SELECT $1::int8, 0, 'public.bulk_src', g::text, false, 0, now(), now() FROM generate_series(1, $2::int) g`
	exec(t, pool, fake, draining, 50000)
	retired := scalar[int64](t, pool, `SELECT min(seq) - 1 FROM trellis._batches`) // its batch row retired
	exec(t, pool, fake, retired, 30)
	pages := scalar[int64](t, pool, `SELECT pg_relation_size('trellis._batch_keys') / current_setting('block_size')::int8`)
	// plan returns the buffers sql touched and whether it scanned
	// _batch_keys whole.
	plan := func(sql string, args ...any) (buffers float64, seqScan bool) {
		t.Helper()
		top, _ := explainAnalyze(t, pool, sql, args...)
		hit, _ := top["Shared Hit Blocks"].(float64)
		read, _ := top["Shared Read Blocks"].(float64)
		walkPlan(top, func(p map[string]any) {
			if p["Node Type"] == "Seq Scan" && p["Relation Name"] == "_batch_keys" {
				seqScan = true
			}
		})
		return hit + read, seqScan
	}
	if b, seq := plan(e.w.RetiringKeyBatchesSQL()); b > 50 || seq {
		t.Errorf("listing the batches that retire touched %v buffers (seq scan %v) beside a draining batch's keys (%d pages in all)", b, seq, pages)
	}
	// 30 keys deleted: their own pages and index entries, about 100 buffers.
	if b, seq := plan(e.w.RetireKeyChunkSQL(), retired); b > 200 || seq {
		t.Errorf("deleting the retired batch's 30 keys touched %v buffers (seq scan %v) beside a draining batch's keys (%d pages in all)", b, seq, pages)
	}
	if _, seq := plan(e.w.RetireKeyChunkSQL(), drained); seq {
		t.Error("deleting a chunk of the drained batch's keys scanned every batch's keys")
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for done := false; !done; {
		if done, err = e.w.RetireBatchKeys(ctx, conn.Conn(), 2); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, pool, fmt.Sprintf(`SELECT 1 FROM trellis._batch_keys WHERE batch_seq <> %d`, draining)); n != 0 {
		t.Fatalf("%d keys of the drained and the retired batch left", n)
	}
	if n := count(t, pool, fmt.Sprintf(`SELECT 1 FROM trellis._batch_keys WHERE batch_seq = %d`, draining)); n != 50000 {
		t.Fatalf("the draining batch keeps %d of its 50,000 keys", n)
	}
}
