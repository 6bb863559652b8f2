package engine

import "hash/fnv"

// The definition fence: a transaction-scoped advisory lock per definition
// that orders lifecycle statements ahead of drain pages and build tasks.
//
// Pages and tasks hold a definition's row FOR SHARE for their whole
// transaction; PAUSE, RESUME, DROP, ALTER and request_backfill take it FOR
// UPDATE. A row lock does not queue new compatible lockers behind a waiting
// updater, so with two workers overlapping their shares the updater could
// wait for seconds. The heavyweight lock manager does queue: a shared
// request conflicts with a waiting exclusive one. So every statement that
// locks a definition row FOR UPDATE first takes the fence exclusive
// (pg_advisory_xact_lock, waiting for the pages and tasks already in
// flight), and a page or task takes it shared with
// pg_try_advisory_xact_lock_shared before its row lock: refused while a
// lifecycle statement holds or waits for it, the page defers the
// definition's keys exactly as for a row held by another transaction
// (_deferred) and a task leaves its row for later. Lock order everywhere:
// fence, then the definition row; nobody waits for a fence while holding a
// definition row lock it would need, and pages and tasks never wait for one.
//
// Key space: the two-int form (class, object). Postgres keeps it apart from
// the one-bigint form that the staging singleton and Migrate use (the lock
// tag records which form), so they cannot collide. The class is derived
// from the catalog schema so that two instances sharing a database do not
// fence each other; the object is the definition id's low 31 bits. A
// collision (another instance's class, ids 2^31 apart) only makes one
// definition's lifecycle statement wait for another's pages: never wrong.

// Build steps are cut short rather than waited for. A build task also takes
// a shared "build mark" (the same object key under buildMarkClass) right
// after its fence, so a lifecycle statement that finds the fence held can
// tell build steps from pages in pg_locks: _fence_definition cancels the
// backends holding the mark before it queues for the fence. The cancelled
// step's statement fails with 57014, which the worker treats as transient
// (rolled back, not charged, retried once the fence is free: its cursor
// and rows are where its last commit left them), so a PAUSE or DROP of a
// building transform waits for a cancel and a rollback, not for a chunk of
// 50,000 rows. Pages are waited for (their length is bounded by the page
// size, and they carry every other transform's changes too). A cancel that
// lands between two of the step's statements is ignored by PostgreSQL; the
// wait is then the step's remaining statements, as before the mark.

// fenceClass is the advisory lock class of this instance's definitions.
func (e *Engine) fenceClass() int32 {
	h := fnv.New32a()
	h.Write([]byte("trellis-definition-fence:" + e.cfg.Schema))
	return int32(h.Sum32())
}

// buildMarkClass is the advisory lock class of the build mark.
func (e *Engine) buildMarkClass() int32 {
	h := fnv.New32a()
	h.Write([]byte("trellis-build-mark:" + e.cfg.Schema))
	return int32(h.Sum32())
}

// fenceObject renders the fence's object key of a definition id expression.
func fenceObject(id string) string { return "(" + id + " & 2147483647)::int4" }
