package capture

import (
	"strings"
	"testing"
)

func sp(s string) *string { return &s }

// Every schema problem a health check reads becomes a capture failure that
// names the table, the column and the transform, and a remedy a user can
// run; no problem is no failure.
func TestDescribeProblem(t *testing.T) {
	for _, c := range []struct {
		name                              string
		tableProblem, col, old, now, nowT *string
		dropped                           bool
		sameName                          *string
		unbound                           bool
		err, remedy                       string
	}{
		{name: "table dropped", tableProblem: sp("table_gone"), err: "table public.src read by order_totals was dropped", remedy: "RESUME TRANSFORM order_totals"},
		{name: "renamed table", tableProblem: sp("table_renamed"), err: "was renamed or moved", remedy: "rename it back"},
		{name: "owner lost SELECT", tableProblem: sp("owner_cannot_read"), err: "may no longer read public.src", remedy: `GRANT SELECT ON public.src TO "Ann"`},
		{name: "row security", tableProblem: sp("row_security"), err: "row level security on public.src", remedy: "DISABLE ROW LEVEL SECURITY"},
		{name: "partition", tableProblem: sp("hierarchy"), err: "joined a partition or inheritance hierarchy", remedy: "DETACH PARTITION"},
		{name: "column renamed", col: sp("price"), old: sp("numeric"), now: sp("Cost"), nowT: sp("numeric"), err: "column price of public.src read by order_totals was renamed to Cost", remedy: `RENAME COLUMN "Cost" TO price`},
		{name: "column dropped and added", col: sp("price"), dropped: true, sameName: sp("text"), err: "was dropped and added again", remedy: "RESUME TRANSFORM order_totals (it re-validates"},
		{name: "column dropped", col: sp("price"), dropped: true, err: "column price of public.src read by order_totals was dropped", remedy: "add the column back"},
		{name: "column unbound", col: sp("price"), unbound: true, err: "does not exist", remedy: "DROP TRANSFORM order_totals and define it again"},
		{name: "type changed", col: sp("price"), old: sp("numeric"), now: sp("price"), nowT: sp("text"), err: "changed type from numeric to text", remedy: "ALTER COLUMN price TYPE numeric"},
	} {
		f := describeProblem("order_totals", "public.src", "Ann", c.tableProblem, c.col, c.old, c.now, c.nowT, c.dropped, c.sameName, c.unbound)
		if f == nil {
			t.Errorf("%s: no failure", c.name)
			continue
		}
		if f.Table != "public.src" || !strings.Contains(f.Error, c.err) || !strings.Contains(f.Remedy, c.remedy) {
			t.Errorf("%s: %+v", c.name, f)
		}
	}
	if f := describeProblem("t", "public.src", "Ann", nil, nil, nil, nil, nil, false, nil, false); f != nil {
		t.Errorf("no problem described as %+v", f)
	}
}
