package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

type dField struct {
	name, expr string // expr uses {col} placeholders
	agg        AggKind
	cast       string
	num        bool // a JOIN program's scalar a reader can sum
}

type dDef struct {
	name     string
	src      string // table or upstream definition name
	srcSQL   string // oracle relation of a base table (a chain nests its upstream's oracle)
	key      []string
	group    []dField
	fields   []dField
	upstream *dDef
	items    []dItem // a JOIN definition's FROM items (differential_join_test.go)
	noIndex  bool    // its statement ends WITHOUT SOURCE INDEX
}

func fill(expr string, engine bool) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(expr, '{')
		if i < 0 {
			b.WriteString(expr)
			return b.String()
		}
		j := strings.IndexByte(expr[i:], '}') + i
		b.WriteString(expr[:i])
		c := expr[i+1 : j]
		if engine {
			b.WriteString(SourceColumn(c))
		} else {
			b.WriteString(base.Ident(c))
		}
		expr = expr[j+1:]
	}
}

func (d *dDef) spec() Spec {
	s := Spec{Target: TableName{Name: d.name}, Source: TableName{Name: d.src}, Statement: "-- differential " + d.name}
	for _, g := range d.group {
		s.GroupBy = append(s.GroupBy, GroupKey{Name: g.name, Expr: fill(g.expr, true)})
	}
	for _, f := range d.fields {
		s.Fields = append(s.Fields, Field{Name: f.name, Expr: fill(f.expr, true), Agg: f.agg, Cast: f.cast})
	}
	return s
}

// sourceSQL is the oracle's relation: the base table, or the upstream's
// oracle as it reads now (an ALTER TRANSFORM may have changed it).
func (d *dDef) sourceSQL() string {
	if d.items != nil {
		return d.items[0].rel()
	}
	if d.upstream != nil {
		return "(" + d.upstream.oracle() + ")"
	}
	return d.srcSQL
}

// oracle renders the definition's from-scratch result.
func (d *dDef) oracle() string {
	if d.items != nil {
		return d.joinOracle()
	}
	var cols []string
	if len(d.group) == 0 {
		for _, k := range d.key {
			cols = append(cols, base.Ident(k))
		}
		for _, f := range d.fields {
			cols = append(cols, "("+fill(f.expr, false)+") AS "+base.Ident(f.name))
		}
		return "SELECT " + strings.Join(cols, ", ") + " FROM " + d.sourceSQL() + " x"
	}
	var gs []string
	for _, g := range d.group {
		cols = append(cols, "("+fill(g.expr, false)+") AS "+base.Ident(g.name))
		gs = append(gs, "("+fill(g.expr, false)+")")
	}
	for _, f := range d.fields {
		var a string
		switch f.agg {
		case AggCountStar:
			a = "count(*)"
		case AggJSONBAgg:
			var ks []string
			for _, k := range d.key {
				ks = append(ks, base.Ident(k))
			}
			a = "jsonb_agg((" + fill(f.expr, false) + ") ORDER BY " + strings.Join(ks, ", ") + ")"
		default:
			a = oracleAgg[f.agg] + "((" + fill(f.expr, false) + "))"
		}
		if f.cast != "" {
			a = "(" + a + ")::" + f.cast
		}
		cols = append(cols, a+" AS "+base.Ident(f.name))
	}
	return "SELECT " + strings.Join(cols, ", ") + " FROM " + d.sourceSQL() + " x GROUP BY " + strings.Join(gs, ", ")
}

func (d *dDef) targetSQL() string {
	var cols []string
	if len(d.group) == 0 {
		for _, k := range d.key {
			cols = append(cols, base.Ident(k))
		}
	}
	for _, g := range d.group {
		cols = append(cols, base.Ident(g.name))
	}
	for _, f := range d.fields {
		cols = append(cols, base.Ident(f.name))
	}
	return "SELECT " + strings.Join(cols, ", ") + " FROM " + base.Ident(d.name)
}

