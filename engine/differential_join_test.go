package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/worker"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// JOIN programs of the differential test (joins spec §6): random star and
// snowflake schemas of 2-6 items, LEFT and INNER, composite join keys,
// NULL and dangling join values, self-joins through aliases, targets read
// as the FROM item or as a dimension, readers of JOIN targets, and a join
// writer on every table (re-pointing foreign keys, deleting and
// re-inserting rows with the same key, updating join and read columns,
// key changes, truncates) beside the program's usual writers. The oracle
// is the definition's own join query rendered here from bare names.

// pinnedJoinSeeds once failed TestDifferentialJoins; they run on every
// fast lane.
var pinnedJoinSeeds = []uint64{}

// dItem is one FROM item of a JOIN definition.
type dItem struct {
	name  string // how the statement names it: its alias, else its table's name
	alias bool
	table string // the table or target, as the statement names it
	up    *dDef  // the target read as this item (the oracle nests its oracle)
	// kind: "table"; "copy", a 1-1 target copying a table's every column
	// (key columns by name, the others as c_<name>); "agg", a target
	// grouped by g1 with s = SUM(n) and c = COUNT(*); "joined", a 1-1
	// JOIN target read as the FROM item.
	kind   string
	base   string // the table a "table" or "copy" item mirrors; a "joined" item's root table
	parent int
	left   bool
	on     [][2]string // (this item's column, the parent's column)
}

// col names column c of the table the item mirrors.
func (it *dItem) col(c string) string {
	if it.kind == "copy" && c != "id" && c != "k2" {
		return "c_" + c
	}
	return c
}

// rel is the item's relation in the oracle.
func (it *dItem) rel() string {
	if it.up != nil {
		return "(" + it.up.oracle() + ")"
	}
	return base.Ident(it.table)
}

// qualify turns a template over bare columns ("{i} * 2") into one over
// item's columns ("{a1.i} * 2").
func qualify(tmpl string, it *dItem) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(tmpl, '{')
		if i < 0 {
			b.WriteString(tmpl)
			return b.String()
		}
		j := strings.IndexByte(tmpl[i:], '}') + i
		b.WriteString(tmpl[:i] + "{" + it.name + "." + it.col(tmpl[i+1:j]) + "}")
		tmpl = tmpl[j+1:]
	}
}

// fillJoin renders {item.col} and {col} placeholders as quoted names.
func fillJoin(expr string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(expr, '{')
		if i < 0 {
			b.WriteString(expr)
			return b.String()
		}
		j := strings.IndexByte(expr[i:], '}') + i
		b.WriteString(expr[:i])
		ref := expr[i+1 : j]
		if k := strings.IndexByte(ref, '.'); k >= 0 {
			b.WriteString(base.Ident(ref[:k]) + "." + base.Ident(ref[k+1:]))
		} else {
			b.WriteString(base.Ident(ref))
		}
		expr = expr[j+1:]
	}
}

func (d *dDef) joinFrom(user bool) string {
	var b strings.Builder
	for i, it := range d.items {
		if i > 0 {
			if it.left {
				b.WriteString(" LEFT JOIN ")
			} else {
				b.WriteString(" JOIN ")
			}
		}
		switch {
		case !user:
			b.WriteString(it.rel() + " AS " + base.Ident(it.name))
		case it.alias:
			b.WriteString(base.Ident(it.table) + " AS " + base.Ident(it.name))
		default:
			b.WriteString(base.Ident(it.table))
		}
		if i == 0 {
			continue
		}
		p := d.items[it.parent]
		for n, on := range it.on {
			if n == 0 {
				b.WriteString(" ON ")
			} else {
				b.WriteString(" AND ")
			}
			b.WriteString(base.Ident(it.name) + "." + base.Ident(on[0]) + " = " + base.Ident(p.name) + "." + base.Ident(on[1]))
		}
	}
	return b.String()
}

