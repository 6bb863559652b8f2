package engine

import (
	"context"

	"github.com/trellis-proxy/trellis-proxy/engine/catalog"
)

// Migrate creates or upgrades the instance's catalog schema as the role of
// the engine's pool (catalog.Migrate): idempotent, and safe to run from
// several processes at once.
func (e *Engine) Migrate(ctx context.Context) error {
	return catalog.Migrate(ctx, e.w.Pool, e.w.Cfg.Schema, e.w.Cfg.TargetSchema)
}

// IsCatalog reports whether schema holds a Trellis catalog (its instance
// marker), as the role of q can see it.
func IsCatalog(ctx context.Context, q Querier, schema string) (bool, error) {
	return catalog.IsCatalog(ctx, q, schema)
}

// LockCatalog takes the catalog's mutex in q's transaction, the lock
// Migrate serializes on: for work on the catalog schema that must not run
// beside a migration or beside itself in another process (the SQL
// surface's install). Only the catalog's owner can take it.
func LockCatalog(ctx context.Context, q Querier, schema string) error {
	return catalog.LockCatalog(ctx, q, schema)
}

// FormatVersion is the catalog format this build writes and expects. The
// proxy's /readyz compares it with the catalog's (surface §16), so a fleet
// member older than its catalog turns unready instead of misreading it.
func FormatVersion() int { return catalog.FormatVersion }
