package integration

// Field pauses, ALTER TRANSFORM and DROP TRANSFORM's rules through the
// proxy (grammar spec §4.3–4.6), with pgx against the real proxy.

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// applied runs one Trellis statement and returns its reply row as text
// values (arrays as Go string slices) and its NOTICE.
func (h *trellisHarness) applied(t *testing.T, stmt string) (map[string]any, string) {
	t.Helper()
	ctx := context.Background()
	var notices []string
	cfg, _ := pgx.ParseConfig(h.url("postgres", "", h.db, "default_query_exec_mode=simple_protocol"))
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { notices = append(notices, n.Message) }
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, stmt)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := pgx.CollectRows(rows, pgx.RowToMap)
	if err != nil || len(vals) != 1 {
		t.Fatalf("%s: %v %v", stmt, vals, err)
	}
	for k, v := range vals[0] {
		if a, ok := v.([]any); ok {
			s := make([]string, len(a))
			for i := range a {
				s[i] = fmt.Sprint(a[i])
			}
			vals[0][k] = s
		}
	}
	return vals[0], strings.Join(notices, "\n")
}

func refused(t *testing.T, c *pgx.Conn, stmt, code, variant string) *pgconn.PgError {
	t.Helper()
	_, err := c.Exec(context.Background(), stmt)
	pe := pgErrOf(t, err)
	if pe.Code != code || !strings.Contains(pe.Detail, "/"+variant) {
		t.Fatalf("%s: got %s %q (detail %q), want %s %s", stmt, pe.Code, pe.Message, pe.Detail, code, variant)
	}
	return pe
}

