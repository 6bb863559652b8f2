package sqlgen

import (
	"strings"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/model"
)

// aggParts are the column lists an aggregate definition's statements
// share: the ledger entry's columns (g<i> group values, a<i> distinct
// arguments, sk<i> source key parts when an aggregate needs them), the
// per-group deltas, and the target's accumulator and field columns.
type aggParts struct {
	keyed
	c      *model.Compiled
	ng, na int
	// liveCols: a source row's entry columns; setLedger: an entry's
	// update from want row w; gcols: the target's group columns; lcols:
	// the ledger's columns.
	liveCols, setLedger, gcols, lcols string
	// Deltas per group (dcols); memberCols are the same sums over members
	// only (every sign 1), cheaper aggregates for a GROUP BY over the
	// ledger. insCols/insVals/set: the target's upsert from delta row d.
	dcols, memberCols, insCols, insVals, set []string
	// recompute are the fields recomputed from the ledger (MIN, MAX, ...),
	// not incremented.
	recompute  []int
	groupMatch string
}

// acc modes: a new group's delta, an existing group's sum with the delta,
// or (refresh) a group's own stored value.
const (
	accNew = iota
	accUpsert
	accOwn
)

func (p *aggParts) gs(prefix string) string {
	return Joinf(p.ng, func(i int) string { return prefix + "g" + model.Itoa(i) }, ", ")
}

func (p *aggParts) as(prefix string) string {
	if p.na == 0 {
		return ""
	}
	return ", " + Joinf(p.na, func(i int) string { return prefix + "a" + model.Itoa(i) }, ", ")
}

func (p *aggParts) sks(prefix string) string {
	if !p.c.NeedSrcKey {
		return ""
	}
	return ", " + Joinf(len(p.c.Key), func(i int) string { return prefix + "sk" + model.Itoa(i) }, ", ")
}

func (cd *Def) generateAggregate() {
	c := cd.C
	p := newAggParts(cd)
	// What each field is, computed for target row t2 from what is kept for
	// its group (a refresh after a field pause).
	cd.groupValue = map[string]string{}
	for i, f := range c.Spec.Fields {
		if c.Recompute[i] {
			cd.groupValue[f.Name] = p.recomputeAgg(i, true)
		} else {
			cd.groupValue[f.Name] = p.incExpr(f, c.FieldArg[i], accOwn)
		}
	}
	cd.Derive = p.derive()
	cd.rebuildAgg.head, cd.rebuildAgg.tail = p.rebuildChunk()
	cd.freshHead, cd.freshTail = p.freshChunk()
	cd.GroupsSQL, cd.ReconcileSQL = p.groups()
	cd.PruneSQL = p.prune()
	cd.DeleteEmpty = "DELETE FROM " + c.Target() + ` WHERE ctid = ANY($1::tid[]) AND "__members" = 0`
	cd.LedgerGC = "DELETE FROM " + c.Ledger() + " WHERE k = ANY($1::text[]) AND NOT member"
	cd.Recompute = p.recomputeSQL()
}

