package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// H7: in READ COMMITTED, pg_current_snapshot() is the statement's own
// snapshot, so the seal's window and stored snapshot agree.
func TestCurrentSnapshotIsStatementSnapshot(t *testing.T) {
	pool := testDB(t)
	ctx := context.Background()
	exec(t, pool, `CREATE TABLE h7 (txid xid8)`)
	a, _ := pool.Begin(ctx)
	var xid string
	if err := a.QueryRow(ctx, `INSERT INTO h7 VALUES (pg_current_xact_id()) RETURNING txid::text`).Scan(&xid); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		a.Commit(ctx)
	}()
	var s1, s2 string
	var c, cv int
	var visible bool
	err := pool.QueryRow(ctx, `SELECT pg_current_snapshot()::text s1, pg_sleep(1),
		(SELECT count(*) FROM h7) c,
		(SELECT count(*) FROM h7 WHERE pg_visible_in_snapshot(txid, pg_current_snapshot())) cv,
		pg_current_snapshot()::text s2,
		pg_visible_in_snapshot($1::xid8, pg_current_snapshot())`, xid).Scan(&s1, nil, &c, &cv, &s2, &visible)
	if err != nil {
		t.Fatal(err)
	}
	if s1 != s2 || c != cv || visible || c != 0 {
		t.Fatalf("s1=%s s2=%s c=%d cv=%d visible=%v", s1, s2, c, cv, visible)
	}
}

// H6: the ledger lock really holds the entries while the page's transaction is open.
func TestEntryLockHolds(t *testing.T) {
	pool := testDB(t)
	ctx := context.Background()
	exec(t, pool, `CREATE TABLE h6 (id int PRIMARY KEY, g int, v int)`)
	exec(t, pool, `INSERT INTO h6 VALUES (1, 1, 1), (2, 1, 2)`)
	e, _ := startEngine(t, pool, fastConfig())
	d := define(t, e, Spec{Target: TableName{Name: "h6g"}, Source: TableName{Name: "h6"},
		GroupBy: []GroupKey{{Name: "g", Expr: col("g")}}, Fields: []Field{{Name: "s", Agg: AggSum, Expr: col("v")}}})
	awaitLive(t, e, "h6g")
	var raw []byte
	var version int64
	pool.QueryRow(ctx, `SELECT compiled, version FROM trellis._definitions WHERE id = $1`, d.ID).Scan(&raw, &version)
	cd, err := e.w.CompiledFor(d.ID, version, raw)
	if err != nil {
		t.Fatal(err)
	}
	tx, _ := e.w.Workers.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	defer tx.Rollback(ctx)
	if err := e.w.ApplyKeys(ctx, tx, cd, []string{"1", "2"}); err != nil {
		t.Fatal(err)
	}
	_, err = pool.Exec(ctx, `SELECT 1 FROM "h6g__ledger" WHERE k IN ('1', '2') FOR UPDATE NOWAIT`)
	if pgerr.CodeOf(err) != pgerr.LockNotAvailable {
		t.Fatalf("entries not locked by the page: %v", err)
	}
}

// H8: eight buckets finished at once by eight transactions always drain the batch.
func TestBatchFlipIsAtomic(t *testing.T) {
	pool := testDB(t)
	ctx := context.Background()
	e := New(pool, fastConfig())
	defer e.Close()
	if err := e.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 30; round++ {
		seq := int64(round + 1)
		exec(t, pool, `INSERT INTO trellis._batches (seq, snap, row_count, bucket_count, has_truncate, state) VALUES ($1, pg_current_snapshot(), 8, 8, false, 'sealed')`, seq)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for b := 0; b < 8; b++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, err := pool.Exec(ctx, fmt.Sprintf(`UPDATE %s
					SET done_mask  = done_mask | (1::bigint << $2),
					    state      = CASE WHEN (done_mask | (1::bigint << $2)) = (1::bigint << bucket_count) - 1 THEN 'drained' ELSE state END
					WHERE seq = $1`, e.w.Tbl("_batches")), seq, b)
				if err != nil {
					t.Error(err)
				}
			}()
		}
		close(start)
		wg.Wait()
		var state string
		pool.QueryRow(ctx, `SELECT state FROM trellis._batches WHERE seq = $1`, seq).Scan(&state)
		if state != "drained" {
			t.Fatalf("round %d: batch %s", round, state)
		}
	}
}

// Migrate is idempotent and refuses schemas it must not own.
func TestMigrate(t *testing.T) {
	pool := testDB(t)
	ctx := context.Background()
	e := New(pool, Config{})
	defer e.Close()
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); _ = e.Migrate(ctx) }()
	}
	wg.Wait()
	if err := e.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []Config{{Schema: "public"}, {Schema: "x", TargetSchema: "x"}, {Schema: "public2"}} {
		if c.Schema == "public2" {
			exec(t, pool, `CREATE SCHEMA public2; CREATE TABLE public2.t (id int)`)
		}
		e2 := New(pool, c)
		err := e2.Migrate(ctx)
		e2.Close()
		if pgerr.CodeOf(err) != pgerr.ObjectNotInPrerequisiteState {
			t.Errorf("migrate %+v: %v", c, err)
		}
	}
	// The target schema of one instance cannot be another's catalog.
	e3 := New(pool, Config{Schema: "public"})
	defer e3.Close()
	if err := New(pool, Config{Schema: "other", TargetSchema: "trellis"}).Migrate(ctx); pgerr.CodeOf(err) != pgerr.ObjectNotInPrerequisiteState {
		t.Errorf("target schema = another catalog: %v", err)
	}
}

