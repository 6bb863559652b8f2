package build

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/derive"
	"github.com/trellis-proxy/trellis-proxy/engine/model"
	"github.com/trellis-proxy/trellis-proxy/engine/quarantine"
	"github.com/trellis-proxy/trellis-proxy/engine/sqlgen"
	"github.com/trellis-proxy/trellis-proxy/engine/worker"
)

// Builder runs build tasks: plans, chunks, sweeps and heap builds.
type Builder struct {
	*quarantine.Quarantine
}

// New returns the builder over q.
func New(q *quarantine.Quarantine) *Builder { return &Builder{Quarantine: q} }

// BuildStep runs one open build task (plan or chunk) of a backfilling
// definition in one transaction holding the task row's lock, like a page.
// A task whose definition's fence is refused (a lifecycle statement holds
// or waits for it) is left for later and another definition's is tried.
func (e *Builder) BuildStep(ctx context.Context, id string) (bool, error) {
	conn, err := e.Workers.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Release()
	var fenced []int64
	for {
		did, refused, err := e.buildTry(ctx, id, conn, fenced)
		if refused == 0 {
			return did, err
		}
		fenced = append(fenced, refused)
	}
}

// buildTry runs, as worker id, the first open task of a definition not in
// skip; refused is the task's definition when its fence was refused
// (nothing done).
func (e *Builder) buildTry(ctx context.Context, id string, conn *pgxpool.Conn, skip []int64) (did bool, refused int64, err error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return false, 0, err
	}
	defer tx.Rollback(context.Background())
	var taskID, defID, build int64
	var kind, target string
	var lo, hi *string
	err = tx.QueryRow(ctx, fmt.Sprintf(`SELECT t.id, t.definition_id, t.build_id, t.kind, t.lo, t.hi, d.target_table
		FROM %[1]s t JOIN %[2]s d ON d.id = t.definition_id AND d.build_id = t.build_id AND d.status = 'backfilling'
		WHERE t.state = 'open' AND coalesce(t.next_attempt_at, '-infinity') <= now() AND t.definition_id <> ALL(coalesce($1::bigint[], '{}'))
		  AND (t.kind NOT IN ('groups', 'index') OR NOT EXISTS (SELECT 1 FROM %[1]s o
		       WHERE o.build_id = t.build_id AND o.kind NOT IN ('groups', 'index') AND o.state <> 'done'))
		ORDER BY t.kind DESC, t.id LIMIT 1 FOR UPDATE OF t SKIP LOCKED`, e.Tbl("_build_tasks"), e.Tbl("_definitions")), skip).
		Scan(&taskID, &defID, &build, &kind, &lo, &hi, &target)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, 0, nil
	}
	if err != nil {
		return false, 0, err
	}
	var got bool
	// The fence, then the build mark (engine/worker/fence.go): a lifecycle statement
	// cancels a step holding the mark instead of waiting for it.
	if err := tx.QueryRow(ctx, "SELECT cardinality("+e.TryFencesSQL("ARRAY[$1::bigint]", true)+") = 1", defID).Scan(&got); err != nil {
		return false, 0, err
	}
	if !got {
		return false, defID, nil
	}
	e.States.Working(id, "building", target+" "+kind)
	if e.Plant.PageHook != nil {
		e.Plant.PageHook("build-task " + kind)
	}
	did, err = e.runBuildTask(ctx, tx, taskID, defID, build, kind, lo, hi)
	return did, 0, err
}

func (e *Builder) runBuildTask(ctx context.Context, tx pgx.Tx, taskID, defID, build int64, kind string, lo, hi *string) (bool, error) {
	t0 := time.Now()
	serr := e.runTask(ctx, tx, taskID, defID, build, kind, lo, hi)
	e.Log.Debug("build task", "definition", defID, "kind", kind, "took", time.Since(t0), "err", serr)
	defer func() { e.Metrics().BuildTaskDone(time.Since(t0), serr) }()
	if serr == nil {
		if serr = tx.Commit(ctx); serr == nil {
			if _, err := e.TryLive(ctx, e.Workers, defID, build); err != nil {
				return true, err
			}
			return true, nil
		}
	}
	tx.Rollback(context.Background())
	if base.Transient(serr) || errors.Is(serr, derive.ErrLockShort) || ctx.Err() != nil {
		return false, serr
	}
	// Charged: backoff 1 s doubling to 5 min; the fifth attempt pauses (surface §13).
	e.ChargeBuildFailure(context.Background(), taskID, defID, build, serr)
	return false, serr
}

