package main

// apply-latency (benchmarks spec, B8 "DDL latency"; issue 6): every Trellis
// lifecycle statement sent through the proxy must return in ≤ 100 ms
// whatever the size of its source, and none may scan the source
// synchronously. Two source sizes run in the same repetition, in an order
// rotated per repetition, so their ratio shows anything that grows with the
// source even on a noisy box.
//
// Each cell is a fresh database with src(id bigint pk, g int, v numeric) of
// N rows and its own trellis-proxy subprocess (the real front door, engine
// defaults). The client sends each statement on one proxy connection inside
// BEGIN … COMMIT; the figure is the statement's round trip plus the COMMIT's
// (post-commit work counts). Between the two, the same transaction reads
// pg_stat_xact_user_tables for src: the tuples the statement's own
// transaction read from the source, a count noise cannot move. While a
// statement runs, a direct connection samples the client backend's wait
// event and the backends blocking it, so a slow statement says why.
//
// The sequence per cell: TRANSFORM of a 1-1 and of a GROUP BY target, and of
// a third one that is paused, resumed, paused and dropped while its build
// runs; after both are live (oracle), ALTER TRANSFORM ADD and DROP and
// PAUSE/RESUME of one column (each only where this build supports it: a
// 0A000 refusal is reported as not measured, any other error fails the run),
// PAUSE, writes, RESUME, request_backfill while that rebuild runs (oracle
// once both are live again, on the large source only in the first
// repetition), then PAUSE and DROP of both (DROP needs a frozen transform),
// checked gone. The builds, not the statements, are what make a
// 1,000,000-row cell cost minutes on a busy box.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ddlObs is one timed statement.
type ddlObs struct {
	Label       string
	Rows        int
	Rep         int
	StateBefore string  // the transform's status just before (building or live)
	StmtMs      float64 // the statement's round trip
	CommitMs    float64 // its COMMIT's round trip
	TotalMs     float64
	SourceRead  int64 // tuples the transaction read from src (-1: unknown)
	Waits       map[string]int
	Blockers    []string
	Unsupported bool // refused with 0A000: not on this build yet
	Err         error
}

// ddlCell is one source size in one repetition.
type ddlCell struct {
	b       *bench
	lab     *engineLab
	rows    int
	large   int // the larger size of the run
	rep     int
	pool    *pgxpool.Pool // direct, for setup, oracles and the sampler
	client  *pgconn.PgConn
	pid     uint32 // the client's upstream backend
	proxy   *process
	obs     []ddlObs
	liveSec map[string]float64
}

const ddlGoalMs = 100

func runApplyLatency(ctx context.Context, b *bench) error {
	small, large := envInt("TRELLIS_BENCH_DDL_SMALL", 10_000), envInt("TRELLIS_BENCH_DDL_LARGE", 1_000_000)
	if b.cfg.Quick {
		small, large = envInt("TRELLIS_BENCH_DDL_SMALL", 1_000), envInt("TRELLIS_BENCH_DDL_LARGE", 20_000)
	}
	bin, err := filepath.Abs(b.cfg.ProxyBin)
	if err != nil {
		return err
	}
	if st, err := os.Stat(bin); err != nil || st.IsDir() {
		return fmt.Errorf("no proxy binary at %s: run make build (the statements go through the proxy)", bin)
	}
	l, err := startLab(ctx, b, "apply-latency")
	if err != nil {
		return err
	}
	defer l.stop()
	b.out.env["path"] = pathProxy
	if out, err := execOutput(ctx, bin, "version"); err == nil {
		b.out.env["proxy_version"] = strings.TrimSpace(out)
	}
	fmt.Fprintf(os.Stderr, "apply-latency: sources of %d and %d rows, %d reps (sizes rotated); each statement in BEGIN … COMMIT on one proxy connection, timed to the end of COMMIT; proxy with engine defaults\n",
		small, large, b.cfg.Reps)

	sizes := []int{small, large}
	var all []ddlObs
	for rep := range b.cfg.Reps {
		order := sizes
		if rep%2 == 1 {
			order = []int{large, small}
		}
		for _, n := range order {
			c := &ddlCell{b: b, lab: l, rows: n, large: large, rep: rep, liveSec: map[string]float64{}}
			err := c.run(ctx, bin)
			for _, o := range c.obs {
				b.out.emit(o.line())
			}
			all = append(all, c.obs...)
			if err != nil {
				return fmt.Errorf("%d rows, rep %d: %w", n, rep, err)
			}
			for k, v := range c.liveSec {
				b.out.emit(map[string]any{"scenario": "apply-latency", "variant": "build", "shape": fmt.Sprintf("%d rows", n),
					"rep": rep, "rows": n, "what": k, "to_live_seconds": v})
			}
			pause(ctx, b.cellWait())
		}
	}
	ddlReport(b, all, small, large)
	return nil
}

