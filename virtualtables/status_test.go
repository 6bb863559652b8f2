package virtualtables

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/engine"
)

// columnsOf reads a relation's columns the way \d and ORM reflection do.
func columnsOf(t *testing.T, q engine.Querier, schema, rel string) []string {
	t.Helper()
	return queryStrings(t, q, `
		SELECT column_name || ' ' || CASE
		  WHEN data_type = 'numeric' AND numeric_precision IS NOT NULL THEN format('numeric(%s,%s)', numeric_precision, numeric_scale)
		  WHEN data_type = 'ARRAY' THEN format_type(udt_name::regtype, NULL)
		  ELSE data_type END
		FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position`, schema, rel)
}

// Surface spec §5.1's column list, in order.
var statusColumns = []string{
	"target text", "status text", "problem text", "build_percent numeric(4,1)", "build_rows_done bigint",
	"build_rows_estimated bigint", "build_started_at timestamp with time zone", "held_back_by text",
	"paused_columns text[]", "target_table text", "source_table text", "definition_id bigint", "kind text",
	"owner text", "build jsonb", "backfill_failure jsonb", "capture_wait jsonb", "capture_failure jsonb",
	"held_keys jsonb", "drain_failure jsonb", "unindexed_joins jsonb", "source_index_gaps jsonb",
}

func TestReflection(t *testing.T) {
	_, pool := testDB(t)
	newEngine(t, pool, fastConfig("trellis"))
	for _, tc := range []struct {
		rel  string
		want []string
	}{
		{"status", statusColumns},
		{"applied", nil}, // composite types are not in information_schema.columns; checked below
		{"definitions", []string{"id bigint", "target text", "target_table text", "source_table text", "kind text",
			"owner text", "status text", "version bigint", "created_at timestamp with time zone", "reads text[]",
			"backfill_failure jsonb", "halted boolean", "halt jsonb", "definition_text text", "statement_verified boolean"}},
		{"relationships", []string{"id bigint", "address text", "name text", "from_schema text", "from_table text",
			"from_col text", "to_schema text", "to_table text", "to_col text", "cardinality text", "owner text",
			"warnings text[]", "created_at timestamp with time zone"}},
		{"quarantined", []string{"target text", "transform text", "column_name text", "state text",
			"paused_at timestamp with time zone", "last_error text", "cascaded_from text[]", "held_keys bigint"}},
		{"quarantined_rows", []string{"target text", "transform text", "column_name text", "src_table text", "key text",
			"error_message text", "sqlstate text", "failed_at timestamp with time zone", "cursor text"}},
		{"poisoned", []string{"definition_id bigint", "transform text", "src_table text", "key text", "last_error text",
			"sqlstate text", "poisoned_at timestamp with time zone"}},
		{"fleet", []string{"staging_worker_live boolean", "staging_worker_id text", "staging_since timestamp with time zone",
			"drain_workers_live boolean", "live_drain_workers integer", "reclaim_ttl_ms bigint", "healthy boolean"}},
		{"fleet_workers", []string{"worker_id text", "proxy_id text", "kind text", "registered_at timestamp with time zone",
			"last_seen timestamp with time zone", "live boolean"}},
		{"config", []string{"schema text", "target_schema text", "database text", "upstream text", "listen text",
			"http_listen text", "staging text", "staging_held boolean", "drain_workers integer", "pool_max_size integer",
			"pool_wait_timeout_ms bigint", "call_budget_ms bigint", "lock_timeout_ms bigint", "embedded boolean",
			"data_dir text", "proxy_id text", "proxy_version text", "catalog_version integer",
			"started_at timestamp with time zone"}},
		{"capture_disruptions", []string{"table_name text", "fault text", "detail text", "definitions text[]"}},
		{"proxy_workers", []string{"worker_id text", "kind text", "state text", "since timestamp with time zone", "detail text"}},
	} {
		if tc.want == nil {
			continue
		}
		if got := columnsOf(t, pool, "trellis", tc.rel); !slices.Equal(got, tc.want) {
			t.Errorf("trellis.%s columns:\n got %q\nwant %q", tc.rel, got, tc.want)
		}
	}
	applied := queryStrings(t, pool, `SELECT a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
		FROM pg_attribute a WHERE a.attrelid = 'trellis.applied'::regclass AND a.attnum > 0 ORDER BY a.attnum`)
	wantApplied := []string{"kind text", "target text", "target_table text", "id bigint", "status text", "source_table text",
		"version bigint", "source_columns jsonb", "cardinality text", "relationship jsonb", "warnings text[]",
		"resumed text[]", "added text[]", "dropped text[]", "altered text[]"}
	if !slices.Equal(applied, wantApplied) {
		t.Errorf("trellis.applied:\n got %q\nwant %q", applied, wantApplied)
	}
	// Function signatures of §4 (what \df shows).
	funcs := queryStrings(t, pool, `SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ') ' ||
		pg_get_function_result(p.oid) FROM pg_proc p WHERE p.pronamespace = 'trellis'::regnamespace
		AND left(p.proname, 1) <> '_' ORDER BY 1`)
	wantFuncs := []string{
		"apply(statement text) SETOF trellis.applied",
		"await_converged(token text, timeout_ms bigint) void",
		"await_live(target text, timeout_ms bigint) text",
		"await_self_check(id bigint, timeout_ms bigint) text",
		"converged(token text) boolean",
		"define(statement text) SETOF trellis.applied",
		"detect_capture_disruptions() SETOF trellis.capture_disruptions",
		"dump_definitions_sql(with_pauses boolean) text",
		"has_live_drain_workers() boolean",
		"has_live_staging_worker() boolean",
		"metrics_text() text",
		"migrate() text",
		"poisoned_since(since timestamp with time zone) SETOF trellis.poisoned",
		"quarantine_status(target text) SETOF trellis.quarantined",
		"release_key(transform text, source_table text, key text) void",
		"request_backfill(source_table text, only_target text) text[]",
		"sample_quarantined(target text, after_cursor text, max_rows bigint) TABLE(src_table text, key text, error_message text, cursor text)",
		"self_check(target text, timeout_ms bigint, mode text) SETOF trellis.self_checks",
		"try_await_converged(token text, timeout_ms bigint) boolean",
		"watermark_token() text",
	}
	if !slices.Equal(funcs, wantFuncs) {
		t.Errorf("functions:\n got %q\nwant %q", funcs, wantFuncs)
	}
}

