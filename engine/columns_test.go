package engine

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

func pausedRows(t *testing.T, e *Engine) []string {
	t.Helper()
	rows, err := e.w.Pool.Query(context.Background(), `SELECT (d.compiled #>> '{spec,target,name}') || '.' || pc.column_name
		|| CASE WHEN pc.local THEN '' ELSE '~' END FROM trellis._paused_columns pc JOIN trellis._definitions d ON d.id = pc.definition_id ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A field pause keeps the column's values while the rest stays live, and
// cascades along every reader; RESUME of a field rebuilds it and releases
// the readers it alone held, which end exact.
func TestPauseColumnCascadesAndResumeRebuildsExactly(t *testing.T) {
	pool := testDB(t)
	exec(t, pool, `CREATE TABLE orders (id bigint PRIMARY KEY, region text, amount numeric(12,2), qty int)`)
	exec(t, pool, `INSERT INTO orders SELECT g, 'r' || (g % 4), g, g % 7 FROM generate_series(1, 1500) g`)
	cfg := fastConfig()
	cfg.BuildChunkSize = 400
	e, _ := startEngine(t, pool, cfg)
	for _, s := range []string{
		`TRANSFORM a FROM orders SELECT amount * 2 AS dbl, qty AS qty, region AS region`,
		`TRANSFORM b FROM a SELECT dbl + 1 AS d1, qty AS q, region AS reg`,
		`TRANSFORM c FROM b GROUP BY q SELECT q AS q, SUM(d1) AS s, COUNT(*) AS n`,
		`TRANSFORM g FROM orders GROUP BY region SELECT region AS region, SUM(amount) AS total, COUNT(*) AS n, MAX(qty) AS top`,
	} {
		if _, err := applyText(t, e, s); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"a", "b", "c", "g"} {
		awaitLive(t, e, n)
	}
	oracleA := `SELECT id, amount * 2, qty, region FROM orders`
	oracleB := `SELECT id, amount * 2 + 1, qty, region FROM orders`
	oracleC := `SELECT qty, SUM(amount * 2 + 1), COUNT(*) FROM orders GROUP BY qty`
	oracleG := `SELECT region, SUM(amount), COUNT(*), MAX(qty) FROM orders GROUP BY region`

	_, err := applyText(t, e, `PAUSE TRANSFORM a.nope`)
	if pe := wantErr(t, err, pgerr.UndefinedColumn, "ColumnNotFound"); pe.Position != 19 || !strings.Contains(pe.Detail, "dbl, qty, region") {
		t.Fatalf("ColumnNotFound: position %d detail %q", pe.Position, pe.Detail)
	}
	_, err = applyText(t, e, `PAUSE TRANSFORM a.id`)
	if pe := wantErr(t, err, pgerr.UndefinedColumn, "ColumnNotFound"); !strings.Contains(pe.Hint, "key column") {
		t.Fatalf("key column hint %q", pe.Hint)
	}
	_, err = applyText(t, e, `RESUME TRANSFORM a.dbl`)
	wantErr(t, err, pgerr.ObjectNotInPrerequisiteState, "ColumnNotPaused")

	a, err := applyText(t, e, `PAUSE TRANSFORM a.dbl`)
	if err != nil {
		t.Fatal(err)
	}
	if a.Kind != "paused" || a.Target != "a.dbl" || a.Status != "live" || !strings.Contains(a.Notice, "b.d1, c.s") {
		t.Fatalf("pause reply %+v", a)
	}
	if a, err = applyText(t, e, `PAUSE TRANSFORM a.dbl`); err != nil || !strings.Contains(a.Notice, "already paused") {
		t.Fatalf("repeated pause %+v %v", a, err)
	}
	if _, err := applyText(t, e, `PAUSE TRANSFORM a.qty`); err != nil {
		t.Fatal(err)
	}
	// c groups by b.q: every field of c is held by it.
	if got, want := pausedRows(t, e), []string{"a.dbl", "a.qty", "b.d1~", "b.q~", "c.n~", "c.s~"}; !slices.Equal(got, want) {
		t.Fatalf("paused %v, want %v", got, want)
	}
	if n := count(t, pool, `SELECT 1 FROM trellis._column_pause_edges`); n != 5 {
		t.Fatalf("%d edges, want 5 (a.dbl>b.d1, a.qty>b.q, b.d1>c.s, b.q>c.s, b.q>c.n)", n)
	}
	// Aggregate fields pause too: accumulators keep being maintained.
	for _, s := range []string{`PAUSE TRANSFORM g.total`, `PAUSE TRANSFORM g.top`} {
		if _, err := applyText(t, e, s); err != nil {
			t.Fatal(err)
		}
	}

	// A change only a paused column would show rewrites nothing.
	exec(t, pool, `CREATE TABLE a_xmin AS SELECT id, xmin::text AS x FROM a WHERE id <= 100`)
	exec(t, pool, `UPDATE orders SET amount = amount + 1 WHERE id <= 100`)
	converge(t, e)
	if n := count(t, pool, `SELECT 1 FROM a JOIN a_xmin USING (id) WHERE a.xmin::text <> a_xmin.x`); n != 0 {
		t.Fatalf("%d rows of a rewritten for a paused column", n)
	}
	exec(t, pool, `UPDATE orders SET amount = amount + 1, qty = qty + 1, region = 'r9' WHERE id % 5 = 0`)
	exec(t, pool, `DELETE FROM orders WHERE id % 11 = 0`)
	exec(t, pool, `INSERT INTO orders SELECT g, 'r' || (g % 3), g, 1 FROM generate_series(2001, 2300) g`)
	converge(t, e)
	// Live columns follow; paused ones keep their old values (NULL for new rows).
	assertSame(t, pool, `SELECT id, region FROM a`, `SELECT id, region FROM orders`)
	assertSame(t, pool, `SELECT id, reg FROM b`, `SELECT id, region FROM orders`)
	assertSame(t, pool, `SELECT region, n FROM g`, `SELECT region, COUNT(*) FROM orders GROUP BY region`)
	if diff(t, pool, `SELECT id, dbl FROM a`, `SELECT id, amount * 2 FROM orders`) == "" {
		t.Fatal("paused a.dbl was written")
	}
	if n := count(t, pool, `SELECT 1 FROM a WHERE id > 2000 AND (dbl IS NOT NULL OR qty IS NOT NULL)`); n != 0 {
		t.Fatalf("%d new rows got paused columns", n)
	}
	if diff(t, pool, `SELECT region, total, top FROM g`, `SELECT region, SUM(amount), MAX(qty) FROM orders GROUP BY region`) == "" {
		t.Fatal("paused g.total/g.top were written")
	}

	_, err = applyText(t, e, `RESUME TRANSFORM b.d1`)
	wantErr(t, err, pgerr.ObjectNotInPrerequisiteState, "UpstreamColumnPaused")

	a, err = applyText(t, e, `RESUME TRANSFORM a.dbl`)
	if err != nil {
		t.Fatal(err)
	}
	if a.Kind != "resumed" || !slices.Equal(a.Resumed, []string{"a.dbl", "b.d1"}) || a.Status != "waiting_to_backfill" {
		t.Fatalf("resume reply %+v", a)
	}
	_, err = applyText(t, e, `RESUME TRANSFORM a.qty`)
	wantErr(t, err, pgerr.ObjectNotInPrerequisiteState, "DefinitionNotLive") // a is rebuilding its dbl
	awaitLive(t, e, "a")
	awaitLive(t, e, "b")
	if k := scalar[string](t, pool, `SELECT build_kind FROM trellis._definitions WHERE target_table = 'public.a'`); k != "column_resume" {
		t.Fatalf("build kind %q", k)
	}
	converge(t, e)
	assertSame(t, pool, `SELECT id, dbl, region FROM a`, `SELECT id, amount * 2, region FROM orders`)
	assertSame(t, pool, `SELECT id, d1, reg FROM b`, `SELECT id, amount * 2 + 1, region FROM orders`)
	if got, want := pausedRows(t, e), []string{"a.qty", "b.q~", "c.n~", "c.s~", "g.top", "g.total"}; !slices.Equal(got, want) {
		t.Fatalf("paused %v, want %v", got, want)
	}

	a, err = applyText(t, e, `RESUME TRANSFORM a.qty`)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Resumed, []string{"a.qty", "b.q", "c.n", "c.s"}) {
		t.Fatalf("resumed %v", a.Resumed)
	}
	for _, s := range []string{`RESUME TRANSFORM g.total`} {
		if _, err := applyText(t, e, s); err != nil {
			t.Fatal(err)
		}
	}
	awaitLive(t, e, "g")
	if _, err := applyText(t, e, `RESUME TRANSFORM g.top`); err != nil {
		t.Fatal(err)
	}
	exec(t, pool, `UPDATE orders SET amount = amount + 3 WHERE id % 13 = 0`)
	for _, n := range []string{"a", "b", "c", "g"} {
		awaitLive(t, e, n)
	}
	converge(t, e)
	assertSame(t, pool, `SELECT id, dbl, qty, region FROM a`, oracleA)
	assertSame(t, pool, `SELECT id, d1, q, reg FROM b`, oracleB)
	assertSame(t, pool, `SELECT q, s, n FROM c`, oracleC)
	assertSame(t, pool, `SELECT region, total, n, top FROM g`, oracleG)
	if got := pausedRows(t, e); len(got) != 0 {
		t.Fatalf("still paused: %v", got)
	}

	// A whole-transform pause: its fields cannot be resumed alone.
	if _, err := applyText(t, e, `PAUSE TRANSFORM a.qty`); err != nil {
		t.Fatal(err)
	}
	if _, err := applyText(t, e, `PAUSE TRANSFORM a`); err != nil {
		t.Fatal(err)
	}
	_, err = applyText(t, e, `RESUME TRANSFORM a.qty`)
	wantErr(t, err, pgerr.ObjectNotInPrerequisiteState, "DefinitionNotLive")
}

// A definition reading a paused field is born with the reader paused, and
// the column fuse's automatic pause cascades like an operator's.
func TestFieldPausesReachNewAndFusedReaders(t *testing.T) {
	pool := testDB(t)
	exec(t, pool, `CREATE TABLE m (id int PRIMARY KEY, a int, b int)`)
	exec(t, pool, `INSERT INTO m SELECT g, g, 1 FROM generate_series(1, 50) g`)
	e, _ := startEngine(t, pool, fastConfig())
	for _, s := range []string{
		`TRANSFORM u FROM m SELECT a / b AS ratio, a + 1 AS up`,
		`TRANSFORM v FROM u SELECT ratio * 10 AS r10, up AS up`,
	} {
		if _, err := applyText(t, e, s); err != nil {
			t.Fatal(err)
		}
	}
	awaitLive(t, e, "u")
	awaitLive(t, e, "v")
	// Five failing rows trip the column fuse on u.ratio; v.r10 follows.
	exec(t, pool, `UPDATE m SET b = 0 WHERE id <= 6`)
	converge(t, e)
	if got, want := pausedRows(t, e), []string{"u.ratio", "v.r10~"}; !slices.Equal(got, want) {
		t.Fatalf("paused %v, want %v", got, want)
	}
	if _, err := applyText(t, e, `TRANSFORM w FROM u SELECT ratio + up AS bth, up * 2 AS up2`); err != nil {
		t.Fatal(err)
	}
	if got, want := pausedRows(t, e), []string{"u.ratio", "v.r10~", "w.bth~"}; !slices.Equal(got, want) {
		t.Fatalf("paused %v, want %v", got, want)
	}
	exec(t, pool, `UPDATE m SET b = 1`)
	a, err := applyText(t, e, `RESUME TRANSFORM u.ratio`)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Resumed, []string{"u.ratio", "v.r10", "w.bth"}) {
		t.Fatalf("resumed %v", a.Resumed)
	}
	for _, n := range []string{"u", "v", "w"} {
		awaitLive(t, e, n)
	}
	converge(t, e)
	assertSame(t, pool, `SELECT id, ratio, up FROM u`, `SELECT id, a / b, a + 1 FROM m`)
	assertSame(t, pool, `SELECT id, r10, up FROM v`, `SELECT id, a / b * 10, a + 1 FROM m`)
	assertSame(t, pool, `SELECT id, bth, up2 FROM w`, `SELECT id, a / b + a + 1, (a + 1) * 2 FROM m`)
}
