package derive

import (
	"context"
	"sync"
	"time"
)

// PageTally counts, within one drain page's transaction, the keys each
// transform re-derived (applyKeys); the page reports it after its commit,
// so a rolled-back or retried page counts nothing.
type PageTally struct {
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

func WithTally(ctx context.Context) (context.Context, *PageTally) {
	t := &PageTally{keys: map[string]int{}, applied: map[string]int{}, e2e: map[string]float64{}}
	return context.WithValue(ctx, tallyCtxKey{}, t), t
}

// CountApplied adds a committed-so-far share's changes (its keys, and its
// truncate) and, when d is the last of its chain, its oldest original
// write to the page's tally.
func CountApplied(ctx context.Context, d ReaderDef, ks []PageKey, meta map[PageKey]KeyMeta, truncate bool) {
	t, _ := ctx.Value(tallyCtxKey{}).(*PageTally)
	n := len(ks)
	if truncate {
		n++
	}
	if t == nil || n == 0 {
		return
	}
	tr := d.Def.C.Spec.Target.Name
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.applied[tr]; !ok {
		t.aOrder = append(t.aOrder, tr)
	}
	t.applied[tr] += n
	if !d.ChainEnd {
		return
	}
	for _, k := range ks {
		if age := meta[k].Age; age > t.e2e[tr] {
			t.e2e[tr] = age
		}
	}
}

// countRederived adds n keys re-derived for transform to the page's tally
// (nothing outside a drain page: builds and probes' retries count apart).
func countRederived(ctx context.Context, transform string, n int) {
	t, _ := ctx.Value(tallyCtxKey{}).(*PageTally)
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
func (e *Deriver) ReportTally(t *PageTally, waited time.Duration, t0 time.Time) {
	var visible time.Duration
	if waited > 0 {
		visible = waited + time.Since(t0) // as ChangeVisible
	}
	m := e.TMetrics()
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
