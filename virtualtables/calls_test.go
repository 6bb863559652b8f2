package virtualtables

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-proxy/trellis-proxy/engine"
)

func TestWatermarkTokenAndConverged(t *testing.T) {
	_, pool := testDB(t)
	exec(t, pool, `CREATE TABLE orders (id bigint PRIMARY KEY, price numeric, tax numeric)`)
	exec(t, pool, `CREATE TABLE scratch (id int)`)
	e, run := newEngine(t, pool, fastConfig("trellis"))
	define(t, e, pool, totalsSpec("order_totals", "orders"))
	run()
	waitStatus(t, pool, "trellis", "order_totals", "live")
	ctx := context.Background()

	exec(t, pool, `INSERT INTO orders VALUES (1, 10, 1)`)
	var tok string
	if err := pool.QueryRow(ctx, "SELECT trellis.watermark_token()").Scan(&tok); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9A-F]{1,8}/[0-9A-F]{1,8}$`).MatchString(tok) {
		t.Fatalf("token %q", tok)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var ok bool
		if err := pool.QueryRow(ctx, "SELECT trellis.converged($1)", tok).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("never converged")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var total string
	if err := pool.QueryRow(ctx, "SELECT total::text FROM order_totals WHERE id = 1").Scan(&total); err != nil || total != "11" {
		t.Fatalf("read-your-write after converged: %q %v", total, err)
	}

	for _, bad := range []string{"", "garbage", "0/0001", "a/b", "16/B374D848 ", "1/2/3"} {
		_, err := pool.Exec(ctx, "SELECT trellis.converged($1)", bad)
		pe := wantCode(t, err, "22023", "malformed watermark token")
		if !strings.Contains(pe.Detail, "trellis: validation/BadToken") {
			t.Fatalf("detail %q", pe.Detail)
		}
	}
	_, err := pool.Exec(ctx, "SELECT trellis.converged(NULL)")
	wantCode(t, err, "22023", "malformed")

	// Refused after a captured write in the same transaction (§3.3) ...
	for _, call := range []string{"SELECT trellis.watermark_token()", "SELECT trellis.converged('" + tok + "')"} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		exec(t, tx, `INSERT INTO orders VALUES (2, 20, 2) ON CONFLICT (id) DO UPDATE SET price = orders.price + 1`)
		_, err = tx.Exec(ctx, call)
		pe := wantCode(t, err, "25001", "in a transaction that has written to captured tables")
		if pe.Hint == "" || !strings.Contains(pe.Detail, "trellis: transaction/RefusedInTransaction") {
			t.Fatalf("hint %q detail %q", pe.Hint, pe.Detail)
		}
		tx.Rollback(ctx)
	}
	// ... and also in one implicit transaction of a multi-statement string.
	_, err = pool.Exec(ctx, "INSERT INTO orders VALUES (3, 1, 1); SELECT trellis.watermark_token()")
	wantCode(t, err, "25001", "watermark token")
	// ... but not after writes to an uncaptured table, nor in a read-only block.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	exec(t, tx, `INSERT INTO scratch VALUES (1)`)
	exec(t, tx, "SELECT trellis.watermark_token(), trellis.converged($1)", tok)
	tx.Rollback(ctx)
}

func TestDumpDefinitionsReplays(t *testing.T) {
	db, pool := testDB(t)
	exec(t, pool, `CREATE TABLE orders (id bigint PRIMARY KEY, price numeric, tax numeric)`)
	exec(t, pool, `INSERT INTO orders SELECT g, g, g / 10.0 FROM generate_series(1, 500) g`)
	e, run := newEngine(t, pool, fastConfig("trellis"))
	ctx := context.Background()

	// The statements as the grammar would have stored them, and their specs:
	// replay hands each dumped TRANSFORM line back to the engine the way the
	// proxy's router would (this package may not import the grammar).
	totals := totalsSpec("order_totals", "orders")
	rank := totalsSpec("order_rank", "order_totals")
	rank.Statement = "TRANSFORM public.order_rank FROM public.order_totals SELECT total > 100 AS big"
	rank.Fields = []engine.Field{{Name: "big", Expr: col("total") + " > 100", Reads: []string{"total"}}}
	doubled := totalsSpec("order_tax", "orders")
	doubled.Statement = `TRANSFORM public.order_tax FROM public.orders SELECT tax * 2 AS "Double Tax"`
	doubled.Fields = []engine.Field{{Name: "Double Tax", Expr: col("tax") + " * 2", Reads: []string{"tax"}}}
	specs := map[string]engine.Spec{}
	for _, s := range []engine.Spec{totals, rank, doubled} {
		specs[s.Statement] = s
		define(t, e, pool, s) // ids: totals < rank < doubled; levels put doubled before rank
	}
	run()

	dump, err := Dump(ctx, pool, true)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(dump, "\n")
	header := regexp.MustCompile(`^-- trellis definitions of instance ` + db + `/trellis, catalog version \d+, \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\+00$`)
	if !header.MatchString(lines[0]) {
		t.Fatalf("header %q", lines[0])
	}
	want := strings.Join([]string{
		"BEGIN;",
		"-- level 0",
		totals.Statement + ";",
		doubled.Statement + ";",
		"-- level 1",
		rank.Statement + ";",
		"COMMIT;",
		"",
	}, "\n")
	if got := strings.Join(lines[1:], "\n"); got != want {
		t.Fatalf("dump body:\n%s\nwant:\n%s", got, want)
	}
	before := queryStrings(t, pool, "SELECT definition_text FROM trellis.definitions ORDER BY definition_text")

	// Drop every target, then run the dump as a script.
	for _, name := range []string{"order_rank", "order_tax", "order_totals"} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Pause(ctx, tx, engine.TableName{Name: name}); err != nil {
			t.Fatalf("pause %s: %v", name, err)
		}
		if err := e.Drop(ctx, tx, engine.TableName{Schema: "public", Name: name}); err != nil {
			t.Fatalf("drop %s: %v", name, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := queryStrings(t, pool, "SELECT count(*)::text FROM trellis.definitions"); n[0] != "0" {
		t.Fatalf("definitions after drop: %v", n)
	}
	replay(t, e, pool, dump, specs)

	after := queryStrings(t, pool, "SELECT definition_text FROM trellis.definitions ORDER BY definition_text")
	if !slices.Equal(before, after) {
		t.Fatalf("replayed definitions differ:\n%q\n%q", before, after)
	}
	for _, name := range []string{"order_totals", "order_tax", "order_rank"} {
		waitStatus(t, pool, "trellis", name, "live")
	}
	converge(t, pool)
	if n := queryStrings(t, pool, "SELECT count(*)::text FROM order_rank WHERE big"); n[0] != "410" {
		t.Fatalf("order_rank after replay: %v big rows", n)
	}
	again, err := Dump(ctx, pool, false)
	if err != nil {
		t.Fatal(err)
	}
	if strings.SplitN(again, "\n", 2)[1] != want {
		t.Fatalf("dump after replay differs:\n%s", again)
	}
}

// converge waits until everything committed so far reached its targets.
func converge(t *testing.T, q engine.Querier) {
	t.Helper()
	var tok string
	if err := q.QueryRow(context.Background(), "SELECT trellis.watermark_token()").Scan(&tok); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var ok bool
		if err := q.QueryRow(context.Background(), "SELECT trellis.converged($1)", tok).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("never converged")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// replay runs a dump script: SQL lines on a transaction, TRANSFORM lines
// through the engine in that same transaction.
func replay(t *testing.T, e *engine.Engine, pool interface {
	Begin(context.Context) (pgx.Tx, error)
}, script string, specs map[string]engine.Spec) {
	t.Helper()
	ctx := context.Background()
	var tx pgx.Tx
	for _, line := range strings.Split(script, "\n") {
		switch {
		case line == "" || strings.HasPrefix(line, "--"):
		case line == "BEGIN;":
			var err error
			if tx, err = pool.Begin(ctx); err != nil {
				t.Fatal(err)
			}
		case line == "COMMIT;":
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		case strings.HasPrefix(line, "TRANSFORM "):
			spec, ok := specs[strings.TrimSuffix(line, ";")]
			if !ok {
				t.Fatalf("dump line is not a stored statement: %q", line)
			}
			if _, err := e.Define(ctx, tx, spec); err != nil {
				t.Fatalf("replay %q: %v", line, err)
			}
		default:
			exec(t, tx, line)
		}
	}
}

func TestProxyOnlyStubsRefuseDirectCallers(t *testing.T) {
	_, pool := testDB(t)
	newEngine(t, pool, fastConfig("trellis"))
	for obj, sql := range map[string]string{
		"config":              "SELECT * FROM trellis.config",
		"proxy_workers":       "SELECT worker_id FROM trellis.proxy_workers WHERE kind = 'drain'",
		"await_converged":     "SELECT trellis.await_converged('0/1', 10)",
		"try_await_converged": "SELECT trellis.try_await_converged('0/1', 10)",
		"await_live":          "SELECT trellis.await_live('x', 10)",
		"apply":               "SELECT * FROM trellis.apply('TRANSFORM x FROM y SELECT a AS b')",
		"define":              "SELECT * FROM trellis.define('TRANSFORM x FROM y SELECT a AS b')",
		"metrics_text":        "SELECT trellis.metrics_text()",
		"migrate":             "SELECT trellis.migrate()",
	} {
		_, err := pool.Exec(context.Background(), sql)
		if err == nil {
			t.Fatalf("%s: no error", sql)
		}
		pe := wantCode(t, err, "0A000", "trellis."+obj+" must be read through trellis-proxy")
		if pe.Hint != "connect to the proxy (default port 6432) instead of to PostgreSQL" || pe.Detail != "trellis: unsupported/ProxyOnly" {
			t.Errorf("%s: hint %q detail %q", obj, pe.Hint, pe.Detail)
		}
	}
}

func TestFailRaisesTheGivenError(t *testing.T) {
	_, pool := testDB(t)
	newEngine(t, pool, fastConfig("trellis"))
	ctx := context.Background()
	_, err := pool.Exec(ctx, "SELECT trellis._fail($1, $2)", "42P07", "relation public.order_totals already exists")
	wantCode(t, err, "42P07", "relation public.order_totals already exists")
	_, err = pool.Exec(ctx, "SELECT trellis._fail($1, $2, $3, $4)", "42501", "must be owner", "trellis: permission/NotOwner", "run it as app")
	pe := wantCode(t, err, "42501", "must be owner")
	if pe.Detail != "trellis: permission/NotOwner" || pe.Hint != "run it as app" {
		t.Fatalf("detail %q hint %q", pe.Detail, pe.Hint)
	}
	_, err = pool.Exec(ctx, "SELECT trellis._fail('nonsense', 'x')")
	wantCode(t, err, "XX000", "x")

	// In a block it aborts the transaction, as the proxy needs.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, "SELECT trellis._fail('22023', 'nothing was applied')")
	wantCode(t, err, "22023", "nothing was applied")
	_, err = tx.Exec(ctx, "SELECT 1")
	wantCode(t, err, "25P02", "")
}

func TestPrivileges(t *testing.T) {
	_, pool := testDB(t)
	ctx := context.Background()
	exec(t, pool, `DO $$ BEGIN CREATE ROLE vt_reader LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$`)
	exec(t, pool, `CREATE TABLE orders (id bigint PRIMARY KEY, price numeric, tax numeric)`)
	exec(t, pool, `CREATE TABLE secrets (id bigint PRIMARY KEY, price numeric, tax numeric)`)
	e, run := newEngine(t, pool, fastConfig("trellis"))
	d := define(t, e, pool, totalsSpec("order_totals", "orders"))
	define(t, e, pool, totalsSpec("secret_totals", "secrets"))
	run()
	waitStatus(t, pool, "trellis", "order_totals", "live")
	waitStatus(t, pool, "trellis", "secret_totals", "live")
	exec(t, pool, `INSERT INTO trellis._poison (definition_id, src_table, key, error) VALUES ($1, 'public.orders', '7', 'boom')`, d.ID)
	exec(t, pool, `CREATE FUNCTION public.vt_leak(text) RETURNS boolean LANGUAGE plpgsql COST 0.0000001 AS
		$$ BEGIN RAISE NOTICE 'leaked %', $1; RETURN true; END $$`)

	cfg, err := pgx.ParseConfig(pool.Config().ConnConfig.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	cfg.User = "vt_reader"
	var mu sync.Mutex
	var notices []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		notices = append(notices, n.Message)
		mu.Unlock()
	}
	reader, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close(ctx)

	count := func(sql string) string {
		t.Helper()
		var n string
		if err := reader.QueryRow(ctx, "SELECT count(*)::text FROM ("+sql+") x").Scan(&n); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return n
	}
	// Readable, but only rows of targets the reader can SELECT.
	if n := count("SELECT * FROM trellis.status"); n != "0" {
		t.Fatalf("reader sees %s status rows without SELECT on any target", n)
	}
	exec(t, pool, "GRANT SELECT ON order_totals TO vt_reader")
	if got := queryStrings(t, reader, "SELECT target FROM trellis.status ORDER BY 1"); !slices.Equal(got, []string{"order_totals"}) {
		t.Fatalf("reader sees %v", got)
	}
	if got := queryStrings(t, reader, "SELECT target FROM trellis.definitions"); !slices.Equal(got, []string{"order_totals"}) {
		t.Fatalf("reader sees definitions %v", got)
	}
	// A leaky function in WHERE sees only visible rows (security_barrier).
	count("SELECT * FROM trellis.status WHERE public.vt_leak(target)")
	count("SELECT * FROM trellis.definitions WHERE public.vt_leak(definition_text)")
	mu.Lock()
	for _, n := range notices {
		if strings.Contains(n, "secret") {
			t.Errorf("leaked through a WHERE function: %s", n)
		}
	}
	mu.Unlock()
	// poisoned also needs SELECT on the key's source table.
	if n := count("SELECT * FROM trellis.poisoned"); n != "0" {
		t.Fatal("poisoned key visible without SELECT on its source table")
	}
	exec(t, pool, "GRANT SELECT ON orders TO vt_reader")
	if n := count("SELECT * FROM trellis.poisoned"); n != "1" {
		t.Fatalf("poisoned rows with grants: %s", n)
	}
	// Calls anyone with USAGE may make.
	for _, sql := range []string{"SELECT trellis.watermark_token()", "SELECT trellis.converged(trellis.watermark_token())",
		"SELECT trellis.has_live_drain_workers(), trellis.has_live_staging_worker()", "SELECT * FROM trellis.fleet",
		"SELECT * FROM trellis.fleet_workers", "SELECT * FROM trellis.relationships", "SELECT * FROM trellis.quarantined"} {
		exec(t, reader, sql)
	}
	// Storage is closed.
	for _, sql := range []string{
		"INSERT INTO trellis._definitions (target_table, target_oid, ledger_oid, owner_role, kind, source_table, source_oid, definition_sql, compiled, status) VALUES ('x', 0, 0, 0, 'one_to_one', 'y', 0, '', '{}', 'live')",
		"SELECT * FROM trellis._definitions",
		"DELETE FROM trellis._poison",
		"UPDATE trellis._workers SET last_seen = now()",
		"INSERT INTO trellis._change_log (src_table, key, op) VALUES ('public.orders', '1', 'insert')",
		"SELECT nextval('trellis._change_seq')",
	} {
		_, err := reader.Exec(ctx, sql)
		wantCode(t, err, "42501", "permission denied")
	}
	// A dump needs every target.
	_, err = reader.Exec(ctx, "SELECT trellis.dump_definitions_sql()")
	pe := wantCode(t, err, "42501", "permission denied for table public.secret_totals")
	if pe.Hint != "GRANT SELECT ON public.secret_totals TO vt_reader;" {
		t.Fatalf("hint %q", pe.Hint)
	}
	// A function given one target: 42501 for an unreadable one, 42704 for none.
	_, err = reader.Exec(ctx, "SELECT * FROM trellis.quarantine_status('secret_totals')")
	wantCode(t, err, "42501", "permission denied")
	_, err = reader.Exec(ctx, "SELECT * FROM trellis.quarantine_status('nothing')")
	wantCode(t, err, "42704", "does not exist")
	report, err := StatusReport(ctx, reader)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(report, "secret") || !strings.Contains(report, "target=public.order_totals") {
		t.Fatalf("reader's report:\n%s", report)
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"":               "''",
		"42":             "42",
		"public.orders":  "public.orders",
		"a-b_c,d:e/f@g+": "a-b_c,d:e/f@g+",
		"two words":      "'two words'",
		"it's":           `'it'\''s'`,
		"a\x1fb":         `'a'$'\037''b'`,
		"\x01":           `$'\001'`,
		"Ünïcode":        "'Ünïcode'",
	} {
		if got := ShellQuote(in); got != want {
			t.Errorf("ShellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