func (o ddlObs) line() map[string]any {
	m := map[string]any{"scenario": "apply-latency", "variant": o.Label, "shape": fmt.Sprintf("%d rows", o.Rows), "rep": o.Rep,
		"rows": o.Rows, "state_before": o.StateBefore, "supported": !o.Unsupported, "error": errString(o.Err)}
	if o.Unsupported || o.Err != nil {
		m["total_ms"] = nil
		return m
	}
	m["statement_ms"], m["commit_ms"], m["total_ms"] = o.StmtMs, o.CommitMs, o.TotalMs
	if o.SourceRead >= 0 {
		m["source_tuples_read"] = o.SourceRead
	} else {
		m["source_tuples_read"] = nil
	}
	m["waits"], m["blockers"] = o.Waits, o.Blockers
	g := Goal{What: "statement+commit", AtMost: true, Bound: ddlGoalMs, Unit: "ms"}
	m["goal"], m["goal_met"] = g.String(), g.Met(o.TotalMs)
	return m
}

func (c *ddlCell) run(ctx context.Context, bin string) error {
	pool, db, drop, err := c.lab.newDB(ctx, 6)
	if err != nil {
		return err
	}
	defer drop()
	c.pool = pool
	if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE src (id bigint PRIMARY KEY, g int, v numeric);
		INSERT INTO src SELECT x, x %% 1000, x * 0.5 FROM generate_series(1, %d) x`, c.rows)); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE src`); err != nil {
		return err
	}
	c.proxy, err = c.lab.startProxy(ctx, bin, db)
	if err != nil {
		return err
	}
	defer c.proxy.Stop()
	c.client, err = pgconn.Connect(ctx, "postgres://postgres@"+c.proxy.Addr+"/"+db+"?sslmode=disable")
	if err != nil {
		return fmt.Errorf("connecting through the proxy: %w", err)
	}
	defer c.client.Close(context.Background())
	pid, err := c.scalar(ctx, `SELECT pg_backend_pid()`)
	if err != nil {
		return err
	}
	p, _ := strconv.ParseUint(pid, 10, 32)
	c.pid = uint32(p)
	// Warm the connection (plans, catalog caches) so the first statement
	// is not charged for them; the floor of a round trip is the control.
	for range 5 {
		t0 := time.Now()
		if _, err := c.scalar(ctx, `SELECT 1`); err != nil {
			return err
		}
		c.obs = append(c.obs, ddlObs{Label: "SELECT 1 (control)", Rows: c.rows, Rep: c.rep, TotalMs: ms(time.Since(t0)), StmtMs: ms(time.Since(t0)), SourceRead: -1})
	}

	steps := []struct {
		label, sql string
		optional   bool
		needs      string // a step whose refusal makes this one meaningless
		before     func() error
		after      func() error
	}{
		{label: "TRANSFORM 1-1", sql: `TRANSFORM dl_one FROM src SELECT v * 2 AS v2, g AS g`},
		{label: "TRANSFORM GROUP BY", sql: `TRANSFORM dl_grp FROM src GROUP BY g SELECT SUM(v) AS s, COUNT(*) AS n`},
		// A third transform takes the statements that land during its build,
		// so the two above build undisturbed.
		{label: "TRANSFORM (third)", sql: `TRANSFORM dl_tmp FROM src SELECT v AS v`},
		// Once its build has started (plan or chunks in flight), not
		// while it still waits for the staging pass.
		{label: "PAUSE (building)", sql: `PAUSE TRANSFORM dl_tmp`, before: func() error { return c.awaitBuilding(ctx, "dl_tmp") }},
		{label: "RESUME (paused while building)", sql: `RESUME TRANSFORM dl_tmp`},
		// DROP needs a frozen transform (grammar §4.5): PAUSE while the
		// rebuild runs, then DROP.
		{label: "PAUSE (building, before DROP)", sql: `PAUSE TRANSFORM dl_tmp`, before: func() error { return c.awaitBuilding(ctx, "dl_tmp") }},
		{label: "DROP (paused)", sql: `DROP TRANSFORM dl_tmp`, after: func() error { return c.gone(ctx, "dl_tmp") }},
		{label: "ALTER TRANSFORM ADD", sql: `ALTER TRANSFORM dl_one ADD v + 1 AS v3`, optional: true,
			before: func() error { return c.awaitLive(ctx, "initial build", "dl_one", "dl_grp") }},
		{label: "ALTER TRANSFORM DROP", sql: `ALTER TRANSFORM dl_one DROP v3`, optional: true, needs: "ALTER TRANSFORM ADD",
			before: func() error { return c.awaitLive(ctx, "ALTER ADD", "dl_one") }},
		{label: "PAUSE t.col", sql: `PAUSE TRANSFORM dl_one.v2`, optional: true},
		{label: "RESUME t.col", sql: `RESUME TRANSFORM dl_one.v2`, optional: true, needs: "PAUSE t.col",
			after: func() error { return c.awaitLive(ctx, "RESUME t.col", "dl_one") }},
		{label: "PAUSE (live)", sql: `PAUSE TRANSFORM dl_one`,
			before: func() error { return c.awaitLive(ctx, "initial build", "dl_one", "dl_grp") },
			after: func() error {
				// Writes while paused, which the RESUME's rebuild must bring in.
				_, err := c.client.Exec(ctx, `UPDATE src SET v = v + 1 WHERE id % 97 = 0; DELETE FROM src WHERE id % 101 = 0`).ReadAll()
				return err
			}},
		{label: "RESUME (paused while live)", sql: `RESUME TRANSFORM dl_one`},
		// While dl_one rebuilds: a rebuild of everything reading src.
		{label: "request_backfill", sql: `SELECT trellis.request_backfill('src')`,
			after: func() error {
				// The rebuilds' oracle: always on the small source, once
				// (rep 0) on the large one, where a rebuild round costs
				// minutes on a busy box.
				if c.rows == c.large && (c.rep > 0 || os.Getenv("TRELLIS_BENCH_DDL_LARGE_REBUILD_ORACLE") == "0") {
					return nil
				}
				return c.awaitLive(ctx, "RESUME and request_backfill", "dl_one", "dl_grp")
			}},
		{label: "PAUSE GROUP BY (before DROP)", sql: `PAUSE TRANSFORM dl_grp`},
		{label: "DROP GROUP BY (paused)", sql: `DROP TRANSFORM dl_grp`, after: func() error { return c.gone(ctx, "dl_grp") }},
		// The floor of a DROP: plain DROP TABLE of same-size copies of
		// the 1-1 target and its ledger (their files are unlinked at
		// COMMIT, which costs with their size on any filesystem).
		{label: "DROP TABLE (floor: copies of the 1-1 target and ledger)", sql: `DROP TABLE floor_target, floor_ledger`,
			before: func() error {
				_, err := c.pool.Exec(ctx, `CREATE TABLE floor_target AS SELECT id, v2, g FROM dl_one;
					ALTER TABLE floor_target ADD PRIMARY KEY (id);
					CREATE TABLE floor_ledger AS SELECT k FROM dl_one__ledger;
					ALTER TABLE floor_ledger ADD PRIMARY KEY (k)`)
				return err
			}},
		{label: "PAUSE 1-1 (before DROP)", sql: `PAUSE TRANSFORM dl_one`},
		{label: "DROP 1-1 (paused)", sql: `DROP TRANSFORM dl_one`, after: func() error { return c.gone(ctx, "dl_one") }},
	}
	refused := map[string]bool{}
	for _, s := range steps {
		if refused[s.needs] {
			refused[s.label] = true
			c.obs = append(c.obs, ddlObs{Label: s.label, Rows: c.rows, Rep: c.rep, Unsupported: true, SourceRead: -1})
			continue
		}
		if s.before != nil {
			if err := s.before(); err != nil {
				return fmt.Errorf("before %s: %w", s.label, err)
			}
		}
		o := c.timed(ctx, s.label, s.sql)
		c.obs = append(c.obs, o)
		if o.Err != nil {
			var pe *pgconn.PgError
			if s.optional && errors.As(o.Err, &pe) && pe.Code == "0A000" {
				c.obs[len(c.obs)-1].Unsupported, c.obs[len(c.obs)-1].Err = true, nil
				refused[s.label] = true
				continue
			}
			// A statement the benchmark needs that is refused fails the run (§2.1).
			return fmt.Errorf("%s: %w", s.sql, o.Err)
		}
		if s.after != nil {
			if err := s.after(); err != nil {
				return fmt.Errorf("after %s: %w", s.label, err)
			}
		}
	}
	return nil
}

