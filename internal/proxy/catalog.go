package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// catalogPoller reads the engine's gauges from the catalog in one background
// goroutine (surface §13: every 300 ms) and keeps the latest snapshot, so a
// scrape never touches the database and its cost does not depend on the
// number of keys, clients or pending changes. It also turns differences
// between successive snapshots into log records: status transitions, keys
// put on hold, and a fleet without a staging or drain worker.
type catalogPoller struct {
	pool      *pgxpool.Pool
	schema    string // quoted
	processID string
	interval  time.Duration
	log       *slog.Logger

	snap   atomic.Pointer[catalogSnapshot]
	errors atomic.Uint64

	// Owned by the polling goroutine.
	counted      map[int64]bool // batch seqs whose rows were counted as applied
	captured     map[int64]bool // batch seqs whose rows were counted as captured
	applied      float64
	capturedRows float64
	lastWarn     map[string]time.Time
	since        map[string]time.Time // when a worker kind was first seen missing
	pauses       map[[2]string]float64
	fuses        map[string]float64
}

type transformSnap struct {
	target, status, problem string
	table                   string  // schema-qualified target
	buildDone, buildEst     float64 // NaN when no build runs / no estimate
	held                    int64
	drainFailing            bool
	captureFailing          bool
	lagRows                 int64
	lagSeconds              float64
	pauseCause              string // "" unless paused or quarantined (pause_metrics.go)
	fused                   int64  // columns the column fuse paused
}

type catalogSnapshot struct {
	at             time.Time
	took           time.Duration
	transforms     []transformSnap // sorted by target
	catalogVersion int64
	stagingLive    bool
	stagingHeld    bool
	drainLive      int64
	maxSeq         int64
	pendingBatches int64
	pendingChanges int64
	oldestAge      float64
	drainHoldups   int64
	applied        float64
	captured       float64
	pauses         map[[2]string]float64 // (transform, cause) -> pauses seen (pause_metrics.go)
	fuses          map[string]float64
}

func newCatalogPoller(pool *pgxpool.Pool, schema, processID string, interval time.Duration, log *slog.Logger) *catalogPoller {
	if interval <= 0 {
		interval = 300 * time.Millisecond
	}
	return &catalogPoller{pool: pool, schema: pgx.Identifier{schema}.Sanitize(), processID: processID, interval: interval,
		log: log.With("component", "engine"), counted: map[int64]bool{}, captured: map[int64]bool{}, lastWarn: map[string]time.Time{}, since: map[string]time.Time{}}
}

