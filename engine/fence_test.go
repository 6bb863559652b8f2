package engine

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
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
	liveTransforms(t, e, `TRANSFORM t1 FROM s SELECT a * 2 AS a2`, `TRANSFORM t2 FROM s SELECT a + 1 AS a1`)
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
	if err := inFlight.QueryRow(ctx, "SELECT cardinality("+e.w.TryFencesSQL("ARRAY[$1::bigint]", false)+") = 1", id).Scan(&got); err != nil || !got {
		t.Fatalf("fence not taken shared: %v %v", got, err)
	}
	paused := make(chan error, 1)
	go func() {
		_, err := e.Apply(context.Background(), pool, mustParse(t, `PAUSE TRANSFORM t1`), ApplyOptions{})
		paused <- err
	}()
	if returned, err := awaitBeforeReturn(t, "PAUSE to wait for the fence", paused, func() bool {
		return rows(`SELECT 1 FROM pg_locks WHERE locktype = 'relation' AND NOT granted AND mode = 'ExclusiveLock'
			AND relation = to_regclass(format('%I.%I', $1::text, 'd' || $2::bigint))`, e.w.FenceSchema(), id) > 0
	}); returned {
		t.Fatalf("PAUSE returned while a page held the fence: %v", err)
	}
	exec(t, pool, `UPDATE s SET a = a + 1000 WHERE id <= 40`)
	deadline := time.Now().Add(30 * time.Second)
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
	cfg.BuildStepBudget = time.Hour // steps bounded by keys alone here
	e, _ := startPlanted(t, pool, cfg, func(e *Engine) {
		e.w.Plant.PlanStepRows = 300 // three chunks a step
	})
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
		if _, err := e.w.BuildStep(ctx, "test"); err != nil {
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
	buildAll(t, e, nil)
	awaitLive(t, e, "v")
	assertSame(t, pool, `SELECT id, a2 FROM v`, `SELECT id, a * 2 FROM s`)
}

// Build steps stop after their budget and go on from the cursor they
// committed, so a lifecycle statement waits for one short step, never a
// whole chunk: with a budget that every slice exceeds, each step of a
// rebuild's locked-path chunks and sweep re-derives one slice, a chunk stays
// open with its cursor and rows done so far between steps, and both builds
// end exact (the sweep's steps delete what the source lost while paused). A
// fresh build's chunks are never cut: a lifecycle statement cancels them.
// The locked path is what aggregate rebuilds and failed set-based chunks
// take; a 1-1 rebuild's chunks are set-based and its sweep re-derives only
// the keys the source lost, so the same rebuild then takes a few steps,
// its chunks whole.
func TestRebuildStepsStopAtTheirBudget(t *testing.T) {
	for _, locked := range []bool{true, false} {
		t.Run(map[bool]string{true: "locked", false: "set-based"}[locked], func(t *testing.T) { rebuildSteps(t, locked) })
	}
}

