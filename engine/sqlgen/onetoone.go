package sqlgen

import (
	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/model"
)

// rowParts are the column lists a 1-1 definition's statements share, over
// its written (not paused) fields: the target's columns, the live row's
// select list and the upsert's SET.
type rowParts struct {
	keyed
	c                         *model.Compiled
	fields                    []model.Field
	nk, nf                    int
	tcols, sel, set, liveCols string
}

// rowRebuild is a 1-1 rebuild's chunk in pieces around its range
// (RebuildSQL).
type rowRebuild struct{ live, set, diff, keyEq, insert, order string }

func (cd *Def) generateOneToOne() {
	c := cd.C
	p := &rowParts{keyed: keyedSource(c), c: c}
	cd.FieldProbe = map[string]string{}
	for _, f := range c.Spec.Fields {
		if !cd.Paused[f.Name] {
			p.fields = append(p.fields, f)
			cd.FieldProbe[f.Name] = `WITH u AS (SELECT * FROM ` + p.unnest + `) SELECT (` + f.Expr + `)::text FROM u JOIN ` + p.src + ` ON ` + p.lookup
		}
	}
	p.columns()
	cd.Derive = p.derive()
	cd.freshHead = `INSERT INTO ` + c.Target() + ` AS t (` + p.tcols + `) SELECT ` + p.sel + ` FROM (SELECT ` + p.liveCols + ` FROM ` + p.from
	if c.KeyNullable {
		// One chunk (no range), a NULL-safe match no anti-join can hash.
		cd.freshTail = `) live ON CONFLICT (` + p.keyCols("") + `) DO NOTHING`
		return
	}
	cd.rebuild = p.rebuild()
	// A plain insert of the keys the target lacks, not ON CONFLICT DO
	// NOTHING: a speculative insertion per row cost about twice the
	// insert itself. The anti-join reads only the chunk's own range of
	// the target (the rows pages wrote there), never the whole growing
	// target, which made an unbounded NOT EXISTS quadratic over a build.
	cd.freshMid = `) live WHERE NOT EXISTS (SELECT 1 FROM ` + c.Target() + ` AS t2 WHERE `
	cd.freshTail = p.keyEqLive()
}

// keyCols lists the key columns, each under prefix.
func (p *rowParts) keyCols(prefix string) string {
	return Joinf(p.nk, func(i int) string { return prefix + base.Ident(p.c.Key[i].Name) }, ", ")
}

// keyEqLive matches target row t2 to the live row by key.
func (p *rowParts) keyEqLive() string {
	return Joinf(p.nk, func(i int) string { return "t2." + base.Ident(p.c.Key[i].Name) + " = live.__p" + model.Itoa(i) }, " AND ")
}

func (p *rowParts) columns() {
	c, fields := p.c, p.fields
	p.nk, p.nf = len(c.Key), len(fields)
	nk, nf := p.nk, p.nf
	p.tcols = p.keyCols("")
	if nf > 0 {
		p.tcols += ", " + Joinf(nf, func(i int) string { return base.Ident(fields[i].Name) }, ", ")
	}
	p.sel = Joinf(nk, func(i int) string { return "__p" + model.Itoa(i) }, ", ")
	if nf > 0 {
		p.sel += ", " + Joinf(nf, func(i int) string { return "__f" + model.Itoa(i) }, ", ")
	}
	p.set = Joinf(nk, func(i int) string { n := base.Ident(c.Key[i].Name); return n + " = excluded." + n }, ", ")
	if nf > 0 {
		p.set += ", " + Joinf(nf, func(i int) string { n := base.Ident(fields[i].Name); return n + " = excluded." + n }, ", ")
	}
	p.liveCols = Joinf(nk, func(i int) string {
		return base.Ident(model.SourceAlias) + "." + base.Ident(c.Key[i].Name) + " AS __p" + model.Itoa(i)
	}, ", ")
	if nf > 0 {
		p.liveCols += ", " + Joinf(nf, func(i int) string { return "(" + fields[i].Expr + ") AS __f" + model.Itoa(i) }, ", ")
	}
}

// derive writes the target rows of keys $1 from their source rows: an
// upsert of the rows present, a delete of those gone, and the ledger's
// lock entries of gone keys removed.
func (p *rowParts) derive() string {
	c := p.c
	// Only the written columns decide whether a row changed: a paused
	// column's excluded value is the default, never its stale value.
	// Columns are qualified: a bare t or excluded would name a field
	// of that name, not the row (D21: no field name may collide with
	// the generated SQL's aliases).
	written := func(alias string) string {
		return "ROW(" + p.keyCols(alias+".") +
			Joinf(p.nf, func(i int) string { return ", " + alias + "." + base.Ident(p.fields[i].Name) }, "") + ")"
	}
	changed := "record_image_ne(" + written("t") + ", " + written("excluded") + ")"
	return `WITH u AS (SELECT * FROM ` + p.unnest + `),
live AS (SELECT u.k AS __k, ` + p.liveCols + ` FROM u JOIN ` + p.src + ` ON ` + p.lookup + `),
gone AS (SELECT u.* FROM u WHERE NOT EXISTS (SELECT 1 FROM live l WHERE l.__k = u.k)),
up AS (INSERT INTO ` + c.Target() + ` AS t (` + p.tcols + `) SELECT ` + p.sel + ` FROM live ORDER BY __k COLLATE "C"
       ON CONFLICT (` + p.keyCols("") + `) DO UPDATE SET ` + p.set + `
       WHERE ` + changed + ` RETURNING 1),
del AS (DELETE FROM ` + c.Target() + ` AS t USING gone WHERE ` + model.KeyLookup("t", "gone", c.Key, c.KeyNullable) + ` RETURNING 1)
DELETE FROM ` + c.Ledger() + ` e USING gone WHERE e.k = gone.k`
}

// rebuild is a rebuild's chunk (RebuildSQL): rows that differ rewritten,
// missing ones inserted. A plain UPDATE, not derive's ON CONFLICT: that
// locks (and WAL-logs) every row it leaves as is, most rows of a rebuild,
// and cost twice as much per row. Renderings decide a difference (numeric
// 1.5 and 1.50 do differ), which also holds if a column's type and its
// formula's part ways.
func (p *rowParts) rebuild() rowRebuild {
	r := rowRebuild{live: `SELECT ` + p.liveCols + ` FROM ` + p.from}
	if p.nf > 0 {
		r.set = Joinf(p.nf, func(i int) string { return base.Ident(p.fields[i].Name) + " = live.__f" + model.Itoa(i) }, ", ")
		r.diff = Joinf(p.nf, func(i int) string {
			return "t2." + base.Ident(p.fields[i].Name) + "::text IS DISTINCT FROM live.__f" + model.Itoa(i) + "::text"
		}, " OR ")
	}
	r.keyEq = p.keyEqLive()
	r.insert = `INSERT INTO ` + p.c.Target() + ` AS t (` + p.tcols + `) SELECT ` + p.sel
	r.order = Joinf(p.nk, func(i int) string { return "__p" + model.Itoa(i) }, ", ")
	return r
}
