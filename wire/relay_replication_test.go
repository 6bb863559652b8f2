package wire

import (
	"io"
	"net"
	"testing"
	"time"
)

func TestRelayReplicationOn(t *testing.T) {
	for v, want := range map[string]bool{
		"": false, "false": false, "off": false, "0": false, "no": false, "f": false, "of": false,
		"true": true, "TRUE": true, "t": true, "on": true, "yes": true, "y": true, "1": true, "database": true, "Database": true,
	} {
		if got := replicationOn(v); got != want {
			t.Errorf("replicationOn(%q) = %v, want %v", v, got, want)
		}
	}
}

// TestRelayStartupTimeout: a socket that never sends its startup packet is
// closed after StartupTimeout, well before AuthTimeout (issue 14: idle
// sockets must not linger for the whole authentication timeout).
func TestRelayStartupTimeout(t *testing.T) {
	up := newFakeUpstream(t, nil)
	s := testServer(t, up, func(c *Config) { c.StartupTimeout = 200 * time.Millisecond; c.AuthTimeout = 30 * time.Second })
	c, err := net.Dial("tcp", serveLoopback(t, s))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	began := time.Now()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Fatalf("idle socket not closed by the proxy: %v", err)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Fatalf("idle socket closed after %v, want about StartupTimeout", d)
	}
}
