package wire

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// UpstreamConfig says how sessions reach Postgres. Clients keep their own
// credentials: only the address and TLS come from here.
type UpstreamConfig struct {
	Network string // "tcp" or "unix"
	Address string // host:port, or the socket file path
	// SSLMode as in libpq: disable, allow, prefer, require, verify-ca,
	// verify-full. Empty means prefer over TCP; sockets never use TLS.
	SSLMode string
	// TLSConfig is used when TLS is negotiated; nil means InsecureSkipVerify
	// (libpq's require/prefer do not verify either).
	TLSConfig   *tls.Config
	DialTimeout time.Duration // default 10s
}

// Config configures a Server.
type Config struct {
	Upstream UpstreamConfig
	// TLS terminates client TLS when non-nil (SSLRequest → 'S'). Use
	// GetCertificate to rotate certificates without restarting.
	TLS         *tls.Config
	Interceptor Interceptor // nil means PassThrough
	Logger      *slog.Logger
	Metrics     Metrics
	// MaxClientConns refuses sessions beyond it with FATAL 53300; 0 = no cap.
	MaxClientConns int
	// MaxAuthenticating refuses, with FATAL 53300, a session whose startup
	// packet arrives while this many others are still authenticating, so
	// sockets that never finish authenticating (each holds an upstream
	// backend for up to AuthTimeout) cannot take every slot of
	// MaxClientConns or every backend of the server. 0: no cap (the
	// default: a pool's burst of logins must not be refused).
	MaxAuthenticating int
	// MaxMessageSize caps a client frame body (default DefaultMaxMessageSize).
	MaxMessageSize int
	// MaxServerMessageSize caps a server frame body (default 1 GiB).
	MaxServerMessageSize int
	// AuthTimeout bounds everything before the first ReadyForQuery
	// (Postgres's authentication_timeout; default 60s).
	AuthTimeout time.Duration
	// StartupTimeout bounds the wait for the client's startup packet (and
	// its SSLRequest/TLS handshake), so idle sockets that never start leave
	// quickly; default 10s, never more than AuthTimeout.
	StartupTimeout time.Duration
	// InstanceID is stored in the high bits of every minted BackendKeyData
	// secret key (11 bits are used); 0 picks a random one. The process id
	// the client sees is the upstream backend's real one (D4).
	InstanceID uint16
	// CancelPeers maps the instance id (11 bits) of each other proxy of a
	// fleet to the address of its client listener. A CancelRequest whose
	// secret names one of them (a client's cancel connection that a load
	// balancer sent to this proxy) is forwarded there, marked as forwarded
	// so that it is never forwarded again (no loop even when two maps
	// disagree). Nil: such cancels are dropped, as before.
	CancelPeers map[uint16]string
}

// Server accepts client connections and relays each to its own upstream
// connection. Close/Shutdown and Wait let callers prove nothing is left.
type Server struct {
	cfg      Config
	log      *slog.Logger
	metrics  Metrics
	intercep Interceptor // nil for pass-through
	instance uint32

	mu       sync.Mutex
	lns      map[net.Listener]struct{}
	sessions map[*session]struct{}
	keys     map[uint32]*session // by the minted secret's first 4 bytes
	closing  bool
	nextID   atomic.Uint64
	active   atomic.Int64
	authing  atomic.Int64 // sessions between the startup packet and ReadyForQuery
	closed   RelayStats   // relayed by ended sessions; guarded by mu
	wg       sync.WaitGroup
	idle     chan struct{} // signalled when a session ends
}