// joinOracle is Postgres's own run of a JOIN definition's query.
func (d *dDef) joinOracle() string {
	root := base.Ident(d.items[0].name)
	var cols []string
	if len(d.group) == 0 {
		for _, k := range d.key {
			cols = append(cols, root+"."+base.Ident(k))
		}
		for _, f := range d.fields {
			cols = append(cols, "("+fillJoin(f.expr)+") AS "+base.Ident(f.name))
		}
		return "SELECT " + strings.Join(cols, ", ") + " FROM " + d.joinFrom(false)
	}
	var gs []string
	for _, g := range d.group {
		cols = append(cols, "("+fillJoin(g.expr)+") AS "+base.Ident(g.name))
		gs = append(gs, "("+fillJoin(g.expr)+")")
	}
	for _, f := range d.fields {
		var a string
		switch f.agg {
		case AggCountStar:
			a = "count(*)"
		case AggJSONBAgg:
			var ks []string
			for _, k := range d.key {
				ks = append(ks, root+"."+base.Ident(k))
			}
			a = "jsonb_agg((" + fillJoin(f.expr) + ") ORDER BY " + strings.Join(ks, ", ") + ")"
		default:
			a = oracleAgg[f.agg] + "((" + fillJoin(f.expr) + "))"
		}
		if f.cast != "" {
			a = "(" + a + ")::" + f.cast
		}
		cols = append(cols, a+" AS "+base.Ident(f.name))
	}
	return "SELECT " + strings.Join(cols, ", ") + " FROM " + d.joinFrom(false) + " GROUP BY " + strings.Join(gs, ", ")
}

// joinTransformSQL is the JOIN definition as a user writes it.
func (d *dDef) joinTransformSQL() string {
	var b strings.Builder
	b.WriteString("TRANSFORM " + base.Ident(d.name) + " FROM " + d.joinFrom(true))
	if len(d.group) > 0 {
		var gs []string
		for _, g := range d.group {
			gs = append(gs, fillJoin(g.expr))
		}
		b.WriteString(" GROUP BY " + strings.Join(gs, ", "))
	}
	var fs []string
	for _, f := range d.fields {
		switch {
		case f.agg == AggCountStar:
			fs = append(fs, "COUNT(*) AS "+base.Ident(f.name))
		case f.agg != AggNone:
			fs = append(fs, strings.ToUpper(oracleAgg[f.agg])+"(("+fillJoin(f.expr)+")) AS "+base.Ident(f.name))
		default:
			fs = append(fs, "("+fillJoin(f.expr)+") AS "+base.Ident(f.name))
		}
	}
	b.WriteString(" SELECT " + strings.Join(fs, ", "))
	if d.noIndex {
		b.WriteString(" WITHOUT SOURCE INDEX")
	}
	return b.String()
}

// fkCols are the columns by which any table points at table u.
func (dr *diffRun) fkCols(u string) []string {
	if len(dr.keys[u]) == 2 {
		return []string{"r_" + u, "r_" + u + "_k2"}
	}
	return []string{"r_" + u}
}

var payloadCols = []string{"g1", "g2", "n", "i", "b", "j"}

// genJoinTables makes 2-4 tables, each pointing at every table (itself
// included, for self-joins) through indexed columns r_<table>[, _k2].
func (dr *diffRun) genJoinTables() {
	dr.keys = map[string][]string{}
	nt := 2 + dr.r.IntN(3)
	keyDDL := map[string]string{}
	fkDDL := map[string]string{}
	for i := range nt {
		name := fmt.Sprintf("t%d", i)
		switch dr.r.IntN(3) {
		case 0:
			keyDDL[name], dr.keys[name] = "id int PRIMARY KEY", []string{"id"}
			fkDDL[name] = "r_" + name + " int"
		case 1:
			keyDDL[name], dr.keys[name] = "id text PRIMARY KEY", []string{"id"}
			fkDDL[name] = "r_" + name + " text"
		default:
			keyDDL[name], dr.keys[name] = "id int, k2 text, PRIMARY KEY (id, k2)", []string{"id", "k2"}
			fkDDL[name] = "r_" + name + " int, r_" + name + "_k2 text"
		}
		dr.tables = append(dr.tables, name)
	}
	for _, name := range dr.tables {
		ddl := []string{keyDDL[name], "g1 text, g2 int, n numeric, i int, b bool, j jsonb"}
		for _, u := range dr.tables {
			ddl = append(ddl, fkDDL[u])
		}
		exec(dr.t, dr.pool, "CREATE TABLE "+name+" ("+strings.Join(ddl, ", ")+")")
		for _, u := range dr.tables {
			exec(dr.t, dr.pool, "CREATE INDEX ON "+name+" ("+strings.Join(dr.fkCols(u), ", ")+")")
		}
		exec(dr.t, dr.pool, "CREATE INDEX ON "+name+" (g1)")
	}
}

