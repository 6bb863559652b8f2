package engine

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A large existing table built while two writers keep writing (issue 4).
// TRELLIS_BIG_ROWS sets the size (default 50,000; the figure is 1,000,000).
func TestBigBuildUnderWriters(t *testing.T) {
	rows := 50_000
	if s := os.Getenv("TRELLIS_BIG_ROWS"); s != "" {
		rows, _ = strconv.Atoi(s)
	}
	if testing.Short() {
		rows = 20_000
	}
	pool := testDB(t)
	ctx := context.Background()
	exec(t, pool, `CREATE TABLE big (id bigint PRIMARY KEY, g int, v numeric)`)
	exec(t, pool, `INSERT INTO big SELECT x, x % 100000, x * 0.01 FROM generate_series(1, $1) x`, rows)
	exec(t, pool, `ANALYZE big`)
	e, _ := startEngine(t, pool, fastConfig())
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var commits, failures atomic.Int64
	var firstErr atomic.Value
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; wctx.Err() == nil; i++ {
				id := (i*7919+w*104729)%(rows+1000) + 1
				stmts := [][]any{{`INSERT INTO big VALUES ($1, $2, 1) ON CONFLICT (id) DO UPDATE SET v = big.v + 1, g = excluded.g`, id, i % 1000}}
				if i%10 == 0 {
					stmts = append(stmts, []any{`DELETE FROM big WHERE id = $1`, id + 3})
				}
				for _, st := range stmts {
					// A writer error is no test failure by itself (the
					// oracle judges the end state), but it is counted and
					// shown: the issue wants writers undisturbed.
					if _, err := pool.Exec(ctx, st[0].(string), st[1:]...); err != nil {
						failures.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
					} else {
						commits.Add(1)
					}
				}
			}
		}()
	}
	start := time.Now()
	define(t, e, Spec{Target: TableName{Name: "big_v"}, Source: TableName{Name: "big"}, Fields: []Field{{Name: "v", Expr: col("v")}}})
	define(t, e, Spec{Target: TableName{Name: "big_g"}, Source: TableName{Name: "big"},
		GroupBy: []GroupKey{{Name: "g", Expr: col("g")}}, Fields: []Field{{Name: "s", Agg: AggSum, Expr: col("v")}, {Name: "n", Agg: AggCountStar}}})
	// Progress every 30 s, so a slow build shows where it is rather than
	// only timing out.
	pctx, pstop := context.WithCancel(ctx)
	go func() {
		tick := time.NewTicker(30 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-pctx.Done():
				return
			case <-tick.C:
			}
			st, err := e.Status(pctx)
			if err != nil {
				continue
			}
			var parts []string
			for _, s := range st {
				p := s.Target + " " + s.Status
				if s.BuildRowsDone != nil {
					p += fmt.Sprintf(" %d", *s.BuildRowsDone)
					if s.BuildRowsEstimated != nil {
						p += fmt.Sprintf("/%d", *s.BuildRowsEstimated)
					}
				}
				parts = append(parts, p)
			}
			t.Logf("after %v: %s; writers %d ok, %d failed; load %s", time.Since(start).Round(time.Second),
				strings.Join(parts, ", "), commits.Load(), failures.Load(), loadAverage())
		}
	}()
	deadline := 10 * time.Minute
	if rows > 200_000 {
		deadline = 60 * time.Minute
	}
	for _, n := range []string{"big_v", "big_g"} {
		if err := e.AwaitLive(ctx, TableName{Name: n}, deadline); err != nil {
			pstop()
			t.Fatal(err)
		}
	}
	pstop()
	live := time.Since(start)
	cancel()
	wg.Wait()
	t.Logf("%d rows: both targets live after %v; writers committed %d statements (%.0f/s), %d failed (first: %v); load average %s",
		rows, live.Round(time.Millisecond), commits.Load(), float64(commits.Load())/live.Seconds(), failures.Load(), firstErr.Load(), loadAverage())
	tok, err := e.WatermarkToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.AwaitConverged(ctx, tok, deadline); err != nil {
		t.Fatalf("await converged: %v", err)
	}
	t.Logf("converged after %v", time.Since(start).Round(time.Millisecond))
	assertSame(t, pool, `SELECT id, v FROM big_v`, `SELECT id, v FROM big`)
	assertSame(t, pool, `SELECT g, s, n FROM big_g`, `SELECT g, sum(v), count(*) FROM big GROUP BY g`)
}

// loadAverage is /proc/loadavg's first three fields, for the log line: the
// machine is shared, so a timing means little without the load beside it.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
