package engine

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
)

// writers runs n tight-loop writers (insert, update, delete) on table until
// stop is called and reports the first error any of them met.
//
// Statements run on a context that is never cancelled; stop only ends the
// loops. A statement cut off by a cancelled context can still commit on the
// server after pgx has returned, and so after the token a test takes next:
// its change then lands after the comparison it should precede. That made
// TestRenamedReadColumnPausesOnlyItsReaders and
// TestLifecycleChurnUnderWriters report the writers' last insert, update or
// delete as missing from a target (once in about six runs under load).
func runWriters(t *testing.T, e *Engine, table string, n int) (stop func() error) {
	t.Helper()
	done, cancel := context.WithCancel(context.Background())
	ctx := context.Background()
	var wg sync.WaitGroup
	var first atomic.Value
	var ops atomic.Int64
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; done.Err() == nil; i++ {
				var err error
				// Statements that name no column a test renames, drops or re-types.
				switch i % 3 {
				case 0:
					_, err = e.w.Pool.Exec(ctx, fmt.Sprintf("INSERT INTO %s DEFAULT VALUES", table))
				case 1:
					_, err = e.w.Pool.Exec(ctx, fmt.Sprintf("UPDATE %[1]s SET c = coalesce(c, 0) + 1 WHERE ctid = (SELECT ctid FROM %[1]s OFFSET $1 LIMIT 1)", table), (w*7+i)%50)
				case 2:
					_, err = e.w.Pool.Exec(ctx, fmt.Sprintf("DELETE FROM %[1]s WHERE ctid = (SELECT ctid FROM %[1]s OFFSET $1 LIMIT 1)", table), (w*13+i)%50)
				}
				if err != nil {
					first.CompareAndSwap(nil, fmt.Errorf("writer %d op %d: %w", w, i, err))
					return
				}
				ops.Add(1)
			}
		}(w)
	}
	return func() error {
		time.Sleep(0)
		cancel()
		wg.Wait()
		if v := first.Load(); v != nil {
			return v.(error)
		}
		if ops.Load() == 0 {
			return fmt.Errorf("writers did nothing")
		}
		return nil
	}
}

// Capture generated for key id survives every ALTER TABLE an application
// may run under load: no writer statement fails (a missing or re-typed key
// logs a schema marker instead).
func TestCaptureNeverFailsWritersOnSchemaChanges(t *testing.T) {
	pool := testDB(t)
	cfg := fastConfig()
	cfg.Staging = StagingOff // capture installed by hand: no staging pass may remove it
	e, _ := startEngine(t, pool, cfg)
	for _, alter := range []string{
		`ALTER TABLE s ADD COLUMN extra int`,
		`ALTER TABLE s DROP COLUMN b`,
		`ALTER TABLE s ALTER COLUMN a TYPE text`,
		`ALTER TABLE s RENAME COLUMN a TO a2`,
		`ALTER TABLE s ALTER COLUMN id TYPE numeric`,
		`ALTER TABLE s RENAME COLUMN id TO id2`,
		`ALTER TABLE s DROP COLUMN id`,
	} {
		exec(t, pool, `DROP TABLE IF EXISTS s CASCADE`)
		exec(t, pool, `CREATE SEQUENCE IF NOT EXISTS sq; CREATE TABLE s (id int PRIMARY KEY DEFAULT nextval('sq'), a int DEFAULT 1, b int DEFAULT 2, c int)`)
		exec(t, pool, `INSERT INTO s SELECT FROM generate_series(1, 100) g`)
		p := e.w.Inst().NewCapturePlan(`"public"."s"`, []keyCol{{Name: "id", Type: "integer", FullType: "integer"}}, false)
		conn, _ := pool.Acquire(context.Background())
		ok, err := e.w.Cap.InstallCapture(context.Background(), conn.Conn(), p)
		conn.Release()
		if !ok || err != nil {
			t.Fatal(ok, err)
		}
		stop := runWriters(t, e, "s", 3)
		time.Sleep(200 * time.Millisecond)
		exec(t, pool, alter)
		time.Sleep(200 * time.Millisecond)
		if err := stop(); err != nil {
			t.Errorf("%s: %v", alter, err)
		}
		var markers int
		pool.QueryRow(context.Background(), "SELECT count(*) FROM trellis._change_log WHERE op = 'schema'").Scan(&markers)
		t.Logf("%s: ok, markers so far %d", alter, markers)
	}
}

