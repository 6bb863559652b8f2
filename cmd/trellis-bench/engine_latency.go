package main

// B7 hop-ladder, depth 1: commit-to-visible latency of a 1-1 target under a
// paced writer at ~1,000 single-row commits/s, with the engine's DEFAULT
// intervals (SealInterval 50ms, StagingInterval 500ms, PollInterval 1s, 2
// drain workers). Writers (4 connections sharing one schedule: commit k is due
// at k/rate) record when each commit returns; a watcher on its own connection
// polls the target every 5 ms for ids above its low-water mark and records
// when each first appears. A row that never appears within the grace counts
// as infinite.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-proxy/trellis-proxy/engine"
)

type latencyResult struct {
	Lat        []float64 // ms per row, +Inf for a row never seen (the first watched target)
	LatBy      map[string][]float64
	Offered    float64 // commits/s actually committed in the window
	Summary    latencySummary
	OracleErr  error
	HarnessErr error
}

func runHopLadder(ctx context.Context, b *bench) error {
	l, err := startLab(ctx, b, "hop-ladder")
	if err != nil {
		return err
	}
	defer l.stop()
	const rate = 1000.0
	window := 2 * b.cfg.Duration
	if window > 60*time.Second {
		window = 60 * time.Second
	}
	cfg := engine.Config{} // the defaults, on purpose
	fmt.Fprintf(os.Stderr, "B7: depth 1, %g commits/s of 1 row from 4 connections, %s per rep, %d reps; engine defaults (seal 50ms, poll 1s, 2 drain workers); watcher polls every 5 ms\n",
		rate, window, b.cfg.Reps)
	gp50 := Goal{What: "p50", AtMost: true, Bound: 50, Unit: "ms"}
	gp99 := Goal{What: "p99", AtMost: true, Bound: 250, Unit: "ms"}
	var p50s, p99s, maxs, offered []float64
	var all []float64
	for rep := range b.cfg.Reps {
		r := latencyCell(ctx, l, cfg, rate, window, hopShape)
		if r.HarnessErr != nil {
			return r.HarnessErr
		}
		if r.OracleErr != nil {
			b.failf("hop-ladder rep %d oracle: %v", rep, r.OracleErr)
		}
		s := r.Summary
		p50s, p99s, maxs, offered = append(p50s, s.P50), append(p99s, s.P99), append(maxs, s.Max), append(offered, r.Offered)
		all = append(all, r.Lat...)
		b.out.emit(map[string]any{"scenario": "hop-ladder", "variant": "depth 1", "shape": "1 row/commit", "rep": rep,
			"commits_per_sec": r.Offered, "generator_bound": generatorBound(r.Offered, rate), "observations": s.N, "missing": s.Missing,
			"visible_p50_ms": s.P50, "visible_p99_ms": s.P99, "visible_max_ms": s.Max, "visible_mean_ms": s.Mean,
			"seal_interval_ms": 50, "poll_interval_ms": 1000, "oracle_ok": r.OracleErr == nil, "error": errString(r.OracleErr)})
		pause(ctx, b.cellWait())
	}
	pooled := summarizeLatencies(all)
	m50, m99 := median(p50s), median(p99s)
	met50, met99 := latencyMet(gp50, m50), latencyMet(gp99, m99)
	b.out.emit(map[string]any{"scenario": "hop-ladder", "variant": "depth 1", "summary": true,
		"visible_p50_ms": m50, "visible_p99_ms": m99, "pooled_p50_ms": pooled.P50, "pooled_p99_ms": pooled.P99, "pooled_max_ms": pooled.Max,
		"goal": gp50.String() + ", " + gp99.String(), "goal_met": and(met50, met99)})
	t := &table{header: []string{"B7 depth 1", "commits/s", "p50 ms (median)", "p99 ms (median)", "max ms", "per-rep p50/p99", "pooled p50/p99", "rows never seen", "goal", "verdict"}}
	missing := 0
	for _, x := range all {
		if math.IsInf(x, 1) {
			missing++
		}
	}
	per := ""
	for i := range p50s {
		if i > 0 {
			per += ", "
		}
		per += fmtNum(p50s[i], 0) + "/" + fmtNum(p99s[i], 0)
	}
	t.add("1-1, default intervals", fmtNum(median(offered), 0), fmtNum(m50, 1), fmtNum(m99, 1), fmtNum(pooled.Max, 0), per,
		fmtNum(pooled.P50, 1)+"/"+fmtNum(pooled.P99, 1), fmt.Sprint(missing), gp50.String()+", "+gp99.String(),
		verdict(met50)+", "+verdict(met99))
	b.printTable(t)
	return nil
}