// outCols are the columns a reader of this definition's target can use.
func (d *dDef) outCols() (keys []string, vals []dField) {
	if len(d.group) == 0 {
		return d.key, d.fields
	}
	for _, g := range d.group {
		keys = append(keys, g.name)
	}
	return keys, d.fields
}

var scalarPool = []dField{
	{expr: "{i} * 2"}, {expr: "coalesce({g1}, 'none')"}, {expr: "{n} + 1"}, {expr: "{b}"}, {expr: "{j}"},
	{expr: "{g2} % 2 = 0"}, {expr: "{n}"}, {expr: "length({g1})"},
}

var aggPool = []dField{
	{agg: AggSum, expr: "{n}"}, {agg: AggSum, expr: "{i}"}, {agg: AggCountStar}, {agg: AggCount, expr: "{n}"},
	{agg: AggAvg, expr: "{i}"}, {agg: AggAvg, expr: "{n}"}, {agg: AggMin, expr: "{n}"}, {agg: AggMax, expr: "{g1}"},
	{agg: AggBoolAnd, expr: "{b}"}, {agg: AggBoolOr, expr: "{b}"}, {agg: AggJSONBAgg, expr: "{j}"},
	{agg: AggMax, expr: "{i}"}, {agg: AggBitOr, expr: "({i} & 7)::bit(3)", cast: "varbit"},
	{agg: AggBitAnd, expr: "({i} & 7)::bit(3)", cast: "varbit"}, {agg: AggSum, expr: "{i} * {n}"},
}

var groupPool = []dField{{expr: "{g1}"}, {expr: "{g2}"}, {expr: "{i} % 3"}, {expr: "{b}"}}

// grammarGroupPool: GROUP BY keys are column references (grammar §7.2).
var grammarGroupPool = []dField{{expr: "{g1}"}, {expr: "{g2}"}, {expr: "{b}"}}

// oracleAgg names each aggregate in the oracle and the TRANSFORM text,
// written here rather than taken from the engine.
var oracleAgg = map[AggKind]string{
	AggSum: "sum", AggCountStar: "count", AggCount: "count", AggAvg: "avg", AggMin: "min",
	AggMax: "max", AggBoolAnd: "bool_and", AggBoolOr: "bool_or", AggBitAnd: "bit_and",
	AggBitOr: "bit_or", AggJSONBAgg: "jsonb_agg",
}

// transformSQL renders the definition as the TRANSFORM statement a user
// would write (grammar mode only: keys are columns, casts implied).
func (d *dDef) transformSQL() string {
	if d.items != nil {
		return d.joinTransformSQL()
	}
	var b strings.Builder
	b.WriteString("TRANSFORM " + base.Ident(d.name) + " FROM " + base.Ident(d.src))
	if len(d.group) > 0 {
		var gs []string
		for _, g := range d.group {
			gs = append(gs, base.Ident(strings.Trim(g.expr, "{}")))
		}
		b.WriteString(" GROUP BY " + strings.Join(gs, ", "))
	}
	var fs []string
	for _, f := range d.fields {
		switch {
		case f.agg == AggCountStar:
			fs = append(fs, "COUNT(*) AS "+base.Ident(f.name))
		case f.agg != AggNone:
			fs = append(fs, strings.ToUpper(oracleAgg[f.agg])+"(("+fill(f.expr, false)+")) AS "+base.Ident(f.name))
		default:
			fs = append(fs, "("+fill(f.expr, false)+") AS "+base.Ident(f.name))
		}
	}
	b.WriteString(" SELECT " + strings.Join(fs, ", "))
	return b.String()
}

func pick[T any](r *rand.Rand, pool []T, n int) []T {
	idx := r.Perm(len(pool))[:min(n, len(pool))]
	out := make([]T, len(idx))
	for i, j := range idx {
		out[i] = pool[j]
	}
	return out
}