// PAUSE t.col, writes, RESUME t.col through a chain: the paused column and
// its readers keep their values while the rest stays live, the surface shows
// the pauses and their cascade, and after the resume every target equals
// its recompute.
func TestPauseColumnCascadeThroughProxy(t *testing.T) {
	h := startTrellis(t)
	c := h.client(t)
	mustExec(t, c, `CREATE TABLE orders (id bigint PRIMARY KEY, region text, price numeric, qty int)`)
	mustExec(t, c, `INSERT INTO orders SELECT g, 'r' || (g % 3), g, g % 5 FROM generate_series(1, 500) g`)
	mustExec(t, c, `TRANSFORM o1 FROM orders SELECT price * 2 AS dbl, qty AS qty`)
	mustExec(t, c, `TRANSFORM o2 FROM o1 SELECT dbl + 1 AS d1, qty * 3 AS q3`)
	mustExec(t, c, `TRANSFORM o3 FROM o2 GROUP BY q3 SELECT q3 AS q3, SUM(d1) AS s, COUNT(*) AS n`)
	mustExec(t, c, `TRANSFORM by_region FROM orders GROUP BY region SELECT region AS region, SUM(price) AS total, MAX(qty) AS top`)
	for _, n := range []string{"o1", "o2", "o3", "by_region"} {
		h.waitStatus(t, n, "live")
	}

	v, notice := h.applied(t, `PAUSE TRANSFORM o1.dbl`)
	if v["kind"] != "paused" || v["target"] != "o1.dbl" || v["status"] != "live" ||
		notice != "column dbl of public.o1 paused; it keeps its values until RESUME TRANSFORM o1.dbl; fields reading it are paused too: o2.d1, o3.s" {
		t.Fatalf("pause: %v %q", v, notice)
	}
	if _, notice = h.applied(t, `PAUSE TRANSFORM o1.dbl`); !strings.Contains(notice, "already paused") {
		t.Fatalf("repeated pause: %q", notice)
	}
	mustExec(t, c, `PAUSE TRANSFORM by_region.top`)
	refused(t, c, `PAUSE TRANSFORM o1.nope`, "42703", "ColumnNotFound")
	refused(t, c, `PAUSE TRANSFORM o1.id`, "42703", "ColumnNotFound")
	refused(t, c, `PAUSE TRANSFORM nope.dbl`, "42704", "TransformNotFound")
	for target, want := range map[string]string{"o1": "{dbl}", "o2": "{d1}", "o3": "{s}", "by_region": "{top}"} {
		if got := qString(t, c, `SELECT paused_columns::text FROM trellis.status WHERE target = $1`, target); got != want {
			t.Fatalf("%s paused_columns %s, want %s", target, got, want)
		}
	}
	if got := qString(t, c, `SELECT string_agg(target || ':' || cascaded_from::text || ':' || state, ' ' ORDER BY target)
		FROM trellis.quarantined WHERE column_name IS NOT NULL`); got != "by_region.top:{}:paused o1.dbl:{}:paused o2.d1:{o1.dbl}:paused o3.s:{o2.d1}:paused" {
		t.Fatalf("quarantined: %s", got)
	}

	mustExec(t, c, `UPDATE orders SET price = price + 1, qty = qty + 1 WHERE id % 4 = 0`)
	mustExec(t, c, `DELETE FROM orders WHERE id % 9 = 0`)
	mustExec(t, c, `INSERT INTO orders SELECT g, 'r9', g, 1 FROM generate_series(1001, 1100) g`)
	h.sameAs(t, c, `SELECT id, qty FROM o1`, `SELECT id, qty FROM orders`)
	h.sameAs(t, c, `SELECT id, q3 FROM o2`, `SELECT id, qty * 3 FROM orders`)
	h.sameAs(t, c, `SELECT q3, n FROM o3`, `SELECT qty * 3, COUNT(*) FROM orders GROUP BY 1`)
	h.sameAs(t, c, `SELECT region, total FROM by_region`, `SELECT region, SUM(price) FROM orders GROUP BY region`)
	if n := qString(t, c, `SELECT count(*)::text FROM o1 WHERE id > 1000 AND dbl IS NOT NULL`); n != "0" {
		t.Fatalf("%s new rows got the paused column", n)
	}

	refused(t, c, `RESUME TRANSFORM o2.d1`, "55000", "UpstreamColumnPaused")
	refused(t, c, `RESUME TRANSFORM o1.qty`, "55000", "ColumnNotPaused")
	v, notice = h.applied(t, `RESUME TRANSFORM o1.dbl`)
	if v["kind"] != "resumed" || !slices.Equal(v["resumed"].([]string), []string{"o1.dbl", "o2.d1", "o3.s"}) || v["status"] != "waiting_to_backfill" {
		t.Fatalf("resume: %v %q", v, notice)
	}
	mustExec(t, c, `RESUME TRANSFORM by_region.top`)
	for _, n := range []string{"o1", "o2", "o3", "by_region"} {
		h.waitStatus(t, n, "live")
	}
	h.sameAs(t, c, `SELECT id, dbl, qty FROM o1`, `SELECT id, price * 2, qty FROM orders`)
	h.sameAs(t, c, `SELECT id, d1, q3 FROM o2`, `SELECT id, price * 2 + 1, qty * 3 FROM orders`)
	h.sameAs(t, c, `SELECT q3, s, n FROM o3`, `SELECT qty * 3, SUM(price * 2 + 1), COUNT(*) FROM orders GROUP BY 1`)
	h.sameAs(t, c, `SELECT region, total, top FROM by_region`, `SELECT region, SUM(price), MAX(qty) FROM orders GROUP BY region`)
	if got := qString(t, c, `SELECT count(*)::text FROM trellis.quarantined`); got != "0" {
		t.Fatalf("%s quarantine rows after resume", got)
	}
}

