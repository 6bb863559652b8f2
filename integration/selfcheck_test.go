package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-proxy/trellis-proxy/engine"
	"github.com/trellis-proxy/trellis-proxy/internal/intercept"
	"github.com/trellis-proxy/trellis-proxy/internal/pgcluster"
	"github.com/trellis-proxy/trellis-proxy/internal/proxy"
	"github.com/trellis-proxy/trellis-proxy/virtualtables"
)

// scHarness is startTrellis with small self-check pages (so a check walks
// several) and an engine that can be restarted under the proxy.
type scHarness struct {
	*trellisHarness
	mu     sync.Mutex
	cfg    engine.Config
	cancel context.CancelFunc
	done   chan error
}

func scStart(t *testing.T) *scHarness {
	t.Helper()
	c := pgcluster.ForTest(t)
	db := c.FreshDB(t, "trellis")
	pool, err := pgxpool.New(context.Background(), c.URL(db))
	if err != nil {
		t.Fatal(err)
	}
	logger := testLogger(t)
	cfg := engine.Config{
		Logger:       logger.With("component", "engine"),
		SealInterval: 10 * time.Millisecond, StagingInterval: 100 * time.Millisecond,
		PollInterval: 100 * time.Millisecond, TakeoverInterval: 200 * time.Millisecond,
		Heartbeat: time.Second, WorkerTTL: 5 * time.Second, SelfCheckPageKeys: 16,
	}
	e := engine.New(pool, cfg)
	if err := e.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := virtualtables.InstallOptions(context.Background(), pool, virtualtables.Options{Schema: "trellis", WorkerTTL: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	h := &scHarness{cfg: cfg}
	h.run(e)
	ic := intercept.New(intercept.Config{Engine: e, Schema: "trellis", Database: db, Logger: logger})
	ph := start(t, func(pc *proxy.Config, opts *proxy.Options) {
		pc.Upstream = c.URL(db)
		opts.Interceptor = ic
	})
	h.trellisHarness = &trellisHarness{harness: ph, db: db, pool: pool, engine: e}
	t.Cleanup(func() {
		ph.stop()
		h.stopEngine()
		pool.Close()
	})
	return h
}

func (h *scHarness) run(e *engine.Engine) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx); e.Close() }()
	h.mu.Lock()
	h.cancel, h.done = cancel, done
	h.mu.Unlock()
}

func (h *scHarness) stopEngine() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cancel != nil {
		h.cancel()
		<-h.done
		h.cancel = nil
	}
}

// restartEngine stops the engine's workers and starts another process's
// (a new ProcessID) on the same database.
func (h *scHarness) restartEngine() {
	h.stopEngine()
	cfg := h.cfg
	cfg.ProcessID = fmt.Sprintf("sc-restart-%d", time.Now().UnixNano())
	h.run(engine.New(h.pool, cfg))
}

// scCheck starts a check of target and waits for its verdict.
func scCheck(t *testing.T, c *pgx.Conn, target, mode string) (int64, string) {
	t.Helper()
	ctx := context.Background()
	var id int64
	if err := c.QueryRow(ctx, `SELECT id FROM trellis.self_check($1, 30000, $2)`, target, mode).Scan(&id); err != nil {
		t.Fatalf("self_check(%s): %v", target, err)
	}
	var outcome string
	if err := c.QueryRow(ctx, `SELECT trellis.await_self_check($1, 60000)`, id).Scan(&outcome); err != nil {
		t.Fatalf("await_self_check(%d): %v", id, err)
	}
	return id, outcome
}

func scDivergences(t *testing.T, c *pgx.Conn, id int64) string {
	t.Helper()
	return qString(t, c, `SELECT coalesce(string_agg(concat_ws(' ', kind, key, column_name, coalesce(persisted, '-'),
		coalesce(recomputed, '-'), table_name, detail), '; ' ORDER BY ordinal), '') FROM trellis.self_check_divergences WHERE job_id = $1`, id)
}

