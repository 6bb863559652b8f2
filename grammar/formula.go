package grammar

import (
	"errors"
	"strings"
	"unicode/utf8"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	pgparser "github.com/pganalyze/pg_query_go/v6/parser"

	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// MaxExprDepth bounds the nesting of a formula, estimated from its tokens
// before pg_query sees it: pg_query's C parser overflows its stack (and
// crashes the process) somewhere above ten thousand levels, and Go's
// protobuf decoder refuses deeper trees. Postgres itself answers such
// statements with 54001.
const MaxExprDepth = 1000

// checkDepth estimates the tree depth of the tokens in [a, b): every
// parenthesis, bracket and CASE opens a level, and every operator-like token
// may add one to the current level (commas and CASE branches reset it; AND
// and OR chains are flattened by Postgres and cost nothing).
func (p *parser) checkDepth(a, b int) *pgerr.Error {
	type frame struct{ base, ops int }
	stack := []frame{{}}
	for i := a; i < b; i++ {
		t := p.toks[i]
		top := &stack[len(stack)-1]
		switch t.kind {
		case tLParen, tLBrack:
			stack = append(stack, frame{base: top.base + top.ops + 1})
		case tRParen, tRBrack:
			if len(stack) > 1 {
				stack = stack[:len(stack)-1]
			}
		case tComma:
			top.ops = 0
		case tOp, tCast:
			top.ops++
		case tIdent:
			switch t.val {
			case "case":
				stack = append(stack, frame{base: top.base + top.ops + 1})
			case "end":
				if len(stack) > 1 {
					stack = stack[:len(stack)-1]
				}
			case "when", "then", "else":
				top.ops = 0
			case "not", "is", "isnull", "notnull", "like", "ilike", "similar", "between", "in",
				"collate", "at", "operator", "overlaps", "any", "all", "some", "array", "row":
				top.ops++
			}
		}
		top = &stack[len(stack)-1]
		if top.base+top.ops > MaxExprDepth {
			return newErr(ExpressionTooComplex, p.at(t), "formula is nested too deeply (more than %d levels)", MaxExprDepth).
				WithHint("split the formula into several fields that read each other")
		}
	}
	return nil
}

// runPgQuery parses the client's text with everything outside [start, end)
// blanked byte for byte (so pg_query's byte locations are offsets in the
// client's text), "SELECT" written at offset 0 when prefix is set.
func (p *parser) runPgQuery(start, end int, prefix bool) (*pg_query.SelectStmt, *pgerr.Error) {
	a, b := p.tokensIn(start, end)
	if err := p.checkDepth(a, b); err != nil {
		return nil, err
	}
	buf := make([]byte, len(p.text))
	for i := range buf {
		buf[i] = ' '
	}
	copy(buf[start:end], p.text[start:end])
	if prefix {
		copy(buf, "SELECT")
	}
	masked := string(buf)
	res, err := pg_query.Parse(masked)
	if err != nil {
		return nil, p.pgQueryError(err, masked, start, end)
	}
	if len(res.Stmts) != 1 {
		return nil, newErr(UnexpectedToken, p.pm.at(start), "syntax error: expected one list of formulas")
	}
	sel := res.Stmts[0].GetStmt().GetSelectStmt()
	if sel == nil {
		return nil, newErr(UnexpectedToken, p.pm.at(start), "syntax error: expected a list of formulas")
	}
	return sel, nil
}

// pgQueryError maps a pg_query error to UnexpectedToken/UnexpectedEof with
// the position moved back to the client's text.
func (p *parser) pgQueryError(err error, masked string, start, end int) *pgerr.Error {
	var pe *pgparser.Error
	if !errors.As(err, &pe) {
		// Protobuf decoding of a tree too deep for Go: same as the bound.
		return newErr(ExpressionTooComplex, p.pm.at(start), "formula is too complex: %v", err)
	}
	pos := p.pm.at(start)
	if pe.Cursorpos > 0 {
		// Cursorpos counts characters of the masked text.
		b, n := 0, 1
		for b < len(masked) && n < pe.Cursorpos {
			_, sz := utf8.DecodeRuneInString(masked[b:])
			b += sz
			n++
		}
		if b > end {
			b = end
		}
		if b < start {
			b = start
		}
		pos = p.pm.at(b)
	}
	msg := pe.Message
	if strings.Contains(msg, "memory exhausted") || strings.Contains(msg, "stack depth") {
		return newErr(ExpressionTooComplex, pos, "formula is nested too deeply: %s", msg)
	}
	if strings.Contains(msg, "end of input") {
		return newErr(UnexpectedEOF, pos, "%s", msg)
	}
	return newErr(UnexpectedToken, pos, "%s", msg)
}

// clausePos finds the first depth-0 keyword w in tokens [a, b) that does not
// follow the keyword notAfter; the fallback is fallback.
func (p *parser) clausePos(a, b int, w, notAfter string, fallback Pos) Pos {
	depth := 0
	for i := a; i < b; i++ {
		t := p.toks[i]
		switch t.kind {
		case tLParen, tLBrack:
			depth++
		case tRParen, tRBrack:
			depth--
		case tIdent:
			if depth == 0 && t.val == w && !(notAfter != "" && i > 0 && isWord(p.toks[i-1], notAfter)) {
				return p.at(t)
			}
		}
	}
	return fallback
}

// checkClauses refuses every SELECT clause but the target list and, when
// allowed, WHERE TRUE (grammar spec §3).
func (p *parser) checkClauses(sel *pg_query.SelectStmt, start, end int, allowWhereTrue bool) *pgerr.Error {
	a, b := p.tokensIn(start, end)
	at := p.pm.at(start)
	unsupported := func(construct, kw, notAfter string) *pgerr.Error {
		return newErr(UnsupportedConstruct, p.clausePos(a, b, kw, notAfter, at), "%s is not supported in a Trellis formula list", construct).
			WithDetail("construct: %s", construct)
	}
	switch {
	case sel.Op != pg_query.SetOperation_SETOP_NONE:
		kw := strings.ToLower(strings.TrimPrefix(sel.Op.String(), "SETOP_"))
		return unsupported(strings.ToUpper(kw), kw, "")
	case sel.WithClause != nil:
		return unsupported("WITH", "with", "")
	case len(sel.DistinctClause) > 0:
		return unsupported("DISTINCT", "distinct", "is")
	case sel.IntoClause != nil:
		return unsupported("INTO", "into", "")
	case len(sel.FromClause) > 0:
		return unsupported("FROM", "from", "distinct")
	}
	if sel.WhereClause != nil {
		wpos := p.clausePos(a, b, "where", "", at)
		c := sel.WhereClause.GetAConst()
		isTrue := c != nil && !c.Isnull && c.GetBoolval() != nil && c.GetBoolval().Boolval
		if !allowWhereTrue {
			return newErr(UnsupportedConstruct, wpos, "WHERE is not supported here").WithDetail("construct: WHERE")
		}
		if !isTrue {
			return newErr(UnsupportedPredicate, wpos, "WHERE other than TRUE is not supported: a transform derives a row from every source row").
				WithDetail("partial-data predicates are not supported").
				WithHint("compute a flag field instead, e.g. CASE WHEN … THEN … END AS flag")
		}
	}
	switch {
	case len(sel.GroupClause) > 0 || sel.GroupDistinct:
		return newErr(UnsupportedKeySpace, p.clausePos(a, b, "group", "within", at), "GROUP BY goes between FROM and SELECT").
			WithDetail("construct: GROUP BY").
			WithHint("write TRANSFORM t FROM s GROUP BY k SELECT …")
	case sel.HavingClause != nil:
		return unsupported("HAVING", "having", "")
	case len(sel.WindowClause) > 0:
		return unsupported("WINDOW", "window", "")
	case len(sel.SortClause) > 0:
		return unsupported("ORDER BY", "order", "")
	case sel.LimitCount != nil || sel.LimitOption == pg_query.LimitOption_LIMIT_OPTION_WITH_TIES:
		if pos := p.clausePos(a, b, "limit", "", 0); pos > 0 {
			return newErr(UnsupportedConstruct, pos, "LIMIT is not supported in a Trellis formula list").WithDetail("construct: LIMIT")
		}
		return unsupported("FETCH", "fetch", "")
	case sel.LimitOffset != nil:
		return unsupported("OFFSET", "offset", "")
	case len(sel.LockingClause) > 0:
		return unsupported("FOR UPDATE", "for", "")
	case len(sel.ValuesLists) > 0:
		return unsupported("VALUES", "values", "")
	}
	return nil
}

// selectList parses a formula list: for TRANSFORM the text from SELECT to
// the end of the statement; for ALTER … ADD one `formula AS label` (the
// SELECT is supplied). Returns the fields after the shape checks.
func (p *parser) selectList(start, end int, transform, oneToOne bool) ([]Field, *pgerr.Error) {
	sel, err := p.runPgQuery(start, end, !transform)
	if err != nil {
		return nil, err
	}
	if err := p.checkClauses(sel, start, end, transform); err != nil {
		return nil, err
	}
	a, b := p.tokensIn(start, end)
	if transform {
		a++ // the SELECT keyword
	}
	// Items: split at depth-0 commas, up to a depth-0 WHERE.
	type span struct{ a, b int }
	var items []span
	depth, from := 0, a
	stop := b
	for i := a; i < b; i++ {
		t := p.toks[i]
		switch t.kind {
		case tLParen, tLBrack:
			depth++
		case tRParen, tRBrack:
			depth--
		case tComma:
			if depth == 0 {
				items = append(items, span{from, i})
				from = i + 1
			}
		case tIdent:
			if depth == 0 && t.val == "where" {
				stop = i
			}
		}
		if stop != b {
			break
		}
	}
	items = append(items, span{from, stop})
	if len(sel.TargetList) == 0 {
		return nil, p.unexpected(p.toks[a], "a formula AS label")
	}
	checkAS := len(items) == len(sel.TargetList)
	var fields []Field
	for k, n := range sel.TargetList {
		rt := n.GetResTarget()
		if rt == nil {
			return nil, newErr(UnsupportedConstruct, p.pm.at(start), "unsupported select list item")
		}
		if cr := rt.Val.GetColumnRef(); cr != nil {
			for _, f := range cr.Fields {
				if f.GetAStar() != nil {
					return nil, newErr(UnsupportedConstruct, p.pm.at(int(cr.Location)), "* is not supported in a Trellis formula list: name every field").
						WithDetail("construct: *").
						WithHint("list the columns, each with AS label")
				}
			}
		}
		if len(rt.Indirection) > 0 {
			return nil, newErr(UnsupportedConstruct, p.pm.at(int(rt.Location)), "indirection on a select list item is not supported")
		}
		if checkAS {
			it := items[k]
			asAt := -1
			d := 0
			for i := it.a; i < it.b; i++ {
				switch p.toks[i].kind {
				case tLParen, tLBrack:
					d++
				case tRParen, tRBrack:
					d--
				case tIdent:
					// "x.as" is a column named as, not an alias.
					if d == 0 && p.toks[i].val == "as" && !(i > it.a && p.toks[i-1].kind == tDot) {
						asAt = i
					}
				}
			}
			if asAt < 0 {
				if rt.Name != "" && it.b > it.a {
					return nil, newErr(UnexpectedToken, p.at(p.toks[it.b-1]), "syntax error at or near %q: expected AS before the field name", p.tokText(p.toks[it.b-1])).
						WithHint("write formula AS %s", quoteIdentIfNeeded(rt.Name))
				}
				return nil, p.unexpected(p.toks[it.b], "AS and a field name after the formula")
			}
		}
		if rt.Name == "" {
			return nil, newErr(UnexpectedToken, p.pm.at(int(rt.Location)), "syntax error: expected AS and a field name after the formula")
		}
		f := Field{Name: rt.Name, Pos: p.pm.at(int(rt.Location))}
		if checkAS {
			// The label is the token after the depth-0 AS.
			for i := items[k].b - 1; i > items[k].a; i-- {
				if isWord(p.toks[i-1], "as") {
					f.NamePos = p.at(p.toks[i])
					break
				}
			}
		}
		fields = append(fields, f)
		_ = rt
	}
	c := &conv{p: p, oneToOne: oneToOne}
	for k, n := range sel.TargetList {
		rt := n.GetResTarget()
		c.fieldPos = fields[k].Pos
		e, err := c.expr(rt.Val)
		if err != nil {
			return nil, err
		}
		fields[k].Expr = e
	}
	return fields, nil
}

// bareFormula parses the formula of ALTER name AS formula.
func (p *parser) bareFormula(start, end int) (Expr, Pos, *pgerr.Error) {
	sel, err := p.runPgQuery(start, end, true)
	if err != nil {
		return nil, 0, err
	}
	if err := p.checkClauses(sel, start, end, false); err != nil {
		return nil, 0, err
	}
	if len(sel.TargetList) != 1 {
		a, _ := p.tokensIn(start, end)
		return nil, 0, p.unexpected(p.toks[a], "one formula")
	}
	rt := sel.TargetList[0].GetResTarget()
	if rt.Name != "" {
		a, b := p.tokensIn(start, end)
		t := p.toks[b-1]
		for i := a; i < b; i++ {
			if isWord(p.toks[i], "as") {
				t = p.toks[i]
			}
		}
		return nil, 0, p.unexpected(t, "\",\" or end of statement (ALTER field AS formula takes no label)")
	}
	if cr := rt.Val.GetColumnRef(); cr != nil {
		for _, f := range cr.Fields {
			if f.GetAStar() != nil {
				return nil, 0, newErr(UnsupportedConstruct, p.pm.at(int(cr.Location)), "* is not supported in a formula").WithDetail("construct: *")
			}
		}
	}
	c := &conv{p: p, fieldPos: p.pm.at(int(rt.Location))}
	e, err := c.expr(rt.Val)
	if err != nil {
		return nil, 0, err
	}
	return e, c.fieldPos, nil
}
