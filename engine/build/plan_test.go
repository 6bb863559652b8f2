package build

import (
	"testing"

	"github.com/trellis-proxy/trellis-proxy/engine/derive"
	"github.com/trellis-proxy/trellis-proxy/engine/model"
	"github.com/trellis-proxy/trellis-proxy/engine/quarantine"
	"github.com/trellis-proxy/trellis-proxy/engine/worker"
)

// A fresh aggregate build on the classic path runs its chunks one at a
// time, so they are four times bigger; heap builds and 1-1 builds take the
// configured size.
func TestFreshChunkRows(t *testing.T) {
	cfg := worker.Config{BuildChunkSize: 100}
	cfg.Defaults()
	b := New(quarantine.New(derive.New(worker.NewEnv(cfg, nil, nil))))
	one := &model.Compiled{Spec: model.Spec{Fields: []model.Field{{Name: "x", Expr: "1"}}}}
	agg := &model.Compiled{Spec: model.Spec{GroupBy: []model.GroupKey{{Name: "g", Expr: "g"}},
		Fields: []model.Field{{Name: "n", Agg: model.AggCountStar}}}}
	if !agg.Spec.IsAggregate() || one.Spec.IsAggregate() {
		t.Fatal("test specs are not what they claim")
	}
	for _, c := range []struct {
		c    *model.Compiled
		heap bool
		want int
	}{{one, false, 1000}, {one, true, 1000}, {agg, false, 4000}, {agg, true, 1000}} {
		if got := b.freshChunkRows(c.c, c.heap); got != c.want {
			t.Errorf("aggregate %v heap %v: %d rows, want %d", c.c.Spec.IsAggregate(), c.heap, got, c.want)
		}
	}
	if got := HeapBuilding("d"); got != "coalesce(d.status = 'backfilling' AND d.status_detail ->> 'heap_build' = d.build_id::text, false)" {
		t.Errorf("HeapBuilding: %s", got)
	}
}
