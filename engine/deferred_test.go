package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/trellis-proxy/trellis-proxy/engine/drain"
	"github.com/trellis-proxy/trellis-proxy/engine/staging"
)

// A client transaction that paused (or paused and dropped) one transform
// and stays open stalls only that transform (§12.8 "Locks held by a
// client transaction"): pages skip its definition row instead of waiting
// on it, defer its keys (tokens stay pending), and the other transforms
// reading the same source keep converging. When the transaction rolls back
// the deferred keys (and a truncate, by a rebuild) are applied; when it
// commits, the pause's rebuild or the drop covers them.
func TestOpenClientTransactionStallsOnlyItsTransform(t *testing.T) {
	pool := testDB(t)
	ctx := context.Background()
	exec(t, pool, `CREATE TABLE s (id int PRIMARY KEY, a int, b int)`)
	exec(t, pool, `INSERT INTO s SELECT g, g, g % 5 FROM generate_series(1, 200) g`)
	cfg := fastConfig()
	cfg.PageLockTimeout = 500 * time.Millisecond // a page that waited on the lock would fail fast and retry, never apply
	e, _ := startEngine(t, pool, cfg)
	for _, s := range []string{
		`TRANSFORM t1 FROM s SELECT a * 2 AS a2`,
		`TRANSFORM t2 FROM s SELECT b + 1 AS b1`,
		`TRANSFORM t3 FROM s GROUP BY b SELECT b AS b, COUNT(*) AS n, SUM(a) AS sa`,
	} {
		if _, err := applyText(t, e, s); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"t1", "t2", "t3"} {
		awaitLive(t, e, n)
	}
	t1 := [2]string{`SELECT id, a2 FROM t1`, `SELECT id, a * 2 FROM s`}
	others := [][2]string{
		{`SELECT id, b1 FROM t2`, `SELECT id, b + 1 FROM s`},
		{`SELECT b, n, sa FROM t3`, `SELECT b, count(*), sum(a) FROM s GROUP BY b`},
	}
	// othersConverge waits until t2 and t3 equal their recompute while the
	// client's transaction stays open.
	othersConverge := func(step string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			ok := true
			for _, q := range others {
				if diff(t, pool, q[0], q[1]) != "" {
					ok = false
				}
			}
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the other transforms stalled behind the open transaction:\n%s\n%s", step,
					diff(t, pool, others[0][0], others[0][1]), diff(t, pool, others[1][0], others[1][1]))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	deferred := func() int64 { return count(t, pool, `SELECT 1 FROM trellis._deferred`) }
	holding := func(texts ...string) func(commit bool) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tx.Rollback(ctx) })
		for _, text := range texts {
			if _, err := e.Apply(ctx, tx, mustParse(t, text), ApplyOptions{InTransactionBlock: true}); err != nil {
				tx.Rollback(ctx)
				t.Fatalf("%s: %v", text, err)
			}
		}
		return func(commit bool) {
			if commit {
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				return
			}
			tx.Rollback(ctx)
		}
	}

	// 1. PAUSE held open, then rolled back: t1 catches up from its deferred keys.
	end := holding(`PAUSE TRANSFORM t1`)
	exec(t, pool, `UPDATE s SET a = a + 100, b = (b + 1) % 5 WHERE id % 3 = 0`)
	exec(t, pool, `DELETE FROM s WHERE id % 7 = 0`)
	exec(t, pool, `INSERT INTO s SELECT g, g, g % 5 FROM generate_series(300, 340) g`)
	othersConverge("pause held open")
	if deferred() == 0 {
		t.Fatal("no key deferred for the locked transform")
	}
	tok, err := e.WatermarkToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := e.Converged(ctx, tok); err != nil || ok {
		t.Fatalf("a token converged while the locked transform's keys wait (ok=%v err=%v)", ok, err)
	}
	end(false)
	converge(t, e)
	assertSame(t, pool, t1[0], t1[1])
	if n := deferred(); n != 0 {
		t.Fatalf("%d deferred keys left after the transaction ended", n)
	}

	// 2. A truncate met while PAUSE is held open, rolled back: t1 is rebuilt.
	end = holding(`PAUSE TRANSFORM t1`)
	exec(t, pool, `TRUNCATE s`)
	exec(t, pool, `INSERT INTO s SELECT g, g * 3, g % 4 FROM generate_series(1, 150) g`)
	othersConverge("truncate under a held pause")
	end(false)
	deadline := time.Now().Add(30 * time.Second)
	for {
		converge(t, e)
		st, _, _ := storedStatus(t, e, "t1")
		if st == "live" && diff(t, pool, t1[0], t1[1]) == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("t1 not rebuilt after the truncate it missed: %s\n%s", st, diff(t, pool, t1[0], t1[1]))
		}
		time.Sleep(50 * time.Millisecond)
	}

	// 3. PAUSE held open, then committed: RESUME rebuilds what it missed.
	end = holding(`PAUSE TRANSFORM t1`)
	exec(t, pool, `UPDATE s SET a = a - 1 WHERE id % 2 = 0`)
	othersConverge("pause held open, committed")
	end(true)
	if _, err := applyText(t, e, `RESUME TRANSFORM t1`); err != nil {
		t.Fatal(err)
	}
	awaitLive(t, e, "t1")
	converge(t, e)
	assertSame(t, pool, t1[0], t1[1])

	// 4. PAUSE and DROP held open, then committed: nothing of t1 is left waiting.
	end = holding(`PAUSE TRANSFORM t1`, `DROP TRANSFORM t1`)
	exec(t, pool, `UPDATE s SET b = (b + 2) % 5 WHERE id % 4 = 1`)
	othersConverge("drop held open")
	end(true)
	converge(t, e)
	if n := deferred(); n != 0 {
		t.Fatalf("%d deferred keys left after the drop", n)
	}
	for _, q := range others {
		assertSame(t, pool, q[0], q[1])
	}
}

