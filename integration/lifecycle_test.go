package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// sameAs polls until query a and query b agree as multisets, or fails.
func (h *trellisHarness) sameAs(t *testing.T, c *pgx.Conn, a, b string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int64
		err := c.QueryRow(context.Background(), `SELECT count(*) FROM (((`+a+`) EXCEPT ALL (`+b+`)) UNION ALL ((`+b+`) EXCEPT ALL (`+a+`))) d`).Scan(&n)
		if err == nil && n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s differs from %s in %d rows (%v)", a, b, n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// PAUSE, writes, RESUME through the proxy: replies and notices of surface
// §3.2, and the target ends equal to its recompute.
func TestPauseResumeThroughProxy(t *testing.T) {
	h := startTrellis(t)
	ctx := context.Background()
	c := h.client(t)
	mustExec(t, c, `CREATE TABLE orders (id bigint PRIMARY KEY, region text, price numeric)`)
	mustExec(t, c, `INSERT INTO orders SELECT g, 'r' || (g % 3), g FROM generate_series(1, 300) g`)
	mustExec(t, c, `TRANSFORM order_totals FROM orders SELECT price * 2 AS double_price`)
	h.waitStatus(t, "order_totals", "live")

	var notices []string
	cfg, _ := pgx.ParseConfig(h.url("postgres", "", h.db, "default_query_exec_mode=simple_protocol"))
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { notices = append(notices, n.Message) }
	simple, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer simple.Close(ctx)
	reply := func(stmt string) (map[string]any, string) {
		t.Helper()
		notices = nil
		rows, err := simple.Query(ctx, stmt)
		if err != nil {
			t.Fatal(err)
		}
		vals, err := pgx.CollectRows(rows, pgx.RowToMap)
		if err != nil || len(vals) != 1 {
			t.Fatalf("%s: %v %v", stmt, vals, err)
		}
		if len(notices) != 1 {
			t.Fatalf("%s: notices %q", stmt, notices)
		}
		return vals[0], rows.CommandTag().String()
	}
	v, tag := reply(`PAUSE TRANSFORM order_totals`)
	if tag != "PAUSE TRANSFORM" || v["kind"] != "paused" || v["status"] != "paused" ||
		notices[0] != "transform public.order_totals paused; its rows stay as they are until RESUME TRANSFORM order_totals" {
		t.Fatalf("pause: %v %s %q", v, tag, notices)
	}
	if v, _ = reply(`PAUSE TRANSFORM order_totals`); v["kind"] != "paused" || !strings.Contains(notices[0], "was already paused") {
		t.Fatalf("repeated pause: %v %q", v, notices)
	}
	mustExec(t, c, `UPDATE orders SET price = price + 1 WHERE id % 4 = 0`)
	mustExec(t, c, `DELETE FROM orders WHERE id % 9 = 0`)
	var status string
	if err := c.QueryRow(ctx, `SELECT status FROM trellis.status WHERE target = 'order_totals'`).Scan(&status); err != nil || status != "paused" {
		t.Fatalf("status %q %v", status, err)
	}
	v, tag = reply(`RESUME TRANSFORM order_totals`)
	if tag != "RESUME TRANSFORM" || v["kind"] != "resumed" || v["status"] != "waiting_to_backfill" ||
		notices[0] != "transform public.order_totals resumed; it is waiting_to_backfill and will be rebuilt from public.orders" {
		t.Fatalf("resume: %v %s %q", v, tag, notices)
	}
	h.waitStatus(t, "order_totals", "live")
	h.sameAs(t, c, `SELECT id, double_price FROM order_totals`, `SELECT id, price * 2 FROM orders`)

	// RESUME of a running transform is an error that aborts the block.
	_, err = c.Exec(ctx, `RESUME TRANSFORM order_totals`)
	if pe := pgErrOf(t, err); pe.Code != "55000" {
		t.Fatalf("resume of a live transform: %s %s", pe.Code, pe.Message)
	}
}

// A read column renamed under a transform pauses it with a readable reason;
// RESUME after renaming back rebuilds exactly. Triggers disabled for a bulk
// load and re-enabled are repaired without losing the writes.
func TestSchemaChangesThroughProxy(t *testing.T) {
	h := startTrellis(t)
	ctx := context.Background()
	c := h.client(t)
	mustExec(t, c, `CREATE TABLE s (id int PRIMARY KEY, a int, b int)`)
	mustExec(t, c, `INSERT INTO s SELECT g, g, g FROM generate_series(1, 200) g`)
	mustExec(t, c, `TRANSFORM s_a FROM s SELECT a + 1 AS a1`)
	mustExec(t, c, `TRANSFORM s_b FROM s SELECT b * 2 AS b2`)
	h.waitStatus(t, "s_a", "live")
	h.waitStatus(t, "s_b", "live")

	mustExec(t, c, `ALTER TABLE s RENAME COLUMN a TO a_new`)
	mustExec(t, c, `INSERT INTO s (id, a_new, b) VALUES (1000, 1, 1)`)
	h.waitStatus(t, "s_a", "paused")
	var problem, column, remedy string
	if err := c.QueryRow(ctx, `SELECT problem, capture_failure ->> 'column', capture_failure ->> 'remedy'
		FROM trellis.status WHERE target = 's_a'`).Scan(&problem, &column, &remedy); err != nil {
		t.Fatal(err)
	}
	if column != "a" || !strings.Contains(problem, "renamed to a_new") || !strings.Contains(remedy, "RESUME TRANSFORM s_a") {
		t.Fatalf("problem %q column %q remedy %q", problem, column, remedy)
	}
	h.sameAs(t, c, `SELECT id, b2 FROM s_b`, `SELECT id, b * 2 FROM s`) // the other reader keeps draining
	_, err := c.Exec(ctx, `RESUME TRANSFORM s_a`)
	if pe := pgErrOf(t, err); pe.Code != "42703" || !strings.Contains(pe.Message, "cannot resume transform public.s_a") {
		t.Fatalf("resume while renamed: %s %s", pe.Code, pe.Message)
	}
	mustExec(t, c, `ALTER TABLE s RENAME COLUMN a_new TO a`)
	mustExec(t, c, `RESUME TRANSFORM s_a`)
	h.waitStatus(t, "s_a", "live")
	h.sameAs(t, c, `SELECT id, a1 FROM s_a`, `SELECT id, a + 1 FROM s`)

	mustExec(t, c, `BEGIN; ALTER TABLE s DISABLE TRIGGER ALL; UPDATE s SET a = a + 100, b = b + 100 WHERE id <= 50;
		DELETE FROM s WHERE id > 150; ALTER TABLE s ENABLE TRIGGER ALL; COMMIT`)
	h.sameAs(t, c, `SELECT id, a1 FROM s_a`, `SELECT id, a + 1 FROM s`)
	h.sameAs(t, c, `SELECT id, b2 FROM s_b`, `SELECT id, b * 2 FROM s`)

	// A target edited by hand is repaired by request_backfill (surface §7.1).
	mustExec(t, c, `UPDATE s_b SET b2 = -1 WHERE id <= 5`)
	mustExec(t, c, `INSERT INTO s_b VALUES (5000, 0)`)
	var queued []string
	if err := c.QueryRow(ctx, `SELECT trellis.request_backfill('s', 's_b')`).Scan(&queued); err != nil || len(queued) != 1 || queued[0] != "s_b" {
		t.Fatalf("request_backfill: %v %v", queued, err)
	}
	h.waitStatus(t, "s_b", "live")
	h.sameAs(t, c, `SELECT id, b2 FROM s_b`, `SELECT id, b * 2 FROM s`)
	_, err = c.Exec(ctx, `SELECT trellis.request_backfill('no_such_table')`)
	if pe := pgErrOf(t, err); pe.Code != "42P01" {
		t.Fatalf("request_backfill of an unknown table: %s %s", pe.Code, pe.Message)
	}
}

// DROP TRANSFORM by an ordinary role through the proxy: the target leaves
// the role's namespace in the statement's transaction and its files are
// freed by the staging worker after the COMMIT (a large target's unlink
// never lands in the client's COMMIT). A view on the target refuses the
// drop with PostgreSQL's own error, a rolled-back drop leaves everything
// as it was, and trellis.status never shows the trash.
func TestDropTransformFreesTablesAfterCommit(t *testing.T) {
	h := startTrellis(t)
	ctx := context.Background()
	su := h.client(t)
	for _, q := range []string{
		`DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'trash_app') THEN CREATE ROLE trash_app LOGIN; END IF; END $$`,
		`GRANT CREATE ON SCHEMA public TO trash_app`,
	} {
		mustExec(t, su, q)
	}
	app := connectURL(t, h.url("trash_app", "", h.db, ""))
	mustExec(t, app, `CREATE TABLE big_src (id bigint PRIMARY KEY, v int)`)
	mustExec(t, app, `INSERT INTO big_src SELECT g, g FROM generate_series(1, 2000) g`)
	mustExec(t, app, `TRANSFORM big_t FROM big_src SELECT v * 2 AS v2`)
	h.waitStatus(t, "big_t", "live")
	mustExec(t, app, `PAUSE TRANSFORM big_t`)
	var targetOID, ledgerOID uint32
	if err := h.pool.QueryRow(ctx, `SELECT target_oid, ledger_oid FROM trellis._definitions WHERE target_table = 'public.big_t'`).Scan(&targetOID, &ledgerOID); err != nil {
		t.Fatal(err)
	}
	statusRows := func() int {
		var n int
		if err := app.QueryRow(ctx, `SELECT count(*) FROM trellis.status WHERE target = 'big_t'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	mustExec(t, app, `CREATE VIEW big_t_view AS SELECT id FROM big_t`)
	pe := refused(t, app, `DROP TRANSFORM big_t`, "2BP01", "DependentsBlockDrop")
	if pe.Message != "cannot drop table public.big_t because other objects depend on it" ||
		!strings.Contains(pe.Detail, "view public.big_t_view depends on table public.big_t") || pe.Position != 16 {
		t.Fatalf("refusal: %q / %q at %d", pe.Message, pe.Detail, pe.Position)
	}
	mustExec(t, app, `DROP VIEW big_t_view`)

	tx, err := app.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `DROP TRANSFORM big_t`); err != nil {
		t.Fatal(err)
	}
	var gone bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass('big_t') IS NULL`).Scan(&gone); err != nil || !gone {
		t.Fatalf("big_t still resolves inside the dropping transaction (%v)", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := qString(t, app, `SELECT count(*)::text FROM big_t`); n != "2000" || statusRows() != 1 {
		t.Fatalf("after a rolled-back drop: %s rows, %d status rows", n, statusRows())
	}

	tx, err = app.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `DROP TRANSFORM big_t`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if defs, table, _ := h.leftovers(t, "big_t"); defs != 0 || table || statusRows() != 0 {
		t.Fatalf("drop left definitions=%d table=%v status rows=%d", defs, table, statusRows())
	}
	eventually(t, 30*time.Second, "the dropped tables freed", func() bool {
		var rels, schemas int
		err := h.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_class WHERE oid IN ($1, $2)),
			(SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'trellis\_trash\_%')`, targetOID, ledgerOID).Scan(&rels, &schemas)
		return err == nil && rels == 0 && schemas == 0
	})
	// The name is free again for the same role.
	mustExec(t, app, `TRANSFORM big_t FROM big_src SELECT v + 1 AS v1`)
	h.waitStatus(t, "big_t", "live")
	h.sameAs(t, app, `SELECT id, v1 FROM big_t`, `SELECT id, v + 1 FROM big_src`)
}
