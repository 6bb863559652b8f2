package engine

import (
	"strings"
)

// checkSQL is a self-check's comparison for one definition (D18 self-check):
// the target's rows against a recompute of the definition that Postgres
// evaluates straight from the source, both rendered as text and matched on
// the target's key rendering (bytes, COLLATE "C").
//
// The recompute is rendered from the Spec's expressions with a plain
// SELECT (1-1) or GROUP BY (aggregates), never from the write path's
// generated SQL (ledger, accumulators, ON CONFLICT), so a bug there cannot
// agree with itself. A JOIN target fits by rendering its own recompute
// SELECT with the same output columns (k and c<i>).
type checkSQL struct {
	cols []string // compared target columns, in order (paused ones left out)
	// page returns, for the page past the cursor $1 (NULL: the start) of $2
	// keys, its last key and key count, then its differing rows (one row of
	// NULLs when none). diff returns the differing rows among the keys $1.
	page, diff string
	// pending lists, in the comparison's snapshot, the source keys with a
	// change the targets do not reflect yet (a logged change outside the
	// last drained batch's snapshot, a held or deferred key); NULL stands
	// for every key (a truncate or schema marker). groupsOf maps such
	// source keys $1 to the target keys they touch (aggregates: the group
	// the ledger files the key under and the group its source row is in).
	pending, groupsOf string
}

// selfCheckSQL renders the comparison, leaving out paused columns.
func (c *compiled) selfCheckSQL(paused map[string]bool) *checkSQL {
	tk, nullable := c.targetIdentity()
	src := c.source() + " AS " + ident(SourceAlias)
	var recCols, cols []string
	var recompute string
	if !c.Spec.IsAggregate() {
		for _, k := range c.Key {
			recCols = append(recCols, ident(SourceAlias)+"."+ident(k.Name)+" AS "+ident(k.Name))
		}
		for _, f := range c.Spec.Fields {
			if paused[f.Name] {
				continue
			}
			cols = append(cols, f.Name)
			recCols = append(recCols, "("+f.Expr+") AS "+ident(f.Name))
		}
		recompute = "SELECT " + strings.Join(recCols, ", ") + " FROM " + src
	} else {
		var groups []string
		for _, g := range c.Spec.GroupBy {
			recCols = append(recCols, "("+g.Expr+") AS "+ident(g.Name))
			groups = append(groups, "("+g.Expr+")")
		}
		for _, f := range c.Spec.Fields {
			if paused[f.Name] {
				continue
			}
			cols = append(cols, f.Name)
			call := aggCall(f)
			if f.Agg == AggJSONBAgg {
				// The write path orders a jsonb_agg by the source key.
				order := joinf(len(c.Key), func(i int) string { return ident(SourceAlias) + "." + ident(c.Key[i].Name) }, ", ")
				call = "jsonb_agg((" + f.Expr + ") ORDER BY " + order + ")"
				if f.Cast != "" {
					call = "(" + call + ")::" + f.Cast
				}
			}
			recCols = append(recCols, call+" AS "+ident(f.Name))
		}
		recompute = "SELECT " + strings.Join(recCols, ", ") + " FROM " + src + " GROUP BY " + strings.Join(groups, ", ")
	}
	side := func(from, alias string) string {
		s := "SELECT " + keySQL(alias, tk, nullable) + " AS k"
		for i, col := range cols {
			s += ", " + alias + "." + ident(col) + "::text AS c" + itoa(i)
		}
		return s + " FROM " + from
	}
	ctes := func(filter string) string {
		return "tgt AS MATERIALIZED (SELECT * FROM (" + side(c.target()+" AS t", "t") + ") x WHERE " + filter + "),\n" +
			"rec AS MATERIALIZED (SELECT * FROM (" + side("("+recompute+") AS r", "r") + ") x WHERE " + filter + ")"
	}
	cs := &checkSQL{cols: cols}
	if c.Spec.IsAggregate() {
		var lg, sg []string
		for i, g := range c.Spec.GroupBy {
			lg = append(lg, "e.g"+itoa(i)+" AS "+ident(g.Name))
			sg = append(sg, "("+g.Expr+") AS "+ident(g.Name))
		}
		cs.groupsOf = "SELECT " + keySQL("x", tk, nullable) + " FROM (SELECT " + strings.Join(lg, ", ") + " FROM " + c.ledger() +
			" e WHERE e.k = ANY($1::text[]) AND e.member) x UNION SELECT " + keySQL("y", tk, nullable) + " FROM (SELECT " +
			strings.Join(sg, ", ") + " FROM " + src + " WHERE " + keySQL(ident(SourceAlias), c.Key, c.KeyNullable) + " = ANY($1::text[])) y"
	}
	sel := `SELECT coalesce(tgt.k, rec.k) AS k, tgt.k IS NULL AS missing, rec.k IS NULL AS extra`
	var differs []string
	for i := range cols {
		ci := "c" + itoa(i)
		sel += ", tgt." + ci + " AS t" + itoa(i) + ", rec." + ci + " AS r" + itoa(i)
		differs = append(differs, "tgt."+ci+" IS DISTINCT FROM rec."+ci)
	}
	where := "tgt.k IS NULL OR rec.k IS NULL"
	if len(differs) > 0 {
		where += " OR " + strings.Join(differs, " OR ")
	}
	join := sel + ` FROM tgt FULL JOIN rec ON tgt.k = rec.k COLLATE "C" WHERE ` + where
	// One pass over each side: the page's bound (the $2-th key past the
	// cursor $1 of the union of both sides' keys) and its differing rows.
	cs.page = "WITH " + ctes(`($1::text IS NULL OR x.k > $1 COLLATE "C")`) + `,
ks AS (SELECT k FROM (SELECT k FROM tgt UNION SELECT k FROM rec) u ORDER BY k COLLATE "C" LIMIT $2),
b AS (SELECT max(k COLLATE "C") AS hi, count(*) AS n FROM ks)
SELECT b.hi, b.n, d.* FROM b LEFT JOIN (` + join + `) d ON d.k <= b.hi COLLATE "C"
ORDER BY d.k COLLATE "C"`
	cs.diff = "WITH " + ctes(`x.k = ANY($1::text[])`) + "\n" + join + `
ORDER BY coalesce(tgt.k, rec.k) COLLATE "C"`
	return cs
}
