package wire

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// cancelMetrics records CancelRouted outcomes.
type cancelMetrics struct {
	nopMetrics
	outcomes chan string
}

func (m cancelMetrics) CancelRouted(result string) { m.outcomes <- result }

// sendCancelTo sends one CancelRequest (or the fleet's forwarded form) to
// addr and waits for the proxy to close the connection.
func sendCancelTo(t *testing.T, addr string, code, pid uint32, secret []byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(cancelPacket(code, pid, secret)); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	c.Read(b[:])
}

// A client's cancel connection that reaches another proxy of the fleet is
// forwarded to the proxy its secret names, which cancels the query with
// the upstream's own key; a forwarded cancel is never forwarded again.
func TestCancelForwardedAcrossFleet(t *testing.T) {
	up := newFakeUpstream(t, nil)
	up.cancels = make(chan *pgproto3.CancelRequest, 4)
	ma := cancelMetrics{outcomes: make(chan string, 4)}
	mb := cancelMetrics{outcomes: make(chan string, 4)}
	a := testServer(t, up, func(c *Config) { c.InstanceID = 1; c.Metrics = ma })
	addrA := serveLoopback(t, a)
	b := testServer(t, up, func(c *Config) {
		c.InstanceID = 2
		c.Metrics = mb
		c.CancelPeers = map[uint16]string{1: addrA}
	})
	addrB := serveLoopback(t, b)

	// A session on A; its key as the client sees it.
	c, err := net.Dial("tcp", addrA)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write(startupBytes())
	fe := pgproto3.NewFrontend(c, c)
	var key pgproto3.BackendKeyData
	for {
		m, err := fe.Receive()
		if err != nil {
			t.Fatalf("startup: %v", err)
		}
		if k, ok := m.(*pgproto3.BackendKeyData); ok {
			key = pgproto3.BackendKeyData{ProcessID: k.ProcessID, SecretKey: append([]byte(nil), k.SecretKey...)}
		}
		if _, ok := m.(*pgproto3.ReadyForQuery); ok {
			break
		}
	}
	if inst := binary.BigEndian.Uint32(key.SecretKey) >> 20 & 0x7ff; inst != 1 {
		t.Fatalf("secret names instance %d, want 1", inst)
	}

	// The cancel reaches B: forwarded to A, which cancels with the
	// upstream's real key.
	sendCancelTo(t, addrB, protoCancelRequest, key.ProcessID, key.SecretKey)
	if got := <-mb.outcomes; got != "fleet" {
		t.Fatalf("B routed the cancel as %q, want fleet", got)
	}
	if got := <-ma.outcomes; got != "upstream" {
		t.Fatalf("A routed the forwarded cancel as %q, want upstream", got)
	}
	cr := <-up.cancels
	if cr.ProcessID != 4242 || !bytes.Equal(cr.SecretKey, []byte{1, 2, 3, 4}) {
		t.Fatalf("upstream got cancel pid %d secret %x, want the upstream's own key", cr.ProcessID, cr.SecretKey)
	}

	// A forwarded cancel that reaches a proxy not owning it is dropped
	// there, not forwarded on (two peer maps that disagree cannot loop).
	sendCancelTo(t, addrB, protoForwardedCancel, key.ProcessID, key.SecretKey)
	if got := <-mb.outcomes; got != "unknown" {
		t.Fatalf("B routed a forwarded cancel for A as %q, want unknown", got)
	}
	// A wrong secret for A's instance is forwarded, and refused by A.
	bad := append([]byte(nil), key.SecretKey...)
	bad[3] ^= 1
	sendCancelTo(t, addrB, protoCancelRequest, key.ProcessID, bad)
	if got := <-mb.outcomes; got != "fleet" {
		t.Fatalf("B routed the cancel as %q, want fleet", got)
	}
	if got := <-ma.outcomes; got != "unknown" {
		t.Fatalf("A routed a wrong secret as %q, want unknown", got)
	}
	select {
	case cr := <-up.cancels:
		t.Fatalf("a refused cancel reached upstream: %+v", cr)
	default:
	}
}