func (dr *diffRun) genTables() {
	dr.keys = map[string][]string{}
	nt := 1 + dr.r.IntN(2)
	for i := range nt {
		name := fmt.Sprintf("t%d", i)
		var keyDDL string
		switch dr.r.IntN(3) {
		case 0:
			keyDDL, dr.keys[name] = "id int PRIMARY KEY", []string{"id"}
		case 1:
			keyDDL, dr.keys[name] = "id text PRIMARY KEY", []string{"id"}
		default:
			keyDDL, dr.keys[name] = "id int, k2 text, PRIMARY KEY (id, k2)", []string{"id", "k2"}
		}
		exec(dr.t, dr.pool, "CREATE TABLE "+name+" ("+keyDDL+", g1 text, g2 int, n numeric, i int, b bool, j jsonb)")
		dr.tables = append(dr.tables, name)
	}
}

func (dr *diffRun) genDefs() {
	n := 0
	newName := func() string { n++; return fmt.Sprintf("d%d", n) }
	for _, t := range dr.tables {
		for range 1 + dr.r.IntN(3) {
			d := &dDef{name: newName(), src: t, srcSQL: t, key: dr.keys[t]}
			if dr.r.IntN(2) == 0 {
				for i, f := range pick(dr.r, scalarPool, 1+dr.r.IntN(4)) {
					f.name = fmt.Sprintf("f%d", i)
					d.fields = append(d.fields, f)
				}
			} else if dr.grammar {
				for _, g := range pick(dr.r, grammarGroupPool, 1+dr.r.IntN(2)) {
					g.name = strings.Trim(g.expr, "{}") // a GROUP BY key's column is named by it
					d.group = append(d.group, g)
				}
				for i, f := range pick(dr.r, aggPool, 1+dr.r.IntN(6)) {
					f.name = fmt.Sprintf("a%d", i)
					d.fields = append(d.fields, f)
				}
			} else {
				for i, g := range pick(dr.r, groupPool, 1+dr.r.IntN(2)) {
					g.name = fmt.Sprintf("g%d", i)
					d.group = append(d.group, g)
				}
				for i, f := range pick(dr.r, aggPool, 1+dr.r.IntN(6)) {
					f.name = fmt.Sprintf("a%d", i)
					d.fields = append(d.fields, f)
				}
			}
			dr.defs = append(dr.defs, d)
		}
	}
	// Chains: a reader of an earlier target, sometimes two deep.
	for range max(dr.r.IntN(3), dr.minChains) {
		up := dr.defs[dr.r.IntN(len(dr.defs))]
		keys, vals := up.outCols()
		d := &dDef{name: newName(), src: up.name, key: keys, upstream: up}
		var numeric []string
		for _, v := range vals {
			if v.agg == AggSum || v.agg == AggCountStar || v.agg == AggCount || v.agg == AggMax && v.expr == "{i}" ||
				v.agg == AggNone && (v.expr == "{i} * 2" || v.expr == "{n}" || v.expr == "{n} + 1") {
				numeric = append(numeric, v.name)
			}
		}
		if dr.grammar && len(numeric) > 0 && dr.r.IntN(2) == 0 {
			// GROUP BY takes a column: the upstream's first key.
			c := numeric[dr.r.IntN(len(numeric))]
			d.group = []dField{{name: keys[0], expr: "{" + keys[0] + "}"}}
			d.fields = []dField{{name: "cnt_" + d.name, agg: AggCountStar}, {name: "s_" + d.name, agg: AggSum, expr: "{" + c + "}"},
				{name: "mx_" + d.name, agg: AggMax, expr: "{" + c + "}"}}
		} else if !dr.grammar && len(numeric) > 0 && dr.r.IntN(2) == 0 {
			c := numeric[dr.r.IntN(len(numeric))]
			d.group = []dField{{name: "big", expr: "{" + c + "} > 10"}}
			d.fields = []dField{{name: "cnt", agg: AggCountStar}, {name: "s", agg: AggSum, expr: "{" + c + "}"}, {name: "mx", agg: AggMax, expr: "{" + c + "}"}}
		} else {
			// In grammar mode a field may not take the name of a column of its
			// source with another formula (42702): name them after the reader.
			copyName, vName := "copy_"+keys[0], "v"
			if dr.grammar {
				copyName, vName = "copy_"+d.name, "v_"+d.name
			}
			d.fields = []dField{{name: copyName, expr: "{" + keys[0] + "}"}}
			if len(numeric) > 0 {
				d.fields = append(d.fields, dField{name: vName, expr: "{" + numeric[0] + "}"})
			}
		}
		dr.defs = append(dr.defs, d)
	}
}

