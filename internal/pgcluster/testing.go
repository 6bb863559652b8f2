package pgcluster

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// One cluster per test binary: starting Postgres costs about a second, so the
// tests of a package share it and isolate themselves by database or schema.
var shared struct {
	once sync.Once
	c    *Cluster
	err  error
}

// TestOptions are the fast, non-durable settings of a throwaway test cluster.
func TestOptions() Options {
	return Options{Fast: true, Settings: map[string]string{
		"max_connections":           "400",
		"log_min_messages":          "warning",
		"max_locks_per_transaction": "256",
	}}
}

// ForTest returns the test binary's shared cluster, starting it on first use.
// A test that cannot get a cluster fails: no silent skips.
func ForTest(tb testing.TB) *Cluster {
	tb.Helper()
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		shared.c, shared.err = Start(ctx, TestOptions())
	})
	if shared.err != nil {
		tb.Fatalf("starting a PostgreSQL cluster for tests: %v", shared.err)
	}
	return shared.c
}

// RunMain runs the tests and then stops the shared cluster; call it from
// TestMain: func TestMain(m *testing.M) { pgcluster.RunMain(m) }.
func RunMain(m *testing.M) {
	code := m.Run()
	if shared.c != nil {
		if err := shared.c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping test cluster:", err)
		}
	}
	os.Exit(code)
}

var freshSeq atomic.Int64

// FreshDB creates a database of its own for one test, named prefix plus a
// unique suffix, and drops it (WITH FORCE, so sessions a failed test left
// behind do not keep it) when the test ends. It returns the name.
func (c *Cluster) FreshDB(tb testing.TB, prefix string) string {
	tb.Helper()
	name := fmt.Sprintf("%s_%d_%d", prefix, time.Now().UnixNano()%1e9, freshSeq.Add(1))
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		tb.Fatalf("connecting to create a test database: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		tb.Fatalf("creating test database %s: %v", name, err)
	}
	tb.Cleanup(func() {
		admin, err := pgx.Connect(context.Background(), c.URL("postgres"))
		if err != nil {
			return
		}
		defer admin.Close(context.Background())
		admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	})
	return name
}

// Querier runs a query: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Backends lists, in pid order, the pids of database db's sessions whose
// application_name starts with prefix (the engine names its sessions
// "trellis-worker <process>" and "trellis-staging <process>").
func Backends(tb testing.TB, q Querier, db, prefix string) []int32 {
	tb.Helper()
	rows, err := q.Query(context.Background(), `SELECT pid FROM pg_stat_activity
		WHERE datname = $1 AND starts_with(application_name, $2) ORDER BY pid`, db, prefix)
	if err != nil {
		tb.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		tb.Fatal(err)
	}
	return pids
}
