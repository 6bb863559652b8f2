package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// A fresh aggregate build's chunks write ledger entries only and its last
// task writes every group once from the ledger. Pages that run between the
// chunks and that last task (a key of an already built group changed, a
// key of a range not built yet written first by a page, a whole group
// deleted) leave partial rows in the target; the groups task must replace
// them with the ledger's totals and drop the emptied group, and only then
// may the transform go live. The test runs the build tasks and the pages
// itself, in that order.
func TestFreshAggregateBuildGroupsStepSupersedesPages(t *testing.T) {
	pool := testDB(t)
	ctx := context.Background()
	exec(t, pool, `CREATE TABLE s (id int PRIMARY KEY, g int, v int)`)
	// Group 99 lives only in the first chunk's range (ids 1..5).
	exec(t, pool, `INSERT INTO s SELECT x, CASE WHEN x <= 5 THEN 99 ELSE x % 10 END, x FROM generate_series(1, 1000) x`)
	exec(t, pool, `ANALYZE s`)
	cfg := fastConfig()
	cfg.DrainWorkers = -1 // this test runs build steps and pages itself
	cfg.BuildChunkSize, cfg.FreshChunkSize = 50, 50
	cfg.BuildStepBudget = time.Hour // whole steps: the test counts them
	e, _ := startEngine(t, pool, cfg)
	if _, err := applyText(t, e, `TRANSFORM agg FROM s GROUP BY g SELECT g AS g, SUM(v) AS total, COUNT(*) AS n, MAX(v) AS top`); err != nil {
		t.Fatal(err)
	}
	tasks := func() (plan, chunks, groups string) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT
			coalesce((SELECT string_agg(state, ',') FROM trellis._build_tasks WHERE kind = 'plan'), ''),
			coalesce((SELECT string_agg(state, ',' ORDER BY id) FROM trellis._build_tasks WHERE kind = 'chunk'), ''),
			coalesce((SELECT string_agg(state, ',') FROM trellis._build_tasks WHERE kind = 'groups'), '')`).Scan(&plan, &chunks, &groups); err != nil {
			t.Fatal(err)
		}
		return
	}
	step := func() {
		t.Helper()
		did, err := e.buildStep(ctx, "test")
		if err != nil || !did {
			t.Fatalf("build step: did %v, err %v", did, err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for p, _, _ := tasks(); p != "open"; p, _, _ = tasks() {
		if time.Now().After(deadline) {
			t.Fatal("the build never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The plan (1000 rows in chunks of 4 x 50) and the first chunk's steps
	// (each cut to the step budget) until group 99's keys are built.
	for count(t, pool, `SELECT 1 FROM agg__ledger WHERE k IN ('1','2','3','4','5')`) < 5 {
		step()
	}
	if _, _, g := tasks(); g != "open" {
		t.Fatalf("groups task %q after the first chunk's step", g)
	}
	if n := count(t, pool, `SELECT 1 FROM agg__ledger WHERE k = '900'`); n != 0 {
		t.Fatal("the range of key 900 was built before the pages ran")
	}
	if n := count(t, pool, `SELECT 1 FROM agg`); n != 0 {
		t.Fatalf("a chunk wrote %d group rows; chunks write ledger entries only", n)
	}

	// Pages before the groups step: a key of a built range moves group,
	// a key of an unbuilt range gets its entry from a page first, a new key
	// arrives, and group 99 loses every member.
	exec(t, pool, `UPDATE s SET g = 7, v = v + 1000 WHERE id = 10`)
	exec(t, pool, `UPDATE s SET v = v + 5000 WHERE id = 900`)
	exec(t, pool, `INSERT INTO s VALUES (5000, 3, 5000)`)
	exec(t, pool, `DELETE FROM s WHERE g = 99`)
	applied := func() bool {
		return count(t, pool, `SELECT 1 FROM agg__ledger WHERE k IN ('1','2','3','4','5') AND member`) == 0 &&
			count(t, pool, `SELECT 1 FROM agg__ledger WHERE k = '10' AND g0 = 7`) == 1 &&
			count(t, pool, `SELECT 1 FROM agg__ledger WHERE k IN ('900', '5000')`) == 2
	}
	deadline = time.Now().Add(30 * time.Second)
	for !applied() {
		if time.Now().After(deadline) {
			t.Fatal("the pages never applied the writes")
		}
		if _, err := e.drainPage(ctx, "test"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// What the pages left is partial (group 99 at -5 members), and nobody
	// reads it as built: the transform is still backfilling.
	if n := count(t, pool, `SELECT 1 FROM agg WHERE g = 99 AND "__members" < 0`); n != 1 {
		t.Fatalf("expected the pages' partial row of group 99 before the groups step, found %d", n)
	}
	if st, _, _ := storedStatus(t, e, "agg"); st != "backfilling" {
		t.Fatalf("agg is %s before its groups step", st)
	}

	// The rest of the chunks first (the groups task waits for them), then
	// the groups task, whose commit lets the build go live.
	for {
		p, c, g := tasks()
		if p == "done" && !strings.Contains(c, "open") {
			break
		}
		if g != "open" {
			t.Fatalf("groups task %q while the plan (%q) or chunks (%q) remain", g, p, c)
		}
		if st, _, _ := storedStatus(t, e, "agg"); st != "backfilling" {
			t.Fatalf("agg is %s with its groups step still open", st)
		}
		step()
	}
	if st, _, _ := storedStatus(t, e, "agg"); st != "backfilling" {
		t.Fatalf("agg is %s with its groups step still open", st)
	}
	step()
	if st, _, _ := storedStatus(t, e, "agg"); st != "live" {
		t.Fatalf("agg is %s after its groups step", st)
	}
	want := `SELECT g, sum(v), count(*), max(v) FROM s GROUP BY g`
	assertSame(t, pool, `SELECT g, total, n, top FROM agg`, want)
	assertSame(t, pool, `SELECT g, "__members" FROM agg`, `SELECT g, count(*) FROM s GROUP BY g`)

	// Live from here: pages keep it exact on top of the groups step.
	exec(t, pool, `UPDATE s SET v = v + 1 WHERE id % 7 = 0`)
	exec(t, pool, `DELETE FROM s WHERE g = 3`)
	deadline = time.Now().Add(30 * time.Second)
	for diff(t, pool, `SELECT g, total, n, top FROM agg`, want) != "" {
		if time.Now().After(deadline) {
			t.Fatalf("not exact after live writes:\n%s", diff(t, pool, `SELECT g, total, n, top FROM agg`, want))
		}
		if _, err := e.drainPage(ctx, "test"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A fresh aggregate build interrupted after a chunk wrote its ledger
// entries (here by request_backfill) leaves members no group row counts
// yet. The rebuild that follows re-derives keys against those entries, so
// it adds nothing for them: its own groups step must reconcile the target
// with the ledger, or the first chunk's rows would be missing for good.
func TestInterruptedFreshAggregateBuildIsReconciled(t *testing.T) {
	pool := testDB(t)
	ctx := context.Background()
	exec(t, pool, `CREATE TABLE s (id int PRIMARY KEY, g int, v int)`)
	exec(t, pool, `INSERT INTO s SELECT x, x % 10, x FROM generate_series(1, 1000) x`)
	exec(t, pool, `ANALYZE s`)
	cfg := fastConfig()
	cfg.DrainWorkers = -1 // this test runs build steps and pages itself
	cfg.BuildChunkSize, cfg.FreshChunkSize = 50, 50
	e, _ := startEngine(t, pool, cfg)
	if _, err := applyText(t, e, `TRANSFORM agg FROM s GROUP BY g SELECT g AS g, SUM(v) AS total, COUNT(*) AS n, MIN(v) AS low`); err != nil {
		t.Fatal(err)
	}
	buildOf := func() (id int64) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT coalesce((SELECT build_id FROM trellis._definitions WHERE status = 'backfilling'), 0)`).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	await := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal(what)
			}
		}
	}
	await("the build never started", func() bool { return buildOf() != 0 })
	first := buildOf()
	// The plan's steps, then the first chunk step's entries.
	for count(t, pool, `SELECT 1 FROM agg__ledger`) == 0 {
		if did, err := e.buildStep(ctx, "test"); err != nil || !did {
			t.Fatalf("build step: %v %v", did, err)
		}
	}
	if st, _, _ := storedStatus(t, e, "agg"); st != "backfilling" {
		t.Fatalf("agg is %s after one chunk step", st)
	}
	var queued []string
	if err := pool.QueryRow(ctx, `SELECT trellis._request_backfill(current_user::regrole, to_regclass('s')::oid, 's', NULL)`).Scan(&queued); err != nil || len(queued) != 1 {
		t.Fatalf("request_backfill: %v %v", queued, err)
	}
	await("the rebuild never started", func() bool { b := buildOf(); return b != 0 && b != first })
	if n := count(t, pool, fmt.Sprintf(`SELECT 1 FROM trellis._build_tasks WHERE kind = 'groups' AND build_id = %d`, buildOf())); n != 1 {
		t.Fatalf("the rebuild has %d groups tasks, want 1", n)
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
	if st, _, _ := storedStatus(t, e, "agg"); st != "live" {
		t.Fatalf("agg is %s after its rebuild", st)
	}
	assertSame(t, pool, `SELECT g, total, n, low FROM agg`, `SELECT g, sum(v), count(*), min(v) FROM s GROUP BY g`)
}
