package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-proxy/trellis-proxy/engine"
	"github.com/trellis-proxy/trellis-proxy/internal/intercept"
	"github.com/trellis-proxy/trellis-proxy/internal/pgcluster"
	"github.com/trellis-proxy/trellis-proxy/internal/proxy"
	"github.com/trellis-proxy/trellis-proxy/virtualtables"
)

var trellisDBSeq atomic.Int64

// trellisHarness is a proxy with the engine and the Trellis interceptor, on
// a database of its own.
type trellisHarness struct {
	*harness
	db      string
	workers string        // the workers' role; "" is the cluster's superuser
	pool    *pgxpool.Pool // direct, as the workers' role
	engine  *engine.Engine
}

func startTrellis(t *testing.T) *trellisHarness {
	t.Helper()
	return startTrellisWorkers(t, "")
}

// startTrellisWorkers is startTrellis with the workers connecting as
// workers, an ordinary role with CREATE on the database only (the
// least-privilege deployment of docs/security.md); "" is the cluster's
// superuser, as in the embedded default.
func startTrellisWorkers(t *testing.T, workers string) *trellisHarness {
	t.Helper()
	return startTrellisOpts(t, workers, false)
}

// startTrellisFaults is startTrellis for tests that make pages fail with a
// trigger on a target (engine.Config.TestingTargetTriggers).
func startTrellisFaults(t *testing.T) *trellisHarness {
	t.Helper()
	return startTrellisOpts(t, "", true)
}

