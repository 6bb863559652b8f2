package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/internal/proxy"
)

// --lock-timeout bounds a Trellis statement's lock waits in the client's
// session (surface §13): another session's lock makes the statement fail
// with 55P03 after the timeout (or the session's shorter lock_timeout),
// nothing is applied, and the session's own lock_timeout is what it was,
// after a failure and after a success, in autocommit and in a block.
func TestLockTimeoutBoundsTrellisStatements(t *testing.T) {
	// The call budget is far above the lock timeout: a 57014 would mean the
	// lock timeout was not applied.
	s := startServed(t, func(cfg *proxy.Config) {
		cfg.LockTimeout = 400 * time.Millisecond
		cfg.CallBudget = time.Minute
	})
	ctx := context.Background()
	c := s.client(t, "")
	mustExec(t, c, `CREATE TABLE src (id int PRIMARY KEY, a int)`)
	mustExec(t, c, `INSERT INTO src SELECT g, g FROM generate_series(1, 20) g`)
	mustExec(t, c, `TRANSFORM t FROM src SELECT a AS b`)
	mustExec(t, c, `TRANSFORM u FROM src SELECT a + 1 AS b`)
	mustExec(t, c, `PAUSE TRANSFORM t`)

	// Another session reads the target in an open transaction: DROP needs
	// its table's ACCESS EXCLUSIVE lock.
	holder, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	if _, err := holder.Exec(ctx, `LOCK TABLE t IN ACCESS SHARE MODE`); err != nil {
		t.Fatal(err)
	}

	show := func(c *pgx.Conn) string { return qString(t, c, `SHOW lock_timeout`) }
	dropTimesOut := func(c *pgx.Conn, after time.Duration, shown string) {
		t.Helper()
		t0 := time.Now()
		_, err := c.Exec(ctx, `DROP TRANSFORM t`)
		took := time.Since(t0)
		pe := pgErrOf(t, err)
		if pe.Code != "55P03" || !strings.Contains(pe.Detail, "timeout/LockTimeout") ||
			pe.Message != "DROP TRANSFORM gave up waiting for a lock after lock_timeout "+shown+"; nothing it did was kept" ||
			pe.Hint == "" || pe.Position != 1 {
			t.Fatalf("drop under a held lock: %s %q detail %q hint %q position %d", pe.Code, pe.Message, pe.Detail, pe.Hint, pe.Position)
		}
		if took < after {
			t.Fatalf("gave up after %v, before the %v timeout", took, after)
		}
	}
	exists := func() {
		t.Helper()
		if n := qString(t, c, `SELECT count(*)::text FROM trellis.status WHERE target = 't'`); n != "1" {
			t.Fatalf("t has %s status rows after a failed DROP", n)
		}
	}

	// Autocommit, the session without a lock_timeout: the proxy's applies.
	dropTimesOut(c, 400*time.Millisecond, "400ms")
	exists()
	if got := show(c); got != "0" {
		t.Fatalf("session lock_timeout after the failed DROP: %s", got)
	}

	// The session's shorter value wins, and stays the session's.
	short := s.client(t, "")
	mustExec(t, short, `SET lock_timeout = '150ms'`)
	dropTimesOut(short, 150*time.Millisecond, "150ms")
	exists()
	if got := show(short); got != "150ms" {
		t.Fatalf("session lock_timeout after the failed DROP: %s", got)
	}

	// A longer session value is lowered for the statement only: after a
	// success the next statement of the same string, and the session, see
	// their own value again.
	long := s.client(t, "")
	mustExec(t, long, `SET lock_timeout = '5s'`)
	res, err := long.PgConn().Exec(ctx, `PAUSE TRANSFORM u; SHOW lock_timeout`).ReadAll()
	if err != nil || len(res) != 2 || string(res[1].Rows[0][0]) != "5s" {
		t.Fatalf("mixed string: %v %v", res, err)
	}
	if got := show(long); got != "5s" {
		t.Fatalf("session lock_timeout after PAUSE: %s", got)
	}

	// In a block: the client's SET LOCAL survives a successful statement;
	// a timed-out one aborts the block, and ROLLBACK leaves the session's.
	tx, err := long.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var inBlock string
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '10s'`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `RESUME TRANSFORM u`); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, `SHOW lock_timeout`).Scan(&inBlock); err != nil || inBlock != "10s" {
		t.Fatalf("lock_timeout in the block after RESUME: %s %v", inBlock, err)
	}
	if _, err := tx.Exec(ctx, `DROP TRANSFORM t`); pgErrOf(t, err).Code != "55P03" {
		t.Fatalf("drop in a block: %v", err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1`); pgErrOf(t, err).Code != "25P02" {
		t.Fatalf("after the lock timeout the block must be aborted: %v", err)
	}
	tx.Rollback(ctx)
	exists()
	if got := show(long); got != "5s" {
		t.Fatalf("session lock_timeout after the rolled-back block: %s", got)
	}

	// trellis.apply is bounded the same way.
	_, err = c.Exec(ctx, `SELECT trellis.apply('DROP TRANSFORM t')`)
	if pe := pgErrOf(t, err); pe.Code != "55P03" || !strings.Contains(pe.Detail, "timeout/LockTimeout") {
		t.Fatalf("trellis.apply under a held lock: %s %q %q", pe.Code, pe.Message, pe.Detail)
	}
	exists()

	// Once the lock is gone the statement goes through.
	holder.Rollback(ctx)
	mustExec(t, c, `DROP TRANSFORM t`)
	if n := qString(t, c, `SELECT count(*)::text FROM trellis.status WHERE target = 't'`); n != "0" {
		t.Fatalf("t still has %s status rows after DROP", n)
	}
	if got := show(c); got != "0" {
		t.Fatalf("session lock_timeout after DROP: %s", got)
	}
}
