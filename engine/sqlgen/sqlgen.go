package sqlgen

import (
	"slices"
	"strings"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/model"
)

// Generate renders every statement of c; paused are the 1-1 fields left
// out of the writes (the column fuse, PAUSE t.c).
func Generate(c *model.Compiled, paused map[string]bool) *Def {
	cd := &Def{C: c, Paused: paused}
	cd.generate()
	return cd
}

// Def is every statement generated for one model.Compiled definition.
type Def struct {
	C           *model.Compiled
	LockInsert  string
	LockSelect  string
	Derive      string
	DeleteEmpty string
	Recompute   string
	LedgerGC    string
	// Paused are the 1-1 fields the column fuse paused (never written);
	// FieldProbe evaluates one field alone for keys $1 (attribution).
	Paused     map[string]bool
	FieldProbe map[string]string
	// groupValue is each aggregate field's value for target row "t2",
	// from its accumulators or the ledger (RefreshSQL).
	groupValue map[string]string
	// A fresh build's chunk (§12.8, build.go setChunk) is one set-based
	// statement (FreshSQL) writing the range's target rows (1-1) or its
	// ledger entries (aggregates), skipping keys a page already wrote;
	// GroupsSQL is a fresh aggregate build's last step, every group row
	// written once from the ledger; ReconcileSQL and PruneSQL a rebuild's.
	freshHead, freshMid, freshTail string
	// rebuild is a 1-1 rebuild's chunk, in pieces around its range
	// (RebuildSQL).
	rebuild                struct{ live, set, diff, keyEq, insert, order string }
	rebuildAgg             struct{ head, tail string }
	GroupsSQL              string
	ReconcileSQL, PruneSQL string
}

// FreshSQL is a fresh chunk's statement: srcWhere (" WHERE …" or "")
// selects the range over the source alias, tgtConds (over alias "t2", the
// same parameters) the same range over a 1-1 target's key.
func (cd *Def) FreshSQL(srcWhere string, tgtConds []string) string {
	if cd.freshMid == "" {
		return cd.freshHead + srcWhere + cd.freshTail
	}
	return cd.freshHead + srcWhere + cd.freshMid + strings.Join(append(tgtConds, cd.freshTail), " AND ") + ")"
}

// RebuildSQL is a 1-1 rebuild's chunk over the source rows srcWhere
// selects and the target rows tgtConds (alias t2) bounds to the same range:
// each row that differs from its source row rewritten, each missing one
// inserted. It returns the rows read.
func (cd *Def) RebuildSQL(srcWhere string, tgtConds []string) string {
	r := &cd.rebuild
	match := strings.Join(append(slices.Clone(tgtConds), r.keyEq), " AND ")
	q := "WITH live AS MATERIALIZED (" + r.live + srcWhere + ")"
	if r.set != "" {
		q += ",\nupd AS (UPDATE " + cd.C.Target() + " AS t2 SET " + r.set + " FROM live WHERE " + match + " AND (" + r.diff + ") RETURNING 1)"
	}
	return q + ",\nins AS (" + r.insert + " FROM live WHERE NOT EXISTS (SELECT 1 FROM " + cd.C.Target() + " AS t2 WHERE " + match +
		") ORDER BY " + r.order + " RETURNING 1)\nSELECT count(*) FROM live"
}

// RebuildAggSQL is an aggregate rebuild's chunk over the source rows
// srcWhere selects: each key's ledger entry re-derived from its row, the
// differences added to the groups as a page adds them. It returns the rows
// read and the group rows it wrote (for DeleteEmpty and recompute).
func (cd *Def) RebuildAggSQL(srcWhere string) string {
	return cd.rebuildAgg.head + srcWhere + cd.rebuildAgg.tail
}

// HeapSQL is a heap build's chunk (build.go heapChunk): the range's ledger
// entries, inserted as read, with no probe (no page writes the ledger
// during a heap build) and no order (no index to feed).
func (cd *Def) HeapSQL(srcWhere string) string {
	return cd.freshHead + srcWhere + ") live"
}

