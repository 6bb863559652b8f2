package main

// B7 with one poisoned key (issue 7): a held key must not raise the
// commit-to-visible latency of anything else. Two 1-1 targets read src:
// hop1 (val) and ratio (val / d). Key -2 has d = 0, so ratio cannot apply it
// and holds it (quarantine) while hop1 applies it; a hammer connection
// rewrites key -2 every 2 ms for the whole window, so ratio's drains meet the
// held key in almost every batch. The paced writer of B7 (~1,000 commits/s
// of new keys, 4 connections) runs as usual, and the watcher records when
// each new key first appears in hop1 (another transform) and in ratio
// (other keys of the transform holding the key).
//
// After the window the row is fixed and the key released through
// trellis.release_key; both targets must then equal their definitions.
//
// The control is the same cell with d = 1 on key -2: the same hammer, the
// same writes, nothing held. Each repetition runs control, poisoned,
// control (§1.2); the ratio is poisoned over the mean of the controls.

import (
	"context"
	"fmt"
	"math"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-proxy/trellis-proxy/engine"
	"github.com/trellis-proxy/trellis-proxy/virtualtables"
)

// poisonShape is the cell; poisoned decides key -2's divisor. hammered
// counts the hammer's updates.
func poisonShape(poisoned bool, hammered *atomic.Int64) latencyShape {
	divisor := 1
	if poisoned {
		divisor = 0
	}
	return latencyShape{
		Source: `CREATE TABLE src (id bigint PRIMARY KEY, val numeric, d numeric NOT NULL DEFAULT 1)`,
		Specs: []engine.Spec{
			oneToOne("hop1", "src", engine.Field{Name: "val", Expr: col("val"), Reads: []string{"val"}}),
			oneToOne("ratio", "src", engine.Field{Name: "r", Expr: col("val") + " / " + col("d"), Reads: []string{"val", "d"}}),
		},
		Watch:  []string{"hop1", "ratio"},
		Insert: `INSERT INTO src (id, val) VALUES ($1::bigint, $1::bigint)`,
		Setup: func(ctx context.Context, pool *pgxpool.Pool) error {
			// The SQL surface (release_key), which the proxy installs.
			if err := virtualtables.Install(ctx, pool, "trellis"); err != nil {
				return err
			}
			if _, err := pool.Exec(ctx, `INSERT INTO src VALUES (-2, 1, $1)`, divisor); err != nil {
				return err
			}
			if !poisoned {
				return nil
			}
			// The window opens once ratio holds the key, not while its
			// drains are still probing it.
			deadline := time.Now().Add(time.Minute)
			for {
				var held bool
				if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM trellis.poisoned WHERE key = '-2')`).Scan(&held); err != nil {
					return err
				}
				if held {
					return nil
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("key -2 (d = 0) was not held by ratio within a minute")
				}
				pause(ctx, 20*time.Millisecond)
			}
		},
		During: func(ctx context.Context, pool *pgxpool.Pool) error {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			for ctx.Err() == nil {
				// Never on a cancelled context: a cut-off COMMIT can land.
				if _, err := conn.Exec(context.Background(), `UPDATE src SET val = val + 1 WHERE id = -2`); err != nil {
					return err
				}
				hammered.Add(1)
				pause(ctx, 2*time.Millisecond)
			}
			return nil
		},
		// Poisoned: key -2 must still be held and absent from ratio; then
		// the row is fixed and released through the surface, as a person
		// would (surface §quarantine), so the final oracle is exact.
		Settle: func(ctx context.Context, pool *pgxpool.Pool) error {
			if !poisoned {
				return nil
			}
			var held, inRatio bool
			if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM trellis.poisoned WHERE key = '-2'), EXISTS (SELECT FROM ratio WHERE id = -2)`).Scan(&held, &inRatio); err != nil {
				return err
			}
			if !held || inRatio {
				return fmt.Errorf("%w: key -2 with d = 0: held %v, in ratio %v", errDiverged, held, inRatio)
			}
			if _, err := pool.Exec(ctx, `UPDATE src SET d = 1 WHERE id = -2`); err != nil {
				return err
			}
			_, err := pool.Exec(ctx, `SELECT trellis.release_key('ratio', 'src', '-2')`)
			return err
		},
		Oracle: func(ctx context.Context, pool *pgxpool.Pool) error {
			if err := checkSame(ctx, pool, "SELECT id, val FROM hop1", "SELECT id, val FROM src"); err != nil {
				return fmt.Errorf("hop1: %w", err)
			}
			if err := checkSame(ctx, pool, "SELECT id, r FROM ratio", "SELECT id, val / d FROM src"); err != nil {
				return fmt.Errorf("ratio: %w", err)
			}
			return nil
		},
	}
}

