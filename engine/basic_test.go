package engine

import (
	"testing"
)

func TestOneToOneAndSumCountEndToEnd(t *testing.T) {
	pool := testDB(t)
	exec(t, pool, `CREATE TABLE orders (id bigint PRIMARY KEY, region text, amount numeric(12,2), qty int)`)
	exec(t, pool, `INSERT INTO orders SELECT g, 'r' || (g % 5), g * 1.5, g % 7 FROM generate_series(1, 2000) g`)
	e, _ := startEngine(t, pool, fastConfig())
	define(t, e, Spec{Target: TableName{Name: "order_view"}, Source: TableName{Name: "orders"},
		Statement: "TRANSFORM order_view FROM orders ...",
		Fields: []Field{
			{Name: "region", Expr: col("region"), Reads: []string{"region"}},
			{Name: "gross", Expr: col("amount") + " * 1.2", Reads: []string{"amount"}},
		}})
	define(t, e, Spec{Target: TableName{Name: "by_region"}, Source: TableName{Name: "orders"},
		GroupBy: []GroupKey{{Name: "region", Expr: col("region")}},
		Fields: []Field{
			{Name: "total", Agg: AggSum, Expr: col("amount")},
			{Name: "n", Agg: AggCountStar},
			{Name: "nq", Agg: AggCount, Expr: col("qty")},
			{Name: "sq", Agg: AggSum, Expr: col("qty")},
		}})
	awaitLive(t, e, "order_view")
	awaitLive(t, e, "by_region")
	oneWant := `SELECT id, region, amount * 1.2 FROM orders`
	aggWant := `SELECT region, sum(amount), count(*), count(qty), sum(qty) FROM orders GROUP BY region`
	assertSame(t, pool, `SELECT id, region, gross FROM order_view`, oneWant)
	assertSame(t, pool, `SELECT region, total, n, nq, sq FROM by_region`, aggWant)

	if count(t, pool, "SELECT * FROM order_view") != 2000 || count(t, pool, "SELECT * FROM by_region") != 5 {
		t.Fatal("build produced no rows")
	}
	exec(t, pool, `UPDATE orders SET region = 'r9', qty = NULL WHERE id % 10 = 0`)
	exec(t, pool, `DELETE FROM orders WHERE id % 7 = 0`)
	exec(t, pool, `INSERT INTO orders SELECT g, NULL, g, 1 FROM generate_series(3000, 3100) g`)
	exec(t, pool, `DELETE FROM orders WHERE region = 'r1'`)
	converge(t, e)
	assertSame(t, pool, `SELECT id, region, gross FROM order_view`, oneWant)
	assertSame(t, pool, `SELECT region, total, n, nq, sq FROM by_region`, aggWant)
	var logRows int64
	pool.QueryRow(t.Context(), "SELECT count(*) FROM trellis._batches").Scan(&logRows)
	t.Logf("batches rows now %d; by_region rows %d", logRows, count(t, pool, "SELECT * FROM by_region"))
}
