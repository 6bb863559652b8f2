package grammar

import (
	"slices"

	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// AlterResult lists what an ALTER TRANSFORM really changed (grammar spec
// §4.6); all empty when every clause was a no-op.
type AlterResult struct {
	Added, Dropped, Altered []string
}

// Changed reports whether the alter changes the definition.
func (r AlterResult) Changed() bool {
	return len(r.Added)+len(r.Dropped)+len(r.Altered) > 0
}

// ApplyAlter applies the clauses of alt in order to a copy of the stored
// definition def (grammar spec §4.6) and returns the merged definition. It
// runs the pure preconditions: an aggregate target is UnsupportedAlter; the
// clause table (AlterFieldAlreadyExists, AlterFieldNotFound; "same formula"
// means equal canonical rendering); the 1-1 aggregate placement of the new
// formulas. The FROM and JOIN items are kept (joins spec §5 item 9); the
// engine then runs Resolve and its catalog checks on the merged definition.
//
// Fields kept from def lose their positions (they point into another text);
// added and altered formulas keep theirs, which point into alt's text.
func ApplyAlter(def *TransformStmt, alt *AlterTransformStmt) (*TransformStmt, AlterResult, error) {
	m, res, err := applyAlter(def, alt)
	if err != nil {
		return nil, AlterResult{}, err
	}
	return m, res, nil
}

func applyAlter(def *TransformStmt, alt *AlterTransformStmt) (*TransformStmt, AlterResult, *pgerr.Error) {
	var res AlterResult
	tname := quoteIdentIfNeeded(alt.Target.Name)
	if def.IsAggregate() {
		return nil, res, newErr(UnsupportedAlter, alt.Target.Pos, "ALTER TRANSFORM %s: the transform has GROUP BY; only 1-1 transforms can be altered", tname).
			WithDetail("transform: %s", alt.Target.Name).
			WithHint("drop and redefine the transform")
	}
	m := *def
	m.Fields = make([]Field, len(def.Fields))
	for i, f := range def.Fields {
		m.Fields[i] = Field{Name: f.Name, Expr: f.Expr}
	}
	index := func(name string) int {
		return slices.IndexFunc(m.Fields, func(f Field) bool { return f.Name == name })
	}
	declared := func() string {
		names := make([]string, len(m.Fields))
		for i, f := range m.Fields {
			names[i] = f.Name
		}
		return fmtList(names)
	}
	for _, c := range alt.Clauses {
		i := index(c.Field.Name)
		fname := quoteIdentIfNeeded(c.Field.Name)
		switch c.Action {
		case AlterAdd:
			if err := oneToOneAggregates(c.Expr); err != nil {
				return nil, res, err
			}
			if i >= 0 {
				if RenderExpr(m.Fields[i].Expr) == RenderExpr(c.Expr) {
					continue
				}
				return nil, res, newErr(AlterFieldAlreadyExists, c.Field.Pos, "ALTER TRANSFORM %s ADD %s: the field exists with another formula", tname, fname).
					WithDetail("existing: %s AS %s", RenderExpr(m.Fields[i].Expr), fname).
					WithHint("use ALTER %s AS <formula> to change it", fname)
			}
			m.Fields = append(m.Fields, Field{Name: c.Field.Name, NamePos: c.Field.Pos, Expr: c.Expr, Pos: c.ExprPos})
			res.Added = append(res.Added, c.Field.Name)
		case AlterAlter:
			if err := oneToOneAggregates(c.Expr); err != nil {
				return nil, res, err
			}
			if i < 0 {
				return nil, res, newErr(AlterFieldNotFound, c.Field.Pos, "ALTER TRANSFORM %s ALTER %s: no such field", tname, fname).
					WithDetail("declared fields: %s", declared())
			}
			if RenderExpr(m.Fields[i].Expr) == RenderExpr(c.Expr) {
				continue
			}
			m.Fields[i] = Field{Name: c.Field.Name, NamePos: c.Field.Pos, Expr: c.Expr, Pos: c.ExprPos}
			if !slices.Contains(res.Added, c.Field.Name) && !slices.Contains(res.Altered, c.Field.Name) {
				res.Altered = append(res.Altered, c.Field.Name)
			}
		case AlterDrop:
			if i < 0 {
				continue
			}
			m.Fields = slices.Delete(m.Fields, i, i+1)
			if j := slices.Index(res.Added, c.Field.Name); j >= 0 {
				res.Added = slices.Delete(res.Added, j, j+1)
			} else {
				res.Dropped = append(res.Dropped, c.Field.Name)
			}
			if j := slices.Index(res.Altered, c.Field.Name); j >= 0 {
				res.Altered = slices.Delete(res.Altered, j, j+1)
			}
		}
	}
	if len(m.Fields) == 0 {
		return nil, res, newErr(UnsupportedAlter, alt.Target.Pos, "ALTER TRANSFORM %s would leave no field", tname).
			WithHint("DROP TRANSFORM %s instead", tname)
	}
	return &m, res, nil
}
