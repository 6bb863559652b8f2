package sqlgen

import (
	"slices"
	"testing"

	"github.com/trellis-proxy/trellis-proxy/engine/model"
)

func TestRangeWhere(t *testing.T) {
	c := &model.Compiled{Key: []model.KeyCol{{Name: "a", Type: "bigint"}, {Name: "b", Type: "text"}}}
	a1, b1, a2, b2 := "1", "x", "9", "y\x1fz"
	lo := model.EncodeKey([]*string{&a1, &b1}, false)
	hi := model.EncodeKey([]*string{&a2, &b2}, false)
	where, args := RangeWhere(c, &lo, &hi, 2)
	want := ` WHERE ROW("__s"."a", "__s"."b") > ROW($2::text::bigint, $3::text::text) AND ROW("__s"."a", "__s"."b") <= ROW($4::text::bigint, $5::text::text)`
	if where != want || !slices.Equal(args, []any{"1", "x", "9", "y\x1fz"}) {
		t.Fatalf("RangeWhere =\n%s %q\nwant\n%s", where, args, want)
	}
	if w, a := RangeWhere(c, nil, nil, 1); w != "" || a != nil {
		t.Fatalf("an unbounded range: %q %v", w, a)
	}
	c.KeyNullable = true // one chunk: no range
	if conds, _ := RangeConds(c, "t2", &lo, &hi, 1); conds != nil {
		t.Fatalf("a nullable identity got a range: %v", conds)
	}
}
