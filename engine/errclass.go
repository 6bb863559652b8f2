package engine

import (
	"errors"
	"io"
	"net"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// transient reports errors after which a page or chunk is retried without
// charging anyone (§12.12): the server's retry classes and a lost
// connection. A Go-side error (a bug, a bad catalog row) is not transient:
// it is charged and surfaces instead of being retried forever.
//
// (Restored on branch selfcheck: bc5052e removed it but not its callers.)
func transient(err error) bool {
	if err == nil {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case pgerr.SerializationFailure, pgerr.DeadlockDetected, pgerr.LockNotAvailable, pgerr.QueryCanceled,
			pgerr.AdminShutdown, "57P02", "57P03", "08000", "08003", "08006", "25P03":
			return true
		}
		return false
	}
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
		return true
	}
	var ne net.Error
	var ce *pgconn.ConnectError
	return errors.As(err, &ne) || errors.As(err, &ce) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || isClosedConn(err)
}

// isClosedConn matches pgx's "conn closed" / "conn busy" errors, which carry
// no type of their own.
func isClosedConn(err error) bool {
	s := err.Error()
	return s == "conn closed" || s == "conn busy" || s == "closed pool"
}
