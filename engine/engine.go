package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/build"
	"github.com/trellis-proxy/trellis-proxy/engine/capture"
	"github.com/trellis-proxy/trellis-proxy/engine/catalog"
	"github.com/trellis-proxy/trellis-proxy/engine/ddl"
	"github.com/trellis-proxy/trellis-proxy/engine/derive"
	"github.com/trellis-proxy/trellis-proxy/engine/drain"
	"github.com/trellis-proxy/trellis-proxy/engine/quarantine"
	"github.com/trellis-proxy/trellis-proxy/engine/selfcheck"
	"github.com/trellis-proxy/trellis-proxy/engine/staging"
	"github.com/trellis-proxy/trellis-proxy/engine/worker"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// Querier runs SQL. Define and Drop take one so they run inside the caller's
// transaction (base.Querier).
type Querier = base.Querier

// Engine is one process's handle on a Trellis instance: the façade over
// its workers (the staging worker, whose layers reach every other).
type Engine struct {
	w *staging.Stager
}

// New returns an engine over pool. The pool's role is the workers' role
// (D9). The engine opens its own worker pool from the same config.
func New(pool *pgxpool.Pool, cfg Config) *Engine {
	cfg.Defaults()
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
	worker.WatchDenials(pc, cfg.Logger)
	w, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		// Only an invalid config fails here, and the caller's pool was built from it.
		panic(fmt.Sprintf("engine: worker pool: %v", err))
	}
	env := worker.NewEnv(cfg, pool, w)
	env.DDL = ddl.New(ddl.Config{Schema: cfg.Schema, TargetSchema: cfg.TargetSchema}, env.WorkerRole)
	b := build.New(quarantine.New(derive.New(env)))
	e := &Engine{w: staging.New(drain.New(b), capture.New(b))}
	env.Checks = selfcheck.New(selfcheck.Config{Schema: cfg.Schema, ProcessID: cfg.ProcessID, PageKeys: cfg.SelfCheckPageKeys,
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
func (e *Engine) Close() { e.w.Workers.Close() }

// Schema returns the catalog schema.
func (e *Engine) Schema() string { return e.w.Cfg.Schema }

// Run runs this process's workers until ctx is done: the listener, the
// staging candidate and the drain workers. It returns nil on cancellation.
func (e *Engine) Run(ctx context.Context) error {
	var role string
	for {
		err := e.w.Workers.QueryRow(ctx, fmt.Sprintf("SELECT worker_role FROM %s", e.w.Tbl("_instance"))).Scan(&role)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		if base.Code(err) == pgerr.UndefinedTable || !base.Transient(err) {
			return fmt.Errorf("engine: reading the instance marker (run Migrate first): %w", err)
		}
		worker.SleepCtx(ctx, 100*time.Millisecond)
	}
	e.w.SetWorkerRole(role)
	defer e.w.States.Clear()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return e.listen(gctx) })
	g.Go(func() error { return e.heartbeat(gctx) })
	if e.w.Cfg.Staging != StagingOff {
		e.w.States.Set(e.w.StagingWorkerID(), "staging", "standby")
		g.Go(func() error { return e.w.StagingCandidate(gctx) })
	}
	for i := 0; i < e.w.Cfg.DrainWorkers; i++ {
		id := fmt.Sprintf("%s/drain-%d", e.w.Cfg.ProcessID, i)
		e.w.States.Set(id, "drain", "idle")
		g.Go(func() error { return e.w.DrainLoop(gctx, id, i%2 == 1) })
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
		e.w.Log.Warn("engine listener failed; reconnecting", "err", err)
		worker.SleepCtx(ctx, 200*time.Millisecond)
	}
	return nil
}

func (e *Engine) listenOnce(ctx context.Context) error {
	conn, err := e.w.Workers.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	defer func() {
		// A LISTENing connection must not go back to the pool.
		conn.Hijack().Close(context.Background())
	}()
	for _, ch := range []string{"wake", "sealed", "drained", "seal"} {
		if _, err := conn.Exec(ctx, "LISTEN "+base.Ident(e.w.Channel(ch))); err != nil {
			return err
		}
	}
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			return err
		}
		switch n.Channel {
		case e.w.Channel("wake"):
			e.w.Checks.Woken() // perhaps a self-check job
			worker.Poke(e.w.WakeStaging)
			worker.Poke(e.w.WakeDrain)
		case e.w.Channel("sealed"):
			worker.Poke(e.w.WakeDrain)
		case e.w.Channel("drained"):
			e.w.SignalDrained()
			worker.Poke(e.w.WakePass) // retirement
			worker.Poke(e.w.WakeSeal) // a chained target's rows
			worker.Poke(e.w.WakeDrain)
		case e.w.Channel("seal"):
			worker.Poke(e.w.WakeSeal)
		}
	}
}

// heartbeat keeps this process's _workers row fresh (liveness, §12.11).
func (e *Engine) heartbeat(ctx context.Context) error {
	id := e.w.Cfg.ProcessID
	beat := func() {
		_, err := e.w.Workers.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (worker_id, proxy_id, kind, last_seen, format)
			VALUES ($1, $2, 'drain', now(), $3) ON CONFLICT (worker_id) DO UPDATE SET last_seen = now(), format = excluded.format`,
			e.w.Tbl("_workers")), id, e.w.Cfg.ProcessID, catalog.FormatVersion)
		if err != nil && ctx.Err() == nil {
			e.w.Log.Warn("heartbeat failed", "err", err)
		}
	}
	beat()
	t := time.NewTicker(e.w.Cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			e.w.Workers.Exec(c, fmt.Sprintf("DELETE FROM %s WHERE worker_id = $1", e.w.Tbl("_workers")), id)
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
	return e.w.States.List()
}

// StagingHeld reports whether this process holds the staging role now.
func (e *Engine) StagingHeld() bool {
	return e.w.States.Holding(e.w.StagingWorkerID())
}
