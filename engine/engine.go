package engine

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/catalog"
	"github.com/trellis-proxy/trellis-proxy/engine/ddl"
	"github.com/trellis-proxy/trellis-proxy/engine/selfcheck"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// Querier runs SQL. Define and Drop take one so they run inside the caller's
// transaction (base.Querier).
type Querier = base.Querier

// Engine is one process's handle on a Trellis instance: the façade over
// its workers (the staging worker, whose layers reach every other).
type Engine struct {
	w *Stager
}

// New returns an engine over pool. The pool's role is the workers' role
// (D9). The engine opens its own worker pool from the same config.
func New(pool *pgxpool.Pool, cfg Config) *Engine {
	cfg.defaults()
	env := &Env{
		cfg: cfg, pool: pool, log: cfg.Logger,
		wakeStaging: make(chan struct{}, 1), wakeDrain: make(chan struct{}, 1),
		wakePass: make(chan struct{}, 1), wakeSeal: make(chan struct{}, 1), wakeKeys: make(chan struct{}, 1),
		drained: make(chan struct{}),
	}
	env.ddl = ddl.New(ddl.Config{Schema: cfg.Schema, TargetSchema: cfg.TargetSchema}, env.workerRole)
	pc := pool.Config().Copy()
	rp := pc.ConnConfig.RuntimeParams
	// Key renderings must match the capture functions' pinned settings (H9, H12).
	for k, v := range workerSettings {
		rp[k] = v
	}
	rp["application_name"] = "trellis-worker " + cfg.ProcessID
	pc.MaxConns = int32(cfg.DrainWorkers + 4)
	if cfg.DrainWorkers < 0 {
		pc.MaxConns = 4
	}
	pc.MinConns = 0
	w, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		// Only an invalid config fails here, and the caller's pool was built from it.
		panic(fmt.Sprintf("engine: worker pool: %v", err))
	}
	env.workers = w
	b := &Builder{&Quarantine{&Deriver{Env: env, cache: map[int64]*compiledDef{}}}}
	e := &Engine{w: &Stager{Drainer: &Drainer{b}, cap: &Capturer{b}}}
	env.checks = selfcheck.New(selfcheck.Config{Schema: cfg.Schema, ProcessID: cfg.ProcessID, PageKeys: cfg.SelfCheckPageKeys,
		PollInterval: cfg.PollInterval, WorkerTTL: cfg.WorkerTTL}, pool, w, checkHost{e})
	return e
}

var workerSettings = map[string]string{
	"DateStyle":          "ISO, YMD",
	"TimeZone":           "UTC",
	"IntervalStyle":      "postgres",
	"bytea_output":       "hex",
	"extra_float_digits": "1",
	"row_security":       "off",
	// Only built-in objects and the session's own temporary ones resolve:
	// an object another role creates in a schema on the default path
	// (public.unnest(text[]) is an exact match for the drains' unnest of a
	// text[], so it beat pg_catalog's) would otherwise run as the workers
	// (D20). Everything else the workers name is schema-qualified.
	"search_path":                         "pg_catalog, pg_temp",
	"idle_in_transaction_session_timeout": "60000",
	"default_transaction_isolation":       "read committed",
	// Page and chunk statements take arrays whose sizes vary by orders of
	// magnitude; a generic plan guesses wrong (measured: 5x slower chunks).
	"plan_cache_mode": "force_custom_plan",
	// Chunk statements look costly to the planner (tens of thousands of
	// rows), so JIT compiled them: ~150 ms per chunk, for nothing.
	"jit": "off",
}

// Close releases the engine's own pool. Call after Run has returned.
func (e *Engine) Close() { e.w.workers.Close() }

// Schema returns the catalog schema.
func (e *Engine) Schema() string { return e.w.cfg.Schema }