// BenchmarkCaptureGuard measures the write tax of the capture guard (the
// key-column check at the head of each capture function), server-side to
// keep client noise out: a DO block runs 2,000 single-row INSERT and UPDATE
// statements (each fires its statement trigger) on a table without capture,
// with unguarded capture and with the guard; modes interleave, best of 5.
func BenchmarkCaptureGuard(b *testing.B) {
	pool := testDB(b)
	cfg := fastConfig()
	cfg.Staging = StagingOff // capture installed by hand: no staging pass may remove it
	e, _ := startEngine(b, pool, cfg)
	ctx := context.Background()
	modes := []string{"no_capture", "unguarded", "guarded"}
	for _, mode := range modes {
		exec(b, pool, `CREATE TABLE `+mode+` (id int PRIMARY KEY, a int)`)
		if mode == "no_capture" {
			continue
		}
		p := e.w.Inst().NewCapturePlan(`"public"."`+mode+`"`, []keyCol{{Name: "id", Type: "integer", FullType: "integer"}}, false)
		conn, err := pool.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if ok, err := e.w.Cap.InstallCapture(ctx, conn.Conn(), p); !ok || err != nil {
			b.Fatal(ok, err)
		}
		if mode == "unguarded" {
			for _, ev := range []string{"insert", "update", "delete"} {
				for _, s := range e.w.Inst().CaptureDDL(p) {
					if strings.HasPrefix(s, "CREATE OR REPLACE FUNCTION "+e.w.Inst().CapFunc(p.Table, ev)+"()") {
						exec(b, conn, strings.Replace(s, e.w.Inst().CaptureGuard(p, ev), "", 1))
					}
				}
			}
		}
		conn.Release()
	}
	// The capture functions' own time per call, from pg_stat_user_functions.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	exec(b, conn, `SET track_functions = 'pl'`)
	const n = 2000
	for i := 0; i < b.N; i++ {
		for _, mode := range modes {
			base := i * n
			exec(b, conn, fmt.Sprintf(`DO $$ BEGIN FOR i IN %d..%d LOOP
				INSERT INTO %s VALUES (i, 1); UPDATE %s SET a = a + 1 WHERE id = i; END LOOP; END $$`, base+1, base+n, mode, mode))
		}
	}
	exec(b, conn, `SELECT pg_stat_force_next_flush()`)
	exec(b, conn, `SELECT 1`)
	for _, mode := range modes[1:] {
		var us float64
		p := e.w.Inst().NewCapturePlan(`"public"."`+mode+`"`, []keyCol{{Name: "id", Type: "integer", FullType: "integer"}}, false)
		fns := []string{e.w.Inst().CapFunc(p.Table, "insert"), e.w.Inst().CapFunc(p.Table, "update")}
		if err := conn.QueryRow(ctx, `SELECT coalesce(1000 * sum(self_time) / nullif(sum(calls), 0), 0) FROM pg_stat_user_functions
			WHERE funcid = ANY (ARRAY[$1::text::regproc, $2::text::regproc]::oid[])`, fns[0], fns[1]).Scan(&us); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(us, mode+"_us/call")
	}
}

