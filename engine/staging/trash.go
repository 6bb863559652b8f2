package staging

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/quarantine"
	"github.com/trellis-proxy/trellis-proxy/engine/worker"
)

// The trash of DROP TRANSFORM. PostgreSQL unlinks a dropped table's files
// when the dropping transaction commits, so a DROP TABLE of a large target
// makes the client's COMMIT wait for its size. DROP TRANSFORM instead moves
// the target and ledger into a schema of their own, owned by the workers'
// role (catalog/functions/1_privileged.sql: _drop_transform, _trash_tables), and the staging
// worker drops that schema here, in its own transactions, shortly after the
// COMMIT: the space is freed then. A schema's owner may drop the tables in
// it whoever owns them, so no privilege on the target is needed.
//
// Each schema goes in one transaction with a short lock_timeout (like a
// capture install), so it never queues ahead of application statements;
// one that fails is retried with a backoff and its error kept in _trash.
// Nothing is cascaded: what the caller put in the schema or made depend on
// its tables after the drop keeps it, and the warning names the error.

// emptyTrash drops the trash schemas that are due. remaining reports trash
// left for a later pass.
func (e *Stager) emptyTrash(ctx context.Context, conn *pgx.Conn) (remaining bool, err error) {
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT schema_name::text, coalesce(next_attempt_at, '-infinity') <= now()
		FROM %s ORDER BY dropped_at`, e.Tbl("_trash")))
	if err != nil {
		return false, err
	}
	type entry struct {
		schema string
		due    bool
	}
	var entries []entry
	var t entry
	if _, err := pgx.ForEachRow(rows, []any{&t.schema, &t.due}, func() error {
		entries = append(entries, t)
		return nil
	}); err != nil {
		return false, err
	}
	for _, t := range entries {
		if !t.due {
			remaining = true
			continue
		}
		if err := e.dropTrash(ctx, conn, t.schema); err != nil {
			remaining = true
			if conn.IsClosed() || ctx.Err() != nil {
				return true, err
			}
			e.Log.Warn("dropping a dropped transform's tables failed; retrying later", "schema", t.schema, "err", err)
			if _, rerr := conn.Exec(ctx, fmt.Sprintf(`UPDATE %s SET attempts = attempts + 1, last_error = $2,
				next_attempt_at = `+quarantine.RetryAfterSQL+`
				WHERE schema_name = $1`, e.Tbl("_trash")), t.schema, quarantine.ErrMessage(err)); rerr != nil {
				return true, rerr
			}
		}
	}
	return remaining, nil
}

// dropTrash drops one trash schema and its tables, and forgets it.
func (e *Stager) dropTrash(ctx context.Context, conn *pgx.Conn, schema string) error {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	if err := worker.SetLockTimeout(ctx, tx, e.Cfg.InstallLockTimeout); err != nil {
		return err
	}
	rows, err := tx.Query(ctx, `SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') ORDER BY c.oid`, schema)
	if err != nil {
		return err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, t := range tables {
		if _, err := tx.Exec(ctx, "DROP TABLE IF EXISTS "+t); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, "DROP SCHEMA IF EXISTS "+base.Ident(schema)); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf("DELETE FROM %s WHERE schema_name = $1", e.Tbl("_trash")), schema); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	e.Log.Info("dropped transform's tables freed", "schema", schema, "tables", len(tables))
	return nil
}
