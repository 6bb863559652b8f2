package staging

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/capture"
	"github.com/trellis-proxy/trellis-proxy/engine/drain"
	"github.com/trellis-proxy/trellis-proxy/engine/quarantine"
	"github.com/trellis-proxy/trellis-proxy/engine/worker"
)

// Stager is the staging worker: it seals batches, installs capture,
// verifies catalog rows, starts builds and retires drained rows.
type Stager struct {
	*drain.Drainer
	Cap *capture.Capturer
}

// New returns the staging worker over the drain code (it resolves
// deferred keys and wakes drain workers) and the capturer.
func New(d *drain.Drainer, c *capture.Capturer) *Stager { return &Stager{Drainer: d, Cap: c} }

// stagingKey reads the staging singleton's advisory key. It is random and
// only the workers' role can read it; any role can still see it in
// pg_locks while a staging worker holds it, and take it once that worker's
// session ends. A standby that finds the key held by a backend of another
// role replaces it (rotateStagingKey): the next holder is a worker again,
// after one takeover interval, however often a tenant repeats this.
func (e *Stager) stagingKey(ctx context.Context, conn *pgx.Conn) (int64, error) {
	var key int64
	err := conn.QueryRow(ctx, fmt.Sprintf("SELECT key FROM %s", e.Tbl("_staging_key"))).Scan(&key)
	return key, err
}

// rotateStagingKey replaces the key old if a backend outside the workers'
// role holds it, and reports whether it did.
func (e *Stager) rotateStagingKey(ctx context.Context, conn *pgx.Conn, old int64) (bool, error) {
	tag, err := conn.Exec(ctx, fmt.Sprintf(`UPDATE %s SET key = ('x' || substr(md5(gen_random_uuid()::text), 1, 16))::bit(64)::int8,
		  rotations = rotations + 1
		WHERE key = $1 AND EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		  WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		    AND ((l.classid::int8 << 32) | l.objid::int8) = $1
		    AND a.usename IS DISTINCT FROM (SELECT worker_role FROM %s))`, e.Tbl("_staging_key"), e.Tbl("_instance")), old)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() > 0, nil
}

// StagingCandidate competes for the instance's staging lock (§12.11) on a
// dedicated connection and, while holding it, does the staging work on that
// same connection, so a dead connection stops the work and frees the lock.
func (e *Stager) StagingCandidate(ctx context.Context) error {
	for ctx.Err() == nil {
		err := e.stagingSession(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if e.TakeStagingRenewal() {
			continue // renewed on purpose (engine/worker/denied.go): at once
		}
		if err != nil {
			e.Log.Warn("staging session ended", "err", err)
		}
		worker.SleepCtx(ctx, e.Cfg.TakeoverInterval/4+10*time.Millisecond)
	}
	return nil
}

func (e *Stager) stagingSession(ctx context.Context) error {
	cc := e.Workers.Config().ConnConfig.Copy()
	cc.RuntimeParams["application_name"] = "trellis-staging " + e.Cfg.ProcessID
	// The server frees the lock within seconds when this host disappears.
	cc.RuntimeParams["tcp_keepalives_idle"] = "5"
	cc.RuntimeParams["tcp_keepalives_interval"] = "2"
	cc.RuntimeParams["tcp_keepalives_count"] = "3"
	// A backstop: every step that can meet a tenant's lock sets its own
	// shorter timeout and leaves the work for a later pass (D21); a
	// statement that forgot still waits for no one for longer than a page.
	cc.RuntimeParams["lock_timeout"] = fmt.Sprintf("%dms", e.Cfg.PageLockTimeout.Milliseconds())
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for {
		key, err := e.stagingKey(ctx, conn)
		if err != nil {
			return err
		}
		var got bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&got); err != nil {
			return err
		}
		if got {
			// The key may have been rotated between our read and the lock.
			if now, err := e.stagingKey(ctx, conn); err != nil || now != key {
				if _, uerr := conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", key); uerr != nil {
					return uerr
				}
				if err != nil {
					return err
				}
				continue
			}
			break
		}
		if rotated, err := e.rotateStagingKey(ctx, conn, key); err != nil {
			return err
		} else if rotated {
			e.Log.Warn("the staging key was held by a session outside the workers' role; replaced it")
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(e.Cfg.TakeoverInterval):
		}
	}
	e.Log.Info("staging worker started", "process", e.Cfg.ProcessID)
	e.States.Set(e.StagingWorkerID(), "staging", "holding")
	defer e.States.Set(e.StagingWorkerID(), "staging", "standby")
	return e.stage(ctx, conn)
}

