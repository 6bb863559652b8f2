// Package proxy wires trellis-proxy together: configuration, the embedded
// cluster, the wire server, the HTTP listener and graceful shutdown, under one
// errgroup. cmd/trellis-proxy parses flags into a Config and calls Run; the
// integration tests call Run in-process on 127.0.0.1:0.
package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/trellis-proxy/trellis-proxy/internal/pgcluster"
	"github.com/trellis-proxy/trellis-proxy/wire"
)

// Config is the whole serve configuration (surface §17.2). Engine settings
// are accepted and validated here for the engine to use.
type Config struct {
	Listen            string
	Upstream          string
	DataDir           string
	PGBin             string
	RunAs             string
	EmbeddedPassword  string
	Ephemeral         bool
	TLSCert, TLSKey   string
	HTTPListen        string
	LogLevel          string
	LogFormat         string
	MaxClientConns    int
	MaxAuthenticating int    // 0: no cap
	InstanceID        int    // 1-2047, this proxy's id in the cancel keys it mints; 0: random
	CancelPeers       string // "id=host:port,...": the fleet's other proxies, for cancels
	MaxMessageSize    int
	AuthTimeout       time.Duration
	ShutdownGrace     time.Duration

	// Engine settings (used by the engine once it is wired in).
	Schema          string
	TargetSchema    string
	Staging         string
	DrainWorkers    int
	Migrate         bool
	PoolMaxSize     int
	PoolWaitTimeout time.Duration
	CallBudget      time.Duration
	LockTimeout     time.Duration

	// Engine tuning knobs (D17); zero takes the engine's default.
	SealInterval     time.Duration // staging: probe for new changes (50ms)
	PollInterval     time.Duration // idle drain workers re-check (1s)
	Heartbeat        time.Duration // worker heartbeat (10s)
	WorkerTTL        time.Duration // a silent worker counts as dead (30s)
	TakeoverInterval time.Duration // standbys retry the staging lock (2s)

	// Routing sends client statements through the Trellis router (the
	// default). Off, the proxy relays every statement untouched while its
	// engine still runs: the baseline of the passthrough benchmark
	// (--routing=false, for benchmarks only: Trellis statements then reach
	// Postgres, which reports syntax errors).
	Routing bool

	// MetricsInterval is how often the engine gauges are read from the
	// catalog (surface §13: 300ms); not a flag.
	MetricsInterval time.Duration
	// ProcessID names this process in the fleet (default host:pid); tests
	// that run several proxies in one process set it.
	ProcessID string
}

// Default returns the documented defaults.
func Default() Config {
	return Config{
		Listen: "127.0.0.1:6432", LogLevel: "info", LogFormat: "text",
		ShutdownGrace: 30 * time.Second, AuthTimeout: 60 * time.Second,
		Schema: "trellis", TargetSchema: "public", Staging: "auto", DrainWorkers: 2, Migrate: true, Routing: true,
		PoolMaxSize: 20, PoolWaitTimeout: 30 * time.Second, CallBudget: 30 * time.Second, LockTimeout: 30 * time.Second,
	}
}

// DefaultDataDir is $XDG_DATA_HOME/trellis-proxy/pgdata or
// ~/.local/share/trellis-proxy/pgdata.
func DefaultDataDir() string {
	base := os.Getenv("XDG_DATA_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = "."
		}
		base = filepath.Join(home, ".local", "share")
	}
	return filepath.Join(base, "trellis-proxy", "pgdata")
}

// FlagError is a configuration error that names the flag at fault; cmd exits
// 2 on it.
type FlagError struct{ Flag, Msg string }

func (e *FlagError) Error() string { return "--" + e.Flag + ": " + e.Msg }

