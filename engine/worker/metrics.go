package worker

import (
	"time"
)

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

func (e *Env) Metrics() Metrics {
	if e.Cfg.Metrics == nil {
		return noMetrics{}
	}
	return e.Cfg.Metrics
}

// TransformMetrics is implemented by a Config.Metrics that also keeps
// per-transform figures (optional, so Metrics stays as other code
// implements it). transform is the target's canonical name: one series per
// transform, bounded by the catalog, never a key or a statement. Calls
// follow commits only.
type TransformMetrics interface {
	// TransformPage follows a committed drain page, once per transform it
	// re-derived keys for: how many, and the page's commit-to-visible
	// latency (zero when the page did not measure one).
	TransformPage(transform string, keys int, visible time.Duration)
	// SelfCheckPage follows a saved self-check page of a target.
	SelfCheckPage(transform string, took time.Duration, divergences int)
	// TransformApplied follows a committed drain page, once per transform
	// whose share of it applied: the changes applied (changed source keys
	// of the page, a TRUNCATE counting one) and, for the last transform of
	// a chain (one no transform reads), the end-to-end latency of the
	// page's oldest change, from the original writer's transaction start,
	// inherited down the chain, to visible here (zero when not measured).
	TransformApplied(transform string, changes int, endToEnd time.Duration)
}

type noTransformMetrics struct{}

func (e *Env) TMetrics() TransformMetrics {
	if m, ok := e.Cfg.Metrics.(TransformMetrics); ok {
		return m
	}
	return noTransformMetrics{}
}

func (noTransformMetrics) TransformPage(string, int, time.Duration) {}

func (noTransformMetrics) SelfCheckPage(string, time.Duration, int) {}

func (noTransformMetrics) TransformApplied(string, int, time.Duration) {}
