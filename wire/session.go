package wire

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// session is one client connection and its upstream connection.
type session struct {
	srv  *Server
	info *SessionInfo

	client net.Conn
	cr     *connReader
	cw     *connWriter // written only by the server→client pump (after startup)
	up     net.Conn
	upTLS  bool
	ur     *connReader // read only by the server→client pump (after startup)
	uw     *connWriter // written by the client→server pump, or a unit it handed over to

	upKey pgproto3.BackendKeyData // upstream's real key, never shown to the client
	key   pgproto3.BackendKeyData // the key the client holds: real pid, minted secret

	ctx    context.Context
	cancel context.CancelFunc

	mu         sync.Mutex
	ready      bool
	plan       []*planEntry
	planBuf    [2]*planEntry // plan's array while it is short
	spare      *planEntry    // a paid upstream entry, for the next addDebt
	shutdown   int           // 0 none, 1 graceful, 2 forced
	unitCancel context.CancelCauseFunc
	// leftMidUnit is set when the client left while a local unit was
	// queued or running: the unit is (or starts) cancelled.
	leftMidUnit bool

	intercept   Interceptor // nil: pure pass-through
	clientGone  atomic.Bool
	wakePending atomic.Bool

	relayed  relayCounters
	accepted time.Time

	s2cRun int // bytes of the current reply relayed (server→client pump)
	c2sRun int // bytes of the current statement's input (client→server pump)

	hdr    [5]byte  // writeFrame's header (server→client pump)
	c2sHdr [5]byte  // forwardStream's header (client→server pump)
	sbuf   []byte   // server→client pump scratch
	wbuf   []byte   // encode scratch for synthesized frames
	held   [][]byte // async frames held while a unit borrows the upstream
	// batchErr: an ErrorResponse was relayed since the latest ReadyForQuery,
	// so upstream skips to Sync (server→client pump and its units only).
	batchErr bool
}

var (
	errSessionOver = errors.New("session over")
)

func (s *Server) handle(conn net.Conn) {
	defer s.wg.Done()
	id := s.nextID.Add(1)
	sess := &session{srv: s, client: conn,
		info: &SessionInfo{ID: id, RemoteAddr: conn.RemoteAddr()}}
	sess.info.setTxStatus('I')
	sess.accepted = time.Now()
	s.metrics.ConnectionAccepted()
	sess.ctx, sess.cancel = context.WithCancel(context.Background())
	defer sess.cancel()
	if !s.addSession(sess) {
		conn.Close()
		return
	}
	defer s.removeSession(sess)
	defer func() {
		if r := recover(); r != nil {
			sess.logger().Error("session panic", "panic", r, "stack", string(debug.Stack()))
		}
		sess.closeAll()
	}()
	outcome := sess.run()
	sess.logger().Debug("session ended", "outcome", outcome)
}

// logger is the session's logger, built for each message rather than kept:
// a session logs only at its edges and on failures, and a kept one (its
// handler's preformatted attributes) is a few hundred bytes of every idle
// session (the idle-memory goal).
func (s *session) logger() *slog.Logger {
	log := s.srv.log.With("session", s.info.ID, "client", s.info.RemoteAddr.String())
	if s.info.User != "" {
		log = log.With("user", s.info.User, "database", s.info.Database)
	}
	return log
}

func (s *session) closeAll() {
	s.mu.Lock()
	up, client := s.up, s.client
	s.mu.Unlock()
	if up != nil {
		up.Close()
	}
	client.Close()
}

// requestShutdown asks the session to end: gracefully (when idle) or at once.
func (s *session) requestShutdown(force bool) {
	s.mu.Lock()
	level := 1
	if force {
		level = 2
	}
	if level <= s.shutdown {
		s.mu.Unlock()
		return
	}
	s.shutdown = level
	ready := s.ready
	busy := len(s.plan) > 0
	s.mu.Unlock()
	if !ready {
		// Still in startup: nothing to drain, the client has no session yet.
		s.closeAll()
		return
	}
	if force {
		if busy {
			// Stop what the backend is running, so the upstream is freed now.
			go s.cancelUpstream()
		}
		s.cancel()
		// A pump blocked writing to a client that does not read cannot be
		// woken: close the sockets after a short while.
		time.AfterFunc(2*time.Second, s.closeAll)
	}
	s.wake()
}

// wake interrupts the server→client pump's upstream read (see peekHeader).
func (s *session) wake() {
	s.mu.Lock()
	up := s.up
	s.mu.Unlock()
	if up != nil {
		s.wakePending.Store(true)
		up.SetReadDeadline(time.Unix(1, 0))
	}
}

