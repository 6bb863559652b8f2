package main

// Bulk drain (issue 18): how long one batch of N changed keys takes to
// drain, for a 1-1 target and a 1,000-group aggregate target, at N =
// 100,000, 1,000,000 and 10,000,000; and, in a second run of each cell, the
// commit-to-visible latency of a side writer (100 single-row commits/s on
// another source, B7's paced method) while the batch drains.
//
// A cell: a fresh database, the target defined on an empty source and live,
// then one `INSERT … SELECT generate_series` of N rows (one transaction, so
// one batch), then the wait for convergence of everything committed so far.
// The rate is N / (converged − committed): capture's cost is inside the
// INSERT and is B2's business. A cell that does not converge within the
// timeout reports how far it got (target rows for 1-1, the folded count for
// the aggregate) and the rate so far.

import (
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/trellis-proxy/trellis-proxy/engine"
)

type bulkShape struct {
	Name   string
	Spec   engine.Spec
	Oracle [2]string // got, want
	// Progress counts the source rows the target reflects.
	Progress string
}

var bulkShapes = []bulkShape{
	{Name: "1-1",
		Spec:     oneToOne("bulk_t", "bulk_src", engine.Field{Name: "w", Expr: col("v") + " * 2"}),
		Oracle:   [2]string{"SELECT id, w FROM bulk_t", "SELECT id, v * 2 FROM bulk_src"},
		Progress: "SELECT count(*) FROM bulk_t"},
	{Name: "1,000 groups",
		Spec:     sumCount("bulk_g", "bulk_src", "g", "v"),
		Oracle:   func() [2]string { g, w := sumCountOracle("bulk_g", "bulk_src", "g", "v"); return [2]string{g, w} }(),
		Progress: "SELECT coalesce(sum(n), 0) FROM bulk_g"},
}

type bulkCellResult struct {
	Rows      int
	Converged bool
	Seconds   float64 // commit to converged, or to the timeout
	Done      int64   // source rows reflected when the cell ended
	InsertSec float64
	Side      *latencySummary
	SideRate  float64
	// After: the side writer's commits after convergence, while the bulk
	// batch's materialised keys retire (TRELLIS_BENCH_BULK_AFTER_S > 0).
	After     *latencySummary
	OracleErr error
}

func (r bulkCellResult) keysPerSec() float64 {
	if r.Seconds <= 0 {
		return math.NaN()
	}
	return float64(r.Done) / r.Seconds
}