// Templates of a JOIN definition's fields over one item's bare columns;
// num marks those a reader can sum.
var joinScalarPool = []dField{
	{expr: "{i} * 2", num: true}, {expr: "coalesce({g1}, 'none')"}, {expr: "{n} + 1", num: true}, {expr: "{b}"}, {expr: "{j}"},
	{expr: "{g2} % 2 = 0"}, {expr: "{n}", num: true}, {expr: "length({g1})"}, {expr: "{id}"},
}

var joinAggDimPool = []dField{{expr: "{s}", num: true}, {expr: "{c} * 2", num: true}, {expr: "{g1}"}}

// genJoinDefs draws a JOIN program: maybe a copy target and a target
// grouped by g1 (to be read as items), 2-4 JOIN definitions, then readers
// of JOIN targets.
func (dr *diffRun) genJoinDefs() {
	r := dr.r
	n := 0
	newName := func() string { n++; return fmt.Sprintf("d%d", n) }
	var copyDef, aggDef *dDef
	if r.IntN(2) == 0 {
		t := dr.tables[r.IntN(len(dr.tables))]
		copyDef = &dDef{name: newName(), src: t, srcSQL: t, key: dr.keys[t]}
		cols := append([]string{}, payloadCols...)
		for _, u := range dr.tables {
			cols = append(cols, dr.fkCols(u)...)
		}
		for _, c := range cols {
			copyDef.fields = append(copyDef.fields, dField{name: "c_" + c, expr: "{" + c + "}"})
		}
		dr.defs = append(dr.defs, copyDef)
	}
	if r.IntN(2) == 0 {
		t := dr.tables[r.IntN(len(dr.tables))]
		aggDef = &dDef{name: newName(), src: t, srcSQL: t, key: dr.keys[t], group: []dField{{name: "g1", expr: "{g1}"}},
			fields: []dField{{name: "s", agg: AggSum, expr: "{n}"}, {name: "c", agg: AggCountStar}}}
		dr.defs = append(dr.defs, aggDef)
	}
	var joins, joined []*dDef
	for range 2 + r.IntN(3) {
		d := dr.genJoinDef(newName(), copyDef, aggDef, joined)
		dr.defs = append(dr.defs, d)
		joins = append(joins, d)
		if len(d.group) == 0 {
			joined = append(joined, d)
		}
	}
	for range max(r.IntN(3), dr.minChains) {
		up := joins[r.IntN(len(joins))]
		keys, vals := up.outCols()
		d := &dDef{name: newName(), src: up.name, key: keys, upstream: up}
		var numeric []string
		for _, v := range vals {
			if v.agg == AggSum || v.agg == AggCountStar || v.agg == AggCount || v.agg == AggNone && v.num {
				numeric = append(numeric, v.name)
			}
		}
		if len(numeric) > 0 && r.IntN(2) == 0 {
			c := numeric[r.IntN(len(numeric))]
			d.group = []dField{{name: keys[0], expr: "{" + keys[0] + "}"}}
			d.fields = []dField{{name: "cnt_" + d.name, agg: AggCountStar}, {name: "s_" + d.name, agg: AggSum, expr: "{" + c + "}"},
				{name: "mx_" + d.name, agg: AggMax, expr: "{" + c + "}"}}
		} else {
			d.fields = []dField{{name: "copy_" + d.name, expr: "{" + keys[0] + "}"}}
			if len(numeric) > 0 {
				d.fields = append(d.fields, dField{name: "v_" + d.name, expr: "{" + numeric[0] + "}"})
			}
		}
		dr.defs = append(dr.defs, d)
	}
}