// stage is the staging worker's loop while it holds the lock.
//
// Sealing is paced (B9): every SealInterval while probes find rows, backing
// off to SealIdleInterval once nothing has been captured for a second, and
// woken at once by a waiter (AwaitConverged), a drained batch (chained
// targets) or a "seal" notice. Writers never notify (a NOTIFY per commit
// would serialize commits on the notify queue lock).
func (e *Stager) stage(ctx context.Context, conn *pgx.Conn) error {
	e.StagingHeld.Store(true)
	defer e.StagingHeld.Store(false)
	kctx, stopKeys := context.WithCancel(ctx)
	keysDone := make(chan struct{})
	go func() { defer close(keysDone); e.keyRetirer(kctx) }()
	defer func() { stopKeys(); <-keysDone }()
	pace := sealPacer{base: e.Cfg.SealInterval, idle: e.Cfg.SealIdleInterval}
	sealT := time.NewTimer(pace.base)
	defer sealT.Stop()
	pass := time.NewTicker(e.Cfg.StagingInterval)
	defer pass.Stop()
	renew := time.NewTimer(e.StagingLifetime()) // engine/worker/denied.go
	defer renew.Stop()
	st := &passState{}
	sealed := func(res sealResult, err error) error {
		if err != nil {
			return err
		}
		sealT.Reset(pace.next(res))
		return nil
	}
	passed := func(res sealResult, probed bool, err error) error {
		if err != nil || !probed {
			return err
		}
		return sealed(res, nil)
	}
	if err := passed(e.stagingPass(ctx, conn, st, true)); err != nil {
		return err
	}
	for {
		var err error
		select {
		case <-ctx.Done():
			return nil
		case <-sealT.C:
			err = sealed(e.Seal(ctx, conn))
		case <-e.WakeSeal:
			pace.wake()
			err = sealed(e.Seal(ctx, conn))
		case <-pass.C:
			err = passed(e.stagingPass(ctx, conn, st, false))
		case <-e.WakeStaging:
			err = passed(e.stagingPass(ctx, conn, st, true))
		case <-e.WakePass:
			err = passed(e.stagingPass(ctx, conn, st, false))
		case <-renew.C:
			e.Log.Info("renewing the staging session (its lifetime is over)")
			e.RenewStaging()
			return nil
		}
		if err != nil {
			return err
		}
		if e.StagingRenewalDue(conn) {
			// Its cached role memberships may be stale
			// (engine/worker/denied.go): the next session installs again.
			e.Log.Warn("renewing the staging session after a privilege error")
			e.RenewStaging()
			return nil
		}
	}
}

// sealResult is what one seal attempt found.
type sealResult int

const (
	sealedNothing sealResult = iota // no new rows: the instance may be idle
	sealedBatch                     // a batch was sealed
	sealHeld                        // new rows wait behind two undrained batches: busy, not idle
)

// sealPacer spaces seal probes: base while rows keep coming, doubling up to
// idle once a second's worth of probes found nothing.
type sealPacer struct {
	base, idle time.Duration
	cur        time.Duration
	empty      int
}

func (p *sealPacer) next(r sealResult) time.Duration {
	if p.cur == 0 {
		p.cur = p.base
	}
	if r != sealedNothing {
		p.wake()
		return p.cur
	}
	p.empty++
	if time.Duration(p.empty)*p.base >= time.Second {
		p.cur = min(p.cur*2, max(p.idle, p.base))
	}
	return p.cur
}

func (p *sealPacer) wake() { p.cur, p.empty = p.base, 0 }

// passState carries what the last staging pass learned, so a periodic pass
// over an unchanged, healthy instance costs one read-only statement (B9).
type passState struct {
	fingerprint string    // of everything a full pass reads, taken before it
	steady      bool      // that pass found nothing to do
	fullAt      time.Time // when the last full pass ran
	retiredAt   int64     // newest drained batch retirement ran for
	retireDone  bool      // and it deleted everything it could
}

// fullPassEvery bounds how long a periodic pass may rely on the
// fingerprint: a full pass runs at least this often regardless.
const fullPassEvery = 30 * time.Second

