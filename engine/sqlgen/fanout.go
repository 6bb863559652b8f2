package sqlgen

import (
	"strings"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/model"
)

// fanOut is, for joined item item (1-based), the query whose rows the
// engine stages as 'fanout' rows (re-derives that never fan out again) of
// _change_log (src_table, key, op,
// definition_id, origin_lsn, hop): one for every FROM key whose joined row
// reads a changed row of the item's table (joins spec §5 item 2). $1 the changed
// keys of that table and $2.. their parts (model.KeyArgs over the item's
// identity), then the definition, the origin (text, NULL unknown) and the
// hop of the staged rows. The path from the item's parent back to the
// FROM table is written in that order, each step joining the next item by
// its ON condition, so past join_collapse_limit the planner still starts
// from the changed keys and takes one indexed lookup per edge (define
// requires the index, §5 item 5).
//
// With all set it is a truncate's (§5 item 6): no parameters but the
// last three, and every FROM key whose path reaches the item with non-NULL
// join values (every one that may have had a match) is staged.
func fanOut(c *model.Compiled, item int, all bool) string {
	s := &c.Spec
	j := s.Joins[item-1]
	mk, mn := j.MatchKey()
	_, unnest, _ := model.KeyArgs(nil, mk, mn)
	n := len(mk)
	if all {
		n = -1
	}
	param := func(i int) string { return "$" + model.Itoa(n+1+i) }
	path := s.Path(j.Parent) // from the FROM table to the item's parent
	alias := func(i int) string { return base.Ident(model.JoinAlias(i)) }
	tableOf := func(i int) string {
		if i == 0 {
			return c.Source()
		}
		return s.Joins[i-1].Table.Quoted()
	}
	var b strings.Builder
	b.WriteString("SELECT DISTINCT " + base.Lit(c.SourceText) + ", " + model.KeySQL(alias(0), c.Key, c.KeyNullable) +
		", 'fanout', " + param(1) + "::int8, " + param(2) + "::text::pg_lsn, " + param(3) + "::int2\n")
	if all {
		b.WriteString("FROM " + tableOf(j.Parent) + " AS " + alias(j.Parent))
	} else {
		b.WriteString("FROM " + unnest + " JOIN " + tableOf(j.Parent) + " AS " + alias(j.Parent) + " ON ")
	}
	for i, col := range j.Columns {
		if all {
			continue
		}
		if i > 0 {
			b.WriteString(" AND ")
		}
		at := 0
		for k, kc := range mk {
			if kc.Name == col {
				at = k
			}
		}
		b.WriteString(model.JoinColumn(j.Parent, j.ParentColumns[i]) + " = u." + model.PartCol(at) + "::" + mk[at].Type)
	}
	for p := len(path) - 1; p > 0; p-- {
		step := s.Joins[path[p]-1] // joins path[p-1] to path[p]
		b.WriteString("\nJOIN " + tableOf(path[p-1]) + " AS " + alias(path[p-1]) + " ON ")
		for i := range step.Columns {
			if i > 0 {
				b.WriteString(" AND ")
			}
			b.WriteString(model.JoinColumn(path[p], step.Columns[i]) + " = " + model.JoinColumn(step.Parent, step.ParentColumns[i]))
		}
	}
	if all {
		b.WriteString("\nWHERE " + Joinf(len(j.ParentColumns), func(i int) string {
			return model.JoinColumn(j.Parent, j.ParentColumns[i]) + " IS NOT NULL"
		}, " AND "))
	}
	return b.String()
}
