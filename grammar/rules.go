package grammar

import (
	"slices"
	"strings"

	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// Source is what the engine read from the catalog (grammar spec §9.2 stage
// B) and hands to Resolve: the resolved FROM table, its columns and key,
// and the table of each JOIN item.
type Source struct {
	Schema  string
	Table   string
	Columns []string // every column name, in attribute order
	Key     []string // the key a 1-1 target inherits (primary key or qualifying unique index)
	// Joined holds one entry per TransformStmt.Joins item, in statement
	// order: the table it resolved to.
	Joined []JoinedTable
}

// JoinedTable is the resolved table of one JOIN item.
type JoinedTable struct {
	Schema  string
	Table   string
	Columns []string // every column name, in attribute order
}

// RefKind classifies a resolved column reference.
type RefKind string

// Reference kinds.
const (
	RefSource RefKind = "source" // a column of the FROM table
	RefJoined RefKind = "joined" // a column of a joined table (ResolvedRef.Item > 0)
	RefField  RefKind = "field"  // another field of the same target
	RefKey    RefKind = "key"    // a GROUP BY key read outside an aggregate
)

// ResolvedRef is one column reference with its meaning.
type ResolvedRef struct {
	Ref    *ColumnRef
	Kind   RefKind
	Column string // the column read (RefSource, RefJoined) or the key's column (RefKey)
	Field  string // RefField: the field read
	// Item is the FROM item the column belongs to: 0 the FROM table, i the
	// table of Joins[i-1] (RefSource, RefJoined, RefKey).
	Item int
	// Rel is the item's name when Item > 0, "" otherwise.
	Rel string
	Agg *FuncCall
}

// ResolvedKey is one GROUP BY key.
type ResolvedKey struct {
	Key    ColumnName
	Column string // the target column name (the column read)
	Item   int    // the FROM item read, as ResolvedRef.Item
	Rel    string // "" for a column of the FROM table; the item's name otherwise
}

// ResolvedJoin is one JOIN item's ON condition, resolved: the columns of
// the joined table equal, pairwise, columns of one earlier item.
type ResolvedJoin struct {
	Item          int // the joined item (1-based: Joins[Item-1])
	Parent        int // the earlier item the condition names (0 the FROM table)
	Columns       []string
	ParentColumns []string
}

// ResolvedField is one field with its resolved references.
type ResolvedField struct {
	Name      string
	Expr      Expr
	Refs      []ResolvedRef
	Aggregate bool     // calls an allowed aggregate itself
	Reads     []string // fields it reads, in order of first use
	// Passthrough is set when the formula is exactly a source column of the
	// same name (1-1) or exactly the GROUP BY key of that name (aggregate).
	Passthrough bool
}

// Resolution is the outcome of Resolve.
type Resolution struct {
	Keys   []ResolvedKey
	Fields []ResolvedField
	// Order lists field indexes so that each field comes after every field
	// it reads (the order in which the engine inlines them).
	Order []int
	// Joins are the resolved ON conditions, one per JOIN item in order.
	Joins []ResolvedJoin
}

// Resolve runs the pure definition rules of grammar spec §9.2 stage C over
// the catalog facts in src: the names of FROM items and the shape of each ON
// condition (joins spec §2), GROUP BY keys, field names, names inside
// formulas (§7.5, §7.7), key-space use (§7.1, §7.2) and field cycles.
// Type-dependent rules (key types, collations, to-one joins) and
// everything of stage D are the engine's.
func Resolve(t *TransformStmt, src *Source) (*Resolution, error) {
	if len(src.Joined) != len(t.Joins) {
		return nil, pgerr.Newf(pgerr.InternalError, "grammar.Resolve: %d joined tables for %d JOIN items", len(src.Joined), len(t.Joins))
	}
	rv := &resolver{t: t, src: src}
	if err := rv.run(); err != nil {
		return nil, err
	}
	return rv.res, nil
}

// item is one FROM item as the resolver sees it.
type item struct {
	name          string // alias, else table name
	aliased       bool
	schema, table string
	cols          map[string]bool
}

type resolver struct {
	t       *TransformStmt
	src     *Source
	res     *Resolution
	items   []item // [0] the FROM table, then each join's
	key     map[string]bool
	fields  map[string]int
	keyCols map[string]int // GROUP BY target column name → key index
}

func (rv *resolver) srcName() string {
	return quoteIdentIfNeeded(rv.src.Schema) + "." + quoteIdentIfNeeded(rv.src.Table)
}

// itemsName names what a reference could have read, for messages.
func (rv *resolver) itemsName() string {
	if len(rv.items) == 1 {
		return rv.srcName()
	}
	names := make([]string, len(rv.items))
	for i, it := range rv.items {
		names[i] = quoteIdentIfNeeded(it.name)
	}
	return "any of " + strings.Join(names, ", ")
}

func (rv *resolver) run() *pgerr.Error {
	t, src := rv.t, rv.src
	rv.res = &Resolution{}
	names := t.ItemNames()
	root := item{name: names[0], aliased: t.SourceAlias != nil, schema: src.Schema, table: src.Table, cols: map[string]bool{}}
	for _, c := range src.Columns {
		root.cols[c] = true
	}
	rv.items = []item{root}
	for i, j := range src.Joined {
		it := item{name: names[i+1], aliased: t.Joins[i].Alias != nil, schema: j.Schema, table: j.Table, cols: map[string]bool{}}
		for _, c := range j.Columns {
			it.cols[c] = true
		}
		rv.items = append(rv.items, it)
	}
	rv.key = map[string]bool{}
	for _, c := range src.Key {
		rv.key[c] = true
	}
	rv.fields = map[string]int{}
	for i, f := range t.Fields {
		if _, dup := rv.fields[f.Name]; !dup {
			rv.fields[f.Name] = i
		}
	}
	agg := t.IsAggregate()

	// The 1-1 aggregate placement of stage A (ALTER merges skip it at parse).
	if !agg {
		for _, f := range t.Fields {
			if err := oneToOneAggregates(f.Expr); err != nil {
				return err
			}
		}
	}

	// C1: each ON condition names the joined item and one earlier item.
	for i := range t.Joins {
		if err := rv.resolveJoin(i); err != nil {
			return err
		}
	}

	// C2: GROUP BY keys.
	rv.keyCols = map[string]int{}
	for i, k := range t.GroupBy {
		it, col, err := rv.column(k, len(rv.items), "GROUP BY key")
		if err != nil {
			return err
		}
		if it < 0 {
			return newErr(UnresolvedGroupByColumn, k.Pos, "GROUP BY column %s does not exist in %s", quoteIdentIfNeeded(col), rv.itemsName())
		}
		rk := ResolvedKey{Key: k, Column: col, Item: it}
		if it > 0 {
			rk.Rel = rv.items[it].name
		}
		if j, dup := rv.keyCols[rk.Column]; dup {
			return newErr(DuplicateGroupByColumn, k.Pos, "GROUP BY keys %s and %s both name the target column %s", fmtDotted(t.GroupBy[j].Parts), fmtDotted(k.Parts), quoteIdentIfNeeded(rk.Column)).
				WithHint("keys cannot be aliased; group by one of them, or chain a transform")
		}
		if strings.HasPrefix(rk.Column, "__") {
			return newErr(ReservedColumnName, k.Pos, "GROUP BY column %s starts with \"__\", which is reserved for hidden columns", quoteIdentIfNeeded(rk.Column))
		}
		rv.keyCols[rk.Column] = i
		rv.res.Keys = append(rv.res.Keys, rk)
	}

	// C3: field names.
	seen := map[string]bool{}
	for _, f := range t.Fields {
		np := f.NamePos
		if np == 0 {
			np = f.Pos
		}
		if seen[f.Name] {
			return newErr(DuplicateFieldName, np, "field name %s is used twice", quoteIdentIfNeeded(f.Name))
		}
		seen[f.Name] = true
		if strings.HasPrefix(f.Name, "__") {
			return newErr(ReservedColumnName, np, "field name %s starts with \"__\", which is reserved for hidden columns", quoteIdentIfNeeded(f.Name)).
				WithHint("rename the field")
		}
		if !agg {
			if rv.key[f.Name] {
				return newErr(FieldNamedAfterKeyColumn, np, "field %s has the name of a key column of %s; the target has that column already", quoteIdentIfNeeded(f.Name), rv.srcName()).
					WithHint("name the field differently, e.g. %s", quoteIdentIfNeeded(f.Name+"_copy"))
			}
			if rv.items[0].cols[f.Name] && !rv.isSourceColumn(f.Expr, f.Name) {
				return newErr(CalculatedFieldShadowsSourceColumn, np, "field %s has the name of a column of %s but a different formula", quoteIdentIfNeeded(f.Name), rv.srcName()).
					WithHint("rename the field, or make it the plain column %s AS %s", quoteIdentIfNeeded(f.Name), quoteIdentIfNeeded(f.Name))
			}
		} else if ki, ok := rv.keyCols[f.Name]; ok && !rv.isKey(f.Expr, ki) {
			return newErr(GroupingColumnFieldMustBePassthrough, np, "field %s has the name of GROUP BY key %s but a different formula", quoteIdentIfNeeded(f.Name), fmtDotted(t.GroupBy[ki].Parts)).
				WithHint("select the key as %s AS %s, or rename the field", fmtDotted(t.GroupBy[ki].Parts), quoteIdentIfNeeded(f.Name))
		}
	}

	// C4: names inside formulas.
	for i, f := range t.Fields {
		rf := ResolvedField{Name: f.Name, Expr: f.Expr, Aggregate: HasAggregate(f.Expr)}
		if agg {
			if ki, ok := rv.keyCols[f.Name]; ok && rv.isKey(f.Expr, ki) {
				rf.Passthrough = true
			}
		} else {
			rf.Passthrough = rv.items[0].cols[f.Name] && rv.isSourceColumn(f.Expr, f.Name)
		}
		for _, u := range ColumnRefs(f.Expr) {
			r, err := rv.resolveRef(i, u)
			if err != nil {
				return err
			}
			if r.Kind == RefField && !slices.Contains(rf.Reads, r.Field) {
				rf.Reads = append(rf.Reads, r.Field)
			}
			rf.Refs = append(rf.Refs, r)
		}
		rv.res.Fields = append(rv.res.Fields, rf)
	}

	// C5: key-space use.
	for _, rf := range rv.res.Fields {
		for _, r := range rf.Refs {
			if err := rv.keySpace(rf, r); err != nil {
				return err
			}
		}
	}

	// C6: field cycles, then the inlining order.
	return rv.order()
}

// column resolves a column reference as written (col, item.col or
// schema.table.col) among the first n items. It returns the item's index,
// or -1 with no error when a bare name is no item's column (the caller
// decides: a field, or its own error).
func (rv *resolver) column(c ColumnName, n int, what string) (int, string, *pgerr.Error) {
	p := c.Parts
	col := p[len(p)-1]
	switch len(p) {
	case 3:
		for i, it := range rv.items[:n] {
			if !it.aliased && it.schema == p[0] && it.table == p[1] {
				return rv.hasColumn(i, c, what)
			}
		}
		return 0, col, rv.notAnItem(c, n, what)
	case 2:
		for i, it := range rv.items[:n] {
			if it.name == p[0] {
				return rv.hasColumn(i, c, what)
			}
		}
		return 0, col, rv.notAnItem(c, n, what)
	}
	found := -1
	for i, it := range rv.items[:n] {
		if !it.cols[col] {
			continue
		}
		if found >= 0 {
			return 0, col, newErr(AmbiguousColumnReference, c.Pos, "%s reads %s, which is ambiguous: both %s and %s have that column", what, quoteIdentIfNeeded(col), quoteIdentIfNeeded(rv.items[found].name), quoteIdentIfNeeded(it.name)).
				WithHint("qualify it: %s.%s or %s.%s", quoteIdentIfNeeded(rv.items[found].name), quoteIdentIfNeeded(col), quoteIdentIfNeeded(it.name), quoteIdentIfNeeded(col))
		}
		found = i
	}
	return found, col, nil
}

func (rv *resolver) hasColumn(i int, c ColumnName, what string) (int, string, *pgerr.Error) {
	col := c.Column()
	it := rv.items[i]
	if !it.cols[col] {
		return 0, col, newErr(UnresolvedColumn, c.Pos, "%s reads %s, which is not a column of %s.%s", what, fmtDotted(c.Parts), quoteIdentIfNeeded(it.schema), quoteIdentIfNeeded(it.table)).
			WithDetail("column: %s", col).
			WithHint("check the spelling; \\d %s.%s lists its columns", quoteIdentIfNeeded(it.schema), quoteIdentIfNeeded(it.table))
	}
	return i, col, nil
}

func (rv *resolver) notAnItem(c ColumnName, n int, what string) *pgerr.Error {
	named := "a table of this transform's FROM clause"
	if len(rv.items) == 1 {
		named = "the source table " + rv.srcName()
	}
	e := newErr(QualifiedColumnNotFromTable, c.Pos, "%s reads %s, which does not name %s", what, fmtDotted(c.Parts), named).
		WithDetail("reference: %s", fmtDotted(c.Parts))
	if n < len(rv.items) {
		e = e.WithHint("an ON condition may name only the joined table and the items before it")
	} else if len(c.Parts) == 2 && len(rv.items) == 1 {
		e = e.WithHint("to read another table, join it: FROM %s JOIN %s ON ...", quoteIdentIfNeeded(rv.items[0].name), quoteIdentIfNeeded(c.Parts[0]))
	}
	return e
}

// resolveJoin checks the ON condition of Joins[i] (joins spec §2): every
// equality sets a column of the joined item equal to a column of one
// earlier item, the same earlier item for every equality.
func (rv *resolver) resolveJoin(i int) *pgerr.Error {
	j := rv.t.Joins[i]
	me := i + 1
	rj := ResolvedJoin{Item: me, Parent: -1}
	what := "JOIN " + quoteIdentIfNeeded(rv.items[me].name)
	bad := func(pos Pos, format string, args ...any) *pgerr.Error {
		return newErr(UnsupportedJoinCondition, pos, format, args...).
			WithHint("write ON %s.<column> = <earlier item>.<column> [AND ...], every equality naming the same earlier item", quoteIdentIfNeeded(rv.items[me].name))
	}
	for _, eq := range j.On {
		li, lc, err := rv.column(eq.Left, me+1, what)
		if err != nil {
			return err
		}
		ri, rc, err := rv.column(eq.Right, me+1, what)
		if err != nil {
			return err
		}
		for _, side := range []struct {
			at  int
			ref ColumnName
		}{{li, eq.Left}, {ri, eq.Right}} {
			if side.at < 0 {
				return newErr(UnresolvedColumn, side.ref.Pos, "%s: column %s does not exist in %s", what, quoteIdentIfNeeded(side.ref.Column()), rv.itemsName()).
					WithDetail("column: %s", side.ref.Column())
			}
		}
		if li != me {
			li, ri, lc, rc = ri, li, rc, lc
		}
		switch {
		case li != me:
			return bad(eq.Pos, "%s: the equality %s = %s does not name a column of %s", what, fmtDotted(eq.Left.Parts), fmtDotted(eq.Right.Parts), quoteIdentIfNeeded(rv.items[me].name))
		case ri == me:
			return bad(eq.Pos, "%s: the equality %s = %s compares %s with itself", what, fmtDotted(eq.Left.Parts), fmtDotted(eq.Right.Parts), quoteIdentIfNeeded(rv.items[me].name))
		case rj.Parent >= 0 && ri != rj.Parent:
			return bad(eq.Pos, "%s: its ON condition names both %s and %s; it may name one earlier item", what, quoteIdentIfNeeded(rv.items[rj.Parent].name), quoteIdentIfNeeded(rv.items[ri].name))
		}
		rj.Parent = ri
		rj.Columns = append(rj.Columns, lc)
		rj.ParentColumns = append(rj.ParentColumns, rc)
	}
	rv.res.Joins = append(rv.res.Joins, rj)
	return nil
}

// isSourceColumn reports whether e is exactly the FROM table's column name
// (in any spelling: col, item.col, schema.table.col).
func (rv *resolver) isSourceColumn(e Expr, name string) bool {
	c, ok := e.(*ColumnRef)
	if !ok || c.Parts[len(c.Parts)-1] != name {
		return false
	}
	it, _, err := rv.column(ColumnName{Parts: c.Parts, Pos: c.Pos}, len(rv.items), "")
	return err == nil && it == 0
}

// isKey reports whether e is exactly GROUP BY key ki.
func (rv *resolver) isKey(e Expr, ki int) bool {
	k := rv.res.Keys[ki]
	c, ok := e.(*ColumnRef)
	if !ok || c.Parts[len(c.Parts)-1] != k.Column {
		return false
	}
	it, _, err := rv.column(ColumnName{Parts: c.Parts, Pos: c.Pos}, len(rv.items), "")
	return err == nil && it == k.Item
}

func (rv *resolver) isAggField(name string) bool {
	i, ok := rv.fields[name]
	return ok && HasAggregate(rv.t.Fields[i].Expr)
}

func (rv *resolver) resolveRef(fi int, u ColumnUse) (ResolvedRef, *pgerr.Error) {
	f := rv.t.Fields[fi]
	p := u.Ref.Parts
	r := ResolvedRef{Ref: u.Ref, Agg: u.Agg, Column: p[len(p)-1]}
	what := "field " + quoteIdentIfNeeded(f.Name)
	cn := ColumnName{Parts: p, Pos: u.Ref.Pos}
	if len(p) > 1 {
		it, _, err := rv.column(cn, len(rv.items), what)
		if err != nil {
			return r, err
		}
		rv.itemRef(&r, it)
		return r, nil
	}
	name := p[0]
	_, isField := rv.fields[name]
	it, _, err := rv.column(cn, len(rv.items), what)
	if err != nil {
		return r, err
	}
	isCol := it >= 0
	unresolved := func() *pgerr.Error {
		return newErr(UnresolvedColumn, u.Ref.Pos, "field %s reads %s, which is neither a column of %s nor a field", quoteIdentIfNeeded(f.Name), quoteIdentIfNeeded(r.Column), rv.itemsName()).
			WithDetail("field: %s, column: %s", f.Name, r.Column)
	}
	switch {
	case name == f.Name: // §7.7 case 1
		if !isCol {
			return r, unresolved()
		}
	case u.Agg != nil && isCol && rv.isAggField(name): // case 2
	case isCol && isField:
		g := rv.t.Fields[rv.fields[name]]
		if !rv.isSameColumn(g.Expr, it, name) {
			itName := quoteIdentIfNeeded(rv.items[it].name)
			return r, newErr(AmbiguousColumnReference, u.Ref.Pos, "field %s reads %s, which is both a column of %s and the field %s", quoteIdentIfNeeded(f.Name), quoteIdentIfNeeded(name), rv.itemLong(it), quoteIdentIfNeeded(name)).
				WithDetail("column: %s.%s\nfield: %s AS %s", rv.itemLong(it), quoteIdentIfNeeded(name), RenderExpr(g.Expr), quoteIdentIfNeeded(name)).
				WithHint("write %s.%s for the column, or rename the field", itName, quoteIdentIfNeeded(name))
		}
	case isCol:
	case isField:
		r.Kind, r.Field = RefField, name
		return r, nil
	default:
		return r, unresolved()
	}
	rv.itemRef(&r, it)
	return r, nil
}

// itemLong is an item's table as schema.table, for messages.
func (rv *resolver) itemLong(i int) string {
	return quoteIdentIfNeeded(rv.items[i].schema) + "." + quoteIdentIfNeeded(rv.items[i].table)
}

// isSameColumn reports whether e is exactly the column name of item it.
func (rv *resolver) isSameColumn(e Expr, it int, name string) bool {
	c, ok := e.(*ColumnRef)
	if !ok || c.Parts[len(c.Parts)-1] != name {
		return false
	}
	at, _, err := rv.column(ColumnName{Parts: c.Parts, Pos: c.Pos}, len(rv.items), "")
	return err == nil && at == it
}

// itemRef sets a column reference's item, and reclassifies a column read
// outside an aggregate as the GROUP BY key it is, in an aggregate target.
func (rv *resolver) itemRef(r *ResolvedRef, it int) {
	r.Kind, r.Item = RefSource, it
	if it > 0 {
		r.Kind, r.Rel = RefJoined, rv.items[it].name
	}
	if !rv.t.IsAggregate() || r.Agg != nil {
		return
	}
	if ki, ok := rv.keyCols[r.Column]; ok && rv.res.Keys[ki].Item == it {
		r.Kind = RefKey
	}
}

// readsAggregate reports whether field name is an aggregate field or reads
// one through non-aggregate fields.
func (rv *resolver) readsAggregate(name string, seen map[string]bool) bool {
	if seen[name] {
		return false
	}
	seen[name] = true
	i, ok := rv.fields[name]
	if !ok {
		return false
	}
	if rv.res.Fields[i].Aggregate {
		return true
	}
	for _, g := range rv.res.Fields[i].Reads {
		if rv.readsAggregate(g, seen) {
			return true
		}
	}
	return false
}

func (rv *resolver) keySpace(rf ResolvedField, r ResolvedRef) *pgerr.Error {
	fname := quoteIdentIfNeeded(rf.Name)
	if !rv.t.IsAggregate() {
		return nil // aggregates were refused (oneToOneAggregates)
	}
	switch {
	case (r.Kind == RefSource || r.Kind == RefJoined) && r.Agg == nil:
		col := fmtDotted(r.Ref.Parts)
		return newErr(UngroupedColumnReference, r.Ref.Pos, "field %s reads column %s outside an aggregate, but it is not a GROUP BY key", fname, col).
			WithHint("wrap it in an aggregate, e.g. MAX(%s), or add it to GROUP BY", col)
	case r.Kind == RefField && r.Agg != nil && rv.readsAggregate(r.Field, map[string]bool{}):
		return newErr(AggregateOfAggregateField, r.Ref.Pos, "field %s aggregates %s, which is itself an aggregate", fname, quoteIdentIfNeeded(r.Field)).
			WithDetail("field: %s, reads: %s", rf.Name, r.Field).
			WithHint("aggregate the source column instead")
	}
	return nil
}

// order detects field cycles (C6) and computes the inlining order.
func (rv *resolver) order() *pgerr.Error {
	fs := rv.res.Fields
	state := make([]int8, len(fs)) // 0 new, 1 on stack, 2 done
	var stack []int
	var visit func(i int) *pgerr.Error
	visit = func(i int) *pgerr.Error {
		state[i] = 1
		stack = append(stack, i)
		for _, r := range fs[i].Refs {
			if r.Kind != RefField {
				continue
			}
			j := rv.fields[r.Field]
			switch state[j] {
			case 1:
				k := slices.Index(stack, j)
				var names []string
				for _, x := range stack[k:] {
					names = append(names, fs[x].Name)
				}
				names = append(names, fs[j].Name)
				return newErr(Cycle, r.Ref.Pos, "fields read each other in a cycle: %s", strings.Join(names, " -> ")).
					WithDetail("cycle: %s", strings.Join(names, ", "))
			case 0:
				if err := visit(j); err != nil {
					return err
				}
			}
		}
		stack = stack[:len(stack)-1]
		state[i] = 2
		rv.res.Order = append(rv.res.Order, i)
		return nil
	}
	for i := range fs {
		if state[i] == 0 {
			if err := visit(i); err != nil {
				return err
			}
		}
	}
	return nil
}

// oneToOneAggregates applies the stage-A rule for 1-1 targets: no
// aggregate, since every join is to-one (joins spec §3).
func oneToOneAggregates(e Expr) *pgerr.Error {
	var err *pgerr.Error
	Inspect(e, func(n Expr) bool {
		f, ok := n.(*FuncCall)
		if !ok || err != nil || AggregateName(f) == "" {
			return err == nil
		}
		err = aggregateWithoutGroupBy(f.Pos, strings.ToUpper(AggregateName(f)), f.Star)
		return false
	})
	return err
}

// aggregateWithoutGroupBy is UnsupportedKeySpace for an aggregate in a
// transform without GROUP BY.
func aggregateWithoutGroupBy(pos Pos, agg string, star bool) *pgerr.Error {
	construct := agg + "(...)"
	if star {
		construct = "COUNT(*)"
	}
	return newErr(UnsupportedKeySpace, pos, "%s in a transform without GROUP BY: a 1-1 transform has one row per FROM row, and every join is to-one", construct).
		WithDetail("construct: %s", construct).
		WithHint("add GROUP BY; to fold many rows into each row of a table, make the many side the FROM table and GROUP BY the other's key")
}