func (s *session) cancelUpstream() {
	if s.upKey.ProcessID == 0 {
		return
	}
	s.srv.sendCancel(s.upKey)
}

// cancelLocal cancels a running local unit; false when none runs.
func (s *session) cancelLocal() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unitCancel == nil {
		return false
	}
	s.unitCancel(ErrQueryCanceled)
	return true
}

// errClientLeft cancels a local unit whose client disconnected.
var errClientLeft = pgerr.New(pgerr.QueryCanceled, "canceling statement because the client disconnected")

// clientLeft cancels the running local unit, or the next one to start.
func (s *session) clientLeft() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leftMidUnit = true
	if s.unitCancel != nil {
		s.unitCancel(errClientLeft)
	}
}

// writeDirect writes a FATAL before the buffered writers exist.
func (s *session) fatalDirect(e *pgerr.Error) {
	s.client.SetWriteDeadline(time.Now().Add(5 * time.Second))
	s.client.Write(encodeError(nil, e, false, s.logger()))
}

// startup runs phases S0-S3 up to the first ReadyForQuery. On success
// teardown is non-nil and undoes the session's accounting with its final
// outcome; on failure the accounting is undone already.
func (s *session) startup() (outcome string, teardown func(string)) {
	srv := s.srv
	var counted, opened bool
	td := func(oc string) {
		if opened {
			srv.metrics.SessionClosed(oc)
		}
		if counted {
			srv.active.Add(-1)
		}
	}
	defer func() {
		if teardown == nil {
			td(outcome)
		}
	}()
	deadline := time.Now().Add(srv.cfg.AuthTimeout)
	// Handshakes and the dial use a context that ends with startup, so an
	// idle session keeps no timer of it. It does not derive from s.ctx,
	// which is cancelled only once the session is ready: a child would give
	// s.ctx a done channel and a children map that every idle session kept.
	sctx, scancel := context.WithDeadline(context.Background(), deadline)
	defer scancel()
	// Until the startup packet only the shorter startup timeout applies.
	s.client.SetDeadline(time.Now().Add(srv.cfg.StartupTimeout))

	// S0: exact reads until a StartupMessage.
	var startup []byte
	buf := make([]byte, 0, 256)
	sslDone, gssDone := false, false
	for startup == nil {
		var first io.Reader = s.client
		if !sslDone && srv.cfg.TLS != nil {
			// PG17 sslnegotiation=direct: a TLS ClientHello (0x16) where a
			// startup length (first byte 0) would be.
			var b [1]byte
			if _, err := io.ReadFull(s.client, b[:]); err != nil {
				return "client_gone", nil
			}
			if b[0] == 0x16 {
				sslDone = true
				cfg := srv.cfg.TLS.Clone()
				cfg.NextProtos = []string{"postgresql"}
				tc := tls13Server(&prefixConn{Conn: s.client, prefix: b[:]}, cfg)
				if err := tc.HandshakeContext(sctx); err != nil {
					s.logger().Debug("client direct TLS handshake failed", "error", err)
					srv.metrics.TLSHandshake("failed")
					return "client_error", nil
				}
				srv.metrics.TLSHandshake("ok")
				if tc.ConnectionState().NegotiatedProtocol != "postgresql" {
					// Required by the protocol, so a non-Postgres TLS client
					// cannot be confused for one (ALPN).
					return "client_error", nil
				}
				s.mu.Lock()
				s.client = tc
				s.mu.Unlock()
				s.info.TLS = true
				continue
			}
			first = io.MultiReader(bytes.NewReader(b[:]), s.client)
		}
		pkt, err := readStartupPacket(first, buf)
		if err != nil {
			if e, ok := pgerr.As(err); ok {
				e.Severity = pgerr.SeverityFatal
				s.fatalDirect(e)
				return "client_error", nil
			}
			return "client_gone", nil
		}
		code := binary.BigEndian.Uint32(pkt[:4])
		switch {
		case code == protoSSLRequest && len(pkt) == 4 && !sslDone:
			sslDone = true
			if srv.cfg.TLS == nil {
				if _, err := s.client.Write([]byte{'N'}); err != nil {
					return "client_gone", nil
				}
				continue
			}
			if _, err := s.client.Write([]byte{'S'}); err != nil {
				return "client_gone", nil
			}
			tc := tls13Server(s.client, srv.cfg.TLS)
			if err := tc.HandshakeContext(sctx); err != nil {
				s.logger().Debug("client TLS handshake failed", "error", err)
				srv.metrics.TLSHandshake("failed")
				return "client_error", nil
			}
			srv.metrics.TLSHandshake("ok")
			s.mu.Lock()
			s.client = tc
			s.mu.Unlock()
			s.info.TLS = true
		case code == protoGSSENCRequest && len(pkt) == 4 && !gssDone:
			gssDone = true
			if _, err := s.client.Write([]byte{'N'}); err != nil {
				return "client_gone", nil
			}
		case (code == protoCancelRequest || code == protoForwardedCancel) && len(pkt) >= 12 && len(pkt) <= 8+256:
			srv.routeCancel(binary.BigEndian.Uint32(pkt[4:8]), pkt[8:], code == protoForwardedCancel)
			return "cancel", nil
		case code>>16 == 3:
			// Keep the raw bytes: re-encoding would reorder the parameters.
			startup = binary.BigEndian.AppendUint32(make([]byte, 0, len(pkt)+4), uint32(len(pkt)+4))
			startup = append(startup, pkt...)
			params, err := parseStartupParams(pkt[4:])
			if err != nil {
				e, _ := pgerr.As(err)
				e.Severity = pgerr.SeverityFatal
				s.fatalDirect(e)
				return "client_error", nil
			}
			s.info.setParams(lentString(params)) // interned: a copy is kept
			s.info.User = s.info.Param("user")
			s.info.Database = s.info.Param("database")
			if s.info.Database == "" {
				s.info.Database = s.info.User
			}
		default:
			s.fatalDirect(fatal(pgerr.ProtocolViolation, "unsupported frontend protocol %d.%d: server supports 3.0 to 3.2", code>>16, code&0xffff))
			return "client_error", nil
		}
	}
	if s.info.User == "" {
		s.fatalDirect(fatal(pgerr.InvalidAuthorizationSpec, "no PostgreSQL user name specified in startup packet"))
		return "client_error", nil
	}
	s.client.SetDeadline(deadline)

	if n := srv.active.Add(1); srv.cfg.MaxClientConns > 0 && n > int64(srv.cfg.MaxClientConns) {
		srv.active.Add(-1)
		s.fatalDirect(fatal(pgerr.TooManyConnections, "sorry, too many clients already"))
		srv.metrics.SessionClosed("refused")
		return "refused", nil
	}
	counted = true
	if n := srv.authing.Add(1); srv.cfg.MaxAuthenticating > 0 && n > int64(srv.cfg.MaxAuthenticating) {
		srv.authing.Add(-1)
		s.fatalDirect(fatal(pgerr.TooManyConnections, "sorry, too many clients authenticating already").
			WithHint("%d sessions are still authenticating; try again in a moment", srv.cfg.MaxAuthenticating))
		srv.metrics.SessionClosed("refused")
		return "refused", nil
	}
	authing := true
	doneAuthing := func() {
		if authing {
			authing = false
			srv.authing.Add(-1)
		}
	}
	defer doneAuthing()
	srv.metrics.SessionOpened()
	opened = true

	// S1: dial upstream.
	dialStart := time.Now()
	up, upTLS, err := srv.dialUpstream(sctx)
	srv.metrics.UpstreamDialed(time.Since(dialStart), err == nil)
	if err != nil {
		s.logger().Warn("dialing upstream failed", "error", err, "sqlstate", pgerr.ConnectionFailure)
		s.fatalDirect(fatal(pgerr.ConnectionFailure, "could not connect to upstream server: %v", err))
		outcome = "upstream_error"
		return outcome, nil
	}
	s.mu.Lock()
	s.up, s.upTLS = up, upTLS
	closing := s.shutdown > 0
	s.mu.Unlock()
	if closing {
		s.fatalDirect(fatal(pgerr.AdminShutdown, "terminating connection due to administrator command"))
		outcome = "shutdown"
		return outcome, nil
	}
	up.SetDeadline(deadline)
	// Pooled buffers, held only while bytes are in them (buffers.go).
	s.ur, s.uw = newConnReader(up), newConnWriter(up)
	s.cr, s.cw = newConnReader(s.client), newConnWriter(s.client)
	if _, err := s.uw.Write(startup); err != nil || s.uw.Flush() != nil {
		s.fatalDirect(fatal(pgerr.ConnectionFailure, "could not send startup packet to upstream server"))
		outcome = "upstream_error"
		return outcome, nil
	}

	// S2/S3: authentication relay and startup tail.
	if oc, err := s.startupRelay(); err != nil {
		outcome = oc
		if e, ok := pgerr.As(err); ok {
			s.cw.Write(encodeError(nil, e, false, s.logger()))
		}
		s.cw.Flush()
		if outcome != "auth_failed" {
			s.logger().Debug("startup failed", "error", err)
		}
		return outcome, nil
	}
	s.client.SetDeadline(time.Time{})
	up.SetDeadline(time.Time{})
	s.mu.Lock()
	s.ready = true
	s.mu.Unlock()
	doneAuthing()
	srv.metrics.SessionReady(time.Since(s.accepted))
	s.logger().Debug("session started", "tls", s.info.TLS)
	if !replicationOn(s.info.Param("replication")) {
		s.intercept = srv.intercep
	}
	s.logger().Debug("session ready")
	return "ok", td
}

