package wire

import (
	"crypto/tls"
	"net"
)

// tls13Server wraps a client connection for TLS termination.
func tls13Server(conn net.Conn, cfg *tls.Config) *tls.Conn { return tls.Server(conn, cfg) }

// prefixConn replays bytes already read (the first byte of a direct TLS
// ClientHello) before reading from the connection.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
