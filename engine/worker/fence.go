package worker

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
)

// The definition fence: a relation lock per definition that orders
// lifecycle statements ahead of drain pages and build tasks.
//
// Pages and tasks hold a definition's row FOR SHARE for their whole
// transaction; PAUSE, RESUME, DROP, ALTER and request_backfill take it FOR
// UPDATE. A row lock does not queue new compatible lockers behind a waiting
// updater, so with two workers overlapping their shares the updater could
// wait for seconds. The heavyweight lock manager does queue: a request
// conflicts with a waiting one of a conflicting mode. So every statement
// that locks a definition row FOR UPDATE first takes the definition's fence
// in EXCLUSIVE mode (_fence_definition, waiting for the pages and tasks
// already in flight), and a page or task takes it in ROW SHARE mode with
// NOWAIT before its row lock (_try_fences): refused while a lifecycle
// statement holds or waits for it, the page defers the definition's keys
// exactly as for a row held by another transaction (_deferred) and a task
// leaves its row for later. Lock order everywhere: fence, then the
// definition row; nobody waits for a fence while holding a definition row
// lock it would need, and pages and tasks never wait for one.
//
// The fence is an empty view per definition, d<id>, in the schema
// <catalog>_fence, which grants nothing to PUBLIC (D21: locks no other role
// can take or forge). A role cannot lock, or queue a lock request on, a
// relation it cannot name: name lookup checks the schema's USAGE before any
// lock. (Advisory keys, used before format 19, are open to every role: one
// holding a definition's key froze that transform.) The modes: ROW SHARE
// does not conflict with itself, so pages overlap; EXCLUSIVE conflicts with
// it and leaves ACCESS SHARE (what any catalog function reading the view
// by oid takes) alone.

// Build steps are cut short rather than waited for. A build task also takes
// the build mark (the view build_mark, ROW SHARE) right after its fence, so
// a lifecycle statement that finds the fence held can tell build steps from
// pages in pg_locks: _fence_definition cancels the backends holding both
// before it queues for the fence. The cancelled step's statement fails with
// 57014, which the worker treats as transient (rolled back, not charged,
// retried once the fence is free: its cursor and rows are where its last
// commit left them), so a PAUSE or DROP of a building transform waits for a
// cancel and a rollback, not for a chunk of 50,000 rows. Pages are waited
// for (their length is bounded by the page size, and they carry every other
// transform's changes too). A cancel that lands between two of the step's
// statements is ignored by PostgreSQL; the wait is then the step's
// remaining statements, as before the mark.

// StagingFence takes a definition's fence for a step of the staging worker
// in tx, waiting at most PageLockTimeout for pages in flight; false: a
// client transaction holds it, so the step is left for a later pass
// (staging never waits for another role's transaction).
func (e *Env) StagingFence(ctx context.Context, tx pgx.Tx, id int64) (bool, error) {
	if err := SetLockTimeout(ctx, tx, e.Cfg.PageLockTimeout); err != nil {
		return false, err
	}
	var got bool
	err := tx.QueryRow(ctx, "SELECT "+base.Ident(e.Cfg.Schema)+"._fence_staging($1)", id).Scan(&got)
	return got, err
}

// TryFencesSQL renders the ids (a bigint[] expression) whose fences a page
// or task took; mark: a build step's.
func (e *Env) TryFencesSQL(ids string, mark bool) string {
	m := "false"
	if mark {
		m = "true"
	}
	return base.Ident(e.Cfg.Schema) + "._try_fences(" + ids + ", " + m + ")"
}

// BeginFenced begins a READ COMMITTED transaction on conn for a staging
// step on definition id and takes the definition's fence (StagingFence).
// tx is nil, with a nil error, when a client transaction holds the fence:
// the step is left for a later pass. The caller rolls tx back when done.
func (e *Env) BeginFenced(ctx context.Context, conn *pgx.Conn, id int64) (pgx.Tx, error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return nil, err
	}
	if got, err := e.StagingFence(ctx, tx, id); err != nil || !got {
		tx.Rollback(ctx)
		return nil, err
	}
	return tx, nil
}
