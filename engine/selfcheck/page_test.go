package selfcheck

import "testing"

func ptr(s string) *string { return &s }

// A differing key is one divergence per differing cell, or one for the
// whole row when it is missing from the target or extra in it; NULL equals
// NULL and differs from every text.
func TestRowDivergences(t *testing.T) {
	cols := []string{"a", "b", "c"}
	cases := []struct {
		name string
		row  scRow
		want []string // kind/column
	}{
		{"missing", scRow{key: "k", missing: true}, []string{"missing_row/"}},
		{"extra", scRow{key: "k", extra: true}, []string{"extra_row/"}},
		{"same", scRow{key: "k", tgt: []*string{ptr("1"), nil, ptr("")}, rec: []*string{ptr("1"), nil, ptr("")}}, nil},
		{"cells", scRow{key: "k", tgt: []*string{ptr("1"), nil, ptr("x")}, rec: []*string{ptr("2"), ptr(""), nil}},
			[]string{"cell/a", "cell/b", "cell/c"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := c.row.divergences(cols)
			if len(got) != len(c.want) {
				t.Fatalf("%d divergences, want %v", len(got), c.want)
			}
			for i, d := range got {
				col := ""
				if d.column != nil {
					col = *d.column
				}
				if d.kind+"/"+col != c.want[i] || d.key == nil || *d.key != "k" {
					t.Errorf("divergence %d = %s/%s key %v, want %s", i, d.kind, col, d.key, c.want[i])
				}
			}
		})
	}
}