// run polls until ctx ends. A poll that takes long stretches the interval
// (to 10x its duration, at most 10 s) so a large backlog never makes the metrics a
// noticeable load on the database.
func (p *catalogPoller) run(ctx context.Context) {
	var prev *catalogSnapshot
	for ctx.Err() == nil {
		start := time.Now()
		s, err := p.poll(ctx)
		took := time.Since(start)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			p.errors.Add(1)
			p.warnEvery("poll", time.Minute, "reading engine metrics from the catalog failed", "error", oneLine(err))
		} else {
			s.took = took
			p.transitions(prev, s)
			p.countPauses(prev, s)
			p.snap.Store(s)
			prev = s
		}
		sleepCtx(ctx, min(max(p.interval, 10*took), 10*time.Second))
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (p *catalogPoller) warnEvery(key string, every time.Duration, msg string, args ...any) {
	if t, ok := p.lastWarn[key]; ok && time.Since(t) < every {
		return
	}
	p.lastWarn[key] = time.Now()
	p.log.Warn(msg, args...)
}

// poll reads everything in one round trip (a pgx batch).
func (p *catalogPoller) poll(ctx context.Context) (*catalogSnapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	S := p.schema
	b := &pgx.Batch{}
	// The catalog is read through the engine's read views (its storage is
	// its own, engine/catalog/reads). Pending changes per source table: keys
	// not yet covered by the drained prefix. Its cost grows with the backlog,
	// which run's stretched interval bounds.
	b.Queue(fmt.Sprintf(`SELECT p.src_table, p.keys, p.oldest_seconds FROM %[1]s._read_pending_changes p`, S))
	b.Queue(fmt.Sprintf(`SELECT r.definition_id, r.table_name FROM %[1]s._read_definition_reads r`, S))
	b.Queue(fmt.Sprintf(`SELECT s.target, s.target_table, s.status, coalesce(s.problem, ''), s.build_rows_done::float8, s.build_rows_estimated::float8,
		coalesce((s.held_keys ->> 'held_count')::int8, 0), s.drain_failure IS NOT NULL, s.capture_failure IS NOT NULL, s.definition_id,
		CASE WHEN s.status = 'quarantined' THEN 'quarantine' WHEN s.status <> 'paused' THEN ''
		     WHEN s.capture_failure ->> 'kind' = 'halt' THEN 'halt'
		     WHEN s.capture_failure IS NOT NULL THEN 'capture_failure' ELSE 'operator' END,
		(SELECT count(*) FROM %[1]s._read_paused_columns pc WHERE pc.definition_id = s.definition_id AND pc.local AND pc.last_error IS NOT NULL)::int8
		FROM %[1]s.status s`, S))
	b.Queue(fmt.Sprintf(`SELECT seq, row_count, state FROM %[1]s._read_batches`, S))
	b.Queue(fmt.Sprintf(`SELECT %[1]s._catalog_version()::int8, %[1]s.has_live_staging_worker(),
		coalesce((SELECT application_name FROM %[1]s._staging_holder()), ''),
		(SELECT count(*) FROM %[1]s.fleet_workers WHERE kind = 'drain' AND live)::int8,
		(SELECT count(*) FROM %[1]s._read_failing_buckets)::int8`, S))
	// One snapshot for every read: separate statements could see a batch
	// drained in one and its changes still pending in another.
	tx, err := p.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.Background())
	br := tx.SendBatch(ctx, b)
	defer br.Close()

	s := &catalogSnapshot{at: time.Now()}
	type pend struct {
		n   int64
		age float64
	}
	pending := map[string]pend{}
	rows, _ := br.Query()
	for rows.Next() {
		var t string
		var pd pend
		if err := rows.Scan(&t, &pd.n, &pd.age); err != nil {
			return nil, err
		}
		pending[t] = pd
		s.pendingChanges += pd.n
		s.oldestAge = math.Max(s.oldestAge, pd.age)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	reads := map[int64][]string{}
	rows, _ = br.Query()
	for rows.Next() {
		var id int64
		var t string
		if err := rows.Scan(&id, &t); err != nil {
			return nil, err
		}
		reads[id] = append(reads[id], t)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, _ = br.Query()
	for rows.Next() {
		var t transformSnap
		var done, est *float64
		var id int64
		if err := rows.Scan(&t.target, &t.table, &t.status, &t.problem, &done, &est, &t.held, &t.drainFailing, &t.captureFailing, &id,
			&t.pauseCause, &t.fused); err != nil {
			return nil, err
		}
		t.buildDone, t.buildEst = math.NaN(), math.NaN()
		if done != nil {
			t.buildDone = *done
		}
		if est != nil {
			t.buildEst = *est
		}
		for _, table := range reads[id] {
			if pd, ok := pending[table]; ok {
				t.lagRows += pd.n
				t.lagSeconds = math.Max(t.lagSeconds, pd.age)
			}
		}
		s.transforms = append(s.transforms, t)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	uniqueLabels(s.transforms)
	sort.Slice(s.transforms, func(i, j int) bool { return s.transforms[i].target < s.transforms[j].target })

	type batch struct {
		seq, rows int64
		drained   bool
	}
	var batches []batch
	rows, _ = br.Query()
	for rows.Next() {
		var bt batch
		var state string
		if err := rows.Scan(&bt.seq, &bt.rows, &state); err != nil {
			return nil, err
		}
		bt.drained = state == "drained"
		batches = append(batches, bt)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var holder string
	if err := br.QueryRow().Scan(&s.catalogVersion, &s.stagingLive, &holder, &s.drainLive, &s.drainHoldups); err != nil {
		return nil, err
	}
	s.stagingHeld = holder != "" && strings.HasSuffix(holder, " "+p.processID)

	// Batch seqs are consecutive and only drained batches are ever deleted,
	// so sealed = newest seq and drained = sealed - pending, exactly. Rows
	// are summed per batch the first time a poll sees it (a batch sealed,
	// drained and retired between two polls is missed: a lower bound).
	first := p.snap.Load() == nil
	minSeq := int64(math.MaxInt64)
	for _, bt := range batches {
		s.maxSeq = max(s.maxSeq, bt.seq)
		minSeq = min(minSeq, bt.seq)
		if !bt.drained {
			s.pendingBatches++
		}
		if bt.seq == 0 {
			continue // the catalog's bootstrap batch
		}
		if !p.captured[bt.seq] {
			p.captured[bt.seq] = true
			if !first || !bt.drained {
				p.capturedRows += float64(bt.rows)
			}
		}
		if bt.drained && !p.counted[bt.seq] {
			p.counted[bt.seq] = true
			if !first {
				p.applied += float64(bt.rows)
			}
		}
	}
	for seq := range p.counted {
		if seq < minSeq {
			delete(p.counted, seq)
		}
	}
	for seq := range p.captured {
		if seq < minSeq {
			delete(p.captured, seq)
		}
	}
	s.applied, s.captured = p.applied, p.capturedRows
	return s, br.Close()
}

func (p *catalogPoller) missing(now time.Time, what string, gone bool, msg string) {
	if !gone {
		delete(p.since, what)
		return
	}
	if _, ok := p.since[what]; !ok {
		p.since[what] = now
	}
	if now.Sub(p.since[what]) >= 5*time.Second {
		p.warnEvery(what, time.Minute, msg, "since", p.since[what].Format(time.RFC3339))
	}
}

// transitions logs what changed between two snapshots (surface §15).
func (p *catalogPoller) transitions(prev, cur *catalogSnapshot) {
	// A fleet starting up or handing the staging role over is briefly
	// without a worker: warn once the gap has lasted 5 s, then once a minute.
	p.missing(cur.at, "staging", !cur.stagingLive, "no live staging worker in the fleet")
	p.missing(cur.at, "drain", cur.drainLive == 0, "no live drain worker in the fleet")
	if prev == nil {
		return
	}
	old := make(map[string]transformSnap, len(prev.transforms))
	for _, t := range prev.transforms {
		old[t.target] = t
	}
	for _, t := range cur.transforms {
		o, had := old[t.target]
		delete(old, t.target)
		switch {
		case !had:
			p.log.Info("transform defined", "transform", t.target, "status", t.status)
		case o.status != t.status:
			args := []any{"transform", t.target, "from", o.status, "to", t.status}
			if t.problem != "" {
				args = append(args, "reason", t.problem)
			}
			if t.status == "quarantined" || t.status == "paused" {
				p.log.Warn("transform status changed", args...)
			} else {
				p.log.Info("transform status changed", args...)
			}
		}
		if t.held > o.held {
			p.log.Warn("source keys held in quarantine", "transform", t.target, "held_keys", t.held, "reason", t.problem)
		}
		if t.drainFailing && !o.drainFailing {
			p.log.Warn("drain held back", "transform", t.target, "reason", t.problem)
		}
	}
	for target := range old {
		p.log.Info("transform dropped", "transform", target)
	}
}

var (
	descTransformStatus = prometheus.NewDesc("trellis_transform_status", "1 for the transform's reported status (trellis.status).", []string{"transform", "status"}, nil)
	descLagRows         = prometheus.NewDesc("trellis_transform_lag_rows", "Captured changes to tables the transform reads, not yet drained.", []string{"transform"}, nil)
	descLagSeconds      = prometheus.NewDesc("trellis_transform_lag_seconds", "Age of the oldest such change, 0 when none.", []string{"transform"}, nil)
	descBuildDone       = prometheus.NewDesc("trellis_transform_build_rows_done", "Source keys re-derived by the running build.", []string{"transform"}, nil)
	descBuildEst        = prometheus.NewDesc("trellis_transform_build_rows_estimated", "Source keys the running build is estimated to re-derive.", []string{"transform"}, nil)
	descTransformHeld   = prometheus.NewDesc("trellis_transform_held_keys", "Source keys of the transform held in quarantine.", []string{"transform"}, nil)
	descDrainFailing    = prometheus.NewDesc("trellis_transform_drain_failing", "1 while a failing drain page holds the transform back.", []string{"transform"}, nil)
	descCaptureFailing  = prometheus.NewDesc("trellis_transform_capture_failing", "1 while capture of a table the transform reads has failed or halted.", []string{"transform"}, nil)
	descDefinitions     = prometheus.NewDesc("trellis_definitions", "Transforms by reported status.", []string{"status"}, nil)
	descHeldKeys        = prometheus.NewDesc("trellis_held_keys", "Keys held in quarantine.", nil, nil)
	descStagingLive     = prometheus.NewDesc("trellis_staging_worker_live", "1 when some process holds the staging lock.", nil, nil)
	descStagingHeld     = prometheus.NewDesc("trellis_staging_worker_held", "1 when this process holds it.", nil, nil)
	descDrainLive       = prometheus.NewDesc("trellis_drain_workers_live", "Live drain workers in the fleet.", nil, nil)
	descPendingBatches  = prometheus.NewDesc("trellis_pending_batches", "Sealed batches not yet drained.", nil, nil)
	descPendingChanges  = prometheus.NewDesc("trellis_pending_changes", "Captured changes not yet drained.", nil, nil)
	descOldest          = prometheus.NewDesc("trellis_oldest_pending_change_age_seconds", "Age of the oldest captured change not yet applied, 0 when none: the lag signal to alert on.", nil, nil)
	descDrainHoldups    = prometheus.NewDesc("trellis_drain_holdups", "Drain pages failing and being retried.", nil, nil)
	descBuildsRunning   = prometheus.NewDesc("trellis_builds_running", "Builds in progress.", nil, nil)
	descCatalogVersion  = prometheus.NewDesc("trellis_catalog_version", "Catalog format version.", nil, nil)
	descSealed          = prometheus.NewDesc("trellis_batches_sealed_total", "Batches sealed in the instance (fleet-wide, from the catalog).", nil, nil)
	descDrained         = prometheus.NewDesc("trellis_batches_drained_total", "Batches fully drained in the instance (fleet-wide, from the catalog).", nil, nil)
	descCaptured        = prometheus.NewDesc("trellis_changes_captured_total", "Captured changes sealed into batches seen by this process's poller (a lower bound under very fast batch turnover).", nil, nil)
	descApplied         = prometheus.NewDesc("trellis_changes_applied_total", "Changes of batches this process's poller saw drained (a lower bound under very fast batch turnover).", nil, nil)
	descInstanceUp      = prometheus.NewDesc("trellis_instance_up", "1 while this process serves the instance.", nil, nil)
	descPollErrors      = prometheus.NewDesc("trellis_metrics_poll_errors_total", "Failed reads of the engine gauges from the catalog.", nil, nil)
	descPollSeconds     = prometheus.NewDesc("trellis_metrics_poll_seconds", "Duration of the latest catalog read behind the engine gauges.", nil, nil)
	descPollAge         = prometheus.NewDesc("trellis_metrics_poll_age_seconds", "Age of the engine gauges (time since the latest successful catalog read).", nil, nil)
)

var reportedStatuses = []string{"waiting_to_backfill", "backfilling", "catching_up", "live", "paused", "quarantined"}

func (p *catalogPoller) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTransformStatus, descLagRows, descLagSeconds, descBuildDone, descBuildEst, descTransformHeld,
		descDrainFailing, descCaptureFailing, descDefinitions, descHeldKeys, descStagingLive, descStagingHeld, descDrainLive,
		descPendingBatches, descPendingChanges, descOldest, descDrainHoldups, descBuildsRunning, descCatalogVersion, descSealed,
		descDrained, descCaptured, descApplied, descInstanceUp, descPollErrors, descPollSeconds, descPollAge, descPauses, descFuses} {
		ch <- d
	}
}

// Collect renders the latest snapshot; it never blocks on the database.
func (p *catalogPoller) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge(descInstanceUp, 1)
	counter(descPollErrors, float64(p.errors.Load()))
	s := p.snap.Load()
	if s == nil {
		return
	}
	gauge(descPollSeconds, s.took.Seconds())
	gauge(descPollAge, time.Since(s.at).Seconds())
	s.collectPauses(ch)
	byStatus := map[string]float64{}
	var held, builds float64
	for i := range s.transforms {
		t := &s.transforms[i]
		byStatus[t.status]++
		held += float64(t.held)
		gauge(descTransformStatus, 1, t.target, t.status)
		gauge(descLagRows, float64(t.lagRows), t.target)
		gauge(descLagSeconds, t.lagSeconds, t.target)
		gauge(descTransformHeld, float64(t.held), t.target)
		gauge(descDrainFailing, b2f(t.drainFailing), t.target)
		gauge(descCaptureFailing, b2f(t.captureFailing), t.target)
		if t.status == "backfilling" {
			builds++
			if !math.IsNaN(t.buildDone) {
				gauge(descBuildDone, t.buildDone, t.target)
			}
			if !math.IsNaN(t.buildEst) {
				gauge(descBuildEst, t.buildEst, t.target)
			}
		}
	}
	for _, st := range reportedStatuses {
		gauge(descDefinitions, byStatus[st], st)
	}
	gauge(descHeldKeys, held)
	gauge(descBuildsRunning, builds)
	gauge(descStagingLive, b2f(s.stagingLive))
	gauge(descStagingHeld, b2f(s.stagingHeld))
	gauge(descDrainLive, float64(s.drainLive))
	gauge(descPendingBatches, float64(s.pendingBatches))
	gauge(descPendingChanges, float64(s.pendingChanges))
	gauge(descOldest, s.oldestAge)
	gauge(descDrainHoldups, float64(s.drainHoldups))
	gauge(descCatalogVersion, float64(s.catalogVersion))
	counter(descSealed, float64(s.maxSeq))
	counter(descDrained, float64(s.maxSeq-s.pendingBatches))
	counter(descCaptured, s.captured)
	counter(descApplied, s.applied)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// uniqueLabels names each transform by its bare target name, as dashboards
// know it, unless another transform in another schema shares that name: then
// both go by their qualified names, since two series with one label set make
// the whole scrape fail.
func uniqueLabels(ts []transformSnap) {
	n := map[string]int{}
	for _, t := range ts {
		n[t.target]++
	}
	for i := range ts {
		if n[ts[i].target] > 1 && ts[i].table != "" {
			ts[i].target = ts[i].table
		}
	}
}
