package integration

// The proxy-level parts of the surface spec, through proxy.Run with its own
// engine: the relations the proxy answers (§11.1), the trellis. alias of a
// non-default catalog (§1.1), and the call budget (§13).

import (
	"context"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-proxy/trellis-proxy/internal/pgcluster"
	"github.com/trellis-proxy/trellis-proxy/internal/proxy"
)

// served is proxy.Run with the engine on a database of its own.
type served struct {
	*harness
	db   string
	pool *pgxpool.Pool // direct, as the workers' role
}

func startServed(t *testing.T, mod func(*proxy.Config)) *served {
	t.Helper()
	c := pgcluster.ForTest(t)
	db := c.FreshDB(t, "served")
	h := start(t, func(cfg *proxy.Config, opts *proxy.Options) {
		cfg.Upstream = c.URL(db)
		cfg.ProcessID = "proxy-under-test"
		cfg.TakeoverInterval = 200 * time.Millisecond
		opts.RelayOnly = false
		opts.Version = "9.9.9-test"
		if mod != nil {
			mod(cfg)
		}
	})
	pool, err := pgxpool.New(context.Background(), c.URL(db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &served{harness: h, db: db, pool: pool}
}

func (s *served) client(t *testing.T, extra string) *pgx.Conn {
	t.Helper()
	return connectURL(t, s.url("postgres", "", s.db, extra))
}

func TestProxyAnsweredRelations(t *testing.T) {
	s := startServed(t, func(cfg *proxy.Config) {
		cfg.HTTPListen = "127.0.0.1:0"
		cfg.CallBudget = 12 * time.Second
	})
	ctx := context.Background()
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec} {
		c := s.client(t, "")
		var schema, database, upstream, listen, staging, version string
		var drain int32
		var budget int64
		var embedded bool
		var started time.Time
		if err := c.QueryRow(ctx, `SELECT schema, database, upstream, listen, staging, drain_workers, call_budget_ms, embedded,
			proxy_version, started_at FROM trellis.config WHERE schema = $1`, mode, "trellis").
			Scan(&schema, &database, &upstream, &listen, &staging, &drain, &budget, &embedded, &version, &started); err != nil {
			t.Fatalf("%v: %v", mode, err)
		}
		if schema != "trellis" || database != s.db || listen != s.Addr || staging != "auto" || drain != 2 || budget != 12000 ||
			embedded || version != "9.9.9-test" || time.Since(started) > time.Hour || strings.Contains(upstream, "@") || !strings.Contains(upstream, "sslmode=") {
			t.Fatalf("%v: config %s %s %s %s %s %d %d %v %s %v", mode, schema, database, upstream, listen, staging, drain, budget, embedded, version, started)
		}
		// WHERE is Postgres's: a predicate that excludes the row.
		var n int
		if err := c.QueryRow(ctx, `SELECT count(*) FROM trellis.config c WHERE c.drain_workers > $1`, mode, 100).Scan(&n); err != nil || n != 0 {
			t.Fatalf("%v: filtered config: %d %v", mode, n, err)
		}
	}

	// proxy_workers: this process's staging worker and drain workers, with
	// ORDER BY and a join with a user table.
	c := s.client(t, "")
	mustExec(t, c, `CREATE TABLE kinds (kind text PRIMARY KEY, label text)`)
	mustExec(t, c, `INSERT INTO kinds VALUES ('staging', 'stages'), ('drain', 'drains')`)
	eventually(t, 30*time.Second, "the staging worker to hold the lock", func() bool {
		var held bool
		c.QueryRow(ctx, `SELECT staging_held FROM trellis.config`).Scan(&held)
		return held
	})
	rows, err := c.Query(ctx, `SELECT w.worker_id, w.state, k.label FROM trellis.proxy_workers w JOIN kinds k USING (kind)
		WHERE w.since <= now() ORDER BY w.kind DESC, w.worker_id`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var id, state, label string
		if err := rows.Scan(&id, &state, &label); err != nil {
			t.Fatal(err)
		}
		got = append(got, id+" "+state+" "+label)
	}
	if rows.Err() != nil || len(got) != 3 || got[0] != "proxy-under-test/staging holding stages" ||
		!strings.HasPrefix(got[1], "proxy-under-test/drain-0 ") || !strings.HasSuffix(got[2], " drains") {
		t.Fatalf("proxy_workers: %q %v", got, rows.Err())
	}

	// An error in such a statement points at the client's own text, before
	// and after the replaced relation.
	for _, q := range []string{`SELECT nope FROM trellis.config`, `SELECT * FROM trellis.config WHERE nope = 1`} {
		_, err := c.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol)
		if pe := pgErrOf(t, err); pe.Code != "42703" || int(pe.Position) != strings.Index(q, "nope")+1 {
			t.Fatalf("%s: %s %s at %d", q, pe.Code, pe.Message, pe.Position)
		}
	}
	// On a direct connection the stub still refuses.
	_, err = s.pool.Exec(ctx, `SELECT * FROM trellis.config`)
	if pe := pgErrOf(t, err); pe.Code != "0A000" {
		t.Fatalf("direct read of the stub: %s %s", pe.Code, pe.Message)
	}
}

