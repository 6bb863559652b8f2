package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// buildStep runs one open build task (plan or chunk) of a backfilling
// definition in one transaction holding the task row's lock, like a page.
func (e *Engine) buildStep(ctx context.Context, id string) (bool, error) {
	conn, err := e.workers.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Release()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return false, err
	}
	defer tx.Rollback(context.Background())
	var taskID, defID, build int64
	var kind string
	var lo, hi *string
	err = tx.QueryRow(ctx, fmt.Sprintf(`SELECT t.id, t.definition_id, t.build_id, t.kind, t.lo, t.hi
		FROM %s t JOIN %s d ON d.id = t.definition_id AND d.build_id = t.build_id AND d.status = 'backfilling'
		WHERE t.state = 'open' AND coalesce(t.next_attempt_at, '-infinity') <= now()
		ORDER BY t.kind DESC, t.id LIMIT 1 FOR UPDATE OF t SKIP LOCKED`, e.tbl("_build_tasks"), e.tbl("_definitions"))).
		Scan(&taskID, &defID, &build, &kind, &lo, &hi)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	t0 := time.Now()
	serr := e.runTask(ctx, tx, taskID, defID, build, kind, lo, hi)
	e.log.Debug("build task", "definition", defID, "kind", kind, "took", time.Since(t0), "err", serr)
	defer func() { e.metrics().BuildTaskDone(time.Since(t0), serr) }()
	if serr == nil {
		if serr = tx.Commit(ctx); serr == nil {
			if _, err := e.tryLive(ctx, e.workers, defID, build); err != nil {
				return true, err
			}
			return true, nil
		}
	}
	tx.Rollback(context.Background())
	if transient(serr) || errors.Is(serr, errLockShort) || ctx.Err() != nil {
		return false, serr
	}
	// Charged: backoff 1 s doubling to 5 min; the fifth attempt pauses (surface §13).
	e.chargeBuildFailure(context.Background(), taskID, defID, build, serr)
	return false, serr
}