// A TRUNCATE in a REPEATABLE READ or SERIALIZABLE transaction whose snapshot
// predates another committed change of the table's pg_class row (another
// TRUNCATE, a first trigger install) must not fail because of capture. The
// truncate trigger once read pg_class under the transaction's snapshot, saw
// the row's old version and its own new one, and failed the writer with
// 21000 "more than one row returned by a subquery used as an expression"
// (TestDifferential seed 1795960113908280630, which runs its writers under
// a serializable database default); its bookkeeping UPDATE then failed the
// writer with 40001 against the concurrent truncate's.
func TestTruncateInSnapshotTransactionAfterConcurrentTruncate(t *testing.T) {
	pool := testDB(t)
	ctx := context.Background()
	exec(t, pool, `CREATE TABLE s (id int PRIMARY KEY, a int)`)
	exec(t, pool, `INSERT INTO s SELECT g, g FROM generate_series(1, 50) g`)
	e, _ := startEngine(t, pool, fastConfig())
	if _, err := applyText(t, e, `TRANSFORM s_v FROM s SELECT a * 3 AS a3`); err != nil {
		t.Fatal(err)
	}
	if _, err := applyText(t, e, `TRANSFORM s_n FROM s GROUP BY a SELECT a AS a, COUNT(*) AS n`); err != nil {
		t.Fatal(err)
	}
	awaitLive(t, e, "s_v")
	awaitLive(t, e, "s_n")
	for _, iso := range []string{"REPEATABLE READ", "SERIALIZABLE"} {
		a, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		exec(t, a, "SET TRANSACTION ISOLATION LEVEL "+iso)
		exec(t, a, `SELECT 1`) // the transaction's snapshot, no lock on s
		exec(t, pool, `TRUNCATE s`)
		exec(t, pool, `INSERT INTO s SELECT g, g FROM generate_series(1, 10) g`)
		if _, err := a.Exec(ctx, `TRUNCATE s`); err != nil {
			a.Rollback(ctx)
			t.Fatalf("%s: the application's TRUNCATE failed because of capture: %v", iso, err)
		}
		exec(t, a, `INSERT INTO s SELECT g, g * 2 FROM generate_series(5, 30) g`)
		if err := a.Commit(ctx); err != nil {
			t.Fatalf("%s: commit: %v", iso, err)
		}
		// Two truncates met in these isolation levels: the second could not
		// record its relfilenode, so the rewrite check may rebuild the readers.
		time.Sleep(300 * time.Millisecond)
		for _, n := range []string{"s_v", "s_n"} {
			st, _, v := storedStatus(t, e, n)
			t.Logf("%s: %s %s version %d", iso, n, st, v)
			awaitLive(t, e, n)
		}
		converge(t, e)
		assertSame(t, pool, `SELECT id, a3 FROM s_v`, `SELECT id, a * 3 FROM s`)
		assertSame(t, pool, `SELECT a, n FROM s_n`, `SELECT a, count(*) FROM s GROUP BY a`)
	}
}

// snapshotAlters are the key-column changes a writer's older snapshot may
// not see: each leaves the capture function's key column missing or of
// another type in the current catalog.
var snapshotAlters = []struct{ name, sql, wantError string }{
	{"rename", `ALTER TABLE %s RENAME COLUMN id TO id_renamed`, "renamed to id_renamed"},
	{"drop", `ALTER TABLE %s DROP COLUMN id`, "was dropped"},
	{"retype", `ALTER TABLE %s ALTER COLUMN id TYPE bigint`, "changed type from integer to bigint"},
}

// snapshotOps write table %[1]s without naming its key column, only
// column %[2]s.
var snapshotOps = []string{
	`INSERT INTO %[1]s (%[2]s) VALUES (1000)`,
	`UPDATE %[1]s SET %[2]s = %[2]s + 1 WHERE %[2]s <= 5`,
	`DELETE FROM %[1]s WHERE %[2]s > 45`,
}

// beginAt opens a transaction at iso whose snapshot is taken at once (and
// no lock on any application table).
func beginAt(t *testing.T, pool *pgxpool.Pool, iso string) pgx.Tx {
	t.Helper()
	tx, err := pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(context.Background()) }) // a failed test must not leave the pool waiting
	exec(t, tx, "SET TRANSACTION ISOLATION LEVEL "+iso)
	exec(t, tx, `SELECT 1`)
	return tx
}

