package engine

// Deterministic regressions for bugs the differential test found.

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-proxy/trellis-proxy/grammar"
)

// ALTER TRANSFORM with only ALTER clauses changes no column of the target;
// it once sent a bare "ALTER TABLE t" (42601). Found by the differential
// test's operator.
func TestAlterOnlyFormulasKeepsColumns(t *testing.T) {
	pool := testDB(t)
	exec(t, pool, `CREATE TABLE s (id int PRIMARY KEY, g text, i int, b bool)`)
	exec(t, pool, `INSERT INTO s SELECT x, 'g' || (x % 3), x, x % 2 = 0 FROM generate_series(1, 100) x`)
	e, _ := startEngine(t, pool, fastConfig())
	if _, err := applyText(t, e, `TRANSFORM v FROM s SELECT b AS f0, i * 2 AS f1`); err != nil {
		t.Fatal(err)
	}
	awaitLive(t, e, "v")
	if _, err := applyText(t, e, `ALTER TRANSFORM v ALTER f0 AS NOT b, ALTER f1 AS length(g)`); err != nil {
		t.Fatal(err)
	}
	exec(t, pool, `UPDATE s SET g = g || 'x' WHERE id % 5 = 0`)
	awaitLive(t, e, "v")
	converge(t, e)
	assertSame(t, pool, `SELECT id, f0, f1 FROM v`, `SELECT id, NOT b, length(g) FROM s`)
}

// A 1-1 reader of an aggregate target (its key is the nullable group
// tuple), fresh-built (target rows without ledger entries), paused while
// groups vanish, then resumed: the rebuild's sweep must walk the target's
// own keys, or rows of vanished groups survive. Found by the differential
// test (seed 1796118899947463274: d3 <- d2 <- aggregate d1).
func TestRebuildSweepsNullableKeyedReader(t *testing.T) {
	pool := testDB(t)
	exec(t, pool, `CREATE TABLE s (id int PRIMARY KEY, g text, v int)`)
	exec(t, pool, `INSERT INTO s SELECT x, CASE WHEN x % 4 = 0 THEN NULL ELSE 'g' || (x % 4) END, x FROM generate_series(1, 200) x`)
	e, _ := startEngine(t, pool, fastConfig())
	for _, s := range []string{
		`TRANSFORM byg FROM s GROUP BY g SELECT g AS g, SUM(v) AS total`,
		`TRANSFORM byg_copy FROM byg SELECT total AS t2`,
	} {
		if _, err := applyText(t, e, s); err != nil {
			t.Fatal(err)
		}
		awaitLive(t, e, "byg")
	}
	awaitLive(t, e, "byg_copy")
	if _, err := applyText(t, e, `PAUSE TRANSFORM byg_copy`); err != nil {
		t.Fatal(err)
	}
	exec(t, pool, `DELETE FROM s WHERE g = 'g1' OR g IS NULL`) // two groups vanish, the NULL one among them
	exec(t, pool, `UPDATE s SET v = v + 1 WHERE g = 'g2'`)
	converge(t, e)
	if _, err := applyText(t, e, `RESUME TRANSFORM byg_copy`); err != nil {
		t.Fatal(err)
	}
	awaitLive(t, e, "byg_copy")
	converge(t, e)
	assertSame(t, pool, `SELECT g, t2 FROM byg_copy`, `SELECT g, sum(v) FROM s GROUP BY g`)
}

// A field pause that cascades to a reader's field waits for the reader's
// page already in flight, as a whole-transform pause waits for its own
// (the definition fence): from the PAUSE's commit on, no page writes a
// paused field. The cascade once skipped the readers' fences, so a page
// that read the pause set before the PAUSE committed wrote the cascaded
// field after it. Found by the differential test's column pauses.
func TestPauseColumnCascadeWaitsForReadersPageInFlight(t *testing.T) {
	pool := testDB(t)
	ctx := context.Background()
	exec(t, pool, `CREATE TABLE cs (id int PRIMARY KEY, v int)`)
	exec(t, pool, `INSERT INTO cs SELECT g, g FROM generate_series(1, 20) g`)
	var armed atomic.Bool
	var once sync.Once
	held, release := make(chan struct{}), newGate()
	e := New(pool, fastConfig())
	e.w.Plant.PageHook = func(stage string) {
		if stage == "locked rd" && armed.Load() {
			once.Do(func() { close(held); release.wait() })
		}
	}
	runHooked(t, e, release)
	for _, s := range []string{`TRANSFORM up FROM cs SELECT v * 2 AS dbl, v AS v`, `TRANSFORM rd FROM up SELECT dbl + 1 AS d1, v AS w`} {
		if _, err := applyText(t, e, s); err != nil {
			t.Fatal(err)
		}
	}
	awaitLive(t, e, "up")
	awaitLive(t, e, "rd")
	// rd can be live with pages of up's build still to drain; one of those
	// (d1 = 3) must not be the page held below.
	converge(t, e)

	// A page of rd holds key 1, about to write d1 = 2 * 101 + 1.
	armed.Store(true)
	exec(t, pool, `UPDATE cs SET v = v + 100 WHERE id = 1`)
	select {
	case <-held:
	case <-time.After(60 * time.Second):
		t.Fatal("no page of rd started")
	}
	d1Of := func() int {
		t.Helper()
		var d1 int
		if err := pool.QueryRow(ctx, `SELECT d1 FROM rd WHERE id = 1`).Scan(&d1); err != nil {
			t.Fatal(err)
		}
		return d1
	}
	before := d1Of()
	st, err := grammar.Parse(`PAUSE TRANSFORM up.dbl`)
	if err != nil {
		t.Fatal(err)
	}
	paused := make(chan error, 1)
	go func() {
		_, err := applyOnce(ctx, e, st)
		paused <- err
	}()
	// The PAUSE either returns at once (the page then writes the paused
	// field) or waits on rd's fence, a relation lock, until the page ends.
	if returned, err := awaitBeforeReturn(t, "PAUSE to return or wait on a fence", paused, func() bool {
		return count(t, pool, `SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'relation'`) > 0
	}); returned {
		release.open()
		if err != nil {
			t.Fatal(err)
		}
		converge(t, e)
		t.Fatalf("PAUSE TRANSFORM up.dbl committed while rd's page was in flight; d1 of key 1 is now %d, written after the pause (it was %d)",
			d1Of(), before)
	}
	release.open()
	if err := <-paused; err != nil {
		t.Fatal(err)
	}
	// The page committed before the pause; nothing writes d1 after it.
	if d1 := d1Of(); d1 != 203 {
		t.Fatalf("d1 of key 1 is %d when the pause committed, want 203 (the page before it)", d1)
	}
	exec(t, pool, `UPDATE cs SET v = v + 100 WHERE id <= 5`)
	converge(t, e)
	assertSame(t, pool, `SELECT id, d1, w FROM rd`, `SELECT id, CASE id WHEN 1 THEN 203 ELSE CASE WHEN id <= 5 THEN (v - 100) * 2 + 1 ELSE v * 2 + 1 END END, v FROM cs`)
}

