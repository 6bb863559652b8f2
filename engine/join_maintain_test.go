package engine

import (
	"context"
	"testing"

	"github.com/trellis-proxy/trellis-proxy/grammar"
)

// transform runs a TRANSFORM statement through Apply and commits it.
func transform(t *testing.T, e *Engine, stmt string) {
	t.Helper()
	st, err := grammar.Parse(stmt)
	if err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
	ctx := context.Background()
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := e.Apply(ctx, tx, st, ApplyOptions{}); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// A star and a snowflake JOIN target, 1-1 and aggregate, kept equal to
// Postgres's own run of their join query as every table changes: facts
// re-pointed, dimension rows updated, deleted and re-inserted, a
// dimension's own foreign key re-pointed, a dimension truncated.
func TestJoinTargetsMaintained(t *testing.T) {
	pool := testDB(t)
	for _, q := range []string{
		`CREATE TABLE regions (id int PRIMARY KEY, name text)`,
		`CREATE TABLE customers (id bigint PRIMARY KEY, name text, region_id int)`,
		`CREATE INDEX ON customers (region_id)`,
		`CREATE TABLE orders (id bigint PRIMARY KEY, customer_id bigint, amount numeric)`,
		`CREATE INDEX ON orders (customer_id)`,
		`INSERT INTO regions SELECT g, 'region ' || g FROM generate_series(1, 5) g`,
		`INSERT INTO customers SELECT g, 'cust ' || g, CASE WHEN g % 7 = 0 THEN NULL ELSE g % 6 END FROM generate_series(1, 50) g`,
		`INSERT INTO orders SELECT g, CASE WHEN g % 11 = 0 THEN NULL ELSE g % 55 END, g FROM generate_series(1, 1000) g`,
	} {
		exec(t, pool, q)
	}
	e, _ := startEngine(t, pool, fastConfig())
	transform(t, e, `TRANSFORM order_wide FROM orders o LEFT JOIN customers c ON c.id = o.customer_id LEFT JOIN regions r ON r.id = c.region_id
		SELECT o.amount AS amount, c.name AS customer, r.name AS region`)
	transform(t, e, `TRANSFORM order_inner FROM orders o JOIN customers c ON c.id = o.customer_id JOIN regions r ON r.id = c.region_id
		SELECT o.amount * 2 AS twice, r.name AS region`)
	transform(t, e, `TRANSFORM revenue_by_region FROM orders o JOIN customers c ON c.id = o.customer_id LEFT JOIN regions r ON r.id = c.region_id
		GROUP BY r.name SELECT SUM(o.amount) AS revenue, COUNT(*) AS n, MAX(c.name) AS top`)
	wide := `SELECT o.id, o.amount, c.name, r.name FROM orders o LEFT JOIN customers c ON c.id = o.customer_id LEFT JOIN regions r ON r.id = c.region_id`
	inner := `SELECT o.id, o.amount * 2, r.name FROM orders o JOIN customers c ON c.id = o.customer_id JOIN regions r ON r.id = c.region_id`
	agg := `SELECT r.name, sum(o.amount), count(*), max(c.name) FROM orders o JOIN customers c ON c.id = o.customer_id LEFT JOIN regions r ON r.id = c.region_id GROUP BY r.name`
	check := func(when string) {
		t.Helper()
		converge(t, e)
		for _, c := range []struct{ got, want string }{
			{`SELECT id, amount, customer, region FROM order_wide`, wide},
			{`SELECT id, twice, region FROM order_inner`, inner},
			{`SELECT name, revenue, n, top FROM revenue_by_region`, agg},
		} {
			if d := diff(t, pool, c.got, c.want); d != "" {
				t.Fatalf("%s: %s differs from its join:\n%s", when, c.got, d)
			}
		}
	}
	for _, n := range []string{"order_wide", "order_inner", "revenue_by_region"} {
		awaitLive(t, e, n)
	}
	check("after the build")
	exec(t, pool, `UPDATE regions SET name = name || '!' WHERE id IN (1, 3)`)
	check("a dimension's dimension renamed")
	exec(t, pool, `UPDATE customers SET region_id = 4 WHERE region_id = 2`)
	check("a snowflake edge re-pointed")
	exec(t, pool, `UPDATE orders SET customer_id = customer_id + 1 WHERE id % 3 = 0`)
	check("facts re-pointed")
	exec(t, pool, `DELETE FROM customers WHERE id % 5 = 0`)
	check("dimension rows deleted")
	exec(t, pool, `INSERT INTO customers SELECT g, 'again ' || g, 1 FROM generate_series(5, 50, 5) g`)
	check("dimension rows re-inserted")
	exec(t, pool, `UPDATE customers SET id = id + 1000 WHERE id BETWEEN 10 AND 14`)
	check("dimension keys changed")
	exec(t, pool, `TRUNCATE regions`)
	check("a dimension truncated")
	exec(t, pool, `INSERT INTO regions SELECT g, 'back ' || g FROM generate_series(1, 5) g`)
	check("the dimension refilled")
}