// PassFingerprintSQL digests every catalog row a full pass reads: the
// definitions, their reads and paused columns, the captured tables, and per
// read or captured table (by its recorded oid and by the oid its name
// resolves to now) and per target and ledger (so a trigger, rule or policy
// added to one reaches the tamper check at the next pass) its pg_class row and relfilenode, its pg_attribute,
// pg_trigger and pg_inherits rows. Any DDL on them writes one of these rows
// and so changes an xmin or a row set; so does a page deferring keys
// (the number of deferred keys and the sum of their xmins: as many keys
// deferred again as the last pass staged are new rows). It also returns the newest drained
// batch (retirement's input). VACUUM and ANALYZE update pg_class in place
// (no new xmin), so they do not force passes.
const PassFingerprintSQL = `
WITH t AS (SELECT table_name, table_oid FROM %[1]s
           UNION SELECT table_name, table_oid FROM %[2]s
           UNION SELECT table_name, to_regclass(table_name)::oid FROM %[1]s
           UNION SELECT table_name, to_regclass(table_name)::oid FROM %[2]s
           UNION SELECT target_table, target_oid FROM %[3]s
           UNION SELECT ledger_oid::regclass::text, ledger_oid FROM %[3]s)
SELECT md5(concat_ws('|',
  (SELECT string_agg(concat_ws(',', d.id, d.status, d.version, d.build_id, d.xmin), ';' ORDER BY d.id) FROM %[3]s d),
  (SELECT string_agg(concat_ws(',', r.definition_id, r.table_name, r.role, r.table_oid, r.xmin), ';'
                     ORDER BY r.definition_id, r.table_name, r.role) FROM %[1]s r),
  (SELECT string_agg(concat_ws(',', p.definition_id, p.column_name, p.xmin), ';' ORDER BY p.definition_id, p.column_name) FROM %[4]s p),
  (SELECT string_agg(concat_ws(',', ct.table_name, ct.table_oid, ct.xmin), ';' ORDER BY ct.table_name) FROM %[2]s ct),
  (SELECT string_agg(concat_ws(',', t.table_name, t.table_oid, to_regclass(t.table_name)::oid, c.xmin, c.relfilenode,
     (SELECT string_agg(concat_ws(':', a.attnum, a.xmin), ',' ORDER BY a.attnum) FROM pg_attribute a WHERE a.attrelid = t.table_oid),
     (SELECT string_agg(concat_ws(':', g.oid, g.xmin), ',' ORDER BY g.oid) FROM pg_trigger g WHERE g.tgrelid = t.table_oid),
     (SELECT string_agg(concat_ws(':', i.inhrelid, i.inhparent, i.xmin), ',' ORDER BY i.inhrelid, i.inhparent)
        FROM pg_inherits i WHERE i.inhrelid = t.table_oid OR i.inhparent = t.table_oid)), ';' ORDER BY t.table_name, t.table_oid)
   FROM t LEFT JOIN pg_class c ON c.oid = t.table_oid),
  (SELECT concat_ws(',', count(*), sum(xmin::text::int8)) FROM %[6]s))),
  coalesce((SELECT max(seq) FROM %[5]s WHERE state = 'drained'), 0)`

// stagingPass runs the staging work. A periodic pass (force false) over an
// instance whose fingerprint is unchanged since a pass that found nothing
// to do only retires (when a batch drained since) and leaves sealing to the
// seal timer; woken passes (define, drop, resume, build, live notices) and
// one pass every fullPassEvery run in full and seal. probed: it sealed (or
// probed) and res says what it found.
func (e *Stager) stagingPass(ctx context.Context, conn *pgx.Conn, st *passState, force bool) (res sealResult, probed bool, err error) {
	var fp string
	var drainedSeq int64
	if err := conn.QueryRow(ctx, fmt.Sprintf(PassFingerprintSQL, e.Tbl("_definition_reads"), e.Tbl("_captured_tables"),
		e.Tbl("_definitions"), e.Tbl("_paused_columns"), e.Tbl("_batches"), e.Tbl("_deferred"))).Scan(&fp, &drainedSeq); err != nil {
		return 0, false, err
	}
	full := force || !st.steady || fp != st.fingerprint || time.Since(st.fullAt) >= fullPassEvery
	if full {
		st.fullAt = time.Now()
		steady, err := e.FullPass(ctx, conn)
		if err != nil {
			st.steady = false
			return 0, false, err
		}
		st.fingerprint, st.steady = fp, steady
	}
	if drainedSeq != st.retiredAt || !st.retireDone {
		done, err := e.retire(ctx, conn)
		if err != nil {
			return 0, false, err
		}
		st.retiredAt, st.retireDone = drainedSeq, done
	}
	if !full {
		return 0, false, nil
	}
	res, err = e.Seal(ctx, conn)
	return res, err == nil, err
}

