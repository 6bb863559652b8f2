package main

// B6 group-contention: fold rate into a SUM/COUNT(*) aggregate at 400 and at
// 40,000 groups. Per cell: a fresh database, gc_src(id, g, v) with the
// aggregate live on it (default engine settings), a warm-up row, then one
// writer commits N rows as fast as it can in 200-row INSERT ... SELECT
// statements (g = id % groups) while the engine drains. The fold rate is N
// over the time from the first write until the target has folded all N rows
// (sum of COUNT(*) over the groups); the in-window rate is the slope of
// folded rows while the writer runs. Schedule per repetition: 400, 40000,
// 400 (the 400-group control brackets the variant).

import (
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-proxy/trellis-proxy/engine"
)

type foldResult struct {
	Rate, InWindow, WriterRate float64
	WriterSecs, TotalSecs      float64
	Err                        error
}

func runGroupContention(ctx context.Context, b *bench) error {
	l, err := startLab(ctx, b, "group-contention")
	if err != nil {
		return err
	}
	defer l.stop()
	rows := envInt("TRELLIS_BENCH_B6_ROWS", 100_000)
	if b.cfg.Quick {
		rows = envInt("TRELLIS_BENCH_B6_ROWS", 20_000)
	}
	const perCommit = 200
	fmt.Fprintf(os.Stderr, "B6: %d rows per cell in %d-row commits from 1 writer; %d reps × (400, 40000, 400 groups); default engine settings (2 drain workers, seal 50ms)\n",
		rows, perCommit, b.cfg.Reps)
	var ratios, drifts, ctl, vari, ctlWin, variWin []float64
	for rep := range b.cfg.Reps {
		res := map[string][]foldResult{}
		for pos, v := range schedule(rep, "400", []string{"40000"}) {
			groups, _ := strconv.Atoi(v)
			r := foldCell(ctx, l, groups, rows, perCommit)
			if r.Err != nil {
				b.failf("group-contention %d groups rep %d: %v", groups, rep, r.Err)
			}
			res[v] = append(res[v], r)
			b.out.emit(map[string]any{"scenario": "group-contention", "variant": v + " groups", "shape": "sum+count", "rep": rep, "position": pos,
				"rows": rows, "rows_per_commit": perCommit, "rows_per_sec": r.Rate, "in_window_folded_rows_per_sec": r.InWindow,
				"writer_rows_per_sec": r.WriterRate, "writer_seconds": r.WriterSecs, "total_seconds": r.TotalSecs,
				"generator_bound": r.TotalSecs < r.WriterSecs+0.5, "oracle_ok": r.Err == nil, "error": errString(r.Err)})
			pause(ctx, b.cellWait())
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		c := control(res["400"][0].Rate, res["400"][1].Rate)
		rt := ratio(res["40000"][0].Rate, c)
		ratios = append(ratios, rt)
		drifts = append(drifts, drift(res["400"][0].Rate, res["400"][1].Rate))
		ctl = append(ctl, c)
		vari = append(vari, res["40000"][0].Rate)
		ctlWin = append(ctlWin, control(res["400"][0].InWindow, res["400"][1].InWindow))
		variWin = append(variWin, res["40000"][0].InWindow)
		g := Goal{What: "rate(40000)/rate(400)", Bound: 0.3}
		b.out.emit(map[string]any{"scenario": "group-contention", "variant": "40000 groups", "rep": rep, "share_of_control": rt,
			"drift": drifts[len(drifts)-1], "goal": g.String(), "goal_met": g.Met(rt)})
	}
	m := median(ratios)
	g := Goal{What: "rate(40000)/rate(400)", Bound: 0.3}
	b.out.emit(map[string]any{"scenario": "group-contention", "summary": true, "share_of_control": m, "goal": g.String(), "goal_met": g.Met(m)})
	t := &table{header: []string{"B6", "400 groups rows/s", "40,000 groups rows/s", "ratio (median)", "per-rep ratios", "in-window 400 / 40,000", "max drift", "goal", "verdict"}}
	t.add("SUM+COUNT fold", fmtNum(median(ctl), 0), fmtNum(median(vari), 0), fmtRatio(m), fmtList(ratios, 2),
		fmtNum(median(ctlWin), 0)+" / "+fmtNum(median(variWin), 0), fmtPct(maxAbs(drifts)), g.String(), verdict(g.Met(m)))
	b.printTable(t)
	return nil
}

// foldCell measures one cell: fresh database, live aggregate, N rows written,
// time until all are folded, oracle.
func foldCell(ctx context.Context, l *engineLab, groups, rows, perCommit int) (r foldResult) {
	r.Rate, r.InWindow, r.WriterRate = math.NaN(), math.NaN(), math.NaN()
	pool, _, drop, err := l.newDB(ctx, 8)
	if err != nil {
		r.Err = err
		return r
	}
	defer drop()
	if _, err := pool.Exec(ctx, `CREATE TABLE gc_src (id bigint PRIMARY KEY, g int, v bigint)`); err != nil {
		r.Err = err
		return r
	}
	e, err := startEngine(ctx, pool, engine.Config{})
	if err != nil {
		r.Err = err
		return r
	}
	defer e.stop()
	if err := define(ctx, e, pool, sumCount("gc_agg", "gc_src", "g", "v"), 2*time.Minute); err != nil {
		r.Err = err
		return r
	}
	// Warm-up row with a reserved negative id, through to the target.
	if _, err := pool.Exec(ctx, `INSERT INTO gc_src VALUES (-1, 0, 0)`); err != nil {
		r.Err = err
		return r
	}
	if err := e.converge(ctx, time.Minute); err != nil {
		r.Err = fmt.Errorf("warm-up: %w", err)
		return r
	}

	folded := func() (float64, error) {
		var n int64
		err := pool.QueryRow(ctx, `SELECT coalesce(sum(n), 0) - 1 FROM gc_agg`).Scan(&n)
		return float64(n), err
	}
	start := time.Now()
	writerDone := make(chan error, 1)
	var writerEnd time.Time
	go func() {
		writerDone <- writeRows(ctx, pool, rows, perCommit, groups)
	}()
	var ss []sample
	writing := true
	deadline := start.Add(5 * time.Minute)
	for k := 0; ; k++ {
		select {
		case err := <-writerDone:
			writerEnd = time.Now()
			writing = false
			if err != nil {
				r.Err = fmt.Errorf("writer: %w", err)
				return r
			}
		case <-time.After(ditherInterval(k, 100*time.Millisecond)):
		case <-ctx.Done():
			r.Err = ctx.Err()
			return r
		}
		n, err := folded()
		if err != nil {
			r.Err = err
			return r
		}
		now := time.Now()
		if writing {
			ss = append(ss, sample{T: now.Sub(start).Seconds(), N: n})
		}
		if !writing && n >= float64(rows) {
			r.TotalSecs = now.Sub(start).Seconds()
			break
		}
		if now.After(deadline) {
			r.Err = fmt.Errorf("only %.0f of %d rows folded after %s", n, rows, deadline.Sub(start))
			return r
		}
	}
	r.WriterSecs = writerEnd.Sub(start).Seconds()
	r.WriterRate = float64(rows) / r.WriterSecs
	r.Rate = float64(rows) / r.TotalSecs
	r.InWindow = slope(ss, 0.25*r.WriterSecs, r.WriterSecs, 4)
	if err := e.converge(ctx, time.Minute); err != nil {
		r.Err = err
		return r
	}
	got, want := sumCountOracle("gc_agg", "gc_src", "g", "v")
	r.Err = checkSame(ctx, pool, got, want)
	if r.Err == nil {
		r.Err = e.stop()
	}
	return r
}

// writeRows commits rows source rows (ids 1..rows) in perCommit-row
// statements on one connection, group = id % groups.
func writeRows(ctx context.Context, pool *pgxpool.Pool, rows, perCommit, groups int) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	for lo := 1; lo <= rows; lo += perCommit {
		hi := min(lo+perCommit-1, rows)
		if _, err := conn.Exec(ctx, `INSERT INTO gc_src (id, g, v) SELECT i, i % $3, i % 97 FROM generate_series($1::bigint, $2::bigint) i`,
			lo, hi, groups); err != nil {
			return err
		}
	}
	return nil
}