func runPoisonedKey(ctx context.Context, b *bench) error {
	l, err := startLab(ctx, b, "poisoned-key")
	if err != nil {
		return err
	}
	defer l.stop()
	const rate = 1000.0
	window := 2 * b.cfg.Duration
	if window > 60*time.Second {
		window = 60 * time.Second
	}
	cfg := engine.Config{} // the defaults, as in B7
	fmt.Fprintf(os.Stderr, "B7 poisoned key: depth 1, %g commits/s of new keys from 4 connections + key -2 rewritten every 2 ms, %s per cell, %d reps × (control, poisoned, control); engine defaults\n",
		rate, window, b.cfg.Reps)
	gp50 := Goal{What: "p50", AtMost: true, Bound: 50, Unit: "ms"}
	gp99 := Goal{What: "p99", AtMost: true, Bound: 250, Unit: "ms"}
	targets := []string{"hop1", "ratio"}
	type figs struct{ p50, p99, max []float64 }
	by := map[string]map[string]*figs{} // variant → target → per-cell figures
	ratios := map[string][]float64{}    // target → poisoned p50 over control p50, per rep
	ratios99 := map[string][]float64{}  // the same for p99 (NaN when a cell lost rows)
	for _, v := range []string{"control", "poisoned"} {
		by[v] = map[string]*figs{}
		for _, t := range targets {
			by[v][t] = &figs{}
		}
	}
	for rep := range b.cfg.Reps {
		p50At := map[string][]float64{} // "control"/"poisoned" + target
		p99At := map[string][]float64{}
		for pos, variant := range []string{"control", "poisoned", "control"} {
			var hammered atomic.Int64
			r := latencyCell(ctx, l, cfg, rate, window, poisonShape(variant == "poisoned", &hammered))
			if r.HarnessErr != nil {
				return fmt.Errorf("%s rep %d: %w", variant, rep, r.HarnessErr)
			}
			if r.OracleErr != nil {
				b.failf("poisoned-key %s rep %d oracle: %v", variant, rep, r.OracleErr)
			}
			for _, t := range targets {
				s := summarizeLatencies(r.LatBy[t])
				f := by[variant][t]
				f.p50, f.p99, f.max = append(f.p50, s.P50), append(f.p99, s.P99), append(f.max, s.Max)
				p50At[variant+t] = append(p50At[variant+t], s.P50)
				p99At[variant+t] = append(p99At[variant+t], s.P99)
				line := map[string]any{"scenario": "poisoned-key", "variant": variant, "shape": "1 row/commit, target " + t, "rep": rep, "position": pos,
					"commits_per_sec": r.Offered, "generator_bound": generatorBound(r.Offered, rate), "hammer_updates_per_sec": float64(hammered.Load()) / window.Seconds(),
					"observations": s.N, "missing": s.Missing, "visible_p50_ms": s.P50, "visible_p99_ms": s.P99, "visible_max_ms": s.Max, "visible_mean_ms": s.Mean,
					"oracle_ok": r.OracleErr == nil, "error": errString(r.OracleErr)}
				if variant == "poisoned" {
					line["goal"] = gp50.String() + ", " + gp99.String()
					line["goal_met"] = and(latencyMet(gp50, s.P50), latencyMet(gp99, s.P99))
				}
				b.out.emit(line)
			}
			pause(ctx, b.cellWait())
		}
		for _, t := range targets {
			c := p50At["control"+t]
			ratios[t] = append(ratios[t], finite(ratio(p50At["poisoned"+t][0], control(c[0], c[1]))))
			c = p99At["control"+t]
			ratios99[t] = append(ratios99[t], finite(ratio(p99At["poisoned"+t][0], control(c[0], c[1]))))
		}
	}
	tb := &table{header: []string{"B7 poisoned key", "target", "p50 ms (median)", "p99 ms (median)", "max ms", "poisoned/control p50, p99 (median of reps)", "goal", "verdict"}}
	for _, v := range []string{"control", "poisoned"} {
		for _, t := range targets {
			f := by[v][t]
			m50, m99 := median(f.p50), median(f.p99)
			met := and(latencyMet(gp50, m50), latencyMet(gp99, m99))
			rt, rt99 := math.NaN(), math.NaN()
			if v == "poisoned" {
				rt, rt99 = median(dropNaN(ratios[t])), median(dropNaN(ratios99[t]))
			}
			b.out.emit(map[string]any{"scenario": "poisoned-key", "variant": v, "shape": "target " + t, "summary": true,
				"visible_p50_ms": m50, "visible_p99_ms": m99, "visible_max_ms": slicesMax(f.max), "p50_over_control": rt, "p99_over_control": rt99,
				"goal": gp50.String() + ", " + gp99.String(), "goal_met": met})
			tb.add(v, t, fmtNum(m50, 1), fmtInf(m99, 1), fmtInf(slicesMax(f.max), 0), fmtRatio(rt)+", "+fmtRatio(rt99), gp50.String()+", "+gp99.String(),
				verdict(latencyMet(gp50, m50))+", "+verdict(latencyMet(gp99, m99)))
		}
	}
	b.printTable(tb)
	return nil
}

// slicesMax is the largest value, NaN for none (+Inf when a row never landed).
func slicesMax(xs []float64) float64 {
	m := math.NaN()
	for _, x := range xs {
		if math.IsNaN(m) || x > m {
			m = x
		}
	}
	return m
}

// finite maps ±Inf (a cell that lost rows) to NaN, which summaries skip.
func finite(x float64) float64 {
	if math.IsInf(x, 0) {
		return math.NaN()
	}
	return x
}

func dropNaN(xs []float64) []float64 {
	var out []float64
	for _, x := range xs {
		if !math.IsNaN(x) {
			out = append(out, x)
		}
	}
	return out
}

// fmtInf is fmtNum, except that +Inf (rows never seen) reads "never".
func fmtInf(x float64, prec int) string {
	if math.IsInf(x, 1) {
		return "never"
	}
	return fmtNum(x, prec)
}
