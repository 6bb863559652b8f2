package wire

import (
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// TestSASLPlusStripped: the client never sees SCRAM-SHA-256-PLUS (D3), and
// the SASL exchange is relayed both ways.
func TestSASLPlusStripped(t *testing.T) {
	got := make(chan string, 2)
	up := newFakeUpstream(t, func(be *pgproto3.Backend) bool {
		be.Send(&pgproto3.AuthenticationSASL{AuthMechanisms: []string{"SCRAM-SHA-256-PLUS", "SCRAM-SHA-256"}})
		be.Flush()
		be.SetAuthType(pgproto3.AuthTypeSASL)
		m, err := be.Receive()
		if err != nil {
			return false
		}
		init, ok := m.(*pgproto3.SASLInitialResponse)
		if !ok {
			return false
		}
		got <- init.AuthMechanism + ":" + string(init.Data)
		be.Send(&pgproto3.AuthenticationSASLContinue{Data: []byte("server-first")})
		be.Flush()
		be.SetAuthType(pgproto3.AuthTypeSASLContinue)
		m, err = be.Receive()
		if err != nil {
			return false
		}
		got <- string(m.(*pgproto3.SASLResponse).Data)
		be.Send(&pgproto3.AuthenticationSASLFinal{Data: []byte("server-final")})
		be.Send(&pgproto3.AuthenticationOk{})
		return true
	})
	srv := testServer(t, up, nil)
	addr := serveLoopback(t, srv)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fe := pgproto3.NewFrontend(c, c)
	fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30, Parameters: map[string]string{"user": "u"}})
	fe.Flush()
	m, err := fe.Receive()
	if err != nil {
		t.Fatal(err)
	}
	sasl, ok := m.(*pgproto3.AuthenticationSASL)
	if !ok || len(sasl.AuthMechanisms) != 1 || sasl.AuthMechanisms[0] != "SCRAM-SHA-256" {
		t.Fatalf("client saw %#v", m)
	}
	fe.Send(&pgproto3.SASLInitialResponse{AuthMechanism: "SCRAM-SHA-256", Data: []byte("n,,client-first")})
	fe.Flush()
	if m, _ := fe.Receive(); m == nil {
		t.Fatal("no SASLContinue")
	}
	if s := <-got; s != "SCRAM-SHA-256:n,,client-first" {
		t.Fatalf("upstream got %q", s)
	}
	fe.Send(&pgproto3.SASLResponse{Data: []byte("client-final")})
	fe.Flush()
	var key *pgproto3.BackendKeyData
	for {
		m, err := fe.Receive()
		if err != nil {
			t.Fatal(err)
		}
		if k, ok := m.(*pgproto3.BackendKeyData); ok {
			key = &pgproto3.BackendKeyData{ProcessID: k.ProcessID, SecretKey: append([]byte(nil), k.SecretKey...)}
		}
		if _, ok := m.(*pgproto3.ReadyForQuery); ok {
			break
		}
	}
	if s := <-got; s != "client-final" {
		t.Fatalf("upstream got %q", s)
	}
	// The pid is the upstream's real one (D4); only the secret is minted.
	if key == nil || key.ProcessID != 4242 || string(key.SecretKey) == "\x01\x02\x03\x04" || len(key.SecretKey) != 4 || binary.BigEndian.Uint32(key.SecretKey)>>20 == 0 {
		t.Fatalf("client key %+v leaks the upstream secret, hides the real pid or lacks instance bits", key)
	}
}
