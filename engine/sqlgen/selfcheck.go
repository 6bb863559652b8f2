package sqlgen

import (
	"strings"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/model"
)

// Check is a self-check's comparison for one definition (D18 self-check):
// the target's rows against a recompute of the definition that Postgres
// evaluates straight from the source, both rendered as text and matched on
// the target's key rendering (bytes, COLLATE "C").
//
// The recompute is rendered from the Spec's expressions with a plain
// SELECT (1-1) or GROUP BY (aggregates), never from the write path's
// generated SQL (ledger, accumulators, ON CONFLICT), so a bug there cannot
// agree with itself. A JOIN target fits by rendering its own recompute
// SELECT with the same output columns (k and c<i>).
type Check struct {
	Cols []string // compared target columns, in order (paused ones left out)
	// Page returns, for the page past the cursor $1 (NULL: the start) of $2
	// keys, its last key and key count, then its differing rows (one row of
	// NULLs when none). Diff returns the differing rows among the keys $1.
	Page, Diff string
	// Pending lists, in the comparison's snapshot, the source keys with a
	// change the targets do not reflect yet (a logged change outside the
	// last drained batch's snapshot, a held or deferred key); NULL stands
	// for every key (a truncate or schema marker). GroupsOf maps such
	// source keys $1 to the target keys they touch (aggregates: the group
	// the ledger files the key under and the group its source row is in).
	Pending, GroupsOf string
	// typed: pages walk the key columns' own order (the primary key index
	// of source and target) instead of the rendering's, so a page reads
	// only its keys; 1-1 targets with a non-null key.
	typed bool
	key   []model.KeyCol
	// nullable: the cursor's rendering allows NULL parts (aggregates);
	// textDiff: the re-check stays on renderings (typed group pages).
	nullable, textDiff bool
}

// PageArgs are the page statement's parameters for a cursor.
func (cs *Check) PageArgs(cursor *string, limit int64) []any {
	if !cs.typed {
		return []any{cursor, limit}
	}
	args := []any{cursor == nil}
	var parts []*string
	if cursor != nil {
		parts, _ = model.DecodeKey(*cursor, len(cs.key), cs.nullable)
	}
	for i := range cs.key {
		var p *string
		if i < len(parts) {
			p = parts[i]
		}
		args = append(args, p)
	}
	return append(args, limit)
}

// DiffArgs are the re-check statement's parameters for keys.
func (cs *Check) DiffArgs(keys []string) []any {
	if !cs.typed || cs.textDiff {
		return []any{keys}
	}
	args, _, _ := model.KeyArgs(keys, cs.key, false)
	return args
}

