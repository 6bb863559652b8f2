package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func codeOf(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func (e *Engine) stagingLockKey() int64 { return lockKey("trellis-staging:" + e.cfg.Schema) }

// stagingCandidate competes for the instance's staging lock (§12.11) on a
// dedicated connection and, while holding it, does the staging work on that
// same connection, so a dead connection stops the work and frees the lock.
func (e *Engine) stagingCandidate(ctx context.Context) error {
	for ctx.Err() == nil {
		err := e.stagingSession(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			e.log.Warn("staging session ended", "err", err)
		}
		sleepCtx(ctx, e.cfg.TakeoverInterval/4+10*time.Millisecond)
	}
	return nil
}

func (e *Engine) stagingSession(ctx context.Context) error {
	cc := e.workers.Config().ConnConfig.Copy()
	cc.RuntimeParams["application_name"] = "trellis-staging " + e.cfg.ProcessID
	// The server frees the lock within seconds when this host disappears.
	cc.RuntimeParams["tcp_keepalives_idle"] = "5"
	cc.RuntimeParams["tcp_keepalives_interval"] = "2"
	cc.RuntimeParams["tcp_keepalives_count"] = "3"
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for {
		var got bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", e.stagingLockKey()).Scan(&got); err != nil {
			return err
		}
		if got {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(e.cfg.TakeoverInterval):
		}
	}
	e.log.Info("staging worker started", "process", e.cfg.ProcessID)
	return e.stage(ctx, conn)
}

// stage is the staging worker's loop while it holds the lock.
func (e *Engine) stage(ctx context.Context, conn *pgx.Conn) error {
	seal := time.NewTicker(e.cfg.SealInterval)
	defer seal.Stop()
	pass := time.NewTicker(e.cfg.StagingInterval)
	defer pass.Stop()
	if err := e.stagingPass(ctx, conn); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-seal.C:
			if _, err := e.seal(ctx, conn); err != nil {
				return err
			}
		case <-pass.C:
			if err := e.stagingPass(ctx, conn); err != nil {
				return err
			}
		case <-e.wakeStaging:
			if err := e.stagingPass(ctx, conn); err != nil {
				return err
			}
		}
	}
}

type defRow struct {
	id      int64
	status  string
	buildID *int64
	c       *compiled
	reads   []readRow
}

type readRow struct {
	table string
	role  string
}

