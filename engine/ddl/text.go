package ddl

import (
	"context"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/model"
	"github.com/trellis-proxy/trellis-proxy/grammar"
)

// ApplyText parses one Trellis statement (TRANSFORM, PAUSE, RESUME, DROP,
// ALTER TRANSFORM ...) and runs it with Apply on q. A pool or connection gets
// a transaction of its own; a pgx.Tx gets a savepoint, so the statement takes
// effect with the caller's COMMIT (D6).
func (e *Executor) ApplyText(ctx context.Context, q Querier, text string, opts ApplyOptions) (a *Applied, err error) {
	st, err := grammar.Parse(text)
	if err != nil {
		return nil, err
	}
	q, done, err := Atomically(ctx, q)
	if err != nil {
		return nil, err
	}
	defer func() { err = done(err) }()
	return e.Apply(ctx, q, st, opts)
}

// Pause is PAUSE TRANSFORM target (grammar §4.3), by bare target name.
func (e *Executor) Pause(ctx context.Context, q Querier, target model.TableName) error {
	_, err := e.ApplyText(ctx, q, "PAUSE TRANSFORM "+base.Ident(target.Name), ApplyOptions{})
	return err
}

// Resume is RESUME TRANSFORM target (grammar §4.4), by bare target name.
func (e *Executor) Resume(ctx context.Context, q Querier, target model.TableName) error {
	_, err := e.ApplyText(ctx, q, "RESUME TRANSFORM "+base.Ident(target.Name), ApplyOptions{})
	return err
}
