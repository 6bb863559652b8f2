package grammar

import (
	"fmt"
	"strconv"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v6"

	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// allowedAggregates are the aggregates of grammar spec §5.6, with their
// argument count (0 means COUNT(*) or COUNT(x)).
var allowedAggregates = map[string]bool{
	"sum": true, "avg": true, "min": true, "max": true, "count": true,
	"bool_and": true, "bool_or": true, "bit_and": true, "bit_or": true, "jsonb_agg": true,
}

// knownSRFs are set-returning pg_catalog functions refused on sight
// (SetReturningFunctionNotAllowed); the engine's catalog check catches the
// rest. Whatever same-named function a user might create elsewhere would be
// refused too (UserDefinedFunction), so an early refusal never accepts less
// than the catalog check would.
var knownSRFs = map[string]bool{
	"generate_series": true, "generate_subscripts": true, "unnest": true, "regexp_matches": true,
	"regexp_split_to_table": true, "string_to_table": true, "jsonb_array_elements": true,
	"jsonb_array_elements_text": true, "json_array_elements": true, "json_array_elements_text": true,
	"jsonb_each": true, "jsonb_each_text": true, "json_each": true, "json_each_text": true,
	"jsonb_object_keys": true, "json_object_keys": true, "jsonb_path_query": true,
	"jsonb_to_recordset": true, "json_to_recordset": true, "jsonb_populate_recordset": true,
	"json_populate_recordset": true, "ts_stat": true, "ts_debug": true, "ts_parse": true, "ts_token_type": true,
}

// knownAggregates are pg_catalog aggregates outside §5.6, refused on sight
// (UnsupportedAggregate) for the same reason.
var knownAggregates = map[string]bool{
	"array_agg": true, "string_agg": true, "stddev": true, "stddev_pop": true, "stddev_samp": true,
	"variance": true, "var_pop": true, "var_samp": true, "every": true, "json_agg": true,
	"json_agg_strict": true, "jsonb_agg_strict": true, "json_object_agg": true, "jsonb_object_agg": true,
	"json_object_agg_strict": true, "jsonb_object_agg_strict": true, "json_object_agg_unique": true,
	"jsonb_object_agg_unique": true, "xmlagg": true, "corr": true, "covar_pop": true, "covar_samp": true,
	"regr_avgx": true, "regr_avgy": true, "regr_count": true, "regr_intercept": true, "regr_r2": true,
	"regr_slope": true, "regr_sxx": true, "regr_sxy": true, "regr_syy": true, "percentile_cont": true,
	"percentile_disc": true, "mode": true, "any_value": true, "range_agg": true, "range_intersect_agg": true,
	"bit_xor": true,
}

// catalogName returns the lower-case name of an unqualified or
// pg_catalog-qualified function, or "".
func catalogName(name []string) string {
	switch {
	case len(name) == 1:
		return name[0]
	case len(name) == 2 && name[0] == "pg_catalog":
		return name[1]
	}
	return ""
}

// AggregateName returns the lower-case name of an allowed aggregate call
// (§5.6: case-insensitive, optionally pg_catalog-qualified), or "".
func AggregateName(f *FuncCall) string {
	n := f.FuncName()
	if !allowedAggregates[n] {
		return ""
	}
	if len(f.Name) == 2 && f.Name[0] != "pg_catalog" || len(f.Name) > 2 {
		return ""
	}
	return n
}

// conv converts pg_query's raw expression tree into ours, refusing in tree
// order what grammar spec §5.3 refuses at the "shape" stage.
type conv struct {
	p        *parser
	oneToOne bool // apply the 1-1 aggregate placement rule
	fieldPos Pos  // fallback position
	inAgg    bool
}

func (c *conv) pos(loc int32) Pos {
	if loc < 0 {
		return c.fieldPos
	}
	return c.p.pm.at(int(loc))
}

func (c *conv) unsupported(loc int32, construct string) *pgerr.Error {
	return newErr(UnsupportedConstruct, c.pos(loc), "%s is not supported in a Trellis formula", construct).
		WithDetail("construct: %s", construct)
}

func strs(nodes []*pg_query.Node) []string {
	out := make([]string, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, n.GetString_().GetSval())
	}
	return out
}

