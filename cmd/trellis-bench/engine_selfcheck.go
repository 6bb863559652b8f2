package main

// Self-check under writes (issue 17): a standard self-check (surface §9) of
// a 1-1 target and of a 100,000-group SUM/COUNT target over posts(id,
// author, word_count, byte_size), 1,000,000 rows, author = id % 100000,
// while paced writers commit 500 single-row UPDATEs/s from 4 connections.
// Per target and repetition, the writers run throughout and the cells
// follow each other: a writers-only window, the self-check (start to
// verdict), a writers-only window again, then the floor: one plain
// comparison query of the same tables (target EXCEPT ALL its definition
// recomputed, both ways, in one statement). The writer figure is the
// commit rate inside the check against the mean of the two bracketing
// windows; the check's figures are its total time, its pages per second
// and its keys per second, against the floor's time.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-proxy/trellis-proxy/engine"
	"github.com/trellis-proxy/trellis-proxy/virtualtables"
)

// scKind is one audited target shape.
type scKind struct {
	Name   string
	Target string
	Spec   func(target string) engine.Spec
	// Floor counts the rows of target and its recompute that differ, both
	// ways, in one statement.
	Floor string
}

var scKinds = []scKind{
	{
		Name:   "1-1",
		Target: "sc_one",
		Spec: func(t string) engine.Spec {
			return oneToOne(t, "posts", engine.Field{Name: "author", Expr: col("author")},
				engine.Field{Name: "total_size", Expr: col("word_count") + " + " + col("byte_size")})
		},
		Floor: `SELECT count(*) FROM (
  (SELECT id, author, total_size FROM sc_one EXCEPT ALL SELECT id, author, word_count + byte_size FROM posts)
  UNION ALL
  (SELECT id, author, word_count + byte_size FROM posts EXCEPT ALL SELECT id, author, total_size FROM sc_one)) x`,
	},
	{
		Name:   "100k groups",
		Target: "sc_agg",
		Spec:   func(t string) engine.Spec { return sumCount(t, "posts", "author", "word_count") },
		Floor: `SELECT count(*) FROM (
  (SELECT author, s, n FROM sc_agg EXCEPT ALL SELECT author, sum(word_count), count(*) FROM posts GROUP BY author)
  UNION ALL
  (SELECT author, sum(word_count), count(*) FROM posts GROUP BY author EXCEPT ALL SELECT author, s, n FROM sc_agg)) x`,
	},
}

// scWriters are the paced writers of a self-check cell: commit k is due at
// k/rate; each commit's return time and latency are kept.
type scWriters struct {
	mu      sync.Mutex
	commits []time.Time
	lat     []float64 // ms
	err     atomic.Value
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func startSCWriters(ctx context.Context, pool *pgxpool.Pool, rate float64, rows int) *scWriters {
	w := &scWriters{}
	wctx, cancel := context.WithCancel(ctx)
	w.cancel = cancel
	var next atomic.Int64
	start := time.Now()
	for c := range 4 {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(c), uint64(time.Now().UnixNano())))
			conn, err := pool.Acquire(wctx)
			if err != nil {
				if wctx.Err() == nil {
					w.err.Store(err)
				}
				return
			}
			defer conn.Release()
			for {
				k := next.Add(1)
				due := start.Add(time.Duration(float64(k-1) / rate * float64(time.Second)))
				if d := time.Until(due); d > 0 {
					select {
					case <-wctx.Done():
						return
					case <-time.After(d):
					}
				}
				// Never send a statement on a cancelled context.
				if wctx.Err() != nil {
					return
				}
				t0 := time.Now()
				if _, err := conn.Exec(context.Background(), `UPDATE posts SET word_count = word_count + 1 WHERE id = $1`,
					1+rnd.IntN(rows)); err != nil {
					w.err.Store(err)
					return
				}
				t1 := time.Now()
				w.mu.Lock()
				w.commits = append(w.commits, t1)
				w.lat = append(w.lat, float64(t1.Sub(t0).Microseconds())/1000)
				w.mu.Unlock()
			}
		}()
	}
	return w
}

func (w *scWriters) stop() error {
	w.cancel()
	w.wg.Wait()
	if err, ok := w.err.Load().(error); ok {
		return err
	}
	return nil
}

