package proxy

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trellis-proxy/trellis-proxy/engine"
)

// transformMetrics are the per-transform series (issue 17): label
// "transform" (the target's canonical name, one series per transform) plus
// the instance label every trellis_* series carries; never a key or a
// statement. A dropped transform's series stay until the process restarts.
type transformMetrics struct {
	visible *prometheus.HistogramVec
	keys    *prometheus.CounterVec
	scPages *prometheus.CounterVec
	scDivs  *prometheus.CounterVec
	applied *prometheus.CounterVec
	e2e     *prometheus.HistogramVec
}

func newTransformMetrics(reg prometheus.Registerer) *transformMetrics {
	l := []string{"transform"}
	m := &transformMetrics{
		visible: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "trellis_transform_commit_to_visible_seconds",
			Help: "Per drain page committed by this process and transform it re-derived: its oldest change's wait from the writer's transaction start to visible.", Buckets: workBuckets}, l),
		keys: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_transform_keys_rederived_total",
			Help: "Keys re-derived by committed drain pages of this process, per transform."}, l),
		scPages: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_transform_self_check_pages_total",
			Help: "Self-check pages saved by this process's workers, per target."}, l),
		scDivs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_transform_self_check_divergences_total",
			Help: "Divergences found by self-check pages of this process, per target."}, l),
		applied: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_transform_changes_applied_total",
			Help: "Changes (changed source keys, a TRUNCATE counting one) applied by committed drain pages of this process, per transform."}, l),
		e2e: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "trellis_transform_end_to_end_latency_seconds",
			Help: "Per drain page committed by this process into the last transform of a chain (one no transform reads): its oldest change's wait from the original writer's transaction start, through every hop, to visible.", Buckets: workBuckets}, l),
	}
	reg.MustRegister(m.visible, m.keys, m.scPages, m.scDivs, m.applied, m.e2e)
	return m
}

var _ engine.TransformMetrics = (*engineMetrics)(nil)

func (m *engineMetrics) TransformPage(transform string, keys int, visible time.Duration) {
	m.t.keys.WithLabelValues(transform).Add(float64(keys))
	if visible > 0 {
		m.t.visible.WithLabelValues(transform).Observe(visible.Seconds())
	}
}

func (m *engineMetrics) SelfCheckPage(transform string, _ time.Duration, divergences int) {
	m.t.scPages.WithLabelValues(transform).Inc()
	m.t.scDivs.WithLabelValues(transform).Add(float64(divergences))
}

func (m *engineMetrics) TransformApplied(transform string, changes int, endToEnd time.Duration) {
	m.t.applied.WithLabelValues(transform).Add(float64(changes))
	if endToEnd > 0 {
		m.t.e2e.WithLabelValues(transform).Observe(endToEnd.Seconds())
	}
}
