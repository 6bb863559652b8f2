package wire

import (
	"crypto/tls"
	"net"
)

// tls13Server wraps a client connection for TLS termination.
func tls13Server(conn net.Conn, cfg *tls.Config) *tls.Conn { return tls.Server(conn, cfg) }