// Validate checks the configuration; errors name the flag.
func (c *Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return &FlagError{"listen", fmt.Sprintf("invalid address %q: %v", c.Listen, err)}
	}
	if c.HTTPListen != "" {
		if _, _, err := net.SplitHostPort(c.HTTPListen); err != nil {
			return &FlagError{"http-listen", fmt.Sprintf("invalid address %q: %v", c.HTTPListen, err)}
		}
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		if c.TLSCert == "" {
			return &FlagError{"tls-cert", "required with --tls-key"}
		}
		return &FlagError{"tls-key", "required with --tls-cert"}
	}
	switch strings.ToLower(c.LogLevel) {
	case "debug", "info", "warn", "error":
	default:
		return &FlagError{"log-level", fmt.Sprintf("must be debug, info, warn or error, not %q", c.LogLevel)}
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		return &FlagError{"log-format", fmt.Sprintf("must be text or json, not %q", c.LogFormat)}
	}
	switch c.Staging {
	case "on", "off", "auto":
	default:
		return &FlagError{"staging", fmt.Sprintf("must be on, off or auto, not %q", c.Staging)}
	}
	for _, n := range []struct {
		flag string
		v    int
	}{{"max-client-conns", c.MaxClientConns}, {"max-authenticating", c.MaxAuthenticating}, {"drain-workers", c.DrainWorkers}, {"max-message-size", c.MaxMessageSize}} {
		if n.v < 0 {
			return &FlagError{n.flag, "must be >= 0"}
		}
	}
	if c.PoolMaxSize < 1 {
		return &FlagError{"pool-max-size", "must be >= 1"}
	}
	if c.InstanceID < 0 || c.InstanceID > 2047 {
		return &FlagError{"instance-id", "must be between 0 and 2047"}
	}
	if _, err := c.cancelPeers(); err != nil {
		return err
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"shutdown-grace", c.ShutdownGrace}, {"auth-timeout", c.AuthTimeout}, {"pool-wait-timeout", c.PoolWaitTimeout},
		{"call-budget", c.CallBudget}, {"lock-timeout", c.LockTimeout}, {"seal-interval", c.SealInterval},
		{"poll-interval", c.PollInterval}, {"heartbeat", c.Heartbeat}, {"worker-ttl", c.WorkerTTL}, {"takeover-interval", c.TakeoverInterval}} {
		if d.v < 0 {
			return &FlagError{d.flag, "must not be negative"}
		}
	}
	if c.Schema == "" || c.Schema == "public" {
		return &FlagError{"schema", "must be set and not public"}
	}
	if c.Upstream != "" {
		if _, err := pgconn.ParseConfig(c.Upstream); err != nil {
			return &FlagError{"upstream", redact(err.Error())}
		}
	} else if c.EmbeddedPassword == "" {
		host, _, _ := net.SplitHostPort(c.Listen)
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return &FlagError{"listen", "a non-loopback address with the embedded cluster needs --embedded-password (otherwise anyone who reaches the port is a superuser)"}
		}
	}
	return nil
}

func redact(s string) string {
	// pgconn's ParseConfigError already redacts passwords; keep one line.
	return strings.ReplaceAll(s, "\n", " ")
}

