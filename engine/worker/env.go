package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/catalog"
	"github.com/trellis-proxy/trellis-proxy/engine/ddl"
	"github.com/trellis-proxy/trellis-proxy/engine/model"
	"github.com/trellis-proxy/trellis-proxy/engine/selfcheck"
	"github.com/trellis-proxy/trellis-proxy/engine/sqlgen"
)

// NewEnv returns the environment of a process's workers: cfg (defaults
// applied), the caller's pool and the workers' own.
func NewEnv(cfg Config, pool, workers *pgxpool.Pool) *Env {
	return &Env{
		Cfg: cfg, Pool: pool, Workers: workers, Log: cfg.Logger,
		WakeStaging: make(chan struct{}, 1), WakeDrain: make(chan struct{}, 1),
		WakePass: make(chan struct{}, 1), WakeSeal: make(chan struct{}, 1), WakeKeys: make(chan struct{}, 1),
		drained: make(chan struct{}),
	}
}

// SetWorkerRole records the workers' role as read from the instance marker.
func (e *Env) SetWorkerRole(role string) { e.workerRole.Store(&role) }

// Env is what every worker of a process shares: the configuration, the two
// pools, the wake bus, the worker states and the test plants. Each layer of
// the workers embeds the one below it, down to Env.
type Env struct {
	Cfg     Config
	Pool    *pgxpool.Pool // the caller's pool: API calls
	Workers *pgxpool.Pool // our pool: pinned session settings (§12.15)
	Log     *slog.Logger

	WakeStaging chan struct{} // a full staging pass
	WakePass    chan struct{} // a pass the fingerprint may shorten (a batch drained)
	WakeSeal    chan struct{} // seal now (a waiter, a drained batch)
	WakeKeys    chan struct{} // retire materialised keys (the staging worker's key retirer)
	WakeDrain   chan struct{}
	StagingHeld atomic.Bool // this process runs the staging worker
	drainedMu   sync.Mutex
	drained     chan struct{} // closed and replaced whenever a batch drains here or a notice arrives

	// workerRole is the instance's workers' role, read from the marker by
	// Run; atomic because tests build capture plans while Run starts.
	workerRole atomic.Pointer[string]
	States     WorkerStates       // this process's workers, for trellis.proxy_workers
	Checks     *selfcheck.Checker // this process's share of self-check jobs

	renewal stagingRenewal // ends of the staging session on purpose (denied.go)

	DDL   *ddl.Executor // Trellis statements (engine/ddl)
	Plant Plants        // test-only faults; zero in production
}

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
	// FanOutInlineKeys: a JOIN fan-out re-derives up to this many FROM keys
	// in the page that carried the joined change; more (or a lock not
	// granted at once) are staged for a later batch. Default PageSize;
	// negative: always staged (engine/drain/fanout.go).
	FanOutInlineKeys int

	// TestingTargetTriggers lets triggers on targets stand (the tamper
	// check ignores them), so tests can make a page or build step fail on
	// purpose with a raising trigger. Tests only: no flag or variable sets
	// it, and with it a superuser's trigger runs as the workers.
	TestingTargetTriggers bool

	Logger *slog.Logger
	// Metrics receives seal, page and build-task events; nil means none.
	Metrics Metrics
}

