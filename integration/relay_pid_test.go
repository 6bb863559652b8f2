package integration

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/trellis-proxy/trellis-proxy/internal/proxy"
)

// TestRelayRealPID: the client's BackendKeyData carries its backend's real
// pid (D4), so what applications do with it works as it does directly.
func TestRelayRealPID(t *testing.T) {
	h := start(t, nil)
	conn := h.connect(t)
	reported := conn.PgConn().PID()
	var pid uint32
	if err := conn.QueryRow(t.Context(), "select pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if pid != reported {
		t.Fatalf("reported pid %d, backend pid %d", reported, pid)
	}

	t.Run("pg_stat_activity", func(t *testing.T) {
		var app string
		err := direct(t).QueryRow(t.Context(), "select application_name from pg_stat_activity where pid = $1", int64(reported)).Scan(&app)
		if err != nil {
			t.Fatalf("pg_stat_activity has no row for the reported pid %d: %v", reported, err)
		}
	})

	t.Run("self notify", func(t *testing.T) {
		mustExec(t, conn, "listen relay_chan")
		mustExec(t, conn, "notify relay_chan, 'me'")
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n.PID != reported {
			t.Fatalf("notification sender pid %d, listener's reported pid %d", n.PID, reported)
		}
	})

	t.Run("terminate own backend", func(t *testing.T) {
		victim := h.connect(t)
		_, err := victim.Exec(t.Context(), "select pg_terminate_backend($1)", int64(victim.PgConn().PID()))
		if sqlstate(err) != "57P01" {
			t.Fatalf("want 57P01 for terminating the reported pid, got %v", err)
		}
		eventually(t, 10*time.Second, "the victim's connection closed", func() bool {
			_, err := victim.Exec(t.Context(), "select 1")
			return err != nil
		})
	})
}

// TestRelayCancelVerifiesPID: a CancelRequest whose secret is right but whose
// pid is not the session's cancels nothing; the right pair still cancels.
func TestRelayCancelVerifiesPID(t *testing.T) {
	h := start(t, nil)
	conn := h.connect(t)
	done := make(chan error, 1)
	go func() {
		_, err := conn.Exec(context.Background(), "select pg_sleep(1.5)")
		done <- err
	}()
	eventually(t, 10*time.Second, "pg_sleep running", func() bool {
		var n int
		direct(t).QueryRow(t.Context(), "select count(*) from pg_stat_activity where query = 'select pg_sleep(1.5)' and state = 'active'").Scan(&n)
		return n > 0
	})
	relaySendCancel(t, h.Addr, conn.PgConn().PID()+1, conn.PgConn().SecretKey())
	if err := <-done; err != nil {
		t.Fatalf("a cancel with a wrong pid cancelled the query: %v", err)
	}

	go func() {
		_, err := conn.Exec(context.Background(), "select pg_sleep(30)")
		done <- err
	}()
	eventually(t, 10*time.Second, "pg_sleep(30) running", func() bool {
		var n int
		direct(t).QueryRow(t.Context(), "select count(*) from pg_stat_activity where query = 'select pg_sleep(30)' and state = 'active'").Scan(&n)
		return n > 0
	})
	relaySendCancel(t, h.Addr, conn.PgConn().PID(), conn.PgConn().SecretKey())
	select {
	case err := <-done:
		if sqlstate(err) != "57014" {
			t.Fatalf("want 57014, got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancel with the right key did not stop pg_sleep")
	}
	var one int
	if err := conn.QueryRow(t.Context(), "select 1", pgx.QueryExecModeSimpleProtocol).Scan(&one); err != nil {
		t.Fatal(err)
	}
}

// relaySendCancel sends a raw CancelRequest and waits for the proxy to close.
func relaySendCancel(t *testing.T, addr string, pid uint32, secret []byte) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := binary.BigEndian.AppendUint32(nil, uint32(12+len(secret)))
	msg = binary.BigEndian.AppendUint32(msg, 80877102)
	msg = binary.BigEndian.AppendUint32(msg, pid)
	msg = append(msg, secret...)
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(15 * time.Second))
	io.Copy(io.Discard, c)
}

// TestRelayParseNotHeldBack: a Parse sent alone, followed 500 ms later by
// Describe and Sync under a 100 ms statement_timeout, gets the same reply
// through the proxy as directly (pgx's
// TestPrepareHandlesTimeoutBetweenParseAndDescribe): the relay forwards the
// Parse at once instead of holding it for the rest of the batch (D22).
func TestRelayParseNotHeldBack(t *testing.T) {
	h := start(t, func(c *proxy.Config, o *proxy.Options) { o.RelayOnly = false })
	run := func(conn *pgx.Conn) string {
		mustExec(t, conn, "set statement_timeout = '100ms'")
		fe := conn.PgConn().Frontend()
		fe.Send(&pgproto3.Parse{Name: "relay_s", Query: "select $1::varchar"})
		if err := fe.Flush(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond) // the client's own pause, part of the scenario
		fe.Send(&pgproto3.Describe{ObjectType: 'S', Name: "relay_s"})
		fe.Send(&pgproto3.Sync{})
		if err := fe.Flush(); err != nil {
			t.Fatal(err)
		}
		var got []string
		for {
			m, err := fe.Receive()
			if err != nil {
				t.Fatal(err)
			}
			switch m := m.(type) {
			case *pgproto3.ErrorResponse:
				got = append(got, "E:"+m.Code)
			case *pgproto3.ReadyForQuery:
				return strings.Join(append(got, "Z"), " ")
			default:
				got = append(got, fmt.Sprintf("%T", m))
			}
		}
	}
	want := run(direct(t))
	if got := run(h.connect(t)); got != want {
		t.Fatalf("through the proxy %q, directly %q", got, want)
	}
	if !strings.Contains(want, "57014") {
		t.Logf("directly: %s (the timeout did not fire; the comparison still holds)", want)
	}
}

// TestRelayReplicationFalseKeepsRouting: `replication=false` opens an
// ordinary session, so its statements are still routed; only a value that
// opens a walsender in Postgres turns routing off.
func TestRelayReplicationFalseKeepsRouting(t *testing.T) {
	h := interceptHarness(t)
	conn := connectURL(t, h.url("postgres", "", "postgres", "replication=false"))
	var s string
	if err := conn.QueryRow(t.Context(), "SELECT 'intercepted'", pgx.QueryExecModeSimpleProtocol).Scan(&s); err != nil || s != "answered by the proxy" {
		t.Fatalf("replication=false: %q %v, want the proxy's answer", s, err)
	}
}
