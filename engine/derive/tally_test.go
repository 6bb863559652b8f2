package derive

import (
	"context"
	"testing"
	"time"

	"github.com/trellis-proxy/trellis-proxy/engine/model"
	"github.com/trellis-proxy/trellis-proxy/engine/sqlgen"
	"github.com/trellis-proxy/trellis-proxy/engine/worker"
)

// recorder is a TransformMetrics that keeps what it is told.
type recorder struct {
	pages   map[string]int
	applied map[string]int
	e2e     map[string]time.Duration
	order   []string
}

func (r *recorder) BatchSealed(time.Duration)          {}
func (r *recorder) PageDone(time.Duration, error)      {}
func (r *recorder) BuildTaskDone(time.Duration, error) {}
func (r *recorder) ChangeVisible(time.Duration)        {}
func (r *recorder) TransformPage(tr string, keys int, _ time.Duration) {
	r.pages[tr] += keys
	r.order = append(r.order, tr)
}
func (r *recorder) SelfCheckPage(string, time.Duration, int) {}
func (r *recorder) TransformApplied(tr string, changes int, e2e time.Duration) {
	r.applied[tr] += changes
	r.e2e[tr] = e2e
}

func reader(target string, chainEnd bool) ReaderDef {
	c := &model.Compiled{Spec: model.Spec{Target: model.TableName{Schema: "public", Name: target}}}
	return ReaderDef{Table: "public.src", Def: &CompiledDef{ID: 1, Def: &sqlgen.Def{C: c}}, ChainEnd: chainEnd}
}

// A page's tally counts each transform's keys and changes, and the oldest
// original write only for a chain's last transform; nothing is counted
// outside a page.
func TestPageTally(t *testing.T) {
	ks := []PageKey{{Table: "public.src", Key: "1"}, {Table: "public.src", Key: "2"}}
	meta := map[PageKey]KeyMeta{ks[0]: {Age: 0.5}, ks[1]: {Age: 2}}

	CountApplied(context.Background(), reader("mid", false), ks, meta, false) // no tally: ignored
	countRederived(context.Background(), "mid", 3)

	ctx, tally := WithTally(context.Background())
	countRederived(ctx, "mid", 2)
	countRederived(ctx, "end", 1)
	countRederived(ctx, "mid", 1)
	CountApplied(ctx, reader("mid", false), ks, meta, true) // a truncate counts one
	CountApplied(ctx, reader("end", true), ks, meta, false)

	rec := &recorder{pages: map[string]int{}, applied: map[string]int{}, e2e: map[string]time.Duration{}}
	d := New(worker.NewEnv(worker.Config{Metrics: rec}, nil, nil))
	d.ReportTally(tally, 0, time.Now())
	if rec.pages["mid"] != 3 || rec.pages["end"] != 1 || len(rec.order) != 2 || rec.order[0] != "mid" {
		t.Errorf("keys re-derived: %v in order %v", rec.pages, rec.order)
	}
	if rec.applied["mid"] != 3 || rec.applied["end"] != 2 {
		t.Errorf("changes applied: %v", rec.applied)
	}
	if rec.e2e["mid"] != 0 || rec.e2e["end"] < 2*time.Second {
		t.Errorf("end-to-end: %v (only the chain's end, from its oldest write)", rec.e2e)
	}
}
