package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
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

// StagingMode says whether this process stands for the staging singleton.
type StagingMode string

const (
	StagingAuto StagingMode = "auto" // take the staging lock when free (default)
	StagingOn   StagingMode = "on"   // must stand for staging; for now it competes exactly like auto
	StagingOff  StagingMode = "off"  // never stage
)

// Config holds the engine's knobs (D17). Zero values take the defaults.
type Config struct {
	Schema       string      // catalog schema, default "trellis"
	TargetSchema string      // default schema of targets, default "public"
	Staging      StagingMode // default auto
	DrainWorkers int         // default 2; 0 means the default, negative means none
	ProcessID    string      // names this process in _workers; default random

	SealInterval       time.Duration // staging: probe for new log rows, default 50ms
	SealIdleInterval   time.Duration // the probe's spacing once idle for a second, default 10 x SealInterval
	StagingInterval    time.Duration // staging: installs, build starts, retirement, default 500ms
	PollInterval       time.Duration // idle drain workers re-check without a wake-up, default 1s
	TakeoverInterval   time.Duration // non-holders retry the staging lock, default 2s
	Heartbeat          time.Duration // _workers heartbeat, default 10s
	WorkerTTL          time.Duration // a worker silent this long counts as dead, default 30s
	InstallLockTimeout time.Duration // lock_timeout of capture installs, default 50ms
	PageLockTimeout    time.Duration // lock_timeout of a page or chunk, default 2s
	PageSize           int           // keys per page, default 5000
	BuildChunkSize     int           // keys per build chunk, default 5000
	FreshChunkSize     int           // keys per chunk of a fresh build (one statement; aggregates 4x), default 10 x BuildChunkSize
	BuildStepBudget    time.Duration // a build step (plan, locked-path chunk, sweep, fresh 1-1 chunk) commits after about this long and goes on in the next transaction, default 25ms
	RetireChunk        int           // log rows deleted per statement, default 10000
	SelfCheckPageKeys  int           // keys per self-check page (surface §9.2), default 10000

	// TestingTargetTriggers lets triggers on targets stand (the tamper
	// check ignores them), so tests can make a page or build step fail on
	// purpose with a raising trigger. Tests only: no flag or variable sets
	// it, and with it a superuser's trigger runs as the workers.
	TestingTargetTriggers bool

	Logger *slog.Logger
	// Metrics receives seal, page and build-task events; nil means none.
	Metrics Metrics
}

