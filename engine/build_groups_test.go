package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// A fresh aggregate build's chunks write ledger entries only and its last
// task writes every group once from the ledger. Pages that run between the
// chunks and that last task (a key of an already built group changed, a
// key of a range not built yet written first by a page, a whole group
// deleted) leave partial rows in the target; the groups task must replace
// them with the ledger's totals and drop the emptied group, and only then
// may the transform go live. The test runs the build tasks and the pages
// itself, in that order. This is the classic fresh build, the one taken
// while an older process drains (a heap build keeps pages off instead:
// TestHeapAggregateBuildDefersPages).
func TestFreshAggregateBuildGroupsStepSupersedesPages(t *testing.T) {
	pool, e := startGroupsBuild(t, true)
	ctx := context.Background()
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
		did, err := e.w.BuildStep(ctx, "test")
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
		if _, err := e.w.DrainPage(ctx, "test"); err != nil {
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
		if _, err := e.w.DrainPage(ctx, "test"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startGroupsBuild defines agg = SUM, COUNT, MAX of s(id, g, v) by g over
// 1,000 rows, group 99 only in the first chunk's range (ids 1..5), on an
// engine without drain workers (the test runs build steps and pages
// itself), in whole steps of 50 keys; classic forces the classic fresh
// build.
func startGroupsBuild(t *testing.T, classic bool) (*pgxpool.Pool, *Engine) {
	t.Helper()
	pool := testDB(t)
	exec(t, pool, `CREATE TABLE s (id int PRIMARY KEY, g int, v int)`)
	exec(t, pool, `INSERT INTO s SELECT x, CASE WHEN x <= 5 THEN 99 ELSE x % 10 END, x FROM generate_series(1, 1000) x`)
	exec(t, pool, `ANALYZE s`)
	cfg := fastConfig()
	cfg.DrainWorkers = -1
	cfg.BuildChunkSize, cfg.FreshChunkSize = 50, 50
	cfg.BuildStepBudget = time.Hour // whole steps: the classic test counts them
	e, _ := startPlanted(t, pool, cfg, func(e *Engine) { e.w.Plant.ClassicBuilds = classic })
	if _, err := applyText(t, e, `TRANSFORM agg FROM s GROUP BY g SELECT g AS g, SUM(v) AS total, COUNT(*) AS n, MAX(v) AS top`); err != nil {
		t.Fatal(err)
	}
	return pool, e
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
		if did, err := e.w.BuildStep(ctx, "test"); err != nil || !did {
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
	buildAll(t, e, nil)
	if st, _, _ := storedStatus(t, e, "agg"); st != "live" {
		t.Fatalf("agg is %s after its rebuild", st)
	}
	assertSame(t, pool, `SELECT g, total, n, low FROM agg`, `SELECT g, sum(v), count(*), min(v) FROM s GROUP BY g`)
	// The interrupted build was a heap build: the rebuild gave the ledger
	// its key index back before its pages and locked-path chunks ran.
	if !ledgerKeyed(t, pool, "agg__ledger") {
		t.Fatal("the ledger has no primary key after the rebuild")
	}
}

// buildAll runs build steps as worker "test" until none is left, calling
// each (when set) after every step.
func buildAll(t *testing.T, e *Engine, each func()) {
	t.Helper()
	for {
		did, err := e.w.BuildStep(context.Background(), "test")
		if err != nil {
			t.Fatal(err)
		}
		if !did {
			return
		}
		if each != nil {
			each()
		}
	}
}

// keyIndexName is the name of ledger's unique index.
func keyIndexName(t *testing.T, q Querier, ledger string) string {
	t.Helper()
	var name string
	if err := q.QueryRow(context.Background(), `SELECT i.indexrelid::regclass::text FROM pg_index i WHERE i.indrelid = $1::regclass AND i.indisunique`, ledger).Scan(&name); err != nil {
		t.Fatal(err)
	}
	return name
}

func ledgerKeyed(t *testing.T, q Querier, ledger string) bool {
	t.Helper()
	return count(t, q, fmt.Sprintf(`SELECT 1 FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attname = 'k'
		WHERE i.indrelid = to_regclass('%s') AND i.indisunique AND i.indnatts = 1 AND i.indkey[0] = a.attnum`, ledger)) == 1
}

// A heap build (the fresh aggregate build when every process runs this
// format) keeps pages off the definition: writes made while it builds are
// deferred, not applied, the ledger is written by its chunks alone and has
// no key index until its index task builds it; once live, the deferred
// keys are re-derived against the chunks' entries and the target is exact.
func TestHeapAggregateBuildDefersPages(t *testing.T) {
	pool, e := startGroupsBuild(t, false)
	ctx := context.Background()
	waitFor(t, "the heap build to start", 30*time.Second, func() bool {
		return count(t, pool, `SELECT 1 FROM trellis._definitions WHERE status = 'backfilling' AND status_detail ->> 'heap_build' = build_id::text`) == 1
	})
	if ledgerKeyed(t, pool, "agg__ledger") {
		t.Fatal("a heap build drops its ledger's key index until its index task")
	}
	step := func() bool {
		t.Helper()
		did, err := e.w.BuildStep(ctx, "test")
		if err != nil {
			t.Fatalf("build step: %v", err)
		}
		return did
	}
	for count(t, pool, `SELECT 1 FROM agg__ledger WHERE k IN ('1','2','3','4','5')`) < 5 {
		if !step() {
			t.Fatal("no build step to run before the first chunk's entries")
		}
	}
	if n := count(t, pool, `SELECT 1 FROM agg__ledger WHERE k = '900'`); n != 0 {
		t.Fatal("the range of key 900 was built before the pages ran")
	}
	entries := func() string {
		t.Helper()
		var s string
		if err := pool.QueryRow(ctx, `SELECT coalesce(string_agg(k || ':' || member || ':' || g0 || ':' || a0, ',' ORDER BY k), '') FROM agg__ledger`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := entries()
	// The same writes as the classic test: a built key moves group, an
	// unbuilt key changes, a key arrives, group 99 loses every member.
	exec(t, pool, `UPDATE s SET g = 7, v = v + 1000 WHERE id = 10`)
	exec(t, pool, `UPDATE s SET v = v + 5000 WHERE id = 900`)
	exec(t, pool, `INSERT INTO s VALUES (5000, 3, 5000)`)
	exec(t, pool, `DELETE FROM s WHERE g = 99`)
	// Pages run until each of those keys is deferred for agg.
	deferred := func() int64 {
		return count(t, pool, `SELECT 1 FROM trellis._deferred WHERE key IN ('1','2','3','4','5','10','900','5000')`)
	}
	waitFor(t, "the pages to defer the writes", 30*time.Second, func() bool {
		if _, err := e.w.DrainPage(ctx, "test"); err != nil {
			t.Fatal(err)
		}
		return deferred() == 8
	})
	if after := entries(); after != before {
		t.Fatalf("a page wrote the ledger during a heap build:\nbefore %s\nafter  %s", before, after)
	}
	if n := count(t, pool, `SELECT 1 FROM agg`); n != 0 {
		t.Fatalf("%d group rows before the groups step", n)
	}
	for step() {
	}
	if st, _, _ := storedStatus(t, e, "agg"); st != "live" {
		t.Fatalf("agg is %s after its build steps", st)
	}
	if !ledgerKeyed(t, pool, "agg__ledger") {
		t.Fatal("the index task did not build the ledger's key index")
	}
	// Live: the staging worker stages the deferred keys again, pages apply them.
	want := `SELECT g, sum(v), count(*), max(v) FROM s GROUP BY g`
	waitFor(t, "the deferred writes to reach the target", 30*time.Second, func() bool {
		if _, err := e.w.DrainPage(ctx, "test"); err != nil {
			t.Fatal(err)
		}
		return diff(t, pool, `SELECT g, total, n, top FROM agg`, want) == "" && deferred() == 0
	})
	assertSame(t, pool, `SELECT g, "__members" FROM agg`, `SELECT g, count(*) FROM s GROUP BY g`)
}

// A heap chunk whose rows fail (here a division by zero in one row) cannot
// isolate them; the build goes back to a rebuild on the locked path, which
// holds the failing key and builds the rest.
func TestHeapBuildFailingRowFallsBackToLockedPath(t *testing.T) {
	pool := testDB(t)
	exec(t, pool, `CREATE TABLE s (id int PRIMARY KEY, g int, a int, b int)`)
	exec(t, pool, `INSERT INTO s SELECT x, x % 10, x, CASE WHEN x = 13 THEN 0 ELSE 1 END FROM generate_series(1, 300) x`)
	cfg := fastConfig()
	cfg.BuildChunkSize, cfg.FreshChunkSize = 50, 50
	e, _ := startEngine(t, pool, cfg)
	if _, err := applyText(t, e, `TRANSFORM agg FROM s GROUP BY g SELECT g AS g, SUM(a / b) AS total`); err != nil {
		t.Fatal(err)
	}
	awaitLive(t, e, "agg")
	waitFor(t, "key 13 held", 30*time.Second, func() bool {
		return count(t, pool, `SELECT 1 FROM trellis._poison WHERE key = '13'`) == 1
	})
	// The index task's or ensureLedgerKey's index, not the primary key the
	// ledger was created with: the build did start as a heap build.
	if name := keyIndexName(t, pool, "agg__ledger"); name != "agg__ledger_k_idx" {
		t.Fatalf("the ledger's key index is %q after the locked-path rebuild; want agg__ledger_k_idx (a heap build dropped the primary key)", name)
	}
	assertSame(t, pool, `SELECT g, total FROM agg`, `SELECT g, sum(a / b) FROM s WHERE id <> 13 GROUP BY g`)
}

// While a live process of an older catalog format drains (its pages would
// write the ledger of a heap build, whose key index is gone), a fresh
// aggregate build takes the classic path; once that process is gone, the
// next fresh build is a heap build.
func TestHeapBuildWaitsForAnOlderFleet(t *testing.T) {
	pool := testDB(t)
	exec(t, pool, `CREATE TABLE s (id int PRIMARY KEY, g int, v int)`)
	exec(t, pool, `INSERT INTO s SELECT x, x % 10, x FROM generate_series(1, 300) x`)
	e, _ := startEngine(t, pool, fastConfig())
	exec(t, pool, `INSERT INTO trellis._workers (worker_id, proxy_id, kind, last_seen, format) VALUES ('old', 'old', 'drain', now() + interval '1 hour', 10)`)
	heapBuilds := func() int64 {
		return count(t, pool, `SELECT 1 FROM trellis._definitions WHERE status_detail ->> 'heap_build' IS NOT NULL`)
	}
	if _, err := applyText(t, e, `TRANSFORM a1 FROM s GROUP BY g SELECT g AS g, SUM(v) AS total`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a1 to build", 30*time.Second, func() bool {
		return count(t, pool, `SELECT 1 FROM trellis._definitions WHERE status_detail ->> 'fresh_build' IS NOT NULL OR status = 'live'`) == 1
	})
	if n := heapBuilds(); n != 0 {
		t.Fatal("a heap build started while an older process drains")
	}
	awaitLive(t, e, "a1")
	exec(t, pool, `DELETE FROM trellis._workers WHERE worker_id = 'old'`)
	if _, err := applyText(t, e, `TRANSFORM a2 FROM s GROUP BY g SELECT g AS g, COUNT(*) AS n`); err != nil {
		t.Fatal(err)
	}
	awaitLive(t, e, "a2")
	// Which path each took shows in its ledger's key index: the primary
	// key it was created with (classic), or the index task's (heap).
	if a1, a2 := keyIndexName(t, pool, "a1__ledger"), keyIndexName(t, pool, "a2__ledger"); a1 != "a1__ledger_pkey" || a2 != "a2__ledger_k_idx" {
		t.Fatalf("ledger key indexes %s and %s: want a1's primary key (classic build) and a2's index task's (heap build)", a1, a2)
	}
	converge(t, e)
	assertSame(t, pool, `SELECT g, total FROM a1`, `SELECT g, sum(v) FROM s GROUP BY g`)
	assertSame(t, pool, `SELECT g, n FROM a2`, `SELECT g, count(*) FROM s GROUP BY g`)
}

// A TRUNCATE of the source while a heap build runs is deferred with the
// rest; the build must not go live on the entries the truncate emptied but
// rebuild, ending live and exact.
func TestHeapBuildTruncatedRebuilds(t *testing.T) {
	pool, e := startGroupsBuild(t, false)
	ctx := context.Background()
	waitFor(t, "the heap build to start", 30*time.Second, func() bool {
		return count(t, pool, `SELECT 1 FROM trellis._definitions WHERE status = 'backfilling' AND status_detail ->> 'heap_build' = build_id::text`) == 1
	})
	var heapBuild int64
	if err := pool.QueryRow(ctx, `SELECT build_id FROM trellis._definitions`).Scan(&heapBuild); err != nil {
		t.Fatal(err)
	}
	for count(t, pool, `SELECT 1 FROM agg__ledger`) == 0 {
		if did, err := e.w.BuildStep(ctx, "test"); err != nil || !did {
			t.Fatalf("build step: %v %v", did, err)
		}
	}
	exec(t, pool, `TRUNCATE s`)
	exec(t, pool, `INSERT INTO s VALUES (1, 5, 10), (2, 5, 20)`)
	waitFor(t, "the truncate to be deferred", 30*time.Second, func() bool {
		if _, err := e.w.DrainPage(ctx, "test"); err != nil {
			t.Fatal(err)
		}
		return count(t, pool, `SELECT 1 FROM trellis._deferred WHERE whole`) == 1
	})
	// The heap build must not go live; the rebuild it starts instead (and
	// any the staging worker starts after it) may.
	buildAll(t, e, func() {
		if n := count(t, pool, fmt.Sprintf(`SELECT 1 FROM trellis._definitions WHERE status = 'live' AND build_id = %d`, heapBuild)); n != 0 {
			t.Fatal("agg's heap build went live with a truncate of its source deferred")
		}
	})
	waitFor(t, "the rebuild to go live and drain", 60*time.Second, func() bool {
		buildAll(t, e, nil)
		if _, err := e.w.DrainPage(ctx, "test"); err != nil {
			t.Fatal(err)
		}
		st, _, _ := storedStatus(t, e, "agg")
		return st == "live" && diff(t, pool, `SELECT g, total, n, top FROM agg`, `SELECT g, sum(v), count(*), max(v) FROM s GROUP BY g`) == ""
	})
}

// A fresh build's first chunks come from the key's histogram; statistics
// gone stale (rows added past the sampled top, rows deleted inside it)
// only make chunks uneven: the walk plans the keys past the last bound, and
// every key is built. Integer and text keys.
func TestFreshPlanFromStaleHistogram(t *testing.T) {
	pool := testDB(t)
	exec(t, pool, `CREATE TABLE hi (id bigint PRIMARY KEY, v int, g int)`)
	exec(t, pool, `CREATE TABLE ht (id text PRIMARY KEY, v int)`)
	exec(t, pool, `INSERT INTO hi SELECT x, x, x % 10 FROM generate_series(1, 2000) x`)
	exec(t, pool, `INSERT INTO ht SELECT 'k' || lpad(x::text, 5, '0') || CASE WHEN x % 3 = 0 THEN ' é,"' ELSE '' END, x FROM generate_series(1, 2000) x`)
	exec(t, pool, `ANALYZE hi, ht`)
	exec(t, pool, `INSERT INTO hi SELECT x, x, x % 10 FROM generate_series(2001, 5000) x`)
	exec(t, pool, `DELETE FROM hi WHERE id <= 500`)
	exec(t, pool, `INSERT INTO ht SELECT 'z' || x, x FROM generate_series(1, 700) x`)
	exec(t, pool, `DELETE FROM ht WHERE v % 7 = 0`)
	cfg := fastConfig()
	cfg.DrainWorkers = -1 // the test runs the build steps, to see the plan (nothing is written after the builds start)
	cfg.BuildChunkSize, cfg.FreshChunkSize = 100, 100
	e, _ := startEngine(t, pool, cfg)
	for _, s := range []string{`TRANSFORM hi_v FROM hi SELECT v * 2 AS w`, `TRANSFORM ht_v FROM ht SELECT v * 2 AS w`,
		`TRANSFORM hi_g FROM hi GROUP BY g SELECT g AS g, COUNT(*) AS n, SUM(v) AS s`} {
		if _, err := applyText(t, e, s); err != nil {
			t.Fatal(err)
		}
	}
	// hi_v's plan came from the histogram: a walk never plans a chunk
	// without rows, the stale bounds below id 500 do.
	planDone := `SELECT 1 FROM trellis._build_tasks t JOIN trellis._definitions d ON d.build_id = t.build_id
		WHERE d.target_table = 'public.hi_v' AND t.kind = 'plan' AND t.state = 'done'`
	waitFor(t, "hi_v's plan", 30*time.Second, func() bool {
		if _, err := e.w.BuildStep(context.Background(), "test"); err != nil {
			t.Fatal(err)
		}
		return count(t, pool, planDone) == 1
	})
	if n := count(t, pool, `SELECT 1 FROM trellis._build_tasks t JOIN trellis._definitions d ON d.build_id = t.build_id
		WHERE d.target_table = 'public.hi_v' AND t.kind = 'chunk'
		  AND NOT EXISTS (SELECT 1 FROM hi WHERE (t.lo IS NULL OR id > t.lo::bigint) AND id <= t.hi::bigint)`); n == 0 {
		t.Fatal("hi_v's plan has no chunk without rows: it did not come from the stale histogram")
	}
	waitFor(t, "every build to go live", 30*time.Second, func() bool {
		buildAll(t, e, nil)
		return count(t, pool, `SELECT 1 FROM trellis._definitions WHERE status = 'live'`) == 3
	})
	assertSame(t, pool, `SELECT id, w FROM hi_v`, `SELECT id, v * 2 FROM hi`)
	assertSame(t, pool, `SELECT id, w FROM ht_v`, `SELECT id, v * 2 FROM ht`)
	assertSame(t, pool, `SELECT g, n, s FROM hi_g`, `SELECT g, count(*), sum(v) FROM hi GROUP BY g`)
}

// An aggregate rebuild's chunks re-derive a key range at once under the
// ledger's lock (setChunk, rebuildAggSQL); they still add each entry's difference
// to its group as a page does, so between steps the rebuilding target is
// the aggregate of its ledger (readers never see counts no entry backs)
// before the groups step reconciles. Run both ways: the locked path's
// entry locks, and set-based chunks.
func TestAggregateRebuildKeepsGroupsWithTheLedger(t *testing.T) {
	for _, locked := range []bool{true, false} {
		t.Run(map[bool]string{true: "locked", false: "set-based"}[locked], func(t *testing.T) {
			pool := testDB(t)
			ctx := context.Background()
			exec(t, pool, `CREATE TABLE s (id int PRIMARY KEY, g int, v int)`)
			exec(t, pool, `INSERT INTO s SELECT i, i % 7, i FROM generate_series(1, 300) i`)
			cfg := fastConfig()
			cfg.DrainWorkers = -1 // the test runs the build steps
			cfg.BuildChunkSize, cfg.FreshChunkSize = 50, 50
			e, _ := startPlanted(t, pool, cfg, func(e *Engine) { e.w.Plant.LockedRebuilds = locked })
			// After each step, once only the groups step is left, the
			// target against its ledger.
			checked := 0
			check := func() {
				var others, groups int
				if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE t.kind <> 'groups'), count(*) FILTER (WHERE t.kind = 'groups')
					FROM trellis._build_tasks t JOIN trellis._definitions d ON d.build_id = t.build_id AND d.status = 'backfilling'
					WHERE t.state <> 'done'`).Scan(&others, &groups); err != nil {
					t.Fatal(err)
				}
				if others == 0 && groups == 1 {
					assertSame(t, pool, `SELECT g, sv, n FROM a`,
						`SELECT g0, sum(a0), count(*) FROM a__ledger WHERE member GROUP BY g0`)
					checked++
				}
			}
			if _, err := applyText(t, e, `TRANSFORM a FROM s GROUP BY g SELECT SUM(v) AS sv, COUNT(*) AS n`); err != nil {
				t.Fatal(err)
			}
			stepUntilLive(t, e, pool, nil)
			if _, err := applyText(t, e, `PAUSE TRANSFORM a`); err != nil {
				t.Fatal(err)
			}
			// Discarded while paused: moves between groups, new values, a
			// group emptied and one born, new rows, deleted rows (the
			// sweep's).
			exec(t, pool, `DELETE FROM s WHERE id % 13 = 0`)
			exec(t, pool, `UPDATE s SET g = g + 1 WHERE id % 3 = 0`)
			exec(t, pool, `UPDATE s SET v = v * 2 WHERE id % 5 = 0`)
			exec(t, pool, `UPDATE s SET g = 100 WHERE g = 0`)
			exec(t, pool, `INSERT INTO s SELECT i, i % 11, i FROM generate_series(301, 360) i`)
			if _, err := applyText(t, e, `RESUME TRANSFORM a`); err != nil {
				t.Fatal(err)
			}
			if stepUntilLive(t, e, pool, check); checked != 1 {
				t.Fatal("the rebuild never stood with only its groups step left")
			}
			assertSame(t, pool, `SELECT g, sv, n FROM a`, `SELECT g, sum(v), count(*) FROM s GROUP BY g`)
		})
	}
}

// stepUntilLive runs build steps as worker "test" until the one definition
// is live, calling each (when set) after every step that did work, and
// returns the steps run.
func stepUntilLive(t *testing.T, e *Engine, pool *pgxpool.Pool, each func()) (steps int) {
	t.Helper()
	ctx := context.Background()
	status := func() string {
		t.Helper()
		var st string
		if err := pool.QueryRow(ctx, `SELECT status FROM trellis._definitions`).Scan(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	deadline := time.Now().Add(60 * time.Second)
	for status() != "live" {
		if time.Now().After(deadline) {
			t.Fatalf("not live after %d steps (status %s)", steps, status())
		}
		did, err := e.w.BuildStep(ctx, "test")
		if err != nil {
			t.Fatal(err)
		}
		if !did {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		steps++
		if each != nil {
			each()
		}
	}
	return steps
}
