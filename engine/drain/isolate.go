package drain

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/derive"
	"github.com/trellis-proxy/trellis-proxy/engine/quarantine"
	"github.com/trellis-proxy/trellis-proxy/engine/worker"
)

// Per-definition failure isolation (D21). A page applies every reading
// definition's share under its own savepoint. A share that fails with
// anything the probe cannot attribute to rows (a trigger or rule on the
// target raising, a value past the 1 GB field limit, a dropped ledger, a
// lock wait on a target its owner holds locked, an error with a forged
// SQLSTATE) is rolled back to that savepoint alone; its keys are deferred
// for that definition (_deferred, as for a definition a client holds
// locked) in the same transaction that advances the bucket, and the
// definition is held (_page_failures) with a backoff. Every other share of
// the page commits.
//
// Exactly once: the failed share's writes are undone whole by the rollback
// to its savepoint, and its keys stay pending (convergence counts deferred
// keys) until the staging worker stages them again as re-derivations,
// which read the source live. Nothing is applied twice and nothing is lost.

const (
	// PageFailuresToPause is the failed attempt that pauses a held
	// definition with a named drain_failure (surface §13 fuses).
	PageFailuresToPause = 10
	// pageRetrySQL is the next attempt of a held definition: 100 ms doubling
	// to 30 s.
	pageRetrySQL = `now() + least(interval '100 ms' * power(2, least(pf.attempts, 10)), interval '30 s')`
)

// pageShare is what a page knows of its truncates.
type pageShare struct {
	truncated []string
	tOrigin   *string
	tUnknown  bool
	tHop      int16
}

// applyShare applies one definition's share of a page (its truncate, then
// its keys) under a savepoint. A poisonous error outside a probe and a
// ledger lock cut short end the page (the probe, or a retry, handles them);
// any other failure holds this definition alone.
func (e *Drainer) applyShare(ctx context.Context, tx pgx.Tx, d derive.ReaderDef, ks []derive.PageKey, meta map[derive.PageKey]derive.KeyMeta,
	probe, truncate bool, ps pageShare) error {
	if len(ks) == 0 && !truncate {
		return nil // nothing to apply: no savepoint round trips
	}
	if _, err := tx.Exec(ctx, "SAVEPOINT trellis_share"); err != nil {
		return err
	}
	if d.Failing {
		// A held definition retried waits only briefly on its target's
		// locks: its owner's open transaction must not cost every other
		// transform's page the full lock wait at each retry.
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '50ms'"); err != nil {
			return err
		}
	}
	var err error
	if d.Joined {
		err = e.fanOut(ctx, tx, d, ks, meta, truncate, probe, ps)
	} else {
		err = e.applyShareIn(ctx, tx, d, ks, meta, probe, truncate)
	}
	if err == nil && d.Failing {
		err = worker.SetLockTimeout(ctx, tx, e.Cfg.PageLockTimeout)
	}
	if err == nil {
		if _, err := tx.Exec(ctx, "RELEASE SAVEPOINT trellis_share"); err != nil {
			return err
		}
		derive.CountApplied(ctx, d, ks, meta, truncate) // reported only if the page commits
		if d.Failing {
			_, err = tx.Exec(ctx, fmt.Sprintf(`DELETE FROM %s WHERE definition_id = $1`, e.Tbl("_page_failures")), d.Def.ID)
		}
		return err
	}
	if ctx.Err() != nil || errors.Is(err, derive.ErrLockShort) || (!probe && quarantine.Poisonous(err)) {
		return err
	}
	if _, rerr := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT trellis_share"); rerr != nil {
		return err
	}
	byTable := map[string][]derive.PageKey{d.Table: ks}
	var truncated []string
	if truncate {
		truncated = []string{d.Table}
	}
	if derr := e.deferKeys(ctx, tx, []derive.SkippedReader{{ID: d.Def.ID, Table: d.Table}}, byTable, meta,
		truncated, ps.tOrigin, ps.tUnknown, ps.tHop); derr != nil {
		return derr
	}
	var attempts int
	if cerr := tx.QueryRow(ctx, fmt.Sprintf(`INSERT INTO %[1]s AS pf (definition_id, attempts, error, sqlstate, next_attempt_at, table_name)
		VALUES ($1, 1, $2, nullif($3, ''), now() + interval '100 ms', $4)
		ON CONFLICT (definition_id) DO UPDATE SET attempts = pf.attempts + 1, error = excluded.error,
		  sqlstate = excluded.sqlstate, last_at = now(), next_attempt_at = `+pageRetrySQL+`, table_name = excluded.table_name
		RETURNING attempts`, e.Tbl("_page_failures")), d.Def.ID, quarantine.ErrMessage(err), base.Code(err), d.Table).Scan(&attempts); cerr != nil {
		return cerr
	}
	// The text may carry row values: it goes to the catalog, shown only to
	// roles that may read the transform, not to the log.
	e.Log.Warn("a transform's share of a page failed; its keys are held for it alone", "definition", d.Def.ID,
		"target", d.Def.C.TargetText, "sqlstate", base.Code(err), "attempts", attempts)
	worker.Poke(e.WakePass)
	return nil
}

