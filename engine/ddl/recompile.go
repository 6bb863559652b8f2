package ddl

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/engine/model"
	"github.com/trellis-proxy/trellis-proxy/grammar"
)

// Recompile compiles the stored statement stmt of a definition over the
// source srcOID the way Define compiles it, as the workers see the catalog.
func (e *Executor) Recompile(ctx context.Context, q Querier, stmt string, srcOID uint32) (*model.Compiled, error) {
	parsed, err := grammar.Parse(stmt)
	if err != nil {
		return nil, err
	}
	st, ok := parsed.(*grammar.TransformStmt)
	if !ok {
		return nil, errors.New("it is not a TRANSFORM statement")
	}
	if grammar.Canonical(st) != stmt {
		return nil, errors.New("it is not in the canonical form the engine stores")
	}
	src := &resolvedSource{types: map[string]string{}}
	var srcText string
	err = q.QueryRow(ctx, `SELECT n.nspname, c.relname, format('%I.%I', n.nspname, c.relname)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1`, srcOID).Scan(&src.Schema, &src.Table, &srcText)
	if err != nil {
		return nil, err
	}
	if len(st.Joins) > 0 {
		// The joined tables resolve by the names the canonical statement
		// qualifies; the FROM table must still be the one recorded.
		var same bool
		if err := q.QueryRow(ctx, `SELECT to_regclass($1) IS NOT DISTINCT FROM $2::oid`,
			pgx.Identifier{st.Source.Schema, st.Source.Name}.Sanitize(), srcOID).Scan(&same); err != nil {
			return nil, err
		}
		if !same {
			return nil, errors.New("its FROM table is not the table recorded as its source")
		}
		if src, err = e.checkJoinTarget(ctx, q, st); err != nil {
			return nil, err
		}
	} else if _, err := e.sourceByOID(ctx, q, srcOID, src); err != nil {
		return nil, err
	}
	spec, err := e.compileSpec(ctx, q, st, src)
	if err != nil {
		return nil, err
	}
	if err := spec.Check(e.cfg.TargetSchema); err != nil {
		return nil, err
	}
	c := &model.Compiled{Spec: *spec, SourceText: srcText}
	if err := checkSourceKeyTypes(ctx, q, srcOID, srcText); err != nil {
		return nil, err
	}
	if c.Key, c.KeyNullable, _, err = e.sourceKey(ctx, q, srcOID, srcText); err != nil {
		return nil, err
	}
	if _, err := e.resolveJoins(ctx, q, c); err != nil {
		return nil, err
	}
	if err := e.resolveTypes(ctx, q, c); err != nil {
		return nil, err
	}
	if err := q.QueryRow(ctx, "SELECT format('%I.%I', $1::text, $2::text)", spec.Target.Schema, spec.Target.Name).Scan(&c.TargetText); err != nil {
		return nil, err
	}
	return c, nil
}