// The staging worker's pause of transforms whose shares kept failing locks
// only those definitions' rows: a page running beside it must find every
// other definition free, or it defers their keys (the stall of
// TestIsoStallRule: the victim's keys deferred behind mallory's failure).
func TestPausingFailedSharesLocksOnlyThem(t *testing.T) {
	pool := testDB(t)
	ctx := context.Background()
	exec(t, pool, `CREATE TABLE s (id int PRIMARY KEY, a int)`)
	exec(t, pool, `INSERT INTO s SELECT g, g FROM generate_series(1, 10) g`)
	e, stop := startEngine(t, pool, fastConfig())
	liveTransforms(t, e, `TRANSFORM t1 FROM s SELECT a * 2 AS a2`, `TRANSFORM t2 FROM s SELECT a + 1 AS a1`)
	stop()
	var failing, healthy int64
	if err := pool.QueryRow(ctx, `SELECT (SELECT id FROM trellis._definitions WHERE target_table = 'public.t1'),
		(SELECT id FROM trellis._definitions WHERE target_table = 'public.t2')`).Scan(&failing, &healthy); err != nil {
		t.Fatal(err)
	}
	exec(t, pool, `INSERT INTO trellis._page_failures (definition_id, attempts, error, next_attempt_at, table_name)
		VALUES ($1, $2, 'boom', now(), 'public.s')`, failing, drain.PageFailuresToPause)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := e.w.PauseFailing(ctx, tx); err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM trellis._definitions WHERE id = $1 FOR SHARE NOWAIT) x`,
		healthy).Scan(&n); err != nil || n != 1 {
		t.Fatalf("a page's share lock on the healthy transform beside the pause: %d %v", n, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := storedStatus(t, e, "t1"); st != "paused" {
		t.Fatalf("the failing transform is %s, want paused", st)
	}
	if st, _, _ := storedStatus(t, e, "t2"); st != "live" {
		t.Fatalf("the healthy transform is %s, want live", st)
	}
}

// A staging pass that stages deferred keys again is not steady, and the
// pass fingerprint tells deferred keys apart from earlier ones of the same
// count: otherwise a page deferring as many keys as the pass just moved
// leaves them deferred until the next forced full pass (30 s).
func TestDeferredKeysStagedAgainAfterAnyDeferral(t *testing.T) {
	pool := testDB(t)
	ctx := context.Background()
	exec(t, pool, `CREATE TABLE s (id int PRIMARY KEY, a int)`)
	exec(t, pool, `INSERT INTO s SELECT g, g FROM generate_series(1, 10) g`)
	e, stop := startEngine(t, pool, fastConfig())
	liveTransforms(t, e, `TRANSFORM t1 FROM s SELECT a * 2 AS a2`)
	converge(t, e)
	stop()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	fingerprint := func() string {
		var fp string
		var drained int64
		if err := conn.QueryRow(ctx, fmt.Sprintf(staging.PassFingerprintSQL, e.w.Tbl("_definition_reads"), e.w.Tbl("_captured_tables"),
			e.w.Tbl("_definitions"), e.w.Tbl("_paused_columns"), e.w.Tbl("_batches"), e.w.Tbl("_deferred"))).Scan(&fp, &drained); err != nil {
			t.Fatal(err)
		}
		return fp
	}
	deferKey := `INSERT INTO trellis._deferred (definition_id, src_table, key)
		SELECT id, 'public.s', '3' FROM trellis._definitions WHERE target_table = 'public.t1'`
	exec(t, pool, deferKey)
	before := fingerprint()
	steady, err := e.w.FullPass(ctx, conn.Conn())
	if err != nil {
		t.Fatal(err)
	}
	if steady {
		t.Fatal("a pass that staged deferred keys again called itself steady")
	}
	if n := count(t, pool, `SELECT 1 FROM trellis._deferred`); n != 0 {
		t.Fatalf("%d deferred keys left for a live, unlocked transform", n)
	}
	exec(t, pool, deferKey)
	if fingerprint() == before {
		t.Fatal("the pass fingerprint does not tell a new deferral from the one the last pass staged")
	}
}
