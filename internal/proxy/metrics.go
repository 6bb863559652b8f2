package proxy

import "github.com/prometheus/client_golang/prometheus"

// Metrics is the wire layer's Prometheus adapter (a minimal set until the
// observability work).
type Metrics struct {
	active    prometheus.Gauge
	sessions  *prometheus.CounterVec
	intercept *prometheus.CounterVec
	cancels   *prometheus.CounterVec
}

// NewMetrics registers the wire metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		active:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "trellis_client_sessions_active", Help: "Client sessions past startup."}),
		sessions:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_client_sessions_total", Help: "Client sessions by outcome."}, []string{"outcome"}),
		intercept: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_intercepted_statements_total", Help: "Statements answered by the proxy."}, []string{"kind"}),
		cancels:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_cancel_requests_total", Help: "CancelRequests by routing result."}, []string{"result"}),
	}
	reg.MustRegister(m.active, m.sessions, m.intercept, m.cancels)
	return m
}

func (m *Metrics) SessionOpened() { m.active.Inc() }
func (m *Metrics) SessionClosed(outcome string) {
	if outcome != "refused" {
		m.active.Dec()
	}
	m.sessions.WithLabelValues(outcome).Inc()
}
func (m *Metrics) Intercepted(kind string)    { m.intercept.WithLabelValues(kind).Inc() }
func (m *Metrics) CancelRouted(result string) { m.cancels.WithLabelValues(result).Inc() }