// SelfCheck renders the comparison, leaving out paused columns.
func SelfCheck(c *model.Compiled, paused map[string]bool) *Check {
	tk, nullable := c.TargetIdentity()
	src := c.FromSQL()
	var recCols, cols []string
	var recompute string
	if !c.Spec.IsAggregate() {
		for _, k := range c.Key {
			recCols = append(recCols, base.Ident(model.SourceAlias)+"."+base.Ident(k.Name)+" AS "+base.Ident(k.Name))
		}
		for _, f := range c.Spec.Fields {
			if paused[f.Name] {
				continue
			}
			cols = append(cols, f.Name)
			recCols = append(recCols, "("+f.Expr+") AS "+base.Ident(f.Name))
		}
		recompute = "SELECT " + strings.Join(recCols, ", ") + " FROM " + src
	} else {
		var groups []string
		for _, g := range c.Spec.GroupBy {
			recCols = append(recCols, "("+g.Expr+") AS "+base.Ident(g.Name))
			groups = append(groups, "("+g.Expr+")")
		}
		for _, f := range c.Spec.Fields {
			if paused[f.Name] {
				continue
			}
			cols = append(cols, f.Name)
			call := AggCall(f)
			if f.Agg == model.AggJSONBAgg {
				// The write path orders a jsonb_agg by the source key.
				order := Joinf(len(c.Key), func(i int) string { return base.Ident(model.SourceAlias) + "." + base.Ident(c.Key[i].Name) }, ", ")
				call = "jsonb_agg((" + f.Expr + ") ORDER BY " + order + ")"
				if f.Cast != "" {
					call = "(" + call + ")::" + f.Cast
				}
			}
			recCols = append(recCols, call+" AS "+base.Ident(f.Name))
		}
		recompute = "SELECT " + strings.Join(recCols, ", ") + " FROM " + src + " GROUP BY " + strings.Join(groups, ", ")
	}
	side := func(from, alias string) string {
		s := "SELECT " + model.KeySQL(alias, tk, nullable) + " AS k"
		for i, col := range cols {
			s += ", " + alias + "." + base.Ident(col) + "::text AS c" + model.Itoa(i)
		}
		return s + " FROM " + from
	}
	ctes := func(filter string) string {
		return "tgt AS MATERIALIZED (SELECT * FROM (" + side(c.Target()+" AS t", "t") + ") x WHERE " + filter + "),\n" +
			"rec AS MATERIALIZED (SELECT * FROM (" + side("("+recompute+") AS r", "r") + ") x WHERE " + filter + ")"
	}
	cs := &Check{Cols: cols}
	if c.Spec.IsAggregate() {
		var lg, sg []string
		for i, g := range c.Spec.GroupBy {
			lg = append(lg, "e.g"+model.Itoa(i)+" AS "+base.Ident(g.Name))
			sg = append(sg, "("+g.Expr+") AS "+base.Ident(g.Name))
		}
		cs.GroupsOf = "SELECT " + model.KeySQL("x", tk, nullable) + " FROM (SELECT " + strings.Join(lg, ", ") + " FROM " + c.Ledger() +
			" e WHERE e.k = ANY($1::text[]) AND e.member) x UNION SELECT " + model.KeySQL("y", tk, nullable) + " FROM (SELECT " +
			strings.Join(sg, ", ") + " FROM " + src + " WHERE " + model.KeySQL(base.Ident(model.SourceAlias), c.Key, c.KeyNullable) + " = ANY($1::text[])) y"
	}
	sel := `SELECT coalesce(tgt.k, rec.k) AS k, tgt.k IS NULL AS missing, rec.k IS NULL AS extra`
	var differs []string
	for i := range cols {
		ci := "c" + model.Itoa(i)
		sel += ", tgt." + ci + " AS t" + model.Itoa(i) + ", rec." + ci + " AS r" + model.Itoa(i)
		differs = append(differs, "tgt."+ci+" IS DISTINCT FROM rec."+ci)
	}
	where := "tgt.k IS NULL OR rec.k IS NULL"
	if len(differs) > 0 {
		where += " OR " + strings.Join(differs, " OR ")
	}
	join := sel + ` FROM tgt FULL JOIN rec ON tgt.k = rec.k COLLATE "C" WHERE ` + where
	// One pass over each side: the page's bound (the $2-th key past the
	// cursor $1 of the union of both sides' keys) and its differing rows.
	cs.Page = "WITH " + ctes(`($1::text IS NULL OR x.k > $1 COLLATE "C")`) + `,
ks AS (SELECT k FROM (SELECT k FROM tgt UNION SELECT k FROM rec) u ORDER BY k COLLATE "C" LIMIT $2),
b AS (SELECT max(k COLLATE "C") AS hi, count(*) AS n FROM ks)
SELECT b.hi, b.n, d.* FROM b LEFT JOIN (` + join + `) d ON d.k <= b.hi COLLATE "C"
ORDER BY d.k COLLATE "C"`
	cs.Diff = "WITH " + ctes(`x.k = ANY($1::text[])`) + "\n" + join + `
ORDER BY coalesce(tgt.k, rec.k) COLLATE "C"`
	if !c.Spec.IsAggregate() && !c.KeyNullable {
		cs.typedPages(c, cols, join)
	}
	if c.Spec.IsAggregate() && len(c.Spec.GroupBy) == 1 {
		cs.typedGroupPages(c, cols, recCols, join)
	}
	return cs
}

