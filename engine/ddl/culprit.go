package ddl

import (
	"context"
	"strings"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/model"
	"github.com/trellis-proxy/trellis-proxy/grammar"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// formulaTrees keeps the syntax trees buildSpec rendered the fields from,
// so that a D8 refusal can point at the call that is not immutable rather
// than at the start of its formula: Postgres's immutability error has no
// position. Never stored: a compiled definition has its SQL only.
type formulaTrees struct {
	roots  map[string]formulaNode // field name -> its formula (an aggregate's argument)
	render func(formulaNode) (string, error)
	// field is the formula of the field a column reference reads, if it
	// reads one (the reference is rendered as that formula).
	field func(formulaNode) (formulaNode, bool)
}

// formulaNode is one sub-expression with the field whose references it
// resolves through.
type formulaNode struct {
	rf *grammar.ResolvedField
	e  grammar.Expr
}

// maxCulpritProbes bounds the probes spent looking for the culprit (three
// round trips each, on the refusal path only); past it the caret stays on
// the smallest mutable sub-expression found so far.
const maxCulpritProbes = 64

// mutableCall finds, top-down, the innermost leftmost sub-expression of
// field's formula that Postgres does not accept as immutable while all its
// operands are, and returns its position; ok is false when the formula
// cannot be searched (no tree kept, or no sub-expression fails alone). It
// runs inside checkFormulas' savepoint, over its probe table.
func (e *Executor) mutableCall(ctx context.Context, q Querier, t *formulaTrees, field string) (pos grammar.Pos, ok bool, err error) {
	if t == nil {
		return 0, false, nil
	}
	node, found := t.roots[field]
	if !found {
		return 0, false, nil
	}
	probes := 0
	mutable := func(n formulaNode) (bool, error) {
		probes++
		sql, err := t.render(n)
		if err != nil {
			return false, nil
		}
		return probeMutable(ctx, q, sql)
	}
	// The root failed as a whole: walk down while some operand fails alone.
	for {
		next, descended := formulaNode{}, false
		for _, c := range operands(t, node) {
			if probes >= maxCulpritProbes {
				return node.e.Position(), node.e != t.roots[field].e, nil
			}
			bad, err := mutable(c)
			if err != nil {
				return 0, false, err
			}
			if bad {
				next, descended = c, true
				break
			}
		}
		if !descended {
			return node.e.Position(), true, nil
		}
		node = next
	}
}

// operands are the sub-expressions of n worth probing, in tree order:
// constants and source columns are immutable, a named argument stands for
// its value, and a reference to another field for that field's formula.
func operands(t *formulaTrees, n formulaNode) []formulaNode {
	var out []formulaNode
	var add func(x formulaNode)
	add = func(x formulaNode) {
		switch v := x.e.(type) {
		case *grammar.Const:
			return
		case *grammar.NamedArg:
			add(formulaNode{x.rf, v.Arg})
			return
		case *grammar.ColumnRef:
			if f, ok := t.field(x); ok {
				add(f)
			}
			return
		}
		out = append(out, x)
	}
	if _, ok := n.e.(*grammar.ColumnRef); ok {
		// A field that is only a reference to another: that one's formula.
		add(n)
		return out
	}
	for _, c := range grammar.Children(n.e) {
		add(formulaNode{n.rf, c})
	}
	return out
}

// probeMutable says whether Postgres refuses sql as not immutable. An index
// expression is checked for mutability before anything about its type (a
// generated column would need the type spelled out), so any other outcome
// means the expression itself is immutable.
func probeMutable(ctx context.Context, q Querier, sql string) (bool, error) {
	expr := strings.ReplaceAll(sql, base.Ident(model.SourceAlias)+".", "")
	if _, err := q.Exec(ctx, "SAVEPOINT trellis_formula_probe_one"); err != nil {
		return false, err
	}
	_, err := q.Exec(ctx, "CREATE INDEX ON pg_temp.trellis_formula_probe_t (("+expr+"))")
	if _, rbErr := q.Exec(ctx, "ROLLBACK TO SAVEPOINT trellis_formula_probe_one"); rbErr != nil {
		return false, rbErr
	}
	return pgerr.CodeOf(err) == pgerr.InvalidObjectDefinition, nil
}