// timed runs sql in BEGIN … COMMIT on the proxy connection while sampling
// the backend's waits.
func (c *ddlCell) timed(ctx context.Context, label, sql string) ddlObs {
	o := ddlObs{Label: label, Rows: c.rows, Rep: c.rep, SourceRead: -1, Waits: map[string]int{}}
	o.StateBefore = c.state(ctx, sql)
	if _, err := c.client.Exec(ctx, "BEGIN").ReadAll(); err != nil {
		o.Err = err
		return o
	}
	// Tuples read are an after-minus-before inside the transaction: on
	// PostgreSQL 15 the xact view also shows earlier transactions' counts
	// that the backend has not flushed yet.
	before, berr := c.scalar(ctx, readSQL)
	stop := c.sample(ctx, &o)
	t0 := time.Now()
	_, err := c.client.Exec(ctx, sql).ReadAll()
	t1 := time.Now()
	if err != nil {
		stop()
		o.Err = err
		c.client.Exec(ctx, "ROLLBACK").ReadAll()
		return o
	}
	after, rerr := c.scalar(ctx, readSQL)
	t2 := time.Now()
	_, err = c.client.Exec(ctx, "COMMIT").ReadAll()
	t3 := time.Now()
	stop()
	if err != nil {
		o.Err = fmt.Errorf("COMMIT: %w", err)
		return o
	}
	if berr == nil && rerr == nil {
		b, _ := strconv.ParseInt(before, 10, 64)
		a, _ := strconv.ParseInt(after, 10, 64)
		o.SourceRead = a - b
	}
	o.StmtMs, o.CommitMs = ms(t1.Sub(t0)), ms(t3.Sub(t2))
	o.TotalMs = o.StmtMs + o.CommitMs
	return o
}