func startTrellisOpts(t *testing.T, workers string, targetTriggers bool) *trellisHarness {
	t.Helper()
	c := pgcluster.ForTest(t)
	db := c.FreshDB(t, "trellis")
	pcfg, err := pgxpool.ParseConfig(c.URL(db))
	if err != nil {
		t.Fatal(err)
	}
	if workers != "" {
		admin := connectURL(t, c.URL(db))
		mustExec(t, admin, `DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '`+workers+`') THEN CREATE ROLE `+pgx.Identifier{workers}.Sanitize()+` LOGIN; END IF; END $$`)
		mustExec(t, admin, `GRANT CREATE ON DATABASE `+pgx.Identifier{db}.Sanitize()+` TO `+pgx.Identifier{workers}.Sanitize())
		pcfg.ConnConfig.User, pcfg.ConnConfig.Password = workers, ""
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	logger := testLogger(t)
	e := engine.New(pool, engine.Config{
		Logger:       logger.With("component", "engine"),
		SealInterval: 10 * time.Millisecond, StagingInterval: 100 * time.Millisecond,
		PollInterval: 200 * time.Millisecond, TakeoverInterval: 200 * time.Millisecond,
		Heartbeat: time.Second, WorkerTTL: 5 * time.Second,
		TestingTargetTriggers: targetTriggers,
	})
	if err := e.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := virtualtables.InstallOptions(context.Background(), pool, virtualtables.Options{Schema: "trellis", WorkerTTL: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	ic := intercept.New(intercept.Config{Engine: e, Schema: "trellis", Database: db,
		Logger: testLogger(t)})
	h := start(t, func(cfg *proxy.Config, opts *proxy.Options) {
		cfg.Upstream = c.URL(db)
		opts.Interceptor = ic
	})
	t.Cleanup(func() {
		h.stop()
		cancel()
		<-done
		e.Close()
		pool.Close()
	})
	return &trellisHarness{harness: h, db: db, workers: workers, pool: pool, engine: e}
}

func (h *trellisHarness) client(t *testing.T) *pgx.Conn {
	t.Helper()
	return connectURL(t, h.url("postgres", "", h.db, ""))
}

// waitStatus polls the catalog until the transform reaches want.
func (h *trellisHarness) waitStatus(t *testing.T, target, want string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var got string
		err := h.pool.QueryRow(context.Background(),
			`SELECT status FROM trellis._definitions WHERE target_table = 'public.' || $1`, target).Scan(&got)
		if err == nil && got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: status %q (err %v), want %q", target, got, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func pgErrOf(t *testing.T, err error) *pgconn.PgError {
	t.Helper()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		t.Fatalf("want a Postgres error, got %T %v", err, err)
	}
	return pe
}

// The walkthrough of the README, through the proxy with pgx in both
// protocols: define, go live, write, wait for convergence, read.
func TestTransformThroughProxy(t *testing.T) {
	h := startTrellis(t)
	ctx := context.Background()
	c := h.client(t)
	mustExec(t, c, `CREATE TABLE orders (id bigint PRIMARY KEY, customer_id bigint, price numeric, tax numeric, qty integer)`)
	mustExec(t, c, `INSERT INTO orders SELECT g, g % 10, g, g / 10.0, g % 5 FROM generate_series(1, 100) g`)

	// Simple protocol: notice, one row of trellis.applied, tag TRANSFORM.
	var notices []string
	cfg, _ := pgx.ParseConfig(h.url("postgres", "", h.db, "default_query_exec_mode=simple_protocol"))
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { notices = append(notices, n.Message) }
	simple, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer simple.Close(ctx)
	rows, err := simple.Query(ctx, `TRANSFORM order_totals FROM orders SELECT price + tax AS total, qty * 2 AS double_qty`)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := pgx.CollectRows(rows, pgx.RowToMap)
	if err != nil {
		t.Fatal(err)
	}
	if len(vals) != 1 || vals[0]["kind"] != "transform_defined" || vals[0]["status"] != "waiting_to_backfill" ||
		vals[0]["target_table"] != "public.order_totals" || rows.CommandTag().String() != "TRANSFORM" {
		t.Fatalf("reply %v tag %q", vals, rows.CommandTag())
	}
	if len(notices) != 1 || !strings.Contains(notices[0], "transform public.order_totals defined") {
		t.Fatalf("notices %q", notices)
	}

	// Extended protocol (pgx's default): an aggregate transform.
	var kind, status string
	var id int64
	if err := c.QueryRow(ctx, `TRANSFORM customer_totals FROM orders GROUP BY customer_id SELECT SUM(price) AS spent, COUNT(*) AS n`).
		Scan(&kind, nil, nil, &id, &status, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	if kind != "transform_defined" || status != "waiting_to_backfill" || id == 0 {
		t.Fatalf("extended reply %s %s %d", kind, status, id)
	}

	h.waitStatus(t, "order_totals", "live")
	h.waitStatus(t, "customer_totals", "live")
	mustExec(t, c, `UPDATE orders SET price = price * 2 WHERE id <= 10`)
	mustExec(t, c, `DELETE FROM orders WHERE id > 90`)
	var token string
	if err := c.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&token); err != nil {
		t.Fatal(err)
	}
	// The proxy answers the wait itself, in both protocols.
	if _, err := simple.Exec(ctx, fmt.Sprintf("SELECT trellis.await_converged('%s', 30000)", token)); err != nil {
		t.Fatalf("await_converged (simple): %v", err)
	}
	var ok bool
	if err := c.QueryRow(ctx, "SELECT trellis.try_await_converged($1, 30000)", token).Scan(&ok); err != nil || !ok {
		t.Fatalf("try_await_converged (extended): %v %v", ok, err)
	}
	var diff int64
	if err := c.QueryRow(ctx, `SELECT count(*) FROM (
		(SELECT id, total, double_qty FROM order_totals EXCEPT ALL SELECT id, price + tax, qty * 2 FROM orders)
		UNION ALL
		(SELECT id, price + tax, qty * 2 FROM orders EXCEPT ALL SELECT id, total, double_qty FROM order_totals)) d`).Scan(&diff); err != nil || diff != 0 {
		t.Fatalf("order_totals differs from its definition in %d rows (%v)", diff, err)
	}
	if err := c.QueryRow(ctx, `SELECT count(*) FROM (
		(SELECT customer_id, spent, n FROM customer_totals EXCEPT ALL SELECT customer_id, SUM(price), COUNT(*) FROM orders GROUP BY 1)
		UNION ALL
		(SELECT customer_id, SUM(price), COUNT(*) FROM orders GROUP BY 1 EXCEPT ALL SELECT customer_id, spent, n FROM customer_totals)) d`).Scan(&diff); err != nil || diff != 0 {
		t.Fatalf("customer_totals differs in %d rows (%v)", diff, err)
	}

	// Postgres's own DROP TRANSFORM ... FOR passes through untouched: the
	// answer is Postgres's, not a Trellis parse error.
	_, err = c.Exec(ctx, "DROP TRANSFORM FOR int LANGUAGE sql")
	if pe := pgErrOf(t, err); pe.Code != "42704" || !strings.Contains(pe.Message, "transform for type integer") {
		t.Fatalf("DROP TRANSFORM FOR answered %s: %s", pe.Code, pe.Message)
	}
	if _, err := c.Exec(ctx, "DROP TRANSFORM IF EXISTS FOR int LANGUAGE sql"); err != nil {
		t.Fatalf("DROP TRANSFORM IF EXISTS FOR: %v", err)
	}
}

func TestTransformErrorsCarryPositionAndHint(t *testing.T) {
	h := startTrellis(t)
	ctx := context.Background()
	c := h.client(t)
	mustExec(t, c, `CREATE TABLE s (id int PRIMARY KEY, a int)`)
	mustExec(t, c, `CREATE TABLE u (id int PRIMARY KEY, z int)`)
	q := "SELECT 1; TRANSFORM t FROM s RIGHT JOIN u ON u.id = s.id SELECT a AS b"
	_, err := c.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol)
	pe := pgErrOf(t, err)
	if pe.Code != "0A000" && pe.Code != "42601" {
		t.Fatalf("JOIN refused with %s %s", pe.Code, pe.Message)
	}
	if want := strings.Index(q, "RIGHT") + 1; int(pe.Position) != want {
		t.Fatalf("position %d, want %d (%s)", pe.Position, want, pe.Message)
	}
	if pe.Hint == "" || !strings.Contains(pe.Detail, "trellis: ") {
		t.Fatalf("hint %q detail %q", pe.Hint, pe.Detail)
	}
	// The session is usable afterwards.
	var one int
	if err := c.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatal(err)
	}
	// D8 through the proxy's lent connection: a volatile formula is refused
	// with the Trellis variant, the caret on the call itself.
	q = "TRANSFORM t4 FROM s SELECT a * 2 + extract(epoch FROM now())::int AS b"
	_, err = c.Exec(ctx, q)
	if pe := pgErrOf(t, err); pe.Code != "42P17" || !strings.Contains(pe.Detail, "NonImmutableConstruct") || int(pe.Position) != strings.Index(q, "now")+1 {
		t.Fatalf("volatile formula: %s %s %q at %d", pe.Code, pe.Message, pe.Detail, pe.Position)
	}
	// A literal the proxy and the server would read differently is refused.
	mustExec(t, c, "SET standard_conforming_strings = off")
	_, err = c.Exec(ctx, `TRANSFORM t3 FROM s SELECT a::text || 'x\y' AS b`, pgx.QueryExecModeSimpleProtocol)
	if pe := pgErrOf(t, err); pe.Code != "0A000" || !strings.Contains(pe.Detail, "UnsupportedSessionSetting") {
		t.Fatalf("backslash with standard_conforming_strings off: %s %s %q", pe.Code, pe.Message, pe.Detail)
	}
	mustExec(t, c, "SET standard_conforming_strings = on")
	// $n inside a Trellis statement is refused at Parse.
	_, err = c.Exec(ctx, "TRANSFORM t2 FROM s SELECT a + $1 AS b", 1)
	if pe := pgErrOf(t, err); pe.Code != "0A000" {
		t.Fatalf("parameter refused with %s %s", pe.Code, pe.Message)
	}
}

