package selfcheck

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// A job's rows are catalog/migrations/016.sql's; a page's results are
// saved only while its claim still holds.

// maxDivergences ends a job early (truncated).
const maxDivergences = 1000

type scJob struct {
	id, def, claim, timeoutMS int64
	mode, target              string
	cursor                    *string
	divergences               int
}

type divergence struct {
	kind                               string
	key, column, persisted, recomputed *string
	table, detail                      *string
}

// scPage is one page's result.
type scPage struct {
	divs             []divergence
	hi               *string
	n                int64
	done             bool
	outcome, notLive string
	token            string
}

// pageBudgetBase is a page's budget beside its two convergence waits.
const pageBudgetBase = 60 * time.Second

// budget is how long one page of j may run: its two convergence waits
// (the page's and the re-check's) and pageBudgetBase. A claimant whose
// process still heartbeats keeps its claim for 30 s plus this long without
// a save (claimSelfCheck passes pageBudgetBase to its SQL).
func (j *scJob) budget() time.Duration {
	return pageBudgetBase + 2*time.Duration(j.timeoutMS)*time.Millisecond
}

// Step runs one page of a self-check job, if one is claimable:
// a queued job, this worker's own running job, or a running job whose
// claimant stopped (its process no longer heartbeats, or it has not saved
// for 30 s plus a page budget).
func (sc *Checker) Step(ctx context.Context, id string) (bool, error) {
	// An idle drain worker comes here on every wake-up; when the claim (a
	// transaction of three round trips) found no job for this worker, it is
	// asked again only after a poll interval or a wake notice (self_check
	// sends one). Per worker: another worker's running job is not this one's.
	if until, ok := sc.idle.Load(id); ok && time.Now().UnixNano() < until.(int64) {
		return false, nil
	}
	j, err := sc.claimSelfCheck(ctx, id)
	if err != nil {
		return false, err
	}
	if j == nil {
		sc.idle.Store(id, time.Now().Add(sc.cfg.PollInterval).UnixNano())
		return false, nil
	}
	sc.host.Working(id, "checking", "self-check "+j.target)
	pctx, cancel := context.WithTimeout(ctx, j.budget())
	defer cancel()
	start := time.Now()
	p, err := sc.selfCheckPage(pctx, j)
	if err != nil {
		if ctx.Err() != nil {
			return true, nil // shutting down: the job is taken over (continues) later
		}
		if errors.Is(pctx.Err(), context.DeadlineExceeded) {
			return true, sc.finishSelfCheck(ctx, j, "failed", fmt.Sprintf("a page ran past its budget of %s", j.budget()))
		}
		if base.Transient(err) {
			return true, err // retried from the saved cursor on the next pass
		}
		return true, sc.finishSelfCheck(ctx, j, "failed", err.Error())
	}
	if err := sc.saveSelfCheckPage(ctx, j, p); err != nil {
		return true, err
	}
	sc.host.PageDone(j.target, time.Since(start), len(p.divs))
	return true, nil
}

func (sc *Checker) claimSelfCheck(ctx context.Context, wid string) (*scJob, error) {
	tx, err := sc.workers.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)
	j := &scJob{}
	err = tx.QueryRow(ctx, fmt.Sprintf(`
		SELECT j.id, j.definition_id, j.mode, j.timeout_ms, j.cursor, j.divergence_count, d.compiled #>> '{spec,target,name}'
		FROM %s j JOIN %s d ON d.id = j.definition_id
		WHERE j.state = 'queued'
		   OR (j.state = 'running' AND (j.claimed_by = $1
		       OR j.saved_at < now() - interval '30 seconds' - ($3 + 2 * j.timeout_ms) * interval '1 millisecond'
		       OR NOT EXISTS (SELECT 1 FROM %s w WHERE w.worker_id = j.claimed_proc
		                      AND w.last_seen > now() - $2 * interval '1 millisecond')))
		ORDER BY j.claimed_by = $1 DESC, j.id LIMIT 1 FOR UPDATE OF j SKIP LOCKED`,
		sc.tbl("_self_checks"), sc.tbl("_definitions"), sc.tbl("_workers")), wid, sc.cfg.WorkerTTL.Milliseconds(), pageBudgetBase.Milliseconds()).
		Scan(&j.id, &j.def, &j.mode, &j.timeoutMS, &j.cursor, &j.divergences, &j.target)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	// A new claimant bumps the claim, so a late save by the old one is ignored.
	err = tx.QueryRow(ctx, fmt.Sprintf(`UPDATE %s SET
		claim = claim + CASE WHEN state = 'running' AND claimed_by = $2 THEN 0 ELSE 1 END,
		state = 'running', claimed_by = $2, claimed_proc = $3, started_at = coalesce(started_at, now()),
		saved_at = CASE WHEN state = 'running' AND claimed_by = $2 THEN saved_at ELSE now() END
		WHERE id = $1 RETURNING claim`, sc.tbl("_self_checks")), j.id, wid, sc.cfg.ProcessID).Scan(&j.claim)
	if err != nil {
		return nil, err
	}
	return j, tx.Commit(ctx)
}

