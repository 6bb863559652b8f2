package grammar

import (
	"fmt"
	"strconv"
	"strings"
)

// ColumnFunc renders one column reference as SQL. The engine uses it to bind
// references to `s."amount"`, a joined table or a ledger column; whatever it
// returns is pasted as is, so it must be a complete operand (a qualified
// column or a parenthesised expression).
type ColumnFunc func(ref *ColumnRef) (string, error)

// QuoteIdent always double-quotes a name, doubling embedded quotes.
func QuoteIdent(name string) string { return quoteIdent(name) }

func quoteIdent(name string) string {
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

// QuoteIdentIfNeeded quotes a name the way Postgres's quote_ident does: only
// when it is not a lower-case plain word or is a keyword other than an
// unreserved one.
func QuoteIdentIfNeeded(name string) string { return quoteIdentIfNeeded(name) }

func quoteIdentIfNeeded(name string) string {
	if name == "" {
		return `""`
	}
	safe := name[0] >= 'a' && name[0] <= 'z' || name[0] == '_'
	for i := 1; safe && i < len(name); i++ {
		c := name[i]
		safe = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_'
	}
	if safe && kwCategory[name] == 0 {
		return name
	}
	return quoteIdent(name)
}

// QuoteLiteral renders a string as a SQL literal that reads back as exactly
// s under standard_conforming_strings = on: '…' with quotes doubled, or
// E'…' with escapes when s holds control characters.
func QuoteLiteral(s string) string {
	plain := true
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			plain = false
			break
		}
	}
	if plain {
		return "'" + strings.ReplaceAll(s, "'", "''") + "'"
	}
	var b strings.Builder
	b.WriteString("E'")
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			b.WriteString(`\\`)
		case c == '\'':
			b.WriteString(`\'`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\t':
			b.WriteString(`\t`)
		case c == '\r':
			b.WriteString(`\r`)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// Render renders e as SQL from the tree: every column reference through col
// (nil: each part double-quoted), identifiers quoted where needed, literals
// escaped. The result parses back to the same tree.
func Render(e Expr, col ColumnFunc) (string, error) {
	r := &renderer{col: col}
	r.expr(e)
	if r.err != nil {
		return "", r.err
	}
	return r.b.String(), nil
}

// RenderExpr renders e with every column reference's parts double-quoted.
func RenderExpr(e Expr) string {
	s, _ := Render(e, nil)
	return s
}

type renderer struct {
	b   strings.Builder
	col ColumnFunc
	err error
}

func (r *renderer) w(s string) { r.b.WriteString(s) }

// atomic reports whether e needs no parentheses as an operand.
func atomic(e Expr) bool {
	switch x := e.(type) {
	case *ColumnRef, *FuncCall, *CoalesceExpr, *MinMaxExpr, *NullIfExpr, *CaseExpr, *ArrayExpr, *RowExpr:
		return true
	case *Const:
		return !strings.HasPrefix(x.Value, "-")
	case *TypeCast:
		return x.Syntax == CastCall
	case *SubscriptExpr:
		return true
	}
	return false
}

func (r *renderer) child(e Expr) {
	if atomic(e) {
		r.expr(e)
		return
	}
	r.w("(")
	r.expr(e)
	r.w(")")
}

func (r *renderer) list(es []Expr) {
	for i, e := range es {
		if i > 0 {
			r.w(", ")
		}
		r.expr(e)
	}
}

func (r *renderer) op(op []string) {
	if len(op) == 1 {
		r.w(op[0])
		return
	}
	r.w("OPERATOR(")
	for _, s := range op[:len(op)-1] {
		r.w(quoteIdentIfNeeded(s))
		r.w(".")
	}
	r.w(op[len(op)-1])
	r.w(")")
}

func (r *renderer) expr(e Expr) {
	switch x := e.(type) {
	case *ColumnRef:
		if r.col != nil {
			s, err := r.col(x)
			if err != nil && r.err == nil {
				r.err = err
			}
			r.w(s)
			return
		}
		for i, p := range x.Parts {
			if i > 0 {
				r.w(".")
			}
			r.w(quoteIdent(p))
		}
	case *Const:
		r.constant(x)
	case *TypeCast:
		r.typeCast(x)
	case *OpExpr:
		if x.Left != nil {
			if l, ok := x.Left.(*OpExpr); ok && l.Left != nil && sameLeftAssocLevel(l.Op, x.Op) {
				r.expr(l) // a + b + c parses as (a + b) + c: no parentheses needed
			} else {
				r.child(x.Left)
			}
			r.w(" ")
			r.op(x.Op)
			r.w(" ")
		} else {
			r.op(x.Op)
		}
		r.child(x.Right)
	case *QuantifiedOp:
		r.child(x.Left)
		r.w(" ")
		r.op(x.Op)
		if x.All {
			r.w(" ALL (")
		} else {
			r.w(" ANY (")
		}
		r.expr(x.Right)
		r.w(")")
	case *DistinctExpr:
		r.child(x.Left)
		if x.Not {
			r.w(" IS NOT DISTINCT FROM ")
		} else {
			r.w(" IS DISTINCT FROM ")
		}
		r.child(x.Right)
	case *NullIfExpr:
		r.w("NULLIF(")
		r.expr(x.Left)
		r.w(", ")
		r.expr(x.Right)
		r.w(")")
	case *InList:
		r.child(x.Expr)
		if x.Not {
			r.w(" NOT")
		}
		r.w(" IN (")
		r.list(x.List)
		r.w(")")
	case *LikeExpr:
		r.child(x.Expr)
		if x.Not {
			r.w(" NOT")
		}
		r.w(" " + string(x.Kind) + " ")
		r.child(x.Pattern)
		if x.Escape != nil {
			r.w(" ESCAPE ")
			r.child(x.Escape)
		}
	case *BetweenExpr:
		r.child(x.Expr)
		if x.Not {
			r.w(" NOT")
		}
		r.w(" BETWEEN ")
		if x.Symmetric {
			r.w("SYMMETRIC ")
		}
		r.child(x.Low)
		r.w(" AND ")
		r.child(x.High)
	case *BoolExpr:
		if x.Op == Not {
			r.w("NOT ")
			r.child(x.Args[0])
			return
		}
		for i, a := range x.Args {
			if i > 0 {
				r.w(" " + string(x.Op) + " ")
			}
			r.child(a)
		}
	case *NullTest:
		r.child(x.Arg)
		if x.Not {
			r.w(" IS NOT NULL")
		} else {
			r.w(" IS NULL")
		}
	case *BoolTest:
		r.child(x.Arg)
		r.w(" " + string(x.Test))
	case *FuncCall:
		r.funcCall(x)
	case *NamedArg:
		r.w(quoteIdentIfNeeded(x.Name))
		r.w(" => ")
		r.expr(x.Arg)
	case *CaseExpr:
		r.w("CASE")
		if x.Arg != nil {
			r.w(" ")
			r.expr(x.Arg)
		}
		for _, wh := range x.Whens {
			r.w(" WHEN ")
			r.expr(wh.Cond)
			r.w(" THEN ")
			r.expr(wh.Result)
		}
		if x.Else != nil {
			r.w(" ELSE ")
			r.expr(x.Else)
		}
		r.w(" END")
	case *CoalesceExpr:
		r.w("COALESCE(")
		r.list(x.Args)
		r.w(")")
	case *MinMaxExpr:
		if x.Greatest {
			r.w("GREATEST(")
		} else {
			r.w("LEAST(")
		}
		r.list(x.Args)
		r.w(")")
	case *CollateExpr:
		r.child(x.Arg)
		r.w(" COLLATE ")
		for i, p := range x.Collation {
			if i > 0 {
				r.w(".")
			}
			r.w(quoteIdent(p))
		}
	case *ArrayExpr:
		r.w("ARRAY[")
		r.list(x.Elems)
		r.w("]")
	case *RowExpr:
		if x.Explicit || len(x.Args) < 2 {
			r.w("ROW(")
		} else {
			r.w("(")
		}
		r.list(x.Args)
		r.w(")")
	case *SubscriptExpr:
		r.w("(")
		r.expr(x.Arg)
		r.w(")")
		for _, ix := range x.Indices {
			r.w("[")
			if ix.Slice {
				if ix.Lower != nil {
					r.expr(ix.Lower)
				}
				r.w(":")
			}
			if ix.Upper != nil {
				r.expr(ix.Upper)
			}
			r.w("]")
		}
	default:
		if r.err == nil {
			r.err = fmt.Errorf("grammar: cannot render %T", e)
		}
	}
}

func (r *renderer) constant(c *Const) {
	switch c.Kind {
	case ConstNull:
		r.w("NULL")
	case ConstBool:
		if c.Value == "true" {
			r.w("TRUE")
		} else {
			r.w("FALSE")
		}
	case ConstString:
		r.w(QuoteLiteral(c.Value))
	case ConstBits:
		if strings.HasPrefix(c.Value, "x") {
			r.w("X'" + c.Value[1:] + "'")
		} else {
			r.w("B'" + strings.TrimPrefix(c.Value, "b") + "'")
		}
	default:
		r.w(c.Value)
	}
}

func (r *renderer) typeCast(x *TypeCast) {
	switch x.Syntax {
	case CastCall:
		r.w("CAST(")
		r.expr(x.Arg)
		r.w(" AS ")
		r.typeName(x.Type, false)
		r.w(")")
		return
	case CastLiteral:
		if k, ok := x.Arg.(*Const); ok && k.Kind == ConstString && len(x.Type.ArrayBounds) == 0 {
			r.typeName(x.Type, true)
			r.w(" ")
			r.constant(k)
			return
		}
	}
	r.child(x.Arg)
	r.w("::")
	r.typeName(x.Type, false)
}

// intMods returns the typmods as integers when they all are integer
// literals.
func intMods(mods []Expr) ([]string, bool) {
	out := make([]string, 0, len(mods))
	for _, m := range mods {
		c, ok := m.(*Const)
		if !ok || c.Kind != ConstInteger {
			return nil, false
		}
		out = append(out, c.Value)
	}
	return out, true
}

// sqlTypeName returns the SQL-standard spelling that Postgres's grammar maps
// back to exactly pg_catalog.<name> with these typmods, or "".
func sqlTypeName(name string, mods []Expr) string {
	im, ints := intMods(mods)
	paren := ""
	if len(im) == 1 {
		paren = "(" + im[0] + ")"
	}
	switch name {
	case "int2", "int4", "int8", "float4", "float8", "bool", "json":
		if len(mods) > 0 {
			return ""
		}
		return map[string]string{"int2": "smallint", "int4": "integer", "int8": "bigint", "float4": "real",
			"float8": "double precision", "bool": "boolean", "json": "json"}[name]
	case "numeric":
		return "numeric"
	case "varchar":
		if len(mods) == 0 {
			return "varchar"
		}
		if ints && len(im) == 1 {
			return "varchar" + paren
		}
	case "bpchar", "bit":
		if ints && len(im) == 1 {
			return map[string]string{"bpchar": "char", "bit": "bit"}[name] + paren
		}
	case "varbit":
		if len(mods) == 0 || ints && len(im) == 1 {
			return "bit varying" + paren
		}
	case "timestamp", "time":
		if len(mods) == 0 || ints && len(im) == 1 {
			return name + paren
		}
	case "timestamptz", "timetz":
		if len(mods) == 0 || ints && len(im) == 1 {
			return strings.TrimSuffix(strings.TrimSuffix(name, "tz"), "") + paren + " with time zone"
		}
	case "interval":
		if len(mods) == 0 {
			return "interval"
		}
	}
	return ""
}

func (r *renderer) typeName(t TypeName, prefixForm bool) {
	done := false
	if len(t.Names) == 2 && t.Names[0] == "pg_catalog" {
		if s := sqlTypeName(t.Names[1], t.Typmods); s != "" {
			r.w(s)
			done = true
			if t.Names[1] == "numeric" && len(t.Typmods) > 0 {
				r.w("(")
				r.list(t.Typmods)
				r.w(")")
			}
		}
	}
	if !done {
		for i, n := range t.Names {
			if i > 0 {
				r.w(".")
			}
			r.w(quoteIdentIfNeeded(n))
		}
		if len(t.Typmods) > 0 {
			r.w("(")
			r.list(t.Typmods)
			r.w(")")
		}
	}
	for _, b := range t.ArrayBounds {
		if b < 0 {
			r.w("[]")
		} else {
			r.w("[" + strconv.Itoa(int(b)) + "]")
		}
	}
}

func (r *renderer) funcName(name []string) {
	for i, n := range name {
		if i > 0 {
			r.w(".")
		}
		r.w(quoteIdentIfNeeded(n))
	}
}

// sqlSyntaxFuncs are the pg_catalog functions Postgres's grammar produces
// from special syntax that we render back in that syntax.
var sqlSyntaxFuncs = map[string]bool{
	"extract": true, "position": true, "substring": true, "overlay": true,
	"btrim": true, "ltrim": true, "rtrim": true, "timezone": true, "pg_collation_for": true,
	"normalize": true, "is_normalized": true,
}

func (r *renderer) funcCall(x *FuncCall) {
	if x.SQLSyntax && len(x.Name) == 2 && x.Name[0] == "pg_catalog" && r.sqlSyntax(x) {
		return
	}
	r.funcName(x.Name)
	r.w("(")
	if x.Star {
		r.w("*")
	}
	for i, a := range x.Args {
		if i > 0 {
			r.w(", ")
		}
		if x.Variadic && i == len(x.Args)-1 {
			r.w("VARIADIC ")
		}
		r.expr(a)
	}
	r.w(")")
}

// sqlSyntax writes the special-syntax form of x and reports whether it could.
func (r *renderer) sqlSyntax(x *FuncCall) bool {
	a := x.Args
	n := len(a)
	switch x.Name[1] {
	case "extract":
		if n != 2 {
			return false
		}
		r.w("EXTRACT(")
		r.expr(a[0])
		r.w(" FROM ")
		r.expr(a[1])
		r.w(")")
	case "position":
		if n != 2 {
			return false
		}
		// POSITION(sub IN s) calls position(s, sub); operands are b_expr.
		r.w("POSITION(")
		r.child(a[1])
		r.w(" IN ")
		r.child(a[0])
		r.w(")")
	case "substring":
		if n != 2 && n != 3 {
			return false
		}
		r.w("SUBSTRING(")
		r.expr(a[0])
		r.w(" FROM ")
		r.expr(a[1])
		if n == 3 {
			r.w(" FOR ")
			r.expr(a[2])
		}
		r.w(")")
	case "overlay":
		if n != 3 && n != 4 {
			return false
		}
		r.w("OVERLAY(")
		r.expr(a[0])
		r.w(" PLACING ")
		r.expr(a[1])
		r.w(" FROM ")
		r.expr(a[2])
		if n == 4 {
			r.w(" FOR ")
			r.expr(a[3])
		}
		r.w(")")
	case "btrim", "ltrim", "rtrim":
		if n != 1 && n != 2 {
			return false
		}
		r.w("TRIM(" + map[string]string{"btrim": "BOTH", "ltrim": "LEADING", "rtrim": "TRAILING"}[x.Name[1]] + " ")
		if n == 2 {
			r.expr(a[1])
			r.w(" ")
		}
		r.w("FROM ")
		r.expr(a[0])
		r.w(")")
	case "timezone":
		switch n {
		case 2:
			r.child(a[1])
			r.w(" AT TIME ZONE ")
			r.child(a[0])
		case 1:
			r.child(a[0])
			r.w(" AT LOCAL")
		default:
			return false
		}
	case "normalize", "is_normalized":
		form := ""
		if n == 2 {
			c, ok := a[1].(*Const)
			if !ok || c.Kind != ConstString || !(c.Value == "NFC" || c.Value == "NFD" || c.Value == "NFKC" || c.Value == "NFKD") {
				return false
			}
			form = c.Value
		} else if n != 1 {
			return false
		}
		if x.Name[1] == "normalize" {
			r.w("NORMALIZE(")
			r.expr(a[0])
			if form != "" {
				r.w(", " + form)
			}
			r.w(")")
		} else {
			r.child(a[0])
			r.w(" IS ")
			if form != "" {
				r.w(form + " ")
			}
			r.w("NORMALIZED")
		}
	case "pg_collation_for":
		if n != 1 {
			return false
		}
		r.w("COLLATION FOR (")
		r.expr(a[0])
		r.w(")")
	default:
		return false
	}
	return true
}

// opLevel groups binary operators of one left-associative precedence level
// in Postgres's grammar: + -, * / %, ^, and every other (generic) operator.
// Comparisons are non-associative and OPERATOR(…) has its own level: 0.
func opLevel(op []string) int {
	if len(op) != 1 {
		return 0
	}
	switch op[0] {
	case "+", "-":
		return 1
	case "*", "/", "%":
		return 2
	case "^":
		return 3
	case "<", ">", "=", "<=", ">=", "<>", "!=":
		return 0
	}
	return 4
}

func sameLeftAssocLevel(left, parent []string) bool {
	l := opLevel(left)
	return l != 0 && l == opLevel(parent)
}
