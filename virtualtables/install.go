// Package virtualtables is Trellis's SQL surface (architecture D10): the
// views, functions and types of surface spec §4 installed as real objects in
// the catalog schema, so \d, ORM reflection, WHERE, joins and prepared
// statements work through the proxy and on a direct connection alike. It
// also renders the text the CLI's status and dump subcommands print.
package virtualtables

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-proxy/trellis-proxy/engine"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// DefaultSchema is the default catalog schema, and the name through which
// the proxy's alias reaches any instance (surface §1.1).
const DefaultSchema = "trellis"

// surfaceVersion orders surface scripts across builds: an older binary never
// reinstalls over a newer one's objects (rolling upgrades of a fleet).
// Version 2 reads storage through the engine's read views and leaves the
// helpers that moved into the engine (its catalog functions) alone: a
// version-1 binary would drop and recreate them.
const surfaceVersion = 2

// Beginner opens a transaction: *pgxpool.Pool, *pgx.Conn and pgx.Tx (a
// savepoint) all satisfy it.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Options configure Install.
type Options struct {
	Schema    string        // catalog schema, default "trellis"
	WorkerTTL time.Duration // reclaim TTL behind liveness reads, default 30s (surface §7.3)
}

func (o *Options) defaults() {
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	if o.WorkerTTL <= 0 {
		o.WorkerTTL = 30 * time.Second
	}
}

// Install creates or upgrades the SQL surface in schema with default
// options. Run it after engine.Migrate, at every start.
func Install(ctx context.Context, db Beginner, schema string) error {
	return InstallOptions(ctx, db, Options{Schema: schema})
}