func rebuildSteps(t *testing.T, locked bool) {
	pool := testDB(t)
	ctx := context.Background()
	exec(t, pool, `CREATE TABLE s (id int PRIMARY KEY, a int)`)
	exec(t, pool, `INSERT INTO s SELECT g, g FROM generate_series(1, 400) g`)
	cfg := fastConfig()
	cfg.DrainWorkers = -1 // this test runs the build steps itself
	cfg.BuildChunkSize, cfg.FreshChunkSize = 100, 100
	cfg.BuildStepBudget = time.Nanosecond
	e, _ := startPlanted(t, pool, cfg, func(e *Engine) {
		e.w.Plant.FirstSlice = 7
		e.w.Plant.LockedRebuilds = locked
	})
	// build runs steps until the definition is live, counting them, and
	// returns the most rows an open chunk had recorded between steps.
	build := func() (steps int, openRows int64) {
		t.Helper()
		steps = stepUntilLive(t, e, pool, func() {
			var n int64
			if err := pool.QueryRow(ctx, `SELECT coalesce(max(rows_done), 0) FROM trellis._build_tasks
				WHERE kind = 'chunk' AND state = 'open' AND lo IS NOT NULL`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			openRows = max(openRows, n)
		})
		return steps, openRows
	}
	if _, err := applyText(t, e, `TRANSFORM v FROM s SELECT a * 2 AS a2`); err != nil {
		t.Fatal(err)
	}
	// A fresh build's chunks run whole whatever the budget: no chunk is
	// left open with part of its rows between steps.
	if steps, openRows := build(); openRows != 0 {
		t.Fatalf("fresh build (%d steps) left a chunk open with %d of its rows written", steps, openRows)
	}
	assertSame(t, pool, `SELECT id, a2 FROM v`, `SELECT id, a * 2 FROM s`)
	if _, err := applyText(t, e, `PAUSE TRANSFORM v`); err != nil {
		t.Fatal(err)
	}
	exec(t, pool, `UPDATE s SET a = a + 1000 WHERE id % 3 = 0`)
	exec(t, pool, `DELETE FROM s WHERE id % 10 = 0`)
	exec(t, pool, `INSERT INTO s SELECT g, g FROM generate_series(401, 450) g`)
	if _, err := applyText(t, e, `RESUME TRANSFORM v`); err != nil {
		t.Fatal(err)
	}
	steps, openRows := build()
	t.Logf("rebuild: %d steps, an open chunk held %d rows between steps", steps, openRows)
	if locked {
		// The sweep walks the 400 target keys 7 at a time (58 steps), the
		// plan takes one, and the 410 source rows' chunks 7 keys a step
		// (at least 59 steps).
		if steps < 58+1+59 {
			t.Fatalf("the rebuild took %d steps; budgeted steps of 7 keys take at least %d", steps, 58+1+59)
		}
		if openRows == 0 || openRows%7 != 0 {
			t.Fatalf("an open chunk recorded %d rows between steps, want a positive multiple of the 7-key slice", openRows)
		}
	} else {
		// The sweep takes a step for the (empty) ledger, two for each 100
		// target keys walked (10 deleted keys in each: a slice of 7, then
		// 3) and one to find the end; the plan at most two, and each of at
		// most 6 chunks one.
		if bound := 1 + 8 + 1 + 2 + 6; steps > bound {
			t.Fatalf("the rebuild took %d steps; a sweep of the deleted keys and whole chunks take at most %d", steps, bound)
		}
		if openRows != 0 {
			t.Fatalf("a set-based rebuild chunk was left open with %d of its rows", openRows)
		}
	}
	assertSame(t, pool, `SELECT id, a2 FROM v`, `SELECT id, a * 2 FROM s`)
}

// A lifecycle statement cancels a build step of its definition in flight
// instead of waiting for it (engine/worker/fence.go, the build mark): PAUSE returns while
// the step is still stuck in a statement (here behind a lock the test
// holds on the ledger), the step fails with 57014 uncharged, and the
// build, resumed, ends exact.
func TestLifecycleStatementCancelsBuildStepInFlight(t *testing.T) {
	pool := testDB(t)
	ctx := context.Background()
	exec(t, pool, `CREATE TABLE s (id int PRIMARY KEY, a int)`)
	exec(t, pool, `INSERT INTO s SELECT g, g FROM generate_series(1, 2000) g`)
	cfg := fastConfig()
	cfg.DrainWorkers = -1 // the test runs the build steps itself
	cfg.PageLockTimeout = 10 * time.Minute
	e, _ := startEngine(t, pool, cfg)
	if _, err := applyText(t, e, `TRANSFORM t FROM s SELECT a * 2 AS a2`); err != nil {
		t.Fatal(err)
	}
	// Run the plan, so that the next step is a chunk.
	waitFor(t, "a planned chunk", 30*time.Second, func() bool {
		if _, err := e.w.BuildStep(ctx, "test"); err != nil {
			t.Fatal(err)
		}
		return count(t, pool, `SELECT 1 FROM trellis._build_tasks WHERE kind = 'chunk' AND state = 'open'`) > 0
	})
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	exec(t, holder, `LOCK TABLE t__ledger IN ROW EXCLUSIVE MODE`)
	stepped := make(chan error, 1)
	go func() {
		_, err := e.w.BuildStep(context.Background(), "test")
		stepped <- err
	}()
	// The chunk waits for the ledger lock, holding the fence and the mark.
	if returned, err := awaitBeforeReturn(t, "the chunk to wait for the ledger lock", stepped, func() bool {
		return count(t, pool, `SELECT 1 FROM pg_locks WHERE relation = 't__ledger'::regclass AND NOT granted`) > 0
	}); returned {
		t.Fatalf("the chunk did not wait for the ledger: %v", err)
	}
	paused := make(chan error, 1)
	go func() {
		_, err := e.Apply(context.Background(), pool, mustParse(t, `PAUSE TRANSFORM t`), ApplyOptions{})
		paused <- err
	}()
	select {
	case err := <-paused:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("PAUSE waited for the build step instead of cancelling it")
	}
	select {
	case err := <-stepped:
		if base.Code(err) != "57014" || !base.Transient(err) {
			t.Fatalf("the cancelled step returned %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the build step was not cancelled")
	}
	if n := count(t, pool, `SELECT 1 FROM trellis._build_tasks WHERE attempts > 0`); n != 0 {
		t.Fatalf("%d build tasks charged for a cancel", n)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := storedStatus(t, e, "t"); st != "paused" {
		t.Fatalf("t is %s after PAUSE", st)
	}
	if _, err := applyText(t, e, `RESUME TRANSFORM t`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "t to go live after RESUME", 60*time.Second, func() bool {
		if st, _, _ := storedStatus(t, e, "t"); st == "live" {
			return true
		}
		if _, err := e.w.BuildStep(ctx, "test"); err != nil && !base.Transient(err) {
			t.Fatal(err)
		}
		return false
	})
	assertSame(t, pool, `SELECT id, a2 FROM t`, `SELECT id, a * 2 FROM s`)
}
