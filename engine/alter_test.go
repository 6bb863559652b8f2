package engine

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

func TestAlterTransformAddAlterDropUnderWriters(t *testing.T) {
	pool := testDB(t)
	exec(t, pool, `CREATE TABLE orders (id bigint PRIMARY KEY, amount numeric(12,2), qty int, note text)`)
	exec(t, pool, `INSERT INTO orders SELECT g, g, g % 7, 'n' || g FROM generate_series(1, 3000) g`)
	cfg := fastConfig()
	cfg.BuildChunkSize = 500
	e, _ := startEngine(t, pool, cfg)
	for _, s := range []string{
		`TRANSFORM ov FROM orders SELECT amount * 2 AS gross, qty AS qty, note AS note`,
		`TRANSFORM down FROM ov SELECT gross + 1 AS g1`,
		`TRANSFORM agg FROM orders GROUP BY qty SELECT qty AS qty, COUNT(*) AS n`,
	} {
		if _, err := applyText(t, e, s); err != nil {
			t.Fatal(err)
		}
	}
	awaitLive(t, e, "ov")
	awaitLive(t, e, "down")
	awaitLive(t, e, "agg")

	// Refusals, in the order of grammar §9.3, each leaving nothing behind.
	_, err := applyText(t, e, `ALTER TRANSFORM nope ADD 1 AS x`)
	wantErr(t, err, pgerr.UndefinedObject, "TransformNotFound")
	_, err = applyText(t, e, `ALTER TRANSFORM agg ADD SUM(qty) AS s`)
	wantErr(t, err, pgerr.FeatureNotSupported, "UnsupportedAlter")
	_, err = applyText(t, e, `ALTER TRANSFORM ov ADD qty + 1 AS gross`)
	wantErr(t, err, pgerr.DuplicateColumn, "AlterFieldAlreadyExists")
	_, err = applyText(t, e, `ALTER TRANSFORM ov ALTER nope AS 1`)
	wantErr(t, err, pgerr.UndefinedColumn, "AlterFieldNotFound")
	_, err = applyText(t, e, `ALTER TRANSFORM ov ADD amout * 3 AS triple`)
	wantErr(t, err, pgerr.UndefinedColumn, "UnresolvedColumn")
	_, err = applyText(t, e, `ALTER TRANSFORM ov ADD now() AS t`)
	wantErr(t, err, pgerr.InvalidObjectDefinition, "NonImmutableConstruct")
	volatileAdd := `ALTER TRANSFORM ov ADD qty + 1 AS q1, ADD qty * random() AS r`
	_, err = applyText(t, e, volatileAdd)
	if pe := wantErr(t, err, pgerr.InvalidObjectDefinition, "NonImmutableConstruct"); pe.Position != strings.Index(volatileAdd, "random")+1 {
		t.Fatalf("NonImmutableConstruct at %d, want the call at %d", pe.Position, strings.Index(volatileAdd, "random")+1)
	}
	_, err = applyText(t, e, `ALTER TRANSFORM ov DROP gross`)
	if pe := wantErr(t, err, pgerr.DependentObjectsStillExist, "DependentsBlockDrop"); !strings.Contains(pe.Detail, "down.g1 reads ov.gross") || pe.Position != 25 {
		t.Fatalf("DependentsBlockDrop detail %q position %d", pe.Detail, pe.Position)
	}
	_, err = applyText(t, e, `ALTER TRANSFORM ov ALTER gross AS (amount * 2)::float8`)
	if pe := wantErr(t, err, pgerr.FeatureNotSupported, "UnsupportedAlter"); !strings.Contains(pe.Message, "from numeric to double precision") || !strings.Contains(pe.Hint, "DROP gross, ADD") {
		t.Fatalf("type change: %q hint %q", pe.Message, pe.Hint)
	}
	_, v0 := mustVersion(t, e, "ov")
	a, err := applyText(t, e, `ALTER TRANSFORM ov ADD amount * 2 AS gross, DROP nothing_here, ALTER qty AS qty`)
	if err != nil || a.Kind != "altered" || len(a.Added)+len(a.Altered)+len(a.Dropped) != 0 || *a.Version != v0 {
		t.Fatalf("no-op alter %+v %v", a, err)
	}

	// Writers run throughout the edits.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var writes atomic.Int64
	var lastErr atomic.Value
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				id := 1 + (i*7+w*1000)%3500
				_, err := pool.Exec(ctx, `INSERT INTO orders VALUES ($1::bigint, $1::bigint, $1::bigint % 5, 'w') ON CONFLICT (id) DO UPDATE SET amount = orders.amount + 1, qty = orders.qty + 1`, id)
				if err == nil {
					writes.Add(1)
				} else if ctx.Err() == nil {
					lastErr.Store(err.Error())
				}
				if i%50 == 0 {
					pool.Exec(ctx, `DELETE FROM orders WHERE id = $1`, id+3)
				}
			}
		}(w)
	}
	a, err = applyText(t, e, `ALTER TRANSFORM ov ADD qty * 10 AS q10, ALTER gross AS amount * 3, DROP note`)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Added, []string{"q10"}) || !slices.Equal(a.Altered, []string{"gross"}) || !slices.Equal(a.Dropped, []string{"note"}) ||
		*a.Version <= v0 || a.Status != "waiting_to_backfill" ||
		a.Notice != "transform public.ov altered: added q10; altered gross; dropped note; the changed columns are rebuilt in the background" {
		t.Fatalf("alter reply %+v", a)
	}
	if a.SourceColumns["amount"] != "numeric(12,2)" || a.SourceColumns["id"] != "bigint" || a.SourceColumns["note"] != "" {
		t.Fatalf("source columns %v", a.SourceColumns)
	}
	awaitLive(t, e, "ov")
	if k := scalar[string](t, pool, `SELECT build_kind FROM trellis._definitions WHERE target_table = 'public.ov'`); k != "alter" {
		t.Fatalf("build kind %q", k)
	}
	time.Sleep(300 * time.Millisecond)
	cancel()
	wg.Wait()
	if writes.Load() == 0 {
		t.Fatalf("no writes went through: %v", lastErr.Load())
	}
	converge(t, e)
	assertSame(t, pool, `SELECT id, gross, qty, q10 FROM ov`, `SELECT id, amount * 3, qty, qty * 10 FROM orders`)
	assertSame(t, pool, `SELECT id, g1 FROM down`, `SELECT id, amount * 3 + 1 FROM orders`)
	var stmt string
	if err := pool.QueryRow(context.Background(), `SELECT definition_sql FROM trellis._definitions WHERE target_table = 'public.ov'`).Scan(&stmt); err != nil {
		t.Fatal(err)
	}
	if want := `TRANSFORM "public"."ov" FROM "public"."orders" SELECT "amount" * 3 AS "gross", "qty" AS "qty", "qty" * 10 AS "q10"`; stmt != want {
		t.Fatalf("stored statement\n%s\nwant\n%s", stmt, want)
	}

	// A DROP alone needs no build; ALTER of a paused transform is refused.
	a, err = applyText(t, e, `ALTER TRANSFORM ov DROP q10`)
	if err != nil || a.Status != "live" {
		t.Fatalf("drop-only alter %+v %v", a, err)
	}
	if n := count(t, pool, `SELECT 1 FROM pg_attribute WHERE attrelid = 'ov'::regclass AND attname = 'q10' AND NOT attisdropped`); n != 0 {
		t.Fatal("q10 still a column")
	}
	if _, err := applyText(t, e, `PAUSE TRANSFORM down`); err != nil {
		t.Fatal(err)
	}
	_, err = applyText(t, e, `ALTER TRANSFORM down ADD g1 * 2 AS g2`)
	wantErr(t, err, pgerr.ObjectNotInPrerequisiteState, "TransformNotLive")

	// DROP TRANSFORM (grammar §4.5): paused first, leaves inward.
	_, err = applyText(t, e, `DROP TRANSFORM ov`)
	wantErr(t, err, pgerr.ObjectNotInPrerequisiteState, "TransformNotPaused")
	if _, err := applyText(t, e, `PAUSE TRANSFORM ov`); err != nil {
		t.Fatal(err)
	}
	_, err = applyText(t, e, `DROP TRANSFORM ov`)
	if pe := wantErr(t, err, pgerr.DependentObjectsStillExist, "DependentsBlockDrop"); pe.Detail != "subject: ov\ndown.g1 reads ov.gross" || pe.Position != 16 {
		t.Fatalf("DependentsBlockDrop detail %q position %d", pe.Detail, pe.Position)
	}
	for _, s := range []string{`DROP TRANSFORM down`, `DROP TRANSFORM ov`} {
		if a, err := applyText(t, e, s); err != nil || a.Kind != "dropped" {
			t.Fatalf("%s: %+v %v", s, a, err)
		}
	}
}

func mustVersion(t *testing.T, e *Engine, target string) (string, int64) {
	t.Helper()
	st, _, v := storedStatus(t, e, target)
	return st, v
}
