package wire

import (
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// fakeUpstream is a scripted Postgres: it trusts every startup (or runs
// auth), then answers each Query with CommandComplete and ReadyForQuery and
// each Sync with ReadyForQuery.
type fakeUpstream struct {
	ln   net.Listener
	auth func(be *pgproto3.Backend) bool // nil: AuthenticationOk
	hung chan struct{}                   // signalled when a "hang" Query arrives
	// cancels receives the CancelRequests that reach the upstream.
	cancels chan *pgproto3.CancelRequest
	wg      sync.WaitGroup
}

func newFakeUpstream(t testing.TB, auth func(be *pgproto3.Backend) bool) *fakeUpstream {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeUpstream{ln: ln, auth: auth}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				f.serve(c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); f.wg.Wait() })
	return f
}

func (f *fakeUpstream) serve(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	be := pgproto3.NewBackend(c, c)
	be.SetMaxBodyLen(1 << 20)
	msg, err := be.ReceiveStartupMessage()
	if err != nil {
		return
	}
	if cr, ok := msg.(*pgproto3.CancelRequest); ok {
		if f.cancels != nil {
			f.cancels <- cr
		}
		return
	}
	if f.auth != nil {
		if !f.auth(be) {
			return
		}
	} else {
		be.Send(&pgproto3.AuthenticationOk{})
	}
	be.Send(&pgproto3.ParameterStatus{Name: "server_version", Value: "15.0"})
	be.Send(&pgproto3.BackendKeyData{ProcessID: 4242, SecretKey: []byte{1, 2, 3, 4}})
	be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	if be.Flush() != nil {
		return
	}
	for {
		m, err := be.Receive()
		if err != nil {
			return
		}
		switch q := m.(type) {
		case *pgproto3.Query:
			if q.String == "hang" {
				// Never answered: the session stays busy until closed.
				if f.hung != nil {
					f.hung <- struct{}{}
				}
				continue
			}
			be.Send(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 0")})
			be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
		case *pgproto3.Sync:
			be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
		case *pgproto3.Terminate:
			return
		}
		if be.Flush() != nil {
			return
		}
	}
}

func testServer(t testing.TB, up *fakeUpstream, mod func(*Config)) *Server {
	cfg := Config{Upstream: UpstreamConfig{Network: "tcp", Address: up.ln.Addr().String(), SSLMode: "disable"},
		Logger: slog.New(slog.DiscardHandler), AuthTimeout: 2 * time.Second}
	if mod != nil {
		mod(&cfg)
	}
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); s.Wait() })
	return s
}
