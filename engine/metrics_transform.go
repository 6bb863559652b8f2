package engine

import (
	"context"
	"strconv"
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
	// TransformApplied follows a committed drain page, once per transform
	// whose share of it applied: the changes applied (changed source keys
	// of the page, a TRUNCATE counting one) and, for the last transform of
	// a chain (one no transform reads), the end-to-end latency of the
	// page's oldest change, from the original writer's transaction start,
	// inherited down the chain, to visible here (zero when not measured).
	TransformApplied(transform string, changes int, endToEnd time.Duration)
}

type noTransformMetrics struct{}

func (noTransformMetrics) TransformPage(string, int, time.Duration)    {}
func (noTransformMetrics) SelfCheckPage(string, time.Duration, int)    {}
func (noTransformMetrics) TransformApplied(string, int, time.Duration) {}

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
	// applied: changes each transform's share applied; e2e: the oldest
	// original write's age when the page read it, seconds, for chain ends.
	applied map[string]int
	e2e     map[string]float64
	aOrder  []string
}

type tallyCtxKey struct{}

func withTally(ctx context.Context) (context.Context, *pageTally) {
	t := &pageTally{keys: map[string]int{}, applied: map[string]int{}, e2e: map[string]float64{}}
	return context.WithValue(ctx, tallyCtxKey{}, t), t
}

// countApplied adds a committed-so-far share's changes (its keys, and its
// truncate) and, when d is the last of its chain, its oldest original
// write to the page's tally.
func countApplied(ctx context.Context, d readerDef, ks []pageKey, meta map[pageKey]keyMeta, truncate bool) {
	t, _ := ctx.Value(tallyCtxKey{}).(*pageTally)
	n := len(ks)
	if truncate {
		n++
	}
	if t == nil || n == 0 {
		return
	}
	tr := d.cd.C.Spec.Target.Name
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.applied[tr]; !ok {
		t.aOrder = append(t.aOrder, tr)
	}
	t.applied[tr] += n
	if !d.chainEnd {
		return
	}
	for _, k := range ks {
		if age := meta[k].age; age > t.e2e[tr] {
			t.e2e[tr] = age
		}
	}
}

// minAt is the older of two original-write times (0: none).
func minAt(cur, at float64) float64 {
	if cur == 0 || (at > 0 && at < cur) {
		return at
	}
	return cur
}

// originAtSetting renders the page's oldest original write for
// trellis.origin_at (” when the page has none: its chained changes then
// count from their own staging).
func originAtSetting(at float64) string {
	if at <= 0 {
		return ""
	}
	return strconv.FormatFloat(at, 'f', 6, 64)
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
	for _, tr := range t.aOrder {
		var e2e time.Duration
		if age := t.e2e[tr]; age > 0 {
			e2e = time.Duration(age*float64(time.Second)) + time.Since(t0)
		}
		m.TransformApplied(tr, t.applied[tr], e2e)
	}
}