// A worker cancelled or killed mid-page leaves nothing half-done: the page
// is retried by someone else and the result is exact.
func TestKilledWorkersMidPage(t *testing.T) {
	pool := testDB(t)
	ctx := context.Background()
	exec(t, pool, `CREATE TABLE kp (id int PRIMARY KEY, g int, v int)`)
	exec(t, pool, `INSERT INTO kp SELECT x, x % 7, x FROM generate_series(1, 3000) x`)
	cfg := fastConfig()
	cfg.PageSize = 50
	cfg.BuildChunkSize = 100
	var once sync.Once
	hold := make(chan struct{})
	e1 := New(pool, cfg)
	e1.w.Plant.PageHook = func(stage string) {
		if stage == "before-commit" {
			once.Do(func() { <-hold })
		}
	}
	if err := e1.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	c1, cancel1 := context.WithCancel(ctx)
	done1 := make(chan error, 1)
	go func() { done1 <- e1.Run(c1) }()
	define(t, e1, Spec{Target: TableName{Name: "kpg"}, Source: TableName{Name: "kp"},
		GroupBy: []GroupKey{{Name: "g", Expr: col("g")}}, Fields: []Field{{Name: "s", Agg: AggSum, Expr: col("v")}, {Name: "n", Agg: AggCountStar}}})
	exec(t, pool, `UPDATE kp SET v = v + 1`)
	// Once a page of e1 sits before its commit, kill it and its engine.
	deadline := time.Now().Add(30 * time.Second)
	for count(t, pool, `SELECT 1 FROM pg_stat_activity WHERE application_name LIKE 'trellis-worker%' AND state = 'idle in transaction'`) == 0 {
		if time.Now().After(deadline) {
			// Without a page held at its commit the kill below tests nothing.
			close(hold)
			t.Fatal("no page of e1 reached its commit within 30 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	exec(t, pool, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'trellis-%'`)
	close(hold)
	cancel1()
	<-done1
	e1.Close()
	e2, _ := startEngine(t, pool, cfg)
	awaitLive(t, e2, "kpg")
	exec(t, pool, `UPDATE kp SET g = g + 1 WHERE id % 3 = 0`)
	converge(t, e2)
	assertSame(t, pool, `SELECT g, s, n FROM kpg`, `SELECT g, sum(v), count(*) FROM kp GROUP BY g`)
}

// H1: writers open across many seals, at every isolation level and inside
// savepoints, land in exactly one batch; aborted writers in none.
func TestSealWindowsExactlyOnce(t *testing.T) {
	pool := testDB(t)
	ctx := context.Background()
	exec(t, pool, `CREATE TABLE h1 (id int PRIMARY KEY, v int)`)
	e := New(pool, fastConfig())
	defer e.Close()
	if err := e.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	role := "postgres"
	e.w.SetWorkerRole(role)
	conn, err := pgx.ConnectConfig(ctx, e.w.Workers.Config().ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if ok, err := e.w.Cap.InstallCapture(ctx, conn, e.w.Inst().NewCapturePlan("public.h1", []keyCol{{Name: "id", Type: "integer", FullType: "integer"}}, false)); !ok || err != nil {
		t.Fatalf("install: %v %v", ok, err)
	}
	levels := []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable, pgx.ReadCommitted, pgx.RepeatableRead}
	var txs []pgx.Tx
	id := 0
	for i, lvl := range levels {
		tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: lvl})
		if err != nil {
			t.Fatal(err)
		}
		if i == 3 {
			exec(t, tx, `SAVEPOINT s`)
		}
		id++
		exec(t, tx, `INSERT INTO h1 VALUES ($1, $1)`, id)
		if i == 3 {
			exec(t, tx, `RELEASE SAVEPOINT s`)
			exec(t, tx, `SAVEPOINT s2`)
			id++
			exec(t, tx, `INSERT INTO h1 VALUES ($1, $1)`, id) // rolled back below
			exec(t, tx, `ROLLBACK TO SAVEPOINT s2`)
		}
		txs = append(txs, tx)
	}
	for k := 0; k < 12; k++ {
		id++
		exec(t, pool, `INSERT INTO h1 VALUES ($1, $1)`, id) // committed at once
		if _, err := e.w.Seal(ctx, conn); err != nil {
			t.Fatal(err)
		}
		// Stand in for the drains: the stager seals only while fewer than two batches wait.
		exec(t, pool, `UPDATE trellis._batches SET state = 'drained'`)
		if k < len(txs) {
			if k == 2 {
				txs[k].Rollback(ctx) // aborted writer
			} else if err := txs[k].Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := e.w.Seal(ctx, conn); err != nil {
		t.Fatal(err)
	}
	// Every visible log row is in exactly one batch window.
	var bad, rows, inBatches int64
	err = pool.QueryRow(ctx, `
		WITH w AS (SELECT c.change_id, count(b.seq) n FROM trellis._change_log c
		  LEFT JOIN trellis._batches b ON b.seq > 0 AND pg_visible_in_snapshot(c.txid, b.snap)
		    AND NOT pg_visible_in_snapshot(c.txid, (SELECT p.snap FROM trellis._batches p WHERE p.seq = b.seq - 1))
		  GROUP BY c.change_id)
		SELECT count(*) FILTER (WHERE n <> 1), count(*), (SELECT coalesce(sum(row_count), 0) FROM trellis._batches) FROM w`).Scan(&bad, &rows, &inBatches)
	if err != nil {
		t.Fatal(err)
	}
	if bad != 0 || rows != inBatches || rows != count(t, pool, `SELECT * FROM h1`) {
		t.Fatalf("%d of %d log rows not in exactly one batch; batches count %d; table has %d rows", bad, rows, inBatches, count(t, pool, `SELECT * FROM h1`))
	}
}
