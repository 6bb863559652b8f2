package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/worker"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// WatermarkToken returns the WAL insert position, to be taken after the
// caller's commit returned (§12.10). Any connection will do.
func (e *Engine) WatermarkToken(ctx context.Context) (string, error) {
	var t string
	err := e.w.Pool.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&t)
	return t, err
}

// Converged answers at once whether every captured change at or below token
// has reached its targets (poisoned keys count as not reached).
func (e *Engine) Converged(ctx context.Context, token string) (bool, error) {
	return e.ConvergedAs(ctx, token, "")
}

// ConvergedAs is Converged as seen by role viewer (empty: by the workers,
// every transform): held and deferred keys count only for transforms whose
// target viewer may read, so another role's held key never fails its wait
// (D21). Changes not yet drained count for everyone: a page never waits on
// one transform (engine/drain/drain.go applyShare).
func (e *Engine) ConvergedAs(ctx context.Context, token, viewer string) (bool, error) {
	var ok bool
	var v *string
	if viewer != "" {
		v = &viewer
	}
	q := fmt.Sprintf("SELECT %s($1::text::pg_lsn, $2::name)", e.w.Tbl("_converged"))
	if e.w.Plant.ConvergedIsDrained {
		q = fmt.Sprintf("SELECT $1::text::pg_lsn IS NOT NULL AND ($2::name IS NULL OR $2::name IS NOT NULL) AND NOT EXISTS (SELECT 1 FROM %s WHERE state <> 'drained')", e.w.Tbl("_batches"))
	}
	err := e.w.Pool.QueryRow(ctx, q, token, v).Scan(&ok)
	if base.Code(err) == "22P02" {
		return false, pgerr.Newf(pgerr.InvalidParameterValue, "malformed watermark token %q", token).WithClass("validation", "BadToken")
	}
	return ok, err
}

// AwaitConverged waits until Converged(token) or the timeout, polling with
// backoff (10 ms doubling to 250 ms) and re-checking when a batch drains.
// It does not wait for builds: wait for status live first.
func (e *Engine) AwaitConverged(ctx context.Context, token string, timeout time.Duration) error {
	return e.AwaitConvergedAs(ctx, token, timeout, "")
}

