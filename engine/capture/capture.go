package capture

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/build"
	"github.com/trellis-proxy/trellis-proxy/engine/sqlgen"
	"github.com/trellis-proxy/trellis-proxy/engine/worker"
)

// Capturer installs capture and checks the captured tables' health:
// schemas, tampering, rewrites.
type Capturer struct {
	*build.Builder
}

// New returns the capturer over b (capture repairs request rebuilds).
func New(b *build.Builder) *Capturer { return &Capturer{Builder: b} }

// capturePlan is a table's capture as sqlgen renders it.
type capturePlan = sqlgen.CapturePlan

// captureHealthy reports whether the table carries our current capture.
func (e *Capturer) captureHealthy(ctx context.Context, conn *pgx.Conn, p *capturePlan) (bool, error) {
	names := make([]string, len(sqlgen.CaptureEvents))
	for i, ev := range sqlgen.CaptureEvents {
		names[i] = e.Inst().TriggerName(ev)
	}
	var ok bool
	err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s ct
		WHERE ct.table_name = $1 AND ct.function_hash = $2 AND ct.table_oid = to_regclass($1)::oid)
		AND (SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass($1) AND tgname = ANY($3) AND tgenabled = 'A') = 4`,
		e.Tbl("_captured_tables")), p.Table, p.Hash, names).Scan(&ok)
	return ok, err
}

// InstallCapture installs or replaces capture under a short lock_timeout.
// The commit is the table's join fence (§12.3). ok=false: lock not granted,
// retry next pass.
func (e *Capturer) InstallCapture(ctx context.Context, conn *pgx.Conn, p *capturePlan) (ok bool, err error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx)
	if err := worker.SetLockTimeout(ctx, tx, e.Cfg.InstallLockTimeout); err != nil {
		return false, err
	}
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", p.Table).Scan(&exists); err != nil || !exists {
		return false, err
	}
	// Waits out open writers, or fails fast: writers wait at most one attempt.
	if _, err := tx.Exec(ctx, "LOCK TABLE "+p.Table+" IN SHARE ROW EXCLUSIVE MODE"); err != nil {
		if worker.IsLockTimeout(err) {
			return false, nil
		}
		return false, err
	}
	// Evidence that capture was disabled, dropped or replaced is read under
	// the lock, before the reinstall below erases it, and the readers are
	// sent to rebuild in the same transaction: writes made while capture was
	// off are repaired whatever the pass that asked for this install saw.
	tampered, err := e.captureTampered(ctx, tx, p.Table)
	if err != nil {
		return false, err
	}
	if tampered {
		if _, err := e.RequestRebuild(ctx, tx, p.Table, "capture on "+p.Table+" was disabled, dropped or replaced; reinstalled"); err != nil {
			return false, err
		}
		e.Log.Warn("capture repaired; readers rebuild", "table", p.Table)
	}
	if err := tx.QueryRow(ctx, `SELECT array_agg(to_regtype(t)::oid ORDER BY i) FROM unnest($1::text[]) WITH ORDINALITY u(t, i)`,
		p.KeyTypeNames()).Scan(&p.KeyTypes); err != nil {
		return false, err
	}
	for i, oid := range p.KeyTypes {
		if oid == 0 {
			return false, fmt.Errorf("installing capture on %s: key type %s does not resolve", p.Table, p.Key[i].Type)
		}
	}
	if alt := p.AltTypeNames(); len(alt) > 0 {
		if err := tx.QueryRow(ctx, `SELECT array_agg(coalesce(to_regtype(t)::oid, 0) ORDER BY i) FROM unnest($1::text[]) WITH ORDINALITY u(t, i)`,
			alt).Scan(&p.AltTypes); err != nil {
			return false, err
		}
	}
	for _, s := range e.Inst().CaptureDDL(p) {
		if _, err := tx.Exec(ctx, s); err != nil {
			return false, fmt.Errorf("installing capture on %s: %w", p.Table, err)
		}
	}
	kj, _ := json.Marshal(p.Key)
	if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (table_name, table_oid, key_columns, key_nullable, enable_mode, function_hash, installed_at)
		VALUES ($1, to_regclass($1)::oid, $2, $3, 'A', $4, now())
		ON CONFLICT (table_name) DO UPDATE SET table_oid = excluded.table_oid, key_columns = excluded.key_columns,
		  key_nullable = excluded.key_nullable, function_hash = excluded.function_hash, installed_at = now()`,
		e.Tbl("_captured_tables")), p.Table, kj, p.Nullable, p.Hash); err != nil {
		return false, err
	}
	if err := e.recordInstall(ctx, tx, p.Table); err != nil {
		return false, err
	}
	// The wait, if one was shown, ends with the install's commit.
	if _, err := tx.Exec(ctx, fmt.Sprintf(`DELETE FROM %s WHERE table_name = $1`, e.Tbl("_capture_waits")), p.Table); err != nil {
		return false, err
	}
	return true, tx.Commit(ctx)
}

