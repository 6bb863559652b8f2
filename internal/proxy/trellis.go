package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/trellis-proxy/trellis-proxy/engine"
	"github.com/trellis-proxy/trellis-proxy/internal/intercept"
	"github.com/trellis-proxy/trellis-proxy/virtualtables"
	"github.com/trellis-proxy/trellis-proxy/wire"
)

// trellisSide is what a proxy runs besides the relay: the workers' pool, the
// engine with its workers, and the interceptor that executes Trellis
// statements for clients.
type trellisSide struct {
	migrate     func(ctx context.Context) (string, error)
	pool        *pgxpool.Pool
	engine      *engine.Engine
	interceptor *intercept.Interceptor
	database    string
	schema      string
	poller      *catalogPoller
	relations   *relations
}

// newTrellisSide connects the workers' pool with the upstream URL's
// credentials (the workers' role, surface §2.3) and migrates the catalog
// unless told not to. With instReg (the registry wrapped with the instance
// label) it registers the engine's metrics there.
func newTrellisSide(ctx context.Context, cfg Config, upURL string, up wire.UpstreamConfig, reg *prometheus.Registry, instReg prometheus.Registerer, log *slog.Logger) (*trellisSide, error) {
	pc, err := pgxpool.ParseConfig(upURL)
	if err != nil {
		return nil, &FlagError{"upstream", redact(err.Error())}
	}
	pc.MaxConns = int32(cfg.PoolMaxSize)
	host, _ := os.Hostname()
	pc.ConnConfig.RuntimeParams["application_name"] = "trellis-proxy workers"
	// The engine's API calls run on this pool as the workers' role: the
	// same pinned name resolution as the worker pool (D20).
	pc.ConnConfig.RuntimeParams["search_path"] = "pg_catalog, pg_temp"
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connecting the workers' pool: %s", oneLine(err))
	}
	drain := cfg.DrainWorkers
	if drain == 0 {
		drain = -1 // engine.Config: 0 means the default, negative means none
	}
	processID := cfg.ProcessID
	if processID == "" {
		processID = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	var engReg prometheus.Registerer = reg
	if instReg != nil {
		engReg = instReg
	}
	e := engine.New(pool, engine.Config{
		Schema: cfg.Schema, TargetSchema: cfg.TargetSchema, Staging: engine.StagingMode(cfg.Staging),
		DrainWorkers: drain, ProcessID: processID, Logger: log.With("component", "engine"),
		SealInterval: cfg.SealInterval, PollInterval: cfg.PollInterval, Heartbeat: cfg.Heartbeat,
		WorkerTTL: cfg.WorkerTTL, TakeoverInterval: cfg.TakeoverInterval,
		Metrics: newEngineMetrics(engReg),
	})
	migrate := func(ctx context.Context) (string, error) {
		if err := e.Migrate(ctx); err != nil {
			return "", err
		}
		// The SQL surface (views and functions) follows every migration.
		if err := virtualtables.InstallOptions(ctx, pool, virtualtables.Options{Schema: cfg.Schema, WorkerTTL: cfg.WorkerTTL}); err != nil {
			return "", err
		}
		return fmt.Sprintf("catalog %s is up to date", cfg.Schema), nil
	}
	if cfg.Migrate {
		if _, err := migrate(ctx); err != nil {
			pool.Close()
			return nil, fmt.Errorf("migrating the catalog %q: %s", cfg.Schema, oneLine(err))
		}
		log.Info("catalog ready", "schema", cfg.Schema)
	}
	t := &trellisSide{migrate: migrate, pool: pool, engine: e, database: pc.ConnConfig.Database, schema: cfg.Schema}
	if instReg != nil {
		t.poller = newCatalogPoller(pool, cfg.Schema, processID, cfg.MetricsInterval, log)
		instReg.MustRegister(t.poller)
		instReg.MustRegister(poolCollector{pool})
	}
	cfg.ProcessID = processID
	t.relations = newRelations(cfg, e, t.database, up, "")
	t.interceptor = intercept.New(intercept.Config{
		Engine: e, Schema: cfg.Schema, Database: t.database, Logger: log, Migrate: migrate,
		MetricsText: func() string { return metricsText(reg) },
		Relations:   t.relations.rows, CallBudget: cfg.CallBudget, LockTimeout: cfg.LockTimeout,
	})
	return t, nil
}

// run runs the engine's workers until ctx ends.
func (t *trellisSide) run(ctx context.Context) error {
	if t.poller != nil {
		done := make(chan struct{})
		go func() {
			defer close(done)
			t.poller.run(ctx)
		}()
		defer func() { <-done }()
	}
	err := t.engine.Run(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// ready reports why the instance is not ready (surface §16), or nil: the
// catalog at this binary's version, and a staging and a drain worker alive
// somewhere in the fleet (the SQL functions of §7.3).
func (t *trellisSide) ready(ctx context.Context) error {
	S := pgx.Identifier{t.schema}.Sanitize()
	var version int
	var staging, drain bool
	err := t.pool.QueryRow(ctx, fmt.Sprintf(`SELECT %[1]s._catalog_version(), %[1]s.has_live_staging_worker(), %[1]s.has_live_drain_workers()`, S)).
		Scan(&version, &staging, &drain)
	switch {
	case err != nil:
		return fmt.Errorf("catalog unreadable: %s", oneLine(err))
	case version != engine.FormatVersion():
		return fmt.Errorf("catalog version %d, this proxy expects %d", version, engine.FormatVersion())
	case !staging:
		return errors.New("no live staging worker")
	case !drain:
		return errors.New("no live drain worker")
	}
	return nil
}

func (t *trellisSide) close() {
	t.engine.Close()
	t.pool.Close()
}

// metricsText renders the registry as GET /metrics does.
func metricsText(reg *prometheus.Registry) string {
	mfs, err := reg.Gather()
	if err != nil {
		return "# error gathering metrics: " + strings.ReplaceAll(err.Error(), "\n", " ")
	}
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return "# error encoding metrics: " + err.Error()
		}
	}
	return b.String()
}

var descPool = prometheus.NewDesc("trellis_proxy_engine_pool_connections", "The proxy's own connection pool (workers' role).", []string{"state"}, nil)

// poolCollector reads the pool's counters at scrape time (no I/O).
type poolCollector struct{ pool *pgxpool.Pool }

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descPool }
func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.pool.Stat()
	ch <- prometheus.MustNewConstMetric(descPool, prometheus.GaugeValue, float64(st.IdleConns()), "idle")
	ch <- prometheus.MustNewConstMetric(descPool, prometheus.GaugeValue, float64(st.AcquiredConns()), "in_use")
}
