package engine

import (
	"context"
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