// genJoinDef draws one JOIN definition of 2-6 items.
func (dr *diffRun) genJoinDef(name string, copyDef, aggDef *dDef, joined []*dDef) *dDef {
	r := dr.r
	var root dItem
	switch x := r.IntN(10); {
	case x == 0 && len(joined) > 0:
		up := joined[r.IntN(len(joined))]
		root = dItem{table: up.name, up: up, kind: "joined", base: up.items[0].base}
	case x <= 2 && copyDef != nil:
		root = dItem{table: copyDef.name, up: copyDef, kind: "copy", base: copyDef.src}
	default:
		t := dr.tables[r.IntN(len(dr.tables))]
		root = dItem{table: t, kind: "table", base: t}
	}
	root.name, root.alias = "a0", true
	if root.kind == "table" && r.IntN(4) == 0 {
		root.name, root.alias = root.table, false
	}
	d := &dDef{name: name, src: root.table, srcSQL: root.table, key: dr.keys[root.base]}
	if root.kind == "joined" {
		d.key = root.up.key
	}
	items := []dItem{root}
	named := map[string]bool{root.name: true}
	nItems := 2 + r.IntN(5)
	for len(items) < nItems {
		p := r.IntN(len(items))
		par := &items[p]
		var it dItem
		switch {
		case par.kind == "agg":
			continue
		case par.kind == "joined":
			it = dItem{table: par.base, kind: "table", base: par.base}
			for _, k := range dr.keys[par.base] {
				it.on = append(it.on, [2]string{k, k})
			}
		default:
			u := dr.tables[r.IntN(len(dr.tables))]
			switch x := r.IntN(10); {
			case x == 0 && aggDef != nil:
				it = dItem{table: aggDef.name, up: aggDef, kind: "agg", on: [][2]string{{"g1", par.col("g1")}}}
			case x == 1 && copyDef != nil:
				u = copyDef.src
				it = dItem{table: copyDef.name, up: copyDef, kind: "copy", base: u}
			default:
				it = dItem{table: u, kind: "table", base: u}
			}
			if it.kind != "agg" {
				fk := dr.fkCols(u)
				for i, k := range dr.keys[u] {
					it.on = append(it.on, [2]string{k, par.col(fk[i])})
				}
			}
			if par.kind == "copy" {
				d.noIndex = true // a target's columns have no index
			}
		}
		it.parent, it.left = p, r.IntN(4) > 0
		it.name, it.alias = fmt.Sprintf("a%d", len(items)), true
		if it.kind == "table" && r.IntN(4) == 0 && !named[it.table] {
			it.name, it.alias = it.table, false
		}
		named[it.name] = true
		items = append(items, it)
	}
	d.items = items
	if r.IntN(10) == 0 {
		d.noIndex = true
	}
	// Fields over any item.
	fieldOf := func(it *dItem, pool []dField) dField {
		switch it.kind {
		case "agg":
			f := joinAggDimPool[r.IntN(len(joinAggDimPool))]
			f.expr = qualify(f.expr, it)
			return f
		case "joined":
			var f dField
			if len(it.up.fields) > 0 && r.IntN(3) > 0 {
				uf := it.up.fields[r.IntN(len(it.up.fields))]
				f = dField{expr: "{" + it.name + "." + uf.name + "}", num: uf.num}
			} else {
				f = dField{expr: "{" + it.name + "." + it.up.key[0] + "}"}
			}
			return f
		}
		f := pool[r.IntN(len(pool))]
		f.expr = qualify(f.expr, it)
		return f
	}
	if root.kind == "joined" || r.IntN(5) < 3 {
		for i := range 1 + r.IntN(5) {
			f := fieldOf(&items[r.IntN(len(items))], joinScalarPool)
			f.name = fmt.Sprintf("%s_f%d", name, i) // not a column of a target read as an item (42702)
			d.fields = append(d.fields, f)
		}
		return d
	}
	seen := map[string]bool{}
	for range 1 + r.IntN(2) {
		it := &items[r.IntN(len(items))]
		if it.kind != "table" && it.kind != "copy" {
			continue
		}
		g := grammarGroupPool[r.IntN(len(grammarGroupPool))]
		c := it.col(strings.Trim(g.expr, "{}"))
		if seen[c] {
			continue
		}
		seen[c] = true
		d.group = append(d.group, dField{name: c, expr: "{" + it.name + "." + c + "}"})
	}
	if len(d.group) == 0 {
		d.group = []dField{{name: d.items[0].col("g2"), expr: "{" + d.items[0].name + "." + d.items[0].col("g2") + "}"}}
	}
	for i := range 1 + r.IntN(5) {
		it := &items[r.IntN(len(items))]
		var f dField
		if it.kind == "agg" {
			f = dField{agg: []AggKind{AggSum, AggMax, AggMin}[r.IntN(3)], expr: qualify([]string{"{s}", "{c}"}[r.IntN(2)], it)}
		} else {
			f = aggPool[r.IntN(len(aggPool))]
			f.expr = qualify(f.expr, it)
		}
		f.name = fmt.Sprintf("%s_a%d", name, i)
		d.fields = append(d.fields, f)
	}
	return d
}

