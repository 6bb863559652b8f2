package engine

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/engine/catalog"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

func readViewRules(t *testing.T, q Querier) map[string]string {
	t.Helper()
	// The rule's row version: CREATE OR REPLACE VIEW keeps the oid but
	// rewrites the rule.
	rows, err := q.Query(context.Background(), `SELECT c.relname::text, r.xmin::text FROM pg_class c
		JOIN pg_rewrite r ON r.ev_class = c.oid
		WHERE c.relnamespace = 'trellis'::regnamespace AND c.relkind = 'v' AND c.relname LIKE '\_read\_%'`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for rows.Next() {
		var n, o string
		if err := rows.Scan(&n, &o); err != nil {
			t.Fatal(err)
		}
		out[n] = o
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// The read views follow the binary like the functions, but an unchanged
// script is not replaced (no ACCESS EXCLUSIVE lock behind the surface's
// readers at every start), a missing view comes back, and no role but the
// workers' reads them.
func TestReadViewsLifecycle(t *testing.T) {
	pool := testDB(t)
	ctx := context.Background()
	e := New(pool, Config{})
	defer e.Close()
	if err := e.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	first := readViewRules(t, pool)
	names := make([]string, 0, len(first))
	for n := range first {
		names = append(names, n)
	}
	slices.Sort(names)
	want := catalog.ReadViews()
	slices.Sort(want)
	if !slices.Equal(names, want) || len(want) < 10 {
		t.Fatalf("read views %v, want %v", names, want)
	}

	if err := e.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	again := readViewRules(t, pool)
	for n, o := range first {
		if again[n] != o {
			t.Errorf("%s replaced by an unchanged Migrate (rule xmin %s -> %s)", n, o, again[n])
		}
	}

	exec(t, pool, `DROP VIEW trellis._read_workers`)
	if err := e.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := readViewRules(t, pool)["_read_workers"]; !ok {
		t.Fatal("Migrate did not recreate a dropped read view")
	}

	// Another role reads neither storage nor the read views.
	exec(t, pool, `DROP ROLE IF EXISTS rv_tenant; CREATE ROLE rv_tenant LOGIN`)
	defer exec(t, pool, `DROP ROLE IF EXISTS rv_tenant`)
	exec(t, pool, `GRANT USAGE ON SCHEMA trellis TO rv_tenant`)
	defer exec(t, pool, `REVOKE USAGE ON SCHEMA trellis FROM rv_tenant`)
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	exec(t, tx, `SET LOCAL ROLE rv_tenant`)
	_, err = tx.Exec(ctx, `SELECT * FROM trellis._read_definitions`)
	if err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("a tenant reading a read view: %v", err)
	}
}

// The exported catalog reads: the marker, the mutex, a job's accounting.
func TestCatalogReadsExported(t *testing.T) {
	pool := testDB(t)
	ctx := context.Background()
	e := New(pool, Config{})
	defer e.Close()
	if err := e.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for schema, want := range map[string]bool{"trellis": true, "public": false, "nowhere": false} {
		if got, err := IsCatalog(ctx, pool, schema); err != nil || got != want {
			t.Errorf("IsCatalog(%s) = %v, %v", schema, got, err)
		}
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := LockCatalog(ctx, tx, "trellis"); err != nil {
		t.Fatal(err)
	}
	var mode string
	if err := tx.QueryRow(ctx, `SELECT mode FROM pg_locks WHERE pid = pg_backend_pid() AND relation = 'trellis._instance'::regclass`).Scan(&mode); err != nil || mode != "ShareUpdateExclusiveLock" {
		t.Fatalf("lock held: %q %v", mode, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	exec(t, pool, `CREATE TABLE scr (id int PRIMARY KEY, v int)`)
	d := define(t, e, Spec{Target: TableName{Name: "scr_x"}, Source: TableName{Name: "scr"}, Fields: []Field{{Name: "w", Expr: col("v")}}})
	var id int64
	if err := pool.QueryRow(ctx, `INSERT INTO trellis._self_checks (definition_id, mode, timeout_ms, state, created_at, finished_at, pages, rows_compared, divergence_count)
		VALUES ($1, 'standard', 0, 'done', now() - interval '2.5 seconds', now(), 3, 1000, 2) RETURNING id`, d.ID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	run, err := e.SelfCheckRun(ctx, id)
	if err != nil || run != (SelfCheckRun{Took: 2500 * time.Millisecond, Pages: 3, Rows: 1000, Divergences: 2}) {
		t.Fatalf("SelfCheckRun = %+v, %v", run, err)
	}
	if _, err := e.SelfCheckRun(ctx, id+1); pgerr.CodeOf(err) != pgerr.UndefinedObject {
		t.Fatalf("SelfCheckRun of no job: %v", err)
	}
}