func (e *Engine) runTask(ctx context.Context, tx pgx.Tx, taskID, defID, build int64, kind string, lo, hi *string) error {
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = '%dms'", e.cfg.PageLockTimeout.Milliseconds())); err != nil {
		return err
	}
	// Fence against pause/drop/alter, like a page.
	var version int64
	var raw []byte
	err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT version, compiled FROM %s WHERE id = $1 AND build_id = $2
		AND status = 'backfilling' FOR SHARE`, e.tbl("_definitions")), defID, build).Scan(&version, &raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // superseded; the task row dies with its build
	}
	if err != nil {
		return err
	}
	paused, err := e.pausedOf(ctx, tx, []int64{defID}) // after the lock, as a page does
	if err != nil {
		return err
	}
	cd, err := e.compiledForPaused(defID, version, raw, paused[defID])
	if err != nil {
		return err
	}
	c := cd.c
	if kind == "sweep" {
		return e.sweepStep(ctx, tx, taskID, cd, lo)
	}
	if kind == "refresh" {
		return e.refreshStep(ctx, tx, taskID, cd)
	}
	if kind == "plan" {
		n, err := e.plan(ctx, tx, cd, build)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, fmt.Sprintf("UPDATE %s SET state = 'done', rows_done = 0 WHERE id = $1", e.tbl("_build_tasks")), taskID)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, fmt.Sprintf("UPDATE %s SET build_rows_estimated = $2 WHERE id = $1 AND build_id = $3",
			e.tbl("_definitions")), defID, n, build)
		return err
	}
	// A chunk: read the range's keys, then lock and re-derive them like a page.
	if _, err := tx.Exec(ctx, "SELECT set_config('trellis.origin', 'unknown', true), set_config('trellis.hop', '1', true)"); err != nil {
		return err
	}
	where, args := e.rangeWhere(c, lo, hi, 1)
	rows, err := tx.Query(ctx, "SELECT "+keySQL(ident(SourceAlias), c.Key, c.KeyNullable)+" FROM "+c.source()+" AS "+
		ident(SourceAlias)+where, args...)
	if err != nil {
		return err
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	if err := e.applyChunk(ctx, tx, cd, keys); err != nil {
		return err
	}
	_, err = tx.Exec(ctx, fmt.Sprintf("UPDATE %s SET state = 'done', rows_done = $2 WHERE id = $1", e.tbl("_build_tasks")), taskID, len(keys))
	if err != nil {
		return err
	}
	// A chunk that commits ends an earlier build's recorded failure (the
	// transform was paused by it and resumed since).
	_, err = tx.Exec(ctx, fmt.Sprintf(`UPDATE %s SET status_detail = nullif(status_detail - 'backfill_failure', '{}'::jsonb)
		WHERE id = $1 AND status_detail ? 'backfill_failure'`, e.tbl("_definitions")), defID)
	return err
}

// rangeWhere renders " WHERE key > lo AND key <= hi" over the source alias,
// comparing typed key columns as a row; parameters start at $first.
func (e *Engine) rangeWhere(c *compiled, lo, hi *string, first int) (string, []any) {
	if c.KeyNullable {
		return "", nil // nullable identities (aggregate targets) build in one chunk
	}
	var conds []string
	var args []any
	cols := joinf(len(c.Key), func(i int) string { return ident(SourceAlias) + "." + ident(c.Key[i].Name) }, ", ")
	bound := func(k string, op string) {
		parts, _ := decodeKey(k, len(c.Key), false)
		var ps []string
		for i, p := range parts {
			args = append(args, *p)
			ps = append(ps, "$"+itoa(first+len(args)-1)+"::text::"+c.Key[i].Type)
		}
		conds = append(conds, "ROW("+cols+") "+op+" ROW("+strings.Join(ps, ", ")+")")
	}
	if lo != nil {
		bound(*lo, ">")
	}
	if hi != nil {
		bound(*hi, "<=")
	}
	if len(conds) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}

// plan walks the source key and records chunk tasks (lo, hi]; it stops at
// the current maximum: later rows are captured.
func (e *Engine) plan(ctx context.Context, tx pgx.Tx, cd *compiledDef, build int64) (int64, error) {
	c := cd.c
	ins := fmt.Sprintf("INSERT INTO %s (definition_id, build_id, kind, lo, hi) VALUES ($1, $2, 'chunk', $3, $4)", e.tbl("_build_tasks"))
	if c.KeyNullable {
		var n int64
		if err := tx.QueryRow(ctx, "SELECT count(*) FROM "+c.source()).Scan(&n); err != nil {
			return 0, err
		}
		_, err := tx.Exec(ctx, ins, cd.id, build, nil, nil)
		return n, err
	}
	order := joinf(len(c.Key), func(i int) string { return ident(SourceAlias) + "." + ident(c.Key[i].Name) }, ", ")
	orderW := joinf(len(c.Key), func(i int) string { return ident(SourceAlias) + "." + ident(c.Key[i].Name) + " DESC" }, ", ")
	var total int64
	var lo *string
	for {
		where, args := e.rangeWhere(c, lo, nil, 2)
		q := "WITH w AS (SELECT " + order + " FROM " + c.source() + " AS " + ident(SourceAlias) + where +
			" ORDER BY " + order + " LIMIT $1) SELECT (SELECT " + keySQL(ident(SourceAlias), c.Key, false) +
			" FROM w AS " + ident(SourceAlias) + " ORDER BY " + orderW + " LIMIT 1), (SELECT count(*) FROM w)"
		var hi *string
		var n int64
		if err := tx.QueryRow(ctx, q, append([]any{e.cfg.BuildChunkSize}, args...)...).Scan(&hi, &n); err != nil {
			return 0, err
		}
		if n == 0 {
			return total, nil
		}
		if _, err := tx.Exec(ctx, ins, cd.id, build, lo, hi); err != nil {
			return 0, err
		}
		total += n
		if n < int64(e.cfg.BuildChunkSize) {
			return total, nil
		}
		lo = hi
	}
}

// refreshStep rewrites the aggregate fields a field resume released
// (status_detail.refresh_columns) for every group, from the accumulators
// and ledger kept while they were paused. The ledger's SHARE lock waits out
// and holds off pages writing this definition, so the statement after it
// reads every committed entry; pages after it write the fields themselves.
func (e *Engine) refreshStep(ctx context.Context, tx pgx.Tx, taskID int64, cd *compiledDef) error {
	var cols []string
	if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT ARRAY(SELECT jsonb_array_elements_text(coalesce(status_detail -> 'refresh_columns', '[]')))
		FROM %s WHERE id = $1`, e.tbl("_definitions")), cd.id).Scan(&cols); err != nil {
		return err
	}
	var todo []string
	for _, c := range cols {
		if !cd.paused[c] {
			todo = append(todo, c)
		}
	}
	if q := cd.refreshSQL(todo); q != "" {
		if _, err := tx.Exec(ctx, "LOCK TABLE "+cd.c.ledger()+" IN SHARE MODE"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, q); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s SET status_detail = CASE
		  WHEN (status_detail -> 'refresh_columns') - $2::text[] = '[]'::jsonb THEN nullif(status_detail - 'refresh_columns', '{}'::jsonb)
		  ELSE jsonb_set(status_detail, '{refresh_columns}', (status_detail -> 'refresh_columns') - $2::text[]) END
		WHERE id = $1 AND status_detail ? 'refresh_columns'`, e.tbl("_definitions")), cd.id, cols); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, fmt.Sprintf("UPDATE %s SET state = 'done', rows_done = 0 WHERE id = $1", e.tbl("_build_tasks")), taskID)
	return err
}