// run executes the session's phases and returns its outcome.
func (s *session) run() string {
	// Startup (TLS, dial, authentication) runs on a goroutine of its own:
	// its stack grows deep and goes back when it ends, so an idle session
	// keeps only the two pumps' small stacks (the idle-memory goal).
	var (
		outcome  string
		teardown func(string)
	)
	started := make(chan struct{})
	go func() {
		defer close(started)
		defer func() {
			if r := recover(); r != nil {
				s.logger().Error("session panic", "panic", r, "stack", string(debug.Stack()))
				outcome = "panic"
			}
		}()
		outcome, teardown = s.startup()
	}()
	<-started
	if teardown == nil {
		return outcome
	}
	defer func() { teardown(outcome) }()

	// S4: the two pumps.
	c2sDone := make(chan struct{})
	go func() {
		defer close(c2sDone)
		defer func() {
			if r := recover(); r != nil {
				s.logger().Error("client pump panic", "panic", r, "stack", string(debug.Stack()))
				s.closeAll()
			}
		}()
		s.clientToServer()
	}()
	outcome = s.serverToClient()
	s.closeAll()
	s.cancel()
	<-c2sDone
	return outcome
}

// startupRelay relays authentication (S2) and the startup tail (S3) until the
// first ReadyForQuery.
func (s *session) startupRelay() (string, error) {
	max := s.srv.cfg.MaxServerMessageSize
	if max > maxInspect {
		max = maxInspect
	}
	for {
		if s.ur.Buffered() < 5 {
			if err := s.cw.Flush(); err != nil {
				return "client_gone", err
			}
		}
		typ, n, err := peekHeader(s.ur, max)
		if err != nil {
			if _, ok := pgerr.As(err); ok {
				return "upstream_error", fatal(pgerr.ProtocolViolation, "upstream sent an invalid message during startup")
			}
			return "upstream_error", fatal(pgerr.ConnectionFailure, "upstream server closed the connection during startup")
		}
		body, err := readBody(s.ur, s.sbuf, n)
		s.sbuf = body
		if err != nil {
			return "upstream_error", fatal(pgerr.ConnectionFailure, "upstream server closed the connection during startup")
		}
		switch typ {
		case 'R':
			if len(body) < 4 {
				return "upstream_error", fatal(pgerr.ProtocolViolation, "invalid authentication message from upstream")
			}
			switch binary.BigEndian.Uint32(body) {
			case 0, 12: // AuthenticationOk, SASLFinal: nothing to answer
				s.writeFrame(typ, body)
			case 10: // AuthenticationSASL
				var m pgproto3.AuthenticationSASL
				if err := m.Decode(body); err != nil {
					return "upstream_error", fatal(pgerr.ProtocolViolation, "invalid AuthenticationSASL from upstream")
				}
				// Channel binding would bind to our certificate, not the
				// server's: offer only the plain mechanisms (D3).
				mechs := m.AuthMechanisms[:0]
				for _, mech := range m.AuthMechanisms {
					if !strings.HasSuffix(mech, "-PLUS") {
						mechs = append(mechs, mech)
					}
				}
				m.AuthMechanisms = mechs
				out, _ := m.Encode(nil)
				s.cw.Write(out)
				// With TLS on both legs a client that sends the gs2 flag
				// "y" (it could bind but we offered no -PLUS) is refused by
				// Postgres as a downgrade; "n" (no binding) relays fine.
				if err := s.relayClientAuth(s.info.TLS && s.upTLS); err != nil {
					if e, ok := pgerr.As(err); ok && e.Variant == "ScramOverTls" {
						return "auth_failed", e
					}
					return "client_error", err
				}
			default: // cleartext 3, md5 5, GSS 7/8, SSPI 9, SASLContinue 11
				s.writeFrame(typ, body)
				if err := s.relayClientAuth(false); err != nil {
					return "client_error", err
				}
			}
		case 'E':
			s.writeFrame(typ, body)
			return "auth_failed", errors.New("upstream refused the session")
		case 'K':
			var k pgproto3.BackendKeyData
			if err := k.Decode(body); err != nil {
				return "upstream_error", fatal(pgerr.ProtocolViolation, "invalid BackendKeyData from upstream")
			}
			s.upKey = pgproto3.BackendKeyData{ProcessID: k.ProcessID, SecretKey: append([]byte(nil), k.SecretKey...)}
			s.key = s.srv.mintKey(s, k.ProcessID, len(k.SecretKey))
			out, _ := s.key.Encode(nil)
			s.cw.Write(out)
		case 'S':
			s.noteParameterStatus(body)
			s.writeFrame(typ, body)
		case 'Z':
			if len(body) == 1 {
				s.info.setTxStatus(body[0])
			}
			s.writeFrame(typ, body)
			if err := s.cw.Flush(); err != nil {
				return "client_gone", err
			}
			return "ok", nil
		default: // NoticeResponse, NegotiateProtocolVersion, ...
			s.writeFrame(typ, body)
		}
	}
}

