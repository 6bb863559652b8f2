package engine

import (
	"context"
	"os"
	"strconv"
	"sync"
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
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; wctx.Err() == nil; i++ {
				id := (i*7919+w*104729)%(rows+1000) + 1
				pool.Exec(ctx, `INSERT INTO big VALUES ($1, $2, 1) ON CONFLICT (id) DO UPDATE SET v = big.v + 1, g = excluded.g`, id, i%1000)
				if i%10 == 0 {
					pool.Exec(ctx, `DELETE FROM big WHERE id = $1`, id+3)
				}
			}
		}()
	}
	start := time.Now()
	define(t, e, Spec{Target: TableName{Name: "big_v"}, Source: TableName{Name: "big"}, Fields: []Field{{Name: "v", Expr: col("v")}}})
	define(t, e, Spec{Target: TableName{Name: "big_g"}, Source: TableName{Name: "big"},
		GroupBy: []GroupKey{{Name: "g", Expr: col("g")}}, Fields: []Field{{Name: "s", Agg: AggSum, Expr: col("v")}, {Name: "n", Agg: AggCountStar}}})
	for _, n := range []string{"big_v", "big_g"} {
		if err := e.AwaitLive(ctx, TableName{Name: n}, 10*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d rows: both targets live after %v", rows, time.Since(start))
	cancel()
	wg.Wait()
	converge(t, e)
	t.Logf("converged after %v", time.Since(start))
	assertSame(t, pool, `SELECT id, v FROM big_v`, `SELECT id, v FROM big`)
	assertSame(t, pool, `SELECT g, s, n FROM big_g`, `SELECT g, sum(v), count(*) FROM big GROUP BY g`)
}