// AwaitConvergedAs is AwaitConverged as seen by role viewer (ConvergedAs).
func (e *Engine) AwaitConvergedAs(ctx context.Context, token string, timeout time.Duration, viewer string) error {
	deadline := time.Now().Add(timeout)
	wait := 10 * time.Millisecond
	for first := true; ; first = false {
		ch := e.w.DrainedCh()
		ok, err := e.ConvergedAs(ctx, token, viewer)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if first {
			// The sealer may be backed off (idle): the waited-for rows are
			// sealed now rather than at its next idle probe.
			e.w.PokeSeal(ctx)
		}
		left := time.Until(deadline)
		if left <= 0 {
			return pgerr.Newf(pgerr.QueryCanceled, "not converged through %s within %d ms", token, timeout.Milliseconds()).
				WithClass("timeout", "NotConverged")
		}
		t := time.NewTimer(min(wait, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-ch:
		case <-t.C:
		}
		t.Stop()
		wait = min(wait*2, 250*time.Millisecond)
	}
}

// DefinitionStatus is one row of trellis.status (surface §5.1, in part).
type DefinitionStatus struct {
	DefinitionID       int64
	Target             string // bare target name
	TargetTable        string
	SourceTable        string
	Kind               string
	Status             string // reported: catching_up when live over a non-live upstream
	StoredStatus       string
	Problem            *string
	Owner              string
	Version            int64
	HeldBackBy         *string
	BuildStartedAt     *time.Time
	BuildRowsDone      *int64
	BuildRowsEstimated *int64
	BuildPercent       *float64
	DrainFailure       *string
}

// Status returns every definition's status.
func (e *Engine) Status(ctx context.Context) ([]DefinitionStatus, error) {
	rows, err := e.w.Pool.Query(ctx, fmt.Sprintf(`
		SELECT d.id, d.compiled->'spec'->'target'->>'name', d.target_table, d.source_table, d.kind, d.status,
		  coalesce(pg_get_userbyid(d.owner_role), d.owner_role::text), d.version,
		  (SELECT u.target_table FROM %[2]s r JOIN %[1]s u ON u.target_table = r.table_name
		   WHERE r.definition_id = d.id AND r.role = 'upstream_target' AND u.status <> 'live' LIMIT 1),
		  d.build_started_at,
		  CASE WHEN d.status = 'backfilling' THEN (SELECT coalesce(sum(t.rows_done), 0)::bigint FROM %[3]s t WHERE t.build_id = d.build_id AND t.state = 'done') END,
		  d.build_rows_estimated,
		  coalesce((SELECT pf.error FROM %[6]s pf WHERE pf.definition_id = d.id),
		    (SELECT b.last_error FROM %[4]s b WHERE b.last_error IS NOT NULL ORDER BY b.batch_seq LIMIT 1)),
		  EXISTS (SELECT 1 FROM %[5]s w WHERE w.last_seen > now() - $1::interval)
		FROM %[1]s d ORDER BY d.id`, e.w.Tbl("_definitions"), e.w.Tbl("_definition_reads"), e.w.Tbl("_build_tasks"),
		e.w.Tbl("_batch_buckets"), e.w.Tbl("_workers"), e.w.Tbl("_page_failures")), fmt.Sprintf("%d milliseconds", e.w.Cfg.WorkerTTL.Milliseconds()))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (DefinitionStatus, error) {
		var s DefinitionStatus
		var alive bool
		err := r.Scan(&s.DefinitionID, &s.Target, &s.TargetTable, &s.SourceTable, &s.Kind, &s.StoredStatus, &s.Owner,
			&s.Version, &s.HeldBackBy, &s.BuildStartedAt, &s.BuildRowsDone, &s.BuildRowsEstimated, &s.DrainFailure, &alive)
		s.Status = s.StoredStatus
		if s.Status == "live" && s.HeldBackBy != nil {
			s.Status = "catching_up"
		}
		if s.Status != "waiting_to_backfill" && s.Status != "catching_up" {
			s.HeldBackBy = nil
		}
		if s.BuildRowsDone != nil && s.BuildRowsEstimated != nil && *s.BuildRowsEstimated > 0 {
			p := min(float64(int(1000*float64(*s.BuildRowsDone)/float64(*s.BuildRowsEstimated)))/10, 99.9)
			s.BuildPercent = &p
		}
		switch {
		case s.DrainFailure != nil:
			p := "drain held back: " + *s.DrainFailure
			s.Problem = &p
		case !alive && s.StoredStatus != "live":
			p := "no live drain worker"
			s.Problem = &p
		}
		return s, err
	})
}

// StatusOf returns one definition's status, or nil when there is none. A
// target without a schema is the bare target name, which is unique across
// the instance (surface §1.2), wherever the target table lives.
func (e *Engine) StatusOf(ctx context.Context, target TableName) (*DefinitionStatus, error) {
	all, err := e.Status(ctx)
	if err != nil {
		return nil, err
	}
	if target.Schema == "" {
		for i := range all {
			if all[i].Target == target.Name {
				return &all[i], nil
			}
		}
		return nil, nil
	}
	var want string
	if err := e.w.Pool.QueryRow(ctx, "SELECT format('%I.%I', $1::text, $2::text)", target.Schema, target.Name).Scan(&want); err != nil {
		return nil, err
	}
	for i := range all {
		if all[i].TargetTable == want {
			return &all[i], nil
		}
	}
	return nil, nil
}

// AwaitLive waits until the definition's reported status is live.
func (e *Engine) AwaitLive(ctx context.Context, target TableName, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		s, err := e.StatusOf(ctx, target)
		if err != nil {
			return err
		}
		if s == nil {
			return pgerr.Newf(pgerr.UndefinedObject, "transform %s does not exist", target.Display()).WithClass("not_found", "TransformNotFound")
		}
		if s.Status == "live" {
			return nil
		}
		if s.Status == "paused" || s.Status == "quarantined" {
			return pgerr.Newf(pgerr.ObjectNotInPrerequisiteState, "transform %s is %s", s.TargetTable, s.Status)
		}
		if time.Now().After(deadline) {
			return pgerr.Newf(pgerr.QueryCanceled, "transform %s not live within %s (status %s)", target, timeout, s.Status).
				WithClass("timeout", "NotLive")
		}
		worker.SleepCtx(ctx, 20*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}