// readSQL is the tuples this backend has read from src and not yet flushed
// to the cumulative statistics.
const readSQL = `SELECT coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0) FROM pg_stat_xact_user_tables WHERE relid = 'public.src'::regclass`

// sample polls pg_stat_activity for the client backend every 2 ms until
// stop: its wait events, and what blocks it.
func (c *ddlCell) sample(ctx context.Context, o *ddlObs) (stop func()) {
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	blockers := map[string]bool{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		conn, err := c.pool.Acquire(sctx)
		if err != nil {
			return
		}
		defer conn.Release()
		for sctx.Err() == nil {
			var wait, blk string
			err := conn.QueryRow(sctx, `SELECT coalesce(a.wait_event_type || ':' || a.wait_event, ''),
				coalesce((SELECT string_agg(b.pid || ' ' || b.state || ' ' || coalesce(b.wait_event_type || ':' || b.wait_event, '-') || ' ' || left(b.query, 100), ' | ')
				          FROM pg_stat_activity b WHERE b.pid = ANY (pg_blocking_pids(a.pid))), '')
				FROM pg_stat_activity a WHERE a.pid = $1 AND a.state = 'active'`, c.pid).Scan(&wait, &blk)
			if err == nil {
				mu.Lock()
				if wait == "" {
					wait = "running"
				}
				o.Waits[wait]++
				if blk != "" {
					blockers[blk] = true
				}
				mu.Unlock()
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return func() {
		cancel()
		wg.Wait()
		for k := range blockers {
			o.Blockers = append(o.Blockers, k)
		}
		sort.Strings(o.Blockers)
	}
}

// state is the status of the transform the statement names, for the line.
func (c *ddlCell) state(ctx context.Context, sql string) string {
	for _, t := range []string{"dl_one", "dl_grp", "dl_tmp"} {
		if strings.Contains(sql, t) {
			var st string
			if err := c.pool.QueryRow(ctx, `SELECT status FROM trellis.status WHERE target = $1`, t).Scan(&st); err != nil {
				return "absent"
			}
			return st
		}
	}
	return ""
}

func (c *ddlCell) scalar(ctx context.Context, sql string) (string, error) {
	res, err := c.client.Exec(ctx, sql).ReadAll()
	if err != nil {
		return "", err
	}
	if len(res) != 1 || len(res[0].Rows) != 1 {
		return "", fmt.Errorf("%s: expected one row", sql)
	}
	return string(res[0].Rows[0][0]), nil
}

// awaitLive waits through the proxy's await_live for each target, records
// how long the build took, and checks each against its definition.
func (c *ddlCell) awaitLive(ctx context.Context, what string, targets ...string) error {
	if _, done := c.liveSec[what]; done {
		return nil // the same wait twice in a row (a step before it was refused)
	}
	t0 := time.Now()
	for _, t := range targets {
		st, err := c.scalar(ctx, fmt.Sprintf(`SELECT trellis.await_live('%s', 1800000)`, t))
		if err != nil {
			return fmt.Errorf("await_live %s: %w", t, err)
		}
		if st != "live" {
			return fmt.Errorf("await_live %s: status %s", t, st)
		}
	}
	c.liveSec[what] = time.Since(t0).Seconds()
	if _, err := c.client.Exec(ctx, `SELECT trellis.await_converged(trellis.watermark_token(), 600000)`).ReadAll(); err != nil {
		return fmt.Errorf("await_converged: %w", err)
	}
	for _, t := range targets {
		var err error
		switch t {
		case "dl_one":
			err = checkSame(ctx, c.pool, "SELECT id, v2, g FROM dl_one", "SELECT id, v * 2, g FROM src")
			if err == nil && c.hasColumn(ctx, "dl_one", "v3") {
				err = checkSame(ctx, c.pool, "SELECT id, v3 FROM dl_one", "SELECT id, v + 1 FROM src")
			}
		case "dl_grp":
			err = checkSame(ctx, c.pool, "SELECT g, s, n FROM dl_grp", "SELECT g, sum(v), count(*) FROM src GROUP BY g")
		}
		if err != nil {
			return fmt.Errorf("oracle after %s, %s: %w", what, t, err)
		}
	}
	return nil
}

func (c *ddlCell) hasColumn(ctx context.Context, table, column string) bool {
	var ok bool
	c.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = $2 AND NOT attisdropped)`, table, column).Scan(&ok)
	return ok
}

// awaitBuilding polls the transform's status every 5 ms until its build has
// started (backfilling) or already ended (live: a small source can build
// between two polls; the line's state_before says which).
func (c *ddlCell) awaitBuilding(ctx context.Context, target string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		var st string
		if err := c.pool.QueryRow(ctx, `SELECT status FROM trellis.status WHERE target = $1`, target).Scan(&st); err != nil {
			return err
		}
		if st == "backfilling" || st == "live" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still %s after a minute", target, st)
		}
		pause(ctx, 5*time.Millisecond)
	}
}

// gone checks that a dropped transform left neither its table nor its
// catalog row.
func (c *ddlCell) gone(ctx context.Context, target string) error {
	var table, row bool
	if err := c.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL, EXISTS (SELECT FROM trellis.status WHERE target = $1)`, target).Scan(&table, &row); err != nil {
		return err
	}
	if table || row {
		return fmt.Errorf("%s still there after DROP TRANSFORM (table %v, status row %v)", target, table, row)
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ddlReport summarises per statement and size: median and p95 (nearest rank)
// of the repetitions, the large/small ratio of medians, the most tuples any
// repetition read from the source, and the goal on the large source's p95.
func ddlReport(b *bench, all []ddlObs, small, large int) {
	type key struct {
		label string
		rows  int
	}
	times := map[key][]float64{}
	reads := map[key]int64{}
	unsupported := map[string]bool{}
	var labels []string
	for _, o := range all {
		if !slices.Contains(labels, o.Label) {
			labels = append(labels, o.Label)
		}
		if o.Unsupported {
			unsupported[o.Label] = true
			continue
		}
		if o.Err != nil {
			continue
		}
		k := key{o.Label, o.Rows}
		times[k] = append(times[k], o.TotalMs)
		reads[k] = max(reads[k], o.SourceRead)
	}
	g := Goal{What: fmt.Sprintf("p95 at %d rows", large), AtMost: true, Bound: ddlGoalMs, Unit: "ms"}
	t := &table{header: []string{"statement", fmt.Sprintf("%d rows p50/p95 ms", small), fmt.Sprintf("%d rows p50/p95 ms", large),
		"large/small (p50)", "source tuples read (max, small/large)", "goal", "verdict"}}
	for _, lb := range labels {
		s, L := times[key{lb, small}], times[key{lb, large}]
		if unsupported[lb] && len(L) == 0 {
			t.add(lb, "-", "-", "-", "-", g.String(), "not on this build (0A000)")
			b.out.emit(map[string]any{"scenario": "apply-latency", "variant": lb, "summary": true, "supported": false, "goal": g.String(), "goal_met": nil})
			continue
		}
		p95 := percentile(L, 95)
		rt := ratio(median(L), median(s))
		met := g.Met(p95)
		if lb == "SELECT 1 (control)" {
			met = nil
		}
		scan := reads[key{lb, large}] >= int64(large)/10
		b.out.emit(map[string]any{"scenario": "apply-latency", "variant": lb, "summary": true,
			"small_rows": small, "large_rows": large, "small_p50_ms": median(s), "small_p95_ms": percentile(s, 95),
			"large_p50_ms": median(L), "large_p95_ms": p95, "large_over_small": rt, "reps": len(L),
			"source_tuples_read_small": reads[key{lb, small}], "source_tuples_read_large": reads[key{lb, large}], "scans_source": scan,
			"goal": g.String(), "goal_met": met})
		v := verdict(met)
		if scan {
			v += ", SCANS THE SOURCE"
		}
		t.add(lb, fmtNum(median(s), 1)+"/"+fmtNum(percentile(s, 95), 1), fmtNum(median(L), 1)+"/"+fmtNum(p95, 1),
			fmtRatio(rt), fmt.Sprintf("%d / %d", reads[key{lb, small}], reads[key{lb, large}]), g.String(), v)
	}
	b.printTable(t)
	// The slowest observation of each statement at the large size, with
	// what it waited on: the first place to look when a goal is missed.
	for _, lb := range labels {
		var worst *ddlObs
		for i := range all {
			o := &all[i]
			if o.Label == lb && o.Rows == large && o.Err == nil && !o.Unsupported && (worst == nil || o.TotalMs > worst.TotalMs) {
				worst = o
			}
		}
		if worst != nil && worst.TotalMs > ddlGoalMs {
			fmt.Fprintf(os.Stderr, "slowest %s at %d rows: %.1f ms (statement %.1f, commit %.1f), state %s, waits %v, blockers %q\n",
				lb, large, worst.TotalMs, worst.StmtMs, worst.CommitMs, worst.StateBefore, worst.Waits, worst.Blockers)
		}
	}
}
