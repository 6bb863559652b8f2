package grammar

// Children returns the direct sub-expressions of e in tree order.
func Children(e Expr) []Expr {
	var out []Expr
	add := func(xs ...Expr) {
		for _, x := range xs {
			if x != nil {
				out = append(out, x)
			}
		}
	}
	switch x := e.(type) {
	case *TypeCast:
		add(x.Arg)
		add(x.Type.Typmods...)
	case *OpExpr:
		add(x.Left, x.Right)
	case *QuantifiedOp:
		add(x.Left, x.Right)
	case *DistinctExpr:
		add(x.Left, x.Right)
	case *NullIfExpr:
		add(x.Left, x.Right)
	case *InList:
		add(x.Expr)
		add(x.List...)
	case *LikeExpr:
		add(x.Expr, x.Pattern, x.Escape)
	case *BetweenExpr:
		add(x.Expr, x.Low, x.High)
	case *BoolExpr:
		add(x.Args...)
	case *NullTest:
		add(x.Arg)
	case *BoolTest:
		add(x.Arg)
	case *FuncCall:
		add(x.Args...)
	case *NamedArg:
		add(x.Arg)
	case *CaseExpr:
		add(x.Arg)
		for _, w := range x.Whens {
			add(w.Cond, w.Result)
		}
		add(x.Else)
	case *CoalesceExpr:
		add(x.Args...)
	case *MinMaxExpr:
		add(x.Args...)
	case *CollateExpr:
		add(x.Arg)
	case *ArrayExpr:
		add(x.Elems...)
	case *RowExpr:
		add(x.Args...)
	case *SubscriptExpr:
		add(x.Arg)
		for _, ix := range x.Indices {
			add(ix.Lower, ix.Upper)
		}
	}
	return out
}

// Inspect walks e in pre-order (tree order), calling fn for every node; when
// fn returns false the node's children are skipped.
func Inspect(e Expr, fn func(Expr) bool) {
	if e == nil || !fn(e) {
		return
	}
	for _, c := range Children(e) {
		Inspect(c, fn)
	}
}

// CallKind says what a Call refers to.
type CallKind string

// Kinds of references the engine must check against the catalog
// (built-in, immutable, not set-returning; grammar spec §5.4).
const (
	CallFunction  CallKind = "function"
	CallAggregate CallKind = "aggregate" // one of the allowed aggregates (§5.6)
	CallOperator  CallKind = "operator"
	CallCast      CallKind = "cast"
)

// Call is one function, aggregate, operator or cast reference of a formula.
type Call struct {
	Kind  CallKind
	Parts []string // qualified name as written (for a cast: the type's names)
	Name  string   // display form: round, pg_catalog.extract, +, numeric
	Args  int      // argument count (operators: 1 or 2; casts: 1; COUNT(*): 0)
	Pos   Pos
	Node  Expr
}

// Calls lists the function, aggregate, operator and cast references of e in
// tree order. Operators implied by IN, BETWEEN, LIKE, IS DISTINCT FROM and
// NULLIF are listed under their Postgres operator names.
func Calls(e Expr) []Call {
	var out []Call
	op := func(parts []string, n int, pos Pos, node Expr) {
		out = append(out, Call{Kind: CallOperator, Parts: parts, Name: parts[len(parts)-1], Args: n, Pos: pos, Node: node})
	}
	Inspect(e, func(n Expr) bool {
		switch x := n.(type) {
		case *FuncCall:
			k := CallFunction
			if AggregateName(x) != "" {
				k = CallAggregate
			}
			out = append(out, Call{Kind: k, Parts: x.Name, Name: fmtDotted(x.Name), Args: len(x.Args), Pos: x.Pos, Node: x})
		case *OpExpr:
			n := 2
			if x.Left == nil {
				n = 1
			}
			op(x.Op, n, x.Pos, x)
		case *QuantifiedOp:
			op(x.Op, 2, x.Pos, x)
		case *LikeExpr:
			sym := map[LikeKind][2]string{Like: {"~~", "!~~"}, ILike: {"~~*", "!~~*"}, SimilarTo: {"~", "!~"}}[x.Kind]
			s := sym[0]
			if x.Not {
				s = sym[1]
			}
			op([]string{s}, 2, x.Pos, x)
		case *InList:
			s := "="
			if x.Not {
				s = "<>"
			}
			op([]string{s}, 2, x.Pos, x)
		case *BetweenExpr:
			op([]string{">="}, 2, x.Pos, x)
			op([]string{"<="}, 2, x.Pos, x)
		case *DistinctExpr, *NullIfExpr:
			op([]string{"="}, 2, n.Position(), x)
		case *TypeCast:
			r := &renderer{}
			r.typeName(x.Type, false)
			out = append(out, Call{Kind: CallCast, Parts: x.Type.Names, Name: r.b.String(), Args: 1, Pos: x.Pos, Node: x})
		}
		return true
	})
	return out
}

// ColumnUse is one column reference of a formula and where it sits.
type ColumnUse struct {
	Ref *ColumnRef
	// Agg is the allowed aggregate call whose argument holds the reference,
	// nil outside any aggregate.
	Agg *FuncCall
}

// ColumnRefs lists the column references of e in tree order.
func ColumnRefs(e Expr) []ColumnUse {
	var out []ColumnUse
	var walk func(e Expr, agg *FuncCall)
	walk = func(e Expr, agg *FuncCall) {
		switch x := e.(type) {
		case *ColumnRef:
			out = append(out, ColumnUse{Ref: x, Agg: agg})
			return
		case *FuncCall:
			if agg == nil && AggregateName(x) != "" {
				for _, a := range x.Args {
					walk(a, x)
				}
				return
			}
		}
		for _, c := range Children(e) {
			walk(c, agg)
		}
	}
	walk(e, nil)
	return out
}

// HasAggregate reports whether e calls an allowed aggregate.
func HasAggregate(e Expr) bool {
	found := false
	Inspect(e, func(n Expr) bool {
		if f, ok := n.(*FuncCall); ok && AggregateName(f) != "" {
			found = true
		}
		return !found
	})
	return found
}
