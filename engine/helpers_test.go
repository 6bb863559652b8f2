package engine

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/internal/pgcluster"
)

func TestMain(m *testing.M) { pgcluster.RunMain(m) }

// testDB creates a fresh database and returns a pool on it.
func testDB(t testing.TB) *pgxpool.Pool {
	t.Helper()
	c := pgcluster.ForTest(t)
	cfg, err := pgxpool.ParseConfig(c.URL(c.FreshDB(t, "eng")))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func fastConfig() Config {
	return Config{
		SealInterval: 10 * time.Millisecond, StagingInterval: 100 * time.Millisecond,
		PollInterval: 200 * time.Millisecond, TakeoverInterval: 200 * time.Millisecond,
		Heartbeat: time.Second, WorkerTTL: 5 * time.Second,
		Logger: testLogger(),
	}
}

// startEngine migrates and runs an engine until the test ends.
func startEngine(t testing.TB, pool *pgxpool.Pool, cfg Config) (*Engine, context.CancelFunc) {
	t.Helper()
	return startPlanted(t, pool, cfg, nil)
}

// startPlanted is startEngine with plant set on the engine before it
// migrates and runs (planted faults, step sizes).
func startPlanted(t testing.TB, pool *pgxpool.Pool, cfg Config, plant func(*Engine)) (*Engine, context.CancelFunc) {
	t.Helper()
	e := New(pool, cfg)
	if plant != nil {
		plant(e)
	}
	// Diagnostics: keep every change-log row so a failure can show where a
	// key's changes went (explainKeys). Only ever turned on here: a test's
	// own plant (TestRetiringBatchKeysSkipsDrainingBatch) must stand, or
	// retirement races its reads.
	if os.Getenv("TRELLIS_KEEP_LOG") != "" {
		e.w.Plant.KeepLog = true
	}
	if err := e.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	// Run reads the workers' role first; tests that render capture by hand
	// (newCapturePlan) need it, as the staging worker does.
	for deadline := time.Now().Add(30 * time.Second); e.w.WorkerRole() == "" && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("engine run: %v", err)
		}
		e.Close()
	}
	t.Cleanup(stop)
	return e, stop
}

