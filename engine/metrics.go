package engine

import (
	"time"

	"github.com/trellis-proxy/trellis-proxy/engine/catalog"
)

// FormatVersion is the catalog format this build writes and expects. The
// proxy's /readyz compares it with the catalog's (surface §16), so a fleet
// member older than its catalog turns unready instead of misreading it.
func FormatVersion() int { return catalog.FormatVersion }

// Metrics receives the engine's in-process events, for the distributions a
// person plots (surface §14); the proxy adapts it to Prometheus. Calls are on
// the workers' paths, so implementations must be cheap and safe for
// concurrent use. A nil Config.Metrics means none.
type Metrics interface {
	// BatchSealed follows a seal that committed a new batch.
	BatchSealed(took time.Duration)
	// PageDone follows one drain page: err is nil when it committed.
	PageDone(took time.Duration, err error)
	// BuildTaskDone follows one build task (plan, chunk or sweep).
	BuildTaskDone(took time.Duration, err error)
	// ChangeVisible follows a committed page: how long its oldest change
	// took from the writer's transaction start (the log row's staged_at) to
	// visible in the targets.
	ChangeVisible(took time.Duration)
}

type noMetrics struct{}

func (noMetrics) BatchSealed(time.Duration)          {}
func (noMetrics) PageDone(time.Duration, error)      {}
func (noMetrics) BuildTaskDone(time.Duration, error) {}
func (noMetrics) ChangeVisible(time.Duration)        {}

func (e *Engine) metrics() Metrics {
	if e.cfg.Metrics == nil {
		return noMetrics{}
	}
	return e.cfg.Metrics
}