func bulkSizes(b *bench) []int {
	def := "100000,1000000,10000000"
	if b.cfg.Quick {
		def = "10000,100000"
	}
	spec := os.Getenv("TRELLIS_BENCH_BULK_ROWS")
	if spec == "" {
		spec = def
	}
	var out []int
	for _, f := range strings.Split(spec, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out
}

// bulkWanted: whether a cell's shape or variant contains a word of the comma list of
// env var name (unset: all), so one cell can be rerun alone.
func bulkWanted(name, v string) bool {
	spec := os.Getenv(name)
	if spec == "" {
		return true
	}
	for _, f := range strings.Split(spec, ",") {
		if f = strings.TrimSpace(f); f != "" && strings.Contains(v, f) {
			return true
		}
	}
	return false
}

func runBulkDrain(ctx context.Context, b *bench) error {
	l, err := startLab(ctx, b, "bulk-drain")
	if err != nil {
		return err
	}
	defer l.stop()
	timeout := time.Duration(envInt("TRELLIS_BENCH_BULK_TIMEOUT_S", 900)) * time.Second
	sizes := bulkSizes(b)
	fmt.Fprintf(os.Stderr, "bulk-drain: one batch of %v keys per cell, 1-1 and 1,000-group targets, engine defaults; then the same with a side writer at 100 commits/s; timeout %s per cell\n", sizes, timeout)
	goalRate := Goal{What: "keys/s at the largest size", AtMost: false, Bound: 20000, Unit: "keys/s"}
	goalLinear := Goal{What: "largest/smallest rate", AtMost: false, Bound: 0.8, Unit: "×"}
	goalSide := Goal{What: "side p99", AtMost: true, Bound: 1000, Unit: "ms"}
	t := &table{header: []string{"bulk drain", "keys", "converged", "seconds", "keys/s", "insert s", "side p50/p99 ms", "side commits/s", "oracle"}}
	summary := &table{header: []string{"target", "rate at smallest", "rate at largest", "ratio", "goal ratio", "goal rate", "side p99 at largest", "goal side"}}
	for _, shape := range bulkShapes {
		if !bulkWanted("TRELLIS_BENCH_BULK_SHAPES", shape.Name) {
			continue
		}
		var rates []float64
		var lastSide *latencySummary
		for _, n := range sizes {
			for _, side := range []bool{false, true} {
				if !bulkWanted("TRELLIS_BENCH_BULK_SIDE", map[bool]string{false: "alone", true: "side"}[side]) {
					continue
				}
				r, err := bulkCell(ctx, l, shape, n, side, timeout)
				if err != nil {
					return fmt.Errorf("bulk-drain %s %d: %w", shape.Name, n, err)
				}
				if r.OracleErr != nil {
					b.failf("bulk-drain %s %d oracle: %v", shape.Name, n, r.OracleErr)
				}
				variant := "alone"
				sideText, sideRate := "-", "-"
				line := map[string]any{"scenario": "bulk-drain", "variant": shape.Name, "shape": variant, "keys": n,
					"converged": r.Converged, "drain_seconds": r.Seconds, "keys_drained": r.Done, "keys_per_sec": r.keysPerSec(),
					"insert_seconds": r.InsertSec, "oracle_ok": r.OracleErr == nil, "error": errString(r.OracleErr)}
				if side {
					variant = "with side writer"
					line["shape"] = variant
					line["side_p50_ms"], line["side_p99_ms"], line["side_max_ms"], line["side_missing"] = r.Side.P50, r.Side.P99, r.Side.Max, r.Side.Missing
					line["side_commits_per_sec"] = r.SideRate
					sideText, sideRate = fmtNum(r.Side.P50, 0)+"/"+fmtNum(r.Side.P99, 0), fmtNum(r.SideRate, 0)
					lastSide = r.Side
					if r.After != nil {
						line["side_after_p50_ms"], line["side_after_p99_ms"], line["side_after_max_ms"] = r.After.P50, r.After.P99, r.After.Max
						fmt.Fprintf(os.Stderr, "bulk-drain %s %d: side writer after convergence (retirement) p50/p99/max %s/%s/%s ms\n",
							shape.Name, n, fmtNum(r.After.P50, 0), fmtNum(r.After.P99, 0), fmtNum(r.After.Max, 0))
					}
				} else {
					rates = append(rates, r.keysPerSec())
				}
				b.out.emit(line)
				conv := "yes"
				if !r.Converged {
					conv = fmt.Sprintf("no (%d%%)", r.Done*100/int64(n))
				}
				t.add(shape.Name+", "+variant, fmt.Sprint(n), conv, fmtNum(r.Seconds, 1), fmtNum(r.keysPerSec(), 0),
					fmtNum(r.InsertSec, 1), sideText, sideRate, okString(r.OracleErr))
				pause(ctx, b.cellWait())
			}
		}
		if len(rates) == 0 {
			rates = []float64{math.NaN()}
		}
		ratio := rates[len(rates)-1] / rates[0]
		sideP99 := math.NaN()
		if lastSide != nil {
			sideP99 = lastSide.P99
		}
		b.out.emit(map[string]any{"scenario": "bulk-drain", "variant": shape.Name, "summary": true,
			"rate_smallest": rates[0], "rate_largest": rates[len(rates)-1], "ratio": ratio, "side_p99_ms_largest": sideP99,
			"goal":     goalLinear.String() + ", " + goalRate.String() + ", " + goalSide.String(),
			"goal_met": and(and(goalLinear.Met(ratio), goalRate.Met(rates[len(rates)-1])), latencyMet(goalSide, sideP99))})
		summary.add(shape.Name, fmtNum(rates[0], 0), fmtNum(rates[len(rates)-1], 0), fmtNum(ratio, 2)+"×",
			verdict(goalLinear.Met(ratio)), verdict(goalRate.Met(rates[len(rates)-1])), fmtNum(sideP99, 0), verdict(latencyMet(goalSide, sideP99)))
	}
	b.printTable(t)
	b.printTable(summary)
	return nil
}

// bulkCell runs one batch of n keys through shape's target.
// bulkSideRate is the side writer's commits per second.
const bulkSideRate = 100

func bulkCell(ctx context.Context, l *engineLab, shape bulkShape, n int, side bool, timeout time.Duration) (bulkCellResult, error) {
	r := bulkCellResult{Rows: n}
	pool, _, drop, err := l.newDB(ctx, 12)
	if err != nil {
		return r, err
	}
	defer drop()
	for _, q := range []string{
		`CREATE TABLE bulk_src (id bigint PRIMARY KEY, g int NOT NULL, v bigint NOT NULL)`,
		`CREATE TABLE side_src (id bigint PRIMARY KEY, val numeric)`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return r, err
		}
	}
	e, err := startEngine(ctx, pool, engine.Config{})
	if err != nil {
		return r, err
	}
	defer e.stop()
	specs := []engine.Spec{shape.Spec}
	if side {
		specs = append(specs, oneToOne("side_t", "side_src", engine.Field{Name: "val", Expr: col("val")}))
	}
	for _, spec := range specs {
		if err := define(ctx, e, pool, spec, time.Minute); err != nil {
			return r, err
		}
	}
	insertStart := time.Now()
	if _, err := pool.Exec(ctx, `INSERT INTO bulk_src SELECT i, i % 1000, i FROM generate_series(1, $1::bigint) i`, n); err != nil {
		return r, err
	}
	committed := time.Now()
	r.InsertSec = committed.Sub(insertStart).Seconds()
	tok, err := e.WatermarkToken(ctx)
	if err != nil {
		return r, err
	}
	stop := make(chan struct{})
	sideDone := make(chan error, 1)
	var paced pacedResult
	if side {
		go func() {
			var err error
			paced, err = runPaced(ctx, pool, pacedLoad{Rate: bulkSideRate, Window: timeout, Stop: stop,
				Insert: `INSERT INTO side_src VALUES ($1::bigint, $1::bigint)`, Watch: []string{"side_t"}})
			sideDone <- err
		}()
	}
	waitErr := e.AwaitConverged(ctx, tok, timeout)
	r.Seconds = time.Since(committed).Seconds()
	r.Converged = waitErr == nil
	after := time.Duration(envInt("TRELLIS_BENCH_BULK_AFTER_S", 0)) * time.Second
	if side && waitErr == nil {
		pause(ctx, after)
	}
	close(stop)
	if side {
		if err := <-sideDone; err != nil {
			return r, fmt.Errorf("side writer: %w", err)
		}
		lat := paced.LatBy["side_t"]
		// The writer commits at a fixed rate from the bulk commit on: the
		// rows past the drain's length at that rate committed after it.
		cut := min(len(lat), int(r.Seconds*bulkSideRate))
		if after > 0 && waitErr == nil {
			a := summarizeLatencies(lat[cut:])
			r.After, lat = &a, lat[:cut]
		}
		s := summarizeLatencies(lat)
		r.Side, r.SideRate = &s, paced.Offered
	}
	if waitErr != nil {
		if err := pool.QueryRow(ctx, shape.Progress).Scan(&r.Done); err != nil {
			return r, err
		}
		if ctx.Err() != nil {
			return r, ctx.Err()
		}
		r.OracleErr = fmt.Errorf("not converged within %s (%v): %d of %d keys drained", timeout, waitErr, r.Done, n)
		return r, nil
	}
	r.Done = int64(n)
	r.OracleErr = checkSame(ctx, pool, shape.Oracle[0], shape.Oracle[1])
	return r, nil
}