// D6: a TRANSFORM inside BEGIN ... ROLLBACK leaves nothing; inside BEGIN ...
// COMMIT over a table created in the same transaction it goes live; a
// multi-statement string is all-or-nothing.
func TestTransformIsTransactional(t *testing.T) {
	h := startTrellis(t)
	ctx := context.Background()
	c := h.client(t)

	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE r (id int PRIMARY KEY, v int)`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `TRANSFORM rv FROM r SELECT v + 1 AS w`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	h.pool.QueryRow(ctx, `SELECT count(*) FROM trellis._definitions`).Scan(&n)
	if n != 0 || tableExists(t, h.pool, "rv") || tableExists(t, h.pool, "r") {
		t.Fatalf("rollback left definitions=%d", n)
	}

	tx, err = c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`CREATE TABLE r (id int PRIMARY KEY, v int)`, `INSERT INTO r VALUES (1, 10), (2, 20)`,
		`TRANSFORM rv FROM r SELECT v + 1 AS w`, `TRANSFORM rv_sum FROM rv GROUP BY w SELECT COUNT(*) AS n`} {
		if _, err := tx.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(t, "rv", "live")
	h.waitStatus(t, "rv_sum", "live")

	// A multi-statement string: the failing statement undoes the rest.
	_, err = c.Exec(ctx, `CREATE TABLE m (id int PRIMARY KEY, v int); TRANSFORM mv FROM m SELECT v AS w; SELECT 1/0`, pgx.QueryExecModeSimpleProtocol)
	if pe := pgErrOf(t, err); pe.Code != "22012" {
		t.Fatalf("want division by zero, got %s", pe.Code)
	}
	if tableExists(t, h.pool, "m") || tableExists(t, h.pool, "mv") {
		t.Fatal("a failed multi-statement string left tables behind")
	}
	if _, err := c.Exec(ctx, `CREATE TABLE m (id int PRIMARY KEY, v int); TRANSFORM mv FROM m SELECT v AS w; INSERT INTO m VALUES (1, 1)`,
		pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(t, "mv", "live")
}

func tableExists(t *testing.T, pool *pgxpool.Pool, name string) bool {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(context.Background(), "SELECT to_regclass($1) IS NOT NULL", name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// A Trellis error inside a client's block aborts the block on the upstream
// backend too: the next statement gets 25P02 from Postgres itself, and
// ROLLBACK recovers the session.
func TestTrellisErrorAbortsClientBlock(t *testing.T) {
	h := startTrellis(t)
	ctx := context.Background()
	c := h.client(t)
	mustExec(t, c, `CREATE TABLE s (id int PRIMARY KEY, a int)`)
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, c, `INSERT INTO s VALUES (1, 1)`)
	_, err = tx.Exec(ctx, `TRANSFORM t FROM s SELECT a + no_such_column AS b`)
	if pe := pgErrOf(t, err); pe.Code != "42703" {
		t.Fatalf("want 42703, got %s %s", pe.Code, pe.Message)
	}
	_, err = tx.Exec(ctx, `SELECT 1`)
	if pe := pgErrOf(t, err); pe.Code != "25P02" {
		t.Fatalf("after a Trellis error the block must be aborted upstream; got %s", pe.Code)
	}
	_, err = tx.Exec(ctx, `TRANSFORM t FROM s SELECT a AS b`)
	if pe := pgErrOf(t, err); pe.Code != "25P02" {
		t.Fatalf("a Trellis statement in an aborted block: got %s", pe.Code)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM s").Scan(&n); err != nil || n != 0 {
		t.Fatalf("rolled-back insert visible: %d %v", n, err)
	}
}

// The read surface through the proxy: trellis.status with WHERE and a
// prepared statement, watermark_token with await_converged, the dump.
func TestStatusAndDumpThroughProxy(t *testing.T) {
	h := startTrellis(t)
	ctx := context.Background()
	c := h.client(t)
	mustExec(t, c, `CREATE TABLE orders (id bigint PRIMARY KEY, region text, amount numeric)`)
	mustExec(t, c, `INSERT INTO orders SELECT g, 'r' || g % 4, g FROM generate_series(1, 50) g`)
	mustExec(t, c, `TRANSFORM region_totals FROM orders GROUP BY region SELECT SUM(amount) AS total`)
	deadline := time.Now().Add(60 * time.Second)
	for {
		var status string
		err := c.QueryRow(ctx, `SELECT status FROM trellis.status WHERE target = $1`, "region_totals").Scan(&status)
		if err == nil && status == "live" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status %q %v", status, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	mustExec(t, c, `INSERT INTO orders VALUES (100, 'r9', 7)`)
	if _, err := c.Exec(ctx, `SELECT trellis.await_converged(trellis.watermark_token(), 30000)`); err != nil {
		t.Fatal(err)
	}
	var total string
	if err := c.QueryRow(ctx, `SELECT total::text FROM region_totals WHERE region = 'r9'`).Scan(&total); err != nil || total != "7" {
		t.Fatalf("read-your-writes: %q %v", total, err)
	}
	var dump string
	if err := c.QueryRow(ctx, `SELECT trellis.dump_definitions_sql()`).Scan(&dump); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.ReplaceAll(dump, `"`, ""), "TRANSFORM public.region_totals FROM public.orders GROUP BY region") {
		t.Fatalf("dump:\n%s", dump)
	}
	// Replaying the dump through the proxy recreates the definition.
	mustExec(t, c, `PAUSE TRANSFORM region_totals`)
	mustExec(t, c, `DROP TRANSFORM region_totals`)
	if _, err := c.Exec(ctx, dump, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("replaying the dump: %v\n%s", err, dump)
	}
	var n int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM trellis.status WHERE target = 'region_totals'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("replayed definition: %d %v", n, err)
	}
}

