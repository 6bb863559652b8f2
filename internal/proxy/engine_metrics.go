package proxy

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trellis-proxy/trellis-proxy/engine"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// engineMetrics adapts engine.Metrics to Prometheus: the distributions of
// this process's seal, drain-page and build-task work (surface §14), and
// page failures by SQLSTATE class. Labels are bounded: no transform, key or
// statement.
type engineMetrics struct {
	visible   prometheus.Histogram
	seal      prometheus.Histogram
	page      prometheus.Histogram
	build     prometheus.Histogram
	pageFails *prometheus.CounterVec
	taskFails *prometheus.CounterVec
	t         *transformMetrics // per transform (transform_metrics.go)
}

var workBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

func newEngineMetrics(reg prometheus.Registerer) *engineMetrics {
	m := &engineMetrics{
		visible: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "trellis_commit_to_visible_seconds",
			Help: "Per drain page committed by this process: its oldest change's wait from the writer's transaction start to visible in the targets.", Buckets: workBuckets}),
		seal: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "trellis_seal_seconds",
			Help: "Seals by this process that committed a batch: probe to commit.", Buckets: workBuckets}),
		page: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "trellis_drain_page_seconds",
			Help: "Drain pages applied by this process's workers: claim to commit.", Buckets: workBuckets}),
		build: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "trellis_build_task_seconds",
			Help: "Build tasks (plan, chunk, sweep) run by this process's workers.", Buckets: workBuckets}),
		pageFails: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_drain_page_failures_total",
			Help: "Drain pages that failed in this process, by SQLSTATE class (40 and 55 are retried without charge)."}, []string{"sqlstate_class"}),
		taskFails: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_build_task_failures_total",
			Help: "Build tasks that failed in this process, by SQLSTATE class."}, []string{"sqlstate_class"}),
	}
	reg.MustRegister(m.visible, m.seal, m.page, m.build, m.pageFails, m.taskFails)
	m.t = newTransformMetrics(reg)
	return m
}

var _ engine.Metrics = (*engineMetrics)(nil)

func (m *engineMetrics) ChangeVisible(took time.Duration) { m.visible.Observe(took.Seconds()) }

func (m *engineMetrics) BatchSealed(took time.Duration) { m.seal.Observe(took.Seconds()) }

func (m *engineMetrics) PageDone(took time.Duration, err error) {
	if err != nil {
		m.pageFails.WithLabelValues(sqlstateClass(pgerr.CodeOf(err))).Inc()
		return
	}
	m.page.Observe(took.Seconds())
}

func (m *engineMetrics) BuildTaskDone(took time.Duration, err error) {
	if err != nil {
		m.taskFails.WithLabelValues(sqlstateClass(pgerr.CodeOf(err))).Inc()
		return
	}
	m.build.Observe(took.Seconds())
}
