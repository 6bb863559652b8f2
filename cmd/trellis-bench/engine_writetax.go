package main

// B2 write-tax: what capture costs the writer. Two identical tables in one
// database, wt_none (no capture) and wt_cap (a 1-1 transform is defined on
// it, so the capture triggers are installed); the engine is stopped once the
// transform is live, so nothing drains while writers are timed (spec: "Nothing
// drains"). Each shape runs none, trigger, none per repetition on one
// connection; the ratio is trigger over the mean of the bracketing controls.
// Every cell runs directly against Postgres and then through the proxy (its
// engine neither stages nor drains), as the spec's B2 asks. After the cells
// the engine drains the backlog and the target is compared with its
// definition.

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-proxy/trellis-proxy/engine"
)

// writeShape is one statement shape of B2.
type writeShape struct {
	Name string
	Rows int     // rows per statement
	Goal float64 // trigger/none ≥ Goal
	// stmt returns the SQL and arguments of the next statement on table t.
	stmt func(t string, next *int64, preload int64, rng *rand.Rand) (string, []any)
}

var writeShapes = []writeShape{
	{Name: "insert 1 row", Rows: 1, Goal: 0.7, stmt: func(t string, next *int64, _ int64, _ *rand.Rand) (string, []any) {
		*next++
		return "INSERT INTO " + t + " (id, val) VALUES ($1, $2)", []any{*next, *next % 1000}
	}},
	{Name: "update 1 row", Rows: 1, Goal: 0.7, stmt: func(t string, _ *int64, preload int64, rng *rand.Rand) (string, []any) {
		return "UPDATE " + t + " SET val = val + 1 WHERE id = $1", []any{1 + rng.Int64N(preload)}
	}},
	{Name: "insert 1000 rows", Rows: 1000, Goal: 0.5, stmt: func(t string, next *int64, _ int64, _ *rand.Rand) (string, []any) {
		lo := *next + 1
		*next += 1000
		return "INSERT INTO " + t + " (id, val) SELECT g, g % 1000 FROM generate_series($1::bigint, $2::bigint) g", []any{lo, *next}
	}},
	{Name: "update 1000 rows", Rows: 1000, Goal: 0.5, stmt: func(t string, _ *int64, preload int64, rng *rand.Rand) (string, []any) {
		lo := 1 + rng.Int64N(preload-1000)
		return "UPDATE " + t + " SET val = val + 1 WHERE id BETWEEN $1 AND $1 + 999", []any{lo}
	}},
}