// fkVals are values pointing at a row of table u: mostly a key the
// writers use, sometimes NULL (a part NULL for a composite), sometimes
// a key no writer makes (dangling).
func (dr *diffRun) fkVals(r *rand.Rand, u string, textKey map[string]bool) []any {
	composite := len(dr.keys[u]) == 2
	id := r.IntN(120)
	switch x := r.IntN(20); {
	case x == 0:
		if composite {
			return []any{nil, nil}
		}
		return []any{nil}
	case x == 1 && composite:
		return []any{id % 40, nil}
	case x == 2:
		if composite {
			return []any{1000, "a"}
		}
		if textKey[u] {
			return []any{"nowhere"}
		}
		return []any{1000}
	}
	return dr.keyOf(id, u, textKey)
}

// keyOf is key number id of table t as the writers draw keys.
func (dr *diffRun) keyOf(id int, t string, textKey map[string]bool) []any {
	switch {
	case len(dr.keys[t]) == 2:
		return []any{id % 40, textKeys[id%len(textKeys)]}
	case textKey[t]:
		return []any{textKeys[id%len(textKeys)] + strconv.Itoa(id/len(textKeys))}
	}
	return []any{id}
}

// joinWriter runs random transactions over the join columns of every
// table until stop.
func (dr *diffRun) joinWriter(stop context.Context, seed uint64, textKey map[string]bool) error {
	return dr.joinTxs(stop, rand.New(rand.NewPCG(seed, 13)), textKey, -1)
}

// joinTxs runs n transactions of the join writer (n < 0: until stop).
func (dr *diffRun) joinTxs(stop context.Context, r *rand.Rand, textKey map[string]bool, n int) error {
	ctx := context.Background()
	for ; stop.Err() == nil && n != 0; n-- {
		tx, err := dr.pool.Begin(ctx)
		if err != nil {
			return nil
		}
		nops := 1 + r.IntN(3)
		var werr error
		for op := 0; op < nops && werr == nil; op++ {
			werr = dr.joinOp(ctx, tx, r, textKey)
		}
		if werr != nil {
			tx.Rollback(ctx)
			switch pgerr.CodeOf(werr) {
			case "40P01", "23505", "40001", "55P03":
				continue
			}
			return fmt.Errorf("join writer: %w", werr)
		}
		if r.IntN(8) == 0 {
			tx.Rollback(ctx)
		} else if err := tx.Commit(ctx); err != nil {
			if c := pgerr.CodeOf(err); c == "40P01" || c == "40001" {
				continue
			}
			return fmt.Errorf("commit: %w", err)
		} else {
			dr.commits.Add(1)
		}
	}
	return nil
}