func scSetup(t *testing.T, h *scHarness, c *pgx.Conn, table string, rows int) {
	t.Helper()
	mustExec(t, c, fmt.Sprintf(`CREATE TABLE %s (id bigint PRIMARY KEY, cust int, amount int)`, table))
	mustExec(t, c, fmt.Sprintf(`INSERT INTO %s SELECT g, g %% 4, g FROM generate_series(1, %d) g`, table, rows))
	mustExec(t, c, fmt.Sprintf(`TRANSFORM %s_copy FROM %s SELECT amount * 2 AS dbl, cust AS cust`, table, table))
	mustExec(t, c, fmt.Sprintf(`TRANSFORM %s_sums FROM %s GROUP BY cust SELECT cust AS cust, SUM(amount) AS total, COUNT(*) AS n`, table, table))
	h.waitStatus(t, table+"_copy", "live")
	h.waitStatus(t, table+"_sums", "live")
	mustExec(t, c, `SELECT trellis.await_converged(trellis.watermark_token(), 60000)`)
}

// A target tampered by hand is reported with exactly the tampering, in
// both modes; an untouched one converges; rows_compared counts its keys.
func TestSCTamperedTarget(t *testing.T) {
	h := scStart(t)
	c := h.client(t)
	scSetup(t, h, c, "sc_orders", 20)
	for _, target := range []string{"sc_orders_copy", "sc_orders_sums"} {
		id, outcome := scCheck(t, c, target, "standard")
		if outcome != "converged" || scDivergences(t, c, id) != "" {
			t.Fatalf("%s untouched: %s %s %s", target, outcome, scDivergences(t, c, id), qString(t, c, `SELECT coalesce(error, '') FROM trellis.self_checks WHERE id = $1`, id))
		}
	}
	if got := qString(t, c, `SELECT string_agg(target || ' ' || rows_compared || ' ' || state || ' ' || finished, ',' ORDER BY target) FROM trellis.self_checks`); got != "sc_orders_copy 20 done true,sc_orders_sums 4 done true" {
		t.Fatalf("self_checks: %s", got)
	}
	ctx := context.Background()
	for _, q := range []string{
		`UPDATE sc_orders_copy SET dbl = 999 WHERE id = 3`,
		`DELETE FROM sc_orders_copy WHERE id = 5`,
		`INSERT INTO sc_orders_copy (id, dbl, cust) VALUES (100, 7, 1)`,
		`UPDATE sc_orders_sums SET total = total + 1 WHERE cust = 2`,
	} {
		if _, err := h.pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for _, mode := range []string{"standard", "strict"} {
		id, outcome := scCheck(t, c, "sc_orders_copy", mode)
		if got, want := scDivergences(t, c, id), "cell 3 dbl 999 6; missing_row 5 - -; extra_row 100 - -"; outcome != "diverged" || got != want {
			t.Fatalf("%s copy: %s %q, want %q", mode, outcome, got, want)
		}
		id, outcome = scCheck(t, c, "sc_orders_sums", mode)
		if got, want := scDivergences(t, c, id), "cell 2 total 51 50"; outcome != "diverged" || got != want {
			t.Fatalf("%s sums: %s %q, want %q", mode, outcome, got, want)
		}
	}
	if got := qString(t, c, `SELECT divergence_count || ' ' || mode FROM trellis.self_checks WHERE target = 'sc_orders_copy'`); got != "3 strict" {
		t.Fatalf("one job per target, the latest: %s", got)
	}
}

// No false positives: an untampered target under three concurrent writers
// converges in standard mode in every one of 20 runs; strict agrees once
// the writers stop.
func TestSCConvergedUnderWriters(t *testing.T) {
	h := scStart(t)
	c := h.client(t)
	scSetup(t, h, c, "sc_lines", 40)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var writes atomic.Int64
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for ctx.Err() == nil {
				id := 1 + r.IntN(60)
				var err error
				switch r.IntN(3) {
				case 0:
					_, err = h.pool.Exec(ctx, `UPDATE sc_lines SET amount = amount + 1, cust = $2 WHERE id = $1`, id, r.IntN(5))
				case 1:
					_, err = h.pool.Exec(ctx, `INSERT INTO sc_lines VALUES ($1, $2, $1) ON CONFLICT (id) DO NOTHING`, id, r.IntN(5))
				default:
					_, err = h.pool.Exec(ctx, `DELETE FROM sc_lines WHERE id = $1`, id)
				}
				if err == nil {
					writes.Add(1)
				}
				time.Sleep(2 * time.Millisecond) // pacing: about 1,000 writes/s in all
			}
		}()
	}
	for run := range 20 {
		target := []string{"sc_lines_copy", "sc_lines_sums"}[run%2]
		id, outcome := scCheck(t, c, target, "standard")
		if outcome != "converged" {
			stop()
			wg.Wait()
			t.Fatalf("run %d (%s): %s: %s", run, target, outcome, scDivergences(t, c, id))
		}
	}
	// A real divergence is still found under the writers: a row for a key
	// no writer touches.
	if _, err := h.pool.Exec(context.Background(), `INSERT INTO sc_lines_copy (id, dbl, cust) VALUES (500, 1, 1)`); err != nil {
		t.Fatal(err)
	}
	id, outcome := scCheck(t, c, "sc_lines_copy", "standard")
	if got := scDivergences(t, c, id); outcome != "diverged" || got != "extra_row 500 - -" {
		stop()
		wg.Wait()
		t.Fatalf("tampered under writers: %s %q", outcome, got)
	}
	if _, err := h.pool.Exec(context.Background(), `DELETE FROM sc_lines_copy WHERE id = 500`); err != nil {
		t.Fatal(err)
	}
	stop()
	wg.Wait()
	if writes.Load() < 100 {
		t.Fatalf("only %d writes went on during the checks", writes.Load())
	}
	mustExec(t, c, `SELECT trellis.await_converged(trellis.watermark_token(), 60000)`)
	for _, target := range []string{"sc_lines_copy", "sc_lines_sums"} {
		if id, outcome := scCheck(t, c, target, "strict"); outcome != "converged" {
			t.Fatalf("strict %s: %s: %s", target, outcome, scDivergences(t, c, id))
		}
	}
}

