package drain

import (
	"slices"
	"testing"

	"github.com/trellis-proxy/trellis-proxy/engine/derive"
	"github.com/trellis-proxy/trellis-proxy/engine/model"
	"github.com/trellis-proxy/trellis-proxy/engine/sqlgen"
)

func TestLSNOrder(t *testing.T) {
	for _, c := range []struct {
		a, b string
		less bool
	}{
		{"0/16B3748", "0/16B3750", true},
		{"0/FFFFFFFF", "1/0", true},
		{"1/0", "0/FFFFFFFF", false},
		{"A/1", "A/1", false},
	} {
		if got := lsnLess(c.a, c.b); got != c.less {
			t.Errorf("lsnLess(%s, %s) = %v", c.a, c.b, got)
		}
	}
	if parseLSN("1/2") != 1<<32|2 {
		t.Errorf("parseLSN(1/2) = %d", parseLSN("1/2"))
	}
}

func def(id int64, joined bool, table string) derive.ReaderDef {
	return derive.ReaderDef{Table: table, Joined: joined, Def: &derive.CompiledDef{ID: id, Def: &sqlgen.Def{C: &model.Compiled{}}}}
}

// A key whose log rows a JOIN fan-out staged re-derives only for the
// definitions that fanned it out, and only as their FROM key (no further
// fan-out); other keys go to every reader.
func TestFannedFor(t *testing.T) {
	a, b := derive.PageKey{Table: "public.f", Key: "1"}, derive.PageKey{Table: "public.f", Key: "2"}
	meta := map[derive.PageKey]derive.KeyMeta{b: {FanDefs: []int64{7}}}
	ks := []derive.PageKey{a, b}
	if got := fannedFor(def(7, false, "public.f"), ks, meta); !slices.Equal(got, ks) {
		t.Errorf("the fanning definition lost keys: %v", got)
	}
	if got := fannedFor(def(8, false, "public.f"), ks, meta); !slices.Equal(got, []derive.PageKey{a}) {
		t.Errorf("another definition got the fanned key: %v", got)
	}
	if got := fannedFor(def(7, true, "public.f"), ks, meta); !slices.Equal(got, []derive.PageKey{a}) {
		t.Errorf("a fanned key fanned out again: %v", got)
	}
}

// A page holding the log table of a joined unique key also reads its base
// table's joined readers, each given a share of the alternate-key table.
func TestAltShares(t *testing.T) {
	alt := model.AltLogTable("public.d", []string{"code"})
	tables := withAltBases([]string{"public.f", alt})
	if !slices.Equal(tables, []string{"public.f", alt, "public.d"}) {
		t.Fatalf("withAltBases: %v", tables)
	}
	defs := []derive.ReaderDef{def(1, false, "public.f"), def(2, true, "public.d")}
	skipped := []derive.SkippedReader{{ID: 3, Table: "public.d"}}
	gotD, gotS := altShares([]string{"public.f", alt}, defs, skipped)
	if len(gotD) != 2 || gotD[0].Table != "public.f" || gotD[1].Table != alt || gotD[1].Def.ID != 2 {
		t.Errorf("readers: %+v", gotD)
	}
	if len(gotS) != 1 || gotS[0].Table != alt {
		t.Errorf("skipped: %+v", gotS)
	}
}
