package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestScratchExplain(t *testing.T) {
	pool := testDB(t)
	ctx := context.Background()
	exec(t, pool, `CREATE TABLE big (id bigint PRIMARY KEY, g int, v numeric)`)
	exec(t, pool, `INSERT INTO big SELECT x, x % 100000, x * 0.01 FROM generate_series(1, 60000) x`)
	exec(t, pool, `ANALYZE big`)
	e := New(pool, fastConfig())
	defer e.Close()
	if err := e.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	d := define(t, e, Spec{Target: TableName{Name: "big_g"}, Source: TableName{Name: "big"},
		GroupBy: []GroupKey{{Name: "g", Expr: col("g")}}, Fields: []Field{{Name: "s", Agg: AggSum, Expr: col("v")}, {Name: "n", Agg: AggCountStar}}})
	var raw []byte
	pool.QueryRow(ctx, `SELECT compiled FROM trellis._definitions WHERE id = $1`, d.ID).Scan(&raw)
	cd, _ := e.compiledFor(d.ID, 1, raw)
	for c := 0; c < 10; c++ {
		var keys []string
		for i := 1; i <= 5000; i++ {
			keys = append(keys, fmt.Sprint(c*5000+i))
		}
		tx, _ := e.workers.BeginTx(ctx, pgx.TxOptions{})
		t0 := time.Now()
		if err := e.applyKeys(ctx, tx, cd, keys); err != nil {
			t.Fatal(err)
		}
		tx.Commit(ctx)
		fmt.Println("chunk", c, time.Since(t0))
	}
	var keys []string
	for i := 1; i <= 5000; i++ {
		keys = append(keys, fmt.Sprint(50000+i))
	}
	tx, _ := pool.BeginTx(ctx, pgx.TxOptions{})
	defer tx.Rollback(ctx)
	exec(t, tx, cd.lockInsert, keys)
	args, _, _ := keyArgs(keys, cd.c.Key, cd.c.KeyNullable)
	rows, err := tx.Query(ctx, "EXPLAIN ANALYZE "+cd.derive, args...)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		rows.Scan(&s)
		if len(s) > 300 {
			s = s[:300]
		}
		fmt.Println(s)
	}
}
