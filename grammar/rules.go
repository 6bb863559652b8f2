package grammar

import (
	"slices"
	"strings"

	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// Source is what the engine read from the catalog (grammar spec §9.2 stage
// B) and hands to Resolve: the resolved source table, its columns, its key,
// and the relationships declared on it.
type Source struct {
	Schema  string
	Table   string
	Columns []string // every column name, in attribute order
	Key     []string // the key a 1-1 target inherits (primary key or qualifying unique index)
	// Relationships declared on this source table, by name.
	Relationships []Relationship
}

// Relationship is one relationship declared on the source.
type Relationship struct {
	Name      string
	ToSchema  string
	ToTable   string
	ToColumns []string // every column of the to-side table
	ToMany    bool
}

// RefKind classifies a resolved column reference.
type RefKind string

// Reference kinds.
const (
	RefSource RefKind = "source" // a column of the source table
	RefField  RefKind = "field"  // another field of the same target
	RefKey    RefKind = "key"    // a GROUP BY key read outside an aggregate
	RefPath   RefKind = "path"   // a relationship path rel.column
)

// ResolvedRef is one column reference with its meaning.
type ResolvedRef struct {
	Ref    *ColumnRef
	Kind   RefKind
	Column string // source column, key column, or the path's to-side column
	Field  string // RefField: the field read
	Rel    string // RefPath: the relationship
	ToMany bool   // RefPath: the relationship is to-many
	Agg    *FuncCall
}

// ResolvedKey is one GROUP BY key.
type ResolvedKey struct {
	Key    ColumnName
	Column string // the target column name (the column, or the path's tail)
	Rel    string // "" for a source column; the relationship for a path key
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
}

// Resolve runs the pure definition rules of grammar spec §9.2 stage C over
// the catalog facts in src: relationships named by the text, GROUP BY keys,
// field names, names inside formulas (§7.5, §7.7), key-space and
// relationship use (§7.1, §7.2, §8.4) and field cycles. Type-dependent rules
// (key types, collations) and everything of stage D are the engine's.
func Resolve(t *TransformStmt, src *Source) (*Resolution, error) {
	rv := &resolver{t: t, src: src}
	if err := rv.run(); err != nil {
		return nil, err
	}
	return rv.res, nil
}

type resolver struct {
	t       *TransformStmt
	src     *Source
	res     *Resolution
	cols    map[string]bool
	key     map[string]bool
	rels    map[string]*Relationship
	fields  map[string]int
	keyCols map[string]int // GROUP BY target column name → key index
}

func (rv *resolver) srcName() string {
	return quoteIdentIfNeeded(rv.src.Schema) + "." + quoteIdentIfNeeded(rv.src.Table)
}

func (rv *resolver) run() *pgerr.Error {
	t, src := rv.t, rv.src
	rv.res = &Resolution{}
	rv.cols = map[string]bool{}
	for _, c := range src.Columns {
		rv.cols[c] = true
	}
	rv.key = map[string]bool{}
	for _, c := range src.Key {
		rv.key[c] = true
	}
	rv.rels = map[string]*Relationship{}
	for i := range src.Relationships {
		rv.rels[src.Relationships[i].Name] = &src.Relationships[i]
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

	// C1: relationships named by the text exist and have the columns read.
	for _, k := range t.GroupBy {
		if len(k.Parts) == 2 && k.Parts[0] != src.Table {
			r := rv.rels[k.Parts[0]]
			if r == nil {
				return newErr(UnknownGroupByRelationship, k.Pos, "GROUP BY %s: %s is neither the source table nor a relationship declared on %s", fmtDotted(k.Parts), quoteIdentIfNeeded(k.Parts[0]), rv.srcName()).
					WithHint("declare it with RELATIONSHIP %s FROM %s.<column> TO <table>.<column>", quoteIdentIfNeeded(k.Parts[0]), quoteIdentIfNeeded(src.Table))
			}
			if !slices.Contains(r.ToColumns, k.Parts[1]) {
				return newErr(UnknownRelationshipColumn, k.Pos, "column %s does not exist in %s.%s (read through relationship %s)", quoteIdentIfNeeded(k.Parts[1]), quoteIdentIfNeeded(r.ToSchema), quoteIdentIfNeeded(r.ToTable), quoteIdentIfNeeded(r.Name))
			}
		}
	}
	for _, f := range t.Fields {
		for _, u := range ColumnRefs(f.Expr) {
			p := u.Ref.Parts
			if len(p) != 2 || p[0] == src.Table {
				continue
			}
			r := rv.rels[p[0]]
			if r == nil {
				return newErr(UnknownRelationship, u.Ref.Pos, "field %s reads %s: %s is neither the source table %s nor a relationship declared on it", quoteIdentIfNeeded(f.Name), fmtDotted(p), quoteIdentIfNeeded(p[0]), rv.srcName()).
					WithDetail("field: %s, relationship: %s", f.Name, p[0])
			}
			if !slices.Contains(r.ToColumns, p[1]) {
				return newErr(UnknownRelationshipColumn, u.Ref.Pos, "column %s does not exist in %s.%s (read through relationship %s)", quoteIdentIfNeeded(p[1]), quoteIdentIfNeeded(r.ToSchema), quoteIdentIfNeeded(r.ToTable), quoteIdentIfNeeded(r.Name))
			}
		}
	}

	// C2: GROUP BY keys.
	rv.keyCols = map[string]int{}
	for i, k := range t.GroupBy {
		rk := ResolvedKey{Key: k, Column: k.Column()}
		switch {
		case len(k.Parts) == 3 && (k.Parts[0] != src.Schema || k.Parts[1] != src.Table):
			return newErr(QualifiedColumnNotFromTable, k.Pos, "GROUP BY %s does not name a column of the source table %s", fmtDotted(k.Parts), rv.srcName()).
				WithDetail("reference: %s, expected: %s", fmtDotted(k.Parts), rv.srcName())
		case len(k.Parts) == 2 && k.Parts[0] != src.Table:
			rk.Rel = k.Parts[0]
			if rv.rels[rk.Rel].ToMany {
				return newErr(GroupByRelationshipMustBeToOne, k.Pos, "GROUP BY %s: relationship %s is to-many; a key must be a to-one path", fmtDotted(k.Parts), quoteIdentIfNeeded(rk.Rel))
			}
		default:
			if !rv.cols[rk.Column] {
				return newErr(UnresolvedGroupByColumn, k.Pos, "GROUP BY column %s does not exist in %s", quoteIdentIfNeeded(rk.Column), rv.srcName())
			}
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
			if rv.cols[f.Name] && !rv.isSourceColumn(f.Expr, f.Name) {
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
			rf.Passthrough = rv.cols[f.Name] && rv.isSourceColumn(f.Expr, f.Name)
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

	// C5: key-space and relationship use.
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

// isSourceColumn reports whether e is exactly the source column name (in any
// spelling: col, table.col, schema.table.col).
func (rv *resolver) isSourceColumn(e Expr, name string) bool {
	c, ok := e.(*ColumnRef)
	if !ok || c.Parts[len(c.Parts)-1] != name {
		return false
	}
	switch len(c.Parts) {
	case 1:
		return true
	case 2:
		return c.Parts[0] == rv.src.Table
	}
	return c.Parts[0] == rv.src.Schema && c.Parts[1] == rv.src.Table
}

// isKey reports whether e is exactly GROUP BY key ki.
func (rv *resolver) isKey(e Expr, ki int) bool {
	k := rv.res.Keys[ki]
	if k.Rel != "" {
		c, ok := e.(*ColumnRef)
		return ok && len(c.Parts) == 2 && c.Parts[0] == k.Rel && c.Parts[1] == k.Column
	}
	return rv.isSourceColumn(e, k.Column)
}

func (rv *resolver) isAggField(name string) bool {
	i, ok := rv.fields[name]
	return ok && HasAggregate(rv.t.Fields[i].Expr)
}

func (rv *resolver) resolveRef(fi int, u ColumnUse) (ResolvedRef, *pgerr.Error) {
	f := rv.t.Fields[fi]
	p := u.Ref.Parts
	r := ResolvedRef{Ref: u.Ref, Agg: u.Agg, Column: p[len(p)-1]}
	unresolved := func() *pgerr.Error {
		return newErr(UnresolvedColumn, u.Ref.Pos, "field %s reads %s, which is neither a column of %s nor a field", quoteIdentIfNeeded(f.Name), quoteIdentIfNeeded(r.Column), rv.srcName()).
			WithDetail("field: %s, column: %s", f.Name, r.Column)
	}
	switch len(p) {
	case 3:
		if p[0] != rv.src.Schema || p[1] != rv.src.Table {
			return r, newErr(QualifiedColumnNotFromTable, u.Ref.Pos, "field %s reads %s, which does not name the source table %s", quoteIdentIfNeeded(f.Name), fmtDotted(p), rv.srcName()).
				WithDetail("reference: %s, expected: %s", fmtDotted(p), rv.srcName())
		}
		fallthrough
	case 2:
		if len(p) == 2 && p[0] != rv.src.Table {
			rel := rv.rels[p[0]]
			r.Kind, r.Rel, r.ToMany = RefPath, p[0], rel.ToMany
			return r, nil
		}
		if !rv.cols[r.Column] {
			return r, unresolved()
		}
		r.Kind = RefSource
		rv.keyRef(&r)
		return r, nil
	}
	name := p[0]
	_, isField := rv.fields[name]
	isCol := rv.cols[name]
	switch {
	case name == f.Name: // §7.7 case 1
		if !isCol {
			return r, unresolved()
		}
		r.Kind = RefSource
	case u.Agg != nil && isCol && rv.isAggField(name): // case 2
		r.Kind = RefSource
	case isCol && isField:
		g := rv.t.Fields[rv.fields[name]]
		if !rv.isSourceColumn(g.Expr, name) {
			return r, newErr(AmbiguousColumnReference, u.Ref.Pos, "field %s reads %s, which is both a column of %s and the field %s", quoteIdentIfNeeded(f.Name), quoteIdentIfNeeded(name), rv.srcName(), quoteIdentIfNeeded(name)).
				WithDetail("column: %s.%s\nfield: %s AS %s", rv.srcName(), quoteIdentIfNeeded(name), RenderExpr(g.Expr), quoteIdentIfNeeded(name)).
				WithHint("write %s.%s or %s.%s for the column, or rename the field", quoteIdentIfNeeded(rv.src.Table), quoteIdentIfNeeded(name), rv.srcName(), quoteIdentIfNeeded(name))
		}
		r.Kind = RefSource
	case isCol:
		r.Kind = RefSource
	case isField:
		r.Kind, r.Field = RefField, name
		return r, nil
	default:
		if ki, ok := rv.keyCols[name]; ok && rv.res.Keys[ki].Rel != "" && u.Agg == nil {
			r.Kind, r.Rel = RefKey, rv.res.Keys[ki].Rel
			return r, nil
		}
		return r, unresolved()
	}
	rv.keyRef(&r)
	return r, nil
}

// keyRef reclassifies a source column read outside an aggregate as the
// GROUP BY key it is, in an aggregate target.
func (rv *resolver) keyRef(r *ResolvedRef) {
	if !rv.t.IsAggregate() || r.Agg != nil || r.Kind != RefSource {
		return
	}
	if ki, ok := rv.keyCols[r.Column]; ok && rv.res.Keys[ki].Rel == "" {
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
	path := fmtDotted(r.Ref.Parts)
	if !rv.t.IsAggregate() {
		switch {
		case r.Kind == RefPath && !r.ToMany && r.Agg != nil:
			return newErr(RelationshipToOneWrappedInAggregate, r.Agg.Pos, "field %s aggregates %s, but relationship %s is to-one: there is one value per row", fname, path, quoteIdentIfNeeded(r.Rel)).
				WithHint("read %s without the aggregate", path)
		case r.Kind == RefPath && r.ToMany && r.Agg == nil:
			return newErr(RelationshipToManyRequiresAggregate, r.Ref.Pos, "field %s reads %s, but relationship %s is to-many: wrap it in one aggregate", fname, path, quoteIdentIfNeeded(r.Rel)).
				WithHint("e.g. SUM(%s) or COUNT(%s)", path, path)
		case r.Agg != nil && r.Kind != RefPath:
			return newErr(UnsupportedKeySpace, r.Agg.Pos, "%s(...) in a transform without GROUP BY may only fold a to-many relationship path, not %s", strings.ToUpper(AggregateName(r.Agg)), path).
				WithDetail("construct: %s(...)", strings.ToUpper(AggregateName(r.Agg))).
				WithHint("add GROUP BY to aggregate source rows")
		}
		return nil
	}
	switch {
	case r.Kind == RefPath && r.ToMany:
		return newErr(RelationshipPathInAggregate, r.Ref.Pos, "field %s reads the to-many path %s in a GROUP BY transform; aggregating inside an aggregate is undefined", fname, path).
			WithHint("aggregate it in a 1-1 transform first, then group that target")
	case r.Kind == RefPath && r.Agg == nil:
		for _, k := range rv.res.Keys {
			if k.Rel == r.Rel && k.Column == r.Column {
				return nil
			}
		}
		return newErr(UngroupedRelationshipReference, r.Ref.Pos, "field %s reads %s outside an aggregate, but it is not a GROUP BY key", fname, path).
			WithHint("wrap it in an aggregate or add it to GROUP BY")
	case r.Kind == RefSource && r.Agg == nil:
		return newErr(UngroupedColumnReference, r.Ref.Pos, "field %s reads column %s outside an aggregate, but it is not a GROUP BY key", fname, quoteIdentIfNeeded(r.Column)).
			WithHint("wrap it in an aggregate, e.g. MAX(%s), or add it to GROUP BY", quoteIdentIfNeeded(r.Column))
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

// oneToOneAggregates applies the stage-A rule for 1-1 targets: an aggregate
// only as AGG(head.column), and no COUNT(*).
func oneToOneAggregates(e Expr) *pgerr.Error {
	var err *pgerr.Error
	Inspect(e, func(n Expr) bool {
		f, ok := n.(*FuncCall)
		if !ok || err != nil || AggregateName(f) == "" {
			return err == nil
		}
		var two bool
		if len(f.Args) == 1 {
			c, ok := f.Args[0].(*ColumnRef)
			two = ok && len(c.Parts) == 2
		}
		if f.Star || !two {
			construct := strings.ToUpper(AggregateName(f)) + "(...)"
			if f.Star {
				construct = "COUNT(*)"
			}
			err = newErr(UnsupportedKeySpace, f.Pos, "%s in a transform without GROUP BY: aggregates there may only fold one to-many relationship path, AGG(rel.column)", construct).
				WithDetail("construct: %s", construct).
				WithHint("add GROUP BY to aggregate source rows, or aggregate a to-many relationship path")
		}
		return false
	})
	return err
}

// CheckRelationshipName applies the one pure rule of grammar spec §8.3: a
// relationship may not be named after its from-table (a path head equal to
// the source's name always means the source, §7.5). The engine calls it in
// the §8.3 order, after the tables and columns resolved.
func CheckRelationshipName(st *RelationshipStmt) error {
	if st.Name.Name == st.FromTable.Name {
		return newErr(RelationshipNamedAfterFromTable, st.Name.Pos, "relationship %s has the name of its from-table", quoteIdentIfNeeded(st.Name.Name)).
			WithDetail("%s.x would always read the column x of %s itself", quoteIdentIfNeeded(st.Name.Name), quoteIdentIfNeeded(st.FromTable.Name)).
			WithHint("choose another relationship name")
	}
	return nil
}
