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
// Files by concern: c2s.go is the client→server pump (dispatch of client
// frames, the raw and routed fast paths), batch.go the extended-batch router
// (local groups, mixed Sync batches), plan.go the reply plan shared by the
// pumps, s2c.go the server→client pump, lend.go a local unit's execution on
// the lent upstream, msgtype.go the protocol's message types.
//
// # Lifecycle of a session
//
//  1. S0 accept: exact reads of the first packets (no read-ahead, so nothing
//     plaintext is buffered across a TLS upgrade): SSLRequest → S + TLS or N,
//     GSSENCRequest → N, a TLS ClientHello → direct TLS (PG17, ALPN
//     "postgresql"), CancelRequest → routed (D4), StartupMessage kept raw.
//  2. S1 dial: upstream connection, TLS per sslmode, startup bytes forwarded
//     untouched.
//  3. S2 auth: every Authentication* relayed; exactly one client 'p' frame
//     read per upstream request; SCRAM-SHA-256-PLUS removed from
//     AuthenticationSASL; with TLS on both legs a SCRAM gs2 flag "y" is
//     refused (28000), "n" relayed.
//  4. S3 tail: ParameterStatus recorded, BackendKeyData keeps the real
//     upstream pid with a proxy-minted secret, ReadyForQuery ends the
//     authentication deadline.
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
// # Wiring an Interceptor (for the Trellis router)
//
// Config.Interceptor receives Classify(session, sql) for every simple Query
// (the whole string) and every Parse (its one statement). Classify must be
// pure and cheap; return Route{Local: true, Kind, Payload} to answer it.
//
// Execute(ctx, session, call, up, w) then runs at the statement's barrier,
// on the server→client pump:
//
//   - read up.TxStatus() there ('I', 'T', 'E'), not in Classify: a
//     pipelined BEGIN ahead of the unit may have changed it;
//   - run the engine's SQL with up.Exec/up.Query (values bound as text
//     parameters, reserved statement/portal names, notices dropped,
//     NotificationResponse/ParameterStatus held and relayed after the reply);
//   - for a multi-statement string, run ordinary pieces with
//     up.Forward(ctx, piece, w): its frames reach the client byte for byte and
//     its ReadyForQuery is consumed. Each Forward is its own implicit
//     transaction, so bracket the string in BEGIN/COMMIT (via up.Exec) when
//     the client was idle and all-or-nothing is wanted. To shift error
//     positions of a piece, pass a wrapper of w: Forward then decodes the
//     frames and calls the wrapper, including Error;
//   - write results with w (RowDescription, DataRow, CommandComplete,
//     Notice, Error); wire writes ReadyForQuery with the upstream's real
//     status afterwards, and in the extended protocol ParseComplete,
//     BindComplete, descriptions (via the optional Describer) and CloseComplete;
//   - return a *pgerr.Error to answer with an ErrorResponse (position, hint,
//     detail and "trellis: class/Variant" kept); return the
//     *ForwardedError of a failed Forward to send nothing more. To leave a
//     client transaction failed, make the upstream fail too (e.g. run a
//     statement that raises), since TxStatus is never invented;
//   - ctx is cancelled by the client's CancelRequest (cause
//     ErrQueryCanceled, 57014), which also cancels a query the unit waits on,
//     and when the client disconnects while the unit is queued or runs (the
//     client→server pump, idle meanwhile, watches the socket).
//
// In the extended protocol, a batch up to Sync made only of intercepted
// statements (named or unnamed, prepared in one batch and executed in
// another) is answered locally; Call.Params holds the Bind values. In a
// batch shared with upstream statements, each group of intercepted messages
// runs at its place, after the upstream part before it has been answered,
// in the same transaction (batch.go); Execute then sees TxStatus 'T' when
// the batch runs in a block the proxy opened for it (Postgres's implicit
// transaction of the batch), which wire commits or rolls back at the Sync.
//
// # Limitations
//
//   - In a batch mixing intercepted and upstream statements, what follows
//     an intercepted one runs in a transaction block where Postgres would
//     have the batch's implicit transaction (see docs/architecture.md).
//   - A Bind or other message of an intercepted statement larger than
//     1 MiB fails its batch with 54000.
//   - A Query or Parse larger than 64 MiB is passed through unclassified.
//   - COPY is not supported inside Upstream.Forward.
//   - SCRAM with TLS on both legs is relayed only for the gs2 flag "n"
//     (surface §12.3: Postgres refuses "y" over TLS as a downgrade).
//   - Local portals run to completion: Execute's row limit is passed in
//     Call.MaxRows but PortalSuspended is never sent.
package wire