func (c *Config) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if c.Schema == "" {
		c.Schema = "trellis"
	}
	if c.TargetSchema == "" {
		c.TargetSchema = "public"
	}
	if c.Staging == "" {
		c.Staging = StagingAuto
	}
	if c.DrainWorkers == 0 {
		c.DrainWorkers = 2
	}
	if c.ProcessID == "" {
		var b [6]byte
		rand.Read(b[:])
		c.ProcessID = "proc-" + hex.EncodeToString(b[:])
	}
	def(&c.SealInterval, 50*time.Millisecond)
	def(&c.SealIdleInterval, 10*c.SealInterval)
	def(&c.StagingInterval, 500*time.Millisecond)
	def(&c.PollInterval, time.Second)
	def(&c.TakeoverInterval, 2*time.Second)
	def(&c.Heartbeat, 10*time.Second)
	def(&c.WorkerTTL, 30*time.Second)
	def(&c.InstallLockTimeout, 50*time.Millisecond)
	def(&c.PageLockTimeout, 2*time.Second)
	def(&c.BuildStepBudget, 25*time.Millisecond)
	if c.PageSize <= 0 {
		c.PageSize = 5000
	}
	if c.BuildChunkSize <= 0 {
		c.BuildChunkSize = 5000
	}
	if c.FreshChunkSize <= 0 {
		c.FreshChunkSize = 10 * c.BuildChunkSize
	}
	if c.RetireChunk <= 0 {
		c.RetireChunk = 10000
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Engine is one process's handle on a Trellis instance.
type Engine struct {
	cfg     Config
	pool    *pgxpool.Pool // the caller's pool: API calls
	workers *pgxpool.Pool // our pool: pinned session settings (§12.15)
	plantJC joinCopies    // the joinReadEarly fault's copies (apply.go)
	log     *slog.Logger

	wakeStaging chan struct{} // a full staging pass
	wakePass    chan struct{} // a pass the fingerprint may shorten (a batch drained)
	wakeSeal    chan struct{} // seal now (a waiter, a drained batch)
	wakeKeys    chan struct{} // retire materialised keys (bulk.go keyRetirer)
	wakeDrain   chan struct{}
	stagingHeld atomic.Bool // this process runs the staging worker
	drainedMu   sync.Mutex
	drained     chan struct{} // closed and replaced whenever a batch drains here or a notice arrives

	cacheMu sync.Mutex
	cache   map[int64]*compiledDef

	// workerRole is the instance's workers' role, read from the marker by
	// Run; atomic because tests build capture plans while Run starts.
	workerRoleV atomic.Pointer[string]
	states      workerStates       // this process's workers, for trellis.proxy_workers
	checks      *selfcheck.Checker // this process's share of self-check jobs

	ddl   *ddl.Executor // Trellis statements (engine/ddl)
	plant plants        // test-only faults; zero in production
}

// plants are deliberate bugs the differential test arms to prove it can fail.
type plants struct {
	dropEveryNthKey     int  // skip one key in n on pages
	convergedIsDrained  bool // answer convergence from batch states (H3)
	noOriginInheritance bool // chained log rows get fresh origins (H3)
	keepLog             bool // never retire (diagnostics)
	bulkKeyLost         bool // a materialised bucket loses one key in three, its first among them (bulk.go)
	fanOutSkipItem      int  // a JOIN target's changes (truncates too) of its n-th joined item fan out to nothing (fanout.go)
	fanOutNewOnly       bool // fan-out reads only the keys' current rows: a row that moved away is missed (fanout.go)
	// joinReadEarly: a JOIN target's re-derive reads copies of its joined
	// tables taken outside the ledger lock, kept up to this long (a cache
	// of dimension rows; apply.go).
	joinReadEarly time.Duration
	pageHook      func(stage string)
	planStepRows  int // keys one plan step walks; 0: planStepRows
	firstSlice    int // keys of a build step's first slice; 0: firstSliceKeys
	// Not a fault: fresh aggregate builds take the classic path (pages
	// write during them), as with an older process in the fleet.
	classicBuilds bool
	// Not a fault: 1-1 rebuild chunks re-derive on the locked path, key by
	// key, as before set-based rebuild chunks (tests of the locked path).
	lockedRebuilds bool
}

// New returns an engine over pool. The pool's role is the workers' role
// (D9). The engine opens its own worker pool from the same config.
func New(pool *pgxpool.Pool, cfg Config) *Engine {
	cfg.defaults()
	e := &Engine{
		cfg: cfg, pool: pool, log: cfg.Logger,
		wakeStaging: make(chan struct{}, 1), wakeDrain: make(chan struct{}, 1),
		wakePass: make(chan struct{}, 1), wakeSeal: make(chan struct{}, 1), wakeKeys: make(chan struct{}, 1),
		drained: make(chan struct{}), cache: map[int64]*compiledDef{},
	}
	e.ddl = ddl.New(ddl.Config{Schema: cfg.Schema, TargetSchema: cfg.TargetSchema}, e.workerRole)
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
	e.workers = w
	e.checks = selfcheck.New(selfcheck.Config{Schema: cfg.Schema, ProcessID: cfg.ProcessID, PageKeys: cfg.SelfCheckPageKeys,
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
func (e *Engine) Close() { e.workers.Close() }

// Schema returns the catalog schema.
func (e *Engine) Schema() string { return e.cfg.Schema }

func (e *Engine) tbl(name string) string { return base.Table(e.cfg.Schema, name) }

func (e *Engine) channel(what string) string { return base.Channel(e.cfg.Schema, what) }

func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (e *Engine) signalDrained() {
	e.drainedMu.Lock()
	close(e.drained)
	e.drained = make(chan struct{})
	e.drainedMu.Unlock()
}

func (e *Engine) drainedCh() <-chan struct{} {
	e.drainedMu.Lock()
	defer e.drainedMu.Unlock()
	return e.drained
}

// Run runs this process's workers until ctx is done: the listener, the
// staging candidate and the drain workers. It returns nil on cancellation.
func (e *Engine) Run(ctx context.Context) error {
	var role string
	for {
		err := e.workers.QueryRow(ctx, fmt.Sprintf("SELECT worker_role FROM %s", e.tbl("_instance"))).Scan(&role)
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
	e.workerRoleV.Store(&role)
	defer e.states.clear()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return e.listen(gctx) })
	g.Go(func() error { return e.heartbeat(gctx) })
	if e.cfg.Staging != StagingOff {
		e.states.set(e.stagingWorkerID(), "staging", "standby")
		g.Go(func() error { return e.stagingCandidate(gctx) })
	}
	for i := 0; i < e.cfg.DrainWorkers; i++ {
		id := fmt.Sprintf("%s/drain-%d", e.cfg.ProcessID, i)
		e.states.set(id, "drain", "idle")
		g.Go(func() error { return e.drainLoop(gctx, id, i%2 == 1) })
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
		e.log.Warn("engine listener failed; reconnecting", "err", err)
		sleepCtx(ctx, 200*time.Millisecond)
	}
	return nil
}

func (e *Engine) listenOnce(ctx context.Context) error {
	conn, err := e.workers.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	defer func() {
		// A LISTENing connection must not go back to the pool.
		conn.Hijack().Close(context.Background())
	}()
	for _, ch := range []string{"wake", "sealed", "drained", "seal"} {
		if _, err := conn.Exec(ctx, "LISTEN "+base.Ident(e.channel(ch))); err != nil {
			return err
		}
	}
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			return err
		}
		switch n.Channel {
		case e.channel("wake"):
			e.checks.Woken() // perhaps a self-check job
			poke(e.wakeStaging)
			poke(e.wakeDrain)
		case e.channel("sealed"):
			poke(e.wakeDrain)
		case e.channel("drained"):
			e.signalDrained()
			poke(e.wakePass) // retirement
			poke(e.wakeSeal) // a chained target's rows
			poke(e.wakeDrain)
		case e.channel("seal"):
			poke(e.wakeSeal)
		}
	}
}

// heartbeat keeps this process's _workers row fresh (liveness, §12.11).
func (e *Engine) heartbeat(ctx context.Context) error {
	id := e.cfg.ProcessID
	beat := func() {
		_, err := e.workers.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (worker_id, proxy_id, kind, last_seen, format)
			VALUES ($1, $2, 'drain', now(), $3) ON CONFLICT (worker_id) DO UPDATE SET last_seen = now(), format = excluded.format`,
			e.tbl("_workers")), id, e.cfg.ProcessID, catalog.FormatVersion)
		if err != nil && ctx.Err() == nil {
			e.log.Warn("heartbeat failed", "err", err)
		}
	}
	beat()
	t := time.NewTicker(e.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			e.workers.Exec(c, fmt.Sprintf("DELETE FROM %s WHERE worker_id = $1", e.tbl("_workers")), id)
			cancel()
			return nil
		case <-t.C:
			beat()
		}
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

// workerRole is the workers' role as Run read it from the instance marker
// ("" before that).
func (e *Engine) workerRole() string {
	if r := e.workerRoleV.Load(); r != nil {
		return *r
	}
	return ""
}

// logFailure logs a worker step's failure at its class's level (an error of
// ours at Error, so a Go-side bug is never only a retry at Debug).
func (e *Engine) logFailure(msg string, err error, attrs ...any) {
	e.log.Log(context.Background(), base.Level(err), msg, append(attrs, base.ErrAttrs(err)...)...)
}
