package wire

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// serveErr runs Serve on a fresh loopback listener and returns its address
// and Serve's result.
func serveErr(t *testing.T, s *Server) (string, <-chan error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	return ln.Addr().String(), done
}

// readyClient connects and reads up to the first ReadyForQuery.
func readyClient(t *testing.T, addr string) (net.Conn, *pgproto3.Frontend) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write(startupBytes())
	fe := pgproto3.NewFrontend(c, c)
	for {
		m, err := fe.Receive()
		if err != nil {
			t.Fatalf("startup: %v", err)
		}
		if _, ok := m.(*pgproto3.ReadyForQuery); ok {
			return c, fe
		}
	}
}

// Serve and Shutdown return what net/http's do: ErrServerClosed from Serve
// once the server is shut down, nil from a Shutdown whose sessions all
// ended, and ctx.Err() from one whose context ended first.
func TestServeShutdownErrors(t *testing.T) {
	t.Run("drained", func(t *testing.T) {
		s := testServer(t, newFakeUpstream(t, nil), nil)
		addr, served := serveErr(t, s)
		c, _ := readyClient(t, addr)
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatalf("Shutdown of an idle session: %v, want nil", err)
		}
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Fatalf("Serve after Shutdown: %v, want ErrServerClosed", err)
		}
		// The idle session got its FATAL and was closed.
		fe := pgproto3.NewFrontend(c, c)
		m, err := fe.Receive()
		if er, ok := m.(*pgproto3.ErrorResponse); !ok || er.Code != "57P01" {
			t.Fatalf("idle session got %#v (%v), want 57P01", m, err)
		}
		if _, err := fe.Receive(); !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("idle session not closed: %v", err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Serve(ln); !errors.Is(err, ErrServerClosed) {
			t.Fatalf("Serve on a shut-down server: %v, want ErrServerClosed", err)
		}
	})
	t.Run("ctx ends first", func(t *testing.T) {
		up := newFakeUpstream(t, nil)
		up.hung = make(chan struct{}, 1)
		s := testServer(t, up, nil)
		addr, served := serveErr(t, s)
		c, fe := readyClient(t, addr)
		fe.Send(&pgproto3.Query{String: "hang"})
		if err := fe.Flush(); err != nil {
			t.Fatal(err)
		}
		<-up.hung // upstream holds the query: the session is busy
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := s.Shutdown(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Shutdown past its context: %v, want context.Canceled", err)
		}
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Fatalf("Serve after Shutdown: %v, want ErrServerClosed", err)
		}
		// Shutdown returned only after the busy session was closed.
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Fatalf("busy session not closed: %v", err)
		}
	})
}
