package main

// J5 join-fanout (joins spec §7): what a root key costs when a dimension
// change re-derives it, against the same root key changed directly. One
// 1-1 JOIN target j5_t over j5_facts LEFT JOIN j5_dim; dimension row i is
// read by exactly N_i facts (N = 1,000, 10,000, 100,000 by default). Cells,
// each one statement then the wait for convergence (a watermark token
// taken after its commit, AwaitConverged, which re-checks as each batch
// drains):
//   - direct: `UPDATE j5_facts SET amount = amount + 1 WHERE a_id = i`,
//     the N facts' own column: N keys in the log, N re-derives;
//   - fanout: `UPDATE j5_dim SET ver = ver + 1 WHERE id = i`: one key in
//     the log, the fan-out lookup stages N rederive rows, N re-derives.
// The cost is (converged − committed) / N; per size and repetition the
// cells run direct, fanout, direct and the ratio is fanout over the mean of
// the two directs. The target is compared with its join at the end.

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-proxy/trellis-proxy/engine"
)

func j5Sizes(b *bench) []int {
	def := "1000,10000,100000"
	if b.cfg.Quick {
		def = "1000,10000"
	}
	spec := os.Getenv("TRELLIS_BENCH_J5_KEYS")
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

const j5Stmt = `TRANSFORM j5_t FROM j5_facts f LEFT JOIN j5_dim d ON d.id = f.a_id SELECT f.amount AS amount, d.ver AS ver`

func runJoinFanout(ctx context.Context, b *bench) error {
	sizes := j5Sizes(b)
	pool, stop, err := labDB(ctx, b, "join-fanout", 8)
	if err != nil {
		return err
	}
	defer stop()
	// Facts of dimension row i+1 are one contiguous id range; 100,000 more
	// facts spread over 1,000 other dimension rows keep the measured sets a
	// part of the table, not all of it.
	stmts := []string{
		`CREATE TABLE j5_dim (id int PRIMARY KEY, ver bigint NOT NULL, name text)`,
		`INSERT INTO j5_dim SELECT g, 0, 'd' || g FROM generate_series(1, 2000) g`,
		`CREATE TABLE j5_facts (id bigint PRIMARY KEY, a_id int, amount int)`,
		`INSERT INTO j5_facts SELECT g, 1000 + g % 1000, g % 1000 FROM generate_series(1, 100000) g`,
	}
	lo := int64(100_000)
	for i, n := range sizes {
		stmts = append(stmts, fmt.Sprintf(`INSERT INTO j5_facts SELECT g, %d, g %% 1000 FROM generate_series(%d, %d) g`, i+1, lo+1, lo+int64(n)))
		lo += int64(n)
	}
	stmts = append(stmts, `CREATE INDEX ON j5_facts (a_id)`, `VACUUM ANALYZE j5_dim, j5_facts`)
	if err := execAll(ctx, pool, stmts...); err != nil {
		return err
	}
	// Diagnosis: TRELLIS_BENCH_J5_SEAL_MS sets the seal interval (default
	// 50 ms), to see how much of a small cell is waiting for seals.
	cfg := engine.Config{SealInterval: time.Duration(envInt("TRELLIS_BENCH_J5_SEAL_MS", 50)) * time.Millisecond}
	e, err := startEngine(ctx, pool, cfg)
	if err != nil {
		return err
	}
	defer e.stop()
	if err := defineJoin(ctx, e, pool, "j5_t", j5Stmt, 10*time.Minute); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "J5: %d facts, root keys per cell %v; %d reps × (direct, fanout, direct) per size; engine defaults; cost = (converged − committed) / keys\n",
		lo, sizes, b.cfg.Reps)
	resetStatements(ctx, pool)

	g := Goal{What: "fanout/direct", AtMost: true, Bound: 1.5}
	t := &table{header: []string{"J5 keys", "direct µs/key (median)", "fanout µs/key (median)", "fanout/direct (median)", "per-rep ratios", "max direct drift", "goal", "verdict"}}
	for i, n := range sizes {
		var ratios, drifts, dUs, fUs []float64
		for rep := range b.cfg.Reps {
			vals := map[string][]float64{}
			for pos, v := range schedule(rep, "direct", []string{"fanout"}) {
				q := `UPDATE j5_facts SET amount = amount + 1 WHERE a_id = $1`
				if v == "fanout" {
					q = `UPDATE j5_dim SET ver = ver + 1 WHERE id = $1`
				}
				secs, stmtSecs, err := convergeAfter(ctx, e, pool, q, i+1)
				if err != nil {
					return fmt.Errorf("J5 %s %d keys: %w", v, n, err)
				}
				us := secs * 1e6 / float64(n)
				vals[v] = append(vals[v], us)
				b.out.emit(map[string]any{"scenario": "join-fanout", "variant": v, "shape": fmt.Sprintf("%d keys", n), "keys": n, "rep": rep, "position": pos,
					"converge_seconds": secs, "statement_seconds": stmtSecs, "us_per_key": us, "keys_per_sec": float64(n) / secs})
				pause(ctx, b.cellWait())
			}
			c := control(vals["direct"][0], vals["direct"][1])
			r := ratio(vals["fanout"][0], c)
			ratios, drifts = append(ratios, r), append(drifts, -drift(vals["direct"][0], vals["direct"][1]))
			dUs, fUs = append(dUs, c), append(fUs, vals["fanout"][0])
			b.out.emit(map[string]any{"scenario": "join-fanout", "variant": "fanout", "shape": fmt.Sprintf("%d keys", n), "keys": n, "rep": rep,
				"fanout_over_direct": r, "goal": g.String(), "goal_met": g.Met(r)})
		}
		m := median(ratios)
		b.out.emit(map[string]any{"scenario": "join-fanout", "shape": fmt.Sprintf("%d keys", n), "keys": n, "summary": true,
			"direct_us_per_key": median(dUs), "fanout_us_per_key": median(fUs), "fanout_over_direct": m, "goal": g.String(), "goal_met": g.Met(m)})
		t.add(fmt.Sprint(n), fmtNum(median(dUs), 1), fmtNum(median(fUs), 1), fmtRatio(m), fmtList(ratios, 2), fmtPct(maxAbs(drifts)), g.String(), verdict(g.Met(m)))
	}
	oerr := checkSame(ctx, pool, "SELECT id, amount, ver FROM j5_t", "SELECT f.id, f.amount, d.ver FROM j5_facts f LEFT JOIN j5_dim d ON d.id = f.a_id")
	b.out.emit(map[string]any{"scenario": "join-fanout", "shape": "oracle", "oracle_ok": oerr == nil, "error": errString(oerr)})
	if oerr != nil {
		b.failf("join-fanout oracle: %v", oerr)
	}
	b.printTable(t)
	fmt.Fprintf(os.Stderr, "oracle (j5_t = its join): %v\n", okString(oerr))
	topStatements(ctx, pool, "J5", 12)
	return nil
}

// convergeAfter runs q with $1 = arg, then waits until everything committed
// so far is in every target: seconds from the commit to convergence, and
// the statement's own seconds.
func convergeAfter(ctx context.Context, e *runningEngine, pool *pgxpool.Pool, q string, arg any) (secs, stmtSecs float64, err error) {
	start := time.Now()
	if _, err := pool.Exec(ctx, q, arg); err != nil {
		return 0, 0, err
	}
	committed := time.Now()
	if err := e.converge(ctx, 10*time.Minute); err != nil {
		return 0, 0, err
	}
	return time.Since(committed).Seconds(), committed.Sub(start).Seconds(), nil
}
