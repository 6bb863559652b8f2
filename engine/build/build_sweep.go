package build

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/derive"
	"github.com/trellis-proxy/trellis-proxy/engine/model"
	"github.com/trellis-proxy/trellis-proxy/engine/sqlgen"
)

// Rebuild requests and sweeps: a rebuild re-derives the ledger's keys
// too, so target rows no source row backs any more are deleted.

// RequestRebuild sends every applying reader of table (or only the one
// definition when only > 0) back to waiting_to_backfill: the staging worker
// starts a rebuild after every read table's capture is current, which
// re-derives every source key and sweeps ledger keys the source no longer
// has (§12.8 request_backfill). Targets stay readable meanwhile.
func (e *Builder) RequestRebuild(ctx context.Context, q base.Querier, table string, reason string) ([]string, error) {
	rows, err := q.Query(ctx, fmt.Sprintf(`UPDATE %[1]s d SET status = 'waiting_to_backfill', version = version + 1,
		  build_started_at = NULL, build_rows_done = NULL, build_rows_estimated = NULL,
		  status_detail = coalesce(status_detail, '{}') || jsonb_build_object('rebuild_reason', $2::text)
		WHERE d.status IN ('backfilling', 'live')
		  AND EXISTS (SELECT 1 FROM %[2]s r WHERE r.definition_id = d.id AND r.table_name = $1)
		RETURNING d.compiled #>> '{spec,target,name}'`, e.Tbl("_definitions"), e.Tbl("_definition_reads")), table, reason)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// AddSweep queues the sweep of a rebuild: ledger keys are re-derived too, so
// target rows no source row backs any more are deleted. A fresh build's
// ledger holds only what pages wrote, so the sweep is skipped when empty,
// and the build is marked fresh instead.
func (e *Builder) AddSweep(ctx context.Context, tx pgx.Tx, id, build int64) error {
	var raw []byte
	var classic bool
	if err := tx.QueryRow(ctx, fmt.Sprintf("SELECT compiled, coalesce((status_detail ->> 'classic_build')::boolean, false) FROM %s WHERE id = $1",
		e.Tbl("_definitions")), id).Scan(&raw, &classic); err != nil {
		return err
	}
	c := &model.Compiled{}
	if err := json.Unmarshal(raw, c); err != nil {
		return err
	}
	tag, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (definition_id, build_id, kind)
		SELECT $1, $2, 'sweep' WHERE EXISTS (SELECT 1 FROM %s) OR EXISTS (SELECT 1 FROM %s)`, e.Tbl("_build_tasks"), c.Ledger(), c.Target()), id, build)
	if err != nil {
		return err
	}
	if tag.RowsAffected() > 0 {
		if c.Spec.IsAggregate() {
			// After an interrupted heap build, pages and locked-path
			// chunks need the ledger's key index back first.
			if err := e.ensureLedgerKey(ctx, tx, c); err != nil {
				return err
			}
			// An aggregate rebuild ends by reconciling its groups with the
			// ledger (build.go groupsStep: an interrupted fresh build).
			_, err = tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (definition_id, build_id, kind) VALUES ($1, $2, 'groups')`, e.Tbl("_build_tasks")), id, build)
		}
		return err
	}
	// Ledger and target empty: a fresh build (§12.8 fast path). This runs
	// after the statement that moved the definition to backfilling locked
	// its row, and every page or chunk writing them holds that row FOR
	// SHARE, so this statement's snapshot sees every entry ever committed.
	heap := false
	if c.Spec.IsAggregate() {
		if heap, err = e.startHeapBuild(ctx, tx, c, classic); err != nil {
			return err
		}
		if !heap {
			if err := e.ensureLedgerKey(ctx, tx, c); err != nil {
				return err
			}
		}
	}
	if heap {
		// Its last two tasks are queued now (a classic fresh build's first
		// chunk queues its groups task; heap chunks run in parallel).
		if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (definition_id, build_id, kind) VALUES ($1, $2, 'groups'), ($1, $2, 'index')`,
			e.Tbl("_build_tasks")), id, build); err != nil {
			return err
		}
	}
	_, err = tx.Exec(ctx, fmt.Sprintf(`UPDATE %s SET status_detail = coalesce(status_detail, '{}') || jsonb_build_object('fresh_build', build_id::text)
		  || CASE WHEN $3 THEN jsonb_build_object('heap_build', build_id::text) ELSE '{}' END
		WHERE id = $1 AND build_id = $2`, e.Tbl("_definitions")), id, build, heap)
	return err
}

// sweepStep re-derives the next keys after the task's cursor (lo) that a
// rebuild would not reach from the source: first the ledger's keys, then,
// for a 1-1 target, the target's own keys (rows edited in by hand have no
// ledger entry), walked in key order like a plan. The task stays open,
// cursor advanced, until both are walked; hi marks the phase.
//
// A step also stops when its budget (until) is spent, with the cursor after
// the last key it re-derived; the target phase of a nullable identity,
// which has no cursor, runs whole.
func (e *Builder) sweepStep(ctx context.Context, tx pgx.Tx, taskID int64, cd *derive.CompiledDef, lo *string, until time.Time) error {
	var phase *string
	if err := tx.QueryRow(ctx, fmt.Sprintf("SELECT hi FROM %s WHERE id = $1", e.Tbl("_build_tasks")), taskID).Scan(&phase); err != nil {
		return err
	}
	c := cd.C
	var keys []string
	var err error
	if phase == nil {
		after := ""
		if lo != nil {
			after = *lo
		}
		rows, err := tx.Query(ctx, "SELECT k FROM "+c.Ledger()+` WHERE k COLLATE "C" > $1 ORDER BY k COLLATE "C" LIMIT $2`, after, e.Cfg.BuildChunkSize)
		if err != nil {
			return err
		}
		if keys, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return err
		}
	} else if c.KeyNullable {
		// A nullable identity (a 1-1 reader of an aggregate target: its keys
		// are group tuples) has no typed cursor; it is walked in one step,
		// as its build reads its source in one chunk.
		rows, err := tx.Query(ctx, "SELECT "+model.KeySQL(base.Ident(model.SourceAlias), c.Key, c.KeyNullable)+" FROM "+c.Target()+" AS "+base.Ident(model.SourceAlias))
		if err != nil {
			return err
		}
		if keys, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return err
		}
	} else {
		where, args := sqlgen.RangeWhere(c, lo, nil, 2)
		order := sqlgen.Joinf(len(c.Key), func(i int) string { return base.Ident(model.SourceAlias) + "." + base.Ident(c.Key[i].Name) }, ", ")
		rows, err := tx.Query(ctx, "SELECT "+model.KeySQL(base.Ident(model.SourceAlias), c.Key, c.KeyNullable)+" FROM "+c.Target()+" AS "+base.Ident(model.SourceAlias)+
			where+" ORDER BY "+order+" LIMIT $1", append([]any{e.Cfg.BuildChunkSize}, args...)...)
		if err != nil {
			return err
		}
		if keys, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return err
		}
	}
	if phase != nil && c.KeyNullable {
		until = time.Time{}
	}
	// The rebuild's chunks re-derive every key the source has; the sweep
	// is for the keys it lacks (rows deleted while the transform was
	// paused). A key deleted after this read is captured and re-derived
	// by a page.
	gone := keys
	if !e.Plant.LockedRebuilds {
		if gone, err = absentFromSource(ctx, tx, c, keys); err != nil {
			return err
		}
	}
	n, err := e.applySlices(gone, until, func(slice []string) error { return e.ApplyKeys(ctx, tx, cd, slice) })
	if err != nil {
		return err
	}
	if n < len(gone) {
		// Walked in order, so every key up to the last applied is done.
		_, err = tx.Exec(ctx, fmt.Sprintf("UPDATE %s SET lo = $2 WHERE id = $1", e.Tbl("_build_tasks")), taskID, gone[n-1])
		return err
	}
	// The target phase runs for every 1-1 target: a fresh build (§12.8
	// fast path) writes 1-1 target rows without ledger entries, so the
	// ledger alone does not name every key a rebuild must re-derive. It
	// once skipped nullable identities, and a paused reader of an
	// aggregate target kept rows for groups that vanished meanwhile.
	switch {
	case len(keys) == e.Cfg.BuildChunkSize && !(phase != nil && c.KeyNullable):
		_, err = tx.Exec(ctx, fmt.Sprintf("UPDATE %s SET lo = $2 WHERE id = $1", e.Tbl("_build_tasks")), taskID, keys[len(keys)-1])
	case phase == nil && !c.Spec.IsAggregate():
		_, err = tx.Exec(ctx, fmt.Sprintf("UPDATE %s SET lo = NULL, hi = 'target' WHERE id = $1", e.Tbl("_build_tasks")), taskID)
	default:
		err = e.taskDone(ctx, tx, taskID)
	}
	return err
}

// absentFromSource returns, in their order, the keys of c's source that
// name no source row now (and any key that does not decode, which
// applyKeys reports).
func absentFromSource(ctx context.Context, q base.Querier, c *model.Compiled, keys []string) ([]string, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	args, unnest, bad := model.KeyArgs(keys, c.Key, c.KeyNullable)
	rows, err := q.Query(ctx, "SELECT u.k FROM "+unnest+" WHERE NOT EXISTS (SELECT 1 FROM "+c.FromSQL()+
		" WHERE "+model.KeyLookup(base.Ident(model.SourceAlias), "u", c.Key, c.KeyNullable)+")", args...)
	if err != nil {
		return nil, err
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	absent := make(map[string]bool, len(found)+len(bad))
	for _, k := range append(found, bad...) {
		absent[k] = true
	}
	out := make([]string, 0, len(absent))
	for _, k := range keys {
		if absent[k] {
			out = append(out, k)
		}
	}
	return out, nil
}
