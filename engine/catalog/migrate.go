package catalog

// Migrating an instance's catalog: the embedded migrations in order, then
// the functions and read views re-created by every run.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// Beginner opens the migrating transaction: a *pgxpool.Pool or *pgx.Conn.
type Beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Querier runs SQL (engine/base).
type Querier = base.Querier

// FenceSchema is the schema holding the fence relations of the instance in
// schema (engine/worker/fence.go).
func FenceSchema(schema string) string { return schema + "_fence" }

// migrator is one Migrate call's instance.
type migrator struct {
	schema, targetSchema string
}

func (m *migrator) render(s string) string { return Render(s, m.schema, FenceSchema(m.schema)) }

func catalogErr(format string, args ...any) *pgerr.Error {
	return pgerr.Newf(pgerr.ObjectNotInPrerequisiteState, format, args...).WithClass("conflict", "CatalogSchemaRefused")
}

// Migrate creates or upgrades the catalog schema of the instance in schema
// (whose targets default to targetSchema), as the role of pool, which
// becomes the workers' role of a new instance. It is idempotent and safe
// to run from several processes at once: it serializes on the catalog's
// mutex (migrateLock).
func Migrate(ctx context.Context, pool Beginner, schema, targetSchema string) error {
	m := &migrator{schema: schema, targetSchema: targetSchema}
	if m.schema == "public" || m.schema == "pg_catalog" || strings.HasPrefix(m.schema, "pg_") {
		return catalogErr("schema %q cannot be a Trellis catalog schema", m.schema).WithHint("choose a dedicated schema, e.g. trellis")
	}
	if m.schema == m.targetSchema {
		return catalogErr("the catalog schema %q cannot also be the target schema", m.schema)
	}
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if err := m.migrateLock(ctx, tx); err != nil {
		return err
	}
	others, err := m.otherInstances(ctx, tx)
	if err != nil {
		return err
	}
	for _, o := range others {
		if o[1] == m.schema {
			return catalogErr("schema %q is the target schema of the Trellis instance in %q", m.schema, o[0])
		}
		if o[0] == m.targetSchema {
			return catalogErr("target schema %q is another Trellis instance's catalog", m.targetSchema)
		}
	}
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", m.schema).Scan(&exists); err != nil {
		return err
	}
	version := 0
	if exists {
		var marker, objects int
		if err := tx.QueryRow(ctx, `
			SELECT count(*) FILTER (WHERE c.relname = '_instance'), count(*)
			FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1`,
			m.schema).Scan(&marker, &objects); err != nil {
			return err
		}
		if marker == 0 && objects > 0 {
			return catalogErr("schema %q holds objects but no Trellis instance marker", m.schema).
				WithHint("use an empty or new schema for the Trellis catalog")
		}
		if marker > 0 {
			var name string
			if err := tx.QueryRow(ctx, fmt.Sprintf("SELECT schema_name, format_version FROM %s._instance", base.Ident(m.schema))).Scan(&name, &version); err != nil {
				return err
			}
			if name != m.schema {
				return catalogErr("schema %q carries the marker of Trellis instance %q", m.schema, name)
			}
			if version > FormatVersion {
				return catalogErr("catalog %q has format %d, newer than this build's %d", m.schema, version, FormatVersion).
					WithHint("upgrade trellis-proxy")
			}
		}
	} else if _, err := tx.Exec(ctx, "CREATE SCHEMA "+base.Ident(m.schema)); err != nil {
		return err
	}
	if version == FormatVersion {
		return m.finishMigrate(ctx, tx)
	}
	for v := version; v < FormatVersion; v++ {
		if _, err := tx.Exec(ctx, m.render(Migrations()[v])); err != nil {
			return fmt.Errorf("catalog migration %d: %w", v+1, err)
		}
	}
	if version == 0 {
		_, err = tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s._instance (schema_name, format_version, target_schema, worker_role)
			VALUES ($1, $2, $3, current_user)`, base.Ident(m.schema)), m.schema, FormatVersion, m.targetSchema)
	} else {
		_, err = tx.Exec(ctx, fmt.Sprintf(`UPDATE %s._instance SET format_version = $1`, base.Ident(m.schema)), FormatVersion)
	}
	if err != nil {
		return err
	}
	return m.finishMigrate(ctx, tx)
}

// finishMigrate replaces the catalog functions, brings the read views up
// to date (installReads) and commits.
func (m *migrator) finishMigrate(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, m.render(Functions())); err != nil {
		return fmt.Errorf("catalog functions: %w", err)
	}
	if err := m.installReads(ctx, tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// otherInstances lists (catalog schema, target schema) of other instances
// whose marker this role can read.
func (m *migrator) otherInstances(ctx context.Context, tx pgx.Tx) ([][2]string, error) {
	rows, err := tx.Query(ctx, `
		SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relname = '_instance' AND c.relkind = 'r' AND n.nspname <> $1
		  AND has_table_privilege(c.oid, 'SELECT')
		  AND (SELECT count(*) FROM pg_attribute a WHERE a.attrelid = c.oid AND NOT a.attisdropped
		       AND a.attname IN ('schema_name', 'target_schema')) = 2`, m.schema)
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

var readViewName = regexp.MustCompile(`CREATE OR REPLACE VIEW \{\{S\}\}\.(_read_[a-z_]+)`)

// ReadViews lists the read views the reads script creates, in its order.
func ReadViews() []string {
	var out []string
	for _, m := range readViewName.FindAllStringSubmatch(Reads(), -1) {
		out = append(out, m[1])
	}
	return out
}

// installReads (re)creates the read views in tx (Migrate's) when the
// script changed or one of them is missing: each carries the script's hash
// as its comment. Replacing a view takes an ACCESS EXCLUSIVE lock behind
// every running reader of the surface, so an unchanged script is left
// alone, as Install leaves an unchanged surface.
func (m *migrator) installReads(ctx context.Context, tx pgx.Tx) error {
	script := m.render(Reads())
	sum := sha256.Sum256([]byte(script))
	tag := "trellis read view " + hex.EncodeToString(sum[:])
	views := ReadViews()
	var current int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_class c
		WHERE c.relnamespace = (SELECT n.oid FROM pg_namespace n WHERE n.nspname = $1) AND c.relkind = 'v' AND c.relname = ANY ($2)
		  AND obj_description(c.oid, 'pg_class') = $3`, m.schema, views, tag).Scan(&current); err != nil {
		return err
	}
	if current == len(views) {
		return nil
	}
	if _, err := tx.Exec(ctx, script); err != nil {
		return fmt.Errorf("catalog read views: %w", err)
	}
	for _, v := range views {
		if _, err := tx.Exec(ctx, fmt.Sprintf("COMMENT ON VIEW %s IS %s", base.Table(m.schema, v), base.Lit(tag))); err != nil {
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
// Migrate serializes on: for work on the catalog schema that
// must not run beside a migration or beside itself in another process
// (the SQL surface's install). Only the catalog's owner can take it.
func LockCatalog(ctx context.Context, q Querier, schema string) error {
	_, err := q.Exec(ctx, "LOCK TABLE "+base.Table(schema, "_instance")+" IN SHARE UPDATE EXCLUSIVE MODE")
	return err
}

// migrateLock serializes catalog migrations. Once the catalog exists the
// lock is SHARE UPDATE EXCLUSIVE on its _instance table. Before that (the
// very first migration in a database, or a new schema) there is no table to
// lock and the migration serializes on the database-wide advisory key, as
// it always did: a role holding that key can delay the creation of a new
// catalog (documented), not the migration of an existing one.
func (m *migrator) migrateLock(ctx context.Context, tx pgx.Tx) error {
	locked, err := m.lockInstanceTable(ctx, tx)
	if err != nil || locked {
		return err
	}
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", base.LockKey("trellis-migrate")); err != nil {
		return err
	}
	// Another process may have created the catalog while we waited.
	_, err = m.lockInstanceTable(ctx, tx)
	return err
}

// lockInstanceTable takes the catalog's mutex if the catalog exists.
func (m *migrator) lockInstanceTable(ctx context.Context, tx pgx.Tx) (bool, error) {
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", base.Table(m.schema, "_instance")).Scan(&exists); err != nil || !exists {
		return false, err
	}
	err := LockCatalog(ctx, tx, m.schema)
	return err == nil, err
}