// ALTER TRANSFORM through the proxy: the refusals with their SQLSTATEs, a
// rolled-back ALTER that leaves nothing, an ALTER after a TRANSFORM in one
// transaction, and ADD/ALTER/DROP under two writers ending live and exact
// with the edited definition stored (the dump replays it).
func TestAlterThroughProxy(t *testing.T) {
	h := startTrellis(t)
	ctx := context.Background()
	c := h.client(t)
	mustExec(t, c, `CREATE TABLE orders (id bigint PRIMARY KEY, price numeric(12,2), qty int, note text)`)
	mustExec(t, c, `INSERT INTO orders SELECT g, g, g % 5, 'n' || g FROM generate_series(1, 2000) g`)
	mustExec(t, c, `TRANSFORM ov FROM orders SELECT price * 2 AS gross, qty AS qty, note AS note`)
	mustExec(t, c, `TRANSFORM ov_down FROM ov SELECT gross + 1 AS g1`)
	mustExec(t, c, `TRANSFORM by_qty FROM orders GROUP BY qty SELECT qty AS qty, COUNT(*) AS n`)
	for _, n := range []string{"ov", "ov_down", "by_qty"} {
		h.waitStatus(t, n, "live")
	}

	refused(t, c, `ALTER TRANSFORM nope ADD 1 AS x`, "42704", "TransformNotFound")
	refused(t, c, `ALTER TRANSFORM by_qty ADD SUM(qty) AS s`, "0A000", "UnsupportedAlter")
	refused(t, c, `ALTER TRANSFORM ov ADD qty + 1 AS gross`, "42701", "AlterFieldAlreadyExists")
	refused(t, c, `ALTER TRANSFORM ov ALTER nope AS 1`, "42703", "AlterFieldNotFound")
	refused(t, c, `ALTER TRANSFORM ov ADD pricee * 3 AS triple`, "42703", "UnresolvedColumn")
	refused(t, c, `ALTER TRANSFORM ov ADD random() AS r`, "42P17", "NonImmutableConstruct")
	pe := refused(t, c, `ALTER TRANSFORM ov DROP gross`, "2BP01", "DependentsBlockDrop")
	if !strings.Contains(pe.Detail, "ov_down.g1 reads ov.gross") || pe.Position != 25 {
		t.Fatalf("DependentsBlockDrop detail %q position %d", pe.Detail, pe.Position)
	}
	pe = refused(t, c, `ALTER TRANSFORM ov ALTER gross AS (price * 2)::float8`, "0A000", "UnsupportedAlter")
	if !strings.Contains(pe.Message, "numeric") || !strings.Contains(pe.Message, "double precision") || !strings.Contains(pe.Hint, "DROP gross") {
		t.Fatalf("type change: %q %q", pe.Message, pe.Hint)
	}
	version := func() string {
		return qString(t, c, `SELECT version::text FROM trellis.definitions WHERE target = 'ov'`)
	}
	v0 := version()

	// A rolled-back ALTER leaves nothing: columns, text, version, status.
	text0 := qString(t, c, `SELECT definition_text FROM trellis.definitions WHERE target = 'ov'`)
	mustExec(t, c, `BEGIN`)
	mustExec(t, c, `ALTER TRANSFORM ov ADD qty * 10 AS q10, DROP note`)
	mustExec(t, c, `ROLLBACK`)
	if got := qString(t, c, `SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute WHERE attrelid = 'ov'::regclass AND attnum > 0 AND NOT attisdropped`); got != "id,gross,qty,note" {
		t.Fatalf("columns after rollback: %s", got)
	}
	if version() != v0 || qString(t, c, `SELECT definition_text FROM trellis.definitions WHERE target = 'ov'`) != text0 ||
		qString(t, c, `SELECT status FROM trellis.status WHERE target = 'ov'`) != "live" {
		t.Fatal("a rolled-back ALTER changed the definition")
	}

	// A TRANSFORM and an ALTER of it in one transaction (a migration).
	tc, notices := h.noticeConn(t)
	mustExec(t, tc, `BEGIN`)
	mustExec(t, tc, `TRANSFORM fresh FROM orders SELECT qty + 1 AS q1`)
	*notices = nil
	mustExec(t, tc, `ALTER TRANSFORM fresh ADD price - 1 AS p1`)
	if len(*notices) != 1 || !strings.Contains((*notices)[0], "added p1") || !strings.Contains((*notices)[0], "once this transaction commits") {
		t.Fatalf("alter in the defining transaction: %q", *notices)
	}
	mustExec(t, tc, `COMMIT`)
	h.waitStatus(t, "fresh", "live")
	h.sameAs(t, c, `SELECT id, q1, p1 FROM fresh`, `SELECT id, qty + 1, price - 1 FROM orders`)

	// Two writers throughout the edits.
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var commits atomic.Int64
	for w := 0; w < 2; w++ {
		wc := h.client(t)
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; wctx.Err() == nil; i++ {
				id := 1 + (i*13+w*977)%2500
				if _, err := wc.Exec(wctx, `INSERT INTO orders VALUES ($1::bigint, $1::bigint, $1::bigint % 7, 'w')
					ON CONFLICT (id) DO UPDATE SET price = orders.price + 1, qty = orders.qty + 1, note = 'u'`, id); err == nil {
					commits.Add(1)
				}
				if i%40 == 0 {
					wc.Exec(wctx, `DELETE FROM orders WHERE id = $1`, id+5)
				}
			}
		}(w)
	}
	v, notice := h.applied(t, `ALTER TRANSFORM ov ADD qty * 10 AS q10, ALTER gross AS price * 3, DROP note`)
	if v["kind"] != "altered" || !slices.Equal(v["added"].([]string), []string{"q10"}) || !slices.Equal(v["altered"].([]string), []string{"gross"}) ||
		!slices.Equal(v["dropped"].([]string), []string{"note"}) || v["status"] != "waiting_to_backfill" ||
		notice != "transform public.ov altered: added q10; altered gross; dropped note; the changed columns are rebuilt in the background" {
		t.Fatalf("alter: %v %q", v, notice)
	}
	h.waitStatus(t, "ov", "live")
	mustExec(t, c, `ALTER TRANSFORM ov DROP q10`)
	mustExec(t, c, `ALTER TRANSFORM ov ADD qty - 1 AS q_minus`)
	h.waitStatus(t, "ov", "live")
	time.Sleep(200 * time.Millisecond)
	stop()
	wg.Wait()
	if commits.Load() == 0 {
		t.Fatal("the writers committed nothing")
	}
	mustExec(t, c, `SELECT trellis.await_converged(trellis.watermark_token(), 120000)`)
	h.sameAs(t, c, `SELECT id, gross, qty, q_minus FROM ov`, `SELECT id, price * 3, qty, qty - 1 FROM orders`)
	h.sameAs(t, c, `SELECT id, g1 FROM ov_down`, `SELECT id, price * 3 + 1 FROM orders`)
	if got := qString(t, c, `SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute WHERE attrelid = 'ov'::regclass AND attnum > 0 AND NOT attisdropped`); got != "id,gross,qty,q_minus" {
		t.Fatalf("columns: %s", got)
	}
	if n, _ := strconv.Atoi(version()); n <= mustAtoi(t, v0) {
		t.Fatalf("version %d not bumped from %s", n, v0)
	}
	var dump string
	if err := c.QueryRow(ctx, `SELECT trellis.dump_definitions_sql()`).Scan(&dump); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dump, `TRANSFORM "public"."ov" FROM "public"."orders" SELECT "price" * 3 AS "gross", "qty" AS "qty", "qty" - 1 AS "q_minus";`) {
		t.Fatalf("dump lacks the edited definition:\n%s", dump)
	}

	// ALTER of a paused transform is refused; DROP needs a pause and no readers.
	mustExec(t, c, `PAUSE TRANSFORM ov_down`)
	refused(t, c, `ALTER TRANSFORM ov_down ADD g1 * 2 AS g2`, "55000", "TransformNotLive")
	refused(t, c, `DROP TRANSFORM ov`, "55000", "TransformNotPaused")
	mustExec(t, c, `PAUSE TRANSFORM ov`)
	pe = refused(t, c, `DROP TRANSFORM ov`, "2BP01", "DependentsBlockDrop")
	if !strings.Contains(pe.Detail, "ov_down.g1 reads ov.gross") {
		t.Fatalf("DependentsBlockDrop detail %q", pe.Detail)
	}
	mustExec(t, c, `DROP TRANSFORM ov_down`)
	mustExec(t, c, `DROP TRANSFORM ov`)
	if defs, table, _ := h.leftovers(t, "ov"); defs != 0 || table {
		t.Fatalf("drop left definitions=%d table=%v", defs, table)
	}

	// The dump of what is left replays in one go; with pauses it carries
	// an operator's field pause.
	mustExec(t, c, `PAUSE TRANSFORM fresh.p1`)
	if err := c.QueryRow(ctx, `SELECT trellis.dump_definitions_sql()`).Scan(&dump); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dump, "\nPAUSE TRANSFORM fresh.p1;\n") {
		t.Fatalf("dump lacks the field pause:\n%s", dump)
	}
	if err := c.QueryRow(ctx, `SELECT trellis.dump_definitions_sql(false)`).Scan(&dump); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"fresh", "by_qty"} {
		mustExec(t, c, `PAUSE TRANSFORM `+n)
		mustExec(t, c, `DROP TRANSFORM `+n)
	}
	if _, err := c.Exec(ctx, dump, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("replaying the dump: %v\n%s", err, dump)
	}
	h.waitStatus(t, "fresh", "live")
	h.sameAs(t, c, `SELECT id, q1, p1 FROM fresh`, `SELECT id, qty + 1, price - 1 FROM orders`)
}

