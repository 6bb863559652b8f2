package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/catalog"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// What code outside the engine may know of the catalog (issue 15, enforced
// by internal/depcheck): the read views (catalog/reads), the catalog
// functions, and the functions of this file. None of them names a storage
// table to its caller.

var readViewName = regexp.MustCompile(`CREATE OR REPLACE VIEW \{\{S\}\}\.(_read_[a-z_]+)`)

// readViews lists the read views the reads script creates, in its order.
func readViews() []string {
	var out []string
	for _, m := range readViewName.FindAllStringSubmatch(catalog.Reads(), -1) {
		out = append(out, m[1])
	}
	return out
}

// installReads (re)creates the read views in tx (Migrate's) when the
// script changed or one of them is missing: each carries the script's hash
// as its comment. Replacing a view takes an ACCESS EXCLUSIVE lock behind
// every running reader of the surface, so an unchanged script is left
// alone, as Install leaves an unchanged surface.
func (e *Engine) installReads(ctx context.Context, tx pgx.Tx) error {
	script := e.renderCatalogSQL(catalog.Reads())
	sum := sha256.Sum256([]byte(script))
	tag := "trellis read view " + hex.EncodeToString(sum[:])
	views := readViews()
	var current int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_class c
		WHERE c.relnamespace = (SELECT n.oid FROM pg_namespace n WHERE n.nspname = $1) AND c.relkind = 'v' AND c.relname = ANY ($2)
		  AND obj_description(c.oid, 'pg_class') = $3`, e.cfg.Schema, views, tag).Scan(&current); err != nil {
		return err
	}
	if current == len(views) {
		return nil
	}
	if _, err := tx.Exec(ctx, script); err != nil {
		return fmt.Errorf("catalog read views: %w", err)
	}
	for _, v := range views {
		if _, err := tx.Exec(ctx, fmt.Sprintf("COMMENT ON VIEW %s IS %s", e.tbl(v), base.Lit(tag))); err != nil {
			return err
		}
	}
	return nil
}

// IsCatalog reports whether schema holds a Trellis catalog (its instance
// marker), as the role of q can see it.
func IsCatalog(ctx context.Context, q Querier, schema string) (bool, error) {
	var marker bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = '_instance')`, schema).Scan(&marker)
	return marker, err
}

// LockCatalog takes the catalog's mutex in q's transaction, the lock
// Migrate serializes on (locks.go): for work on the catalog schema that
// must not run beside a migration or beside itself in another process
// (the SQL surface's install). Only the catalog's owner can take it.
func LockCatalog(ctx context.Context, q Querier, schema string) error {
	_, err := q.Exec(ctx, "LOCK TABLE "+base.Ident(schema)+"._instance IN SHARE UPDATE EXCLUSIVE MODE")
	return err
}

// SelfCheckRun is a self-check job's own accounting.
type SelfCheckRun struct {
	Took        time.Duration // created (queued) to finished; 0 while it runs
	Pages       int64
	Rows        int64 // rows compared
	Divergences int64
}

// SelfCheckRun reads the accounting of self-check job id (benchmarks and
// tools: trellis.self_checks shows no page count).
func (e *Engine) SelfCheckRun(ctx context.Context, id int64) (SelfCheckRun, error) {
	var r SelfCheckRun
	var secs float64
	err := e.pool.QueryRow(ctx, fmt.Sprintf(`SELECT coalesce(extract(epoch FROM finished_at - created_at), 0)::float8, pages::int8,
		rows_compared, divergence_count::int8 FROM %s WHERE id = $1`, e.tbl("_self_checks")), id).Scan(&secs, &r.Pages, &r.Rows, &r.Divergences)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, pgerr.Newf(pgerr.UndefinedObject, "self-check %d does not exist", id).
			WithClass("not_found", "SelfCheckNotFound").WithHint("it was replaced by a newer check of its target, or its transform was dropped")
	}
	r.Took = time.Duration(secs * float64(time.Second))
	return r, err
}