func (e *Engine) loadDefinitions(ctx context.Context, q Querier, where string) ([]*defRow, error) {
	rows, err := q.Query(ctx, fmt.Sprintf(`SELECT d.id, d.status, d.build_id, d.compiled,
		  coalesce((SELECT jsonb_agg(jsonb_build_array(r.table_name, r.role)) FROM %s r WHERE r.definition_id = d.id), '[]')
		FROM %s d %s ORDER BY d.id`, e.tbl("_definition_reads"), e.tbl("_definitions"), where))
	if err != nil {
		return nil, err
	}
	var out []*defRow
	for rows.Next() {
		d := &defRow{c: &compiled{}}
		var raw, reads []byte
		if err := rows.Scan(&d.id, &d.status, &d.buildID, &raw, &reads); err != nil {
			rows.Close()
			return nil, err
		}
		if err := json.Unmarshal(raw, d.c); err != nil {
			rows.Close()
			return nil, err
		}
		var rr [][2]string
		if err := json.Unmarshal(reads, &rr); err != nil {
			rows.Close()
			return nil, err
		}
		for _, r := range rr {
			d.reads = append(d.reads, readRow{r[0], r[1]})
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// stagingPass: capture installs, build starts, live flips, retirement,
// uninstalls, then a seal.
func (e *Engine) stagingPass(ctx context.Context, conn *pgx.Conn) error {
	defs, err := e.loadDefinitions(ctx, conn, "WHERE d.status IN ('waiting_to_backfill','backfilling','live')")
	if err != nil {
		return err
	}
	// Schema changes under applying definitions pause exactly those (§12.9).
	if err := e.checkSchemas(ctx, conn); err != nil {
		e.log.Warn("capture health check failed", "err", err)
		if conn.IsClosed() {
			return err
		}
	} else if defs, err = e.loadDefinitions(ctx, conn, "WHERE d.status IN ('waiting_to_backfill','backfilling','live')"); err != nil {
		return err
	}
	status := map[string]string{} // target text -> status
	for _, d := range defs {
		status[d.c.TargetText] = d.status
	}
	// Capture every read table (sources and upstream targets).
	captured := map[string]bool{}
	plans := map[string]*capturePlan{}
	for _, d := range defs {
		for _, r := range d.reads {
			if _, ok := plans[r.table]; !ok {
				plans[r.table] = e.newCapturePlan(r.table, d.c.Key, d.c.KeyNullable)
			}
		}
	}
	deadline := time.Now().Add(time.Second)
	for t, p := range plans {
		ok, err := e.captureCurrent(ctx, conn, p)
		if err != nil {
			return err
		}
		if !ok && time.Now().Before(deadline) {
			// A tampered capture is repaired inside installCapture, under
			// the table lock (the readers rebuild in the same transaction).
			ok, err = e.installCapture(ctx, conn, p)
			e.log.Info("capture install", "table", t, "ok", ok, "err", err)
			if err != nil {
				e.log.Warn("capture install failed", "table", t, "err", err)
				if conn.IsClosed() {
					return err
				}
				continue
			}
		}
		captured[t] = ok
	}
	// Start builds in dependency order (D15): every read captured, no
	// upstream target still waiting.
	for _, d := range defs {
		if d.status != "waiting_to_backfill" {
			continue
		}
		// A definition without reads is never ready (it would build uncaptured).
		ready := len(d.reads) > 0
		for _, r := range d.reads {
			if !captured[r.table] || (r.role == "upstream_target" && status[r.table] == "waiting_to_backfill") {
				ready = false
			}
		}
		if ready {
			if err := e.startBuild(ctx, conn, d.id); err != nil {
				return err
			}
		}
	}
	for _, d := range defs {
		if d.status == "backfilling" && d.buildID != nil {
			if _, err := e.tryLive(ctx, conn, d.id, *d.buildID); err != nil {
				return err
			}
		}
	}
	if err := e.retire(ctx, conn); err != nil {
		return err
	}
	// Capture no reader needs any more.
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT table_name FROM %s ct WHERE NOT EXISTS
		(SELECT 1 FROM %s r WHERE r.table_name = ct.table_name)`, e.tbl("_captured_tables"), e.tbl("_definition_reads")))
	if err != nil {
		return err
	}
	unread, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, t := range unread {
		if err := e.uninstallCapture(ctx, conn, t); err != nil {
			e.log.Warn("capture uninstall failed", "table", t, "err", err)
			if conn.IsClosed() {
				return err
			}
		}
	}
	_, err = e.seal(ctx, conn)
	return err
}

// startBuild moves a definition to backfilling with a plan task (§12.8 step 3).
func (e *Engine) startBuild(ctx context.Context, conn *pgx.Conn, id int64) error {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	var build int64
	err = tx.QueryRow(ctx, fmt.Sprintf(`UPDATE %s d SET status = 'backfilling', build_id = nextval('%s'),
		  version = version + 1, build_kind = 'initial', build_started_at = now(), build_rows_done = 0,
		  build_rows_estimated = (SELECT CASE WHEN reltuples < 0 THEN NULL ELSE reltuples::bigint END FROM pg_class WHERE oid = d.source_oid)
		WHERE id = $1 AND status = 'waiting_to_backfill' RETURNING build_id`,
		e.tbl("_definitions"), e.tbl("_build_seq")), id).Scan(&build)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (definition_id, build_id, kind) VALUES ($1, $2, 'plan')`,
		e.tbl("_build_tasks")), id, build); err != nil {
		return err
	}
	if err := e.addSweep(ctx, tx, id, build); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "SELECT pg_notify($1, 'build')", e.channel("wake")); err != nil {
		return err
	}
	err = tx.Commit(ctx)
	e.log.Info("build started", "definition", id, "build", build, "err", err)
	return err
}

// tryLive flips a finished build to live. The definition row is locked
// first, and the check runs in a new statement, so two last chunks cannot
// each see the other unfinished (H8).
func (e *Engine) tryLive(ctx context.Context, q interface {
	BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error)
}, id, build int64) (bool, error) {
	tx, err := q.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx)
	// Cheap check first: the row lock below queues behind every page holding
	// the definition FOR SHARE, and pages queue behind it.
	var pending bool
	if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT NOT EXISTS (SELECT 1 FROM %[1]s WHERE build_id = $1 AND kind = 'plan')
		OR EXISTS (SELECT 1 FROM %[1]s WHERE build_id = $1 AND state <> 'done')`, e.tbl("_build_tasks")), build).Scan(&pending); err != nil {
		return false, err
	}
	if pending {
		return false, nil
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf("SELECT 1 FROM %s WHERE id = $1 FOR UPDATE", e.tbl("_definitions")), id); err != nil {
		return false, err
	}
	tag, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s SET status = 'live', build_started_at = NULL,
		  build_rows_done = NULL, build_rows_estimated = NULL
		WHERE id = $1 AND build_id = $2 AND status = 'backfilling'
		  AND EXISTS (SELECT 1 FROM %s WHERE build_id = $2 AND kind = 'plan')
		  AND NOT EXISTS (SELECT 1 FROM %s WHERE build_id = $2 AND state <> 'done')`,
		e.tbl("_definitions"), e.tbl("_build_tasks"), e.tbl("_build_tasks")), id, build)
	if err != nil {
		return false, err
	}
	if tag.RowsAffected() == 0 {
		return false, nil
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf("DELETE FROM %s WHERE build_id = $1", e.tbl("_build_tasks")), build); err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, "SELECT pg_notify($1, 'live')", e.channel("wake")); err != nil {
		return false, err
	}
	return true, tx.Commit(ctx)
}