// NewServer validates cfg and returns a Server.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Upstream.Address == "" {
		return nil, errors.New("wire: upstream address is required")
	}
	if cfg.Upstream.Network == "" {
		cfg.Upstream.Network = "tcp"
	}
	switch cfg.Upstream.SSLMode {
	case "", "disable", "allow", "prefer", "require", "verify-ca", "verify-full":
	default:
		return nil, fmt.Errorf("wire: unknown sslmode %q", cfg.Upstream.SSLMode)
	}
	if cfg.Upstream.DialTimeout == 0 {
		cfg.Upstream.DialTimeout = 10 * time.Second
	}
	if cfg.MaxMessageSize <= 0 {
		cfg.MaxMessageSize = DefaultMaxMessageSize
	}
	if cfg.MaxServerMessageSize <= 0 {
		cfg.MaxServerMessageSize = 1 << 30
	}
	if cfg.AuthTimeout <= 0 {
		cfg.AuthTimeout = 60 * time.Second
	}
	if cfg.StartupTimeout <= 0 {
		cfg.StartupTimeout = 10 * time.Second
	}
	cfg.StartupTimeout = min(cfg.StartupTimeout, cfg.AuthTimeout)
	s := &Server{cfg: cfg, log: cfg.Logger, metrics: cfg.Metrics,
		lns: map[net.Listener]struct{}{}, sessions: map[*session]struct{}{}, keys: map[uint32]*session{},
		idle: make(chan struct{}, 1)}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.metrics == nil {
		s.metrics = nopMetrics{}
	}
	if _, ok := cfg.Interceptor.(PassThrough); !ok && cfg.Interceptor != nil {
		s.intercep = cfg.Interceptor
	}
	id := uint32(cfg.InstanceID)
	if id == 0 {
		var b [2]byte
		rand.Read(b[:])
		id = uint32(binary.BigEndian.Uint16(b[:]))
		if id&0x7ff == 0 {
			id = 1 // keep the instance bits non-zero, so minted keys are recognisable
		}
	}
	s.instance = (id & 0x7ff) << 20
	return s, nil
}

// ErrServerClosed is returned by Serve after Shutdown or Close, as
// net/http's Serve returns http.ErrServerClosed.
var ErrServerClosed = errors.New("wire: server closed")

// Serve accepts connections on ln until Shutdown or Close, and always closes
// ln. It always returns a non-nil error: ErrServerClosed after Shutdown or
// Close, else the accept error.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.lns[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.lns, ln)
		s.mu.Unlock()
		ln.Close()
	}()
	var backoff time.Duration
	for {
		conn, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, errTemporary(err)) {
				// Back off like net/http instead of spinning on EMFILE & co.
				if backoff == 0 {
					backoff = 5 * time.Millisecond
				} else if backoff *= 2; backoff > time.Second {
					backoff = time.Second
				}
				s.log.Warn("accept failed; retrying", "error", err, "delay", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		// Add under the lock that beginClose takes, so no Add races Wait.
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			conn.Close()
			return ErrServerClosed
		}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.handle(conn)
	}
}

// errTemporary treats resource exhaustion accept errors as retryable.
func errTemporary(err error) error {
	type temporary interface{ Temporary() bool }
	var t temporary
	if errors.As(err, &t) && t.Temporary() {
		return err
	}
	return errNever
}

var errNever = errors.New("never")

// ActiveSessions is the number of sessions past startup.
func (s *Server) ActiveSessions() int { return int(s.active.Load()) }

// Shutdown stops accepting, ends idle sessions with FATAL 57P01 at once and
// busy ones when they become idle; when ctx ends first, the remaining
// sessions get 57P01 and are closed. It returns when every session is gone:
// nil when they ended by themselves, ctx.Err() when ctx ended first and the
// rest were closed (net/http's Shutdown contract).
func (s *Server) Shutdown(ctx context.Context) error {
	s.beginClose(false)
	for {
		s.mu.Lock()
		for sess := range s.sessions {
			sess.requestShutdown(false)
		}
		n := len(s.sessions)
		s.mu.Unlock()
		if n == 0 {
			s.wg.Wait()
			return nil
		}
		select {
		case <-s.idle:
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			s.Close()
			s.Wait()
			return ctx.Err()
		}
	}
}