// A writer in REPEATABLE READ or SERIALIZABLE whose snapshot predates a
// committed rename, drop or re-type of a key column must not fail because
// of capture, and its readers must end paused with a capture_failure
// naming the column, exactly as for a READ COMMITTED writer (the control
// here). The key guard once read pg_attribute under the writer's snapshot,
// saw the old column and let the keyed change-log INSERT run, which was
// planned against the current catalog and failed the writer with 42703.
func TestKeyColumnChangeUnseenBySnapshotWriter(t *testing.T) {
	pool := testDB(t)
	ctx := context.Background()
	e, _ := startEngine(t, pool, fastConfig())
	n := 0
	for _, iso := range []string{"READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"} {
	alters:
		for _, alter := range snapshotAlters {
			n++
			table, target := fmt.Sprintf("s%d", n), fmt.Sprintf("s%d_v", n)
			exec(t, pool, fmt.Sprintf(`CREATE SEQUENCE %[1]s_sq START 1000; CREATE TABLE %[1]s (id int PRIMARY KEY DEFAULT nextval('%[1]s_sq'), a int)`, table))
			exec(t, pool, fmt.Sprintf(`INSERT INTO %s SELECT g, g FROM generate_series(1, 50) g`, table))
			if _, err := applyText(t, e, fmt.Sprintf(`TRANSFORM %s FROM %s SELECT a * 3 AS a3`, target, table)); err != nil {
				t.Fatal(err)
			}
			awaitLive(t, e, target)
			// One writer runs every statement kind, its snapshot taken before
			// the change (a READ COMMITTED writer's statements see it).
			// Writers of their own would make SERIALIZABLE fail one of them
			// for their own conflicts, capture or not.
			w := beginAt(t, pool, iso)
			exec(t, pool, fmt.Sprintf(alter.sql, table))
			for _, op := range snapshotOps {
				stmt := fmt.Sprintf(op, table, "a")
				if _, err := w.Exec(ctx, stmt); err != nil {
					t.Errorf("%s, %s: the application's %q failed because of capture: %v", iso, alter.name, stmt, err)
					w.Rollback(ctx)
					continue alters
				}
			}
			if err := w.Commit(ctx); err != nil {
				t.Fatalf("%s, %s: commit: %v", iso, alter.name, err)
			}
			f := awaitStatus(t, e, target, "paused")
			if f == nil || f.Column != "id" || f.Table != "public."+table || !strings.Contains(f.Error, alter.wantError) {
				t.Fatalf("%s, %s: capture_failure = %+v", iso, alter.name, f)
			}
			t.Logf("%s, %s: paused: %s", iso, alter.name, f.Error)
		}
	}
}

