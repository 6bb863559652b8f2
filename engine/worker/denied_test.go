package worker

import (
	"context"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-proxy/trellis-proxy/internal/pgcluster"
)

func TestMain(m *testing.M) { pgcluster.RunMain(m) }

// A workers' session refused a privilege, even by a statement its caller
// handled under a savepoint, is marked and not handed out again; a
// session whose statements failed otherwise is reused. A marked staging
// session is due for renewal once per RefreshDenied.
func TestDeniedSessionLeavesPool(t *testing.T) {
	ctx := context.Background()
	c := pgcluster.ForTest(t)
	db := c.FreshDB(t, "denied")
	admin, err := pgx.Connect(ctx, c.URL(db))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	for _, q := range []string{
		`DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'denied_probe') THEN CREATE ROLE denied_probe LOGIN; END IF; END $$`,
		`CREATE TABLE secret (x int)`,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	pc, err := pgxpool.ParseConfig(c.URL(db))
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig.User, pc.MaxConns = "denied_probe", 1
	WatchDenials(pc, slog.New(slog.DiscardHandler))
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	session := func() (*pgxpool.Conn, uint32) {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return conn, conn.Conn().PgConn().PID()
	}

	conn, first := session()
	if _, err := conn.Exec(ctx, `SELECT 1 / 0`); err == nil {
		t.Fatal("division by zero succeeded")
	}
	if SessionDenied(conn.Conn()) {
		t.Fatal("a data error marked the session")
	}
	conn.Release()

	conn, pid := session()
	if pid != first {
		t.Fatalf("a session with a data error was replaced (%d, then %d)", first, pid)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SAVEPOINT s`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT * FROM secret`); !Denied(err) {
		t.Fatalf("reading secret: %v, want 42501", err)
	}
	if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT s`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if !SessionDenied(conn.Conn()) {
		t.Fatal("a refused statement handled under a savepoint did not mark the session")
	}
	e := NewEnv(Config{}, nil, pool)
	if !e.StagingRenewalDue(conn.Conn()) {
		t.Fatal("a marked session not due for renewal")
	}
	if e.StagingRenewalDue(conn.Conn()) {
		t.Fatal("a second renewal within RefreshDenied allowed")
	}
	conn.Release()

	conn, pid = session()
	defer conn.Release()
	if pid == first {
		t.Fatal("the refused session went back to the pool")
	}
	if SessionDenied(conn.Conn()) || e.StagingRenewalDue(conn.Conn()) {
		t.Fatal("a fresh session is marked")
	}
	e.RenewStaging()
	if !e.TakeStagingRenewal() || e.TakeStagingRenewal() {
		t.Fatal("a renewal is not reported exactly once")
	}
}