// FullPass: schema checks, capture installs, build starts, live flips and
// uninstalls. steady reports that it found nothing to do and nothing in
// flight: every definition live, every capture current, no schema problem.
func (e *Stager) FullPass(ctx context.Context, conn *pgx.Conn) (steady bool, err error) {
	// Rows the workers have not verified are not acted on (verify.go).
	verifiedActed, err := e.verifyDefinitions(ctx, conn)
	if err != nil {
		return false, err
	}
	defs, err := e.LoadDefinitions(ctx, conn, "WHERE d.status IN ('waiting_to_backfill','backfilling','live') AND d.verified")
	if err != nil {
		return false, err
	}
	steady = !verifiedActed
	// Keys pages deferred while a client transaction held their
	// definition: staged again once it ended (§12.8).
	if busy, err := e.ResolveDeferred(ctx, conn); err != nil {
		e.Log.Warn("staging deferred keys failed", "err", err)
		if conn.IsClosed() {
			return false, err
		}
		steady = false
	} else if busy {
		steady = false
	}
	// Schema changes under applying definitions pause exactly those (§12.9).
	if acted, err := e.Cap.CheckSchemas(ctx, conn); err != nil {
		e.Log.Warn("capture health check failed", "err", err)
		if conn.IsClosed() {
			return false, err
		}
		steady = false
	} else if acted {
		steady = false
		if defs, err = e.LoadDefinitions(ctx, conn, "WHERE d.status IN ('waiting_to_backfill','backfilling','live') AND d.verified"); err != nil {
			return false, err
		}
	}
	status := map[string]string{} // target text -> status
	for _, d := range defs {
		status[d.C.TargetText] = d.Status
		if d.Status != "live" {
			steady = false
		}
	}
	// Capture every read table (sources and upstream targets).
	captured, capSteady, err := e.Cap.EnsureCapture(ctx, conn, defs)
	if err != nil {
		return false, err
	}
	steady = steady && capSteady
	// Start builds in dependency order (D15): every read captured, no
	// upstream target still waiting.
	for _, d := range defs {
		if d.Status != "waiting_to_backfill" {
			continue
		}
		// A definition without reads is never ready (it would build uncaptured).
		ready := len(d.Reads) > 0
		for _, r := range d.Reads {
			if !captured[r.Table] || (r.Role == "upstream_target" && status[r.Table] == "waiting_to_backfill") {
				ready = false
			}
		}
		if ready {
			if err := e.startBuild(ctx, conn, d.ID); err != nil {
				if err := e.stagingFailed(ctx, conn, d, "starting its build", err); err != nil {
					return false, err
				}
			}
		}
	}
	for _, d := range defs {
		if d.Status == "backfilling" && d.BuildID != nil {
			if _, err := e.TryLive(ctx, conn, d.ID, *d.BuildID); err != nil {
				if err := e.stagingFailed(ctx, conn, d, "turning it live", err); err != nil {
					return false, err
				}
			}
		}
	}
	// Dropped transforms' tables, before the capture they may still carry
	// is uninstalled (its functions outlive the triggers on them).
	if remaining, err := e.emptyTrash(ctx, conn); err != nil {
		e.Log.Warn("emptying the trash failed", "err", err)
		if conn.IsClosed() {
			return false, err
		}
		steady = false
	} else if remaining {
		steady = false
	}
	// Capture no reader needs any more.
	if acted, err := e.Cap.UninstallUnread(ctx, conn); err != nil {
		return false, err
	} else if acted {
		steady = false
	}
	return steady, nil
}

