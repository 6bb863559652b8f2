package integration

// Trellis through the proxy as the product's users reach it: database/sql
// with lib/pq, psql (-c, -f, \d), and migration tools (golang-migrate, and a
// hand-written BEGIN … COMMIT file run by psql -f, which is what dbmate and
// Flyway send).

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	_ "github.com/golang-migrate/migrate/v4/database/postgres"
	_ "github.com/golang-migrate/migrate/v4/source/file"
	"github.com/lib/pq"

	"github.com/trellis-proxy/trellis-proxy/internal/pgcluster"
)

// sqlDB opens database/sql with lib/pq through the proxy as user.
func (h *trellisHarness) sqlDB(t *testing.T, user string) *sql.DB {
	t.Helper()
	db, err := sql.Open("postgres", h.url(user, "", h.db, ""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// leftovers counts what a rolled-back or failed definition of target could
// have left behind: its catalog row, its table, and any trigger on a
// non-catalog table.
func (h *trellisHarness) leftovers(t *testing.T, target string) (defs int, table bool, triggers int) {
	t.Helper()
	ctx := context.Background()
	if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM trellis._definitions WHERE target_table = 'public.' || $1`, target).Scan(&defs); err != nil {
		t.Fatal(err)
	}
	if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
		WHERE NOT g.tgisinternal AND c.relnamespace = 'public'::regnamespace`).Scan(&triggers); err != nil {
		t.Fatal(err)
	}
	return defs, tableExists(t, h.pool, target), triggers
}

func pqErr(t *testing.T, err error) *pq.Error {
	t.Helper()
	var pe *pq.Error
	if !errors.As(err, &pe) {
		t.Fatalf("want a *pq.Error, got %T %v", err, err)
	}
	return pe
}

func TestLibPQThroughProxy(t *testing.T) {
	h := startTrellis(t)
	ctx := context.Background()
	db := h.sqlDB(t, "postgres")
	db.SetMaxOpenConns(1) // one session, so the block below is one backend's
	if _, err := db.Exec(`CREATE TABLE orders (id bigint PRIMARY KEY, region text NOT NULL, amount numeric NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO orders SELECT g, 'r' || g % 3, g FROM generate_series(1, 60) g`); err != nil {
		t.Fatal(err)
	}

	// Autocommit, simple protocol (lib/pq sends a query without arguments
	// as a simple Query): the applied row and its columns.
	var kind, target, targetTable, status string
	var id int64
	if err := db.QueryRow(`TRANSFORM order_amounts FROM orders SELECT amount * 2 AS doubled`).
		Scan(&kind, &target, &targetTable, &id, &status, new(sql.NullString), new(sql.NullInt64), new(sql.NullString),
			new(sql.NullString), new(sql.NullString), new(sql.NullString), new(sql.NullString), new(sql.NullString),
			new(sql.NullString), new(sql.NullString)); err != nil {
		t.Fatal(err)
	}
	if kind != "transform_defined" || target != "order_amounts" || targetTable != "public.order_amounts" || status != "waiting_to_backfill" || id == 0 {
		t.Fatalf("applied row: %s %s %s %d %s", kind, target, targetTable, id, status)
	}

	// Rolled back: nothing left, neither the target, nor its catalog row,
	// nor a trigger anywhere in public (counted once the workers installed
	// capture for the first transform).
	var live string
	if err := db.QueryRow(`SELECT trellis.await_live('order_amounts', 60000)`).Scan(&live); err != nil || live != "live" {
		t.Fatalf("await_live: %q %v", live, err)
	}
	_, _, triggersBefore := h.leftovers(t, "order_amounts")
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`TRANSFORM region_totals FROM orders GROUP BY region SELECT SUM(amount) AS total`); err != nil {
		t.Fatal(err)
	}
	var inside int
	if err := tx.QueryRow(`SELECT count(*) FROM trellis.status WHERE target = 'region_totals' AND problem LIKE 'defined in this open transaction%'`).Scan(&inside); err != nil || inside != 1 {
		t.Fatalf("status inside the defining block: %d %v", inside, err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if defs, table, triggers := h.leftovers(t, "region_totals"); defs != 0 || table || triggers != triggersBefore {
		t.Fatalf("rollback left definitions=%d table=%v triggers=%d (before %d)", defs, table, triggers, triggersBefore)
	}

	// In BEGIN … COMMIT, over a table created in the same block, with
	// arguments (extended protocol) around it.
	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`CREATE TABLE returns (id bigint PRIMARY KEY, order_id bigint NOT NULL, amount numeric NOT NULL)`,
		`TRANSFORM region_totals FROM orders GROUP BY region SELECT SUM(amount) AS total, COUNT(*) AS n`,
		`TRANSFORM return_sums FROM returns GROUP BY order_id SELECT SUM(amount) AS returned`} {
		if _, err := tx.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := tx.Exec(`INSERT INTO returns VALUES ($1, $2, $3)`, 1, 7, "2.5"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"order_amounts", "region_totals", "return_sums"} {
		if err := db.QueryRow(`SELECT trellis.await_live($1, 60000)`, target).Scan(&live); err != nil || live != "live" {
			t.Fatalf("await_live(%s): %q %v", target, live, err)
		}
	}

	// Status reads: WHERE and ORDER BY with arguments, a join with a user
	// table, and a named prepared statement executed twice.
	rows, err := db.Query(`SELECT target, status FROM trellis.status WHERE status = $1 AND target <> $2 ORDER BY target DESC`, "live", "nothing")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var target, status string
		if err := rows.Scan(&target, &status); err != nil {
			t.Fatal(err)
		}
		got = append(got, target)
	}
	if rows.Err() != nil || strings.Join(got, ",") != "return_sums,region_totals,order_amounts" {
		t.Fatalf("ordered status: %v %v", got, rows.Err())
	}
	var regions int
	if err := db.QueryRow(`SELECT count(DISTINCT o.region) FROM trellis.status s JOIN region_totals r ON s.target = 'region_totals'
		JOIN orders o ON o.region = r.region WHERE s.status = 'live'`).Scan(&regions); err != nil || regions != 3 {
		t.Fatalf("join of status with user tables: %d %v", regions, err)
	}
	stmt, err := db.Prepare(`SELECT status, source_table FROM trellis.status WHERE target = $1`)
	if err != nil {
		t.Fatal(err)
	}
	defer stmt.Close()
	for _, target := range []string{"region_totals", "return_sums"} {
		var st, src string
		if err := stmt.QueryRow(target).Scan(&st, &src); err != nil || st != "live" || src == "" {
			t.Fatalf("prepared status read of %s: %q %q %v", target, st, src, err)
		}
	}

	// An error carries SQLSTATE, hint, the Trellis class and the position
	// of the mistake in the whole string.
	q := "SELECT 1; TRANSFORM bad FROM orders SELECT amount + no_such_column AS b"
	_, err = db.Exec(q)
	pe := pqErr(t, err)
	if pe.Code != "42703" || pe.Position != strconv.Itoa(strings.Index(q, "no_such_column")+1) || !strings.Contains(pe.Detail, "trellis: ") {
		t.Fatalf("unknown column: %s %q at %s, detail %q", pe.Code, pe.Message, pe.Position, pe.Detail)
	}

	// Another role may not drop (nor pause) a transform it does not own.
	for _, q := range []string{
		`DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'intruder') THEN CREATE ROLE intruder LOGIN; END IF; END $$`,
		`GRANT SELECT ON ALL TABLES IN SCHEMA public TO intruder`,
		`PAUSE TRANSFORM return_sums`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	intruder := h.sqlDB(t, "intruder")
	// (The DROP is of a paused transform, so only ownership can refuse it.)
	for _, q := range []string{`DROP TRANSFORM return_sums`, `PAUSE TRANSFORM region_totals`} {
		_, err = intruder.Exec(q)
		if pe := pqErr(t, err); pe.Code != "42501" || !strings.Contains(pe.Message, "owner") {
			t.Fatalf("%s by another role: %s %q", q, pe.Code, pe.Message)
		}
	}
	if _, err := db.Exec(`DROP TRANSFORM return_sums`); err != nil {
		t.Fatalf("the owner's drop after PAUSE: %v", err)
	}
	if defs, table, _ := h.leftovers(t, "return_sums"); defs != 0 || table {
		t.Fatalf("drop left definitions=%d table=%v", defs, table)
	}
}

// psqlBin finds psql: on PATH, else beside the test cluster's binaries.
func psqlBin(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("psql"); err == nil {
		return p
	}
	p := filepath.Join(pgcluster.ForTest(t).BinDir, "psql")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("psql is neither on PATH nor in %s", filepath.Dir(p))
	}
	return p
}

// psql runs psql through the proxy and returns its combined output and exit
// code (0 ok, 1 fatal, 3 an error with ON_ERROR_STOP).
func (h *trellisHarness) psql(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(psqlBin(t), append([]string{"-X", "-v", "ON_ERROR_STOP=1", "-d", h.url("postgres", "", h.db, "")}, args...)...)
	cmd.Env = append(append(os.Environ(), "PGCONNECT_TIMEOUT=30", "PSQL_PAGER=", "PAGER=", "PGCLIENTENCODING=UTF8"), env...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	t.Fatalf("running psql: %v", err)
	return "", -1
}

// caretUnder reads psql's error display ("LINE n: text" and the caret line
// below it) and returns the text from the caret on.
func caretUnder(t *testing.T, out string) string {
	t.Helper()
	lines := strings.Split(out, "\n")
	for k := 0; k+1 < len(lines); k++ {
		m := regexp.MustCompile(`^LINE \d+: `).FindString(lines[k])
		if m == "" {
			continue
		}
		col := strings.IndexByte(lines[k+1], '^')
		if col < len(m) {
			t.Fatalf("no caret under LINE:\n%s", out)
		}
		// psql pads with one space per display column: count runes.
		text := []rune(lines[k])
		if col >= len(text) {
			t.Fatalf("caret past the line:\n%s", out)
		}
		return string(text[col:])
	}
	t.Fatalf("psql printed no LINE/caret display:\n%s", out)
	return ""
}

func TestPsqlThroughProxy(t *testing.T) {
	h := startTrellis(t)

	// A hand-written transactional migration file: the source table and its
	// transforms in one BEGIN … COMMIT.
	out, code := h.psql(t, nil, "-f", filepath.Join("testdata", "psql", "1_orders.sql"))
	if code != 0 || !strings.Contains(out, "transform public.order_totals defined; it is waiting_to_backfill and reads public.orders; it starts building when this transaction commits") {
		t.Fatalf("psql -f (exit %d):\n%s", code, out)
	}
	if !strings.Contains(out, "transform_defined") {
		t.Fatalf("psql did not print the applied row:\n%s", out)
	}
	out, code = h.psql(t, nil, "-At", "-c", "SELECT trellis.await_live('order_totals', 60000)", "-c", "SELECT trellis.await_live('customer_spend', 60000)")
	if code != 0 || out != "live\nlive\n" {
		t.Fatalf("await_live (exit %d): %q", code, out)
	}

	// \d describes the status view like any relation.
	out, code = h.psql(t, nil, "-c", `\d trellis.status`)
	if code != 0 || !strings.Contains(out, `View "trellis.status"`) || !regexp.MustCompile(`(?m)^ target\s+\| text`).MatchString(out) {
		t.Fatalf(`\d trellis.status (exit %d):\n%s`, code, out)
	}

	// Status with WHERE and ORDER BY, and a mixed multi-statement string
	// (psql -c sends it as one Query).
	out, code = h.psql(t, nil, "-At", "-c", "SELECT target || ' ' || status FROM trellis.status WHERE status = 'live' ORDER BY target")
	if code != 0 || out != "customer_spend live\norder_totals live\n" {
		t.Fatalf("status (exit %d): %q", code, out)
	}
	out, code = h.psql(t, nil, "-At", "-c", "INSERT INTO orders VALUES (100, 1, 50, 5); SELECT trellis.await_converged(trellis.watermark_token(), 30000)")
	if code == 0 {
		// The token refusal of a mixed implicit transaction (surface §3.3).
		t.Fatalf("watermark_token after a write in the same string was not refused:\n%s", out)
	}
	if !strings.Contains(out, "ERROR:  a watermark token cannot be taken") && !strings.Contains(out, "25001") && !strings.Contains(out, "watermark") {
		t.Fatalf("refusal (exit %d):\n%s", code, out)
	}
	out, code = h.psql(t, nil, "-At", "-c", "INSERT INTO orders VALUES (100, 1, 50, 5)", "-c",
		"SELECT trellis.await_converged(trellis.watermark_token(), 30000)", "-c", "SELECT total FROM order_totals WHERE id = 100")
	if code != 0 || !strings.HasSuffix(out, "\n55\n") {
		t.Fatalf("read-your-writes (exit %d): %q", code, out)
	}

	// A syntax error in the middle of a transactional file: the file fails
	// whole, psql draws the caret under the mistake, nothing is left.
	_, _, triggersBefore := h.leftovers(t, "refund_totals")
	out, code = h.psql(t, nil, "-f", filepath.Join("testdata", "psql", "2_refunds_bad.sql"))
	if code != 3 || !strings.Contains(out, "2_refunds_bad.sql:4: ERROR:") {
		t.Fatalf("bad file (exit %d):\n%s", code, out)
	}
	if at := caretUnder(t, out); !strings.HasPrefix(at, "AS broken") {
		t.Fatalf("caret under %q:\n%s", at, out)
	}
	if defs, table, triggers := h.leftovers(t, "refund_totals"); defs != 0 || table || triggers != triggersBefore || tableExists(t, h.pool, "refunds") {
		t.Fatalf("failed file left definitions=%d table=%v triggers=%d (before %d)", defs, table, triggers, triggersBefore)
	}

	// A single-statement error from -c: caret at the call that is not
	// immutable.
	out, code = h.psql(t, nil, "-c", "TRANSFORM t FROM orders SELECT price * random() AS b")
	if code != 1 || !strings.Contains(out, "ERROR:") || !strings.HasPrefix(caretUnder(t, out), "random()") {
		t.Fatalf("volatile formula (exit %d):\n%s", code, out)
	}
	// Non-ASCII before the mistake: the position counts characters.
	out, code = h.psql(t, nil, "-c", "SELECT 'größe'; TRANSFORM t FROM orders SELECT price + no_such AS b")
	if code != 1 || !strings.HasPrefix(caretUnder(t, out), "no_such") {
		t.Fatalf("caret after non-ASCII text (exit %d):\n%s", code, out)
	}

	// Another role's DROP TRANSFORM is refused with 42501 (of a paused
	// transform, so only ownership can refuse it).
	h.psql(t, nil, "-c", `DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'intruder') THEN CREATE ROLE intruder LOGIN; END IF; END $$`)
	if out, code := h.psql(t, nil, "-c", "PAUSE TRANSFORM order_totals"); code != 0 {
		t.Fatalf("the owner's PAUSE (exit %d):\n%s", code, out)
	}
	cmd := exec.Command(psqlBin(t), "-X", "-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose", "-d", h.url("intruder", "", h.db, ""), "-c", "DROP TRANSFORM order_totals")
	b, _ := cmd.CombinedOutput()
	if !strings.Contains(string(b), "ERROR:  42501:") {
		t.Fatalf("intruder's DROP:\n%s", b)
	}
}

// golang-migrate sends each migration file as one multi-statement string
// (no transaction of its own): it runs as one implicit transaction.
func TestGolangMigrateThroughProxy(t *testing.T) {
	h := startTrellis(t)
	url := h.url("postgres", "", h.db, "")
	m, err := migrate.New("file://"+filepath.Join("testdata", "migrate_ok"), url)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Up(); err != nil {
		t.Fatalf("migrate up: %v", err)
	}
	db := h.sqlDB(t, "postgres")
	var live string
	if err := db.QueryRow(`SELECT trellis.await_live('invoice_totals', 60000)`).Scan(&live); err != nil || live != "live" {
		t.Fatalf("await_live: %q %v", live, err)
	}
	var total string
	if err := db.QueryRow(`SELECT total::text FROM invoice_totals WHERE customer = 'acme'`).Scan(&total); err != nil || total != "15" {
		t.Fatalf("invoice_totals: %q %v", total, err)
	}
	// The second file's JOIN target, over the table it creates.
	if err := db.QueryRow(`SELECT trellis.await_live('revenue_by_region', 60000)`).Scan(&live); err != nil || live != "live" {
		t.Fatalf("await_live revenue_by_region: %q %v", live, err)
	}
	if err := db.QueryRow(`SELECT revenue::text FROM revenue_by_region WHERE region = 'north'`).Scan(&total); err != nil || total != "15" {
		t.Fatalf("revenue_by_region: %q %v", total, err)
	}
	if err := m.Down(); err != nil {
		t.Fatalf("migrate down: %v", err)
	}
	if defs, table, _ := h.leftovers(t, "revenue_by_region"); defs != 0 || table || tableExists(t, h.pool, "customers") {
		t.Fatalf("down left the JOIN target: definitions=%d table=%v", defs, table)
	}
	if defs, table, triggers := h.leftovers(t, "invoice_totals"); defs != 0 || table || triggers != 0 || tableExists(t, h.pool, "invoices") {
		t.Fatalf("down left definitions=%d table=%v triggers=%d", defs, table, triggers)
	}

	// A syntax error in the middle of a file fails the whole file: the
	// table created before it is gone, and the error points at the right
	// line and character (positions count characters, not bytes).
	bad, err := migrate.New("file://"+filepath.Join("testdata", "migrate_bad"), url)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	err = bad.Up()
	var de database.Error
	if !errors.As(err, &de) {
		t.Fatalf("want a migrate database.Error, got %T %v", err, err)
	}
	text, rerr := os.ReadFile(filepath.Join("testdata", "migrate_bad", "1_payments.up.sql"))
	if rerr != nil {
		t.Fatal(rerr)
	}
	at := strings.Index(string(text), "AS broken")
	wantPos := utf8.RuneCount(text[:at]) + 1
	pe := pqErr(t, de.OrigErr)
	if pe.Code != "42601" || pe.Position != strconv.Itoa(wantPos) || de.Line != 5 {
		t.Fatalf("error %s %q at position %s line %d, want position %d line 5 (%v)", pe.Code, pe.Message, pe.Position, de.Line, wantPos, err)
	}
	if tableExists(t, h.pool, "payments") || tableExists(t, h.pool, "payment_fees") {
		t.Fatal("the failed file left tables behind")
	}
}