var textKeys = []string{"a", "b", "", "sep\x1fx", "ctl\x01", "esc\x1b", "q'uote", "ünï", "sp ace", "z"}

func (dr *diffRun) keyVals(r *rand.Rand, table string) []any {
	id := r.IntN(120)
	switch {
	case len(dr.keys[table]) == 2:
		return []any{id % 40, textKeys[id%len(textKeys)]}
	case table != "" && dr.isTextKey(table):
		return []any{textKeys[id%len(textKeys)] + strconv.Itoa(id/len(textKeys))}
	default:
		return []any{id}
	}
}

func (dr *diffRun) isTextKey(table string) bool {
	var typ string
	dr.pool.QueryRow(context.Background(), `SELECT format_type(atttypid, NULL) FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'id'`, table).Scan(&typ)
	return typ == "text"
}

func rowVals(r *rand.Rand) []any {
	g1s := []any{nil, "", "a", "b", "c\x1f", "ü"}
	var g2, n, i, b any
	if r.IntN(5) > 0 {
		g2 = r.IntN(5)
	}
	if r.IntN(5) > 0 {
		n = fmt.Sprintf("%d.%d", r.IntN(100)-50, r.IntN(2)*5) + []string{"", "0"}[r.IntN(2)]
	}
	if r.IntN(6) > 0 {
		i = r.IntN(101) - 50
	}
	if r.IntN(4) > 0 {
		b = r.IntN(2) == 0
	}
	return []any{g1s[r.IntN(len(g1s))], g2, n, i, b}
}

// writer runs random transactions until ctx ends.
//
// Statements run on a context that is never cancelled: a COMMIT cut off by a
// cancelled context may still land after the caller stopped waiting, and so
// after the token the test takes.
func (dr *diffRun) writer(stop context.Context, seed uint64, textKey map[string]bool) error {
	return dr.writeTxs(stop, rand.New(rand.NewPCG(seed, 7)), textKey, -1)
}