func (e *Builder) runTask(ctx context.Context, tx pgx.Tx, taskID, defID, build int64, kind string, lo, hi *string) error {
	// Every lifecycle statement on this definition waits for this
	// transaction (the fence): a locked-path chunk, a sweep or a fresh 1-1
	// chunk stops after about its budget, records its cursor and leaves the
	// rest to the next step.
	stepEnd := time.Now().Add(e.Cfg.BuildStepBudget)
	if err := worker.SetLockTimeout(ctx, tx, e.Cfg.PageLockTimeout); err != nil {
		return err
	}
	// The row lock against pause/drop/alter, like a page (after the fence).
	var version int64
	var raw []byte
	var fresh, heap bool
	err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT version, compiled, coalesce(status_detail ->> 'fresh_build' = build_id::text, false), %s
		FROM %s d WHERE id = $1 AND build_id = $2 AND status = 'backfilling' AND verified FOR SHARE`, HeapBuilding("d"), e.Tbl("_definitions")), defID, build).Scan(&version, &raw, &fresh, &heap)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // superseded; the task row dies with its build
	}
	if err != nil {
		return err
	}
	paused, err := e.PausedOf(ctx, tx, []int64{defID}) // after the lock, as a page does
	if err != nil {
		return err
	}
	cd, err := e.CompiledForPaused(defID, version, raw, paused[defID])
	if err != nil {
		return err
	}
	if kind == "sweep" {
		return e.sweepStep(ctx, tx, taskID, cd, lo, stepEnd)
	}
	if kind == "refresh" {
		return e.refreshStep(ctx, tx, taskID, cd)
	}
	if kind == "groups" {
		return e.groupsStep(ctx, tx, taskID, cd, fresh, heap)
	}
	if kind == "index" {
		return e.indexStep(ctx, tx, taskID, cd)
	}
	if kind == "plan" {
		return e.planStep(ctx, tx, taskID, defID, build, cd, fresh, heap, lo, stepEnd)
	}
	return e.chunkStep(ctx, tx, taskID, defID, build, cd, fresh, heap, lo, hi, stepEnd)
}

// planStep is one step of a build's plan task: one step of the walk per
// transaction; the task keeps its cursor (lo) and the rows counted so far
// (rows_done, while open), so a lifecycle statement waits for one step,
// never a whole-table walk, and a killed worker's successor goes on from
// the last commit.
func (e *Builder) planStep(ctx context.Context, tx pgx.Tx, taskID, defID, build int64, cd *derive.CompiledDef, fresh, heap bool, lo *string, stepEnd time.Time) error {
	n, next, finished, err := e.plan(ctx, tx, cd, build, fresh, heap, lo, stepEnd)
	if err != nil {
		return err
	}
	if n > 0 {
		// Chunks to run: an idle worker starts on them while this one
		// plans on (the sealed channel wakes drain workers only).
		if _, err := tx.Exec(ctx, "SELECT pg_notify($1, 'build')", e.Channel("sealed")); err != nil {
			return err
		}
	}
	if !finished {
		_, err = tx.Exec(ctx, fmt.Sprintf("UPDATE %s SET lo = $2, rows_done = coalesce(rows_done, 0) + $3 WHERE id = $1",
			e.Tbl("_build_tasks")), taskID, next, n)
		return err
	}
	var total int64
	if err := tx.QueryRow(ctx, fmt.Sprintf(`UPDATE %[1]s t SET state = 'done', rows_done = 0
		FROM (SELECT coalesce(rows_done, 0) AS before FROM %[1]s WHERE id = $1) o
		WHERE t.id = $1 RETURNING o.before + $2::bigint`, e.Tbl("_build_tasks")), taskID, n).Scan(&total); err != nil {
		return err
	}
	_, err = tx.Exec(ctx, fmt.Sprintf("UPDATE %s SET build_rows_estimated = $2 WHERE id = $1 AND build_id = $3",
		e.Tbl("_definitions")), defID, total, build)
	return err
}

// chunkStep runs one build chunk over the key range (lo, hi]: read the
// range's keys, then lock and re-derive them like a page, or (fresh, heap
// and set-based rebuilds) one statement over the range.
func (e *Builder) chunkStep(ctx context.Context, tx pgx.Tx, taskID, defID, build int64, cd *derive.CompiledDef, fresh, heap bool, lo, hi *string, stepEnd time.Time) error {
	c := cd.C
	var err error
	if _, err := tx.Exec(ctx, "SELECT set_config('trellis.origin', 'unknown', true), set_config('trellis.hop', '1', true)"); err != nil {
		return err
	}
	where, args := sqlgen.RangeWhere(c, lo, hi, 1)
	tgtConds, _ := sqlgen.RangeConds(c, "t2", lo, hi, 1)
	done := int64(-1)
	if heap {
		if done, err = e.heapChunk(ctx, tx, cd, build, cd.HeapSQL(where), args); err != nil || done < 0 {
			return err // done < 0: the build was sent back to a locked-path rebuild
		}
	} else if fresh {
		// One set-based statement over the whole chunk: a lifecycle
		// statement cancels it rather than waiting (engine/worker/fence.go, the build
		// mark). Cutting fresh chunks to the step budget cost the 1M-row
		// 1-1 build ~20 % and a 100,000-group build about twice (B8,
		// 2026-12-01).
		if done, err = e.setChunk(ctx, tx, cd, build, execRows(ctx, tx, cd.FreshSQL(where, tgtConds), args)); err != nil {
			return err
		}
	} else if !e.Plant.LockedRebuilds && cd.SetRebuild() {
		// A rebuild's chunk, set-based too: the same lock orders it with
		// the pages that keep applying meanwhile (see setChunk). Keys the
		// source lacks are the sweep's.
		stmt := func() (n int64, err error) {
			if cd.RowRebuild() { // 1-1
				err = tx.QueryRow(ctx, cd.RebuildSQL(where, tgtConds), args...).Scan(&n)
				return n, err
			}
			var tids []pgtype.TID
			if err = tx.QueryRow(ctx, cd.RebuildAggSQL(where), args...).Scan(&n, &tids); err != nil {
				return 0, err
			}
			return n, derive.TidyGroups(ctx, tx, cd, tids)
		}
		if done, err = e.setChunk(ctx, tx, cd, 0, stmt); err != nil {
			return err
		}
	}
	if done < 0 {
		var more bool
		if done, more, err = e.lockedChunk(ctx, tx, taskID, cd, where, args, stepEnd); err != nil || more {
			return err
		}
	}
	_, err = tx.Exec(ctx, fmt.Sprintf("UPDATE %s SET state = 'done', rows_done = coalesce(rows_done, 0) + $2 WHERE id = $1", e.Tbl("_build_tasks")), taskID, done)
	if err != nil {
		return err
	}
	// A worker that found only this chunk's build's last tasks, waiting
	// for it, went idle: wake it (drain workers only, as for the plan).
	if _, err := tx.Exec(ctx, "SELECT pg_notify($1, 'build')", e.Channel("sealed")); err != nil {
		return err
	}
	// A chunk that commits ends an earlier build's recorded failure (the
	// transform was paused by it and resumed since).
	_, err = tx.Exec(ctx, fmt.Sprintf(`UPDATE %s SET status_detail = nullif(status_detail - 'backfill_failure', '{}'::jsonb)
		WHERE id = $1 AND status_detail ? 'backfill_failure'`, e.Tbl("_definitions")), defID)
	return err
}

// lockedChunk is a chunk's locked path: the range's keys in key order,
// re-derived slice by slice until the step's budget (until) is spent. more
// says the step stopped early and recorded its cursor, so that the next
// step goes on with (last applied key, hi].
func (e *Builder) lockedChunk(ctx context.Context, tx pgx.Tx, taskID int64, cd *derive.CompiledDef, where string, args []any, stepEnd time.Time) (done int64, more bool, err error) {
	c := cd.C
	q := "SELECT " + model.KeySQL(base.Ident(model.SourceAlias), c.Key, c.KeyNullable) + " FROM " + c.Source() + " AS " + base.Ident(model.SourceAlias) + where
	until := stepEnd
	if c.KeyNullable {
		until = time.Time{} // no typed cursor: the range is one step (sqlgen.RangeWhere)
	} else {
		q += " ORDER BY " + sqlgen.Joinf(len(c.Key), func(i int) string { return base.Ident(model.SourceAlias) + "." + base.Ident(c.Key[i].Name) }, ", ")
	}
	rows, err := tx.Query(ctx, q, args...)
	if err != nil {
		return 0, false, err
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, false, err
	}
	n, err := e.applyChunk(ctx, tx, cd, keys, until)
	if err != nil {
		return 0, false, err
	}
	if n < len(keys) {
		_, err = tx.Exec(ctx, fmt.Sprintf("UPDATE %s SET lo = $2, rows_done = coalesce(rows_done, 0) + $3 WHERE id = $1",
			e.Tbl("_build_tasks")), taskID, keys[n-1], n)
		return 0, true, err
	}
	return int64(n), false, nil
}

// refreshStep rewrites the aggregate fields a field resume released
// (status_detail.refresh_columns) for every group, from the accumulators
// and ledger kept while they were paused. The ledger's SHARE lock waits out
// and holds off pages writing this definition, so the statement after it
// reads every committed entry; pages after it write the fields themselves.
func (e *Builder) refreshStep(ctx context.Context, tx pgx.Tx, taskID int64, cd *derive.CompiledDef) error {
	var cols []string
	if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT ARRAY(SELECT jsonb_array_elements_text(coalesce(status_detail -> 'refresh_columns', '[]')))
		FROM %s WHERE id = $1`, e.Tbl("_definitions")), cd.ID).Scan(&cols); err != nil {
		return err
	}
	var todo []string
	for _, c := range cols {
		if !cd.Paused[c] {
			todo = append(todo, c)
		}
	}
	if q := cd.RefreshSQL(todo); q != "" {
		if _, err := tx.Exec(ctx, "LOCK TABLE "+cd.C.Ledger()+" IN SHARE MODE"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, q); err != nil {
			return err
		}
	}
	// The columns stay listed until the build goes live (tryLive clears
	// them under its row lock): updating the definition row here, which
	// this task and every page share-lock, while holding the ledger SHARE
	// that those pages wait for, starved forever behind them.
	return e.taskDone(ctx, tx, taskID)
}

