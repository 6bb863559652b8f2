package sqlgen

import (
	"strings"
	"testing"

	"github.com/trellis-proxy/trellis-proxy/engine/model"
)

// The full statements are pinned by the engine package's golden files
// (testdata/generated, from definitions Define compiled against a real
// catalog); these check what a generator change must keep, on hand-built
// definitions.

func oneToOne() *model.Compiled {
	return &model.Compiled{
		Spec: model.Spec{Target: model.TableName{Schema: "public", Name: "item_calc"}, Source: model.TableName{Schema: "public", Name: "items"},
			Fields: []model.Field{{Name: "a1", Expr: `("__s"."a" + 1)`}, {Name: "b10", Expr: `("__s"."b" * 10)`}}},
		SourceText: "public.items", TargetText: "public.item_calc",
		Key:        []model.KeyCol{{Name: "id", Type: "text", FullType: "text"}},
		FieldTypes: []string{"integer", "integer"},
	}
}

func TestPausedFieldIsNeverWritten(t *testing.T) {
	d := Generate(oneToOne(), map[string]bool{"b10": true})
	if strings.Contains(d.Derive, `"b10"`) || strings.Contains(d.FreshSQL("", nil), `"b10"`) {
		t.Fatalf("a paused field is written:\n%s", d.Derive)
	}
	if !strings.Contains(d.Derive, `"a1" = excluded."a1"`) {
		t.Fatalf("the live field is not written:\n%s", d.Derive)
	}
	if _, ok := d.FieldProbe["b10"]; ok || d.FieldProbe["a1"] == "" {
		t.Fatalf("field probes %v", d.FieldProbe)
	}
	if !d.SetRebuild() || !d.RowRebuild() {
		t.Fatal("a keyed 1-1 definition has a set-based row rebuild")
	}
}

func TestLedgerLockInKeyOrder(t *testing.T) {
	d := Generate(oneToOne(), nil)
	// H2: entries are locked in one order (COLLATE "C") by every page.
	for _, s := range []string{d.LockInsert, d.LockSelect} {
		if !strings.Contains(s, `"public"."item_calc__ledger"`) || !strings.Contains(s, `ORDER BY k COLLATE "C"`) {
			t.Fatalf("ledger lock not in key order: %s", s)
		}
	}
}

func TestAggregateStatements(t *testing.T) {
	c := &model.Compiled{
		Spec: model.Spec{Target: model.TableName{Schema: "public", Name: "sums"}, Source: model.TableName{Schema: "public", Name: "events"},
			GroupBy: []model.GroupKey{{Name: "kind", Expr: `"__s"."kind"`}},
			Fields:  []model.Field{{Name: "total", Expr: `"__s"."amount"`, Agg: model.AggSum}, {Name: "n", Agg: model.AggCountStar}}},
		SourceText: "public.events", TargetText: "public.sums",
		Key:        []model.KeyCol{{Name: "id", Type: "bigint", FullType: "bigint"}},
		GroupTypes: []string{"text"}, GroupBase: []string{"text"}, FieldTypes: []string{"bigint", "bigint"},
	}
	c.ResolveArgs()
	c.Recompute = []bool{false, false}
	c.Args[0].Type, c.Args[0].SumType, c.Args[0].NeedSum = "integer", "bigint", true
	d := Generate(c, nil)
	for name, s := range map[string]string{"derive": d.Derive, "groups": d.GroupsSQL, "reconcile": d.ReconcileSQL, "prune": d.PruneSQL,
		"delete empty": d.DeleteEmpty, "ledger gc": d.LedgerGC, "rebuild": d.RebuildAggSQL(""), "refresh": d.RefreshSQL([]string{"total"})} {
		if s == "" {
			t.Errorf("no %s statement", name)
		}
	}
	if d.RowRebuild() || !d.SetRebuild() {
		t.Error("an aggregate's set-based rebuild is RebuildAggSQL")
	}
	if d.RefreshSQL([]string{"no_such_field"}) != "" {
		t.Error("refresh of no known field is no statement")
	}
}

func TestJoinf(t *testing.T) {
	if got := Joinf(3, func(i int) string { return model.PartCol(i) }, ", "); got != "p0, p1, p2" {
		t.Fatalf("Joinf = %q", got)
	}
}
