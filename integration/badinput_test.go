package integration

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// readError reads one ErrorResponse and expects the connection to close.
func readFatal(t *testing.T, conn net.Conn) string {
	t.Helper()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(conn)
	if err != nil && len(b) == 0 {
		t.Fatalf("read: %v", err)
	}
	if len(b) < 5 || b[0] != 'E' {
		t.Fatalf("want an ErrorResponse, got %q", b)
	}
	var e pgproto3.ErrorResponse
	if err := e.Decode(b[5:]); err != nil {
		t.Fatal(err)
	}
	if e.Severity != "FATAL" {
		t.Fatalf("severity %s", e.Severity)
	}
	return e.Code
}

func TestMalformedStartup(t *testing.T) {
	h := start(t, nil)
	pkt := func(version uint32, body string) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(8+len(body)))
		b = binary.BigEndian.AppendUint32(b, version)
		return append(b, body...)
	}
	for _, c := range []struct {
		name string
		send []byte
		code string
	}{
		{"length too small", []byte{0, 0, 0, 4, 0, 3, 0, 0}, "08P01"},
		{"length too large", []byte{0, 1, 0, 0, 0, 3, 0, 0}, "08P01"},
		{"protocol 2.0", pkt(2<<16, "user\x00x\x00\x00"), "08P01"},
		{"protocol 4.0", pkt(4<<16, "user\x00x\x00\x00"), "08P01"},
		{"no terminator", pkt(3<<16, "user\x00x\x00"), "08P01"},
		{"key without value", pkt(3<<16, "user\x00"), "08P01"},
		{"no user", pkt(3<<16, "database\x00x\x00\x00"), "28000"},
		{"two SSLRequests", append(pkt(80877103, ""), pkt(80877103, "")...), "08P01"},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", h.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.Write(c.send)
			if c.name == "two SSLRequests" {
				var n [1]byte
				io.ReadFull(conn, n[:])
			}
			if code := readFatal(t, conn); code != c.code {
				t.Fatalf("code %s, want %s", code, c.code)
			}
		})
	}
	// A cancel request with an unknown key is closed silently.
	conn, _ := net.Dial("tcp", h.Addr)
	conn.Write([]byte{0, 0, 0, 16, 4, 210, 22, 46, 0, 0, 0, 1, 0, 0, 0, 2})
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if b, _ := io.ReadAll(conn); len(b) != 0 {
		t.Fatalf("cancel got a reply %q", b)
	}
	conn.Close()
}

func TestOversizedFrame(t *testing.T) {
	h := start(t, func(c *proxyConfig, _ *proxyOptions) { c.MaxMessageSize = 1 << 20 })
	r := dialRaw(t, h.Addr)
	r.startup()
	r.send([]byte{'Q', 0x7f, 0xff, 0xff, 0xff, 's', 'e'})
	if code := readFatal(t, r.conn); code != "08P01" {
		t.Fatalf("code %s", code)
	}
}

// TestHalfMessageHangs: a client that sends part of its startup packet and
// stops is cut off by the authentication timeout.
func TestHalfMessageHangs(t *testing.T) {
	h := start(t, func(c *proxyConfig, _ *proxyOptions) { c.AuthTimeout = 500 * time.Millisecond })
	for _, partial := range [][]byte{
		{0, 0},                         // half a length
		{0, 0, 0, 40, 0, 3, 0, 0, 'u'}, // half a startup packet
	} {
		conn, err := net.Dial("tcp", h.Addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.Write(partial)
		began := time.Now()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		io.ReadAll(conn)
		if d := time.Since(began); d > 5*time.Second {
			t.Fatalf("connection held for %v", d)
		}
		conn.Close()
	}
	// A client hanging in the middle of authentication too: the scram
	// exchange never gets its answer.
	r := dialRaw(t, h.Addr)
	msg := pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30, Parameters: map[string]string{"user": "postgres"}}
	b, _ := msg.Encode(nil)
	r.send(b[:len(b)-3])
	began := time.Now()
	io.ReadAll(r.conn)
	if d := time.Since(began); d > 5*time.Second {
		t.Fatalf("connection held for %v", d)
	}
	if n := h.info.Server.ActiveSessions(); n != 0 {
		t.Fatalf("%d active sessions", n)
	}
}

// TestConnectAndDrop: 10,000 connections that drop at every stage leave the
// proxy serving and its goroutines back at baseline.
func TestConnectAndDrop(t *testing.T) {
	h := start(t, nil)
	conn := h.connect(t)
	var one int
	conn.QueryRow(t.Context(), "select 1").Scan(&one)
	base := goroutines()
	startup, _ := (&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30,
		Parameters: map[string]string{"user": "postgres", "database": "postgres"}}).Encode(nil)
	query, _ := (&pgproto3.Query{String: "select 1"}).Encode(nil)
	var wg sync.WaitGroup
	const total, workers = 10000, 8
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			for i := w; i < total; i += workers {
				c, err := net.Dial("tcp", h.Addr)
				if err != nil {
					t.Error(err)
					return
				}
				switch i % 50 {
				case 0: // full startup, then a query, then vanish
					c.Write(startup)
					c.Write(query)
					buf := make([]byte, 1)
					c.SetReadDeadline(time.Now().Add(10 * time.Second))
					c.Read(buf)
				case 1: // startup, then vanish before reading anything
					c.Write(startup)
				case 2, 3, 4: // half a startup packet
					c.Write(startup[:7])
				case 5: // an SSLRequest, then vanish
					c.Write([]byte{0, 0, 0, 8, 4, 210, 22, 47})
				}
				c.Close()
			}
		})
	}
	wg.Wait()
	if err := conn.QueryRow(t.Context(), "select 1").Scan(&one); err != nil {
		t.Fatalf("proxy stopped serving: %v", err)
	}
	fresh := h.connect(t)
	if err := fresh.QueryRow(t.Context(), "select 1").Scan(&one); err != nil {
		t.Fatalf("new session: %v", err)
	}
	fresh.Close(t.Context())
	eventually(t, 30*time.Second, "goroutines back at baseline", func() bool { return goroutines() <= base })
	eventually(t, 10*time.Second, "one active session", func() bool { return h.info.Server.ActiveSessions() == 1 })
}
