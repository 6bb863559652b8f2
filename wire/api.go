package wire

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unique"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// Route is an Interceptor's decision about one statement.
type Route struct {
	// Local means the proxy answers the statement itself through
	// Interceptor.Execute; false passes it upstream untouched.
	Local bool
	// Kind is a short label for metrics and logs (e.g. "transform").
	Kind string
	// Payload is opaque to wire and handed back to Execute (e.g. a parsed
	// statement), so Classify's work is not repeated.
	Payload any
	// Rewrite, for a Parse, sends the statement upstream with this text
	// instead of the client's (Local is then ignored): the prepared
	// statement stays Postgres's, so Describe, Bind formats and the
	// statement cache work as without the proxy. A simple Query goes by
	// Local alone, so a rewriting interceptor answers it in Execute, where
	// it can map error positions back to the client's text.
	Rewrite string
}

// PassThroughRoute is the route of every statement the proxy does not answer.
var PassThroughRoute = Route{}

// Call is one intercepted statement execution.
type Call struct {
	SQL   string
	Route Route
	// Extended is true when the statement arrived as Parse/Bind/Execute. Then
	// RowDescription written to the ResultWriter is dropped (the client gets
	// the description from Describe, see Describer) and values must be in
	// ResultFormats (per column, as in Bind; empty means all text).
	Extended      bool
	ParamOIDs     []uint32
	ParamFormats  []int16
	Params        [][]byte // copies, owned by the callee
	ResultFormats []int16
	MaxRows       uint32 // Execute's row limit, 0 = all; only informative
}

// Interceptor decides which client statements the proxy answers itself and
// executes them. It is consulted for every simple Query message and every
// Parse message of the extended protocol.
//
// Concurrency: one Interceptor serves all sessions, so it must be safe for
// concurrent use; calls for one session are serialized. Buffer lifetimes: the
// sql string may be kept; nothing else handed over is retained by wire.
type Interceptor interface {
	// Classify is pure and cheap (no I/O): it runs on the client→server pump
	// for every statement. sql may be a view of the session's read buffer:
	// Classify must not keep it, or anything sharing its bytes, unless it
	// returns a Local or Rewrite route (wire then classifies a copy again
	// and keeps only that route).
	Classify(s *SessionInfo, sql string) Route
	// Execute runs an intercepted statement at its barrier: every earlier
	// reply has been relayed and nothing is in flight upstream. up is the
	// session's own upstream connection, lent for the duration of the call;
	// w receives the client's reply. wire writes ReadyForQuery afterwards (and
	// ParseComplete/BindComplete/... in the extended protocol).
	//
	// A returned error is sent as one ErrorResponse (a *pgerr.Error keeps its
	// code, detail, hint and position; other errors become XX000 with a
	// reference id), unless it is or wraps an error already relayed by
	// Upstream.Forward. ctx is cancelled by a CancelRequest for the session
	// (cause ErrQueryCanceled) or by a forced shutdown.
	Execute(ctx context.Context, s *SessionInfo, c *Call, up Upstream, w ResultWriter) error
}

// Describer is optionally implemented by an Interceptor to answer Describe
// for an intercepted statement in the extended protocol. Without it the
// statement is described as returning no rows (NoData).
type Describer interface {
	Describe(s *SessionInfo, sql string, r Route) ([]pgproto3.FieldDescription, error)
}

// ParamDescriber is optionally implemented by an Interceptor to give the
// parameter types of an intercepted prepared statement whose Parse named
// none (a driver such as pgx then encodes its arguments from them).
type ParamDescriber interface {
	DescribeParams(s *SessionInfo, sql string, r Route) []uint32
}

// PassThrough is the default Interceptor: it answers nothing itself. A Server
// whose interceptor is PassThrough (or nil) skips decoding client frames.
type PassThrough struct{}

func (PassThrough) Classify(*SessionInfo, string) Route { return PassThroughRoute }
func (PassThrough) Execute(context.Context, *SessionInfo, *Call, Upstream, ResultWriter) error {
	return pgerr.New(pgerr.InternalError, "pass-through interceptor asked to execute")
}