// setChunk builds a chunk of a fresh build (§12.8 fast path; freshBuild
// is its id) or of a rebuild (freshBuild 0) with one set-based statement,
// stmt, instead of per-key locks and re-derives; stmt returns the rows it
// read or wrote. It first locks the ledger against this definition's pages
// (every page takes ROW EXCLUSIVE on it before writing either table), then
// stmt reads the range, so its read is newer than every page that wrote
// these keys, and every page after it re-derives from a newer read still:
// the ordering a page's entry lock gives, for the whole range at once.
// A fresh chunk: because the ledger and target were empty at the build
// start, a key a page already wrote is correct up to changes still pending
// (which later pages apply) and is skipped; every other key is written
// from the read: 1-1 target rows (no ledger entries: a page creates one
// when it needs it), or aggregate ledger entries only, the group rows
// being written once by the build's groups step (groupsStep). A rebuild's
// chunk re-derives every key of its range from the read: 1-1 rows that
// differ rewritten, missing ones inserted (rebuildSQL); aggregate entries
// updated or inserted and their differences added to the groups as a page
// adds them (rebuildAggSQL). 1-1 chunks share the lock and run in
// parallel; aggregate chunks write the ledger, so they take SHARE ROW
// EXCLUSIVE and run one at a time. It returns stmt's rows, or -1 when stmt
// failed on the data (an expression error, a row edited into the target by
// hand): the chunk then takes the locked path, which isolates the keys.
func (e *Builder) setChunk(ctx context.Context, tx pgx.Tx, cd *derive.CompiledDef, freshBuild int64, stmt func() (int64, error)) (int64, error) {
	agg := cd.C.Spec.IsAggregate()
	mode := "SHARE"
	if agg {
		mode = "SHARE ROW EXCLUSIVE"
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE "+cd.C.Ledger()+" IN "+mode+" MODE"); err != nil {
		return 0, err
	}
	if agg && freshBuild != 0 {
		// With the chunk, atomically: a build whose chunk wrote entries
		// only cannot go live before its groups are written. Idempotent,
		// so a build planned by an older binary gets one too. (A rebuild
		// is given its groups task when it starts: addSweep.)
		if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %[1]s (definition_id, build_id, kind)
			SELECT $1, $2, 'groups' WHERE NOT EXISTS (SELECT 1 FROM %[1]s WHERE build_id = $2 AND kind = 'groups')`,
			e.Tbl("_build_tasks")), cd.ID, freshBuild); err != nil {
			return 0, err
		}
	}
	// The range is sorted (entries go into the ledger's index in order)
	// in memory rather than in temporary files.
	if _, err := tx.Exec(ctx, "SET LOCAL work_mem = '64MB'"); err != nil {
		return 0, err
	}
	n, failed, err := underSavepoint(ctx, tx, stmt)
	if failed != nil {
		e.Log.Info("set-based build chunk failed; taking the locked path", "definition", cd.ID, "err", failed)
		return -1, nil
	}
	return n, err
}

// execRows is a chunk statement run for the rows it writes.
func execRows(ctx context.Context, tx pgx.Tx, q string, args []any) func() (int64, error) {
	return func() (int64, error) {
		tag, err := tx.Exec(ctx, q, args...)
		return tag.RowsAffected(), err
	}
}

// underSavepoint runs a chunk's statement under a savepoint and returns its
// rows. A data error (the rows, not the engine: poisonous) rolls back only
// stmt's work and comes back as failed; any other error as err.
func underSavepoint(ctx context.Context, tx pgx.Tx, stmt func() (int64, error)) (n int64, failed, err error) {
	if _, err := tx.Exec(ctx, "SAVEPOINT trellis_fresh"); err != nil {
		return 0, nil, err
	}
	if n, err = stmt(); err != nil {
		if !quarantine.Poisonous(err) {
			return 0, nil, err
		}
		if _, rerr := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT trellis_fresh"); rerr != nil {
			return 0, nil, rerr
		}
		return 0, err, nil
	}
	_, err = tx.Exec(ctx, "RELEASE SAVEPOINT trellis_fresh")
	return n, nil, err
}

// groupsStep is the last task of a fresh aggregate build: once every chunk
// is done it writes every group row from the ledger in one statement, so a
// build writes each group once instead of upserting it from every chunk.
//
// Why pages running during the build stay exactly-once: a page applies a
// key by diffing its ledger entry (old) against a fresh read (new) and
// adding the difference to the group rows. Before this step those rows
// lack the chunks' entries, so what a page leaves there is a partial sum
// (a group may even show negative counts, or vanish at zero members while
// chunk entries still hold members). None of it is read: the definition is
// backfilling, and this step discards it. It takes the ledger SHARE ROW
// EXCLUSIVE, which waits out every page in flight and holds off new ones
// (a page takes ROW EXCLUSIVE on the ledger before writing either table),
// so the ledger it reads holds every committed entry, each one the key's
// state as of a read after which every change is still pending in the log
// or deferred. It then deletes every target row and inserts each group
// with members exactly as the ledger's entries sum up (MIN, MAX, JSONB_AGG
// aggregated from them too). From its commit on, target = f(ledger), the
// invariant pages maintain by diffs, and they apply the pending changes on
// top; the status goes live only after this commit (tryLive waits for
// every task of the build), so no reader of a live target sees a group
// written before this step.
//
// Every aggregate rebuild ends with this step too (addSweep), reconciling
// rather than rewriting: a fresh build interrupted after some chunks (PAUSE,
// request_backfill, ALTER, a capture repair) leaves entries whose groups
// were never written, and a rebuild's re-derives only add differences to
// the target, so without it those members would never reach the target.
// Reconciling touches only groups that differ and leaves paused fields as
// they are; it also removes group rows edited into the target by hand.
func (e *Builder) groupsStep(ctx context.Context, tx pgx.Tx, taskID int64, cd *derive.CompiledDef, fresh, heap bool) error {
	c := cd.C
	// A heap build's ledger has no writer left but its index task, whose
	// SHARE lock a read shares: the two run side by side.
	if !heap {
		if _, err := tx.Exec(ctx, "LOCK TABLE "+c.Ledger()+" IN SHARE ROW EXCLUSIVE MODE"); err != nil {
			return err
		}
	}
	// buildTry took this task with every other one done; chunks are never
	// reopened, so this is a check, not a wait.
	var open bool
	if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %[1]s o, %[1]s t
		WHERE t.id = $1 AND o.build_id = t.build_id AND o.kind NOT IN ('groups', 'index') AND o.state <> 'done')`, e.Tbl("_build_tasks")), taskID).Scan(&open); err != nil {
		return err
	}
	if open {
		return nil
	}
	if _, err := tx.Exec(ctx, "SELECT set_config('trellis.origin', 'unknown', true), set_config('trellis.hop', '1', true), set_config('work_mem', '64MB', true)"); err != nil {
		return err
	}
	stmts := []string{"DELETE FROM " + c.Target(), cd.GroupsSQL}
	if heap {
		stmts = stmts[1:] // no page wrote the target
	}
	if !fresh {
		stmts = []string{cd.ReconcileSQL, cd.PruneSQL}
	}
	for _, q := range stmts {
		tag, err := tx.Exec(ctx, q)
		if err != nil {
			return err
		}
		e.Log.Debug("build groups step", "definition", cd.ID, "fresh", fresh, "rows", tag.RowsAffected())
	}
	return e.taskDone(ctx, tx, taskID)
}