// startBuild moves a definition to backfilling with a plan task (§12.8 step 3).
func (e *Stager) startBuild(ctx context.Context, conn *pgx.Conn, id int64) error {
	tx, err := e.BeginFenced(ctx, conn, id)
	if tx == nil {
		return err
	}
	defer tx.Rollback(ctx)
	var build int64
	err = tx.QueryRow(ctx, fmt.Sprintf(`UPDATE %s d SET status = 'backfilling', build_id = nextval('%s'),
		  version = version + 1, build_started_at = now(), build_rows_done = 0,
		  build_kind = CASE coalesce(status_detail ->> 'rebuild_reason', '') WHEN '' THEN 'initial' WHEN 'resume' THEN 'resume'
		    WHEN 'alter' THEN 'alter' WHEN 'field_build' THEN 'column_resume' WHEN 'request_backfill' THEN 'requested'
		    ELSE 'repair' END,
		  build_rows_estimated = (SELECT CASE WHEN reltuples < 0 THEN NULL ELSE reltuples::bigint END FROM pg_class WHERE oid = d.source_oid)
		WHERE id = $1 AND status = 'waiting_to_backfill' RETURNING build_id`,
		e.Tbl("_definitions"), e.Tbl("_build_seq")), id).Scan(&build)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (definition_id, build_id, kind) VALUES ($1, $2, 'plan')`,
		e.Tbl("_build_tasks")), id, build); err != nil {
		return err
	}
	if err := e.AddSweep(ctx, tx, id, build); err != nil {
		return err
	}
	// Aggregate fields released by a field resume are refreshed per group.
	if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (definition_id, build_id, kind)
		SELECT id, $2, 'refresh' FROM %s WHERE id = $1 AND kind = 'aggregate'
		  AND jsonb_array_length(coalesce(status_detail -> 'refresh_columns', '[]')) > 0`,
		e.Tbl("_build_tasks"), e.Tbl("_definitions")), id, build); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "SELECT pg_notify($1, 'build')", e.Channel("wake")); err != nil {
		return err
	}
	err = tx.Commit(ctx)
	e.Log.Info("build started", "definition", id, "build", build, "err", err)
	return err
}