// Close stops accepting and ends every session at once (FATAL 57P01 where
// the client can still be written, then the sockets are closed).
func (s *Server) Close() error {
	s.beginClose(true)
	return nil
}

// Wait blocks until Serve's connections have all ended.
func (s *Server) Wait() { s.wg.Wait() }

// beginClose marks every session for shutdown before it closes the
// listeners, all under mu (which addSession takes): once a client can see
// the listener gone, no session is left that does not know it must end.
func (s *Server) beginClose(force bool) {
	s.mu.Lock()
	s.closing = true
	for sess := range s.sessions {
		sess.requestShutdown(force)
	}
	for ln := range s.lns {
		ln.Close()
	}
	s.mu.Unlock()
}

func (s *Server) addSession(sess *session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.sessions[sess] = struct{}{}
	return true
}

func (s *Server) removeSession(sess *session) {
	s.mu.Lock()
	delete(s.sessions, sess)
	// Move the session's traffic into the totals under mu, so Relayed never
	// sees it twice or not at all.
	s.closed.add(&sess.relayed)
	if len(sess.key.SecretKey) >= 4 {
		if id := binary.BigEndian.Uint32(sess.key.SecretKey); s.keys[id] == sess {
			delete(s.keys, id)
		}
	}
	s.mu.Unlock()
	select {
	case s.idle <- struct{}{}:
	default:
	}
}

// Relayed returns the relayed traffic of every session, live and ended.
// It costs a few atomic loads per live session.
func (s *Server) Relayed() RelayStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.closed
	for sess := range s.sessions {
		r.add(&sess.relayed)
	}
	return r
}

func (r *RelayStats) add(c *relayCounters) {
	r.ClientToServerBytes += c.c2sBytes.Load()
	r.ClientToServerMessages += c.c2sMsgs.Load()
	r.ServerToClientBytes += c.s2cBytes.Load()
	r.ServerToClientMessages += c.s2cMsgs.Load()
}

// mintKey registers sess under a key carrying the upstream's real process id
// (D4) and a fresh proxy-minted secret of the upstream secret's length (4
// bytes on protocol 3.0, up to 256 on 3.2). The secret's first 4 bytes are
// the routing key: bits 20-30 name this proxy instance, 20 low bits are random and
// unique among this proxy's sessions; the rest (protocol 3.2) is random.
func (s *Server) mintKey(sess *session, upstreamPID uint32, secretLen int) pgproto3.BackendKeyData {
	secretLen = max(secretLen, 4)
	secret := make([]byte, secretLen)
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		rand.Read(secret)
		id := s.instance | binary.BigEndian.Uint32(secret)&0xfffff
		if _, used := s.keys[id]; used {
			continue
		}
		binary.BigEndian.PutUint32(secret, id)
		s.keys[id] = sess
		return pgproto3.BackendKeyData{ProcessID: upstreamPID, SecretKey: secret}
	}
}

// routeCancel handles a CancelRequest: route by the secret's first 4 bytes,
// verify the process id and compare the whole secret in constant time, then
// cancel the local unit or forward the upstream's key.
//
// forwarded is set for a cancel another proxy of the fleet forwarded here:
// it is handled or dropped, never forwarded again.
func (s *Server) routeCancel(pid uint32, secret []byte, forwarded bool) {
	var sess *session
	if len(secret) >= 4 {
		s.mu.Lock()
		sess = s.keys[binary.BigEndian.Uint32(secret)]
		s.mu.Unlock()
	}
	if sess == nil && !forwarded && len(secret) >= 4 {
		// Not this proxy's session: another instance of the fleet may own it.
		inst := binary.BigEndian.Uint32(secret) >> 20 & 0x7ff
		if addr, ok := s.cfg.CancelPeers[uint16(inst)]; ok && inst<<20 != s.instance {
			s.metrics.CancelRouted("fleet")
			s.forwardCancel(addr, pid, secret)
			return
		}
	}
	if sess == nil || sess.key.ProcessID != pid || subtle.ConstantTimeCompare(sess.key.SecretKey, secret) != 1 {
		s.metrics.CancelRouted("unknown")
		return
	}
	if sess.cancelLocal() {
		// The unit's context forwards the cancel upstream only while it waits
		// on its own query; a stray cancel could hit the client's next one.
		s.metrics.CancelRouted("local")
		return
	}
	s.metrics.CancelRouted("upstream")
	sess.cancelUpstream()
}