// finishSelfCheck ends a job failed or cancelled (while the claim holds).
func (sc *Checker) finishSelfCheck(ctx context.Context, j *scJob, state, why string) error {
	_, err := sc.workers.Exec(ctx, fmt.Sprintf(`UPDATE %s SET state = $3, error = $4, finished_at = now(), saved_at = now()
		WHERE id = $1 AND claim = $2 AND state = 'running'`, sc.tbl("_self_checks")), j.id, j.claim, state, why)
	return err
}

// saveSelfCheckPage saves a page's cursor, counts and divergences, and the
// verdict when the job is done, in one transaction holding the job row:
// nothing is saved when another worker took the job over meanwhile.
func (sc *Checker) saveSelfCheckPage(ctx context.Context, j *scJob, p *scPage) error {
	tx, err := sc.workers.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	var prev int
	err = tx.QueryRow(ctx, fmt.Sprintf(`SELECT divergence_count FROM %s WHERE id = $1 AND claim = $2 AND state = 'running' FOR UPDATE`,
		sc.tbl("_self_checks")), j.id, j.claim).Scan(&prev)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // claim lost
	}
	if err != nil {
		return err
	}
	divs := p.divs
	truncated := false
	if prev+len(divs) >= maxDivergences {
		divs = divs[:maxDivergences-prev]
		truncated = !p.done || len(divs) < len(p.divs)
		p.done = true
	}
	for i, d := range divs {
		if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (job_id, ordinal, kind, key, column_name, persisted, recomputed, table_name, detail)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, sc.tbl("_self_check_divergences")),
			j.id, prev+i+1, d.kind, d.key, d.column, d.persisted, d.recomputed, d.table, d.detail); err != nil {
			return err
		}
	}
	total := prev + len(divs)
	if p.outcome != "" {
		truncated = true // stopped before the end of the keys
	}
	var outcome *string
	if p.done {
		o := p.outcome
		if o == "" {
			o = "converged"
			if total > 0 {
				o = "diverged"
			}
		}
		outcome = &o
	}
	var notLive *string
	if p.notLive != "" {
		notLive = &p.notLive
	}
	var token *string
	if p.token != "" {
		token = &p.token
	}
	_, err = tx.Exec(ctx, fmt.Sprintf(`UPDATE %s SET cursor = coalesce($3, cursor), rows_compared = rows_compared + $4,
		pages = pages + 1, divergence_count = $5, saved_at = now(),
		checked_through = coalesce(checked_through, $6),
		state = CASE WHEN $7 THEN 'done' ELSE state END,
		finished_at = CASE WHEN $7 THEN now() END,
		outcome = $8, not_live_status = $9, truncated = $10 AND $7
		WHERE id = $1 AND claim = $2`, sc.tbl("_self_checks")),
		j.id, j.claim, p.hi, p.n, total, token, p.done, outcome, notLive, truncated)
	if err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	if p.done {
		sc.host.SignalDrained() // wakes await_self_check
	}
	return nil
}

// Await waits until job id finishes (surface §9, proxy-answered)
// and returns its outcome (done) or its state (failed, cancelled).
func (sc *Checker) Await(ctx context.Context, id int64, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	wait := 10 * time.Millisecond
	for {
		ch := sc.host.DrainedCh()
		var state string
		var outcome, why *string
		err := sc.pool.QueryRow(ctx, fmt.Sprintf(`SELECT state, outcome, error FROM %s WHERE id = $1`, sc.tbl("_self_checks")), id).
			Scan(&state, &outcome, &why)
		if errors.Is(err, pgx.ErrNoRows) {
			return "", pgerr.Newf(pgerr.UndefinedObject, "self-check %d does not exist", id).
				WithClass("not_found", "SelfCheckNotFound").WithHint("it was replaced by a newer check of its target, or its transform was dropped")
		}
		if err != nil {
			return "", err
		}
		switch state {
		case "done":
			return *outcome, nil
		case "failed", "cancelled":
			return state, nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return "", pgerr.Newf(pgerr.QueryCanceled, "self-check %d not finished within %d ms (state %s)", id, timeout.Milliseconds(), state).
				WithClass("timeout", "SelfCheckNotFinished")
		}
		t := time.NewTimer(min(wait, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return "", ctx.Err()
		case <-ch:
		case <-t.C:
		}
		t.Stop()
		wait = min(wait*2, 250*time.Millisecond)
	}
}
