// Package ddl runs the Trellis statements (TRANSFORM, ALTER, PAUSE,
// RESUME, DROP TRANSFORM) inside the caller's transaction, as the caller:
// it resolves names against the live catalog, checks what the grammar
// cannot (joins.md §4, D8, D20), compiles the definition model and records
// it through the catalog functions. It also recompiles a stored statement
// the way it was compiled at define, for the workers' verification of
// untrusted catalog rows (D21). The workers themselves (capture, staging,
// drain, builds) live in the engine package above it; nothing here starts
// a goroutine or holds a pool.
package ddl

import (
	"github.com/trellis-proxy/trellis-proxy/engine/base"
)

// Querier runs SQL: the caller's transaction, connection or pool.
type Querier = base.Querier

// Config is what statements need of the engine's configuration.
type Config struct {
	Schema       string // catalog schema
	TargetSchema string // schema of targets written without one
}

// Executor runs Trellis statements for one engine instance.
type Executor struct {
	cfg        Config
	workerRole func() string // "" before the engine has read the instance marker
}

// New returns an executor. workerRole returns the instance's workers' role
// ("" before the engine has read it from the instance marker).
func New(cfg Config, workerRole func() string) *Executor {
	return &Executor{cfg: cfg, workerRole: workerRole}
}

// channel is the NOTIFY channel what of this instance.
func (e *Executor) channel(what string) string { return base.Channel(e.cfg.Schema, what) }