func TestNonDefaultSchemaThroughAlias(t *testing.T) {
	s := startServed(t, func(cfg *proxy.Config) { cfg.Schema = "tenant_a" })
	ctx := context.Background()
	c := s.client(t, "")
	simple := s.client(t, "default_query_exec_mode=simple_protocol")
	mustExec(t, c, `CREATE TABLE orders (id bigint PRIMARY KEY, price numeric, tax numeric)`)
	mustExec(t, c, `INSERT INTO orders SELECT g, g, 1 FROM generate_series(1, 100) g`)
	mustExec(t, c, `TRANSFORM order_totals FROM orders SELECT price + tax AS total`)
	var status string
	if err := c.QueryRow(ctx, `SELECT trellis.await_live('order_totals', 60000)`).Scan(&status); err != nil || status != "live" {
		t.Fatalf("await_live: %q %v", status, err)
	}
	// trellis. reaches tenant_a in both protocols, in prepared statements
	// executed twice, in function calls nested in a proxy call, in joins.
	for _, conn := range []*pgx.Conn{c, simple} {
		for k := 0; k < 2; k++ {
			var st, schema string
			if err := conn.QueryRow(ctx, `SELECT s.status, d.source_table FROM trellis.status s JOIN trellis.definitions d USING (target)
				JOIN orders o ON o.id = 1 WHERE s.target = $1`, "order_totals").Scan(&st, &schema); err != nil || st != "live" {
				t.Fatalf("status through the alias: %q %v", st, err)
			}
		}
	}
	mustExec(t, c, `UPDATE orders SET tax = 5 WHERE id = 3`)
	if _, err := c.Exec(ctx, `SELECT trellis.await_converged(trellis.watermark_token(), 30000)`); err != nil {
		t.Fatalf("await_converged(trellis.watermark_token()): %v", err)
	}
	var total string
	if err := c.QueryRow(ctx, `SELECT total::text FROM order_totals WHERE id = 3`).Scan(&total); err != nil || total != "8" {
		t.Fatalf("total %q %v", total, err)
	}
	// The instance's real name works too; a direct connection has no
	// trellis schema at all, so the alias is the proxy's doing.
	var n int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM tenant_a.status`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("tenant_a.status: %d %v", n, err)
	}
	if _, err := s.pool.Exec(ctx, `SELECT * FROM trellis.status`); pgErrOf(t, err).Code != "42P01" && pgErrOf(t, err).Code != "3F000" {
		t.Fatalf("a direct connection resolved trellis.: %v", err)
	}
	// psql's \d names the schema in a pattern: trellis.status is described
	// as the catalog's relation.
	out, perr := exec.Command(psqlBin(t), "-X", "-d", s.url("postgres", "", s.db, ""), "-c", `\d trellis.status`).CombinedOutput()
	if perr != nil || !strings.Contains(string(out), `View "tenant_a.status"`) || !regexp.MustCompile(`(?m)^ target\s+\| text`).MatchString(string(out)) {
		t.Fatalf("psql \\d trellis.status under catalog tenant_a: %v\n%s", perr, out)
	}
	// Statements that only look like the alias are left as written.
	var lit string
	if err := simple.QueryRow(ctx, `SELECT 'trellis.status' /* trellis.status */`).Scan(&lit); err != nil || lit != "trellis.status" {
		t.Fatalf("literal %q %v", lit, err)
	}
	if err := simple.QueryRow(ctx, `SELECT trellis.id FROM orders trellis WHERE trellis.id = 4`).Scan(&n); err != nil || n != 4 {
		t.Fatalf("table alias named trellis: %d %v", n, err)
	}
	// Error positions point into the client's text.
	q := `SELECT * FROM trellis.status WHERE nope = 1`
	_, err := simple.Exec(ctx, q)
	if pe := pgErrOf(t, err); pe.Code != "42703" || int(pe.Position) != strings.Index(q, "nope")+1 {
		t.Fatalf("%s: %s at %d", q, pe.Code, pe.Position)
	}
	// COPY out of a rewritten query streams as usual.
	var buf strings.Builder
	if _, err := simple.PgConn().CopyTo(ctx, &buf, `COPY (SELECT target, status FROM trellis.status) TO STDOUT`); err != nil ||
		buf.String() != "order_totals\tlive\n" {
		t.Fatalf("COPY of trellis.status: %q %v", buf.String(), err)
	}
	// proxy-answered relations under the alias.
	var schema string
	if err := c.QueryRow(ctx, `SELECT schema FROM trellis.config`).Scan(&schema); err != nil || schema != "tenant_a" {
		t.Fatalf("trellis.config under tenant_a: %q %v", schema, err)
	}
}

func TestCallBudget(t *testing.T) {
	// 3 s: well above what an unblocked TRANSFORM takes on a loaded 2-core
	// box (its 25-35 catalog statements once took over 0.5 s there), so only
	// the lock waits below can exceed it.
	s := startServed(t, func(cfg *proxy.Config) { cfg.CallBudget = 3 * time.Second })
	ctx := context.Background()
	c := s.client(t, "")
	mustExec(t, c, `CREATE TABLE s (id int PRIMARY KEY, a int)`)

	hold := func() pgx.Tx {
		tx, err := s.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `LOCK TABLE trellis._definitions IN ACCESS EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	// Autocommit: the statement waits on the catalog lock past its budget.
	lock := hold()
	t0 := time.Now()
	_, err := c.Exec(ctx, `TRANSFORM t FROM s SELECT a AS b`)
	took := time.Since(t0)
	pe := pgErrOf(t, err)
	if pe.Code != "57014" || !strings.Contains(pe.Detail, "timeout/CallBudgetExceeded") || !strings.Contains(pe.Message, "3 s budget") {
		t.Fatalf("budget: %s %q %q", pe.Code, pe.Message, pe.Detail)
	}
	if took > 20*time.Second {
		t.Fatalf("the budget did not stop the statement: it took %v", took)
	}
	// In a block: the block is aborted, as by any error.
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, `TRANSFORM t FROM s SELECT a AS b`)
	if pgErrOf(t, err).Code != "57014" {
		t.Fatalf("in a block: %v", err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1`); pgErrOf(t, err).Code != "25P02" {
		t.Fatalf("after the budget error the block must be aborted: %v", err)
	}
	tx.Rollback(ctx)
	lock.Rollback(ctx)
	if tableExists(t, s.pool, "t") {
		t.Fatal("a statement over its budget left its target")
	}
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM trellis._definitions`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("definitions %d %v", n, err)
	}
	// Waits are exempt: a wait longer than the budget ends by its own
	// timeout, not the budget's.
	mustExec(t, c, `TRANSFORM t FROM s SELECT a AS b`)
	var live string
	if err := c.QueryRow(ctx, `SELECT trellis.await_live('t', 60000)`).Scan(&live); err != nil {
		t.Fatal(err)
	}
	srcLock, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer srcLock.Rollback(ctx)
	mustExec(t, c, `INSERT INTO s VALUES (1, 1)`)
	if _, err := srcLock.Exec(ctx, `LOCK TABLE t IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	var token string
	if err := c.QueryRow(ctx, `SELECT trellis.watermark_token()`).Scan(&token); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	var ok bool
	if err := c.QueryRow(ctx, `SELECT trellis.try_await_converged($1, 4500)`, token).Scan(&ok); err != nil || ok {
		t.Fatalf("try_await_converged with the target locked: %v %v", ok, err)
	}
	if took := time.Since(t0); took < 4500*time.Millisecond {
		t.Fatalf("the wait ended after %v, before its own timeout", took)
	}
	srcLock.Rollback(ctx)
	if err := c.QueryRow(ctx, `SELECT trellis.try_await_converged($1, 30000)`, token).Scan(&ok); err != nil || !ok {
		t.Fatalf("converging after the lock: %v %v", ok, err)
	}
}

// await_live takes the bare target name (surface §1.2), also for a target
// created in a schema other than --target-schema.
func TestAwaitLiveByBareName(t *testing.T) {
	s := startServed(t, nil)
	ctx := context.Background()
	c := s.client(t, "")
	mustExec(t, c, `CREATE SCHEMA reporting`)
	mustExec(t, c, `CREATE TABLE s (id int PRIMARY KEY, a int)`)
	mustExec(t, c, `INSERT INTO s SELECT g, g FROM generate_series(1, 10) g`)
	mustExec(t, c, `TRANSFORM reporting.rt FROM s SELECT a * 2 AS b`)
	var live string
	if err := c.QueryRow(ctx, `SELECT trellis.await_live('rt', 60000)`).Scan(&live); err != nil || live != "live" {
		t.Fatalf("await_live of reporting.rt by its bare name: %q %v", live, err)
	}
	var n int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM reporting.rt`).Scan(&n); err != nil || n != 10 {
		t.Fatalf("reporting.rt: %d %v", n, err)
	}
	_, err := c.Exec(ctx, `SELECT trellis.await_live('nope', 1000)`)
	if pe := pgErrOf(t, err); pe.Code != "42704" || pe.Message != "transform nope does not exist" {
		t.Fatalf("unknown target: %s %q", pe.Code, pe.Message)
	}
}