// The guard's decision, read from the change log itself: a statement whose
// writer's snapshot predates a key-column change logs exactly one 'schema'
// marker and no keyed row, in every isolation level and for every kind of
// statement; a statement on an unchanged table in a snapshot older than an
// unrelated column change logs its keys as usual.
func TestGuardLogsSchemaMarkerForSnapshotWriters(t *testing.T) {
	pool := testDB(t)
	ctx := context.Background()
	cfg := fastConfig()
	cfg.Staging = StagingOff // capture installed by hand: no staging pass may remove it, nothing drains the log
	e, _ := startEngine(t, pool, cfg)
	install := func(table string) {
		p := e.w.Inst().NewCapturePlan(`"public".`+base.Ident(table), []keyCol{{Name: "id", Type: "integer", FullType: "integer"}}, false)
		conn, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		if ok, err := e.w.Cap.InstallCapture(ctx, conn.Conn(), p); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	logged := func(table string) (markers, keyed int) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE op = 'schema'), count(*) FILTER (WHERE op <> 'schema')
			FROM trellis._change_log WHERE src_table = $1`, `"public".`+base.Ident(table)).Scan(&markers, &keyed); err != nil {
			t.Fatal(err)
		}
		return markers, keyed
	}
	type change struct{ name, before, sql string }
	var changes []change
	for _, a := range snapshotAlters {
		changes = append(changes, change{name: a.name, sql: a.sql})
	}
	// The key column is current in these, and its keys must be logged: a
	// marker would drop them with no reader paused. The probe's fast path
	// refuses each (a key row version something updated or deleted), so they
	// exercise the slow path's own verdict.
	healthy := map[string]bool{"unrelated": true, "aborted": true, "renamed back": true, "away and back": true}
	changes = append(changes,
		change{name: "unrelated", sql: `ALTER TABLE %s RENAME COLUMN a TO a2`},
		change{name: "aborted", sql: `BEGIN; ALTER TABLE %s RENAME COLUMN id TO id_renamed; ROLLBACK`},
		// The snapshot sees the key column missing; it is back before the write.
		change{name: "renamed back", before: `ALTER TABLE %s RENAME COLUMN id TO id_renamed`, sql: `ALTER TABLE %s RENAME COLUMN id_renamed TO id`},
		// The snapshot sees the column; it went away and came back.
		change{name: "away and back", sql: `ALTER TABLE %[1]s RENAME COLUMN id TO id_renamed; ALTER TABLE %[1]s RENAME COLUMN id_renamed TO id`},
	)
	n := 0
	for _, iso := range []string{"READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"} {
		for _, alter := range changes {
			for _, op := range snapshotOps {
				n++
				table := fmt.Sprintf("g%d", n)
				exec(t, pool, fmt.Sprintf(`CREATE SEQUENCE %[1]s_sq START 1000; CREATE TABLE %[1]s (id int PRIMARY KEY DEFAULT nextval('%[1]s_sq'), a int, b int)`, table))
				exec(t, pool, fmt.Sprintf(`INSERT INTO %s SELECT g, g, g FROM generate_series(1, 50) g`, table))
				install(table)
				if alter.before != "" {
					exec(t, pool, fmt.Sprintf(alter.before, table))
				}
				w := beginAt(t, pool, iso)
				exec(t, pool, fmt.Sprintf(alter.sql, table))
				stmt := fmt.Sprintf(op, table, "b") // b: the unrelated change renames a
				if _, err := w.Exec(ctx, stmt); err != nil {
					t.Errorf("%s, %s: %q failed because of capture: %v", iso, alter.name, stmt, err)
					w.Rollback(ctx)
					continue
				}
				if err := w.Commit(ctx); err != nil {
					t.Fatalf("%s, %s: commit of %q: %v", iso, alter.name, stmt, err)
				}
				markers, keyed := logged(table)
				want := [2]int{1, 0}
				if healthy[alter.name] {
					want = [2]int{0, 1}
				}
				if [2]int{markers, keyed} != want {
					t.Errorf("%s, %s, %q: %d schema markers and %d keyed rows, want %v", iso, alter.name, stmt, markers, keyed, want)
				}
			}
		}
	}
}

// Renaming the type of a key column changes nothing capture keys on (the
// type's OID): writes go on and log their keys. The guard once cast the
// type's name, so a freshly planned guard failed every write with 42704.
func TestKeyTypeRenameKeepsCapture(t *testing.T) {
	pool := testDB(t)
	ctx := context.Background()
	cfg := fastConfig()
	cfg.Staging = StagingOff // capture installed by hand: no staging pass may remove it, nothing drains the log
	e, _ := startEngine(t, pool, cfg)
	exec(t, pool, `CREATE DOMAIN kd AS int; CREATE TABLE s (id kd PRIMARY KEY, a int)`)
	p := e.w.Inst().NewCapturePlan(`"public"."s"`, []keyCol{{Name: "id", Type: `"public"."kd"`, FullType: `"public"."kd"`}}, false)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := e.w.Cap.InstallCapture(ctx, conn.Conn(), p); !ok || err != nil {
		t.Fatal(ok, err)
	}
	conn.Release()
	exec(t, pool, `ALTER DOMAIN kd RENAME TO kd_renamed`)
	pool.Reset() // fresh sessions: every capture function is planned anew
	for i, stmt := range []string{`INSERT INTO s VALUES (1, 1), (2, 2)`, `UPDATE s SET a = a + 1`, `DELETE FROM s WHERE id = 1`} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			t.Fatalf("%q failed because of capture: %v", stmt, err)
		}
		var markers, keyed int
		if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE op = 'schema'), count(*) FILTER (WHERE op <> 'schema')
			FROM trellis._change_log WHERE src_table = '"public"."s"'`).Scan(&markers, &keyed); err != nil {
			t.Fatal(err)
		}
		if markers != 0 || keyed != i+1 {
			t.Fatalf("after %q: %d schema markers, %d keyed rows", stmt, markers, keyed)
		}
	}
}

