package proxy

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/trellis-proxy/trellis-proxy/pgerr"
	"github.com/trellis-proxy/trellis-proxy/wire"
)

// Version is the proxy's version, reported by trellis_proxy_build_info.
const Version = "0.1.0"

// InstanceLabel is the label every trellis_* series carries (surface §14):
// not "instance", which Prometheus adds itself.
const InstanceLabel = "trellis_instance"

// connectBuckets suit connect times: a local socket answers in well under a
// millisecond, a remote TLS upstream in tens of milliseconds.
var connectBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// defaultBuckets are surface §14's.
var defaultBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60}

// Metrics is the wire layer's Prometheus adapter (surface §14, proxy
// families). Every event is a connection, a statement or an error; relayed
// bytes and messages are read from the server at scrape time.
type Metrics struct {
	active      prometheus.Gauge
	connections prometheus.Counter
	sessions    *prometheus.CounterVec
	sessionsBy  map[string]prometheus.Counter // pre-resolved outcomes
	handshake   prometheus.Histogram
	tlsOK       prometheus.Counter
	tlsFailed   prometheus.Counter
	dial        prometheus.Histogram
	dialFailed  prometheus.Counter
	intercept   *prometheus.CounterVec
	cancels     map[string]prometheus.Counter
	errors      *prometheus.CounterVec
	calls       *prometheus.HistogramVec
	callErrors  *prometheus.CounterVec
	waits       *prometheus.CounterVec

	relayed atomic.Pointer[func() wire.RelayStats]
}

// sessionOutcomes map wire's outcomes to surface §14's, all exported from the
// start at 0 so a rate() over them works from the first scrape. A client
// that leaves (with or without Terminate) ended normally.
var sessionOutcomes = map[string]string{"ok": "ok", "client_gone": "ok", "client_error": "protocol_error",
	"upstream_error": "upstream_error", "shutdown": "shutdown", "refused": "refused", "auth_failed": "auth_failed"}

// NewMetrics registers the wire metrics on reg (wrap it with the instance
// label first).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		active:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "trellis_proxy_client_sessions", Help: "Open client sessions (past startup)."}),
		connections: prometheus.NewCounter(prometheus.CounterOpts{Name: "trellis_proxy_client_connections_total", Help: "Client connections accepted, cancel requests included."}),
		sessions:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_proxy_sessions_total", Help: "Ended client connections by outcome; refused = over --max-client-conns."}, []string{"outcome"}),
		handshake: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "trellis_proxy_handshake_seconds",
			Help: "Client connect to first ReadyForQuery.", Buckets: defaultBuckets}),
		dial: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "trellis_proxy_upstream_connect_seconds",
			Help: "Upstream connect (TCP and TLS) per client session.", Buckets: connectBuckets}),
		dialFailed: prometheus.NewCounter(prometheus.CounterOpts{Name: "trellis_proxy_upstream_connect_failures_total", Help: "Upstream connects that failed."}),
		intercept:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_proxy_intercepted_total", Help: "Statements and calls the proxy answered itself, by statement keyword or function."}, []string{"kind"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_proxy_errors_total",
			Help: "ErrorResponses sent to clients, by source (upstream or proxy) and SQLSTATE class."}, []string{"source", "sqlstate_class"}),
		calls: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "trellis_proxy_call_seconds",
			Help: "Duration of units the proxy answered itself, by statement keyword or function.", Buckets: defaultBuckets}, []string{"call"}),
		callErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_proxy_call_errors_total",
			Help: "Units the proxy answered itself that failed."}, []string{"call", "sqlstate_class"}),
		waits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_convergence_waits_total",
			Help: "Convergence waits (await_converged, try_await_converged, await_live) by call and outcome."}, []string{"call", "outcome"}),
	}
	tls := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_proxy_tls_handshakes_total", Help: "Client-leg TLS handshakes by outcome."}, []string{"outcome"})
	m.tlsOK, m.tlsFailed = tls.WithLabelValues("ok"), tls.WithLabelValues("failed")
	m.sessionsBy = map[string]prometheus.Counter{}
	for wireName, name := range sessionOutcomes {
		m.sessionsBy[wireName] = m.sessions.WithLabelValues(name)
	}
	cancels := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_proxy_cancel_requests_total", Help: "CancelRequests by outcome."}, []string{"outcome"})
	m.cancels = map[string]prometheus.Counter{
		"upstream": cancels.WithLabelValues("forwarded"),
		"local":    cancels.WithLabelValues("local"),
		"unknown":  cancels.WithLabelValues("unknown_key"),
		"fleet":    cancels.WithLabelValues("fleet"),
	}
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "trellis_proxy_build_info", Help: "Always 1; the labels say which build runs."}, []string{"version", "go_version"})
	build.WithLabelValues(Version, runtime.Version()).Set(1)
	reg.MustRegister(m.active, m.connections, m.sessions, m.handshake, tls, m.dial, m.dialFailed, m.intercept, cancels,
		m.errors, m.calls, m.callErrors, m.waits, build, relayCollector{m})
	return m
}

