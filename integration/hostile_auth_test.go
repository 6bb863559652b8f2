package integration

// Issue 14 item 10: sessions that sent their startup packet and then stall
// authentication each hold a proxy slot and an upstream backend for the
// whole authentication timeout. At most --max-authenticating of them exist
// at once; the next is refused with 53300, and sessions that authenticated
// are not counted.

import (
	"bufio"
	"context"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/trellis-proxy/trellis-proxy/internal/pgcluster"
	"github.com/trellis-proxy/trellis-proxy/internal/proxy"
)

func TestAuthStallsAreCapped(t *testing.T) {
	c, err := pgcluster.Start(context.Background(), pgcluster.Options{Port: 0, Password: "auth-cap-secret", Fast: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	h := start(t, func(cfg *proxy.Config, _ *proxy.Options) {
		cfg.Upstream = c.URL("postgres")
		cfg.MaxAuthenticating = 2
		cfg.AuthTimeout = time.Minute
	})
	// An authenticated session is not counted.
	done := connectURL(t, h.url("postgres", "auth-cap-secret", "postgres", ""))
	mustExec(t, done, "SELECT 1")
	// stall sends a startup packet, reads the password request and never
	// answers it.
	stall := func() (net.Conn, pgproto3.BackendMessage) {
		t.Helper()
		conn, err := net.Dial("tcp", h.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		fe := pgproto3.NewFrontend(bufio.NewReader(conn), conn)
		fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber,
			Parameters: map[string]string{"user": "postgres", "database": "postgres"}})
		if err := fe.Flush(); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		msg, err := fe.Receive()
		if err != nil {
			t.Fatal(err)
		}
		return conn, msg
	}
	var stalled []net.Conn
	for range 2 {
		conn, msg := stall()
		if _, ok := msg.(*pgproto3.AuthenticationSASL); !ok {
			t.Fatalf("want a password request, got %T", msg)
		}
		stalled = append(stalled, conn)
	}
	_, msg := stall()
	e, ok := msg.(*pgproto3.ErrorResponse)
	if !ok || e.Code != "53300" || e.Severity != "FATAL" {
		t.Fatalf("third stalled session: want FATAL 53300, got %#v", msg)
	}
	mustExec(t, done, "SELECT 1")
	for _, conn := range stalled {
		conn.Close()
	}
	eventually(t, 10*time.Second, "a new session to authenticate once the stalled ones left", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, h.url("postgres", "auth-cap-secret", "postgres", ""))
		if err != nil {
			return false
		}
		conn.Close(context.Background())
		return true
	})
}
