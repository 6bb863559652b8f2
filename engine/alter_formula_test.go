package engine

import "testing"

// ALTER TRANSFORM with only ALTER clauses changes no column of the target;
// it once sent a bare "ALTER TABLE t" (42601). Found by the differential
// test's operator.
func TestAlterOnlyFormulasKeepsColumns(t *testing.T) {
	pool := testDB(t)
	exec(t, pool, `CREATE TABLE s (id int PRIMARY KEY, g text, i int, b bool)`)
	exec(t, pool, `INSERT INTO s SELECT x, 'g' || (x % 3), x, x % 2 = 0 FROM generate_series(1, 100) x`)
	e, _ := startEngine(t, pool, fastConfig())
	if _, err := applyText(t, e, `TRANSFORM v FROM s SELECT b AS f0, i * 2 AS f1`); err != nil {
		t.Fatal(err)
	}
	awaitLive(t, e, "v")
	if _, err := applyText(t, e, `ALTER TRANSFORM v ALTER f0 AS NOT b, ALTER f1 AS length(g)`); err != nil {
		t.Fatal(err)
	}
	exec(t, pool, `UPDATE s SET g = g || 'x' WHERE id % 5 = 0`)
	awaitLive(t, e, "v")
	converge(t, e)
	assertSame(t, pool, `SELECT id, f0, f1 FROM v`, `SELECT id, NOT b, length(g) FROM s`)
}
