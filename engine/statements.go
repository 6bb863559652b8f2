package engine

import (
	"context"

	"github.com/trellis-proxy/trellis-proxy/engine/ddl"
	"github.com/trellis-proxy/trellis-proxy/grammar"
)

// The Trellis statements run in engine/ddl; these are the engine's entry
// points to them, unchanged for the proxy and the surface.
type (
	Applied      = ddl.Applied
	ApplyOptions = ddl.ApplyOptions
	Defined      = ddl.Defined
)

// Apply runs one parsed Trellis statement on q, inside the caller's
// transaction and as the caller (ddl.Executor.Apply).
func (e *Engine) Apply(ctx context.Context, q Querier, st grammar.Statement, opts ApplyOptions) (*Applied, error) {
	return e.w.DDL.Apply(ctx, q, st, opts)
}

// ApplyText parses one Trellis statement and runs it: a pool or connection
// gets a transaction of its own, a pgx.Tx a savepoint (D6).
func (e *Engine) ApplyText(ctx context.Context, q Querier, text string, opts ApplyOptions) (*Applied, error) {
	return e.w.DDL.ApplyText(ctx, q, text, opts)
}

// Define records a definition given as a Spec (tests and tools; statements
// go through Apply).
func (e *Engine) Define(ctx context.Context, q Querier, spec Spec) (*Defined, error) {
	return e.w.DDL.Define(ctx, q, spec)
}

// Drop removes the definition of target and its target table.
func (e *Engine) Drop(ctx context.Context, q Querier, target TableName) error {
	return e.w.DDL.Drop(ctx, q, target)
}

// Pause is PAUSE TRANSFORM target, by bare target name.
func (e *Engine) Pause(ctx context.Context, q Querier, target TableName) error {
	return e.w.DDL.Pause(ctx, q, target)
}

// Resume is RESUME TRANSFORM target, by bare target name.
func (e *Engine) Resume(ctx context.Context, q Querier, target TableName) error {
	return e.w.DDL.Resume(ctx, q, target)
}