// RefreshSQL rewrites the given aggregate fields of every group from what
// the target and ledger keep for it, touching only rows that differ.
func (cd *Def) RefreshSQL(cols []string) string {
	var sets, diffs []string
	for _, col := range cols {
		v, ok := cd.groupValue[col]
		if !ok {
			continue
		}
		sets = append(sets, base.Ident(col)+" = "+v)
		// Renderings, not =: numeric 1.5 and 1.50 differ.
		diffs = append(diffs, "t2."+base.Ident(col)+"::text IS DISTINCT FROM ("+v+")::text")
	}
	if len(sets) == 0 {
		return ""
	}
	return "UPDATE " + cd.C.Target() + " AS t2 SET " + strings.Join(sets, ", ") + " WHERE " + strings.Join(diffs, " OR ")
}

// Joinf joins f(0) .. f(n-1) with sep.
func Joinf(n int, f func(i int) string, sep string) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = f(i)
	}
	return strings.Join(parts, sep)
}

func (cd *Def) generate() {
	c := cd.C
	cd.LockInsert = "INSERT INTO " + c.Ledger() + ` (k) SELECT k FROM unnest($1::text[]) AS u(k) ORDER BY k COLLATE "C" ON CONFLICT (k) DO NOTHING`
	cd.LockSelect = "SELECT count(*) FROM (SELECT k FROM " + c.Ledger() + ` WHERE k = ANY($1::text[]) ORDER BY k COLLATE "C" FOR UPDATE) l`
	_, unnest, _ := model.KeyArgs(nil, c.Key, c.KeyNullable)
	src := c.Source() + " AS " + base.Ident(model.SourceAlias)
	lookup := model.KeyLookup(base.Ident(model.SourceAlias), "u", c.Key, c.KeyNullable)
	if !c.Spec.IsAggregate() {
		var fields []model.Field
		cd.FieldProbe = map[string]string{}
		for _, f := range c.Spec.Fields {
			if !cd.Paused[f.Name] {
				fields = append(fields, f)
				cd.FieldProbe[f.Name] = `WITH u AS (SELECT * FROM ` + unnest + `) SELECT (` + f.Expr + `)::text FROM u JOIN ` + src + ` ON ` + lookup
			}
		}
		nk, nf := len(c.Key), len(fields)
		tcols := Joinf(nk, func(i int) string { return base.Ident(c.Key[i].Name) }, ", ")
		if nf > 0 {
			tcols += ", " + Joinf(nf, func(i int) string { return base.Ident(fields[i].Name) }, ", ")
		}
		sel := Joinf(nk, func(i int) string { return "__p" + model.Itoa(i) }, ", ")
		if nf > 0 {
			sel += ", " + Joinf(nf, func(i int) string { return "__f" + model.Itoa(i) }, ", ")
		}
		set := Joinf(nk, func(i int) string { n := base.Ident(c.Key[i].Name); return n + " = excluded." + n }, ", ")
		if nf > 0 {
			set += ", " + Joinf(nf, func(i int) string { n := base.Ident(fields[i].Name); return n + " = excluded." + n }, ", ")
		}
		liveCols := Joinf(nk, func(i int) string {
			return base.Ident(model.SourceAlias) + "." + base.Ident(c.Key[i].Name) + " AS __p" + model.Itoa(i)
		}, ", ")
		if nf > 0 {
			liveCols += ", " + Joinf(nf, func(i int) string { return "(" + fields[i].Expr + ") AS __f" + model.Itoa(i) }, ", ")
		}
		// Only the written columns decide whether a row changed: a paused
		// column's excluded value is the default, never its stale value.
		// Columns are qualified: a bare t or excluded would name a field
		// of that name, not the row (D21: no field name may collide with
		// the generated SQL's aliases).
		written := func(alias string) string {
			return "ROW(" + Joinf(nk, func(i int) string { return alias + "." + base.Ident(c.Key[i].Name) }, ", ") +
				Joinf(nf, func(i int) string { return ", " + alias + "." + base.Ident(fields[i].Name) }, "") + ")"
		}
		changed := "record_image_ne(" + written("t") + ", " + written("excluded") + ")"
		cd.Derive = `WITH u AS (SELECT * FROM ` + unnest + `),
live AS (SELECT u.k AS __k, ` + liveCols + ` FROM u JOIN ` + src + ` ON ` + lookup + `),
gone AS (SELECT u.* FROM u WHERE NOT EXISTS (SELECT 1 FROM live l WHERE l.__k = u.k)),
up AS (INSERT INTO ` + c.Target() + ` AS t (` + tcols + `) SELECT ` + sel + ` FROM live ORDER BY __k COLLATE "C"
       ON CONFLICT (` + Joinf(nk, func(i int) string { return base.Ident(c.Key[i].Name) }, ", ") + `) DO UPDATE SET ` + set + `
       WHERE ` + changed + ` RETURNING 1),
del AS (DELETE FROM ` + c.Target() + ` AS t USING gone WHERE ` + model.KeyLookup("t", "gone", c.Key, c.KeyNullable) + ` RETURNING 1)
DELETE FROM ` + c.Ledger() + ` e USING gone WHERE e.k = gone.k`
		cd.freshHead = `INSERT INTO ` + c.Target() + ` AS t (` + tcols + `) SELECT ` + sel + ` FROM (SELECT ` + liveCols + ` FROM ` + src
		if !c.KeyNullable {
			// A rebuild's chunk (RebuildSQL): rows that differ rewritten,
			// missing ones inserted. A plain UPDATE, not derive's ON
			// CONFLICT: that locks (and WAL-logs) every row it leaves as
			// is, most rows of a rebuild, and cost twice as much per row.
			// Renderings decide a difference (numeric 1.5 and 1.50 do
			// differ), which also holds if a column's type and its
			// formula's part ways.
			r := &cd.rebuild
			r.live = `SELECT ` + liveCols + ` FROM ` + src
			if nf > 0 {
				r.set = Joinf(nf, func(i int) string { return base.Ident(fields[i].Name) + " = live.__f" + model.Itoa(i) }, ", ")
				r.diff = Joinf(nf, func(i int) string {
					return "t2." + base.Ident(fields[i].Name) + "::text IS DISTINCT FROM live.__f" + model.Itoa(i) + "::text"
				}, " OR ")
			}
			r.keyEq = Joinf(nk, func(i int) string { return "t2." + base.Ident(c.Key[i].Name) + " = live.__p" + model.Itoa(i) }, " AND ")
			r.insert = `INSERT INTO ` + c.Target() + ` AS t (` + tcols + `) SELECT ` + sel
			r.order = Joinf(nk, func(i int) string { return "__p" + model.Itoa(i) }, ", ")
		}
		if c.KeyNullable {
			// One chunk (no range), a NULL-safe match no anti-join can hash.
			cd.freshTail = `) live ON CONFLICT (` + Joinf(nk, func(i int) string { return base.Ident(c.Key[i].Name) }, ", ") + `) DO NOTHING`
			return
		}
		// A plain insert of the keys the target lacks, not ON CONFLICT DO
		// NOTHING: a speculative insertion per row cost about twice the
		// insert itself. The anti-join reads only the chunk's own range of
		// the target (the rows pages wrote there), never the whole growing
		// target, which made an unbounded NOT EXISTS quadratic over a build.
		cd.freshMid = `) live WHERE NOT EXISTS (SELECT 1 FROM ` + c.Target() + ` AS t2 WHERE `
		cd.freshTail = Joinf(nk, func(i int) string { return "t2." + base.Ident(c.Key[i].Name) + " = live.__p" + model.Itoa(i) }, " AND ")
		return
	}

	ng, na := len(c.Spec.GroupBy), len(c.Args)
	gs := func(prefix string) string {
		return Joinf(ng, func(i int) string { return prefix + "g" + model.Itoa(i) }, ", ")
	}
	as := func(prefix string) string {
		if na == 0 {
			return ""
		}
		return ", " + Joinf(na, func(i int) string { return prefix + "a" + model.Itoa(i) }, ", ")
	}
	sks := func(prefix string) string {
		if !c.NeedSrcKey {
			return ""
		}
		return ", " + Joinf(len(c.Key), func(i int) string { return prefix + "sk" + model.Itoa(i) }, ", ")
	}
	liveCols := Joinf(ng, func(i int) string { return "(" + c.Spec.GroupBy[i].Expr + ") AS g" + model.Itoa(i) }, ", ")
	for i, a := range c.Args {
		liveCols += ", (" + a.Expr + ") AS a" + model.Itoa(i)
	}
	if c.NeedSrcKey {
		for i, k := range c.Key {
			liveCols += ", " + base.Ident(model.SourceAlias) + "." + base.Ident(k.Name) + " AS sk" + model.Itoa(i)
		}
	}
	setLedger := "member = w.member, " + Joinf(ng, func(i int) string { return "g" + model.Itoa(i) + " = w.g" + model.Itoa(i) }, ", ")
	for i := range c.Args {
		setLedger += ", a" + model.Itoa(i) + " = w.a" + model.Itoa(i)
	}
	if c.NeedSrcKey {
		for i := range c.Key {
			setLedger += ", sk" + model.Itoa(i) + " = w.sk" + model.Itoa(i)
		}
	}
	gcols := Joinf(ng, func(i int) string { return base.Ident(c.Spec.GroupBy[i].Name) }, ", ")
	// Deltas per group; memberCols are the same sums over members only
	// (every sign 1), cheaper aggregates for a GROUP BY over the ledger.
	dcols := []string{"sum(sign) AS dm"}
	memberCols := []string{"count(*) AS dm"}
	insCols := []string{`"__members"`}
	insVals := []string{"dm"}
	set := []string{`"__members" = t."__members" + excluded."__members"`}
	for i, a := range c.Args {
		ai := "a" + model.Itoa(i)
		dcols = append(dcols, "sum(CASE WHEN "+ai+" IS NULL THEN 0 ELSE sign END) AS dc"+model.Itoa(i))
		memberCols = append(memberCols, "count("+ai+") AS dc"+model.Itoa(i))
		insCols = append(insCols, base.Ident("__cnt"+model.Itoa(i)))
		insVals = append(insVals, "dc"+model.Itoa(i))
		set = append(set, base.Ident("__cnt"+model.Itoa(i))+" = t."+base.Ident("__cnt"+model.Itoa(i))+" + excluded."+base.Ident("__cnt"+model.Itoa(i)))
		if a.NeedSum {
			z := "CAST('0' AS " + a.SumType + ")"
			// Subtracting the negative part keeps a type's minimum from overflowing on negation.
			dcols = append(dcols, "coalesce(sum("+ai+") FILTER (WHERE sign > 0), "+z+") - coalesce(sum("+ai+") FILTER (WHERE sign < 0), "+z+") AS ds"+model.Itoa(i))
			memberCols = append(memberCols, "coalesce(sum("+ai+"), "+z+") AS ds"+model.Itoa(i))
			insCols = append(insCols, base.Ident("__sum"+model.Itoa(i)))
			insVals = append(insVals, "ds"+model.Itoa(i))
			set = append(set, base.Ident("__sum"+model.Itoa(i))+" = t."+base.Ident("__sum"+model.Itoa(i))+" + excluded."+base.Ident("__sum"+model.Itoa(i)))
		}
		if a.NeedTrue {
			dcols = append(dcols, "sum(CASE WHEN "+ai+" THEN sign ELSE 0 END) AS dt"+model.Itoa(i))
			memberCols = append(memberCols, "count(*) FILTER (WHERE "+ai+") AS dt"+model.Itoa(i))
			insCols = append(insCols, base.Ident("__true"+model.Itoa(i)))
			insVals = append(insVals, "dt"+model.Itoa(i))
			set = append(set, base.Ident("__true"+model.Itoa(i))+" = t."+base.Ident("__true"+model.Itoa(i))+" + excluded."+base.Ident("__true"+model.Itoa(i)))
		}
	}
	// acc reads an accumulator: a new group's delta, an existing group's
	// sum with the delta, or (refresh) a group's own stored value.
	const (
		accNew = iota
		accUpsert
		accOwn
	)
	acc := func(mode int, what string, i int) string {
		col := map[string]string{"m": `"__members"`, "c": base.Ident("__cnt" + model.Itoa(i)), "s": base.Ident("__sum" + model.Itoa(i)), "t": base.Ident("__true" + model.Itoa(i))}[what]
		switch mode {
		case accNew:
			return map[string]string{"m": "dm", "c": "dc" + model.Itoa(i), "s": "ds" + model.Itoa(i), "t": "dt" + model.Itoa(i)}[what]
		case accOwn:
			return "t2." + col
		}
		return "(t." + col + " + excluded." + col + ")"
	}
	incExpr := func(f model.Field, a int, newRow int) string {
		var x string
		switch f.Agg {
		case model.AggCountStar:
			x = acc(newRow, "m", 0)
		case model.AggCount:
			x = acc(newRow, "c", a)
		case model.AggSum:
			x = "CASE WHEN " + acc(newRow, "c", a) + " = 0 THEN NULL ELSE " + acc(newRow, "s", a) + " END"
		case model.AggAvg:
			x = "CASE WHEN " + acc(newRow, "c", a) + " = 0 THEN NULL ELSE " + acc(newRow, "s", a) + "::numeric / " + acc(newRow, "c", a) + "::numeric END"
		case model.AggBoolAnd:
			x = "CASE WHEN " + acc(newRow, "c", a) + " = 0 THEN NULL ELSE " + acc(newRow, "t", a) + " = " + acc(newRow, "c", a) + " END"
		case model.AggBoolOr:
			x = "CASE WHEN " + acc(newRow, "c", a) + " = 0 THEN NULL ELSE " + acc(newRow, "t", a) + " > 0 END"
		}
		if f.Cast != "" {
			x = "(" + x + ")::" + f.Cast
		}
		return x
	}
	var recompute []int
	for i, f := range c.Spec.Fields {
		if cd.Paused[f.Name] {
			continue // the accumulators above are still maintained
		}
		if c.Recompute[i] {
			recompute = append(recompute, i)
			continue
		}
		insCols = append(insCols, base.Ident(f.Name))
		insVals = append(insVals, incExpr(f, c.FieldArg[i], accNew))
		set = append(set, base.Ident(f.Name)+" = "+incExpr(f, c.FieldArg[i], accUpsert))
	}
	groupMatch := Joinf(ng, func(i int) string {
		g := "t2." + base.Ident(c.Spec.GroupBy[i].Name)
		e := "e.g" + model.Itoa(i)
		return "(" + e + " = " + g + " OR (" + e + " IS NULL AND " + g + " IS NULL))"
	}, " AND ")
	// recomputeAgg is a recomputed field over ledger entries "e": one
	// group's (a subquery for target row t2), or the aggregate alone for a
	// GROUP BY over the entries (grouped).
	recomputeAgg := func(i int, perRow bool) string {
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
		return "(SELECT " + agg + " FROM " + c.Ledger() + " e WHERE e.member AND " + groupMatch + ")"
	}
	// What each field is, computed for target row t2 from what is kept for
	// its group (a refresh after a field pause).
	cd.groupValue = map[string]string{}
	for i, f := range c.Spec.Fields {
		if c.Recompute[i] {
			cd.groupValue[f.Name] = recomputeAgg(i, true)
		} else {
			cd.groupValue[f.Name] = incExpr(f, c.FieldArg[i], accOwn)
		}
	}
	// The entries old read are updated by tuple id: the page holds them
	// locked (LockSelect), so they stay where old found them, and the
	// UPDATE needs no second index descent per key.
	cd.Derive = `WITH u AS (SELECT * FROM ` + unnest + `),
live AS (SELECT u.k, ` + liveCols + ` FROM u JOIN ` + src + ` ON ` + lookup + `),
want AS (SELECT u.k, (l.k IS NOT NULL) AS member, ` + gs("l.") + as("l.") + sks("l.") + ` FROM u LEFT JOIN live l ON l.k = u.k),
old AS MATERIALIZED (SELECT e.ctid AS at, e.k, e.member, ` + gs("e.") + as("e.") + ` FROM ` + c.Ledger() + ` e WHERE e.k = ANY($1::text[])),
upd AS (UPDATE ` + c.Ledger() + ` e SET ` + setLedger + ` FROM want w
        WHERE e.ctid = ANY(ARRAY(SELECT at FROM old)) AND e.k = w.k AND e *<> ROW(w.k, w.member, ` + gs("w.") + as("w.") + sks("w.") + `)::` + c.Ledger() + `
        RETURNING e.k),
moves AS (SELECT ` + gs("o.") + `, -1 AS sign` + as("o.") + ` FROM old o JOIN upd USING (k) WHERE o.member
          UNION ALL
          SELECT ` + gs("w.") + `, 1` + as("w.") + ` FROM want w JOIN upd USING (k) WHERE w.member),
d AS (SELECT ` + gs("") + `, ` + strings.Join(dcols, ", ") + ` FROM moves GROUP BY ` + gs("") + `)
INSERT INTO ` + c.Target() + ` AS t (` + gcols + `, ` + strings.Join(insCols, ", ") + `)
SELECT ` + gs("") + `, ` + strings.Join(insVals, ", ") + ` FROM d ORDER BY ` + gs("") + `
ON CONFLICT (` + gcols + `) DO UPDATE SET ` + strings.Join(set, ", ") + `
RETURNING t.ctid`
	lcols := "k, member, " + gs("")
	for i := range c.Args {
		lcols += ", a" + model.Itoa(i)
	}
	lcols += sks("")
	// An aggregate rebuild's chunk (RebuildAggSQL): derive over a key
	// range of the source instead of a list of keys, for a chunk that holds
	// the ledger against pages (no entry locks). Every key read is a
	// member; keys the source lacks are the sweep's. The update finds the
	// entries old read by their tuple ids (no second index descent per key;
	// the chunk's lock keeps them where they are).
	cd.rebuildAgg.head = `WITH live AS MATERIALIZED (SELECT ` + model.KeySQL(base.Ident(model.SourceAlias), c.Key, c.KeyNullable) + ` AS k, true AS member, ` + liveCols + ` FROM ` + src
	cd.rebuildAgg.tail = `),
old AS MATERIALIZED (SELECT e.ctid AS at, e.k, e.member, ` + gs("e.") + as("e.") + ` FROM ` + c.Ledger() + ` e WHERE e.k = ANY(ARRAY(SELECT k FROM live))),
upd AS (UPDATE ` + c.Ledger() + ` e SET ` + setLedger + ` FROM live w
        WHERE e.ctid = ANY(ARRAY(SELECT at FROM old)) AND e.k = w.k AND e *<> ROW(w.k, w.member, ` + gs("w.") + as("w.") + sks("w.") + `)::` + c.Ledger() + `
        RETURNING e.k),
ins AS (INSERT INTO ` + c.Ledger() + ` (` + lcols + `) SELECT w.k, w.member, ` + gs("w.") + as("w.") + sks("w.") + ` FROM live w
        WHERE NOT EXISTS (SELECT 1 FROM old o WHERE o.k = w.k) ORDER BY w.k COLLATE "C" RETURNING k),
moves AS (SELECT ` + gs("o.") + `, -1 AS sign` + as("o.") + ` FROM old o JOIN upd USING (k) WHERE o.member
          UNION ALL
          SELECT ` + gs("w.") + `, 1` + as("w.") + ` FROM live w WHERE w.k IN (SELECT k FROM upd UNION ALL SELECT k FROM ins)),
d AS (SELECT ` + gs("") + `, ` + strings.Join(dcols, ", ") + ` FROM moves GROUP BY ` + gs("") + `),
tg AS (INSERT INTO ` + c.Target() + ` AS t (` + gcols + `, ` + strings.Join(insCols, ", ") + `)
SELECT ` + gs("") + `, ` + strings.Join(insVals, ", ") + ` FROM d ORDER BY ` + gs("") + `
ON CONFLICT (` + gcols + `) DO UPDATE SET ` + strings.Join(set, ", ") + `
RETURNING t.ctid)
SELECT (SELECT count(*) FROM live), coalesce(array_agg(ctid), '{}') FROM tg`
	// A fresh chunk writes ledger entries only (the groups step writes
	// the group rows once, from the ledger). The chunk holds the ledger
	// against pages, so an entry present is one a page committed: probed
	// per row (a subplan, never a hash of the growing ledger) and skipped;
	// a plain insert, because ON CONFLICT's speculative insertion cost
	// about twice the insert itself.
	cd.freshHead = `INSERT INTO ` + c.Ledger() + ` (` + lcols + `)
SELECT k, true, ` + gs("") + as("") + sks("") + ` FROM (SELECT ` + model.KeySQL(base.Ident(model.SourceAlias), c.Key, c.KeyNullable) + ` AS k, ` + liveCols + ` FROM ` + src
	cd.freshTail = `) live
WHERE (SELECT true FROM ` + c.Ledger() + ` e WHERE e.k = live.k) IS NULL ORDER BY k COLLATE "C"`
	// Every group from its members, as derive's increments would leave it
	// from nothing (the same dcols with sign 1), recomputed fields included.
	gcolsAll, gvals := []string{gcols}, []string{gs("")}
	gcolsAll = append(gcolsAll, insCols...)
	gvals = append(gvals, insVals...)
	var raggs []string
	for _, i := range recompute {
		gcolsAll = append(gcolsAll, base.Ident(c.Spec.Fields[i].Name))
		gvals = append(gvals, "__r"+model.Itoa(i))
		raggs = append(raggs, ", "+recomputeAgg(i, false)+" AS __r"+model.Itoa(i))
	}
	groups := `SELECT ` + strings.Join(gvals, ", ") + ` FROM (SELECT ` + gs("") + `, ` + strings.Join(memberCols, ", ") + strings.Join(raggs, "") + `
  FROM (SELECT ` + gs("") + as("") + sks("") + ` FROM ` + c.Ledger() + ` WHERE member) e GROUP BY ` + gs("") + `) d`
	cd.GroupsSQL = `INSERT INTO ` + c.Target() + ` (` + strings.Join(gcolsAll, ", ") + `)
` + groups + `
ORDER BY ` + gs("")
	// A rebuild's groups step reconciles instead (the target has every
	// group already, usually right): rows that differ are rewritten,
	// missing groups inserted, paused fields left alone, and groups the
	// ledger has no member for deleted (matched by their key rendering, a
	// hashable, NULL-safe identity).
	written := gcolsAll[1:]
	var rset []string
	for _, col := range written {
		rset = append(rset, col+" = excluded."+col)
	}
	row := func(alias string) string {
		return "ROW(" + Joinf(len(written), func(i int) string { return alias + "." + written[i] }, ", ") + ")"
	}
	cd.ReconcileSQL = `INSERT INTO ` + c.Target() + ` AS t (` + strings.Join(gcolsAll, ", ") + `)
` + groups + `
ON CONFLICT (` + gcols + `) DO UPDATE SET ` + strings.Join(rset, ", ") + ` WHERE record_image_ne(` + row("t") + `, ` + row("excluded") + `)`
	tk, _ := c.TargetIdentity()
	cd.PruneSQL = `DELETE FROM ` + c.Target() + ` AS t WHERE NOT EXISTS (SELECT 1 FROM (SELECT ` +
		Joinf(ng, func(i int) string { return "g" + model.Itoa(i) + " AS " + base.Ident(c.Spec.GroupBy[i].Name) }, ", ") + ` FROM ` + c.Ledger() +
		` WHERE member) e WHERE ` + model.KeySQL("e", tk, true) + ` = ` + model.KeySQL("t", tk, true) + `)`
	cd.DeleteEmpty = "DELETE FROM " + c.Target() + ` WHERE ctid = ANY($1::tid[]) AND "__members" = 0`
	cd.LedgerGC = "DELETE FROM " + c.Ledger() + " WHERE k = ANY($1::text[]) AND NOT member"
	if len(recompute) > 0 {
		var subs, sets, diffs []string
		for _, i := range recompute {
			f := c.Spec.Fields[i]
			name := base.Ident(f.Name)
			subs = append(subs, recomputeAgg(i, true)+" AS __r"+model.Itoa(i))
			sets = append(sets, name+" = m.__r"+model.Itoa(i))
			// Renderings, not =: numeric 1.5 and 1.50 differ.
			diffs = append(diffs, "t."+name+"::text IS DISTINCT FROM m.__r"+model.Itoa(i)+"::text")
		}
		cd.Recompute = "UPDATE " + c.Target() + " AS t SET " + strings.Join(sets, ", ") +
			" FROM (SELECT t2.ctid AS __c, " + strings.Join(subs, ", ") + " FROM " + c.Target() + " t2 WHERE t2.ctid = ANY($1::tid[])) m" +
			" WHERE t.ctid = m.__c AND (" + strings.Join(diffs, " OR ") + ")"
	}
}

// SetRebuild reports whether a rebuild of the definition runs set-based
// chunks (RebuildSQL for a 1-1 target, RebuildAggSQL for an aggregate).
func (cd *Def) SetRebuild() bool { return cd.rebuild.live != "" || cd.rebuildAgg.head != "" }

// RowRebuild reports whether the set-based rebuild is a 1-1 one (RebuildSQL).
func (cd *Def) RowRebuild() bool { return cd.rebuild.live != "" }