type statusRow struct {
	Target, Status string
	Problem        *string
	Percent        *float64
	Done, Est      *int64
	Started        *time.Time
	HeldBackBy     *string
	TargetTable    string
	SourceTable    string
	DefinitionID   int64
	Kind, Owner    string
}

func readStatus(t *testing.T, q engine.Querier, schema, target string) *statusRow {
	t.Helper()
	rows, err := q.Query(context.Background(), fmt.Sprintf(`SELECT target, status, problem, build_percent::float8,
		build_rows_done, build_rows_estimated, build_started_at, held_back_by, target_table, source_table,
		definition_id, kind, owner FROM %s.status WHERE target = $1`, ident(schema)), target)
	if err != nil {
		t.Fatal(err)
	}
	all, err := pgx.CollectRows(rows, pgx.RowToStructByPos[statusRow])
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 {
		t.Fatalf("status of %s: %d rows", target, len(all))
	}
	return &all[0]
}

// TestStatusLifecycle uses a non-default schema whose name needs quoting.
func TestStatusLifecycle(t *testing.T) {
	const schema = "Tenant A"
	_, pool := testDB(t)
	exec(t, pool, `CREATE TABLE orders (id bigint PRIMARY KEY, price numeric, tax numeric)`)
	exec(t, pool, `INSERT INTO orders SELECT g, g, g / 10.0 FROM generate_series(1, 20000) g`)
	exec(t, pool, `ANALYZE orders`)
	e, run := newEngine(t, pool, fastConfig(schema))
	d := define(t, e, pool, totalsSpec("order_totals", "orders"))
	chain := totalsSpec("order_rank", "order_totals")
	chain.Statement = "TRANSFORM public.order_rank FROM public.order_totals SELECT total > 100 AS big"
	chain.Fields = []engine.Field{{Name: "big", Expr: col("total") + " > 100", Reads: []string{"total"}}}
	define(t, e, pool, chain)

	// No workers yet: waiting, and the problem says why.
	s := readStatus(t, pool, schema, "order_totals")
	if s.Status != "waiting_to_backfill" || s.Problem == nil || *s.Problem != "no live staging worker" ||
		s.TargetTable != "public.order_totals" || s.SourceTable != "public.orders" || s.DefinitionID != d.ID ||
		s.Kind != "one_to_one" || s.Owner != "postgres" || s.Percent != nil || s.HeldBackBy != nil {
		t.Fatalf("before workers: %+v problem=%v", s, deref(s.Problem))
	}
	if s := readStatus(t, pool, schema, "order_rank"); s.HeldBackBy == nil || *s.HeldBackBy != "order_totals" {
		t.Fatalf("order_rank must be held back by order_totals: %+v", s)
	}

	run()
	// Watch the build: progress columns are consistent whenever seen.
	deadline := time.Now().Add(60 * time.Second)
	sawBackfilling := false
	for {
		s = readStatus(t, pool, schema, "order_totals")
		if s.Status == "backfilling" {
			sawBackfilling = true
			if s.Started == nil || (s.Est != nil && *s.Est <= 0) {
				t.Fatalf("backfilling without build columns: %+v", s)
			}
			if s.Percent != nil && (*s.Percent < 0 || *s.Percent > 99.9) {
				t.Fatalf("build_percent out of range: %v", *s.Percent)
			}
		}
		if s.Status == "live" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never live: %+v problem=%v", s, deref(s.Problem))
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("saw backfilling: %v", sawBackfilling)
	if s.Problem != nil || s.Percent != nil || s.Done != nil || s.Started != nil || s.HeldBackBy != nil {
		t.Fatalf("live row must be clean: %+v problem=%v", s, deref(s.Problem))
	}
	waitStatus(t, pool, schema, "order_rank", "live")

	// WHERE, ORDER BY and a join with a user table.
	exec(t, pool, `CREATE TABLE dashboards (target text PRIMARY KEY, team text)`)
	exec(t, pool, `INSERT INTO dashboards VALUES ('order_totals', 'sales'), ('order_rank', 'growth'), ('gone', 'x')`)
	got := queryStrings(t, pool, fmt.Sprintf(`SELECT d.team || ':' || s.status || ':' || s.kind
		FROM %s.status s JOIN dashboards d USING (target) WHERE s.status = 'live' ORDER BY s.target DESC`, ident(schema)))
	if !slices.Equal(got, []string{"sales:live:one_to_one", "growth:live:one_to_one"}) {
		t.Fatalf("join: %v", got)
	}
	defs := queryStrings(t, pool, fmt.Sprintf(`SELECT id || ' ' || target || ' ' || status || ' ' || version || ' ' ||
		array_to_string(reads, ',') || ' ' || halted || ' | ' || definition_text FROM %s.definitions ORDER BY id`, ident(schema)))
	if len(defs) != 2 || !strings.HasPrefix(defs[0], fmt.Sprintf("%d order_totals live ", d.ID)) ||
		!strings.Contains(defs[0], " public.orders false | TRANSFORM public.order_totals FROM public.orders SELECT price + tax AS total") ||
		!strings.Contains(defs[1], " public.order_totals false | TRANSFORM public.order_rank") {
		t.Fatalf("definitions: %q", defs)
	}
	if n := queryStrings(t, pool, fmt.Sprintf("SELECT count(*)::text FROM %s.quarantined", ident(schema))); n[0] != "0" {
		t.Fatalf("quarantined rows: %v", n)
	}
	qs := queryStrings(t, pool, fmt.Sprintf("SELECT target || ' ' || state || ' ' || held_keys FROM %s.quarantine_status('order_totals')", ident(schema)))
	if !slices.Equal(qs, []string{"order_totals live 0"}) {
		t.Fatalf("quarantine_status: %v", qs)
	}
	_, err := pool.Exec(context.Background(), fmt.Sprintf("SELECT * FROM %s.quarantine_status('nope')", ident(schema)))
	wantCode(t, err, "42704", "transform nope does not exist")

	// Fleet: this process's workers are live and hold the staging lock.
	deadline = time.Now().Add(30 * time.Second)
	for {
		var staging, healthy bool
		var id *string
		if err := pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT %[1]s.has_live_staging_worker(), healthy, staging_worker_id
			FROM %[1]s.fleet`, ident(schema))).Scan(&staging, &healthy, &id); err != nil {
			t.Fatal(err)
		}
		if staging && healthy && id != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fleet never healthy: staging=%v healthy=%v", staging, healthy)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := queryStrings(t, pool, fmt.Sprintf("SELECT count(*)::text FROM %s.fleet_workers WHERE live AND kind = 'drain'", ident(schema))); n[0] == "0" {
		t.Fatal("no live drain worker row")
	}

	// A held key shows in status, quarantined counts, poisoned and the report.
	exec(t, pool, fmt.Sprintf(`INSERT INTO %s._poison (definition_id, src_table, key, error, sqlstate, origin_lsn)
		VALUES ($1, 'public.orders', '42', 'integer out of range', '22003', '0/1')`, ident(schema)), d.ID)
	s = readStatus(t, pool, schema, "order_totals")
	if s.Problem == nil || *s.Problem != "1 source keys quarantined" {
		t.Fatalf("problem with a held key: %v", deref(s.Problem))
	}
	hk := queryStrings(t, pool, fmt.Sprintf("SELECT held_keys->>'held_count' FROM %s.status WHERE target = 'order_totals'", ident(schema)))
	if hk[0] != "1" {
		t.Fatalf("held_keys: %v", hk)
	}
	ps := queryStrings(t, pool, fmt.Sprintf("SELECT transform || ' ' || src_table || ' ' || key FROM %s.poisoned_since('-infinity')", ident(schema)))
	if !slices.Equal(ps, []string{"order_totals public.orders 42"}) {
		t.Fatalf("poisoned_since: %v", ps)
	}
	report, err := StatusReportSchema(context.Background(), pool, schema)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Transform definitions:\n  id=",
		fmt.Sprintf("  id=%d source=public.orders target=public.order_totals status=live owner=postgres created_at=", d.ID),
		"\nRelationships:\n  no relationships\n",
		"\nQuarantined source rows: 1\n  transform=order_totals table=public.orders key=42 error=\"integer out of range\"\n",
		"  Fix the cause, then release a key with `trellis-proxy release <transform> <table> <key>`,\n  or RESUME TRANSFORM the transform to rebuild it.\n",
		"\nFleet: staging worker ",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	t.Logf("report:\n%s", report)
}

func TestStatusInsideTheDefiningTransaction(t *testing.T) {
	_, pool := testDB(t)
	exec(t, pool, `CREATE TABLE orders (id bigint PRIMARY KEY, price numeric, tax numeric)`)
	e, run := newEngine(t, pool, fastConfig("trellis"))
	run()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	define(t, e, tx, totalsSpec("order_totals", "orders"))
	s := readStatus(t, tx, "trellis", "order_totals")
	if s.Status != "waiting_to_backfill" || deref(s.Problem) != "defined in this open transaction; building starts at COMMIT" {
		t.Fatalf("inside the block: %+v problem=%v", s, deref(s.Problem))
	}
	if n := queryStrings(t, pool, "SELECT count(*)::text FROM trellis.status"); n[0] != "0" {
		t.Fatal("another session sees an uncommitted definition")
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, pool, "trellis", "order_totals", "live")
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

func TestNamedPreparedStatementOverStatus(t *testing.T) {
	_, pool := testDB(t)
	exec(t, pool, `CREATE TABLE orders (id bigint PRIMARY KEY, price numeric, tax numeric)`)
	e, run := newEngine(t, pool, fastConfig("trellis"))
	define(t, e, pool, totalsSpec("order_totals", "orders"))

	ctx := context.Background()
	cfg, err := pgx.ParseConfig(pool.Config().ConnConfig.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	const q = `SELECT status, build_percent, held_keys FROM trellis.status WHERE target = $1`
	var status string
	var pct *float64
	var held map[string]any
	if err := conn.QueryRow(ctx, q, "order_totals").Scan(&status, &pct, &held); err != nil {
		t.Fatal(err)
	}
	if status != "waiting_to_backfill" {
		t.Fatalf("status %q", status)
	}
	// An explicitly named statement, as drivers with PREPARE semantics use.
	if _, err := conn.Prepare(ctx, "status_of", q); err != nil {
		t.Fatal(err)
	}
	run()
	deadline := time.Now().Add(60 * time.Second)
	for status != "live" {
		if time.Now().After(deadline) {
			t.Fatalf("never live through the prepared statement: %s", status)
		}
		time.Sleep(20 * time.Millisecond)
		if err := conn.QueryRow(ctx, "status_of", "order_totals").Scan(&status, &pct, &held); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRow(ctx, q, "order_totals").Scan(&status, &pct, &held); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := conn.QueryRow(ctx, "status_of", "no_such").Scan(&status, &pct, &held); err != pgx.ErrNoRows {
		t.Fatalf("unknown target: %v", err)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM trellis.status WHERE target = ANY($1)`, []string{"order_totals", "x"}).Scan(&n); err != nil || n != 1 {
		t.Fatalf("count = %d, %v", n, err)
	}
}