func newAggParts(cd *Def) *aggParts {
	c := cd.C
	p := &aggParts{keyed: keyedSource(c), c: c, ng: len(c.Spec.GroupBy), na: len(c.Args)}
	p.liveCols = Joinf(p.ng, func(i int) string { return "(" + c.Spec.GroupBy[i].Expr + ") AS g" + model.Itoa(i) }, ", ")
	for i, a := range c.Args {
		p.liveCols += ", (" + a.Expr + ") AS a" + model.Itoa(i)
	}
	if c.NeedSrcKey {
		for i, k := range c.Key {
			p.liveCols += ", " + base.Ident(model.SourceAlias) + "." + base.Ident(k.Name) + " AS sk" + model.Itoa(i)
		}
	}
	p.setLedger = "member = w.member, " + Joinf(p.ng, func(i int) string { return "g" + model.Itoa(i) + " = w.g" + model.Itoa(i) }, ", ")
	for i := range c.Args {
		p.setLedger += ", a" + model.Itoa(i) + " = w.a" + model.Itoa(i)
	}
	if c.NeedSrcKey {
		for i := range c.Key {
			p.setLedger += ", sk" + model.Itoa(i) + " = w.sk" + model.Itoa(i)
		}
	}
	p.gcols = Joinf(p.ng, func(i int) string { return base.Ident(c.Spec.GroupBy[i].Name) }, ", ")
	p.accumulators()
	for i, f := range c.Spec.Fields {
		if cd.Paused[f.Name] {
			continue // the accumulators above are still maintained
		}
		if c.Recompute[i] {
			p.recompute = append(p.recompute, i)
			continue
		}
		p.insCols = append(p.insCols, base.Ident(f.Name))
		p.insVals = append(p.insVals, p.incExpr(f, c.FieldArg[i], accNew))
		p.set = append(p.set, base.Ident(f.Name)+" = "+p.incExpr(f, c.FieldArg[i], accUpsert))
	}
	p.groupMatch = Joinf(p.ng, func(i int) string {
		g := "t2." + base.Ident(c.Spec.GroupBy[i].Name)
		e := "e.g" + model.Itoa(i)
		return "(" + e + " = " + g + " OR (" + e + " IS NULL AND " + g + " IS NULL))"
	}, " AND ")
	p.lcols = "k, member, " + p.gs("")
	for i := range c.Args {
		p.lcols += ", a" + model.Itoa(i)
	}
	p.lcols += p.sks("")
	return p
}

// accumulators adds the hidden columns every group keeps: its member
// count, and per argument its non-NULL count, sum and true count as the
// fields need them.
func (p *aggParts) accumulators() {
	p.dcols = []string{"sum(sign) AS dm"}
	p.memberCols = []string{"count(*) AS dm"}
	p.insCols = []string{`"__members"`}
	p.insVals = []string{"dm"}
	p.set = []string{`"__members" = t."__members" + excluded."__members"`}
	add := func(col, delta, member, d string) {
		p.dcols = append(p.dcols, delta+" AS "+d)
		p.memberCols = append(p.memberCols, member+" AS "+d)
		p.insCols = append(p.insCols, base.Ident(col))
		p.insVals = append(p.insVals, d)
		p.set = append(p.set, base.Ident(col)+" = t."+base.Ident(col)+" + excluded."+base.Ident(col))
	}
	for i, a := range p.c.Args {
		ai, n := "a"+model.Itoa(i), model.Itoa(i)
		add("__cnt"+n, "sum(CASE WHEN "+ai+" IS NULL THEN 0 ELSE sign END)", "count("+ai+")", "dc"+n)
		if a.NeedSum {
			z := "CAST('0' AS " + a.SumType + ")"
			// Subtracting the negative part keeps a type's minimum from overflowing on negation.
			add("__sum"+n, "coalesce(sum("+ai+") FILTER (WHERE sign > 0), "+z+") - coalesce(sum("+ai+") FILTER (WHERE sign < 0), "+z+")",
				"coalesce(sum("+ai+"), "+z+")", "ds"+n)
		}
		if a.NeedTrue {
			add("__true"+n, "sum(CASE WHEN "+ai+" THEN sign ELSE 0 END)", "count(*) FILTER (WHERE "+ai+")", "dt"+n)
		}
	}
}

// acc reads an accumulator ("m" members, "c" count, "s" sum, "t" trues)
// of argument i in one of the acc modes.
func (p *aggParts) acc(mode int, what string, i int) string {
	col := map[string]string{"m": `"__members"`, "c": base.Ident("__cnt" + model.Itoa(i)), "s": base.Ident("__sum" + model.Itoa(i)), "t": base.Ident("__true" + model.Itoa(i))}[what]
	switch mode {
	case accNew:
		return map[string]string{"m": "dm", "c": "dc" + model.Itoa(i), "s": "ds" + model.Itoa(i), "t": "dt" + model.Itoa(i)}[what]
	case accOwn:
		return "t2." + col
	}
	return "(t." + col + " + excluded." + col + ")"
}