func runWriteTax(ctx context.Context, b *bench) error {
	l, err := startLab(ctx, b, "write-tax")
	if err != nil {
		return err
	}
	defer l.stop()
	pool, db, drop, err := l.newDB(ctx, 8)
	if err != nil {
		return err
	}
	defer drop()

	preload := int64(100_000)
	if b.cfg.Quick {
		preload = 20_000
	}
	for _, t := range []string{"wt_none", "wt_cap"} {
		if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %[1]s (id bigint PRIMARY KEY, val numeric);
			INSERT INTO %[1]s SELECT g, g %% 1000 FROM generate_series(1, %[2]d) g`, t, preload)); err != nil {
			return err
		}
		if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+t); err != nil {
			return err
		}
	}
	e, err := startEngine(ctx, pool, engine.Config{})
	if err != nil {
		return err
	}
	if err := define(ctx, e, pool, oneToOne("wt_target", "wt_cap", engine.Field{Name: "val", Expr: col("val")}), 5*time.Minute); err != nil {
		e.stop()
		return err
	}
	if err := e.stop(); err != nil {
		return fmt.Errorf("engine stop: %w", err)
	}

	// Short cells: every captured row must be drained afterwards for the
	// oracle (about 900,000 log rows at 3 s and 3 repetitions took 4 minutes).
	dur := min(b.cfg.Duration, time.Duration(envInt("TRELLIS_BENCH_B2_SECONDS", 2))*time.Second)
	if b.cfg.Quick {
		dur = time.Second
	}
	fmt.Fprintf(os.Stderr, "B2: %d shapes × %d reps × (none, trigger, none) × %s on 1 connection; preload %d rows per table; the engine is stopped during the cells\n",
		len(writeShapes), b.cfg.Reps, dur, preload)
	next := map[string]*int64{"wt_none": new(int64), "wt_cap": new(int64)}
	*next["wt_none"], *next["wt_cap"] = preload, preload
	rng := rand.New(rand.NewPCG(1, 2))
	direct, err := writeTaxCells(ctx, b, b2Setup, pool, "direct", dur, preload, next, rng)
	if err != nil {
		return err
	}
	viaProxy, err := writeTaxViaProxy(ctx, b, l, db, dur, preload, next, rng)
	if err != nil {
		return err
	}

	// Correctness: drain what the cells wrote, then the oracle.
	fmt.Fprintln(os.Stderr, "B2: draining the captured writes for the oracle")
	start := time.Now()
	e, err = startEngine(ctx, pool, engine.Config{})
	if err != nil {
		return err
	}
	oracleErr := e.converge(ctx, 10*time.Minute)
	if oracleErr == nil {
		oracleErr = checkSame(ctx, pool, "SELECT id, val FROM wt_target", "SELECT id, val FROM wt_cap")
	}
	if err := e.stop(); err != nil && oracleErr == nil {
		oracleErr = err
	}
	b.out.emit(map[string]any{"scenario": "write-tax", "variant": "trigger", "shape": "oracle", "oracle_ok": oracleErr == nil,
		"drain_seconds": time.Since(start).Seconds(), "error": errString(oracleErr)})
	if oracleErr != nil {
		b.failf("write-tax oracle: %v", oracleErr)
	}

	t := &table{header: []string{"B2 shape", "path", "none stmt/s", "trigger stmt/s", "trigger/none (median)", "per-rep ratios", "max drift",
		"backend CPU share (median)", "per-rep CPU shares", "extra WAL B/row", "goal", "verdict"}}
	paths := []struct {
		name string
		tc   *taxCells
	}{{"direct", direct}, {"proxy", viaProxy}}
	for si, sh := range writeShapes {
		for _, p := range paths {
			if p.tc == nil {
				continue
			}
			tc := p.tc
			m := median(tc.ratios[si])
			g := Goal{What: "trigger/none", Bound: sh.Goal}
			cs := median(tc.cpuShare[si])
			t.add(sh.Name, p.name, fmtNum(median(tc.ctl[si]), 0), fmtNum(median(tc.capv[si]), 0), fmtRatio(m), fmtList(tc.ratios[si], 2),
				fmtPct(maxAbs(tc.drifts[si])), fmtRatio(cs), fmtList(tc.cpuShare[si], 2), fmtNum(median(tc.extraWAL[si]), 0), g.String(), verdict(g.Met(m)))
			b.out.emit(map[string]any{"scenario": "write-tax", "path": p.name, "variant": "trigger", "shape": sh.Name, "summary": true,
				"share_of_control": m, "cpu_share_of_control": cs, "extra_wal_bytes_per_row": median(tc.extraWAL[si]),
				"goal": g.String(), "goal_met": g.Met(m), "oracle_ok": oracleErr == nil})
		}
	}
	b.printTable(t)
	if viaProxy != nil {
		// Spec B2: the tax ratio through the proxy within 0.05 of direct.
		for si, sh := range writeShapes {
			gap := median(viaProxy.ratios[si]) - median(direct.ratios[si])
			within := math.Abs(gap) <= 0.05
			fmt.Fprintf(os.Stderr, "B2 %s: proxy − direct tax ratio %+.2f (goal within ±0.05: %s)\n", sh.Name, gap, verdict(&within))
		}
	}
	fmt.Fprintf(os.Stderr, "oracle (target = SELECT id, val FROM wt_cap after draining, %.1f s): %v\n", time.Since(start).Seconds(), okString(oracleErr))
	return nil
}

// writeTaxViaProxy runs the same cells through the proxy (spec B2: every
// shape on both paths), its engine neither staging nor draining, so still
// nothing drains; the proxy must not amplify the tax (within 0.05 of
// direct). Without a proxy binary, or with TRELLIS_BENCH_B2_PROXY=0, it
// measures nothing and says so.
func writeTaxViaProxy(ctx context.Context, b *bench, l *engineLab, db string, dur time.Duration, preload int64,
	next map[string]*int64, rng *rand.Rand) (*taxCells, error) {
	if os.Getenv("TRELLIS_BENCH_B2_PROXY") == "0" {
		return nil, nil
	}
	bin, err := filepath.Abs(b.cfg.ProxyBin)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(bin); err != nil {
		fmt.Fprintf(os.Stderr, "B2: no proxy binary at %s (make build): the proxy path is not measured\n", bin)
		return nil, nil
	}
	pr, err := l.startProxy(ctx, bin, db, "--staging", "off", "--drain-workers", "0")
	if err != nil {
		return nil, err
	}
	defer pr.Stop()
	ppool, err := pgxpool.New(ctx, "postgres://postgres@"+pr.Addr+"/"+db+"?sslmode=disable&pool_max_conns=2")
	if err != nil {
		return nil, err
	}
	defer ppool.Close()
	return writeTaxCells(ctx, b, b2Setup, ppool, "proxy", dur, preload, next, rng)
}

// taxSetup is what a write-tax run times: its shapes, and the table name
// each variant passes to a shape's stmt (B2: wt_none and wt_cap; J3 passes
// a suffix naming a pair of tables).
type taxSetup struct {
	scenario string
	shapes   []writeShape
	table    map[string]string // "none" and "trigger"
}

var b2Setup = taxSetup{scenario: "write-tax", shapes: writeShapes, table: map[string]string{"none": "wt_none", "trigger": "wt_cap"}}

// taxCells are one path's B2 results, per shape and repetition.
type taxCells struct {
	ratios, drifts, ctl, capv, cpuShare, extraWAL [][]float64
}

// writeTaxCells runs every shape's none, trigger, none cells per
// repetition on pool (path names it in the records).
func writeTaxCells(ctx context.Context, b *bench, ts taxSetup, pool *pgxpool.Pool, path string, dur time.Duration, preload int64,
	next map[string]*int64, rng *rand.Rand) (*taxCells, error) {
	n := len(ts.shapes)
	tc := &taxCells{make([][]float64, n), make([][]float64, n), make([][]float64, n), make([][]float64, n), make([][]float64, n), make([][]float64, n)}
	for rep := range b.cfg.Reps {
		for si, sh := range ts.shapes {
			vals, cpu, wal := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
			for pos, v := range schedule(rep, "none", []string{"trigger"}) {
				table := ts.table[v]
				cc, err := timedWrites(ctx, pool, dur, func() (string, []any) { return sh.stmt(table, next[table], preload, rng) })
				if err != nil {
					return nil, fmt.Errorf("%s on %s (%s): %w", sh.Name, table, path, err)
				}
				sps := cc.perSec
				vals[v] = append(vals[v], sps)
				cpu[v] = append(cpu[v], cc.cpuUs)
				wal[v] = append(wal[v], cc.walBytes)
				b.out.emit(map[string]any{"scenario": ts.scenario, "path": path, "variant": v, "shape": sh.Name, "rep": rep, "position": pos,
					"statements_per_sec": sps, "rows_per_sec": sps * float64(sh.Rows),
					"backend_cpu_us_per_stmt": cc.cpuUs, "wal_bytes_per_stmt": cc.walBytes})
				pause(ctx, b.cellWait())
			}
			c := control(vals["none"][0], vals["none"][1])
			r := ratio(vals["trigger"][0], c)
			tc.ratios[si] = append(tc.ratios[si], r)
			tc.drifts[si] = append(tc.drifts[si], drift(vals["none"][0], vals["none"][1]))
			tc.ctl[si] = append(tc.ctl[si], c)
			tc.capv[si] = append(tc.capv[si], vals["trigger"][0])
			// CPU share: the rate the trigger would allow on a CPU-bound
			// backend, relative to the control's (the noise-resistant twin
			// of the throughput ratio).
			tc.cpuShare[si] = append(tc.cpuShare[si], control(cpu["none"][0], cpu["none"][1])/cpu["trigger"][0])
			tc.extraWAL[si] = append(tc.extraWAL[si], (wal["trigger"][0]-control(wal["none"][0], wal["none"][1]))/float64(sh.Rows))
			g := Goal{What: "trigger/none", Bound: sh.Goal}
			b.out.emit(map[string]any{"scenario": ts.scenario, "path": path, "variant": "trigger", "shape": sh.Name, "rep": rep,
				"share_of_control": r, "drift": tc.drifts[si][len(tc.drifts[si])-1], "goal": g.String(), "goal_met": g.Met(r),
				"cpu_share_of_control": tc.cpuShare[si][len(tc.cpuShare[si])-1], "extra_wal_bytes_per_row": tc.extraWAL[si][len(tc.extraWAL[si])-1]})
		}
	}
	return tc, nil
}

// cellCost is what one cell's statements cost: the rate the box allowed,
// and two figures its load barely moves (§1.4): the serving backend's CPU
// (utime+stime from /proc; the cluster is local) and the WAL written, per
// statement. The engine is stopped during the cells, so the WAL is theirs.
type cellCost struct {
	perSec, cpuUs, walBytes float64
}

// timedWrites runs statements back to back on one connection for d.
func timedWrites(ctx context.Context, pool *pgxpool.Pool, d time.Duration, next func() (string, []any)) (cellCost, error) {
	var c cellCost
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return c, err
	}
	defer conn.Release()
	var pid int
	var lsn0 string
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid(), pg_current_wal_insert_lsn()::text").Scan(&pid, &lsn0); err != nil {
		return c, err
	}
	t0, terr := cpuTicks(pid)
	start := time.Now()
	end := start.Add(d)
	n := 0
	for time.Now().Before(end) {
		sql, args := next()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			return c, err
		}
		n++
	}
	c.perSec = float64(n) / time.Since(start).Seconds()
	t1, terr1 := cpuTicks(pid)
	var wal float64
	if err := conn.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::text::pg_lsn)::float8", lsn0).Scan(&wal); err != nil {
		return c, err
	}
	c.cpuUs, c.walBytes = math.NaN(), wal/float64(n)
	if terr == nil && terr1 == nil {
		c.cpuUs = float64(t1-t0) * 1e6 / clockTicks / float64(n)
	}
	return c, nil
}

func errString(err error) any {
	if err == nil {
		return nil
	}
	return err.Error()
}

func okString(err error) string {
	if err == nil {
		return "ok"
	}
	return "FAILED: " + err.Error()
}

// maxAbs is the element of largest magnitude (drifts are signed).
func maxAbs(xs []float64) float64 {
	m := math.NaN()
	for _, x := range xs {
		if math.IsNaN(m) || math.Abs(x) > math.Abs(m) {
			m = x
		}
	}
	return m
}

// fmtList renders figures as "0.81/0.77/0.90".
func fmtList(xs []float64, prec int) string {
	s := ""
	for i, x := range xs {
		if i > 0 {
			s += "/"
		}
		s += fmtNum(x, prec)
	}
	return s
}
