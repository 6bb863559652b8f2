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
	// FanOut[i-1] stages the re-derives a change of joined item i's table
	// causes, FanOutAll[i-1] those of its truncate (engine/drain/fanout.go); empty for
	// a one-table definition.
	FanOut, FanOutAll []string
	// groupValue is each aggregate field's value for target row "t2",
	// from its accumulators or the ledger (RefreshSQL).
	groupValue map[string]string
	// A fresh build's chunk (§12.8, engine/build/build.go setChunk) is one set-based
	// statement (FreshSQL) writing the range's target rows (1-1) or its
	// ledger entries (aggregates), skipping keys a page already wrote;
	// GroupsSQL is a fresh aggregate build's last step, every group row
	// written once from the ledger; ReconcileSQL and PruneSQL a rebuild's.
	freshHead, freshMid, freshTail string
	// rebuild is a 1-1 rebuild's chunk, in pieces around its range
	// (RebuildSQL).
	rebuild                rowRebuild
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

// HeapSQL is a heap build's chunk (engine/build/build_heap.go heapChunk): the range's ledger
// entries, inserted as read, with no probe (no page writes the ledger
// during a heap build) and no order (no index to feed).
func (cd *Def) HeapSQL(srcWhere string) string {
	return cd.freshHead + srcWhere + ") live"
}

// RefreshSQL rewrites the given aggregate fields of every group from what
// the target and ledger keep for it, touching only rows that differ.
func (cd *Def) RefreshSQL(cols []string) string {
	var vals, sets, diffs []string
	for _, col := range cols {
		v, ok := cd.groupValue[col]
		if !ok {
			continue
		}
		r := "m.__v" + model.Itoa(len(vals))
		vals = append(vals, v+" AS __v"+model.Itoa(len(vals)))
		sets = append(sets, base.Ident(col)+" = "+r)
		// Renderings, not =: numeric 1.5 and 1.50 differ.
		diffs = append(diffs, "t."+base.Ident(col)+"::text IS DISTINCT FROM "+r+"::text")
	}
	if len(sets) == 0 {
		return ""
	}
	// Each value computed once per group (a recomputed field's is a scan of
	// the group's ledger entries), not once to compare and again to set.
	return "UPDATE " + cd.C.Target() + " AS t SET " + strings.Join(sets, ", ") +
		" FROM (SELECT t2.ctid AS __c, " + strings.Join(vals, ", ") + " FROM " + cd.C.Target() + " t2) m" +
		" WHERE t.ctid = m.__c AND (" + strings.Join(diffs, " OR ") + ")"
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
	for i := range c.Spec.Joins {
		cd.FanOut = append(cd.FanOut, fanOut(c, i+1, false))
		cd.FanOutAll = append(cd.FanOutAll, fanOut(c, i+1, true))
	}
	if c.Spec.IsAggregate() {
		cd.generateAggregate()
	} else {
		cd.generateOneToOne()
	}
}

// keyed are what every statement over a key set ($1 keys, then their
// parts) shares: the unnest of the arguments, the aliased source and the
// join of its rows to the keys.
type keyed struct {
	unnest, src, lookup string
	// joins are a JOIN target's joined items after src ("" for one
	// table); from is src with them, for reads over ranges.
	joins, from string
}

func keyedSource(c *model.Compiled) keyed {
	_, unnest, _ := model.KeyArgs(nil, c.Key, c.KeyNullable)
	return keyed{
		unnest: unnest,
		src:    c.Source() + " AS " + base.Ident(model.SourceAlias),
		// The key lookup joins the source first and the items follow in
		// statement order: past join_collapse_limit the planner keeps the
		// written order, which is then the good one (keys, then one
		// indexed probe per item).
		lookup: model.KeyLookup(base.Ident(model.SourceAlias), "u", c.Key, c.KeyNullable) + c.Spec.JoinClause(),
		joins:  c.Spec.JoinClause(),
		from:   c.FromSQL(),
	}
}

// SetRebuild reports whether a rebuild of the definition runs set-based
// chunks (RebuildSQL for a 1-1 target, RebuildAggSQL for an aggregate).
func (cd *Def) SetRebuild() bool { return cd.rebuild.live != "" || cd.rebuildAgg.head != "" }

// RowRebuild reports whether the set-based rebuild is a 1-1 one (RebuildSQL).
func (cd *Def) RowRebuild() bool { return cd.rebuild.live != "" }