// incExpr is an incremented field's value from its accumulators.
func (p *aggParts) incExpr(f model.Field, a int, mode int) string {
	var x string
	switch f.Agg {
	case model.AggCountStar:
		x = p.acc(mode, "m", 0)
	case model.AggCount:
		x = p.acc(mode, "c", a)
	case model.AggSum:
		x = "CASE WHEN " + p.acc(mode, "c", a) + " = 0 THEN NULL ELSE " + p.acc(mode, "s", a) + " END"
	case model.AggAvg:
		x = "CASE WHEN " + p.acc(mode, "c", a) + " = 0 THEN NULL ELSE " + p.acc(mode, "s", a) + "::numeric / " + p.acc(mode, "c", a) + "::numeric END"
	case model.AggBoolAnd:
		x = "CASE WHEN " + p.acc(mode, "c", a) + " = 0 THEN NULL ELSE " + p.acc(mode, "t", a) + " = " + p.acc(mode, "c", a) + " END"
	case model.AggBoolOr:
		x = "CASE WHEN " + p.acc(mode, "c", a) + " = 0 THEN NULL ELSE " + p.acc(mode, "t", a) + " > 0 END"
	}
	if f.Cast != "" {
		x = "(" + x + ")::" + f.Cast
	}
	return x
}

// recomputeAgg is a recomputed field over ledger entries "e": one group's
// (a subquery for target row t2), or the aggregate alone for a GROUP BY
// over the entries (perRow false).
func (p *aggParts) recomputeAgg(i int, perRow bool) string {
	c := p.c
	f := c.Spec.Fields[i]
	a := "e.a" + model.Itoa(c.FieldArg[i])
	var agg string
	if f.Agg == model.AggJSONBAgg {
		agg = "jsonb_agg(" + a + " ORDER BY " + Joinf(len(c.Key), func(j int) string { return "e.sk" + model.Itoa(j) }, ", ") + ")"
	} else {
		agg = model.AggSQLName(f.Agg) + "(" + a + ")"
	}
	if f.Cast != "" {
		agg = "(" + agg + ")::" + f.Cast
	}
	if !perRow {
		return agg
	}
	return "(SELECT " + agg + " FROM " + c.Ledger() + " e WHERE e.member AND " + p.groupMatch + ")"
}

// groupUpsert adds the deltas of d to the target's groups and returns the
// tuple ids written (for DeleteEmpty and Recompute).
func (p *aggParts) groupUpsert() string {
	return `INSERT INTO ` + p.c.Target() + ` AS t (` + p.gcols + `, ` + strings.Join(p.insCols, ", ") + `)
SELECT ` + p.gs("") + `, ` + strings.Join(p.insVals, ", ") + ` FROM d ORDER BY ` + p.gs("") + `
ON CONFLICT (` + p.gcols + `) DO UPDATE SET ` + strings.Join(p.set, ", ") + `
RETURNING t.ctid`
}

// derive re-derives the ledger entries of keys $1 and adds the
// differences to their groups. The entries old read are updated by tuple
// id: the page holds them locked (LockSelect), so they stay where old
// found them, and the UPDATE needs no second index descent per key.
func (p *aggParts) derive() string {
	c := p.c
	return `WITH u AS (SELECT * FROM ` + p.unnest + `),
live AS (SELECT u.k, ` + p.liveCols + ` FROM u JOIN ` + p.src + ` ON ` + p.lookup + `),
want AS (SELECT u.k, (l.k IS NOT NULL) AS member, ` + p.gs("l.") + p.as("l.") + p.sks("l.") + ` FROM u LEFT JOIN live l ON l.k = u.k),
old AS MATERIALIZED (SELECT e.ctid AS at, e.k, e.member, ` + p.gs("e.") + p.as("e.") + ` FROM ` + c.Ledger() + ` e WHERE e.k = ANY($1::text[])),
upd AS (UPDATE ` + c.Ledger() + ` e SET ` + p.setLedger + ` FROM want w
        WHERE e.ctid = ANY(ARRAY(SELECT at FROM old)) AND e.k = w.k AND e *<> ROW(w.k, w.member, ` + p.gs("w.") + p.as("w.") + p.sks("w.") + `)::` + c.Ledger() + `
        RETURNING e.k),
moves AS (SELECT ` + p.gs("o.") + `, -1 AS sign` + p.as("o.") + ` FROM old o JOIN upd USING (k) WHERE o.member
          UNION ALL
          SELECT ` + p.gs("w.") + `, 1` + p.as("w.") + ` FROM want w JOIN upd USING (k) WHERE w.member),
d AS (SELECT ` + p.gs("") + `, ` + strings.Join(p.dcols, ", ") + ` FROM moves GROUP BY ` + p.gs("") + `)
` + p.groupUpsert()
}