func exec(t testing.TB, q Querier, sql string, args ...any) {
	t.Helper()
	if _, err := q.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func define(t testing.TB, e *Engine, spec Spec) *Defined {
	t.Helper()
	d, err := e.Define(context.Background(), e.w.Pool, spec)
	if err != nil {
		t.Fatalf("define %s: %v", spec.Target.Name, err)
	}
	return d
}

func awaitLive(t testing.TB, e *Engine, name string) {
	t.Helper()
	if err := e.AwaitLive(context.Background(), TableName{Name: name}, 60*time.Second); err != nil {
		st, _ := e.Status(context.Background())
		t.Fatalf("await live %s: %v (status %+v)", name, err, st)
	}
}

func converge(t testing.TB, e *Engine) {
	t.Helper()
	tok, err := e.WatermarkToken(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.AwaitConverged(context.Background(), tok, 60*time.Second); err != nil {
		t.Fatalf("await converged: %v", err)
	}
}

// diff compares two queries as multisets (EXCEPT ALL both ways) and returns
// a description of the difference, "" when equal.
func diff(t testing.TB, q Querier, got, want string) string {
	t.Helper()
	var out []string
	for _, dir := range [][2]string{{got, want}, {want, got}} {
		rows, err := q.Query(context.Background(), "SELECT x::text FROM (("+dir[0]+") EXCEPT ALL ("+dir[1]+")) x LIMIT 10")
		if err != nil {
			t.Fatalf("diff query: %v\n%s\n%s", err, got, want)
		}
		r, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if len(r) > 0 {
			label := "extra in target"
			if dir[0] == want {
				label = "missing from target"
			}
			out = append(out, label+": "+strings.Join(r, " | "))
		}
	}
	return strings.Join(out, "\n")
}

func assertSame(t testing.TB, q Querier, got, want string) {
	t.Helper()
	if d := diff(t, q, got, want); d != "" {
		t.Fatalf("target differs from oracle:\n%s\ngot:  %s\nwant: %s", d, got, want)
	}
}

func col(c string) string { return SourceColumn(c) }

func count(t testing.TB, q Querier, sql string) int64 {
	t.Helper()
	var n int64
	if err := q.QueryRow(context.Background(), "SELECT count(*) FROM ("+sql+") x").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func testLogger() *slog.Logger {
	if os.Getenv("ENGINE_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// explainKeys describes, for a 1-1 target keyed by id over src, the keys
// where target and source disagree: their ledger entries, their change-log
// rows (with TRELLIS_KEEP_LOG set) and the batch that held each, and every
// definition's status and version.
func explainKeys(t testing.TB, q Querier, target, src string) string {
	t.Helper()
	var b strings.Builder
	ctx := context.Background()
	keys := `(SELECT id::text FROM ` + base.Ident(target) + ` EXCEPT SELECT id::text FROM ` + base.Ident(src) + `)
		UNION (SELECT id::text FROM ` + base.Ident(src) + ` EXCEPT SELECT id::text FROM ` + base.Ident(target) + `)`
	lines := func(label, sql string, args ...any) {
		rows, err := q.Query(ctx, sql, args...)
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", label, err)
			return
		}
		for rows.Next() {
			var s string
			rows.Scan(&s)
			fmt.Fprintf(&b, "%s %s\n", label, s)
		}
		rows.Close()
	}
	lines("ledger", `SELECT format('%s', l) FROM `+base.Ident(target+"__ledger")+` l WHERE l.k IN (`+keys+`)`)
	// A captured statement's row holds its keys in keys (key is a
	// rederive's single key): one line per mismatched key of each row.
	lines("log", `SELECT format('%s', row(k.key, c.op, c.change_id, cardinality(c.keys), c.txid, c.staged_at,
		(SELECT min(b.seq) FROM trellis._batches b WHERE pg_visible_in_snapshot(c.txid, b.snap))))
		FROM trellis._change_log c CROSS JOIN LATERAL unnest(coalesce(c.keys, ARRAY[c.key])) AS k(key)
		WHERE c.src_table = 'public.' || $1
		  AND (k.key IN (`+keys+`) OR c.key IS NULL AND c.keys IS NULL)
		ORDER BY c.change_id, k.key`, src)
	lines("batch", `SELECT format('%s', row(seq, snap, sealed_at, drained_at)) FROM trellis._batches ORDER BY seq DESC LIMIT 5`)
	lines("definition", `SELECT format('%s', row(id, compiled #>> '{spec,target,name}', status, version, build_id, status_detail))
		FROM trellis._definitions ORDER BY id`)
	return b.String()
}

// assertSameExplained is assertSame with explainKeys on failure.
func assertSameExplained(t testing.TB, q Querier, got, want, target, src string) {
	t.Helper()
	if d := diff(t, q, got, want); d != "" {
		t.Fatalf("target differs from oracle:\n%s\ngot:  %s\nwant: %s\n%s", d, got, want, explainKeys(t, q, target, src))
	}
}

// awaitBeforeReturn polls cond until it holds, failing the test after 60 s,
// while an operation running in another goroutine is expected not to end
// yet: if done delivers first, it stops and hands back that result
// (returned true) for the caller to report.
func awaitBeforeReturn(t *testing.T, what string, done <-chan error, cond func() bool) (returned bool, err error) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		select {
		case err := <-done:
			return true, err
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
	return false, nil
}

// liveTransforms applies each TRANSFORM text and waits until every target
// is live.
func liveTransforms(t *testing.T, e *Engine, texts ...string) {
	t.Helper()
	for _, s := range texts {
		if _, err := applyText(t, e, s); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range texts {
		awaitLive(t, e, strings.Fields(s)[1])
	}
}