// recordCaptureWait shows an install of capture on table that could not
// take its lock within InstallLockTimeout (status.capture_wait, surface
// §5.3): since when it waits, and the sessions holding a lock on the table
// that conflicts with SHARE ROW EXCLUSIVE. Nothing cancels them; the next
// install that commits clears it. A table that does not exist is no wait.
func (e *Capturer) recordCaptureWait(ctx context.Context, q base.Querier, table string) error {
	_, err := q.Exec(ctx, fmt.Sprintf(`INSERT INTO %[1]s AS w (table_name, operation, lock_mode, blockers)
		SELECT $1, CASE WHEN EXISTS (SELECT 1 FROM %[2]s WHERE table_name = $1) THEN 'reinstall' ELSE 'install' END,
		  'ShareRowExclusiveLock',
		  ARRAY(SELECT format('pid %%s (%%s) holds %%s for %%s, query started %%s', l.pid, coalesce(a.backend_type, '?'), l.mode,
		                      coalesce(date_trunc('second', now() - coalesce(a.xact_start, a.backend_start))::text, '?'),
		                      coalesce(to_char(a.query_start, 'YYYY-MM-DD HH24:MI:SS'), '?'))
		        FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
		        WHERE l.locktype = 'relation' AND l.relation = to_regclass($1) AND l.granted AND l.pid <> pg_backend_pid()
		          AND l.mode IN ('RowExclusiveLock', 'ShareUpdateExclusiveLock', 'ShareLock', 'ShareRowExclusiveLock',
		                         'ExclusiveLock', 'AccessExclusiveLock')
		        ORDER BY l.pid, l.mode)
		WHERE to_regclass($1) IS NOT NULL
		ON CONFLICT (table_name) DO UPDATE SET operation = excluded.operation, observed_at = now(), blockers = excluded.blockers`,
		e.Tbl("_capture_waits"), e.Tbl("_captured_tables")), table)
	return err
}

// uninstallCapture removes capture from a table no definition reads.
func (e *Capturer) uninstallCapture(ctx context.Context, conn *pgx.Conn, table string) error {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if err := worker.SetLockTimeout(ctx, tx, e.Cfg.InstallLockTimeout); err != nil {
		return err
	}
	// Still unread, seen under the row lock (a Define may be racing us).
	var unread bool
	if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT NOT EXISTS (SELECT 1 FROM %s WHERE table_name = $1)
		FROM %s WHERE table_name = $1 FOR UPDATE`, e.Tbl("_definition_reads"), e.Tbl("_captured_tables")), table).Scan(&unread); err != nil {
		if err == pgx.ErrNoRows {
			return nil
		}
		return err
	}
	if !unread {
		return nil
	}
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil {
		return err
	}
	if exists {
		for _, ev := range sqlgen.CaptureEvents {
			if _, err := tx.Exec(ctx, "DROP TRIGGER IF EXISTS "+base.Ident(e.Inst().TriggerName(ev))+" ON "+table); err != nil {
				if worker.IsLockTimeout(err) {
					return nil
				}
				return err
			}
		}
	}
	for _, ev := range sqlgen.CaptureEvents {
		if _, err := tx.Exec(ctx, "DROP FUNCTION IF EXISTS "+e.Inst().CapFunc(table, ev)+"()"); err != nil {
			return err
		}
	}
	for _, t := range []string{"_captured_tables", "_capture_waits"} {
		if _, err := tx.Exec(ctx, fmt.Sprintf("DELETE FROM %s WHERE table_name = $1", e.Tbl(t)), table); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

var _ = time.Second

// EnsureCapture makes every table defs read carry current capture,
// installing (or repairing) it for about a second per pass; captured says
// which tables do. steady is false when any did not.
func (e *Capturer) EnsureCapture(ctx context.Context, conn *pgx.Conn, defs []*worker.DefRow) (captured map[string]bool, steady bool, err error) {
	steady = true
	captured = map[string]bool{}
	plans := map[string]*capturePlan{}
	for _, d := range defs {
		for _, r := range d.Reads {
			if _, ok := plans[r.Table]; !ok {
				key, nullable := d.C.Key, d.C.KeyNullable
				if r.Role == "to_one" {
					// A joined table's capture logs its own identity.
					for _, j := range d.C.Spec.Joins {
						if j.Text == r.Table {
							key, nullable = j.Key, j.KeyNullable
						}
					}
				}
				plans[r.Table] = e.Inst().NewCapturePlan(r.Table, key, nullable)
			}
			// And the values of the other unique keys it is joined on.
			for _, j := range d.C.Spec.Joins {
				if j.Text == r.Table && len(j.Match) > 0 {
					plans[r.Table].AddAlt(j.Match, e.Inst())
				}
			}
		}
	}
	deadline := time.Now().Add(time.Second)
	for t, p := range plans {
		ok, err := e.captureCurrent(ctx, conn, p)
		if err != nil {
			return nil, false, err
		}
		if !ok {
			steady = false
		}
		if !ok && time.Now().Before(deadline) {
			// A tampered capture is repaired inside installCapture, under
			// the table lock (the readers rebuild in the same transaction).
			ok, err = e.InstallCapture(ctx, conn, p)
			e.Log.Info("capture install", "table", t, "ok", ok, "err", err)
			if err == nil && !ok {
				// Its lock is held: shown as status.capture_wait until it commits.
				err = e.recordCaptureWait(ctx, conn, t)
			}
			if err != nil {
				e.Log.Warn("capture install failed", "table", t, "err", err)
				if conn.IsClosed() {
					return nil, false, err
				}
				continue
			}
		}
		captured[t] = ok
	}
	return captured, steady, nil
}

// UninstallUnread removes capture from tables no definition reads any more;
// acted says there was one.
func (e *Capturer) UninstallUnread(ctx context.Context, conn *pgx.Conn) (acted bool, err error) {
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT table_name FROM %s ct WHERE NOT EXISTS
		(SELECT 1 FROM %s r WHERE r.table_name = ct.table_name)`, e.Tbl("_captured_tables"), e.Tbl("_definition_reads")))
	if err != nil {
		return true, err
	}
	unread, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return true, err
	}
	for _, t := range unread {
		acted = true
		if err := e.uninstallCapture(ctx, conn, t); err != nil {
			e.Log.Warn("capture uninstall failed", "table", t, "err", err)
			if conn.IsClosed() {
				return true, err
			}
		}
	}
	return acted, nil
}