// ResultWriter receives the reply of an intercepted statement. Methods must be
// called only from inside Execute, in protocol order. Slices passed in may be
// reused by the caller after the call returns.
type ResultWriter interface {
	RowDescription(fields []pgproto3.FieldDescription) error
	DataRow(values [][]byte) error
	CommandComplete(tag string) error
	EmptyQueryResponse() error
	// Notice sends a NoticeResponse (severity NOTICE unless set).
	Notice(n *pgerr.Error) error
	// Error sends an ErrorResponse in the middle of a reply, for a
	// multi-statement string whose pieces the interceptor runs itself; it is
	// usually simpler to return the error from Execute.
	Error(e *pgerr.Error) error
}

// Result is a fully read query result on the lent upstream.
type Result struct {
	Fields []pgproto3.FieldDescription
	Rows   [][][]byte // text format values; nil is NULL
	Tag    string
}

// Upstream is the session's server connection while an Execute call holds it.
// Nothing is owed to the client on it when it is lent, and nothing else reads
// or writes it until Execute returns. Not safe for concurrent use.
type Upstream interface {
	// Exec runs one statement with its arguments bound as text parameters
	// (never interpolated), using a reserved prepared statement name so the
	// client's unnamed statement and portal are untouched. Its notices are
	// dropped; a Postgres error is returned as *pgerr.Error (also when it
	// aborts the client's transaction, exactly as it would directly).
	// Arguments: nil, string, []byte, bool, integers, floats, fmt.Stringer.
	Exec(ctx context.Context, sql string, args ...any) (tag string, err error)
	// Query is Exec returning the rows, in text format.
	Query(ctx context.Context, sql string, args ...any) (*Result, error)
	// Forward sends sql as a simple Query and relays every reply frame to the
	// client (byte for byte when w is the ResultWriter given to Execute)
	// except its ReadyForQuery. A Postgres error is relayed and returned as a
	// *ForwardedError; returning it from Execute sends nothing more.
	Forward(ctx context.Context, sql string, w ResultWriter) error
	// TxStatus is the upstream's transaction status from its latest
	// ReadyForQuery: 'I', 'T' or 'E'.
	TxStatus() byte
}

// ForwardedError is a Postgres error that Upstream.Forward already relayed to
// the client.
type ForwardedError struct{ Err *pgerr.Error }

func (e *ForwardedError) Error() string { return e.Err.Error() }
func (e *ForwardedError) Unwrap() error { return e.Err }

// ErrQueryCanceled is the cancel cause of an Execute context cancelled by the
// client's CancelRequest; pgerr-wise it is 57014.
var ErrQueryCanceled = pgerr.New(pgerr.QueryCanceled, "canceling statement due to user request")

// SessionInfo describes one client session. It is safe for concurrent use.
type SessionInfo struct {
	ID         uint64
	User       string
	Database   string
	RemoteAddr net.Addr
	TLS        bool // client leg uses TLS

	txStatus atomic.Uint32
	// params and server are name/value lists ("name\0value\0..."),
	// interned: sessions of one application send the same startup packet
	// and get the same ParameterStatus values, so they share one copy
	// instead of each keeping a map of a dozen strings (the idle-memory
	// goal). The zero Handle is an empty list.
	params unique.Handle[string] // startup parameters, as sent
	mu     sync.Mutex
	server unique.Handle[string] // ParameterStatus values; guarded by mu
}

// Param returns the startup parameter name ("" when the client sent none);
// a name sent twice has its last value, as in Postgres.
func (s *SessionInfo) Param(name string) string {
	v, _ := lookupParam(handleValue(s.params), name)
	return v
}

func (s *SessionInfo) setParams(list string) { s.params = unique.Make(list) }

// TxStatus is the transaction status of the latest ReadyForQuery relayed or
// consumed: 'I', 'T' or 'E'.
func (s *SessionInfo) TxStatus() byte { return byte(s.txStatus.Load()) }

func (s *SessionInfo) setTxStatus(b byte) { s.txStatus.Store(uint32(b)) }

// ServerParameter returns the latest ParameterStatus value of name
// (client_encoding, standard_conforming_strings, server_version, ...).
func (s *SessionInfo) ServerParameter(name string) string {
	s.mu.Lock()
	h := s.server
	s.mu.Unlock()
	v, _ := lookupParam(handleValue(h), name)
	return v
}