// setRelayed tells the scrape where relayed traffic is counted.
func (m *Metrics) setRelayed(f func() wire.RelayStats) { m.relayed.Store(&f) }

func (m *Metrics) ConnectionAccepted() { m.connections.Inc() }
func (m *Metrics) SessionOpened()      { m.active.Inc() }
func (m *Metrics) SessionClosed(outcome string) {
	if outcome != "refused" {
		m.active.Dec()
	}
	if c, ok := m.sessionsBy[outcome]; ok {
		c.Inc()
		return
	}
	m.sessions.WithLabelValues("other").Inc()
}
func (m *Metrics) SessionReady(d time.Duration) { m.handshake.Observe(d.Seconds()) }
func (m *Metrics) TLSHandshake(outcome string) {
	if outcome == "ok" {
		m.tlsOK.Inc()
	} else {
		m.tlsFailed.Inc()
	}
}
func (m *Metrics) UpstreamDialed(d time.Duration, ok bool) {
	if !ok {
		m.dialFailed.Inc()
		return
	}
	m.dial.Observe(d.Seconds())
}
func (m *Metrics) Intercepted(kind string) { m.intercept.WithLabelValues(kind).Inc() }
func (m *Metrics) CancelRouted(result string) {
	if c, ok := m.cancels[result]; ok {
		c.Inc()
	}
}
func (m *Metrics) ErrorSent(source, sqlstate string) {
	m.errors.WithLabelValues(source, sqlstateClass(sqlstate)).Inc()
}

// sqlstateClass is the two-character class, or "other" for anything that is
// not a SQLSTATE (bounding the label even against a misbehaving upstream).
func sqlstateClass(code string) string {
	if len(code) != 5 {
		return "other"
	}
	for i := 0; i < 2; i++ {
		if c := code[i]; !(c >= '0' && c <= '9' || c >= 'A' && c <= 'Z') {
			return "other"
		}
	}
	return code[:2]
}

var relayDescs = struct{ bytes, msgs *prometheus.Desc }{
	prometheus.NewDesc("trellis_proxy_relay_bytes_total", "Protocol bytes read after startup, by direction (client_to_server: from clients).", []string{"direction"}, nil),
	prometheus.NewDesc("trellis_proxy_relay_messages_total", "Protocol messages read after startup, by direction.", []string{"direction"}, nil),
}

// relayCollector reads the wire server's relay totals at scrape time.
type relayCollector struct{ m *Metrics }

func (c relayCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- relayDescs.bytes
	ch <- relayDescs.msgs
}

func (c relayCollector) Collect(ch chan<- prometheus.Metric) {
	var r wire.RelayStats
	if f := c.m.relayed.Load(); f != nil {
		r = (*f)()
	}
	ch <- prometheus.MustNewConstMetric(relayDescs.bytes, prometheus.CounterValue, float64(r.ClientToServerBytes), "client_to_server")
	ch <- prometheus.MustNewConstMetric(relayDescs.bytes, prometheus.CounterValue, float64(r.ServerToClientBytes), "server_to_client")
	ch <- prometheus.MustNewConstMetric(relayDescs.msgs, prometheus.CounterValue, float64(r.ClientToServerMessages), "client_to_server")
	ch <- prometheus.MustNewConstMetric(relayDescs.msgs, prometheus.CounterValue, float64(r.ServerToClientMessages), "server_to_client")
}

// timedInterceptor wraps the Trellis interceptor to time and count the units
// it answers; Describe and DescribeParams pass through.
type timedInterceptor struct {
	wire.Interceptor
	m *Metrics
}

func (t timedInterceptor) Execute(ctx context.Context, s *wire.SessionInfo, c *wire.Call, up wire.Upstream, w wire.ResultWriter) error {
	start := time.Now()
	err := t.Interceptor.Execute(ctx, s, c, up, w)
	call := c.Route.Kind
	t.m.calls.WithLabelValues(call).Observe(time.Since(start).Seconds())
	if err != nil {
		code := pgerr.InternalError
		if e, ok := pgerr.As(err); ok && e.Code != "" {
			code = e.Code
		}
		t.m.callErrors.WithLabelValues(call, sqlstateClass(code)).Inc()
	}
	switch call {
	case "await_converged", "try_await_converged", "await_live":
		outcome := "ok"
		if err != nil {
			outcome = "error"
		}
		t.m.waits.WithLabelValues(call, outcome).Inc()
	}
	return err
}

func (t timedInterceptor) Describe(s *wire.SessionInfo, sql string, r wire.Route) ([]pgproto3.FieldDescription, error) {
	if d, ok := t.Interceptor.(wire.Describer); ok {
		return d.Describe(s, sql, r)
	}
	return nil, nil
}

func (t timedInterceptor) DescribeParams(s *wire.SessionInfo, sql string, r wire.Route) []uint32 {
	if d, ok := t.Interceptor.(wire.ParamDescriber); ok {
		return d.DescribeParams(s, sql, r)
	}
	return nil
}
