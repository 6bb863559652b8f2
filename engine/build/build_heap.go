package build

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/catalog"
	"github.com/trellis-proxy/trellis-proxy/engine/derive"
	"github.com/trellis-proxy/trellis-proxy/engine/model"
	"github.com/trellis-proxy/trellis-proxy/engine/worker"
)

// Heap builds: a fresh aggregate build that writes its ledger without a
// key index and builds the index beside the groups step.

// startHeapBuild decides, inside startBuild's transaction, whether the
// fresh build of aggregate c becomes a heap build, and if so drops its
// (empty) ledger's key index. Not when an earlier heap build of it met rows
// that fail (classic, its status_detail's classic_build: the locked path
// isolates them), nor while a
// live process runs an older catalog format (its pages would write the
// ledger), nor when the ledger's lock is not granted at once.
func (e *Builder) startHeapBuild(ctx context.Context, tx pgx.Tx, c *model.Compiled, classic bool) (bool, error) {
	if classic || e.Plant.ClassicBuilds {
		return false, nil
	}
	var older bool
	if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s WHERE format < $1 AND last_seen > now() - $2::interval)`,
		e.Tbl("_workers")), catalog.FormatVersion, fmt.Sprintf("%d milliseconds", e.Cfg.WorkerTTL.Milliseconds())).Scan(&older); err != nil || older {
		return false, err
	}
	index, constraint, err := ledgerKeyIndex(ctx, tx, c)
	if err != nil || index == nil {
		return err == nil, err
	}
	drop := "DROP INDEX " + *index // schema-qualified and quoted by regclass
	if constraint != nil {
		drop = "ALTER TABLE " + c.Ledger() + " DROP CONSTRAINT " + base.Ident(*constraint)
	}
	if _, err := tx.Exec(ctx, "SAVEPOINT trellis_heap"); err != nil {
		return false, err
	}
	if err := worker.SetLockTimeout(ctx, tx, e.Cfg.InstallLockTimeout); err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, drop); err != nil {
		if !worker.IsLockTimeout(err) {
			return false, err
		}
		_, err = tx.Exec(ctx, "ROLLBACK TO SAVEPOINT trellis_heap")
		return false, err
	}
	_, err = tx.Exec(ctx, "RELEASE SAVEPOINT trellis_heap; SET LOCAL lock_timeout = DEFAULT")
	return err == nil, err
}

// ledgerKeyIndex finds the unique index on an aggregate ledger's key k (the
// primary key it is created with, or the index a heap build's index task
// built) and the constraint it backs, if any.
func ledgerKeyIndex(ctx context.Context, q base.Querier, c *model.Compiled) (index, constraint *string, err error) {
	err = q.QueryRow(ctx, `SELECT i.indexrelid::regclass::text, con.conname::text
		FROM pg_catalog.pg_index i
		JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attname = 'k'
		LEFT JOIN pg_catalog.pg_constraint con ON con.conindid = i.indexrelid AND con.conrelid = i.indrelid
		WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indisvalid AND i.indnatts = 1 AND i.indkey[0] = a.attnum
		  AND i.indpred IS NULL AND i.indexprs IS NULL
		LIMIT 1`, c.Ledger()).Scan(&index, &constraint)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, nil
	}
	return index, constraint, err
}

// indexStep is a heap build's index task: the ledger's key index, built
// once and sorted after the chunks, beside the groups task (both only
// read the ledger), before the build goes live and pages come back.
func (e *Builder) indexStep(ctx context.Context, tx pgx.Tx, taskID int64, cd *derive.CompiledDef) error {
	if err := e.ensureLedgerKey(ctx, tx, cd.C); err != nil {
		return err
	}
	return e.taskDone(ctx, tx, taskID)
}

// ensureLedgerKey gives an aggregate ledger its key index back when a heap
// build dropped it: in the heap build's index task, or when a build that
// follows an interrupted heap build starts (its pages and locked-path
// chunks lock entries through the index).
func (e *Builder) ensureLedgerKey(ctx context.Context, tx pgx.Tx, c *model.Compiled) error {
	if index, _, err := ledgerKeyIndex(ctx, tx, c); err != nil || index != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "SET LOCAL maintenance_work_mem = '256MB'"); err != nil {
		return err
	}
	// A plain unique index (SHARE lock): a groups task reading the ledger
	// meanwhile is not held up, as ADD PRIMARY KEY's exclusive lock would.
	_, err := tx.Exec(ctx, "CREATE UNIQUE INDEX ON "+c.Ledger()+" (k)")
	return err
}

// heapChunk writes a heap build's chunk: the range's ledger entries, in one
// statement, with no lock beyond the insert's own (chunks run in
// parallel). Rows that fail send the build back, in this transaction, to a
// rebuild on the locked path, which isolates them (done = -1); the entries
// other chunks committed stay and are re-derived by it.
func (e *Builder) heapChunk(ctx context.Context, tx pgx.Tx, cd *derive.CompiledDef, build int64, q string, args []any) (int64, error) {
	n, failed, err := underSavepoint(ctx, tx, execRows(ctx, tx, q, args))
	if failed == nil {
		return n, err
	}
	e.Log.Info("heap build chunk failed; rebuilding on the locked path", "definition", cd.ID, "err", failed)
	_, err = e.restartBuild(ctx, tx, cd.ID, build, []string{"fresh_build", "heap_build"}, `{"classic_build": true}`, "")
	return -1, err
}

// HeapBuilding is the SQL condition that definition row alias is in a heap
// build: its pages are deferred until it is live.
func HeapBuilding(alias string) string {
	return "coalesce(" + alias + ".status = 'backfilling' AND " + alias + ".status_detail ->> 'heap_build' = " + alias + ".build_id::text, false)"
}
