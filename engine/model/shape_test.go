package model

import (
	"slices"
	"testing"
)

func colNames(s *TableShape) []string {
	var out []string
	for _, c := range s.Cols {
		out = append(out, c.Name)
	}
	return out
}

func TestShapes(t *testing.T) {
	c := &Compiled{Spec: Spec{Fields: []Field{{Name: "a1"}}}, Key: []KeyCol{{Name: "id", FullType: "bigint"}}, FieldTypes: []string{"integer"}}
	tgt, led := c.Shapes()
	if !slices.Equal(colNames(tgt), []string{"id", "a1"}) || !slices.Equal(tgt.PK, []string{"id"}) || tgt.Unique != nil || !tgt.Cols[0].NotNull {
		t.Errorf("1-1 target %+v", tgt)
	}
	if !slices.Equal(colNames(led), []string{"k"}) || !slices.Equal(led.PK, []string{"k"}) {
		t.Errorf("1-1 ledger %+v", led)
	}
	// A nullable identity (over an aggregate target) is UNIQUE NULLS NOT
	// DISTINCT, not a primary key.
	c.KeyNullable = true
	if tgt, _ := c.Shapes(); tgt.PK != nil || !slices.Equal(tgt.Unique, []string{"id"}) || tgt.Cols[0].NotNull {
		t.Errorf("nullable-key target %+v", tgt)
	}

	agg := &Compiled{
		Spec: Spec{GroupBy: []GroupKey{{Name: "g"}}, Fields: []Field{{Name: "s", Agg: AggSum}, {Name: "m", Agg: AggMin}}},
		Key:  []KeyCol{{Name: "id", FullType: "bigint"}}, GroupTypes: []string{"text"}, FieldTypes: []string{"bigint", "integer"},
		Args: []ArgInfo{{Type: "integer", SumType: "bigint", NeedSum: true}}, FieldArg: []int{0, 0}, Recompute: []bool{false, true},
	}
	tgt, led = agg.Shapes()
	if want := []string{"g", "s", "m", "__members", "__cnt0", "__sum0"}; !slices.Equal(colNames(tgt), want) || !slices.Equal(tgt.UIdx, []string{"g"}) {
		t.Errorf("aggregate target %v, want %v", colNames(tgt), want)
	}
	// MIN is recomputed from the members, so the ledger gets its member index.
	if want := []string{"k", "member", "g0", "a0"}; !slices.Equal(colNames(led), want) || !slices.Equal(led.MIdx, []string{"g0"}) || !led.Cols[1].DefFalse {
		t.Errorf("aggregate ledger %v %+v, want %v", colNames(led), led, want)
	}
}