// InstallOptions creates the surface objects in the catalog schema, which
// engine.Migrate must already have created, as the connection's role (the
// workers' role, which then owns them). It is idempotent and safe from
// several processes at once: an unchanged surface is left alone (recreating
// views would take exclusive locks behind every running reader), a changed
// one is dropped and recreated in one transaction and opened to PUBLIC.
// Storage relations are closed to PUBLIC every time (§2.5).
func InstallOptions(ctx context.Context, db Beginner, opts Options) error {
	opts.defaults()
	script := render(surfaceSQL+quarantineSQL+selfCheckSQL, opts)
	sum := sha256.Sum256([]byte(script))
	hash := hex.EncodeToString(sum[:])

	tx, err := db.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	marker, err := engine.IsCatalog(ctx, tx, opts.Schema)
	if err != nil {
		return err
	}
	if !marker {
		return pgerr.Newf(pgerr.ObjectNotInPrerequisiteState, "schema %q is not a Trellis catalog", opts.Schema).
			WithHint("run the catalog migration (engine Migrate) first")
	}
	s := ident(opts.Schema)
	// Concurrent GRANTs on one object fail with "tuple concurrently updated".
	// The catalog's mutex, not an advisory key any role could hold (engine
	// engine/catalog/migrate.go): it conflicts with no lock a tenant can take.
	if err := engine.LockCatalog(ctx, tx, opts.Schema); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s._surface (
		singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
		version int NOT NULL, script_hash text NOT NULL, objects text NOT NULL,
		installed_at timestamptz NOT NULL DEFAULT now())`, s)); err != nil {
		return err
	}
	var version int
	var installed, objects string
	err = tx.QueryRow(ctx, fmt.Sprintf("SELECT version, script_hash, objects FROM %s._surface", s)).Scan(&version, &installed, &objects)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return err
	}
	present, err := surfaceObjects(ctx, tx, opts.Schema)
	if err != nil {
		return err
	}
	// Also reinstall when objects went missing: an engine migration that must
	// alter a column a view reads drops the view first (DROP ... CASCADE).
	if version < surfaceVersion || (version == surfaceVersion && (installed != hash || objects != present)) {
		if err := dropSurface(ctx, tx, opts.Schema); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, script); err != nil {
			return fmt.Errorf("installing the SQL surface in %q: %w", opts.Schema, err)
		}
		if _, err := tx.Exec(ctx, render(grantSQL, opts)); err != nil {
			return fmt.Errorf("granting the SQL surface in %q: %w", opts.Schema, err)
		}
		if present, err = surfaceObjects(ctx, tx, opts.Schema); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s._surface (version, script_hash, objects) VALUES ($1, $2, $3)
			ON CONFLICT (singleton) DO UPDATE SET version = excluded.version, script_hash = excluded.script_hash,
			objects = excluded.objects, installed_at = now()`, s), surfaceVersion, hash, present); err != nil {
			return err
		}
	}
	rows, err := tx.Query(ctx, storageGrantsSQL, opts.Schema)
	if err != nil {
		return err
	}
	revokes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, r := range revokes {
		if _, err := tx.Exec(ctx, r); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

// internalHelpers are the underscore-named functions the surface script
// creates (storage-side names, D16) and must drop on reinstall. The ones it
// calls that read or write storage (_has_captured_writes, _staging_holder,
// _definition_targets, _catalog_version, _release_key, _self_check_start)
// are the engine's catalog functions, which Migrate creates.
var internalHelpers = []string{"_jsontime", "_fail", "_proxy_only", "_proxy_only_rows"}

// surfaceObjects fingerprints the surface objects present in schema: the
// sorted kinds and names of its plain-named views, functions and types and of
// the surface's internal helpers.
func surfaceObjects(ctx context.Context, tx pgx.Tx, schema string) (string, error) {
	var out string
	err := tx.QueryRow(ctx, `
		SELECT coalesce(string_agg(o, ' ' ORDER BY o), '') FROM (
		  SELECT 'v:' || c.relname AS o FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		  WHERE n.nspname = $1 AND c.relkind = 'v' AND left(c.relname, 1) <> '_'
		  UNION ALL
		  SELECT 'f:' || p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		  WHERE n.nspname = $1 AND (left(p.proname, 1) <> '_' OR p.proname = ANY ($2))
		  UNION ALL
		  SELECT 't:' || t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
		  JOIN pg_class r ON r.oid = t.typrelid
		  WHERE n.nspname = $1 AND r.relkind = 'c' AND left(t.typname, 1) <> '_') x`,
		schema, internalHelpers).Scan(&out)
	return out, err
}

// dropSurface removes every API object (the plain names of the schema are
// the surface's, D16) and the surface's internal helpers, without CASCADE:
// a user view built on trellis.status makes the upgrade fail loudly instead
// of silently losing the user's view.
func dropSurface(ctx context.Context, tx pgx.Tx, schema string) error {
	// Order: functions returning a view's row type or applied, views (which
	// call functions), the remaining functions, then the type.
	rows, err := tx.Query(ctx, `
		WITH f AS (
		  SELECT p.oid, EXISTS (SELECT 1 FROM pg_type t WHERE t.oid = p.prorettype AND t.typtype = 'c') AS returns_row
		  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		  WHERE n.nspname = $1 AND (left(p.proname, 1) <> '_' OR p.proname = ANY ($2)))
		SELECT CASE WHEN f.returns_row THEN 0 ELSE 2 END, format('DROP FUNCTION IF EXISTS %s', f.oid::regprocedure)
		FROM f
		UNION ALL
		SELECT 1, format('DROP VIEW IF EXISTS %I.%I', n.nspname, c.relname)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind = 'v' AND left(c.relname, 1) <> '_'
		UNION ALL
		SELECT 3, format('DROP TYPE IF EXISTS %I.%I', n.nspname, t.typname)
		FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
		WHERE n.nspname = $1 AND t.typtype = 'c' AND left(t.typname, 1) <> '_'
		  AND EXISTS (SELECT 1 FROM pg_class r WHERE r.oid = t.typrelid AND r.relkind = 'c')
		ORDER BY 1, 2`, schema, internalHelpers)
	if err != nil {
		return err
	}
	type stmt struct {
		Order int
		SQL   string
	}
	stmts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[stmt])
	if err != nil {
		return err
	}
	for _, st := range stmts {
		if _, err := tx.Exec(ctx, st.SQL); err != nil {
			if pgerr.CodeOf(err) == pgerr.DependentObjectsStillExist {
				return pgerr.Newf(pgerr.DependentObjectsStillExist, "cannot upgrade the Trellis SQL surface in %q: %s", schema, errText(err)).
					WithHint("drop your objects that depend on the catalog's views and functions, upgrade, then recreate them")
			}
			return err
		}
	}
	return nil
}

func errText(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if pe.Detail != "" {
			return pe.Message + " (" + pe.Detail + ")"
		}
		return pe.Message
	}
	return err.Error()
}

func render(script string, o Options) string {
	r := strings.NewReplacer(
		"{{S}}", ident(o.Schema),
		"{{SN}}", literal(o.Schema),
		"{{TTL_MS}}", strconv.FormatInt(o.WorkerTTL.Milliseconds(), 10),
	)
	return r.Replace(script)
}

func ident(s string) string { return pgx.Identifier{s}.Sanitize() }

// literal renders a SQL string literal (standard_conforming_strings is on).
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// Compile-time check that the engine's Querier is what the readers take.
var _ engine.Querier = (pgx.Tx)(nil)