// NewLogger builds the slog logger of the configuration.
func NewLogger(c Config, w io.Writer) *slog.Logger {
	var lvl slog.Level
	lvl.UnmarshalText([]byte(c.LogLevel))
	opts := &slog.HandlerOptions{Level: lvl}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// Options are the in-process hooks of Run.
type Options struct {
	Logger      *slog.Logger // default slog.Default()
	Stdout      io.Writer    // receives the psql line in embedded mode; nil discards
	Interceptor wire.Interceptor
	// Ready is called once the proxy accepts connections.
	Ready func(Info)
	// Registry receives the metrics; nil means a private registry.
	Registry *prometheus.Registry
	// UpstreamTLS overrides the TLS config for upstream connections (tests).
	UpstreamTLS *tls.Config
	// RelayOnly runs the relay without the engine and its interceptor: no
	// catalog, no workers (relay tests and benchmarks of the bare relay).
	RelayOnly bool
	// Version is the binary's version, shown by trellis.config.
	Version string
}

// Info describes a running proxy.
type Info struct {
	Addr     net.Addr // client listener
	HTTPAddr net.Addr // nil when --http-listen is off
	Server   *wire.Server
	Cluster  *pgcluster.Cluster // the embedded cluster, if any
	// UpstreamURL reaches the upstream directly (for tests and workers).
	UpstreamURL string
}

// Run serves until ctx is cancelled, then shuts down gracefully: stop
// accepting, idle sessions get 57P01, busy ones get ShutdownGrace. It returns
// nil after a clean shutdown.
func Run(ctx context.Context, cfg Config, opts Options) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	stdout := opts.Stdout
	if stdout == nil {
		stdout = io.Discard
	}

	upCfg, upURL, cluster, stopCluster, err := openUpstream(ctx, cfg, opts.UpstreamTLS, log)
	if err != nil {
		return err
	}
	defer stopCluster()

	var tlsCfg *tls.Config
	if cfg.TLSCert != "" {
		cr := &certReloader{cert: cfg.TLSCert, key: cfg.TLSKey}
		if _, err := cr.get(nil); err != nil {
			return &FlagError{"tls-cert", err.Error()}
		}
		tlsCfg = &tls.Config{GetCertificate: cr.get, MinVersion: tls.VersionTLS12}
	}

	reg := opts.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	// Every trellis_* series and every log record carries the instance
	// (surface §14, §15).
	inst := instanceName(upURL, cfg.Schema)
	instReg := prometheus.WrapRegistererWith(prometheus.Labels{InstanceLabel: inst}, reg)
	log = log.With(InstanceLabel, inst)
	metrics := NewMetrics(instReg)

	interceptor := opts.Interceptor
	var side *trellisSide
	if !opts.RelayOnly {
		side, err = newTrellisSide(ctx, cfg, upURL, upCfg, reg, instReg, log)
		if err != nil {
			return err
		}
		side.relations.version = opts.Version
		defer side.close()
		if interceptor == nil && cfg.Routing {
			interceptor = side.interceptor
		}
	}
	if _, pass := interceptor.(wire.PassThrough); interceptor != nil && !pass {
		interceptor = timedInterceptor{Interceptor: interceptor, m: metrics}
	}

	peers, err := cfg.cancelPeers()
	if err != nil {
		return err
	}
	srv, err := wire.NewServer(wire.Config{
		Upstream: upCfg, TLS: tlsCfg, Interceptor: interceptor, Logger: log.With("component", "wire"), Metrics: metrics,
		MaxClientConns: cfg.MaxClientConns, MaxAuthenticating: cfg.MaxAuthenticating, MaxMessageSize: cfg.MaxMessageSize, AuthTimeout: cfg.AuthTimeout,
		InstanceID: uint16(cfg.InstanceID), CancelPeers: peers,
	})
	if err != nil {
		return err
	}
	metrics.setRelayed(srv.Relayed)
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return &FlagError{"listen", err.Error()}
	}
	var hln net.Listener
	if cfg.HTTPListen != "" {
		if hln, err = net.Listen("tcp", cfg.HTTPListen); err != nil {
			ln.Close()
			return &FlagError{"http-listen", err.Error()}
		}
	}

	g, gctx := errgroup.WithContext(ctx)
	if side != nil {
		g.Go(func() error { return side.run(gctx) })
		log.Info("workers started", "staging", cfg.Staging, "drain_workers", cfg.DrainWorkers)
	}
	g.Go(func() error {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, wire.ErrServerClosed) {
			return fmt.Errorf("serving %s: %w", cfg.Listen, err)
		}
		return nil
	})
	if hln != nil {
		var ready func(context.Context) error
		if side != nil {
			ready = side.ready
		}
		hs := &http.Server{Handler: httpHandler(reg, upCfg, ready), ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 10 * time.Second, MaxHeaderBytes: 8 << 10}
		g.Go(func() error {
			if err := hs.Serve(hln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
		g.Go(func() error {
			<-gctx.Done()
			sctx, cancel := context.WithTimeout(context.WithoutCancel(gctx), 5*time.Second)
			defer cancel()
			return hs.Shutdown(sctx)
		})
	}
	g.Go(func() error {
		<-gctx.Done()
		log.Info("shutting down", "cause", context.Cause(gctx))
		// The drain runs on a context of its own: gctx is already done.
		drain, cancel := context.WithTimeout(context.WithoutCancel(gctx), cfg.ShutdownGrace)
		defer cancel()
		if err := srv.Shutdown(drain); err != nil {
			// The grace ran out: the sessions still busy were closed, which
			// is what the grace is for, not a failure of the proxy.
			log.Warn("shutdown grace ran out; busy sessions were closed", "grace", cfg.ShutdownGrace)
		}
		return nil
	})

	info := Info{Addr: ln.Addr(), Server: srv, Cluster: cluster, UpstreamURL: upURL}
	if hln != nil {
		info.HTTPAddr = hln.Addr()
	}
	if side != nil {
		httpAddr, dataDir := "", ""
		if hln != nil {
			httpAddr = hln.Addr().String()
		}
		if cluster != nil {
			dataDir = cluster.DataDir
		}
		side.relations.serving(ln.Addr().String(), httpAddr, dataDir)
	}
	log.Info("listening", "listen", ln.Addr().String(), "tls", tlsCfg != nil)
	if cluster != nil {
		fmt.Fprintf(stdout, "psql \"postgres://postgres@%s/postgres\"\n", ln.Addr().String())
	}
	if opts.Ready != nil {
		opts.Ready(info)
	}
	err = g.Wait()
	srv.Wait()
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	log.Info("shut down cleanly")
	return nil
}

func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// upstreamFromPgconn maps a parsed upstream URL to the wire layer's dial
// settings: the first host, and sslmode reconstructed from pgconn's TLS
// fallbacks (prefer has a plaintext fallback; require does not).
func upstreamFromPgconn(pc *pgconn.Config) wire.UpstreamConfig {
	u := wire.UpstreamConfig{Network: "tcp", Address: net.JoinHostPort(pc.Host, strconv.Itoa(int(pc.Port))), SSLMode: "disable"}
	if strings.HasPrefix(pc.Host, "/") {
		u.Network = "unix"
		u.Address = filepath.Join(pc.Host, ".s.PGSQL."+strconv.Itoa(int(pc.Port)))
		return u
	}
	if pc.TLSConfig != nil {
		u.SSLMode = "require"
		for _, fb := range pc.Fallbacks {
			if fb.TLSConfig == nil {
				u.SSLMode = "prefer"
			}
		}
		u.TLSConfig = pc.TLSConfig.Clone()
	}
	return u
}

// certReloader serves the certificate files, re-reading them when they
// change, so certificates rotate without a restart.
type certReloader struct {
	cert, key string
	mu        sync.Mutex
	modCert   time.Time
	modKey    time.Time
	cached    *tls.Certificate
}

func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sc, err1 := os.Stat(r.cert)
	sk, err2 := os.Stat(r.key)
	if err1 == nil && err2 == nil && r.cached != nil && sc.ModTime().Equal(r.modCert) && sk.ModTime().Equal(r.modKey) {
		return r.cached, nil
	}
	c, err := tls.LoadX509KeyPair(r.cert, r.key)
	if err != nil {
		if r.cached != nil {
			return r.cached, nil // keep serving the last good one
		}
		return nil, err
	}
	r.cached = &c
	if err1 == nil && err2 == nil {
		r.modCert, r.modKey = sc.ModTime(), sk.ModTime()
	}
	return r.cached, nil
}

// httpHandler serves /metrics, /livez and /readyz (surface §16). ready, when
// set, checks the catalog and the fleet after the upstream is reachable; the
// answer is cached for 1 s so probes from many places cost one check.
func httpHandler(reg *prometheus.Registry, up wire.UpstreamConfig, ready func(context.Context) error) http.Handler {
	mux := http.NewServeMux()
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true})
	getOnly := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				w.Header().Set("Allow", "GET, HEAD")
				w.WriteHeader(http.StatusMethodNotAllowed)
				return
			}
			h(w, r)
		}
	}
	mux.HandleFunc("/metrics", getOnly(metrics.ServeHTTP))
	mux.HandleFunc("/livez", getOnly(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	var (
		mu      sync.Mutex
		checked time.Time
		lastErr error
	)
	check := func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		d := net.Dialer{}
		c, err := d.DialContext(ctx, up.Network, up.Address)
		if err != nil {
			return fmt.Errorf("upstream unreachable: %s", oneLine(err))
		}
		c.Close()
		if ready != nil {
			return ready(ctx)
		}
		return nil
	}
	mux.HandleFunc("/readyz", getOnly(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if time.Since(checked) >= time.Second {
			// The check outlives a probe that gives up: the next one reuses it.
			lastErr, checked = check(context.WithoutCancel(r.Context())), time.Now()
		}
		err := lastErr
		mu.Unlock()
		if err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, err.Error())
			return
		}
		io.WriteString(w, "ok")
	}))
	return mux
}