// window is the commit rate and commit latencies between from and to.
func (w *scWriters) window(from, to time.Time) (rate float64, lat latencySummary) {
	w.mu.Lock()
	defer w.mu.Unlock()
	lo := sort.Search(len(w.commits), func(i int) bool { return !w.commits[i].Before(from) })
	hi := sort.Search(len(w.commits), func(i int) bool { return w.commits[i].After(to) })
	if hi < lo {
		hi = lo
	}
	// Commits are appended under the lock in completion order, so the
	// slice is sorted by time.
	ms := append([]float64(nil), w.lat[lo:hi]...)
	return float64(hi-lo) / to.Sub(from).Seconds(), summarizeLatencies(ms)
}

// scCell is one repetition of one kind.
type scCell struct {
	CheckSecs, FloorSecs        float64
	Pages, Keys                 int64
	Outcome                     string
	Divergences                 int64
	FloorDiffs                  int64
	RateBefore, RateCheck       float64
	RateAfter, RateFloor        float64
	LatBase, LatCheck, LatFloor latencySummary
}

func runSelfCheckBench(ctx context.Context, b *bench) error {
	rows := envInt("TRELLIS_BENCH_SC_ROWS", 1_000_000)
	if b.cfg.Quick {
		rows = envInt("TRELLIS_BENCH_SC_ROWS", 50_000)
	}
	groups := min(100_000, max(rows/10, 1))
	const rate = 500.0
	win := 10 * time.Second
	if b.cfg.Quick {
		win = 3 * time.Second
	}
	pool, stop, err := labDB(ctx, b, "self-check", 12)
	if err != nil {
		return err
	}
	defer stop()
	if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE posts (id bigint PRIMARY KEY, author int, word_count int, byte_size int);
		INSERT INTO posts SELECT g, g %% %d, g %% 1000, g %% 7919 FROM generate_series(1, %d) g`, groups, rows)); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE posts"); err != nil {
		return err
	}
	e, err := startEngine(ctx, pool, engine.Config{})
	if err != nil {
		return err
	}
	defer e.stop()
	if err := virtualtables.InstallOptions(ctx, pool, virtualtables.Options{}); err != nil {
		return fmt.Errorf("install the SQL surface: %w", err)
	}
	for _, k := range scKinds {
		if err := define(ctx, e, pool, k.Spec(k.Target), 15*time.Minute); err != nil {
			return err
		}
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE sc_one, sc_agg"); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "self-check: %d source rows, %d groups; %g single-row UPDATEs/s from 4 connections throughout; %d reps × (writers %s, standard self-check, writers %s, EXCEPT ALL floor) per target; engine defaults (2 drain workers, pages of 10,000 keys)\n",
		rows, groups, rate, b.cfg.Reps, win, win)

	gw := Goal{What: "writers during check / without", Bound: 0.9}
	t := &table{header: []string{"self-check", "rows", "check s (median)", "pages/s", "keys/s", "EXCEPT ALL s", "check/floor", "writes/s without / during", "ratio (median)", "commit p99 ms without / during", "outcomes", "goal", "verdict"}}
	for _, k := range scKinds {
		var cells []scCell
		for rep := range b.cfg.Reps {
			c, err := selfCheckCell(ctx, e, pool, k, rows, rate, win)
			if err != nil {
				return fmt.Errorf("%s rep %d: %w", k.Name, rep, err)
			}
			if c.Outcome != "converged" {
				b.failf("self-check %s rep %d: outcome %s with %d divergences under writes (want converged)", k.Name, rep, c.Outcome, c.Divergences)
			}
			wr := ratio(c.RateCheck, control(c.RateBefore, c.RateAfter))
			b.out.emit(map[string]any{"scenario": "self-check", "variant": "standard", "shape": k.Name, "rep": rep, "rows": rows,
				"check_seconds": c.CheckSecs, "pages": c.Pages, "keys_compared": c.Keys, "pages_per_sec": float64(c.Pages) / c.CheckSecs,
				"keys_per_sec": float64(c.Keys) / c.CheckSecs, "outcome": c.Outcome, "divergences": c.Divergences,
				"floor_seconds": c.FloorSecs, "floor_differing_rows": c.FloorDiffs, "check_over_floor": c.CheckSecs / c.FloorSecs,
				"writes_per_sec_before": c.RateBefore, "writes_per_sec_during": c.RateCheck, "writes_per_sec_after": c.RateAfter,
				"writes_per_sec_during_floor": c.RateFloor, "writer_ratio": wr,
				"commit_p50_ms_without": c.LatBase.P50, "commit_p99_ms_without": c.LatBase.P99,
				"commit_p50_ms_during": c.LatCheck.P50, "commit_p99_ms_during": c.LatCheck.P99,
				"commit_p99_ms_during_floor": c.LatFloor.P99, "goal": gw.String(), "goal_met": gw.Met(wr)})
			cells = append(cells, c)
			pause(ctx, b.cellWait())
		}
		var secs, pps, kps, floor, over, ratios, without, during, p99w, p99d []float64
		outcomes := map[string]int{}
		for _, c := range cells {
			secs = append(secs, c.CheckSecs)
			pps = append(pps, float64(c.Pages)/c.CheckSecs)
			kps = append(kps, float64(c.Keys)/c.CheckSecs)
			floor = append(floor, c.FloorSecs)
			over = append(over, c.CheckSecs/c.FloorSecs)
			without = append(without, control(c.RateBefore, c.RateAfter))
			during = append(during, c.RateCheck)
			ratios = append(ratios, ratio(c.RateCheck, control(c.RateBefore, c.RateAfter)))
			p99w = append(p99w, c.LatBase.P99)
			p99d = append(p99d, c.LatCheck.P99)
			outcomes[c.Outcome]++
		}
		m := median(ratios)
		b.out.emit(map[string]any{"scenario": "self-check", "shape": k.Name, "summary": true, "rows": rows, "check_seconds": median(secs),
			"pages_per_sec": median(pps), "floor_seconds": median(floor), "check_over_floor": median(over), "writer_ratio": m,
			"goal": gw.String(), "goal_met": gw.Met(m)})
		oc := ""
		for o, n := range outcomes {
			if oc != "" {
				oc += ", "
			}
			oc += fmt.Sprintf("%s %d/%d", o, n, len(cells))
		}
		t.add(k.Name, fmt.Sprint(rows), fmtNum(median(secs), 2), fmtNum(median(pps), 1), fmtNum(median(kps), 0), fmtNum(median(floor), 2),
			fmtNum(median(over), 1)+"×", fmtNum(median(without), 0)+" / "+fmtNum(median(during), 0), fmtRatio(m)+" ("+fmtList(ratios, 2)+")",
			fmtNum(median(p99w), 1)+" / "+fmtNum(median(p99d), 1), oc, gw.String(), verdict(gw.Met(m)))
	}
	b.printTable(t)
	return nil
}

// selfCheckCell runs one repetition of kind k under the paced writers.
func selfCheckCell(ctx context.Context, e *runningEngine, pool *pgxpool.Pool, k scKind, rows int, rate float64, win time.Duration) (c scCell, err error) {
	w := startSCWriters(ctx, pool, rate, rows)
	defer func() {
		if werr := w.stop(); werr != nil && err == nil {
			err = fmt.Errorf("writer: %w", werr)
		}
	}()
	pause(ctx, time.Second) // warm-up: the writers' first commits, the drain's first pages
	t0 := time.Now()
	pause(ctx, win)
	t1 := time.Now()
	c.RateBefore, c.LatBase = w.window(t0, t1)

	var id int64
	if err := pool.QueryRow(ctx, `SELECT id FROM trellis.self_check($1, 30000, 'standard')`, k.Target).Scan(&id); err != nil {
		return c, fmt.Errorf("self_check: %w", err)
	}
	c.Outcome, err = e.AwaitSelfCheck(ctx, id, 30*time.Minute)
	if err != nil {
		return c, fmt.Errorf("await_self_check: %w", err)
	}
	// The job's own clock: queued to finished, as an operator sees it.
	run, err := e.SelfCheckRun(ctx, id)
	if err != nil {
		return c, err
	}
	c.Pages, c.Keys, c.Divergences = run.Pages, run.Rows, run.Divergences
	secs := run.Took.Seconds()
	t2 := time.Now()
	c.CheckSecs = secs
	c.RateCheck, c.LatCheck = w.window(t1, t2)

	pause(ctx, win)
	t3 := time.Now()
	c.RateAfter, _ = w.window(t2, t3)
	if ctx.Err() != nil {
		return c, ctx.Err()
	}

	start := time.Now()
	if err := pool.QueryRow(ctx, k.Floor).Scan(&c.FloorDiffs); err != nil {
		return c, fmt.Errorf("floor: %w", err)
	}
	t4 := time.Now()
	c.FloorSecs = t4.Sub(start).Seconds()
	c.RateFloor, c.LatFloor = w.window(t3, t4)
	if math.IsNaN(c.RateCheck) {
		return c, errors.New("no writer figures")
	}
	return c, nil
}