// runHooked migrates and runs an engine whose plants a test set, until the
// test ends; the gates its hooks wait at open before the engine stops, so a
// test that fails while a worker waits at one ends instead of hanging (the
// engine's shutdown waits for every worker).
func runHooked(t *testing.T, e *Engine, gates ...*gate) {
	t.Helper()
	if err := e.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		for _, g := range gates {
			g.open()
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("engine run: %v", err)
		}
		e.Close()
	})
}

// gate holds hooked workers until the test opens it; opening twice is
// harmless.
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func newGate() *gate { return &gate{ch: make(chan struct{})} }

func (g *gate) wait() { <-g.ch }

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

// An aggregate field's refresh (after RESUME t.col) completes while pages
// share-lock the definition row. It once updated that row while holding
// the ledger SHARE those pages wait for: each page joined the row's share
// lock ahead of the update and then waited on the ledger, so the update
// starved and the build never ended (the differential test's column
// pauses: seed 1796126038432999025, d4 backfilling for good).
func TestFieldRefreshCompletesUnderSharedDefinitionLock(t *testing.T) {
	pool := testDB(t)
	ctx := context.Background()
	exec(t, pool, `CREATE TABLE rs (id int PRIMARY KEY, g int, v int)`)
	exec(t, pool, `INSERT INTO rs SELECT x, x % 4, x FROM generate_series(1, 200) x`)
	var once sync.Once
	atRefresh, release := make(chan struct{}), newGate()
	e := New(pool, fastConfig())
	e.w.Plant.PageHook = func(stage string) {
		if stage == "build-task refresh" {
			once.Do(func() { close(atRefresh); release.wait() })
		}
	}
	runHooked(t, e, release)
	if _, err := applyText(t, e, `TRANSFORM ra FROM rs GROUP BY g SELECT g AS g, SUM(v) AS total, MAX(v) AS top`); err != nil {
		t.Fatal(err)
	}
	awaitLive(t, e, "ra")
	for _, s := range []string{`PAUSE TRANSFORM ra.top`, `RESUME TRANSFORM ra.top`} {
		if _, err := applyText(t, e, s); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-atRefresh:
	case <-time.After(60 * time.Second):
		t.Fatal("no refresh task ran")
	}
	// A page's share lock on the definition row, held while the refresh runs.
	page, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer page.Rollback(ctx)
	if _, err := page.Exec(ctx, `SELECT 1 FROM trellis._definitions WHERE compiled #>> '{spec,target,name}' = 'ra' FOR SHARE`); err != nil {
		t.Fatal(err)
	}
	release.open()
	for deadline := time.Now().Add(30 * time.Second); count(t, pool, `SELECT 1 FROM trellis._build_tasks WHERE kind = 'refresh' AND state = 'open'`) > 0; {
		if time.Now().After(deadline) {
			t.Fatal("the refresh did not complete while a page share-locked the definition")
		}
		time.Sleep(20 * time.Millisecond)
	}
	page.Rollback(ctx)
	awaitLive(t, e, "ra")
	converge(t, e)
	assertSame(t, pool, `SELECT g, total, top FROM ra`, `SELECT g, SUM(v), MAX(v) FROM rs GROUP BY g`)
	if n := count(t, pool, `SELECT 1 FROM trellis._definitions WHERE status_detail ? 'refresh_columns'`); n != 0 {
		t.Fatal("refresh_columns left after the build went live")
	}
}
