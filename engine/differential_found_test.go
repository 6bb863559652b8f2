package engine

// Deterministic regressions for bugs the differential test found.

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

// A 1-1 reader of an aggregate target (its key is the nullable group
// tuple), fresh-built (target rows without ledger entries), paused while
// groups vanish, then resumed: the rebuild's sweep must walk the target's
// own keys, or rows of vanished groups survive. Found by the differential
// test (seed 1796118899947463274: d3 <- d2 <- aggregate d1).
func TestRebuildSweepsNullableKeyedReader(t *testing.T) {
	pool := testDB(t)
	exec(t, pool, `CREATE TABLE s (id int PRIMARY KEY, g text, v int)`)
	exec(t, pool, `INSERT INTO s SELECT x, CASE WHEN x % 4 = 0 THEN NULL ELSE 'g' || (x % 4) END, x FROM generate_series(1, 200) x`)
	e, _ := startEngine(t, pool, fastConfig())
	for _, s := range []string{
		`TRANSFORM byg FROM s GROUP BY g SELECT g AS g, SUM(v) AS total`,
		`TRANSFORM byg_copy FROM byg SELECT total AS t2`,
	} {
		if _, err := applyText(t, e, s); err != nil {
			t.Fatal(err)
		}
		awaitLive(t, e, "byg")
	}
	awaitLive(t, e, "byg_copy")
	if _, err := applyText(t, e, `PAUSE TRANSFORM byg_copy`); err != nil {
		t.Fatal(err)
	}
	exec(t, pool, `DELETE FROM s WHERE g = 'g1' OR g IS NULL`) // two groups vanish, the NULL one among them
	exec(t, pool, `UPDATE s SET v = v + 1 WHERE g = 'g2'`)
	converge(t, e)
	if _, err := applyText(t, e, `RESUME TRANSFORM byg_copy`); err != nil {
		t.Fatal(err)
	}
	awaitLive(t, e, "byg_copy")
	converge(t, e)
	assertSame(t, pool, `SELECT g, t2 FROM byg_copy`, `SELECT g, sum(v) FROM s GROUP BY g`)
}
