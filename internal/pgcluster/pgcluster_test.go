package pgcluster

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { RunMain(m) }

func TestSharedClusterAcceptsQueries(t *testing.T) {
	c := ForTest(t)
	for _, url := range []string{c.URL("postgres"), c.SocketURL("postgres")} {
		conn, err := pgx.Connect(t.Context(), url)
		if err != nil {
			t.Fatalf("connect %s: %v", url, err)
		}
		var v int
		if err := conn.QueryRow(t.Context(), "SELECT current_setting('server_version_num')::int / 10000").Scan(&v); err != nil {
			t.Fatal(err)
		}
		if v != c.Version {
			t.Errorf("server major %d, binaries say %d", v, c.Version)
		}
		var fsync string
		conn.QueryRow(t.Context(), "SHOW fsync").Scan(&fsync)
		if fsync != "off" {
			t.Errorf("test cluster fsync = %q, want off", fsync)
		}
		conn.Close(t.Context())
	}
}

// The embedded default: socket only, password auth, data kept across restarts,
// and a postmaster left running by a killed proxy is adopted.
func TestPersistentSocketOnlyClusterWithPassword(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pgdata")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	opts := Options{DataDir: dir, Port: -1, Password: "s3cret", Fast: true}
	c, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if c.TCP || c.Addr() != "" {
		t.Fatalf("socket-only cluster reports TCP %v %q", c.TCP, c.Addr())
	}
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatalf("connect with password: %v", err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (id int)"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	bad := *c
	bad.Password = "wrong"
	if conn, err := pgx.Connect(ctx, bad.URL("postgres")); err == nil {
		conn.Close(ctx)
		t.Fatal("wrong password accepted")
	}

	// Adopt the running postmaster, as after a proxy's kill -9.
	again, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Reused || again.PID() != c.PID() {
		t.Fatalf("expected to adopt pid %d, got reused=%v pid=%d", c.PID(), again.Reused, again.PID())
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}

	// Restart from the same directory: the table is still there.
	c2, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Stop()
	conn, err = pgx.Connect(ctx, c2.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SELECT * FROM kept"); err != nil {
		t.Fatalf("table lost across restart: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); err != nil {
		t.Fatal(err)
	}
	if _, err := net.Dial("unix", c2.SocketPath()); err != nil {
		t.Fatal(err)
	}
}