// latencyMet is Goal.Met, except that an infinite latency (rows that never
// landed) is a miss rather than "not measured".
func latencyMet(g Goal, v float64) *bool {
	if math.IsInf(v, 1) {
		f := false
		return &f
	}
	return g.Met(v)
}

func and(a, b *bool) *bool {
	if a == nil || b == nil {
		return nil
	}
	v := *a && *b
	return &v
}

// latencyShape is what a latency cell builds and watches; hopShape is B7's.
type latencyShape struct {
	Source string        // creates src; the paced writer inserts (id, id) into src(id, val)
	Specs  []engine.Spec // defined and awaited live before the window
	Watch  []string      // targets whose first sight of each id is recorded; the first is Lat
	Insert string        // the paced writer's statement: $1 is the id
	// Setup runs after the warm-up row has landed, before the window.
	Setup func(ctx context.Context, pool *pgxpool.Pool) error
	// During runs alongside the writers until its context ends.
	During func(ctx context.Context, pool *pgxpool.Pool) error
	// Settle runs after the window, before the final convergence (which a
	// held key would block: its band stays pending until released).
	Settle func(ctx context.Context, pool *pgxpool.Pool) error
	// Oracle checks the targets once everything has converged.
	Oracle func(ctx context.Context, pool *pgxpool.Pool) error
}

var hopShape = latencyShape{
	Source: `CREATE TABLE src (id bigint PRIMARY KEY, val numeric)`,
	Specs:  []engine.Spec{oneToOne("hop1", "src", engine.Field{Name: "val", Expr: col("val")})},
	Watch:  []string{"hop1"},
	Insert: `INSERT INTO src VALUES ($1::bigint, $1::bigint)`,
	Oracle: func(ctx context.Context, pool *pgxpool.Pool) error {
		return checkSame(ctx, pool, "SELECT id, val FROM hop1", "SELECT id, val FROM src")
	},
}

func latencyCell(ctx context.Context, l *engineLab, cfg engine.Config, rate float64, window time.Duration, shape latencyShape) (r latencyResult) {
	pool, _, drop, err := l.newDB(ctx, 12)
	if err != nil {
		r.HarnessErr = err
		return r
	}
	defer drop()
	if _, err := pool.Exec(ctx, shape.Source); err != nil {
		r.HarnessErr = err
		return r
	}
	e, err := startEngine(ctx, pool, cfg)
	if err != nil {
		r.HarnessErr = err
		return r
	}
	defer e.stop()
	for _, spec := range shape.Specs {
		if err := define(ctx, e, pool, spec, time.Minute); err != nil {
			r.HarnessErr = err
			return r
		}
	}
	if _, err := pool.Exec(ctx, shape.Insert, -1); err != nil {
		r.HarnessErr = err
		return r
	}
	if err := e.converge(ctx, time.Minute); err != nil {
		r.HarnessErr = fmt.Errorf("warm-up: %w", err)
		return r
	}
	if shape.Setup != nil {
		if err := shape.Setup(ctx, pool); err != nil {
			r.HarnessErr = fmt.Errorf("setup: %w", err)
			return r
		}
	}

	var during func(context.Context) error
	if shape.During != nil {
		during = func(ctx context.Context) error { return shape.During(ctx, pool) }
	}
	paced, err := runPaced(ctx, pool, pacedLoad{Rate: rate, Window: window, Insert: shape.Insert, Watch: shape.Watch, During: during})
	if err != nil {
		r.HarnessErr = err
		return r
	}
	r.Offered, r.LatBy = paced.Offered, paced.LatBy
	r.Lat = r.LatBy[shape.Watch[0]]
	r.Summary = summarizeLatencies(r.Lat)
	if shape.Settle != nil {
		if err := shape.Settle(ctx, pool); err != nil {
			r.OracleErr = err
			return r
		}
	}
	if err := e.converge(ctx, time.Minute); err != nil {
		r.OracleErr = err
		return r
	}
	r.OracleErr = shape.Oracle(ctx, pool)
	return r
}

// pacedLoad is B7's method of measuring commit-to-visible: writers on 4
// connections share one schedule (commit k is due at k/Rate) and record when
// each commit returns; a watcher on its own connection polls each watched
// target every 5 ms for ids above its low-water mark and records when each
// first appears. A row never seen within the grace counts as infinite.
type pacedLoad struct {
	Rate   float64
	Window time.Duration // the writers stop at its end, or when Stop closes
	Insert string        // $1 is the id, 1, 2, ...
	Watch  []string
	// During runs alongside the writers until the window ends.
	During func(ctx context.Context) error
	// Stop ends the window early (nil: never).
	Stop <-chan struct{}
}