// Capture pins only the output settings a key type's text reads (B2: each
// SET clause is paid on every captured statement). Keys of every pinned
// type, written by a session with hostile output settings, still drain to
// the right target rows; a bigint key's functions carry no output pin.
func TestCapturePinsOnlyWhatKeyTypesRead(t *testing.T) {
	pool := testDB(t)
	ctx := context.Background()
	types := map[string]struct{ typ, val string }{
		"k_tstz":  {"timestamptz", "'2024-03-01 12:00:00.123456+05:30'::timestamptz + i * interval '1 min'"},
		"k_ts":    {"timestamp", "'2024-03-01 12:00:00.5'::timestamp + i * interval '1 day'"},
		"k_date":  {"date", "'2024-03-01'::date + i"},
		"k_ival":  {"interval", "i * interval '1 day 2 hours 3.5 seconds'"},
		"k_float": {"float8", "1.0 / (i + 3)"},
		"k_bytea": {"bytea", "decode(md5(i::text), 'hex')"},
		"k_num":   {"numeric", "i / 7.0"},
		"k_big":   {"bigint", "i"},
	}
	e, _ := startEngine(t, pool, fastConfig())
	for tb, k := range types {
		exec(t, pool, fmt.Sprintf(`CREATE TABLE %s (k %s PRIMARY KEY, v int)`, tb, k.typ))
		exec(t, pool, fmt.Sprintf(`INSERT INTO %s SELECT %s, i FROM generate_series(1, 5) i`, tb, k.val))
		define(t, e, Spec{Target: TableName{Name: tb + "_t"}, Source: TableName{Name: tb}, Fields: []Field{{Name: "v2", Expr: col("v") + " * 2"}}})
	}
	for tb := range types {
		awaitLive(t, e, tb+"_t")
	}
	w, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	exec(t, w, `SET DateStyle = 'SQL, DMY'; SET TimeZone = 'Asia/Kolkata'; SET IntervalStyle = 'sql_standard';
		SET bytea_output = 'escape'; SET extra_float_digits = -3`)
	for tb, k := range types {
		exec(t, w, fmt.Sprintf(`INSERT INTO %s SELECT %s, i FROM generate_series(6, 9) i`, tb, k.val))
		exec(t, w, fmt.Sprintf(`UPDATE %s SET v = v + 100 WHERE v %% 2 = 0`, tb))
		exec(t, w, fmt.Sprintf(`DELETE FROM %s WHERE v = 3`, tb))
		exec(t, w, fmt.Sprintf(`INSERT INTO %s SELECT %s, 1000 FROM generate_series(20, 20) i`, tb, k.val))
	}
	converge(t, e)
	for tb := range types {
		assertSame(t, pool, `SELECT k, v2 FROM `+tb+`_t`, `SELECT k, v * 2 FROM `+tb)
	}
	pins := func(tb string) string {
		var s string
		if err := pool.QueryRow(ctx, `SELECT coalesce(string_agg(split_part(c, '=', 1), ',' ORDER BY c), '') FROM pg_trigger t
			JOIN pg_proc p ON p.oid = t.tgfoid, unnest(p.proconfig) c
			WHERE t.tgrelid = $1::regclass AND t.tgname = 'trellis_capture_insert' AND c NOT LIKE 'search_path=%'`, tb).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	for tb, want := range map[string]string{"k_big": "", "k_num": "", "k_float": "extra_float_digits", "k_tstz": "DateStyle,TimeZone",
		"k_ival": "IntervalStyle", "k_bytea": "bytea_output", "k_date": "DateStyle"} {
		if got := pins(tb); got != want {
			t.Errorf("%s: pinned %q, want %q", tb, got, want)
		}
	}
}