// relayClientAuth forwards exactly one client password/SASL message;
// refuseBindingFlag refuses a SASLInitialResponse with the gs2 flag "y".
func (s *session) relayClientAuth(refuseBindingFlag bool) error {
	if err := s.cw.Flush(); err != nil {
		return err
	}
	typ, n, err := peekHeader(s.cr, maxAuthMessage)
	if err != nil {
		if e, ok := pgerr.As(err); ok {
			e.Severity = pgerr.SeverityFatal
			return e
		}
		return fmt.Errorf("reading authentication response: %w", err)
	}
	if typ != 'p' {
		return fatal(pgerr.ProtocolViolation, "expected password response, got message type %s", quoteTyp(typ))
	}
	if refuseBindingFlag {
		if body, err := s.cr.Peek(n); err == nil && gs2Flag(body) == 'y' {
			return fatal(pgerr.InvalidAuthorizationSpec, "SCRAM authentication with channel binding flag \"y\" cannot be relayed when both the client and the upstream connection use TLS").
				WithHint("connect with channel_binding=disable (libpq), or sslmode=disable on a trusted network, or use sslmode=disable upstream").
				WithClass("unsupported", "ScramOverTls")
		}
	}
	s.uw.Write(appendHeader(s.wbuf[:0], typ, n))
	if _, err := io.CopyN(s.uw, s.cr, int64(n)); err != nil {
		return fmt.Errorf("reading authentication response: %w", err)
	}
	return s.uw.Flush()
}