type pacedResult struct {
	Offered float64              // commits/s committed in the window
	LatBy   map[string][]float64 // ms per committed row, per watched target
}

func runPaced(ctx context.Context, pool *pgxpool.Pool, load pacedLoad) (pacedResult, error) {
	var r pacedResult
	rate, window := load.Rate, load.Window
	n := int(rate*window.Seconds()) + 1
	commitAt := make([]atomic.Int64, n+1) // unix nanos; index = id
	seenAt := make([][]int64, len(load.Watch))
	for i := range seenAt {
		seenAt[i] = make([]int64, n+1)
	}
	var next atomic.Int64
	var committed atomic.Int64
	start := time.Now().Add(50 * time.Millisecond)
	end := start.Add(window)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	if load.Stop != nil {
		go func() {
			select {
			case <-load.Stop:
				wcancel()
			case <-wctx.Done():
			}
		}()
	}
	var wg sync.WaitGroup
	var werr atomic.Value
	duringDone := make(chan error, 1)
	if load.During != nil {
		go func() { duringDone <- load.During(wctx) }()
	} else {
		duringDone <- nil
	}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := pool.Acquire(wctx)
			if err != nil {
				if wctx.Err() == nil {
					werr.Store(err)
				}
				return
			}
			defer conn.Release()
			for {
				k := next.Add(1)
				if k > int64(n) {
					return
				}
				due := start.Add(time.Duration(float64(k-1) / rate * float64(time.Second)))
				if due.After(end) {
					return
				}
				if d := time.Until(due); d > 0 {
					select {
					case <-time.After(d):
					case <-wctx.Done():
					}
				}
				// Never send a statement on a cancelled context: a COMMIT cut
				// off by cancellation can still land.
				if wctx.Err() != nil {
					return
				}
				if _, err := conn.Exec(context.Background(), load.Insert, k); err != nil {
					werr.Store(err)
					return
				}
				commitAt[k].Store(time.Now().UnixNano())
				committed.Add(1)
			}
		}()
	}

	// The watcher: one connection, every watched target each round.
	wconn, err := pool.Acquire(ctx)
	if err != nil {
		return r, err
	}
	defer wconn.Release()
	low := make([]int64, len(load.Watch)) // every id ≤ low[i] has been seen in target i
	writersDone := make(chan struct{})
	go func() { wg.Wait(); close(writersDone) }()
	var grace time.Time
	for {
		for ti, target := range load.Watch {
			rows, err := wconn.Query(ctx, `SELECT id FROM `+target+` WHERE id > $1`, low[ti])
			if err != nil {
				return r, err
			}
			now := time.Now().UnixNano()
			for rows.Next() {
				var id int64
				if err := rows.Scan(&id); err != nil {
					return r, err
				}
				if id >= 1 && id <= int64(n) && seenAt[ti][id] == 0 {
					seenAt[ti][id] = now
				}
			}
			if err := rows.Err(); err != nil {
				return r, err
			}
			for low[ti] < int64(n) && seenAt[ti][low[ti]+1] != 0 {
				low[ti]++
			}
		}
		if grace.IsZero() {
			select {
			case <-writersDone:
				grace = time.Now().Add(5 * time.Second)
			default:
			}
		}
		if !grace.IsZero() && (slices.Min(low) >= committed.Load() || time.Now().After(grace)) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	wcancel()
	if err := <-duringDone; err != nil && !errors.Is(err, context.Canceled) {
		return r, fmt.Errorf("during the window: %w", err)
	}
	if v := werr.Load(); v != nil {
		return r, fmt.Errorf("writer: %v", v)
	}
	c := committed.Load()
	elapsed := min(window, time.Since(start))
	if elapsed <= 0 {
		elapsed = window
	}
	r.Offered = float64(c) / elapsed.Seconds()
	r.LatBy = make(map[string][]float64, len(load.Watch))
	for ti, target := range load.Watch {
		var lat []float64
		for k := int64(1); k <= int64(n); k++ {
			ca := commitAt[k].Load()
			if ca == 0 {
				continue
			}
			if seenAt[ti][k] == 0 {
				lat = append(lat, math.Inf(1))
				continue
			}
			lat = append(lat, max(0, float64(seenAt[ti][k]-ca)/1e6))
		}
		r.LatBy[target] = lat
	}
	return r, nil
}