// A capture trigger disabled by hand is a capture divergence; bad
// arguments and unknown targets are refused.
func TestSCCaptureAndPrivileges(t *testing.T) {
	h := scStart(t)
	c := h.client(t)
	ctx := context.Background()
	scSetup(t, h, c, "sc_cap", 10)
	if _, err := c.Exec(ctx, `SELECT * FROM trellis.self_check('sc_cap_copy', 1000, 'sloppy')`); pgErrOf(t, err).Code != "22023" {
		t.Fatalf("bad mode: %v", err)
	}
	if _, err := c.Exec(ctx, `SELECT * FROM trellis.self_check('sc_nope', 1000)`); pgErrOf(t, err).Code != "42704" {
		t.Fatalf("unknown target: %v", err)
	}

	// Disable one capture trigger, then hold a lock that keeps the staging
	// worker's repair (which re-enables it) off while the check runs.
	var hold pgx.Tx
	eventually(t, 30*time.Second, "trigger disabled and held", func() bool {
		if hold != nil {
			hold.Rollback(ctx)
		}
		mustExec(t, c, `ALTER TABLE sc_cap DISABLE TRIGGER trellis_capture_update`)
		var err error
		if hold, err = h.pool.Begin(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := hold.Exec(ctx, `LOCK TABLE sc_cap IN ROW EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		return qString(t, c, `SELECT tgenabled::text FROM pg_trigger WHERE tgrelid = 'sc_cap'::regclass AND tgname = 'trellis_capture_update'`) == "D"
	})
	id, outcome := scCheck(t, c, "sc_cap_copy", "standard")
	hold.Rollback(ctx)
	want := "capture - - public.sc_cap capture trigger(s) not ENABLE ALWAYS: trellis_capture_update"
	if got := scDivergences(t, c, id); outcome != "capture_broken" || got != want {
		t.Fatalf("capture: %s %q, want %q", outcome, got, want)
	}
}

// A job survives its worker's backend being terminated mid-page and its
// worker process being replaced: it resumes from the saved cursor and ends
// with every key compared exactly once.
func TestSCJobSurvivesWorkerDeath(t *testing.T) {
	h := scStart(t)
	c := h.client(t)
	ctx := context.Background()
	scSetup(t, h, c, "sc_big", 3000)
	var id int64
	if err := c.QueryRow(ctx, `SELECT id FROM trellis.self_check('sc_big_copy', 30000, 'standard')`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "job past its first pages", func() bool {
		return qString(t, c, `SELECT (rows_compared > 32)::text FROM trellis.self_checks WHERE id = $1`, id) == "true"
	})
	for range 3 {
		mustExec(t, c, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name LIKE 'trellis-worker%' AND pid <> pg_backend_pid()`)
		time.Sleep(20 * time.Millisecond) // spacing between the kills, not a wait for a condition
	}
	h.restartEngine()
	if got := qString(t, c, `SELECT state FROM trellis.self_checks WHERE id = $1`, id); got == "done" {
		t.Fatalf("the job finished before its worker died; make the table bigger")
	}
	eventually(t, 60*time.Second, "job done", func() bool {
		return qString(t, c, `SELECT state FROM trellis.self_checks WHERE id = $1`, id) == "done"
	})
	if got := qString(t, c, `SELECT outcome || ' ' || rows_compared || ' ' || divergence_count FROM trellis.self_checks WHERE id = $1`, id); got != "converged 3000 0" {
		t.Fatalf("resumed job: %s", got)
	}
}

// Privileges (attack test): a role that cannot SELECT a target can neither
// start a check on it (42501) nor see its jobs or divergences, and gains no
// role attribute; the owner's check still runs and converges.
func TestSCOtherRoleCannotCheck(t *testing.T) {
	h := startTrellis(t)
	c := h.client(t)
	ctx := context.Background()
	mustExec(t, c, `DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sc_other') THEN CREATE ROLE sc_other LOGIN; END IF; END $$`)
	mustExec(t, c, `CREATE TABLE sc_priv (id bigint PRIMARY KEY, v int)`)
	mustExec(t, c, `INSERT INTO sc_priv SELECT g, g FROM generate_series(1, 10) g`)
	mustExec(t, c, `TRANSFORM sc_priv_x FROM sc_priv SELECT v * 10 AS x`)
	h.waitStatus(t, "sc_priv_x", "live")
	other := connectURL(t, h.url("sc_other", "", h.db, ""))
	_, err := other.Exec(ctx, `SELECT * FROM trellis.self_check('sc_priv_x', 1000)`)
	if err == nil || pgErrOf(t, err).Code != "42501" {
		t.Fatalf("a role without SELECT on the target started a check: %v", err)
	}
	for _, q := range []string{
		`SELECT trellis._self_check_start('postgres'::regrole, 'sc_priv_x', 1000, 'standard')`,
		`SELECT trellis._self_check_start('sc_other'::regrole, 'sc_priv_x', 1000, 'standard')`,
	} {
		if _, err := other.Exec(ctx, q); err == nil || pgErrOf(t, err).Code != "42501" {
			t.Fatalf("%s: %v", q, err)
		}
	}
	id, outcome := scCheck(t, c, "sc_priv_x", "standard")
	if outcome != "converged" {
		t.Fatalf("owner's check: %s", outcome)
	}
	if got := qString(t, other, `SELECT count(*)::text FROM trellis.self_checks`); got != "0" {
		t.Fatalf("sc_other sees %s jobs", got)
	}
	if got := qString(t, other, `SELECT count(*)::text FROM trellis.self_check_divergences WHERE job_id = $1`, id); got != "0" {
		t.Fatalf("sc_other sees %s divergences", got)
	}
	if got := qString(t, c, `SELECT (rolsuper OR rolcreaterole OR rolbypassrls)::text FROM pg_roles WHERE rolname = 'sc_other'`); got != "false" {
		t.Fatalf("sc_other gained a role attribute")
	}
}

// Every aggregate kind, a composite key and a chain recompute to the same
// text the write path keeps: no false divergence from a rendering.
func TestSCEveryKindConverges(t *testing.T) {
	h := scStart(t)
	c := h.client(t)
	mustExec(t, c, `CREATE TABLE sc_sales (id bigint PRIMARY KEY, region text, price numeric, qty int, ok boolean, flags int, doc jsonb, w float8)`)
	mustExec(t, c, `INSERT INTO sc_sales SELECT g, CASE WHEN g % 5 = 0 THEN NULL ELSE 'r' || g % 3 END, g * 1.25, g % 7, g % 2 = 0, g,
		jsonb_build_object('g', g), g / 3.0 FROM generate_series(1, 60) g`)
	mustExec(t, c, `TRANSFORM sc_region FROM sc_sales GROUP BY region SELECT SUM(price) AS revenue, COUNT(*) AS n, COUNT(qty) AS nq,
		AVG(price) AS avg_price, AVG(qty) AS avg_qty, MIN(qty) AS min_qty, MAX(price) AS max_price, BOOL_AND(ok) AS all_ok,
		BOOL_OR(ok) AS any_ok, BIT_AND(flags) AS and_flags, BIT_OR(flags) AS or_flags, JSONB_AGG(doc) AS docs, SUM(w) AS sw, MAX(w) AS mw`)
	mustExec(t, c, `CREATE TABLE sc_lines2 (order_id bigint, line int, sku text, PRIMARY KEY (order_id, line))`)
	mustExec(t, c, `INSERT INTO sc_lines2 SELECT g / 4, g % 4, 'S' || g FROM generate_series(1, 40) g`)
	mustExec(t, c, `TRANSFORM sc_skus FROM sc_lines2 SELECT lower(sku) AS sku_lc`)
	mustExec(t, c, `TRANSFORM sc_region2 FROM sc_region SELECT revenue * 2 AS twice`)
	for _, tg := range []string{"sc_region", "sc_skus", "sc_region2"} {
		h.waitStatus(t, tg, "live")
	}
	mustExec(t, c, `UPDATE sc_sales SET region = 'r9', price = price + 1 WHERE id % 4 = 0`)
	mustExec(t, c, `DELETE FROM sc_sales WHERE id % 9 = 0`)
	mustExec(t, c, `SELECT trellis.await_converged(trellis.watermark_token(), 60000)`)
	for _, tg := range []string{"sc_region", "sc_skus", "sc_region2"} {
		for _, mode := range []string{"standard", "strict"} {
			if id, outcome := scCheck(t, c, tg, mode); outcome != "converged" {
				t.Fatalf("%s %s: %s: %s", tg, mode, outcome, scDivergences(t, c, id))
			}
		}
	}
}

// An aggregate's pages walk its group key (issue 17 benchmark): over
// several pages of 16 groups, with the NULL group last, a group missing at
// a page's first key, a changed sum, the NULL group deleted and a group
// added past the last are each reported once, and every key is compared
// once.
func TestSCGroupPages(t *testing.T) {
	h := scStart(t)
	c := h.client(t)
	mustExec(t, c, `CREATE TABLE sc_grp (id bigint PRIMARY KEY, cust int, amount int)`)
	mustExec(t, c, `INSERT INTO sc_grp SELECT g, CASE WHEN g % 10 = 0 THEN NULL ELSE g % 45 END, g FROM generate_series(1, 200) g`)
	mustExec(t, c, `TRANSFORM sc_grp_sums FROM sc_grp GROUP BY cust SELECT cust AS cust, SUM(amount) AS total, COUNT(*) AS n`)
	h.waitStatus(t, "sc_grp_sums", "live")
	mustExec(t, c, `SELECT trellis.await_converged(trellis.watermark_token(), 60000)`)
	divs := func(id int64) string {
		return qString(t, c, `SELECT coalesce(string_agg(concat_ws(' ', kind, replace(key, chr(1), 'NULL'), column_name, persisted, recomputed), '; ' ORDER BY ordinal), '')
			FROM trellis.self_check_divergences WHERE job_id = $1`, id)
	}
	for _, mode := range []string{"standard", "strict"} {
		if id, outcome := scCheck(t, c, "sc_grp_sums", mode); outcome != "converged" || divs(id) != "" {
			t.Fatalf("%s untouched: %s %s", mode, outcome, divs(id))
		}
	}
	if got := qString(t, c, `SELECT rows_compared || ' ' || pages FROM trellis._self_checks`); got != "46 3" {
		t.Fatalf("untouched: rows_compared and pages %s, want 46 3", got)
	}
	for _, q := range []string{
		`DELETE FROM sc_grp_sums WHERE cust = 16`,
		`UPDATE sc_grp_sums SET total = total + 1 WHERE cust = 20`,
		`DELETE FROM sc_grp_sums WHERE cust IS NULL`,
		`INSERT INTO sc_grp_sums SELECT (jsonb_populate_record(s, '{"cust": 1000, "total": 5, "n": 1}')).* FROM sc_grp_sums s WHERE cust = 1`,
	} {
		if _, err := h.pool.Exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for _, mode := range []string{"standard", "strict"} {
		id, outcome := scCheck(t, c, "sc_grp_sums", mode)
		if got, want := divs(id), "missing_row 16; cell 20 total 221 220; missing_row NULL; extra_row 1000"; outcome != "diverged" || got != want {
			t.Fatalf("%s: %s %q, want %q", mode, outcome, got, want)
		}
		if got := qString(t, c, `SELECT rows_compared::text FROM trellis.self_checks WHERE id = $1`, id); got != "47" {
			t.Fatalf("%s: rows_compared %s, want 47", mode, got)
		}
	}
}

// A JOIN target is self-checked against its own join: untouched it
// converges, a tampered cell and a row the join no longer yields are found.
func TestSCJoinTarget(t *testing.T) {
	h := scStart(t)
	c := h.client(t)
	for _, q := range []string{
		`CREATE TABLE sc_teams (id int PRIMARY KEY, name text)`,
		`CREATE TABLE sc_tickets (id bigint PRIMARY KEY, team_id int, title text)`,
		`CREATE INDEX ON sc_tickets (team_id)`,
		`INSERT INTO sc_teams SELECT g, 'team ' || g FROM generate_series(1, 3) g`,
		`INSERT INTO sc_tickets SELECT g, g % 4, 'ticket ' || g FROM generate_series(1, 30) g`,
		`TRANSFORM sc_ticket_teams FROM sc_tickets t JOIN sc_teams m ON m.id = t.team_id SELECT t.title AS title, m.name AS team`,
		`TRANSFORM sc_team_counts FROM sc_tickets t LEFT JOIN sc_teams m ON m.id = t.team_id GROUP BY m.name SELECT COUNT(*) AS n`,
	} {
		mustExec(t, c, q)
	}
	h.waitStatus(t, "sc_ticket_teams", "live")
	h.waitStatus(t, "sc_team_counts", "live")
	for _, target := range []string{"sc_ticket_teams", "sc_team_counts"} {
		if id, outcome := scCheck(t, c, target, "strict"); outcome != "converged" || scDivergences(t, c, id) != "" {
			t.Fatalf("%s untouched: %s %s", target, outcome, scDivergences(t, c, id))
		}
	}
	ctx := context.Background()
	for _, q := range []string{
		`UPDATE sc_ticket_teams SET team = 'wrong' WHERE id = 1`,
		`INSERT INTO sc_ticket_teams (id, title, team) VALUES (4, 'ticket 4', 'none')`, // team_id 0: the INNER JOIN yields no row
		`UPDATE sc_team_counts SET n = n + 1 WHERE name = 'team 2'`,
	} {
		if _, err := h.pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	id, outcome := scCheck(t, c, "sc_ticket_teams", "strict")
	if got, want := scDivergences(t, c, id), "cell 1 team wrong team 1; extra_row 4 - -"; outcome != "diverged" || got != want {
		t.Fatalf("sc_ticket_teams: %s %q, want %q", outcome, got, want)
	}
	id, outcome = scCheck(t, c, "sc_team_counts", "strict")
	if got, want := scDivergences(t, c, id), "cell team 2 n 9 8"; outcome != "diverged" || got != want {
		t.Fatalf("sc_team_counts: %s %q, want %q", outcome, got, want)
	}
}
