package main

// B9 idle-cost: 10 live transforms (5 one-to-one, 5 SUM/COUNT aggregates,
// over 10 captured tables) and no writes. After a warm-up, the engine's
// process CPU (getrusage of this process: the harness itself only sleeps
// during the window), the database's commits/s (pg_stat_database.xact_commit
// delta) and WAL bytes/s are measured over consecutive windows. Engine
// defaults (2 drain workers, seal probe 50ms, poll 1s, heartbeat 10s).

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-proxy/trellis-proxy/engine"
)

func runIdleCost(ctx context.Context, b *bench) error {
	l, err := startLab(ctx, b, "idle-cost")
	if err != nil {
		return err
	}
	defer l.stop()
	window, warm := 30*time.Second, 10*time.Second
	if b.cfg.Quick {
		window, warm = 10*time.Second, 3*time.Second
	}
	pool, _, drop, err := l.newDB(ctx, 4)
	if err != nil {
		return err
	}
	defer drop()
	e, err := startEngine(ctx, pool, engine.Config{})
	if err != nil {
		return err
	}
	defer e.stop()
	type check struct{ got, want string }
	var checks []check
	for i := range 10 {
		src := fmt.Sprintf("idle_src%d", i)
		if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %[1]s (id bigint PRIMARY KEY, g int, v int);
			INSERT INTO %[1]s SELECT x, x %% 10, x FROM generate_series(1, 1000) x`, src)); err != nil {
			return err
		}
		target := fmt.Sprintf("idle_t%d", i)
		if i%2 == 0 {
			if _, err := e.Define(ctx, pool, oneToOne(target, src, engine.Field{Name: "v", Expr: col("v")})); err != nil {
				return err
			}
			checks = append(checks, check{"SELECT id, v FROM " + target, "SELECT id, v FROM " + src})
		} else {
			if _, err := e.Define(ctx, pool, sumCount(target, src, "g", "v")); err != nil {
				return err
			}
			got, want := sumCountOracle(target, src, "g", "v")
			checks = append(checks, check{got, want})
		}
	}
	for i := range 10 {
		if err := e.AwaitLive(ctx, engine.TableName{Name: fmt.Sprintf("idle_t%d", i)}, 5*time.Minute); err != nil {
			return err
		}
	}
	if err := e.converge(ctx, time.Minute); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "B9: 10 live transforms, no writes; warm-up %s, then %d windows of %s; engine defaults\n", warm, b.cfg.Reps, window)
	pause(ctx, warm)

	gCPU := Goal{What: "engine CPU", AtMost: true, Bound: 1, Unit: "% of a core"}
	gTx := Goal{What: "commits/s", AtMost: true, Bound: 10, Unit: "/s"}
	var cpus, txs, wals []float64
	for rep := range b.cfg.Reps {
		c0, x0, w0, err := idleCounters(ctx, pool)
		if err != nil {
			return err
		}
		t0 := time.Now()
		pause(ctx, window)
		c1, x1, w1, err := idleCounters(ctx, pool)
		if err != nil {
			return err
		}
		wall := time.Since(t0)
		cpu := 100 * cpuShare(c1-c0, wall)
		// The two counter reads are transactions of ours: not the engine's.
		tx := float64(x1-x0-2) / wall.Seconds()
		wal := float64(w1-w0) / wall.Seconds()
		cpus, txs, wals = append(cpus, cpu), append(txs, tx), append(wals, wal)
		rss, _ := rssKB(os.Getpid())
		b.out.emit(map[string]any{"scenario": "idle-cost", "variant": "2 drain workers", "shape": "10 transforms", "rep": rep,
			"window_seconds": wall.Seconds(), "process_cpu_pct": cpu, "xact_commit_per_sec": tx, "wal_bytes_per_sec": wal,
			"process_rss_mb": float64(rss) / 1024})
	}
	var oerr error
	for _, c := range checks {
		if err := checkSame(ctx, pool, c.got, c.want); err != nil {
			oerr = err
			b.failf("idle-cost oracle: %v", err)
			break
		}
	}
	mc, mt, mw := median(cpus), median(txs), median(wals)
	b.out.emit(map[string]any{"scenario": "idle-cost", "summary": true, "process_cpu_pct": mc, "xact_commit_per_sec": mt,
		"wal_bytes_per_sec": mw, "goal": gCPU.String() + ", " + gTx.String(), "goal_met": and(gCPU.Met(mc), gTx.Met(mt)), "oracle_ok": oerr == nil})
	t := &table{header: []string{"B9 idle, 10 transforms", "CPU % of a core (median)", "per window", "commits/s (median)", "per window", "WAL B/s", "goal", "verdict"}}
	t.add("2 drain workers, defaults", fmtNum(mc, 2), fmtList(cpus, 2), fmtNum(mt, 1), fmtList(txs, 1), fmtNum(mw, 0),
		gCPU.String()+", "+gTx.String(), verdict(gCPU.Met(mc))+", "+verdict(gTx.Met(mt)))
	b.printTable(t)
	return nil
}

// idleCounters reads this process's CPU time, the database's committed
// transactions and the WAL insert position.
func idleCounters(ctx context.Context, pool *pgxpool.Pool) (cpu time.Duration, commits, wal int64, err error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0, 0, err
	}
	cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	err = pool.QueryRow(ctx, `SELECT xact_commit, pg_current_wal_insert_lsn() - '0/0'::pg_lsn
		FROM pg_stat_database WHERE datname = current_database()`).Scan(&commits, &wal)
	return cpu, commits, wal, err
}