// rebuildChunk is an aggregate rebuild's chunk (RebuildAggSQL), in pieces
// around its range: derive over a key range of the source instead of a
// list of keys, for a chunk that holds the ledger against pages (no entry
// locks). Every key read is a member; keys the source lacks are the
// sweep's. The update finds the entries old read by their tuple ids (no
// second index descent per key; the chunk's lock keeps them where they
// are).
func (p *aggParts) rebuildChunk() (head, tail string) {
	c := p.c
	head = `WITH live AS MATERIALIZED (SELECT ` + model.KeySQL(base.Ident(model.SourceAlias), c.Key, c.KeyNullable) + ` AS k, true AS member, ` + p.liveCols + ` FROM ` + p.from
	tail = `),
old AS MATERIALIZED (SELECT e.ctid AS at, e.k, e.member, ` + p.gs("e.") + p.as("e.") + ` FROM ` + c.Ledger() + ` e WHERE e.k = ANY(ARRAY(SELECT k FROM live))),
upd AS (UPDATE ` + c.Ledger() + ` e SET ` + p.setLedger + ` FROM live w
        WHERE e.ctid = ANY(ARRAY(SELECT at FROM old)) AND e.k = w.k AND e *<> ROW(w.k, w.member, ` + p.gs("w.") + p.as("w.") + p.sks("w.") + `)::` + c.Ledger() + `
        RETURNING e.k),
ins AS (INSERT INTO ` + c.Ledger() + ` (` + p.lcols + `) SELECT w.k, w.member, ` + p.gs("w.") + p.as("w.") + p.sks("w.") + ` FROM live w
        WHERE NOT EXISTS (SELECT 1 FROM old o WHERE o.k = w.k) ORDER BY w.k COLLATE "C" RETURNING k),
moves AS (SELECT ` + p.gs("o.") + `, -1 AS sign` + p.as("o.") + ` FROM old o JOIN upd USING (k) WHERE o.member
          UNION ALL
          SELECT ` + p.gs("w.") + `, 1` + p.as("w.") + ` FROM live w WHERE w.k IN (SELECT k FROM upd UNION ALL SELECT k FROM ins)),
d AS (SELECT ` + p.gs("") + `, ` + strings.Join(p.dcols, ", ") + ` FROM moves GROUP BY ` + p.gs("") + `),
tg AS (` + p.groupUpsert() + `)
SELECT (SELECT count(*) FROM live), coalesce(array_agg(ctid), '{}') FROM tg`
	return head, tail
}

// freshChunk is a fresh build's chunk (FreshSQL, HeapSQL) in pieces
// around its range: it writes ledger entries only (the groups step writes
// the group rows once, from the ledger). The chunk holds the ledger
// against pages, so an entry present is one a page committed: probed per
// row (a subplan, never a hash of the growing ledger) and skipped; a plain
// insert, because ON CONFLICT's speculative insertion cost about twice the
// insert itself.
func (p *aggParts) freshChunk() (head, tail string) {
	c := p.c
	head = `INSERT INTO ` + c.Ledger() + ` (` + p.lcols + `)
SELECT k, true, ` + p.gs("") + p.as("") + p.sks("") + ` FROM (SELECT ` + model.KeySQL(base.Ident(model.SourceAlias), c.Key, c.KeyNullable) + ` AS k, ` + p.liveCols + ` FROM ` + p.from
	tail = `) live
WHERE (SELECT true FROM ` + c.Ledger() + ` e WHERE e.k = live.k) IS NULL ORDER BY k COLLATE "C"`
	return head, tail
}