// dialUpstream connects to Postgres and negotiates TLS per sslmode.
func (s *Server) dialUpstream(ctx context.Context) (net.Conn, bool, error) {
	u := s.cfg.Upstream
	d := net.Dialer{Timeout: u.DialTimeout}
	conn, err := d.DialContext(ctx, u.Network, u.Address)
	if err != nil {
		return nil, false, err
	}
	mode := u.SSLMode
	if u.Network == "unix" || mode == "" && u.Network == "unix" {
		mode = "disable"
	}
	if mode == "" {
		mode = "prefer"
	}
	if mode == "disable" || mode == "allow" {
		return conn, false, nil
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
		defer conn.SetDeadline(time.Time{})
	}
	var req [8]byte
	binary.BigEndian.PutUint32(req[0:4], 8)
	binary.BigEndian.PutUint32(req[4:8], protoSSLRequest)
	if _, err := conn.Write(req[:]); err != nil {
		conn.Close()
		return nil, false, err
	}
	var resp [1]byte
	if _, err := conn.Read(resp[:]); err != nil {
		conn.Close()
		return nil, false, err
	}
	switch resp[0] {
	case 'S':
		cfg := u.TLSConfig
		if cfg == nil {
			cfg = &tls.Config{InsecureSkipVerify: true}
		}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, false, fmt.Errorf("upstream TLS handshake: %w", err)
		}
		return tc, true, nil
	case 'N':
		if mode == "prefer" {
			return conn, false, nil
		}
		conn.Close()
		return nil, false, errors.New("upstream server does not support SSL, but sslmode=" + mode + " requires it")
	default:
		conn.Close()
		return nil, false, fmt.Errorf("upstream answered SSLRequest with %q", resp[0])
	}
}

// forwardCancel hands a CancelRequest to the fleet's proxy at addr, with
// the forwarded request code, and waits for it to close the connection
// (as after a CancelRequest to Postgres). The secret is passed unchanged:
// only the owning proxy can verify it.
func (s *Server) forwardCancel(addr string, pid uint32, secret []byte) {
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		s.log.Warn("cancel: dialing the fleet's proxy", "peer", addr, "error", err)
		return
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(cancelPacket(protoForwardedCancel, pid, secret)); err != nil {
		s.log.Warn("cancel: writing to the fleet's proxy", "peer", addr, "error", err)
		return
	}
	var b [1]byte
	conn.Read(b[:])
}

// cancelPacket encodes a CancelRequest (or the fleet's forwarded form).
func cancelPacket(code, pid uint32, secret []byte) []byte {
	msg := make([]byte, 0, 12+len(secret))
	msg = binary.BigEndian.AppendUint32(msg, uint32(12+len(secret)))
	msg = binary.BigEndian.AppendUint32(msg, code)
	msg = binary.BigEndian.AppendUint32(msg, pid)
	return append(msg, secret...)
}

// sendCancel opens a new upstream connection and sends a CancelRequest with
// the upstream's real key, like pgconn's CancelRequest does.
func (s *Server) sendCancel(key pgproto3.BackendKeyData) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := s.dialUpstream(ctx)
	if err != nil {
		s.log.Warn("cancel: dialing upstream", "error", err)
		return
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(cancelPacket(protoCancelRequest, key.ProcessID, key.SecretKey)); err != nil {
		s.log.Warn("cancel: writing upstream", "error", err)
		return
	}
	// Postgres closes without replying; wait for that so the cancel is
	// processed before we return.
	var b [1]byte
	conn.Read(b[:])
}