// A heap build is a fresh aggregate build that keeps drain pages off the
// definition until it is live: a page defers the definition's keys
// (readers) and they stay deferred (resolveDeferred) until tryLive ends the
// build. With no page writing the ledger, the chunks need neither its lock
// nor a probe per row for entries a page wrote, so they run in parallel and
// insert into the heap alone; the ledger's key index, dropped when the
// build started (startHeapBuild), is built once, sorted, by an index task
// beside the groups task, which writes every group from the ledger. At
// 1,000,000 rows into 100,000 groups the per-row index inserts and probes
// were three quarters of the build (B8).
//
// Why the deferred keys come out exact: every chunk reads its range after
// the build started, and every change a chunk's read missed was committed
// after that read, so it is in the log (or deferred) and is re-derived
// after live against the entry the chunk wrote. A change a chunk's read
// already saw re-derives to the same entry: no difference, nothing moves.
// A truncate of the source during the build is deferred whole and rebuilds.

// taskDone closes a build task that keeps no count of rows (groups, index,
// refresh, a finished sweep).
func (e *Builder) taskDone(ctx context.Context, tx pgx.Tx, taskID int64) error {
	_, err := tx.Exec(ctx, fmt.Sprintf("UPDATE %s SET state = 'done', rows_done = 0 WHERE id = $1", e.Tbl("_build_tasks")), taskID)
	return err
}