// noteParameterStatus records a ParameterStatus body that decodes as
// pgproto3's ParameterStatus.Decode accepts it (name and value strings).
func (s *session) noteParameterStatus(body []byte) {
	name, rest, ok := scanCString(body)
	if !ok {
		return
	}
	value, _, ok := scanCString(rest)
	if !ok {
		return
	}
	s.info.setServerParameter(name, value)
}

// writeFrame writes a frame to the client's buffer.
func (s *session) writeFrame(typ byte, body []byte) error {
	// The header is built in the session, not on the stack: a Write may
	// hand its slice to the socket, which would move a local to the heap.
	s.hdr[0] = typ
	binary.BigEndian.PutUint32(s.hdr[1:], uint32(len(body)+4))
	if _, err := s.cw.Write(s.hdr[:]); err != nil {
		return err
	}
	_, err := s.cw.Write(body)
	return err
}

// replicationOn reports whether a startup replication value opens a
// walsender, as Postgres's parse_bool (unique prefixes of true/yes, "on",
// "1", case-insensitive) or "database" says; "false", "off", "0" or no value
// leave an ordinary session, which keeps its routing.
func replicationOn(v string) bool {
	v = strings.ToLower(v)
	if v == "" {
		return false
	}
	switch {
	case v == "database", v == "on", v == "1":
		return true
	case strings.HasPrefix("true", v), strings.HasPrefix("yes", v):
		return true
	}
	return false
}

// gs2Flag is the channel-binding flag ('n', 'y' or 'p') of a
// SASLInitialResponse body: mechanism name, int32 length, client-first data.
func gs2Flag(body []byte) byte {
	_, rest, ok := cstring(body)
	if !ok || len(rest) < 5 {
		return 0
	}
	return rest[4]
}