// instanceName is the trellis_instance label: "<database>/<catalog schema>".
func instanceName(upURL, schema string) string {
	db := "postgres"
	if pc, err := pgconn.ParseConfig(upURL); err == nil && pc.Database != "" {
		db = pc.Database
	}
	return db + "/" + schema
}

// openUpstream finds the upstream: the --upstream URL, checked reachable, or
// the embedded cluster, started (or adopted) here. stop stops an embedded
// cluster and does nothing otherwise.
func openUpstream(ctx context.Context, cfg Config, upstreamTLS *tls.Config, log *slog.Logger) (upCfg wire.UpstreamConfig, upURL string, cluster *pgcluster.Cluster, stop func(), err error) {
	stop = func() {}
	if cfg.Upstream == "" {
		dataDir := cfg.DataDir
		if cfg.Ephemeral {
			dataDir = ""
		} else if dataDir == "" {
			dataDir = DefaultDataDir()
		}
		startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		c, err := pgcluster.Start(startCtx, pgcluster.Options{DataDir: dataDir, BinDir: cfg.PGBin, RunAs: cfg.RunAs, Port: -1, Password: cfg.EmbeddedPassword})
		cancel()
		if err != nil {
			return upCfg, "", nil, stop, fmt.Errorf("starting the embedded PostgreSQL cluster: %w", err)
		}
		stop = func() {
			if err := c.Stop(); err != nil {
				log.Warn("stopping the embedded cluster", "error", err)
			} else {
				log.Info("stopped private PostgreSQL cluster")
			}
		}
		log.Info("started private PostgreSQL cluster", "version", c.Version, "data_dir", c.DataDir, "reused", c.Reused)
		upCfg = wire.UpstreamConfig{Network: "unix", Address: c.SocketPath(), SSLMode: "disable"}
		return upCfg, c.SocketURL("postgres"), c, stop, nil
	}
	pc, err := pgconn.ParseConfig(cfg.Upstream)
	if err != nil {
		return upCfg, "", nil, stop, &FlagError{"upstream", redact(err.Error())}
	}
	upCfg = upstreamFromPgconn(pc)
	if upstreamTLS != nil {
		upCfg.TLSConfig = upstreamTLS
	}
	// Fail fast with one line when the upstream cannot be reached.
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	conn, err := pgconn.ConnectConfig(pctx, pc)
	cancel()
	if err != nil {
		return upCfg, "", nil, stop, fmt.Errorf("upstream unreachable: %s", oneLine(err))
	}
	conn.Close(context.Background())
	return upCfg, cfg.Upstream, nil, stop, nil
}