// Seal closes a batch if new log rows became visible (§12.4).
func (e *Stager) Seal(ctx context.Context, conn *pgx.Conn) (sealResult, error) {
	// Read-only probe first: an idle instance writes nothing. While two
	// batches wait, sealing more only adds per-page overhead: let the next
	// batch grow instead (bigger batches also get 8 buckets, drained in parallel).
	// A bulk batch does not count: the batches sealed behind it drain beside
	// it (engine/drain/bulk.go), so they must not wait for it to be sealed.
	var room, any bool
	t0 := time.Now()
	if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT (SELECT count(*) FILTER (WHERE row_count <= %[3]d) < 2 AND count(*) < %[4]d
		  FROM %[2]s WHERE state <> 'drained'),
		EXISTS (SELECT 1 FROM %[1]s c, (SELECT snap FROM %[2]s ORDER BY seq DESC LIMIT 1) p
		WHERE c.txid >= pg_snapshot_xmin(p.snap) AND NOT pg_visible_in_snapshot(c.txid, p.snap))`,
		e.Tbl("_change_log"), e.Tbl("_batches"), drain.BulkBatchKeys(e.Cfg.PageSize), drain.MaxUndrainedBatches)).Scan(&room, &any); err != nil {
		return 0, err
	}
	if !any {
		return sealedNothing, nil
	}
	if !room {
		return sealHeld, nil
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, fmt.Sprintf("SELECT 1 FROM %s FOR UPDATE", e.Tbl("_seal_lock"))); err != nil {
		return 0, err
	}
	// A new statement: its snapshot is taken after the lock (H7).
	rows, err := tx.Query(ctx, fmt.Sprintf(`
WITH prev AS (SELECT seq, snap FROM %[1]s ORDER BY seq DESC LIMIT 1),
     cur  AS (SELECT pg_current_snapshot() AS snap),
     win  AS (SELECT c.op, coalesce(cardinality(c.keys), 1) AS nk FROM %[2]s c, prev, cur
              WHERE c.txid >= pg_snapshot_xmin(prev.snap) AND c.txid < pg_snapshot_xmax(cur.snap)
                AND pg_visible_in_snapshot(c.txid, cur.snap)
                AND NOT pg_visible_in_snapshot(c.txid, prev.snap)),
     -- row_count counts changed keys (a marker counts one): what the batch holds.
     sz   AS (SELECT count(*) n, coalesce(sum(nk), 0) keys, coalesce(bool_or(op = 'truncate'), false) t FROM win),
     b    AS (INSERT INTO %[1]s (seq, snap, row_count, bucket_count, has_truncate, state)
              SELECT prev.seq + 1, cur.snap, sz.keys,
                     CASE WHEN sz.t OR sz.n < 2 OR sz.keys < 256 THEN 1 ELSE least(sz.n, 8) END, sz.t, 'sealed'
              FROM prev, cur, sz WHERE sz.n > 0
              RETURNING seq, bucket_count)
INSERT INTO %[3]s (batch_seq, bucket)
SELECT seq, generate_series(0, bucket_count - 1) FROM b
RETURNING batch_seq`, e.Tbl("_batches"), e.Tbl("_change_log"), e.Tbl("_batch_buckets")))
	if err != nil {
		return 0, err
	}
	n := 0
	for rows.Next() {
		n++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if n > 0 {
		if _, err := tx.Exec(ctx, "SELECT pg_notify($1, '')", e.Channel("sealed")); err != nil {
			return 0, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	if n == 0 {
		return sealedNothing, nil
	}
	e.Metrics().BatchSealed(time.Since(t0))
	e.WakeDrainers()
	return sealedBatch, nil
}

// retire deletes log rows applied by the drained prefix (the newest batch
// before which every batch drained: batches drain out of order, engine/drain/bulk.go),
// and batch rows older than it (§12.11, H5). done: nothing left to retire for it.
func (e *Stager) retire(ctx context.Context, conn *pgx.Conn) (done bool, err error) {
	if e.Plant.KeepLog {
		return true, nil
	}
	// Materialised keys retire on their own connection (keyRetirer): the
	// seal must not wait for millions of deletes after a bulk batch.
	worker.Poke(e.WakeKeys)
	for i := 0; i < 20; i++ {
		tag, err := conn.Exec(ctx, fmt.Sprintf(`
WITH d AS (%[4]s)
DELETE FROM %[2]s WHERE ctid = ANY (ARRAY(
  SELECT c.ctid FROM %[2]s c, d
  WHERE c.txid < pg_snapshot_xmax(d.snap) AND pg_visible_in_snapshot(c.txid, d.snap)
  LIMIT %[3]d))`, e.Tbl("_batches"), e.Tbl("_change_log"), e.Cfg.RetireChunk, e.DrainedSnapSQL()))
		if err != nil {
			return false, err
		}
		if tag.RowsAffected() < int64(e.Cfg.RetireChunk) {
			done = true
			break
		}
	}
	// A batch row is kept while a later batch is undrained: its snapshot
	// is that batch's window's lower edge.
	_, err = conn.Exec(ctx, fmt.Sprintf(`DELETE FROM %s WHERE state = 'drained' AND seq < %s()`, e.Tbl("_batches"), e.Tbl("_drained_prefix")))
	return done && err == nil, err
}

// stagingFailed isolates one definition's failing staging step (D21): the
// definition is paused with a named capture_failure and the pass goes on, so
// a definition whose target vanished (dropped in its defining transaction)
// cannot stop the staging worker; PAUSE and DROP TRANSFORM still find it by
// name. A failure of the session itself ends the pass as before.
func (e *Stager) stagingFailed(ctx context.Context, conn *pgx.Conn, d *worker.DefRow, step string, serr error) error {
	if conn.IsClosed() || ctx.Err() != nil || base.Transient(serr) {
		return serr
	}
	e.Log.Warn("a transform's staging step failed; the transform is paused", "definition", d.ID, "target", d.C.TargetText,
		"step", step, "sqlstate", base.Code(serr))
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '1s'"); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s SET status = 'paused', version = version + 1,
		  build_started_at = NULL, build_rows_done = NULL, build_rows_estimated = NULL,
		  status_detail = coalesce(status_detail, '{}') || jsonb_build_object('capture_failure', jsonb_build_object(
		    'kind', 'staging_failure', 'step', $2::text, 'error', $3::text, 'sqlstate', nullif($4::text, ''), 'at', now()))
		WHERE id = $1 AND status IN ('waiting_to_backfill', 'backfilling', 'live')`, e.Tbl("_definitions")),
		d.ID, step, step+": "+quarantine.ErrMessage(serr), base.Code(serr)); err != nil {
		if base.Transient(err) {
			return nil // held by a client: the next pass tries again
		}
		return err
	}
	return tx.Commit(ctx)
}
