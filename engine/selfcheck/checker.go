// Package selfcheck runs self-check jobs (trellis.self_check;
// docs/engine.md "Self-check"): a job compares a target with its
// definition recomputed from the sources, page by page, in drain workers
// anywhere in the fleet. The job, its cursor, its claim and its
// divergences live in the catalog, so a worker's death loses at most the
// page in flight. It reads the engine's state through Host and writes only
// the self-check tables.
package selfcheck

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/sqlgen"
)

// defaultPageKeys is the keys per page when Config.PageKeys is zero.
const defaultPageKeys = 10000

// Host is what a self-check needs of the engine it runs in.
type Host interface {
	// Compiled returns a definition's generated SQL (the engine's plan
	// cache) from its compiled form raw at version.
	Compiled(id, version int64, raw []byte) (*sqlgen.Def, error)
	Instance() sqlgen.Instance
	// WatermarkToken and AwaitConverged are the engine's convergence wait.
	WatermarkToken(ctx context.Context) (string, error)
	AwaitConverged(ctx context.Context, token string, timeout time.Duration) error
	// DrainedSnapSQL selects the snapshot of the drained prefix of batches.
	DrainedSnapSQL() string
	// SignalDrained wakes this process's waiters; DrainedCh is closed by
	// the next signal.
	SignalDrained()
	DrainedCh() <-chan struct{}
	// Working records what drain worker id is doing (trellis.proxy_workers).
	Working(id, state, detail string)
	// PageDone reports a page to the metrics.
	PageDone(target string, took time.Duration, divergences int)
}

// Config is the part of the engine's configuration a self-check reads.
type Config struct {
	Schema       string        // catalog schema
	ProcessID    string        // this process in _workers
	PageKeys     int           // keys per page; 0: 10,000
	PollInterval time.Duration // an idle worker asks for a job again after this long
	WorkerTTL    time.Duration // a claimant's process silent this long is dead
}

// Checker runs this process's share of self-check jobs.
type Checker struct {
	cfg     Config
	pool    *pgxpool.Pool // API calls (AwaitSelfCheck)
	workers *pgxpool.Pool // the workers' pool
	host    Host
	// idle: drain worker id -> unix ns before which it does not ask for a
	// job again (none was open for it).
	idle sync.Map
}

// New returns a checker over the engine's pools.
func New(cfg Config, pool, workers *pgxpool.Pool, host Host) *Checker {
	return &Checker{cfg: cfg, pool: pool, workers: workers, host: host}
}

// Woken forgets which workers found no job: a wake notice may mean a new
// one (self_check sends one).
func (sc *Checker) Woken() { sc.idle.Clear() }

func (sc *Checker) tbl(name string) string { return base.Table(sc.cfg.Schema, name) }