func (e *Drainer) applyShareIn(ctx context.Context, tx pgx.Tx, d derive.ReaderDef, ks []derive.PageKey, meta map[derive.PageKey]derive.KeyMeta, probe, truncate bool) error {
	if truncate {
		// Wait out and hold off build chunks writing this definition, so
		// the DELETEs below see every committed entry and group (a row a
		// chunk inserted after the DELETE's snapshot would survive it).
		if _, err := tx.Exec(ctx, "LOCK TABLE "+d.Def.C.Ledger()+", "+d.Def.C.Target()+" IN EXCLUSIVE MODE"); err != nil {
			return err
		}
		// DELETE, not TRUNCATE: MVCC-safe for concurrent readers, no
		// ACCESS EXCLUSIVE, and chained readers see per-key deletes.
		if _, err := tx.Exec(ctx, "DELETE FROM "+d.Def.C.Target()); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "DELETE FROM "+d.Def.C.Ledger()); err != nil {
			return err
		}
	}
	if probe {
		return e.ProbeApply(ctx, tx, d, ks, meta)
	}
	plain := make([]string, len(ks))
	for i, k := range ks {
		plain[i] = k.Key
	}
	return e.ApplyKeys(ctx, tx, d.Def, plain)
}

// PauseFailing pauses the applying definitions held for pageFailuresToPause
// failed attempts, with a named drain_failure (its deferred keys are then
// dropped: RESUME rebuilds). A definition row another transaction holds is
// left for a later pass.
func (e *Drainer) PauseFailing(ctx context.Context, tx pgx.Tx) error {
	rows, err := tx.Query(ctx, fmt.Sprintf(`WITH f AS (
		  DELETE FROM %[1]s pf WHERE pf.attempts >= $1 AND pf.definition_id IN (
		    -- Only the definitions to pause: an unfiltered FOR UPDATE would lock
		    -- every applying row, and pages beside it would defer the keys of
		    -- every other transform.
		    SELECT d.id FROM %[2]s d JOIN %[1]s x ON x.definition_id = d.id
		    WHERE x.attempts >= $1 AND d.status IN ('backfilling', 'live') FOR UPDATE OF d SKIP LOCKED)
		  RETURNING pf.*)
		UPDATE %[2]s d SET status = 'paused', version = version + 1,
		  build_started_at = NULL, build_rows_done = NULL, build_rows_estimated = NULL,
		  status_detail = coalesce(status_detail, '{}') || jsonb_build_object('drain_failure', jsonb_build_object(
		    'error', f.error, 'sqlstate', f.sqlstate, 'attempts', f.attempts, 'since', f.since, 'last_seen', f.last_at,
		    'reason', 'its share of a page failed on every attempt', 'paused', true),
		  -- The drain stopped this transform (surface §5.4 halted): D21 halts
		  -- the failing reader alone, never every reader of the table.
		  'halt', jsonb_build_object('source_table', f.table_name, 'columns', '[]'::jsonb, 'error', f.error,
		    'detected_at', now()))
		FROM f WHERE d.id = f.definition_id RETURNING d.id`, e.Tbl("_page_failures"), e.Tbl("_definitions")), PageFailuresToPause)
	if err != nil {
		return err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	for _, id := range ids {
		e.Log.Warn("transform paused: its share of a page failed on every attempt", "definition", id, "attempts", PageFailuresToPause)
	}
	return err
}