// writeTxs runs n random transactions (n < 0: until stop).
func (dr *diffRun) writeTxs(stop context.Context, r *rand.Rand, textKey map[string]bool, n int) error {
	ctx := context.Background()
	for ; stop.Err() == nil && n != 0; n-- {
		tx, err := dr.pool.Begin(ctx)
		if err != nil {
			return nil
		}
		nops := 1 + r.IntN(4)
		var werr error
		for op := 0; op < nops && werr == nil; op++ {
			t := dr.tables[r.IntN(len(dr.tables))]
			kcols := dr.keys[t]
			kv := func() []any {
				id := r.IntN(120)
				if len(kcols) == 2 {
					return []any{id % 40, textKeys[id%len(textKeys)]}
				}
				if textKey[t] {
					return []any{textKeys[id%len(textKeys)] + strconv.Itoa(id/len(textKeys))}
				}
				return []any{id}
			}
			keyPH := func(start int) string {
				var ps []string
				for i := range kcols {
					ps = append(ps, fmt.Sprintf("$%d", start+i))
				}
				return strings.Join(ps, ", ")
			}
			kc := strings.Join(kcols, ", ")
			switch x := r.IntN(100); {
			case x < 35: // multi-row upsert
				var vals []string
				var args []any
				seen := map[string]bool{}
				for range 1 + r.IntN(4) {
					k := kv()
					if seen[fmt.Sprint(k)] {
						continue
					}
					seen[fmt.Sprint(k)] = true
					row := append(k, rowVals(r)...)
					var ps []string
					for range row {
						args = append(args, nil)
						ps = append(ps, fmt.Sprintf("$%d", len(args)))
					}
					copy(args[len(args)-len(row):], row)
					ps[len(ps)-3] += "::numeric"
					vals = append(vals, "("+strings.Join(ps, ", ")+", jsonb_build_object('v', "+ps[len(ps)-2]+"::int))")
				}
				conflict := " ON CONFLICT (" + kc + ") DO UPDATE SET g1 = excluded.g1, n = excluded.n, i = t.i + 1, j = excluded.j"
				if r.IntN(3) == 0 {
					conflict = " ON CONFLICT DO NOTHING"
				}
				_, werr = tx.Exec(ctx, "INSERT INTO "+t+" AS t ("+kc+", g1, g2, n, i, b, j) VALUES "+strings.Join(vals, ", ")+conflict, args...)
			case x < 60:
				v := rowVals(r)
				_, werr = tx.Exec(ctx, "UPDATE "+t+" SET g1 = $1, g2 = $2, n = $3::numeric, b = $4 WHERE ("+kc+") >= ("+keyPH(5)+") AND random() < 0.3",
					append([]any{v[0], v[1], v[2], v[4]}, kv()...)...)
			case x < 70:
				_, werr = tx.Exec(ctx, "UPDATE "+t+" SET i = i + 1, n = n * 1.0 WHERE ("+kc+") = ("+keyPH(1)+")", kv()...)
			case x < 82:
				_, werr = tx.Exec(ctx, "DELETE FROM "+t+" WHERE ("+kc+") = ("+keyPH(1)+")", kv()...)
			case x < 90: // a savepoint rolled back
				if _, werr = tx.Exec(ctx, "SAVEPOINT sp"); werr == nil {
					if _, werr = tx.Exec(ctx, "DELETE FROM "+t+" WHERE random() < 0.2"); werr == nil {
						_, werr = tx.Exec(ctx, "ROLLBACK TO SAVEPOINT sp")
					}
				}
			case x < 95: // a key change
				if len(kcols) == 1 && !textKey[t] {
					_, werr = tx.Exec(ctx, "UPDATE "+t+" SET id = id + 60 WHERE id = $1 AND id < 60 AND NOT EXISTS (SELECT 1 FROM "+t+" WHERE id = $1 + 60)", r.IntN(60))
				} else {
					_, werr = tx.Exec(ctx, "UPDATE "+t+" SET g2 = coalesce(g2, 0) + 1 WHERE random() < 0.05")
				}
			case x < 96 && r.IntN(4) == 0:
				_, werr = tx.Exec(ctx, "TRUNCATE "+t)
			case x == 99: // a bulk statement: every key in one log row, so one bucket of many pages (engine/drain/bulk.go)
				_, werr = tx.Exec(ctx, "UPDATE "+t+" SET i = i + 1, n = n + 1")
			default:
				_, werr = tx.Exec(ctx, "DELETE FROM "+t+" WHERE ("+kc+") <= ("+keyPH(1)+") AND random() < 0.1", kv()...)
			}
		}
		if werr != nil {
			tx.Rollback(context.Background())
			switch pgerr.CodeOf(werr) {
			case "40P01", "23505", "40001", "55P03":
				continue
			}
			if dr.life.writerMayFail(werr) {
				continue
			}
			return fmt.Errorf("writer: %w", werr)
		}
		if r.IntN(8) == 0 {
			tx.Rollback(ctx)
		} else if err := tx.Commit(ctx); err != nil {
			if c := pgerr.CodeOf(err); c == "40P01" || c == "40001" {
				continue
			}
			return fmt.Errorf("commit: %w", err)
		} else if err == nil {
			dr.commits.Add(1)
		}
	}
	return nil
}