// typedGroupPages renders the page of an aggregate with one GROUP BY key
// over the key's own order: the target's first $3 groups past the cursor
// (through its unique index, NULL last as the index keeps it), then the
// recompute of only the groups up to the last of them, the cursor $2
// compared typed ($1 true at the start, $2 NULL past the NULL group). A
// page so aggregates its own groups' rows instead of every row past the
// cursor, and renders keys per group, not per source row. The re-check
// stays on renderings (the text diff).
func (cs *Check) typedGroupPages(c *model.Compiled, cols, recCols []string, join string) {
	tk, _ := c.TargetIdentity()
	cs.typed, cs.key, cs.nullable, cs.textDiff = true, tk, true, true
	g := c.Spec.GroupBy[0]
	typ := tk[0].Type
	after := func(x string) string {
		return "($1::boolean OR " + x + " > $2::" + typ + " OR (" + x + " IS NULL AND $2::" + typ + " IS NOT NULL))"
	}
	out := func(alias, from string) string {
		q := "SELECT " + alias + "." + base.Ident(g.Name) + " AS p0, " + model.KeySQL(alias, tk, true) + " AS k"
		for i, col := range cols {
			q += ", " + alias + "." + base.Ident(col) + "::text AS c" + model.Itoa(i)
		}
		return q + " FROM " + from
	}
	tcol := "t." + base.Ident(g.Name)
	gx := "(" + g.Expr + ")"
	// The recompute's bound: every group when the target's page is short
	// (the end) or ends with the NULL group, else up to its last group.
	bound := "((SELECT NOT b.full OR b.has_null FROM bnd b) OR " + gx + " <= (SELECT b.hi FROM bnd b))"
	cs.Page = "WITH tgt AS MATERIALIZED (" + out("t", "(SELECT * FROM "+c.Target()+" AS t WHERE "+after(tcol)+
		" ORDER BY "+tcol+" LIMIT $3) t") + "),\n" +
		"bnd AS MATERIALIZED (SELECT count(*) >= $3 AS full, bool_or(p0 IS NULL) AS has_null, max(p0) AS hi FROM tgt),\n" +
		"rec AS MATERIALIZED (" + out("r", "(SELECT "+strings.Join(recCols, ", ")+" FROM "+c.FromSQL()+
		" WHERE "+after(gx)+" AND "+bound+" GROUP BY "+gx+") r") + "),\n" +
		"ks AS (SELECT p0, k FROM tgt UNION SELECT p0, k FROM rec),\n" +
		"b AS (SELECT (SELECT k FROM ks ORDER BY p0 DESC NULLS FIRST LIMIT 1) AS hi, (SELECT count(*) FROM ks) AS n)\n" +
		"SELECT b.hi, b.n, d.* FROM b LEFT JOIN (" + join + ") d ON true\n" +
		`ORDER BY d.k COLLATE "C"`
}

