package engine

import (
	"context"
	"slices"
	"testing"
	"time"
)

// A lifecycle statement waiting for a definition's fence is not overtaken:
// while PAUSE waits for a page still in flight (here a transaction holding
// the fence shared, as a page does), new pages refuse the fence and defer
// the transform's keys instead of taking its row lock ahead of PAUSE, the
// other transform reading the same source keeps converging, and PAUSE
// returns as soon as the in-flight holder ends.
func TestLifecycleStatementWaitsOnlyForPagesInFlight(t *testing.T) {
	pool := testDB(t)
	ctx := context.Background()
	exec(t, pool, `CREATE TABLE s (id int PRIMARY KEY, a int)`)
	exec(t, pool, `INSERT INTO s SELECT g, g FROM generate_series(1, 100) g`)
	e, _ := startEngine(t, pool, fastConfig())
	for _, s := range []string{`TRANSFORM t1 FROM s SELECT a * 2 AS a2`, `TRANSFORM t2 FROM s SELECT a + 1 AS a1`} {
		if _, err := applyText(t, e, s); err != nil {
			t.Fatal(err)
		}
	}
	awaitLive(t, e, "t1")
	awaitLive(t, e, "t2")
	var id int64
	if err := pool.QueryRow(ctx, `SELECT id FROM trellis._definitions WHERE target_table = 'public.t1'`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	rows := func(q string, args ...any) int64 {
		t.Helper()
		var n int64
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM ("+q+") x", args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	deferred := func() int64 { return rows(`SELECT 1 FROM trellis._deferred WHERE definition_id = $1`, id) }
	inFlight, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer inFlight.Rollback(ctx)
	var got bool
	if err := inFlight.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock_shared($1, "+fenceObject("$2::bigint")+")", e.fenceClass(), id).Scan(&got); err != nil || !got {
		t.Fatalf("fence not taken shared: %v %v", got, err)
	}
	paused := make(chan error, 1)
	go func() {
		_, err := e.Apply(context.Background(), pool, mustParse(t, `PAUSE TRANSFORM t1`), ApplyOptions{})
		paused <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for rows(`SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND mode = 'ExclusiveLock'
		AND classid = ($1::int4)::oid AND objid = $2::oid AND objsubid = 2`, e.fenceClass(), id&0x7fffffff) == 0 {
		select {
		case err := <-paused:
			t.Fatalf("PAUSE returned while a page held the fence: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("PAUSE never waited for the fence")
		}
		time.Sleep(10 * time.Millisecond)
	}
	exec(t, pool, `UPDATE s SET a = a + 1000 WHERE id <= 40`)
	deadline = time.Now().Add(30 * time.Second)
	for diff(t, pool, `SELECT id, a1 FROM t2`, `SELECT id, a + 1 FROM s`) != "" ||
		deferred() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("pages did not go on around the waiting PAUSE: deferred %d\n%s",
				deferred(),
				diff(t, pool, `SELECT id, a1 FROM t2`, `SELECT id, a + 1 FROM s`))
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case err := <-paused:
		t.Fatalf("PAUSE returned while a page held the fence: %v", err)
	default:
	}
	if err := inFlight.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-paused:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("PAUSE still waiting after the in-flight holder ended")
	}
	if st, _, _ := storedStatus(t, e, "t1"); st != "paused" {
		t.Fatalf("t1 is %s after PAUSE", st)
	}
	if _, err := applyText(t, e, `RESUME TRANSFORM t1`); err != nil {
		t.Fatal(err)
	}
	awaitLive(t, e, "t1")
	converge(t, e)
	assertSame(t, pool, `SELECT id, a2 FROM t1`, `SELECT id, a * 2 FROM s`)
	assertSame(t, pool, `SELECT id, a1 FROM t2`, `SELECT id, a + 1 FROM s`)
}

// A build's plan walks the source key in steps of a bounded number of
// chunks, one transaction each, resuming from the cursor the last step
// committed: the chunks it records are contiguous, cover every row once,
// and the build that runs them is exact.
func TestBuildPlanWalksInSteps(t *testing.T) {
	pool := testDB(t)
	ctx := context.Background()
	exec(t, pool, `CREATE TABLE s (id int PRIMARY KEY, a int)`)
	exec(t, pool, `INSERT INTO s SELECT g, g FROM generate_series(1, 1050) g`)
	cfg := fastConfig()
	cfg.DrainWorkers = -1 // this test runs the build steps itself
	cfg.BuildChunkSize, cfg.FreshChunkSize = 100, 100
	e := New(pool, cfg)
	e.plant.planStepRows = 300 // three chunks a step
	if err := e.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.Run(rctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		e.Close()
	}()
	if _, err := applyText(t, e, `TRANSFORM v FROM s SELECT a * 2 AS a2`); err != nil {
		t.Fatal(err)
	}
	planOpen := func() (open bool, chunks int64) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM trellis._build_tasks WHERE kind = 'plan' AND state = 'open'),
			(SELECT count(*) FROM trellis._build_tasks WHERE kind = 'chunk')`).Scan(&open, &chunks); err != nil {
			t.Fatal(err)
		}
		return open, chunks
	}
	deadline := time.Now().Add(30 * time.Second)
	for open, _ := planOpen(); !open; open, _ = planOpen() {
		if time.Now().After(deadline) {
			t.Fatal("the build never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	var seen []int64
	for open, chunks := planOpen(); open; open, chunks = planOpen() {
		seen = append(seen, chunks)
		if _, err := e.buildStep(ctx, "test"); err != nil {
			t.Fatal(err)
		}
	}
	// 1050 rows, 100 a chunk, 3 chunks a step: 0, 3, 6, 9 chunks before
	// each step; the fourth step records the rest (10 and 11, the last
	// ending at the current maximum).
	if want := []int64{0, 3, 6, 9}; !slices.Equal(seen, want) {
		t.Fatalf("chunks before each plan step %v, want %v", seen, want)
	}
	var est int64
	if err := pool.QueryRow(ctx, `SELECT coalesce(build_rows_estimated, -1) FROM trellis._definitions`).Scan(&est); err != nil || est != 1050 {
		t.Fatalf("build_rows_estimated %d (%v), want the 1050 rows the steps planned", est, err)
	}
	var gaps, covered int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE lo IS DISTINCT FROM prev), sum(n) FROM (
		SELECT lo, lag(hi) OVER (ORDER BY id) AS prev,
		  (SELECT count(*) FROM s WHERE (t.lo IS NULL OR s.id > t.lo::int) AND s.id <= t.hi::int) AS n
		FROM trellis._build_tasks t WHERE kind = 'chunk') x`).Scan(&gaps, &covered); err != nil {
		t.Fatal(err)
	}
	if gaps != 0 || covered != 1050 {
		t.Fatalf("chunks not contiguous (%d gaps) or covering %d rows, not 1050", gaps, covered)
	}
	for {
		did, err := e.buildStep(ctx, "test")
		if err != nil {
			t.Fatal(err)
		}
		if !did {
			break
		}
	}
	awaitLive(t, e, "v")
	assertSame(t, pool, `SELECT id, a2 FROM v`, `SELECT id, a * 2 FROM s`)
}
