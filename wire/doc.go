// Package wire is trellis-proxy's PostgreSQL wire layer: sockets, TLS,
// startup and authentication relay, framing, the session state machine,
// cancel routing and reply ordering. It knows nothing of Trellis: statements
// the proxy answers itself are recognised and executed by an Interceptor that
// cmd wires in (architecture.md, package rule).
//
// # Layers
//
// Server accepts client connections and runs one session per connection,
// each with its own upstream connection (D2, session mode). Frames are read
// raw (type byte, int32 length, body) into reusable buffers and pass-through
// frames are written exactly as read (D1). pgproto3 is used only to decode
// the frames the proxy inspects (Query, Parse, Bind, ReadyForQuery,
// AuthenticationSASL, BackendKeyData, ...) and to encode frames it
// synthesizes. Large bodies (DataRow, CopyData, big Bind) are streamed with
// io.CopyN and never held whole.
//
// # Lifecycle of a session
//
//  1. S0 accept: exact reads of the first packets (no read-ahead, so nothing
//     plaintext is buffered across a TLS upgrade): SSLRequest → S + TLS or N,
//     GSSENCRequest → N, CancelRequest → routed (D4), StartupMessage kept raw.
//  2. S1 dial: upstream connection, TLS per sslmode, startup bytes forwarded
//     untouched.
//  3. S2 auth: every Authentication* relayed; exactly one client 'p' frame
//     read per upstream request; SCRAM-SHA-256-PLUS removed from
//     AuthenticationSASL; SCRAM with TLS on both legs refused (28000).
//  4. S3 tail: ParameterStatus recorded, BackendKeyData replaced by a
//     proxy-minted key, ReadyForQuery ends the authentication deadline.
//  5. S4 ready: two pumps (below) until Terminate, EOF, a FATAL or shutdown.
//
// # Pumps and the reply plan
//
// The client→server pump is the only writer of the upstream socket and the
// server→client pump the only writer of the client socket. They share an
// ordered reply plan: "upstream owes N ReadyForQuery" entries and local
// units. A local unit (a statement the Interceptor answers) runs on the
// server→client pump only once every earlier ReadyForQuery has been relayed;
// meanwhile the client→server pump writes nothing upstream, so the unit
// borrows the upstream connection (Upstream) with nothing in flight.
// Asynchronous NotificationResponse, NoticeResponse and ParameterStatus
// frames are relayed by the same pump, so they fall between whole replies;
// those arriving while a unit borrows the upstream are held and relayed after
// the unit's reply.
//
// The server→client pump is woken (for a newly queued unit or shutdown)
// by a past read deadline on the upstream socket; frame headers are read with
// Peek so an interrupted read loses nothing.
//
// # Limitations
//
//   - An extended-protocol batch (up to Sync) that mixes intercepted and
//     upstream statements is refused with 0A000; a batch larger than 1 MiB is
//     streamed, and an intercepted statement later in it is refused too.
//   - A Query larger than 64 MiB is passed through unclassified.
//   - COPY is not supported inside Upstream.Forward.
//   - SCRAM cannot be relayed with TLS on both legs (surface §12.3).
package wire