// typedPages renders a 1-1 target's page and re-check over the key
// columns' order: each side reads its first $n+2 keys past the cursor
// ($2.. its parts, $1 true at the start) through its primary key, so a
// page costs its own keys, not the table. The comparison (join) is the
// rendering-keyed one of the text pages.
func (cs *Check) typedPages(c *model.Compiled, cols []string, join string) {
	cs.typed, cs.key = true, c.Key
	n := len(c.Key)
	keyList := func(alias string) string {
		return Joinf(n, func(i int) string { return alias + "." + base.Ident(c.Key[i].Name) }, ", ")
	}
	params := Joinf(n, func(i int) string { return "$" + model.Itoa(i+2) + "::" + c.Key[i].Type }, ", ")
	limit := "$" + model.Itoa(n+2)
	after := func(alias string) string { return "($1::boolean OR (" + keyList(alias) + ") > (" + params + "))" }
	ps := Joinf(n, func(i int) string { return "p" + model.Itoa(i) }, ", ")
	// out projects a side's rows: typed key parts, rendering, column texts.
	out := func(alias, from string) string {
		q := "SELECT " + Joinf(n, func(i int) string { return alias + "." + base.Ident(c.Key[i].Name) + " AS p" + model.Itoa(i) }, ", ") +
			", " + model.KeySQL(alias, c.Key, false) + " AS k"
		for i, col := range cols {
			q += ", " + alias + "." + base.Ident(col) + "::text AS c" + model.Itoa(i)
		}
		return q + " FROM " + from
	}
	src := c.FromSQL()
	recCols := []string{keyList(base.Ident(model.SourceAlias))}
	for _, col := range cols {
		for _, f := range c.Spec.Fields {
			if f.Name == col {
				recCols = append(recCols, "("+f.Expr+") AS "+base.Ident(f.Name))
			}
		}
	}
	rec := func(where, tail string) string {
		return out("r", "(SELECT "+strings.Join(recCols, ", ")+" FROM "+src+" WHERE "+where+tail+") r")
	}
	tgt := func(where, tail string) string {
		return out("t", "(SELECT * FROM "+c.Target()+" AS t WHERE "+where+tail+") t")
	}
	order := func(alias string) string { return " ORDER BY " + keyList(alias) + " LIMIT " + limit }
	cs.Page = "WITH tgt AS MATERIALIZED (" + tgt(after("t"), order("t")) + "),\n" +
		"rec AS MATERIALIZED (" + rec(after(base.Ident(model.SourceAlias)), order(base.Ident(model.SourceAlias))) + "),\n" +
		"ks AS (SELECT " + ps + ", k FROM (SELECT " + ps + ", k FROM tgt UNION SELECT " + ps + ", k FROM rec) u ORDER BY " + ps + " LIMIT " + limit + "),\n" +
		"b AS (SELECT (SELECT k FROM ks ORDER BY " + Joinf(n, func(i int) string { return "p" + model.Itoa(i) + " DESC" }, ", ") +
		" LIMIT 1) AS hi, (SELECT count(*) FROM ks) AS n)\n" +
		"SELECT b.hi, b.n, d.* FROM b LEFT JOIN (SELECT * FROM (" + join + ") j WHERE j.k IN (SELECT k FROM ks)) d ON true\n" +
		"LEFT JOIN ks o ON o.k = d.k ORDER BY " + Joinf(n, func(i int) string { return "o.p" + model.Itoa(i) }, ", ")
	// The re-check reads its keys ($1 renderings, $2.. their parts).
	unnest := "unnest(" + Joinf(n, func(i int) string { return "$" + model.Itoa(i+2) + "::text[]" }, ", ") + ") AS u(" + ps + ")"
	casts := Joinf(n, func(i int) string { return "u.p" + model.Itoa(i) + "::" + c.Key[i].Type }, ", ")
	among := func(alias string) string {
		return "(" + keyList(alias) + ") IN (SELECT " + casts + " FROM " + unnest + ") AND " + model.KeySQL(alias, c.Key, false) + " = ANY($1::text[])"
	}
	cs.Diff = "WITH tgt AS MATERIALIZED (" + tgt(among("t"), "") + "),\n" +
		"rec AS MATERIALIZED (" + rec(among(base.Ident(model.SourceAlias)), "") + ")\n" + join + `
ORDER BY coalesce(tgt.k, rec.k) COLLATE "C"`
}

// AggCall is the aggregate call of an aggregate field over the source rows.
func AggCall(f model.Field) string {
	name := model.AggSQLName(f.Agg)
	var call string
	if f.Agg == model.AggCountStar {
		call = "count(*)"
	} else {
		call = name + "((" + f.Expr + "))"
	}
	if f.Cast != "" {
		call = "(" + call + ")::" + f.Cast
	}
	return call
}
