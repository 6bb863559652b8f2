package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/catalog"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

func (e *Engine) renderCatalogSQL(s string) string {
	return catalog.Render(s, e.cfg.Schema, e.fenceSchema())
}

func catalogErr(format string, args ...any) *pgerr.Error {
	return pgerr.Newf(pgerr.ObjectNotInPrerequisiteState, format, args...).WithClass("conflict", "CatalogSchemaRefused")
}

// Migrate creates or upgrades the instance's catalog schema. It is
// idempotent and safe to run from several processes at once (it serializes
// on a lock of the catalog, locks.go).
func (e *Engine) Migrate(ctx context.Context) error {
	if e.cfg.Schema == "public" || e.cfg.Schema == "pg_catalog" || strings.HasPrefix(e.cfg.Schema, "pg_") {
		return catalogErr("schema %q cannot be a Trellis catalog schema", e.cfg.Schema).WithHint("choose a dedicated schema, e.g. trellis")
	}
	if e.cfg.Schema == e.cfg.TargetSchema {
		return catalogErr("the catalog schema %q cannot also be the target schema", e.cfg.Schema)
	}
	tx, err := e.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if err := e.migrateLock(ctx, tx); err != nil {
		return err
	}
	others, err := e.otherInstances(ctx, tx)
	if err != nil {
		return err
	}
	for _, o := range others {
		if o[1] == e.cfg.Schema {
			return catalogErr("schema %q is the target schema of the Trellis instance in %q", e.cfg.Schema, o[0])
		}
		if o[0] == e.cfg.TargetSchema {
			return catalogErr("target schema %q is another Trellis instance's catalog", e.cfg.TargetSchema)
		}
	}
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", e.cfg.Schema).Scan(&exists); err != nil {
		return err
	}
	version := 0
	if exists {
		var marker, objects int
		if err := tx.QueryRow(ctx, `
			SELECT count(*) FILTER (WHERE c.relname = '_instance'), count(*)
			FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1`,
			e.cfg.Schema).Scan(&marker, &objects); err != nil {
			return err
		}
		if marker == 0 && objects > 0 {
			return catalogErr("schema %q holds objects but no Trellis instance marker", e.cfg.Schema).
				WithHint("use an empty or new schema for the Trellis catalog")
		}
		if marker > 0 {
			var name string
			if err := tx.QueryRow(ctx, fmt.Sprintf("SELECT schema_name, format_version FROM %s._instance", base.Ident(e.cfg.Schema))).Scan(&name, &version); err != nil {
				return err
			}
			if name != e.cfg.Schema {
				return catalogErr("schema %q carries the marker of Trellis instance %q", e.cfg.Schema, name)
			}
			if version > catalog.FormatVersion {
				return catalogErr("catalog %q has format %d, newer than this build's %d", e.cfg.Schema, version, catalog.FormatVersion).
					WithHint("upgrade trellis-proxy")
			}
		}
	} else if _, err := tx.Exec(ctx, "CREATE SCHEMA "+base.Ident(e.cfg.Schema)); err != nil {
		return err
	}
	if version == catalog.FormatVersion {
		return e.finishMigrate(ctx, tx)
	}
	for v := version; v < catalog.FormatVersion; v++ {
		if _, err := tx.Exec(ctx, e.renderCatalogSQL(catalog.Migrations()[v])); err != nil {
			return fmt.Errorf("catalog migration %d: %w", v+1, err)
		}
	}
	if version == 0 {
		_, err = tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s._instance (schema_name, format_version, target_schema, worker_role)
			VALUES ($1, $2, $3, current_user)`, base.Ident(e.cfg.Schema)), e.cfg.Schema, catalog.FormatVersion, e.cfg.TargetSchema)
	} else {
		_, err = tx.Exec(ctx, fmt.Sprintf(`UPDATE %s._instance SET format_version = $1`, base.Ident(e.cfg.Schema)), catalog.FormatVersion)
	}
	if err != nil {
		return err
	}
	return e.finishMigrate(ctx, tx)
}

// finishMigrate replaces the catalog functions, brings the read views up
// to date (catalogreads.go) and commits.
func (e *Engine) finishMigrate(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, e.renderCatalogSQL(catalog.Functions())); err != nil {
		return fmt.Errorf("catalog functions: %w", err)
	}
	if err := e.installReads(ctx, tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// otherInstances lists (catalog schema, target schema) of other instances
// whose marker this role can read.
func (e *Engine) otherInstances(ctx context.Context, tx pgx.Tx) ([][2]string, error) {
	rows, err := tx.Query(ctx, `
		SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relname = '_instance' AND c.relkind = 'r' AND n.nspname <> $1
		  AND has_table_privilege(c.oid, 'SELECT')
		  AND (SELECT count(*) FROM pg_attribute a WHERE a.attrelid = c.oid AND NOT a.attisdropped
		       AND a.attname IN ('schema_name', 'target_schema')) = 2`, e.cfg.Schema)
	if err != nil {
		return nil, err
	}
	schemas, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	var out [][2]string
	for _, s := range schemas {
		var tgt string
		err := tx.QueryRow(ctx, fmt.Sprintf("SELECT target_schema FROM %s._instance WHERE schema_name = $1", base.Ident(s)), s).Scan(&tgt)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, [2]string{s, tgt})
	}
	return out, nil
}