// restartBuild sends build of definition id back to waiting_to_backfill
// (the staging worker starts a new one), when cond (SQL over the
// definition row d, or "") holds: build state cleared, the drop keys
// removed from status_detail and detail (a JSON object) merged in, the
// build's tasks deleted but those another transaction holds (a superseded
// build's tasks are never run). It reports whether it did.
func (e *Builder) restartBuild(ctx context.Context, tx pgx.Tx, id, build int64, drop []string, detail, cond string) (bool, error) {
	if cond != "" {
		cond = " AND " + cond
	}
	tag, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s d SET status = 'waiting_to_backfill', version = version + 1,
		  build_started_at = NULL, build_rows_done = NULL, build_rows_estimated = NULL,
		  status_detail = (coalesce(status_detail, '{}') - $3::text[]) || $4::jsonb
		WHERE id = $1 AND build_id = $2 AND status = 'backfilling'`+cond, e.Tbl("_definitions")), id, build, drop, detail)
	if err != nil || tag.RowsAffected() == 0 {
		return false, err
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(`DELETE FROM %[1]s WHERE id IN (SELECT id FROM %[1]s WHERE build_id = $1 FOR UPDATE SKIP LOCKED)`,
		e.Tbl("_build_tasks")), build); err != nil {
		return false, err
	}
	_, err = tx.Exec(ctx, "SELECT pg_notify($1, 'build')", e.Channel("wake"))
	return err == nil, err
}

// TryLive flips a finished build to live. The definition row is locked
// first, and the check runs in a new statement, so two last chunks cannot
// each see the other unfinished (H8).
func (e *Builder) TryLive(ctx context.Context, q interface {
	BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error)
}, id, build int64) (bool, error) {
	tx, err := q.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx)
	// Cheap check first: the fence below waits for every page holding the
	// definition, and new pages defer its keys meanwhile.
	var pending bool
	if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT NOT EXISTS (SELECT 1 FROM %[1]s WHERE build_id = $1 AND kind = 'plan')
		OR EXISTS (SELECT 1 FROM %[1]s WHERE build_id = $1 AND state <> 'done')`, e.Tbl("_build_tasks")), build).Scan(&pending); err != nil {
		return false, err
	}
	if pending {
		return false, nil
	}
	// The fence first, so pages cannot keep the row lock from us (engine/worker/fence.go).
	if got, err := e.StagingFence(ctx, tx, id); err != nil || !got {
		return false, err
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf("SELECT 1 FROM %s WHERE id = $1 FOR UPDATE", e.Tbl("_definitions")), id); err != nil {
		return false, err
	}
	// A truncate of a read table deferred during the build (a heap build
	// defers every page) means a rebuild: start it instead of going live
	// on entries the truncate emptied (resolveDeferred drops the deferred
	// keys of a definition that is not applying; its rebuild covers them).
	if restarted, err := e.restartBuild(ctx, tx, id, build, []string{"fresh_build", "heap_build", "refresh_columns"},
		`{"rebuild_reason": "a truncate met it building"}`,
		fmt.Sprintf("EXISTS (SELECT 1 FROM %s x WHERE x.definition_id = d.id AND x.whole)", e.Tbl("_deferred"))); err != nil || restarted {
		if err == nil {
			err = tx.Commit(ctx)
		}
		return false, err
	}
	// Entries kept for the fresh build's sake (H10) stay: harmless to pages
	// (a non-member or a deleted key's entry is re-derived like any other),
	// removed when a page next re-derives their key, and swept by a rebuild.
	tag, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s SET status = 'live', build_started_at = NULL,
		  build_rows_done = NULL, build_rows_estimated = NULL,
		  status_detail = nullif(coalesce(status_detail, '{}') - 'fresh_build' - 'heap_build' - 'classic_build' - 'refresh_columns', '{}')
		WHERE id = $1 AND build_id = $2 AND status = 'backfilling'
		  AND EXISTS (SELECT 1 FROM %s WHERE build_id = $2 AND kind = 'plan')
		  AND NOT EXISTS (SELECT 1 FROM %s WHERE build_id = $2 AND state <> 'done')`,
		e.Tbl("_definitions"), e.Tbl("_build_tasks"), e.Tbl("_build_tasks")), id, build)
	if err != nil {
		return false, err
	}
	if tag.RowsAffected() == 0 {
		return false, nil
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf("DELETE FROM %s WHERE build_id = $1", e.Tbl("_build_tasks")), build); err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, "SELECT pg_notify($1, 'live')", e.Channel("wake")); err != nil {
		return false, err
	}
	return true, tx.Commit(ctx)
}