// Run runs this process's workers until ctx is done: the listener, the
// staging candidate and the drain workers. It returns nil on cancellation.
func (e *Engine) Run(ctx context.Context) error {
	var role string
	for {
		err := e.w.workers.QueryRow(ctx, fmt.Sprintf("SELECT worker_role FROM %s", e.w.tbl("_instance"))).Scan(&role)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		if base.Code(err) == pgerr.UndefinedTable || !base.Transient(err) {
			return fmt.Errorf("engine: reading the instance marker (run Migrate first): %w", err)
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	e.w.workerRoleV.Store(&role)
	defer e.w.states.clear()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return e.listen(gctx) })
	g.Go(func() error { return e.heartbeat(gctx) })
	if e.w.cfg.Staging != StagingOff {
		e.w.states.set(e.w.stagingWorkerID(), "staging", "standby")
		g.Go(func() error { return e.w.stagingCandidate(gctx) })
	}
	for i := 0; i < e.w.cfg.DrainWorkers; i++ {
		id := fmt.Sprintf("%s/drain-%d", e.w.cfg.ProcessID, i)
		e.w.states.set(id, "drain", "idle")
		g.Go(func() error { return e.w.drainLoop(gctx, id, i%2 == 1) })
	}
	err := g.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// listen turns NOTIFYs into in-process wake-ups, reconnecting on failure.
func (e *Engine) listen(ctx context.Context) error {
	for ctx.Err() == nil {
		err := e.listenOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		e.w.log.Warn("engine listener failed; reconnecting", "err", err)
		sleepCtx(ctx, 200*time.Millisecond)
	}
	return nil
}

func (e *Engine) listenOnce(ctx context.Context) error {
	conn, err := e.w.workers.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	defer func() {
		// A LISTENing connection must not go back to the pool.
		conn.Hijack().Close(context.Background())
	}()
	for _, ch := range []string{"wake", "sealed", "drained", "seal"} {
		if _, err := conn.Exec(ctx, "LISTEN "+base.Ident(e.w.channel(ch))); err != nil {
			return err
		}
	}
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			return err
		}
		switch n.Channel {
		case e.w.channel("wake"):
			e.w.checks.Woken() // perhaps a self-check job
			poke(e.w.wakeStaging)
			poke(e.w.wakeDrain)
		case e.w.channel("sealed"):
			poke(e.w.wakeDrain)
		case e.w.channel("drained"):
			e.w.signalDrained()
			poke(e.w.wakePass) // retirement
			poke(e.w.wakeSeal) // a chained target's rows
			poke(e.w.wakeDrain)
		case e.w.channel("seal"):
			poke(e.w.wakeSeal)
		}
	}
}

// heartbeat keeps this process's _workers row fresh (liveness, §12.11).
func (e *Engine) heartbeat(ctx context.Context) error {
	id := e.w.cfg.ProcessID
	beat := func() {
		_, err := e.w.workers.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (worker_id, proxy_id, kind, last_seen, format)
			VALUES ($1, $2, 'drain', now(), $3) ON CONFLICT (worker_id) DO UPDATE SET last_seen = now(), format = excluded.format`,
			e.w.tbl("_workers")), id, e.w.cfg.ProcessID, catalog.FormatVersion)
		if err != nil && ctx.Err() == nil {
			e.w.log.Warn("heartbeat failed", "err", err)
		}
	}
	beat()
	t := time.NewTicker(e.w.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			e.w.workers.Exec(c, fmt.Sprintf("DELETE FROM %s WHERE worker_id = $1", e.w.tbl("_workers")), id)
			cancel()
			return nil
		case <-t.C:
			beat()
		}
	}
}

// Workers returns the states of this process's workers, staging first,
// then drain workers by id; empty while Run is not running.
func (e *Engine) Workers() []WorkerState {
	e.w.states.mu.Lock()
	out := make([]WorkerState, 0, len(e.w.states.m))
	for _, s := range e.w.states.m {
		out = append(out, *s)
	}
	e.w.states.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind == "staging"
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// StagingHeld reports whether this process holds the staging role now.
func (e *Engine) StagingHeld() bool {
	e.w.states.mu.Lock()
	defer e.w.states.mu.Unlock()
	s := e.w.states.m[e.w.stagingWorkerID()]
	return s != nil && s.State == "holding"
}
