package base

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// Class says what a worker does after a page, chunk or staging step
// failed (§12.12).
type Class int

const (
	// Retry: the database or the connection said "not now" (a lock, a
	// serialization failure, a cancel, a restart, a lost connection): the
	// step is rolled back and retried without charging anyone.
	Retry Class = iota
	// Data: PostgreSQL refused the work itself (a data error, a missing
	// object, a permission): charged to the key, task or bucket, which is
	// how failures reach quarantine, fuses and drain_failure.
	Data
	// Internal: an error of ours, not of PostgreSQL's (a decode or scan
	// error, a bad catalog row): charged like Data, so it surfaces in
	// status and logs instead of being retried forever at debug level.
	Internal
)

func (c Class) String() string {
	return [...]string{"retry", "data", "internal"}[c]
}

// retryCodes are the SQLSTATEs of Retry.
var retryCodes = map[string]bool{
	pgerr.SerializationFailure: true, pgerr.DeadlockDetected: true, pgerr.LockNotAvailable: true,
	pgerr.QueryCanceled: true, pgerr.AdminShutdown: true,
	"57P02": true,                               // crash_shutdown
	"57P03": true,                               // cannot_connect_now
	"08000": true, "08003": true, "08006": true, // connection exceptions
	"25P03": true, // idle_in_transaction_session_timeout
	"53300": true, // too_many_connections
}

// Classify sorts a worker step's error.
func Classify(err error) Class {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if retryCodes[pe.Code] {
			return Retry
		}
		return Data
	}
	if lostConnection(err) {
		return Retry
	}
	return Internal
}

// lostConnection reports the errors pgx returns when the connection (or the
// pool, at shutdown) went away rather than the server answering.
func lostConnection(err error) bool {
	var ne net.Error
	var ce *pgconn.ConnectError
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNREFUSED),
		errors.As(err, &ne), errors.As(err, &ce),
		pgconn.SafeToRetry(err), pgconn.Timeout(err):
		return true
	}
	// pgconn reports a use of a connection it already closed, and the pool
	// an acquire after Close (shutdown), with errors it does not export.
	msg := err.Error()
	return strings.Contains(msg, "conn closed") || strings.Contains(msg, "closed pool")
}

// Transient reports errors after which a step is retried without charging
// anyone (Retry).
func Transient(err error) bool {
	return err != nil && Classify(err) == Retry
}

// ErrAttrs are the log attributes of a failure at info level and above:
// PostgreSQL's message and detail can quote row values (an invalid input, a
// duplicate key), so only the SQLSTATE is logged for errors of the
// database; the message goes to debug (errDebugAttrs in the engine). An error of ours
// carries no row data and is logged whole.
func ErrAttrs(err error) []any {
	if code := Code(err); code != "" {
		return []any{"sqlstate", code, "class", Classify(err).String()}
	}
	return []any{"err", err, "class", Classify(err).String()}
}

// Code is err's SQLSTATE, or "" for an error not from PostgreSQL.
func Code(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// Level is the log level of a step's failure: an Internal error is a bug of
// ours and is logged at Error; the database refusing work is a Warn (it is
// charged and shows in status).
func Level(err error) slog.Level {
	if Classify(err) == Internal {
		return slog.LevelError
	}
	return slog.LevelWarn
}
