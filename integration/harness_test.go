// Package integration runs the real proxy in-process against a real
// throwaway PostgreSQL cluster and drives it with real clients (pgx, raw
// protocol frames).
package integration

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/trellis-proxy/trellis-proxy/internal/pgcluster"
	"github.com/trellis-proxy/trellis-proxy/internal/proxy"
)

func TestMain(m *testing.M) { pgcluster.RunMain(m) }

// harness is one proxy running in-process on 127.0.0.1:0.
type harness struct {
	t       *testing.T
	cluster *pgcluster.Cluster
	info    proxy.Info
	Addr    string
	cancel  context.CancelFunc
	done    chan error
}

// start runs proxy.Run against the test cluster; mod adjusts the config and
// options. Cleanup shuts it down and checks that Run returned nil.
func start(t *testing.T, mod func(*proxy.Config, *proxy.Options)) *harness {
	t.Helper()
	c := pgcluster.ForTest(t)
	cfg := proxy.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.Upstream = c.URL("postgres")
	cfg.ShutdownGrace = 5 * time.Second
	// Relay tests run the bare relay; tests of Trellis statements turn the
	// engine on (RelayOnly false) or bring their own interceptor.
	opts := proxy.Options{RelayOnly: true, Logger: testLogger(t)}
	if mod != nil {
		mod(&cfg, &opts)
	}
	ready := make(chan proxy.Info, 1)
	opts.Ready = func(i proxy.Info) { ready <- i }
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{t: t, cluster: c, cancel: cancel, done: make(chan error, 1)}
	go func() { h.done <- proxy.Run(ctx, cfg, opts) }()
	select {
	case h.info = <-ready:
	case err := <-h.done:
		cancel()
		t.Fatalf("proxy.Run: %v", err)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("proxy did not become ready")
	}
	h.Addr = h.info.Addr.String()
	t.Cleanup(func() { h.stop() })
	return h
}

// stop shuts the proxy down and waits for Run (idempotent).
func (h *harness) stop() error {
	h.cancel()
	select {
	case err, ok := <-h.done:
		if !ok {
			return nil
		}
		close(h.done)
		if err != nil {
			h.t.Errorf("proxy.Run returned %v", err)
		}
		return err
	case <-time.After(60 * time.Second):
		h.t.Error("proxy did not stop within 60s")
		return nil
	}
}

// url is a client URL through the proxy.
func (h *harness) url(user, pw, db string, extra string) string {
	auth := user
	if pw != "" {
		auth += ":" + pw
	}
	u := fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", auth, h.Addr, db)
	if extra != "" {
		u += "&" + extra
	}
	return u
}

func (h *harness) connect(t testing.TB) *pgx.Conn {
	t.Helper()
	return connectURL(t, h.url("postgres", "", "postgres", ""))
}

func direct(t testing.TB) *pgx.Conn {
	t.Helper()
	return connectURL(t, pgcluster.ForTest(t).URL("postgres"))
}

func connectURL(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for delay := time.Millisecond; ; delay = min(delay*2, 100*time.Millisecond) {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(delay)
	}
}

func goroutines() int { return runtime.NumGoroutine() }

// rawConn speaks the protocol with raw frames, to see exact bytes.
type rawConn struct {
	t    testing.TB
	conn net.Conn
	br   *bufio.Reader
}

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(60 * time.Second))
	t.Cleanup(func() { conn.Close() })
	return &rawConn{t: t, conn: conn, br: bufio.NewReader(conn)}
}

// startup sends a StartupMessage (user postgres, trust) and returns the
// frames up to and including the first ReadyForQuery.
func (r *rawConn) startup() []frame {
	r.t.Helper()
	msg := pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30,
		Parameters: map[string]string{"user": "postgres", "database": "postgres"}}
	b, _ := msg.Encode(nil)
	r.send(b)
	return r.untilZ()
}

func (r *rawConn) send(b []byte) {
	r.t.Helper()
	if _, err := r.conn.Write(b); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rawConn) sendMsgs(msgs ...pgproto3.FrontendMessage) {
	r.t.Helper()
	var b []byte
	for _, m := range msgs {
		var err error
		if b, err = m.Encode(b); err != nil {
			r.t.Fatal(err)
		}
	}
	r.send(b)
}

type frame struct {
	typ  byte
	body []byte
}

func (f frame) String() string {
	return fmt.Sprintf("%c %q", f.typ, f.body)
}

func (r *rawConn) next() (frame, error) {
	var h [5]byte
	if _, err := io.ReadFull(r.br, h[:]); err != nil {
		return frame{}, err
	}
	n := binary.BigEndian.Uint32(h[1:])
	body := make([]byte, n-4)
	if _, err := io.ReadFull(r.br, body); err != nil {
		return frame{}, err
	}
	return frame{h[0], body}, nil
}

// untilZ reads frames up to and including a ReadyForQuery.
func (r *rawConn) untilZ() []frame {
	r.t.Helper()
	var out []frame
	for {
		f, err := r.next()
		if err != nil {
			r.t.Fatalf("reading frames (have %v): %v", out, err)
		}
		out = append(out, f)
		if f.typ == 'Z' {
			return out
		}
	}
}

// untilZs reads frames up to and including the n-th ReadyForQuery.
func (r *rawConn) untilZs(n int) []frame {
	var out []frame
	for i := 0; i < n; i++ {
		out = append(out, r.untilZ()...)
	}
	return out
}

func types(fs []frame) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteByte(f.typ)
	}
	return b.String()
}

func sqlstate(err error) string {
	var s interface{ SQLState() string }
	if err != nil && asErr(err, &s) {
		return s.SQLState()
	}
	return ""
}

type (
	proxyConfig  = proxy.Config
	proxyOptions = proxy.Options
)

// testLogger logs to the test's output at Warn, or at Debug with
// TRELLIS_IT_DEBUG set (the engine's retried steps and pages in a
// failure's output).
func testLogger(t *testing.T) *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("TRELLIS_IT_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: level}))
}