func (c *Config) Defaults() {
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
	if c.FanOutInlineKeys == 0 {
		c.FanOutInlineKeys = c.PageSize
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

// Plants are deliberate bugs the differential test arms to prove it can fail.
type Plants struct {
	DropEveryNthKey     int  // skip one key in n on pages
	ConvergedIsDrained  bool // answer convergence from batch states (H3)
	NoOriginInheritance bool // chained log rows get fresh origins (H3)
	KeepLog             bool // never retire (diagnostics)
	BulkKeyLost         bool // a materialised bucket loses one key in three, its first among them (engine/drain/bulk.go)
	FanOutSkipItem      int  // a JOIN target's changes (truncates too) of its n-th joined item fan out to nothing (engine/drain/fanout.go)
	FanOutNewOnly       bool // fan-out reads only the keys' current rows: a row that moved away is missed (engine/drain/fanout.go)
	// JoinReadEarly: a JOIN target's re-derive reads copies of its joined
	// tables taken outside the ledger lock, kept up to this long (a cache
	// of dimension rows; engine/derive/apply.go).
	JoinReadEarly time.Duration
	PageHook      func(stage string)
	PlanStepRows  int // keys one plan step walks; 0: planStepRows
	FirstSlice    int // keys of a build step's first slice; 0: firstSliceKeys
	// StagingLifetime: a staging session's lifetime; 0: StagingSessionLifetime.
	StagingLifetime time.Duration
	// Not a fault: fresh aggregate builds take the classic path (pages
	// write during them), as with an older process in the fleet.
	ClassicBuilds bool
	// Not a fault: 1-1 rebuild chunks re-derive on the locked path, key by
	// key, as before set-based rebuild chunks (tests of the locked path).
	LockedRebuilds bool
}

func (e *Env) Tbl(name string) string { return base.Table(e.Cfg.Schema, name) }

func (e *Env) Channel(what string) string { return base.Channel(e.Cfg.Schema, what) }

func Poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (e *Env) SignalDrained() {
	e.drainedMu.Lock()
	close(e.drained)
	e.drained = make(chan struct{})
	e.drainedMu.Unlock()
}

func (e *Env) DrainedCh() <-chan struct{} {
	e.drainedMu.Lock()
	defer e.drainedMu.Unlock()
	return e.drained
}

func SleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// WorkerRole is the workers' role as Run read it from the instance marker
// ("" before that).
func (e *Env) WorkerRole() string {
	if r := e.workerRole.Load(); r != nil {
		return *r
	}
	return ""
}

// LogFailure logs a worker step's failure at its class's level (an error of
// ours at Error, so a Go-side bug is never only a retry at Debug).
func (e *Env) LogFailure(msg string, err error, attrs ...any) {
	e.Log.Log(context.Background(), base.Level(err), msg, append(attrs, base.ErrAttrs(err)...)...)
}

// Inst names this instance for sqlgen: its catalog schema and, once
// resolved, the workers' role.
func (e *Env) Inst() sqlgen.Instance {
	return sqlgen.Instance{Schema: e.Cfg.Schema, Worker: e.WorkerRole()}
}

// FenceSchema holds this instance's fence relations (fence.go).
func (e *Env) FenceSchema() string { return catalog.FenceSchema(e.Cfg.Schema) }

// PokeSeal asks the staging worker to seal now: in process when it runs
// here, else by a notice (one per waiter, never per write).
func (e *Env) PokeSeal(ctx context.Context) {
	if e.StagingHeld.Load() {
		Poke(e.WakeSeal)
		return
	}
	if _, err := e.Pool.Exec(ctx, "SELECT pg_notify($1, '')", e.Channel("seal")); err != nil && ctx.Err() == nil {
		e.Log.Debug("seal notice failed", "err", err)
	}
}

type DefRow struct {
	ID      int64
	Status  string
	BuildID *int64
	C       *model.Compiled
	Reads   []readRow
}

type readRow struct {
	Table string
	Role  string
}

func (e *Env) LoadDefinitions(ctx context.Context, q base.Querier, where string) ([]*DefRow, error) {
	rows, err := q.Query(ctx, fmt.Sprintf(`SELECT d.id, d.status, d.build_id, d.compiled,
		  coalesce((SELECT jsonb_agg(jsonb_build_array(r.table_name, r.role)) FROM %s r WHERE r.definition_id = d.id), '[]')
		FROM %s d %s ORDER BY d.id`, e.Tbl("_definition_reads"), e.Tbl("_definitions"), where))
	if err != nil {
		return nil, err
	}
	var out []*DefRow
	for rows.Next() {
		d := &DefRow{C: &model.Compiled{}}
		var raw, reads []byte
		if err := rows.Scan(&d.ID, &d.Status, &d.BuildID, &raw, &reads); err != nil {
			rows.Close()
			return nil, err
		}
		if err := json.Unmarshal(raw, d.C); err != nil {
			rows.Close()
			return nil, err
		}
		var rr [][2]string
		if err := json.Unmarshal(reads, &rr); err != nil {
			rows.Close()
			return nil, err
		}
		for _, r := range rr {
			d.Reads = append(d.Reads, readRow{r[0], r[1]})
		}
		out = append(out, d)
	}
	return out, rows.Err()
}