// seal closes a batch if new log rows became visible (§12.4).
func (e *Engine) seal(ctx context.Context, conn *pgx.Conn) (bool, error) {
	// Read-only probe first: an idle instance writes nothing. While two
	// batches wait, sealing more only adds per-page overhead: let the next
	// batch grow instead (bigger batches also get 8 buckets, drained in parallel).
	var any bool
	t0 := time.Now()
	if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT (SELECT count(*) FROM %[2]s WHERE state <> 'drained') < 2
		AND EXISTS (SELECT 1 FROM %[1]s c, (SELECT snap FROM %[2]s ORDER BY seq DESC LIMIT 1) p
		WHERE c.txid >= pg_snapshot_xmin(p.snap) AND NOT pg_visible_in_snapshot(c.txid, p.snap))`,
		e.tbl("_change_log"), e.tbl("_batches"))).Scan(&any); err != nil {
		return false, err
	}
	if !any {
		return false, nil
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, fmt.Sprintf("SELECT 1 FROM %s FOR UPDATE", e.tbl("_seal_lock"))); err != nil {
		return false, err
	}
	// A new statement: its snapshot is taken after the lock (H7).
	rows, err := tx.Query(ctx, fmt.Sprintf(`
WITH prev AS (SELECT seq, snap FROM %[1]s ORDER BY seq DESC LIMIT 1),
     cur  AS (SELECT pg_current_snapshot() AS snap),
     win  AS (SELECT c.op FROM %[2]s c, prev, cur
              WHERE c.txid >= pg_snapshot_xmin(prev.snap) AND c.txid < pg_snapshot_xmax(cur.snap)
                AND pg_visible_in_snapshot(c.txid, cur.snap)
                AND NOT pg_visible_in_snapshot(c.txid, prev.snap)),
     sz   AS (SELECT count(*) n, coalesce(bool_or(op = 'truncate'), false) t FROM win),
     b    AS (INSERT INTO %[1]s (seq, snap, row_count, bucket_count, has_truncate, state)
              SELECT prev.seq + 1, cur.snap, sz.n,
                     CASE WHEN sz.t OR sz.n < 256 THEN 1 ELSE 8 END, sz.t, 'sealed'
              FROM prev, cur, sz WHERE sz.n > 0
              RETURNING seq, bucket_count)
INSERT INTO %[3]s (batch_seq, bucket)
SELECT seq, generate_series(0, bucket_count - 1) FROM b
RETURNING batch_seq`, e.tbl("_batches"), e.tbl("_change_log"), e.tbl("_batch_buckets")))
	if err != nil {
		return false, err
	}
	n := 0
	for rows.Next() {
		n++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return false, err
	}
	if n > 0 {
		if _, err := tx.Exec(ctx, "SELECT pg_notify($1, '')", e.channel("sealed")); err != nil {
			return false, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return false, err
	}
	if n > 0 {
		e.metrics().BatchSealed(time.Since(t0))
		e.wakeDrainers()
	}
	return n > 0, nil
}

// retire deletes log rows applied by the newest drained batch, and batch
// rows older than it (§12.11, H5).
func (e *Engine) retire(ctx context.Context, conn *pgx.Conn) error {
	if e.plant.keepLog {
		return nil
	}
	for i := 0; i < 20; i++ {
		tag, err := conn.Exec(ctx, fmt.Sprintf(`
WITH d AS (SELECT snap FROM %[1]s WHERE state = 'drained' ORDER BY seq DESC LIMIT 1)
DELETE FROM %[2]s WHERE ctid = ANY (ARRAY(
  SELECT c.ctid FROM %[2]s c, d
  WHERE c.txid < pg_snapshot_xmax(d.snap) AND pg_visible_in_snapshot(c.txid, d.snap)
  LIMIT %[3]d))`, e.tbl("_batches"), e.tbl("_change_log"), e.cfg.RetireChunk))
		if err != nil {
			return err
		}
		if tag.RowsAffected() < int64(e.cfg.RetireChunk) {
			break
		}
	}
	_, err := conn.Exec(ctx, fmt.Sprintf(`DELETE FROM %[1]s WHERE state = 'drained'
		AND seq < (SELECT max(seq) FROM %[1]s WHERE state = 'drained')`, e.tbl("_batches")))
	return err
}
