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

// fenceClass is the advisory lock class of this instance's definitions.
func (e *Engine) fenceClass() int32 {
	h := fnv.New32a()
	h.Write([]byte("trellis-definition-fence:" + e.cfg.Schema))
	return int32(h.Sum32())
}

// fenceObject renders the fence's object key of a definition id expression.
func fenceObject(id string) string { return "(" + id + " & 2147483647)::int4" }