func (c *conv) list(nodes []*pg_query.Node) ([]Expr, *pgerr.Error) {
	out := make([]Expr, 0, len(nodes))
	for _, n := range nodes {
		e, err := c.expr(n)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

func (c *conv) opt(n *pg_query.Node) (Expr, *pgerr.Error) {
	if n == nil {
		return nil, nil
	}
	return c.expr(n)
}

func (c *conv) expr(n *pg_query.Node) (Expr, *pgerr.Error) {
	if n == nil {
		return nil, newErr(UnsupportedConstruct, c.fieldPos, "empty expression")
	}
	switch x := n.Node.(type) {
	case *pg_query.Node_ColumnRef:
		cr := x.ColumnRef
		var parts []string
		for _, f := range cr.Fields {
			if f.GetAStar() != nil {
				return nil, c.unsupported(cr.Location, "*")
			}
			parts = append(parts, f.GetString_().GetSval())
		}
		if len(parts) > 3 {
			return nil, newErr(TooManyQualifiedNameParts, c.pos(cr.Location), "too many dotted names in column reference %s", fmtDotted(parts)).
				WithDetail("three parts mean schema.table.column")
		}
		return &ColumnRef{Parts: parts, Pos: c.pos(cr.Location)}, nil
	case *pg_query.Node_AConst:
		return c.aconst(x.AConst)
	case *pg_query.Node_TypeCast:
		return c.typeCast(x.TypeCast)
	case *pg_query.Node_AExpr:
		return c.aexpr(x.AExpr)
	case *pg_query.Node_BoolExpr:
		args, err := c.list(x.BoolExpr.Args)
		if err != nil {
			return nil, err
		}
		op := And
		switch x.BoolExpr.Boolop {
		case pg_query.BoolExprType_OR_EXPR:
			op = Or
		case pg_query.BoolExprType_NOT_EXPR:
			op = Not
		}
		return &BoolExpr{Op: op, Args: args, Pos: c.pos(x.BoolExpr.Location)}, nil
	case *pg_query.Node_NullTest:
		a, err := c.expr(x.NullTest.Arg)
		if err != nil {
			return nil, err
		}
		return &NullTest{Not: x.NullTest.Nulltesttype == pg_query.NullTestType_IS_NOT_NULL, Arg: a, Pos: c.pos(x.NullTest.Location)}, nil
	case *pg_query.Node_BooleanTest:
		a, err := c.expr(x.BooleanTest.Arg)
		if err != nil {
			return nil, err
		}
		var k BoolTestKind
		switch x.BooleanTest.Booltesttype {
		case pg_query.BoolTestType_IS_TRUE:
			k = IsTrue
		case pg_query.BoolTestType_IS_NOT_TRUE:
			k = IsNotTrue
		case pg_query.BoolTestType_IS_FALSE:
			k = IsFalse
		case pg_query.BoolTestType_IS_NOT_FALSE:
			k = IsNotFalse
		case pg_query.BoolTestType_IS_UNKNOWN:
			k = IsUnknown
		default:
			k = IsNotUnknown
		}
		return &BoolTest{Test: k, Arg: a, Pos: c.pos(x.BooleanTest.Location)}, nil
	case *pg_query.Node_FuncCall:
		return c.funcCall(x.FuncCall)
	case *pg_query.Node_NamedArgExpr:
		a, err := c.expr(x.NamedArgExpr.Arg)
		if err != nil {
			return nil, err
		}
		return &NamedArg{Name: x.NamedArgExpr.Name, Arg: a, Pos: c.pos(x.NamedArgExpr.Location)}, nil
	case *pg_query.Node_CaseExpr:
		ce := x.CaseExpr
		out := &CaseExpr{Pos: c.pos(ce.Location)}
		var err *pgerr.Error
		if out.Arg, err = c.opt(ce.Arg); err != nil {
			return nil, err
		}
		for _, w := range ce.Args {
			cw := w.GetCaseWhen()
			if cw == nil {
				return nil, c.unsupported(ce.Location, "CASE")
			}
			cond, err := c.expr(cw.Expr)
			if err != nil {
				return nil, err
			}
			res, err := c.expr(cw.Result)
			if err != nil {
				return nil, err
			}
			out.Whens = append(out.Whens, CaseWhen{Cond: cond, Result: res, Pos: c.pos(cw.Location)})
		}
		if out.Else, err = c.opt(ce.Defresult); err != nil {
			return nil, err
		}
		return out, nil
	case *pg_query.Node_CoalesceExpr:
		args, err := c.list(x.CoalesceExpr.Args)
		if err != nil {
			return nil, err
		}
		return &CoalesceExpr{Args: args, Pos: c.pos(x.CoalesceExpr.Location)}, nil
	case *pg_query.Node_MinMaxExpr:
		args, err := c.list(x.MinMaxExpr.Args)
		if err != nil {
			return nil, err
		}
		return &MinMaxExpr{Greatest: x.MinMaxExpr.Op == pg_query.MinMaxOp_IS_GREATEST, Args: args, Pos: c.pos(x.MinMaxExpr.Location)}, nil
	case *pg_query.Node_CollateClause:
		a, err := c.expr(x.CollateClause.Arg)
		if err != nil {
			return nil, err
		}
		return &CollateExpr{Arg: a, Collation: strs(x.CollateClause.Collname), Pos: c.pos(x.CollateClause.Location)}, nil
	case *pg_query.Node_AArrayExpr:
		els, err := c.list(x.AArrayExpr.Elements)
		if err != nil {
			return nil, err
		}
		return &ArrayExpr{Elems: els, Pos: c.pos(x.AArrayExpr.Location)}, nil
	case *pg_query.Node_RowExpr:
		args, err := c.list(x.RowExpr.Args)
		if err != nil {
			return nil, err
		}
		return &RowExpr{Args: args, Explicit: x.RowExpr.RowFormat == pg_query.CoercionForm_COERCE_EXPLICIT_CALL, Pos: c.pos(x.RowExpr.Location)}, nil
	case *pg_query.Node_AIndirection:
		ind := x.AIndirection
		arg, err := c.expr(ind.Arg)
		if err != nil {
			return nil, err
		}
		out := &SubscriptExpr{Arg: arg, Pos: arg.Position()}
		for _, in := range ind.Indirection {
			ix := in.GetAIndices()
			if ix == nil {
				return nil, newErr(UnsupportedConstruct, arg.Position(), "field selection is not supported in a Trellis formula").
					WithDetail("construct: field selection")
			}
			lo, err := c.opt(ix.Lidx)
			if err != nil {
				return nil, err
			}
			hi, err := c.opt(ix.Uidx)
			if err != nil {
				return nil, err
			}
			out.Indices = append(out.Indices, Index{Slice: ix.IsSlice, Lower: lo, Upper: hi})
		}
		return out, nil
	case *pg_query.Node_SubLink:
		return nil, newErr(SubqueryNotAllowed, c.pos(x.SubLink.Location), "subqueries are not allowed in Trellis formulas").
			WithHint("declare a RELATIONSHIP and read through it")
	case *pg_query.Node_ParamRef:
		return nil, newErr(ParameterNotAllowed, c.pos(x.ParamRef.Location), "parameters are not supported in Trellis statements").
			WithHint("pass the whole statement to trellis.apply($1)")
	case *pg_query.Node_SqlvalueFunction:
		name := sqlValueName(x.SqlvalueFunction.Op)
		return nil, newErr(NonImmutableConstruct, c.pos(x.SqlvalueFunction.Location), "%s is not immutable; formulas may only use IMMUTABLE values", name).
			WithDetail("its value changes with the clock or the session")
	case *pg_query.Node_GroupingFunc:
		return nil, c.unsupported(x.GroupingFunc.Location, "GROUPING")
	}
	return nil, c.unsupported(nodeLocation(n), nodeKindName(n))
}

func sqlValueName(op pg_query.SQLValueFunctionOp) string {
	return strings.TrimSuffix(strings.TrimPrefix(op.String(), "SVFOP_"), "_N")
}

func (c *conv) aconst(a *pg_query.A_Const) (Expr, *pgerr.Error) {
	p := c.pos(a.Location)
	if a.Isnull {
		return &Const{Kind: ConstNull, Pos: p}, nil
	}
	switch v := a.Val.(type) {
	case *pg_query.A_Const_Ival:
		return &Const{Kind: ConstInteger, Value: strconv.FormatInt(int64(v.Ival.GetIval()), 10), Pos: p}, nil
	case *pg_query.A_Const_Fval:
		return &Const{Kind: ConstNumeric, Value: v.Fval.GetFval(), Pos: p}, nil
	case *pg_query.A_Const_Sval:
		return &Const{Kind: ConstString, Value: v.Sval.GetSval(), Pos: p}, nil
	case *pg_query.A_Const_Bsval:
		return &Const{Kind: ConstBits, Value: v.Bsval.GetBsval(), Pos: p}, nil
	case *pg_query.A_Const_Boolval:
		b := "false"
		if v.Boolval.GetBoolval() {
			b = "true"
		}
		return &Const{Kind: ConstBool, Value: b, Pos: p}, nil
	}
	return nil, c.unsupported(a.Location, "constant")
}

func (c *conv) typeName(t *pg_query.TypeName) (TypeName, *pgerr.Error) {
	if t.Setof || t.PctType {
		return TypeName{}, c.unsupported(t.Location, "%TYPE or SETOF")
	}
	out := TypeName{Names: strs(t.Names), Pos: c.pos(t.Location)}
	mods, err := c.list(t.Typmods)
	if err != nil {
		return TypeName{}, err
	}
	out.Typmods = mods
	for _, b := range t.ArrayBounds {
		out.ArrayBounds = append(out.ArrayBounds, b.GetInteger().GetIval())
	}
	return out, nil
}

func (c *conv) typeCast(tc *pg_query.TypeCast) (Expr, *pgerr.Error) {
	out := &TypeCast{}
	switch {
	case tc.Location < 0:
		out.Syntax = CastLiteral
		out.Pos = c.pos(tc.TypeName.GetLocation())
	case strings.HasPrefix(c.p.text[tc.Location:], "::"):
		out.Syntax = CastColons
		out.Pos = c.pos(tc.Location)
	default:
		out.Syntax = CastCall
		out.Pos = c.pos(tc.Location)
	}
	var err *pgerr.Error
	if out.Arg, err = c.expr(tc.Arg); err != nil {
		return nil, err
	}
	if out.Type, err = c.typeName(tc.TypeName); err != nil {
		return nil, err
	}
	if out.Syntax == CastLiteral {
		if k, ok := out.Arg.(*Const); !ok || k.Kind != ConstString {
			out.Syntax = CastColons
		}
	}
	return out, nil
}

func (c *conv) aexpr(a *pg_query.A_Expr) (Expr, *pgerr.Error) {
	p := c.pos(a.Location)
	op := strs(a.Name)
	left, err := c.opt(a.Lexpr)
	if err != nil {
		return nil, err
	}
	switch a.Kind {
	case pg_query.A_Expr_Kind_AEXPR_OP:
		right, err := c.expr(a.Rexpr)
		if err != nil {
			return nil, err
		}
		return &OpExpr{Op: op, Left: left, Right: right, Pos: p}, nil
	case pg_query.A_Expr_Kind_AEXPR_OP_ANY, pg_query.A_Expr_Kind_AEXPR_OP_ALL:
		right, err := c.expr(a.Rexpr)
		if err != nil {
			return nil, err
		}
		return &QuantifiedOp{Op: op, All: a.Kind == pg_query.A_Expr_Kind_AEXPR_OP_ALL, Left: left, Right: right, Pos: p}, nil
	case pg_query.A_Expr_Kind_AEXPR_DISTINCT, pg_query.A_Expr_Kind_AEXPR_NOT_DISTINCT:
		right, err := c.expr(a.Rexpr)
		if err != nil {
			return nil, err
		}
		return &DistinctExpr{Not: a.Kind == pg_query.A_Expr_Kind_AEXPR_NOT_DISTINCT, Left: left, Right: right, Pos: p}, nil
	case pg_query.A_Expr_Kind_AEXPR_NULLIF:
		right, err := c.expr(a.Rexpr)
		if err != nil {
			return nil, err
		}
		return &NullIfExpr{Left: left, Right: right, Pos: p}, nil
	case pg_query.A_Expr_Kind_AEXPR_IN:
		l := a.Rexpr.GetList()
		if l == nil {
			return nil, c.unsupported(a.Location, "IN")
		}
		items, err := c.list(l.Items)
		if err != nil {
			return nil, err
		}
		return &InList{Not: len(op) > 0 && op[len(op)-1] == "<>", Expr: left, List: items, Pos: p}, nil
	case pg_query.A_Expr_Kind_AEXPR_LIKE, pg_query.A_Expr_Kind_AEXPR_ILIKE, pg_query.A_Expr_Kind_AEXPR_SIMILAR:
		out := &LikeExpr{Expr: left, Pos: p}
		sym := op[len(op)-1]
		switch a.Kind {
		case pg_query.A_Expr_Kind_AEXPR_LIKE:
			out.Kind, out.Not = Like, sym == "!~~"
		case pg_query.A_Expr_Kind_AEXPR_ILIKE:
			out.Kind, out.Not = ILike, sym == "!~~*"
		default:
			out.Kind, out.Not = SimilarTo, sym == "!~"
		}
		// Postgres wraps the pattern in like_escape / similar_to_escape
		// when ESCAPE is written (always for SIMILAR TO); unwrap it.
		if fc := a.Rexpr.GetFuncCall(); fc != nil {
			name := strs(fc.Funcname)
			if len(name) == 2 && name[0] == "pg_catalog" && (out.Kind != SimilarTo && name[1] == "like_escape" && len(fc.Args) == 2 ||
				out.Kind == SimilarTo && name[1] == "similar_to_escape" && (len(fc.Args) == 1 || len(fc.Args) == 2)) {
				pat, err := c.expr(fc.Args[0])
				if err != nil {
					return nil, err
				}
				out.Pattern = pat
				if len(fc.Args) == 2 {
					if out.Escape, err = c.expr(fc.Args[1]); err != nil {
						return nil, err
					}
				}
				return out, nil
			}
		}
		if out.Pattern, err = c.expr(a.Rexpr); err != nil {
			return nil, err
		}
		return out, nil
	case pg_query.A_Expr_Kind_AEXPR_BETWEEN, pg_query.A_Expr_Kind_AEXPR_NOT_BETWEEN,
		pg_query.A_Expr_Kind_AEXPR_BETWEEN_SYM, pg_query.A_Expr_Kind_AEXPR_NOT_BETWEEN_SYM:
		l := a.Rexpr.GetList()
		if l == nil || len(l.Items) != 2 {
			return nil, c.unsupported(a.Location, "BETWEEN")
		}
		lo, err := c.expr(l.Items[0])
		if err != nil {
			return nil, err
		}
		hi, err := c.expr(l.Items[1])
		if err != nil {
			return nil, err
		}
		return &BetweenExpr{
			Not:       a.Kind == pg_query.A_Expr_Kind_AEXPR_NOT_BETWEEN || a.Kind == pg_query.A_Expr_Kind_AEXPR_NOT_BETWEEN_SYM,
			Symmetric: a.Kind == pg_query.A_Expr_Kind_AEXPR_BETWEEN_SYM || a.Kind == pg_query.A_Expr_Kind_AEXPR_NOT_BETWEEN_SYM,
			Expr:      left, Low: lo, High: hi, Pos: p,
		}, nil
	}
	return nil, c.unsupported(a.Location, strings.TrimPrefix(a.Kind.String(), "AEXPR_"))
}

func (c *conv) funcCall(f *pg_query.FuncCall) (Expr, *pgerr.Error) {
	p := c.pos(f.Location)
	name := strs(f.Funcname)
	disp := fmtDotted(name)
	if f.Over != nil {
		return nil, newErr(WindowFunctionNotAllowed, p, "window functions are not allowed in Trellis formulas: %s(…) OVER (…)", disp)
	}
	mod := ""
	switch {
	case f.AggDistinct:
		mod = "DISTINCT"
	case len(f.AggOrder) > 0 && f.AggWithinGroup:
		mod = "WITHIN GROUP"
	case len(f.AggOrder) > 0:
		mod = "ORDER BY"
	case f.AggFilter != nil:
		mod = "FILTER"
	}
	if mod != "" {
		return nil, newErr(AggregateModifierNotAllowed, p, "%s is not allowed in aggregate %s(…)", mod, disp).
			WithDetail("modifier: %s", mod)
	}
	out := &FuncCall{Name: name, Star: f.AggStar, Variadic: f.FuncVariadic,
		SQLSyntax: f.Funcformat == pg_query.CoercionForm_COERCE_SQL_SYNTAX, Pos: p}
	if out.SQLSyntax && !(len(name) == 2 && name[0] == "pg_catalog" && sqlSyntaxFuncs[name[1]]) {
		if name[len(name)-1] == "system_user" {
			return nil, newErr(NonImmutableConstruct, p, "SYSTEM_USER is not immutable; formulas may only use IMMUTABLE values")
		}
		return nil, c.unsupported(f.Location, strings.ToUpper(name[len(name)-1]))
	}
	switch cn := catalogName(name); {
	case knownSRFs[cn]:
		return nil, newErr(SetReturningFunctionNotAllowed, p, "%s returns a set; formulas must produce one value per row", disp).
			WithDetail("function: %s", cn)
	case knownAggregates[cn]:
		return nil, newErr(UnsupportedAggregate, p, "aggregate %s is not supported; allowed aggregates are SUM, AVG, MIN, MAX, COUNT, BOOL_AND, BOOL_OR, BIT_AND, BIT_OR and JSONB_AGG", disp).
			WithDetail("function: %s", cn)
	}
	agg := AggregateName(out)
	if agg != "" {
		n := len(f.Args)
		if agg == "count" && f.AggStar {
			n = 1
		} else if f.AggStar {
			n = -1
		}
		if n != 1 {
			found := strconv.Itoa(len(f.Args))
			if n < 0 {
				found = "*"
			}
			return nil, newErr(FunctionArityMismatch, p, "aggregate %s takes exactly one argument, found %s", strings.ToUpper(agg), found).
				WithDetail("expected: 1, found: %s", found)
		}
		if c.inAgg {
			return nil, newErr(AggregateOfAggregateField, p, "aggregate %s cannot be nested inside another aggregate", strings.ToUpper(agg)).
				WithHint("aggregate the source rows directly")
		}
		if c.oneToOne {
			return nil, aggregateWithoutGroupBy(p, strings.ToUpper(agg), f.AggStar)
		}
		c.inAgg = true
		defer func() { c.inAgg = false }()
	}
	args, err := c.list(f.Args)
	if err != nil {
		return nil, err
	}
	out.Args = args
	return out, nil
}

func fmtDotted(parts []string) string {
	q := make([]string, len(parts))
	for i, x := range parts {
		q[i] = quoteIdentIfNeeded(x)
	}
	return strings.Join(q, ".")
}

// nodeKindName names a pg_query node kind for messages ("XmlExpr").
func nodeKindName(n *pg_query.Node) string {
	s := strings.TrimPrefix(fmt.Sprintf("%T", n.Node), "*pg_query.Node_")
	switch {
	case strings.HasPrefix(s, "Xml"):
		return "XML"
	case strings.HasPrefix(s, "Json"):
		return "SQL/JSON"
	case s == "SetToDefault":
		return "DEFAULT"
	}
	return s
}

// nodeLocation digs out a location for an unsupported node, -1 if none.
func nodeLocation(n *pg_query.Node) int32 {
	switch x := n.Node.(type) {
	case *pg_query.Node_XmlExpr:
		return x.XmlExpr.Location
	case *pg_query.Node_XmlSerialize:
		return x.XmlSerialize.Location
	case *pg_query.Node_JsonObjectConstructor:
		return x.JsonObjectConstructor.Location
	case *pg_query.Node_JsonArrayConstructor:
		return x.JsonArrayConstructor.Location
	case *pg_query.Node_JsonIsPredicate:
		return x.JsonIsPredicate.Location
	case *pg_query.Node_SetToDefault:
		return x.SetToDefault.Location
	}
	return -1
}