// setServerParameter records a ParameterStatus body (name and value, each
// NUL-terminated).
func (s *SessionInfo) setServerParameter(name, value []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := handleValue(s.server)
	if v, ok := lookupParam(old, lentString(name)); ok && v == lentString(value) {
		return
	}
	list := make([]byte, 0, len(old)+len(name)+len(value)+2)
	for rest := old; rest != ""; {
		k, v, r := nextParam(rest)
		if k != lentString(name) {
			list = append(append(append(append(list, k...), 0), v...), 0)
		}
		rest = r
	}
	list = append(append(append(append(list, name...), 0), value...), 0)
	s.server = unique.Make(lentString(list))
}

func handleValue(h unique.Handle[string]) string {
	if h == (unique.Handle[string]{}) {
		return ""
	}
	return h.Value()
}

// lookupParam finds name in a "name\0value\0..." list; the last of
// several wins.
func lookupParam(list, name string) (value string, ok bool) {
	for list != "" {
		var k, v string
		k, v, list = nextParam(list)
		if k == name {
			value, ok = v, true
		}
	}
	return value, ok
}

// nextParam splits the first pair off a well-formed list.
func nextParam(list string) (k, v, rest string) {
	i := strings.IndexByte(list, 0)
	k, list = list[:i], list[i+1:]
	i = strings.IndexByte(list, 0)
	return k, list[:i], list[i+1:]
}

// Metrics receives the wire layer's events; cmd adapts it to Prometheus.
// Implementations must be safe for concurrent use. Nil means none. Every
// event is per connection, per statement or per error, never per relayed
// message: relayed bytes and messages are counted by the session itself and
// read with Server.Relayed, so the hot path pays no interface call.
type Metrics interface {
	ConnectionAccepted() // every accepted client socket, cancel requests included
	SessionOpened()
	SessionClosed(outcome string) // "ok", "client_error", "upstream_error", "shutdown", "refused", "auth_failed"
	// SessionReady reports the time from accept to the first ReadyForQuery.
	SessionReady(d time.Duration)
	// TLSHandshake reports a client-leg handshake: "ok" or "failed".
	TLSHandshake(outcome string)
	// UpstreamDialed reports one upstream connect (TCP and TLS): its
	// duration and whether it succeeded.
	UpstreamDialed(d time.Duration, ok bool)
	Intercepted(kind string)
	CancelRouted(result string) // "upstream", "local", "fleet" (forwarded to the fleet's proxy its secret names), "unknown"
	// ErrorSent reports an ErrorResponse sent to a client: relayed from
	// upstream (source "upstream") or produced by the proxy ("proxy").
	ErrorSent(source, sqlstate string)
}

// RelayStats are the totals of relayed protocol traffic after startup, per
// direction, since the server started.
type RelayStats struct {
	ClientToServerBytes, ClientToServerMessages uint64 // read from clients
	ServerToClientBytes, ServerToClientMessages uint64 // read from upstreams
}

// relayCounters are one session's RelayStats. Only the session's pumps add
// (one writer per direction, so the adds are uncontended); Relayed reads.
type relayCounters struct {
	c2sBytes, c2sMsgs, s2cBytes, s2cMsgs atomic.Uint64
}

type nopMetrics struct{}

func (nopMetrics) ConnectionAccepted()                {}
func (nopMetrics) SessionOpened()                     {}
func (nopMetrics) SessionClosed(string)               {}
func (nopMetrics) SessionReady(time.Duration)         {}
func (nopMetrics) TLSHandshake(string)                {}
func (nopMetrics) UpstreamDialed(time.Duration, bool) {}
func (nopMetrics) Intercepted(string)                 {}
func (nopMetrics) CancelRouted(string)                {}
func (nopMetrics) ErrorSent(string, string)           {}

// TextField is a FieldDescription of a text column, for synthesized results.
func TextField(name string) pgproto3.FieldDescription {
	return pgproto3.FieldDescription{Name: []byte(name), DataTypeOID: 25, DataTypeSize: -1, TypeModifier: -1}
}
