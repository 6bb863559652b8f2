package virtualtables

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-proxy/trellis-proxy/engine"
	"github.com/trellis-proxy/trellis-proxy/internal/pgcluster"
)

func TestMain(m *testing.M) { pgcluster.RunMain(m) }

// testDB creates a fresh database and returns its name and a superuser pool.
func testDB(t testing.TB) (string, *pgxpool.Pool) {
	t.Helper()
	name := pgcluster.ForTest(t).FreshDB(t, "vt")
	return name, openPool(t, name, "")
}

// openPool opens a pool on database as user ("" = the superuser); the test
// cluster trusts local connections.
func openPool(t testing.TB, database, user string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgcluster.ForTest(t).URL(database))
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		cfg.ConnConfig.User = user
	}
	cfg.MaxConns = 10
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func fastConfig(schema string) engine.Config {
	return engine.Config{
		Schema:       schema,
		SealInterval: 10 * time.Millisecond, StagingInterval: 100 * time.Millisecond,
		PollInterval: 200 * time.Millisecond, TakeoverInterval: 200 * time.Millisecond,
		Heartbeat: time.Second, WorkerTTL: 5 * time.Second,
	}
}

// newEngine migrates the catalog and installs the surface, without running
// workers (so definitions stay waiting_to_backfill until run is called).
func newEngine(t testing.TB, pool *pgxpool.Pool, cfg engine.Config) (e *engine.Engine, run func()) {
	t.Helper()
	e = engine.New(pool, cfg)
	ctx := context.Background()
	if err := e.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := InstallOptions(ctx, pool, Options{Schema: e.Schema(), WorkerTTL: cfg.WorkerTTL}); err != nil {
		t.Fatal(err)
	}
	started := false
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	run = func() {
		if started {
			return
		}
		started = true
		go func() { done <- e.Run(runCtx) }()
	}
	t.Cleanup(func() {
		cancel()
		if started {
			if err := <-done; err != nil {
				t.Errorf("engine run: %v", err)
			}
		}
		e.Close()
	})
	return e, run
}

func exec(t testing.TB, q engine.Querier, sql string, args ...any) {
	t.Helper()
	if _, err := q.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func col(c string) string { return engine.SourceColumn(c) }

// totalsSpec is a 1-1 transform target <- source computing price + tax.
func totalsSpec(target, source string) engine.Spec {
	return engine.Spec{
		Target:    engine.TableName{Schema: "public", Name: target},
		Source:    engine.TableName{Schema: "public", Name: source},
		Statement: fmt.Sprintf("TRANSFORM public.%s FROM public.%s SELECT price + tax AS total", target, source),
		Fields:    []engine.Field{{Name: "total", Expr: col("price") + " + " + col("tax"), Reads: []string{"price", "tax"}}},
	}
}

func define(t testing.TB, e *engine.Engine, q engine.Querier, spec engine.Spec) *engine.Defined {
	t.Helper()
	d, err := e.Define(context.Background(), q, spec)
	if err != nil {
		t.Fatalf("define %s: %v", spec.Target.Name, err)
	}
	return d
}

// waitStatus polls schema.status until target reports want.
func waitStatus(t testing.TB, q engine.Querier, schema, target, want string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var got string
	for time.Now().Before(deadline) {
		err := q.QueryRow(context.Background(), fmt.Sprintf("SELECT status FROM %s.status WHERE target = $1", ident(schema)), target).Scan(&got)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		if got == want {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: status %q, want %q", target, got, want)
}

func wantCode(t testing.TB, err error, code string, msgPart string) *pgconn.PgError {
	t.Helper()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		t.Fatalf("want SQLSTATE %s, got %v", code, err)
	}
	if pe.Code != code || !strings.Contains(pe.Message, msgPart) {
		t.Fatalf("want SQLSTATE %s containing %q, got %s %q (detail %q)", code, msgPart, pe.Code, pe.Message, pe.Detail)
	}
	return pe
}

func queryStrings(t testing.TB, q engine.Querier, sql string, args ...any) []string {
	t.Helper()
	rows, err := q.Query(context.Background(), sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return out
}
