package wire

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

func startupBytes() []byte {
	b, _ := (&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30,
		Parameters: map[string]string{"user": "u", "database": "d"}}).Encode(nil)
	return b
}

// FuzzFrameReader: no panic, never a body above the limit, and an oversized
// length is a 08P01 error rather than an allocation.
func FuzzFrameReader(f *testing.F) {
	f.Add([]byte("Q\x00\x00\x00\x09select"))
	f.Add([]byte("Q\x7f\xff\xff\xffxx"))
	f.Add([]byte("D\x00\x00\x00\x03"))
	f.Add([]byte("Z\x00\x00\x00\x05IS\x00\x00\x00\x04"))
	const max = 1 << 16
	f.Fuzz(func(t *testing.T, data []byte) {
		br := newConnReader(bytes.NewReader(data))
		var buf []byte
		for {
			_, n, err := peekHeader(br, max)
			if err != nil {
				if e, ok := pgerr.As(err); ok && e.Code != pgerr.ProtocolViolation {
					t.Fatalf("code %s", e.Code)
				}
				return
			}
			if n < 0 || n > max {
				t.Fatalf("body length %d", n)
			}
			if buf, err = readBody(br, buf, n); err != nil {
				return
			}
		}
	})
}

// FuzzStartupPacket: the startup reader and parameter parser never panic
// or allocate beyond the 10,000-byte cap.
func FuzzStartupPacket(f *testing.F) {
	f.Add(startupBytes())
	f.Add([]byte{0, 0, 0, 8, 4, 210, 22, 47})
	f.Add([]byte{0, 0, 0, 16, 4, 210, 22, 46, 0, 0, 0, 1, 0, 0, 0, 2})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		pkt, err := readStartupPacket(bytes.NewReader(data), nil)
		if err != nil {
			return
		}
		if len(pkt) > maxStartupPacket {
			t.Fatalf("packet of %d bytes", len(pkt))
		}
		if binary.BigEndian.Uint32(pkt)>>16 == 3 {
			parseStartupParams(pkt[4:])
		}
	})
}

// FuzzSession feeds arbitrary client bytes after a valid startup to a real
// session in front of a fake upstream: no panic, and the session ends.
func FuzzSession(f *testing.F) {
	q, _ := (&pgproto3.Query{String: "select 1"}).Encode(nil)
	f.Add(q)
	f.Add([]byte("S\x00\x00\x00\x04H\x00\x00\x00\x04"))
	f.Add([]byte("P\x00\x00\x00\x10\x00select 1\x00\x00\x00S\x00\x00\x00\x04"))
	f.Add([]byte("d\x00\x00\x00\x06abc\x00\x00\x00\x04"))
	f.Add([]byte("Q\x7f\xff\xff\xff"))
	up := newFakeUpstream(f, nil)
	srvPlain := testServer(f, up, func(c *Config) { c.MaxMessageSize = 1 << 16 })
	srvIntercept := testServer(f, up, func(c *Config) { c.Interceptor = fuzzInterceptor{}; c.MaxMessageSize = 1 << 16 })
	addrs := []string{serveLoopback(f, srvPlain), serveLoopback(f, srvIntercept)}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, addr := range addrs {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			c.Write(startupBytes())
			c.Write(data)
			c.(*net.TCPConn).CloseWrite()
			// The session must end by itself once the client is done.
			if _, err := io.Copy(io.Discard, c); err != nil {
				t.Fatalf("session did not end: %v", err)
			}
			c.Close()
		}
	})
}

func serveLoopback(t testing.TB, s *Server) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	return ln.Addr().String()
}