// The serving path as a user runs it: proxy.Run with its own engine,
// workers and catalog on the upstream's database.
func TestServeRunsTheEngine(t *testing.T) {
	c := pgcluster.ForTest(t)
	db := c.FreshDB(t, "serve")
	h := start(t, func(cfg *proxy.Config, opts *proxy.Options) {
		cfg.Upstream = c.URL(db)
		opts.RelayOnly = false
	})
	ctx := context.Background()
	conn := connectURL(t, h.url("postgres", "", db, ""))
	mustExec(t, conn, `CREATE TABLE orders (id bigint PRIMARY KEY, price numeric, tax numeric)`)
	mustExec(t, conn, `INSERT INTO orders SELECT g, g, 1 FROM generate_series(1, 1000) g`)
	mustExec(t, conn, `TRANSFORM order_totals FROM orders SELECT price + tax AS total`)
	var status string
	if err := conn.QueryRow(ctx, `SELECT trellis.await_live('order_totals', 60000)`).Scan(&status); err != nil || status != "live" {
		t.Fatalf("await_live: %q %v", status, err)
	}
	mustExec(t, conn, `UPDATE orders SET tax = 2 WHERE id = 7`)
	if _, err := conn.Exec(ctx, `SELECT trellis.await_converged(trellis.watermark_token(), 30000)`); err != nil {
		t.Fatal(err)
	}
	var total string
	if err := conn.QueryRow(ctx, `SELECT total::text FROM order_totals WHERE id = 7`).Scan(&total); err != nil || total != "9" {
		t.Fatalf("total %q %v", total, err)
	}
	// Sessions on another database are relayed, and Trellis is refused there.
	other := connectURL(t, h.url("postgres", "", "postgres", ""))
	_, err := other.Exec(ctx, `TRANSFORM x FROM y SELECT a AS b`)
	if pe := pgErrOf(t, err); pe.Code != "0A000" || !strings.Contains(pe.Message, db) {
		t.Fatalf("Trellis on another database: %s %s", pe.Code, pe.Message)
	}
}

