package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/trellis-proxy/trellis-proxy/engine/model"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// DROP TRANSFORM moves the target and ledger out of the caller's namespace
// in its own transaction and the staging worker frees them after the
// COMMIT; a rolled-back drop leaves everything as it was, and an object
// depending on the target refuses the drop with PostgreSQL's own error,
// exactly as DROP TABLE would.
func TestDropMovesTablesToTrashAndFreesThemAfterCommit(t *testing.T) {
	pool := testDB(t)
	ctx := context.Background()
	exec(t, pool, `CREATE TABLE s (id int PRIMARY KEY, a int)`)
	exec(t, pool, `INSERT INTO s SELECT g, g FROM generate_series(1, 300) g`)
	e, _ := startEngine(t, pool, fastConfig())
	if _, err := applyText(t, e, `TRANSFORM v FROM s SELECT a * 2 AS a2`); err != nil {
		t.Fatal(err)
	}
	awaitLive(t, e, "v")
	if _, err := applyText(t, e, `PAUSE TRANSFORM v`); err != nil {
		t.Fatal(err)
	}
	var targetOID, ledgerOID uint32
	if err := pool.QueryRow(ctx, `SELECT target_oid, ledger_oid FROM trellis._definitions`).Scan(&targetOID, &ledgerOID); err != nil {
		t.Fatal(err)
	}
	relsLeft := func() int64 {
		return count(t, pool, `SELECT 1 FROM pg_class WHERE oid IN (`+model.Itoa(int(targetOID))+`, `+model.Itoa(int(ledgerOID))+`)`)
	}
	trashSchemas := func() int64 {
		return count(t, pool, `SELECT 1 FROM pg_namespace WHERE nspname LIKE 'trellis\_trash\_%'`)
	}

	// A view on the target: PostgreSQL's refusal, nothing changed.
	exec(t, pool, `CREATE VIEW v_view AS SELECT id FROM v`)
	_, err := applyText(t, e, `DROP TRANSFORM v`)
	pe := wantErr(t, err, pgerr.DependentObjectsStillExist, "DependentsBlockDrop")
	if !strings.Contains(pe.Message, "cannot drop table public.v because other objects depend on it") ||
		!strings.Contains(pe.Detail, "view public.v_view depends on table public.v") || !strings.Contains(pe.Hint, "DROP TRANSFORM does not cascade") {
		t.Fatalf("refusal %q / %q / %q", pe.Message, pe.Detail, pe.Hint)
	}
	if st, _, _ := storedStatus(t, e, "v"); st != "paused" || count(t, pool, `SELECT 1 FROM public.v`) != 300 || trashSchemas() != 0 {
		t.Fatalf("a refused drop changed something: status %s, trash schemas %d", st, trashSchemas())
	}
	exec(t, pool, `DROP VIEW v_view`)

	// Rolled back: the tables are where they were, with their rows.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Apply(ctx, tx, mustParse(t, `DROP TRANSFORM v`), ApplyOptions{InTransactionBlock: true}); err != nil {
		t.Fatal(err)
	}
	var inTrash string
	if err := tx.QueryRow(ctx, `SELECT relnamespace::regnamespace::text FROM pg_class WHERE oid = $1`, targetOID).Scan(&inTrash); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(inTrash, "trellis_trash_") {
		t.Fatalf("inside the dropping transaction the target is in %s, not a trash schema", inTrash)
	}
	var gone bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass('public.v') IS NULL AND to_regclass('public.v__ledger') IS NULL`).Scan(&gone); err != nil || !gone {
		t.Fatalf("the dropped tables still resolve in public inside the transaction (%v)", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := storedStatus(t, e, "v"); st != "paused" || count(t, pool, `SELECT 1 FROM public.v`) != 300 ||
		count(t, pool, `SELECT 1 FROM trellis._trash`) != 0 || trashSchemas() != 0 {
		t.Fatalf("a rolled-back drop left status %s, trash schemas %d", st, trashSchemas())
	}

	// Committed: gone from public at once, freed shortly after.
	a, err := applyText(t, e, `DROP TRANSFORM v`)
	if err != nil {
		t.Fatal(err)
	}
	if a.Kind != "dropped" {
		t.Fatalf("drop reply %+v", a)
	}
	if n := count(t, pool, `SELECT 1 FROM pg_class WHERE relname IN ('v', 'v__ledger') AND relnamespace = 'public'::regnamespace`); n != 0 {
		t.Fatalf("%d dropped tables still in public", n)
	}
	if n := count(t, pool, `SELECT 1 FROM trellis._definitions`); n != 0 {
		t.Fatalf("%d definitions left", n)
	}
	deadline := time.Now().Add(30 * time.Second)
	for relsLeft() != 0 || trashSchemas() != 0 || count(t, pool, `SELECT 1 FROM trellis._trash`) != 0 {
		if time.Now().After(deadline) {
			var why string
			_ = pool.QueryRow(ctx, `SELECT coalesce(string_agg(schema_name || ': ' || coalesce(last_error, '-'), '; '), 'none') FROM trellis._trash`).Scan(&why)
			t.Fatalf("trash not emptied: %d relations, %d schemas (%s)", relsLeft(), trashSchemas(), why)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The name is free for a new definition, which builds as usual.
	if _, err := applyText(t, e, `TRANSFORM v FROM s SELECT a + 1 AS a1`); err != nil {
		t.Fatal(err)
	}
	awaitLive(t, e, "v")
	converge(t, e)
	assertSame(t, pool, `SELECT id, a1 FROM v`, `SELECT id, a + 1 FROM s`)
}