// groups are a build's last steps over the ledger: every group from its
// members, as derive's increments would leave it from nothing (the same
// dcols with sign 1), recomputed fields included; written once by a fresh
// build (GroupsSQL) or reconciled by a rebuild (ReconcileSQL), whose
// target has every group already, usually right: rows that differ are
// rewritten, missing groups inserted, paused fields left alone.
func (p *aggParts) groups() (fresh, reconcile string) {
	c := p.c
	gcolsAll, gvals := []string{p.gcols}, []string{p.gs("")}
	gcolsAll = append(gcolsAll, p.insCols...)
	gvals = append(gvals, p.insVals...)
	var raggs []string
	for _, i := range p.recompute {
		gcolsAll = append(gcolsAll, base.Ident(c.Spec.Fields[i].Name))
		gvals = append(gvals, "__r"+model.Itoa(i))
		raggs = append(raggs, ", "+p.recomputeAgg(i, false)+" AS __r"+model.Itoa(i))
	}
	groups := `SELECT ` + strings.Join(gvals, ", ") + ` FROM (SELECT ` + p.gs("") + `, ` + strings.Join(p.memberCols, ", ") + strings.Join(raggs, "") + `
  FROM (SELECT ` + p.gs("") + p.as("") + p.sks("") + ` FROM ` + c.Ledger() + ` WHERE member) e GROUP BY ` + p.gs("") + `) d`
	fresh = `INSERT INTO ` + c.Target() + ` (` + strings.Join(gcolsAll, ", ") + `)
` + groups + `
ORDER BY ` + p.gs("")
	written := gcolsAll[1:]
	var rset []string
	for _, col := range written {
		rset = append(rset, col+" = excluded."+col)
	}
	row := func(alias string) string {
		return "ROW(" + Joinf(len(written), func(i int) string { return alias + "." + written[i] }, ", ") + ")"
	}
	reconcile = `INSERT INTO ` + c.Target() + ` AS t (` + strings.Join(gcolsAll, ", ") + `)
` + groups + `
ON CONFLICT (` + p.gcols + `) DO UPDATE SET ` + strings.Join(rset, ", ") + ` WHERE record_image_ne(` + row("t") + `, ` + row("excluded") + `)`
	return fresh, reconcile
}

// prune deletes, after a rebuild's reconcile, the groups the ledger has no
// member for (matched by their key rendering, a hashable, NULL-safe
// identity).
func (p *aggParts) prune() string {
	c := p.c
	tk, _ := c.TargetIdentity()
	return `DELETE FROM ` + c.Target() + ` AS t WHERE NOT EXISTS (SELECT 1 FROM (SELECT ` +
		Joinf(p.ng, func(i int) string { return "g" + model.Itoa(i) + " AS " + base.Ident(c.Spec.GroupBy[i].Name) }, ", ") + ` FROM ` + c.Ledger() +
		` WHERE member) e WHERE ` + model.KeySQL("e", tk, true) + ` = ` + model.KeySQL("t", tk, true) + `)`
}

// recomputeSQL rewrites the recomputed fields of the group rows $1 a page
// wrote, where they differ ("" when no field is recomputed).
func (p *aggParts) recomputeSQL() string {
	if len(p.recompute) == 0 {
		return ""
	}
	c := p.c
	var aggs, sets, diffs []string
	for _, i := range p.recompute {
		f := c.Spec.Fields[i]
		name := base.Ident(f.Name)
		aggs = append(aggs, p.recomputeAgg(i, false)+" AS __r"+model.Itoa(i))
		sets = append(sets, name+" = m.__r"+model.Itoa(i))
		// Renderings, not =: numeric 1.5 and 1.50 differ.
		diffs = append(diffs, "t."+name+"::text IS DISTINCT FROM m.__r"+model.Itoa(i)+"::text")
	}
	// Every recomputed field of a group in one pass over its entries (a
	// lateral aggregate), not one scalar subquery, and so one scan of the
	// ledger, per field: a group of MIN, MAX and JSONB_AGG fields was read
	// three times by every page that touched it.
	return "UPDATE " + c.Target() + " AS t SET " + strings.Join(sets, ", ") +
		" FROM (SELECT t2.ctid AS __c, r.* FROM " + c.Target() + " t2 CROSS JOIN LATERAL (SELECT " + strings.Join(aggs, ", ") +
		" FROM " + c.Ledger() + " e WHERE e.member AND " + p.groupMatch + ") r WHERE t2.ctid = ANY($1::tid[])) m" +
		" WHERE t.ctid = m.__c AND (" + strings.Join(diffs, " OR ") + ")"
}