// noticeConn connects through the proxy with the simple protocol and
// collects the NOTICEs it receives.
func (h *trellisHarness) noticeConn(t *testing.T) (*pgx.Conn, *[]string) {
	t.Helper()
	notices := &[]string{}
	cfg, _ := pgx.ParseConfig(h.url("postgres", "", h.db, "default_query_exec_mode=simple_protocol"))
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { *notices = append(*notices, n.Message) }
	c, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c, notices
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// ALTER ADD on a large target while two writers run ends live and exact,
// and the statement itself returns at once (the build is background work).
// TRELLIS_BIG_ALTER_ROWS sets the size (1000000 for the figure);
// the default is small enough for make test.
func TestAlterAddOnABigTargetUnderWriters(t *testing.T) {
	rows := 20000
	if s := os.Getenv("TRELLIS_BIG_ALTER_ROWS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("TRELLIS_BIG_ALTER_ROWS=%q: %v", s, err)
		}
		rows = n
	}
	h := startTrellis(t)
	ctx := context.Background()
	c := h.client(t)
	mustExec(t, c, `CREATE TABLE big (id bigint PRIMARY KEY, a int, b numeric)`)
	mustExec(t, c, `INSERT INTO big SELECT g, g % 1000, g FROM generate_series(1, $1) g`, rows)
	mustExec(t, c, `ANALYZE big`)
	mustExec(t, c, `TRANSFORM big_view FROM big SELECT a + 1 AS a1`)
	waitLong := func(want string) time.Duration {
		t0 := time.Now()
		eventually(t, 30*time.Minute, "big_view "+want, func() bool {
			return qString(t, c, `SELECT status FROM trellis.status WHERE target = 'big_view'`) == want
		})
		return time.Since(t0)
	}
	waitLong("live")

	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var commits atomic.Int64
	for w := 0; w < 2; w++ {
		wc := h.client(t)
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; wctx.Err() == nil; i++ {
				id := 1 + (i*7919+w*104729)%(rows+rows/10)
				if _, err := wc.Exec(wctx, `INSERT INTO big VALUES ($1::bigint, $1::bigint % 1000, $1::bigint) ON CONFLICT (id) DO UPDATE SET a = big.a + 1, b = big.b + 1`, id); err == nil {
					commits.Add(1)
				}
			}
		}(w)
	}
	time.Sleep(300 * time.Millisecond)
	t0 := time.Now()
	mustExec(t, c, `ALTER TRANSFORM big_view ADD b * 2 AS b2, ALTER a1 AS a + 2`)
	stmt := time.Since(t0)
	build := waitLong("live")
	stop()
	wg.Wait()
	// The writers' backlog drains after they stop: wait for it by token.
	t1 := time.Now()
	mustExec(t, c, `SELECT trellis.await_converged(trellis.watermark_token(), 1800000)`)
	t.Logf("ALTER ADD on %d rows under 2 writers (%d commits): statement %v, statement to live %v, then converged in %v",
		rows, commits.Load(), stmt.Round(time.Millisecond), build.Round(time.Millisecond), time.Since(t1).Round(time.Millisecond))
	h.sameAs(t, c, `SELECT id, a1, b2 FROM big_view`, `SELECT id, a + 2, b * 2 FROM big`)
}
