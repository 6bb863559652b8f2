package engine

import (
	"context"
	"sync"
	"time"
)

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
}

type noTransformMetrics struct{}

func (noTransformMetrics) TransformPage(string, int, time.Duration) {}
func (noTransformMetrics) SelfCheckPage(string, time.Duration, int) {}

func (e *Engine) tMetrics() TransformMetrics {
	if m, ok := e.cfg.Metrics.(TransformMetrics); ok {
		return m
	}
	return noTransformMetrics{}
}

// pageTally counts, within one drain page's transaction, the keys each
// transform re-derived (applyKeys); the page reports it after its commit,
// so a rolled-back or retried page counts nothing.
type pageTally struct {
	mu   sync.Mutex
	keys map[string]int
	// order keeps the report deterministic.
	order []string
}

type tallyCtxKey struct{}

func withTally(ctx context.Context) (context.Context, *pageTally) {
	t := &pageTally{keys: map[string]int{}}
	return context.WithValue(ctx, tallyCtxKey{}, t), t
}

// countRederived adds n keys re-derived for transform to the page's tally
// (nothing outside a drain page: builds and probes' retries count apart).
func countRederived(ctx context.Context, transform string, n int) {
	t, _ := ctx.Value(tallyCtxKey{}).(*pageTally)
	if t == nil || n == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.keys[transform]; !ok {
		t.order = append(t.order, transform)
	}
	t.keys[transform] += n
}

// report hands a committed page's tally to the metrics.
func (e *Engine) reportTally(t *pageTally, waited time.Duration, t0 time.Time) {
	var visible time.Duration
	if waited > 0 {
		visible = waited + time.Since(t0) // as ChangeVisible
	}
	m := e.tMetrics()
	for _, tr := range t.order {
		m.TransformPage(tr, t.keys[tr], visible)
	}
}