// D9: an ordinary role defines a transform over its own table through the
// proxy (the catalog is written by SECURITY DEFINER functions, never by the
// client), owns the target, cannot write storage directly, and another role
// can neither drop its transform nor read a source it has no SELECT on.
func TestOrdinaryRoleDefinesOwnTransform(t *testing.T) {
	h := startTrellis(t)
	ctx := context.Background()
	su := h.client(t)
	for _, q := range []string{
		`DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'app') THEN CREATE ROLE app LOGIN; END IF;
		           IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'other') THEN CREATE ROLE other LOGIN; END IF; END $$`,
		`GRANT CREATE ON SCHEMA public TO app, other`,
	} {
		mustExec(t, su, q)
	}
	app := connectURL(t, h.url("app", "", h.db, ""))
	mustExec(t, app, `CREATE TABLE mine (id int PRIMARY KEY, v int)`)
	mustExec(t, app, `INSERT INTO mine SELECT g, g FROM generate_series(1, 10) g`)
	mustExec(t, app, `TRANSFORM mine_x FROM mine SELECT v * 10 AS x`)
	// D20: the workers' role owns the target; the definer reads it.
	var owner string
	if err := su.QueryRow(ctx, `SELECT tableowner FROM pg_tables WHERE tablename = 'mine_x'`).Scan(&owner); err != nil || owner == "app" {
		t.Fatalf("target owner %q %v", owner, err)
	}
	var status string
	if err := app.QueryRow(ctx, `SELECT trellis.await_live('mine_x', 60000)`).Scan(&status); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Exec(ctx, `INSERT INTO trellis._definitions (target_table) VALUES ('x')`); pgErrOf(t, err).Code != "42501" {
		t.Fatalf("a client wrote storage: %v", err)
	}
	other := connectURL(t, h.url("other", "", h.db, ""))
	if _, err := other.Exec(ctx, `DROP TRANSFORM mine_x`); pgErrOf(t, err).Code != "42501" {
		t.Fatalf("another role dropped the transform: %v", err)
	}
	if _, err := other.Exec(ctx, `TRANSFORM spy FROM mine SELECT v AS w`); pgErrOf(t, err).Code != "42501" {
		t.Fatalf("a role without SELECT on the source defined over it: %v", err)
	}
	// ALTER and field pauses need ownership too; the owner's work.
	for _, q := range []string{`ALTER TRANSFORM mine_x ADD v + 1 AS y`, `PAUSE TRANSFORM mine_x.x`} {
		if _, err := other.Exec(ctx, q); pgErrOf(t, err).Code != "42501" {
			t.Fatalf("another role's %s: %v", q, err)
		}
	}
	mustExec(t, app, `ALTER TRANSFORM mine_x ADD v + 1 AS y`)
	if err := app.QueryRow(ctx, `SELECT trellis.await_live('mine_x', 60000)`).Scan(&status); err != nil {
		t.Fatal(err)
	}
	mustExec(t, app, `PAUSE TRANSFORM mine_x.x`)
	mustExec(t, app, `RESUME TRANSFORM mine_x.x`)
	if err := app.QueryRow(ctx, `SELECT trellis.await_live('mine_x', 60000)`).Scan(&status); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "mine_x exact after ALTER", func() bool {
		var bad int
		err := app.QueryRow(ctx, `SELECT count(*) FROM mine m FULL JOIN mine_x x USING (id) WHERE x.x IS DISTINCT FROM m.v * 10 OR x.y IS DISTINCT FROM m.v + 1`).Scan(&bad)
		return err == nil && bad == 0
	})
	if _, err := app.Exec(ctx, `PAUSE TRANSFORM mine_x`); err != nil {
		t.Fatalf("the owner's pause: %v", err)
	}
	if _, err := app.Exec(ctx, `DROP TRANSFORM mine_x`); err != nil {
		t.Fatalf("the owner's drop: %v", err)
	}
}