// Migrate creates or upgrades the catalog and its SQL surface, as serve does
// at start, and returns the one-line report (`trellis-proxy migrate`).
func Migrate(ctx context.Context, cfg Config, log *slog.Logger) (string, error) {
	upCfg, upURL, _, stop, err := openUpstream(ctx, cfg, nil, log)
	if err != nil {
		return "", err
	}
	defer stop()
	cfg.Migrate = false // migrate once, below, and report it
	side, err := newTrellisSide(ctx, cfg, upURL, upCfg, prometheus.NewRegistry(), nil, log)
	if err != nil {
		return "", err
	}
	defer side.close()
	return side.migrate(ctx)
}

// cancelPeers parses --cancel-peers: "id=host:port" items, comma separated,
// each id a fleet proxy's --instance-id other than this one's.
func (c *Config) cancelPeers() (map[uint16]string, error) {
	if strings.TrimSpace(c.CancelPeers) == "" {
		return nil, nil
	}
	if c.InstanceID == 0 {
		return nil, &FlagError{"cancel-peers", "needs --instance-id, so that the peers can tell this proxy's keys from theirs"}
	}
	peers := map[uint16]string{}
	for _, item := range strings.Split(c.CancelPeers, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(item), "=")
		n, err := strconv.Atoi(id)
		if !ok || err != nil || n < 1 || n > 2047 || n == c.InstanceID {
			return nil, &FlagError{"cancel-peers", fmt.Sprintf("%q: want id=host:port with an id from 1 to 2047 other than --instance-id", item)}
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, &FlagError{"cancel-peers", fmt.Sprintf("%q: %v", item, err)}
		}
		peers[uint16(n)] = addr
	}
	return peers, nil
}