// joinOp is one statement of the join writer.
func (dr *diffRun) joinOp(ctx context.Context, tx pgx.Tx, r *rand.Rand, textKey map[string]bool) error {
	t := dr.tables[r.IntN(len(dr.tables))]
	u := dr.tables[r.IntN(len(dr.tables))]
	kc := dr.keys[t]
	var args []any
	ph := func(v any) string { args = append(args, v); return "$" + strconv.Itoa(len(args)) }
	keyEq := func(k []any) string {
		var ps []string
		for i, c := range kc {
			ps = append(ps, c+" = "+ph(k[i]))
		}
		return strings.Join(ps, " AND ")
	}
	fkSet := func() string {
		var ps []string
		for i, c := range dr.fkCols(u) {
			ps = append(ps, c+" = "+ph(dr.fkVals(r, u, textKey)[i]))
		}
		return strings.Join(ps, ", ")
	}
	// insert renders a one-row insert of key k with random values and
	// join columns pointing at u.
	insert := func(k []any) string {
		v := rowVals(r)
		cols := append(append([]string{}, kc...), "g1", "g2", "n", "i", "b", "j")
		var vals []string
		for _, x := range k {
			vals = append(vals, ph(x))
		}
		vals = append(vals, ph(v[0]), ph(v[1]), ph(v[2])+"::numeric", ph(v[3]), ph(v[4]), "jsonb_build_object('v', "+ph(v[3])+"::int)")
		fv := dr.fkVals(r, u, textKey)
		for i, c := range dr.fkCols(u) {
			cols = append(cols, c)
			vals = append(vals, ph(fv[i]))
		}
		return "INSERT INTO " + t + " (" + strings.Join(cols, ", ") + ") VALUES (" + strings.Join(vals, ", ") + ")"
	}
	k := dr.keyOf(r.IntN(120), t, textKey)
	var q string
	switch x := r.IntN(100); {
	case x < 28: // re-point one row
		q = "UPDATE " + t + " SET " + fkSet() + " WHERE " + keyEq(k)
	case x < 40: // re-point some rows
		var ps []string
		for i := range kc {
			ps = append(ps, ph(k[i]))
		}
		q = "UPDATE " + t + " SET " + fkSet() + " WHERE (" + strings.Join(kc, ", ") + ") >= (" + strings.Join(ps, ", ") + ") AND random() < 0.3"
	case x < 52: // a join column and read columns at once
		v := rowVals(r)
		q = "UPDATE " + t + " SET " + fkSet() + ", g1 = " + ph(v[0]) + ", n = " + ph(v[2]) + "::numeric WHERE " + keyEq(k)
	case x < 66: // an upsert pointing somewhere
		q = insert(k) + " ON CONFLICT (" + strings.Join(kc, ", ") + ") DO UPDATE SET g1 = excluded.g1, n = excluded.n"
		for _, c := range dr.fkCols(u) {
			q += ", " + c + " = excluded." + c
		}
	case x < 78: // deleted and inserted again with the same key
		if _, err := tx.Exec(ctx, "DELETE FROM "+t+" WHERE "+keyEq(k), args...); err != nil {
			return err
		}
		args = nil
		q = insert(k)
	case x < 90: // read columns only
		v := rowVals(r)
		q = "UPDATE " + t + " SET g1 = " + ph(v[0]) + ", g2 = " + ph(v[1]) + ", n = n + 1, b = NOT b WHERE " + keyEq(k)
	case x < 96: // a key change: the rows pointing at the old key lose their match
		nk := dr.keyOf(r.IntN(120), t, textKey)
		var sets []string
		for i, c := range kc {
			sets = append(sets, c+" = "+ph(nk[i]))
		}
		q = "UPDATE " + t + " SET " + strings.Join(sets, ", ") + " WHERE " + keyEq(k)
	case x < 98 && r.IntN(4) == 0:
		q = "TRUNCATE " + t
	default:
		q = "DELETE FROM " + t + " WHERE " + keyEq(k)
	}
	_, err := tx.Exec(ctx, q, args...)
	return err
}

// TestDifferentialJoins runs JOIN programs (joins spec §6) under the
// differential test's writers and faults, with a join writer beside them.
// TRELLIS_DIFF_JOIN_RUNS fresh seeds (default 3) after the pinned ones;
// TRELLIS_DIFF_SEEDS replays given seeds.
func TestDifferentialJoins(t *testing.T) {
	seeds := append([]uint64{}, pinnedJoinSeeds...)
	if s := os.Getenv("TRELLIS_DIFF_SEEDS"); s != "" {
		seeds = diffSeeds()
	} else {
		seeds = append(seeds, diffSeedsN(envRuns("TRELLIS_DIFF_JOIN_RUNS", 3))...)
	}
	for i, seed := range seeds {
		t.Run(fmt.Sprintf("seed_%d", seed), func(t *testing.T) {
			faults := i%4 != 3
			if v := os.Getenv("TRELLIS_DIFF_FAULTS"); v != "" {
				faults = v == "1"
			}
			t.Logf("seed %d: faults %v (replay: TRELLIS_DIFF_SEEDS=%d TRELLIS_DIFF_FAULTS=%d go test ./engine -run TestDifferentialJoins)",
				seed, faults, seed, b2i(faults))
			if d := runDifferential(t, seed, diffMode{faults: faults, joins: true}, worker.Plants{}, diffWriteFor(), 0); len(d) > 0 {
				t.Fatalf("seed %d diverged (pin it in pinnedJoinSeeds):\n%s", seed, strings.Join(d, "\n"))
			}
		})
	}
}
